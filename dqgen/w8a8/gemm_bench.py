"""`python -m dqgen.w8a8.gemm_bench [OUT.json]`: the W8A8 GEMM beside torch's int8 / fp8 / fp16 GEMMs, K x N as in
the GEMV issue, M = 1 .. 4096; rows to docs/bench/w8a8.json (impl, M, K, N, us, pct_floor, exact).

Each time is one call after an L2 flush, median (dqgen.run.timing.single_call_us). ``floor``: reading the int8
weights once (N x K bytes) at the copy bandwidth measured in the same run; ``pct_floor`` = floor / time.
``exact``: dqgen's output equals the documented epilogue (in torch float32 ops) applied to the exact integer
product, bit for bit (int8); fp8 rows: max |y - y64| / max |y64| <= 2e-3 against float64; W4A8 rows (sm_90 only, at
the Ms issue 24 judges it at: M <= 16 and M >= 128): within one fp16 ulp of dqgen.check.w4a8_model's arithmetic
(written out in torch ops: exact int32 sums per 128-k tile, each rescaled in fp32, summed in K order), plus the fp32
bound of split-K's other summation order (w4a8_close); the kernel without split-K is the model bit for bit. The
W4A8 weight: the same fp16 weight quantized to int4 (AWQ-style zero points, group 128: w4a8_weight); it reads half
the floor's bytes, so its % of the floor can pass 100."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.files import write_json

KN: tuple[tuple[int, int], ...] = ((4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192))
MS: tuple[int, ...] = (1, 16, 64, 256, 1024, 4096)
#: W4A8 is timed at decode (M <= 16, against the W4A16 path) and prefill (M >= 128, against W4A16 and int8 W8A8).
W4A8_SMALL_M, W4A8_LARGE_M = 16, 128
#: The fused RMSNorm's epsilon (Llama-3's rms_norm_eps).
EPS = 1e-5
DEFAULT_OUT = Path("docs/bench/w8a8.json")


def _epilogue_torch(acc: Any, xs: Any, ws: Any, dtype: Any) -> Any:
    """The documented order in torch ops: scale product first, then acc * scale, one rounding to dtype."""
    return (acc.float() * (xs[:, None] * ws[None, :])).to(dtype)


def _exact_int(y: Any, x: Any, xs: Any, w: Any, ws: Any) -> bool:
    import torch

    # float64 products and sums of int8 codes are exact (|acc| < 2^53); chunks of rows bound the memory
    wd = w.double()
    for r0 in range(0, x.shape[0], 512):
        acc = (x[r0 : r0 + 512].double() @ wd.T).to(torch.int64)
        if not torch.equal(y[r0 : r0 + 512], _epilogue_torch(acc, xs[r0 : r0 + 512], ws, y.dtype)):
            return False
    return True


def w4a8_weight(w16: Any) -> tuple[tuple[Any, Any, Any], Any, Any]:
    """An fp16 weight [N, K] quantized to int4 by round-to-nearest per 128 rows of K with integer zero points
    (AWQ's rule: scale (max - min) / 15 over a range that holds 0, in fp16; z = rint(-min / s)), on its device:
    ((w_q, w_scale, w_zeros): the W4A8 layout, packed on the host by dqgen.layout.w4a8; int8 weights q - z [K, N];
    the scales float32 [K/128, N])."""
    import torch

    from ..layout.w4a8 import RESCALE_K, W4A8_TILE_N, pack_codes
    from .w4a8_op import layout_tensors

    n, k = w16.shape
    groups = w16.float().t().reshape(k // RESCALE_K, RESCALE_K, n)
    lo, hi = groups.amin(1).clamp_max(0.0), groups.amax(1).clamp_min(0.0)
    s = ((hi - lo) / 15).clamp_min(1e-8).half().float()
    z = torch.round(-lo / s).clamp(0, 15)
    codes = torch.round(groups / s[:, None, :] + z[:, None, :]).clamp(0, 15).reshape(k, n)
    w8 = (codes - z.repeat_interleave(RESCALE_K, 0)).to(torch.int8)

    def tiles(per_tile: Any) -> Any:  # [K/128, N] -> [N/64, K/128, 64]
        return per_tile.reshape(k // RESCALE_K, n // W4A8_TILE_N, W4A8_TILE_N).permute(1, 0, 2).contiguous()

    zero_words = tiles(z.to(torch.int64) * 0x11111111).cpu().numpy().astype("uint32")
    wq = pack_codes(codes.to(torch.uint8).cpu().numpy())
    w_q, w_scale, w_zeros = (t.to(w16.device) for t in layout_tensors(wq, tiles(s).cpu().numpy(), zero_words))
    return (w_q, w_scale, w_zeros), w8, s


def w4a8_model_torch(x: Any, xs: Any, w8: Any, ws_tiles: Any) -> tuple[Any, Any]:
    """dqgen.check.w4a8_model's fp32 result in torch ops on x's device: per 128-k tile the exact sum (float64 of
    int8 products, exact), rounded to fp32 and times the fp32 scale product, added in K order from 0 (each op one
    fp32 rounding, as torch's eager elementwise ops are); and the sum of the terms' magnitudes (fp32), which bounds
    what adding them in another order (split-K's) can change."""
    import torch

    out = torch.zeros((x.shape[0], w8.shape[1]), dtype=torch.float32, device=x.device)
    magnitude = torch.zeros_like(out)
    for t in range(ws_tiles.shape[0]):
        ks = slice(128 * t, 128 * (t + 1))
        acc = (x[:, ks].double() @ w8[ks].double()).float()  # |acc| <= 128 * 15 * 128 < 2^24: exact in fp32 too
        term = acc * (ws_tiles[t][None, :] * xs[:, None])
        out = out + term
        magnitude = magnitude + term.abs()
    return out, magnitude


def w4a8_close(y: Any, want: Any, magnitude: Any, k_tiles: int) -> bool:
    """Every element of y (fp16) within one fp16 ulp (of want's binade after rounding) of the model's fp32 ``want``,
    plus what summing the k_tiles terms in split-K's order instead of K order can change in fp32:
    2 * k_tiles * 2^-24 * sum |term| (each order's error is at most (k_tiles - 1) * 2^-24 * sum |term|). Near a
    cancellation to ~0 that is more than an fp16 ulp of the result (the model's own figure is exact)."""
    import torch

    h = want.half().float()
    ulp = torch.exp2(torch.floor(torch.log2(h.abs().clamp_min(2.0**-14))) - 10)
    return bool(((y.float() - want).abs() <= ulp + 2 * k_tiles * 2.0**-24 * magnitude).all().item())


def run(kn: Sequence[tuple[int, int]] = KN, ms: Sequence[int] = MS, out: Path | None = DEFAULT_OUT) -> dict[str, Any]:
    import torch

    from ..run.timing import method, single_call_us
    from .bench import copy_gbps
    from .matmul_op import matmul, quantize_activations_fp8, quantize_weight
    from .op import quantize_activations
    from .producer_op import rmsnorm_quantize, silu_mul_quantize

    copy = copy_gbps(single_call_us)
    fp8 = torch.cuda.get_device_capability() >= (8, 9)
    w4a8 = torch.cuda.get_device_capability() == (9, 0)  # the W4A8 GEMM is wgmma's
    print(f"copy bandwidth {copy:.0f} GB/s (read + write); fp8: {fp8}", flush=True)
    rows: list[dict[str, Any]] = []

    def record(impl: str, m: int, k: int, n: int, fn: Callable[[], Any] | None, exact: bool | None) -> None:
        if fn is None:
            return
        try:
            us = single_call_us(fn)
        except RuntimeError as e:  # a torch kernel refusing the shape (_int_mm: M <= 16; _scaled_mm alignment)
            print(f"{impl:28s} M={m:5d} K={k:6d} N={n:6d}  n/a: {str(e).splitlines()[0][:80]}", flush=True)
            return
        floor_us = n * k / (copy * 1e3)
        row = {"impl": impl, "M": m, "K": k, "N": n, "us": round(us, 2), "pct_floor": round(100 * floor_us / us, 1)}
        row["exact"] = exact
        rows.append(row)
        print(f"{impl:28s} M={m:5d} K={k:6d} N={n:6d} {us:10.2f} us {row['pct_floor']:6.1f}% of floor  exact {exact}")

    def bench_shape(k: int, n: int) -> None:
        g = torch.Generator(device="cuda").manual_seed(k + n)
        w16 = (torch.randn(n, k, device="cuda", generator=g) * 0.02).half()
        w, ws = quantize_weight(w16, "int8")
        wt = w.t()
        w8, ws8 = quantize_weight(w16, "fp8") if fp8 else (w, ws)
        w8t = w8.t()

        def quantize_then_gemm(x16: Any) -> Any:
            return matmul(*quantize_activations(x16), w, ws)

        def int_mm_scaled(x: Any, xs: Any) -> Any:
            return _epilogue_torch(torch._int_mm(x, wt), xs, ws, torch.float16)

        def scaled_mm(x8: Any, xs8: Any) -> Any:
            # bf16 out: torch's row-wise scaling has been bf16-only
            return torch._scaled_mm(x8, w8t, scale_a=xs8[:, None], scale_b=ws8[None, :], out_dtype=torch.bfloat16)

        def dense(x16: Any) -> Any:
            return x16 @ w16.T

        gamma = (1 + 0.1 * torch.randn(k, device="cuda", generator=g)).half()

        def rms_norm(x16: Any) -> Any:
            return torch.nn.functional.rms_norm(x16, (k,), gamma, EPS)

        def norm_then_gemm(x16: Any) -> Any:
            return matmul(*rmsnorm_quantize(x16, gamma, EPS), w, ws)

        def silu_mul(gate_up: Any) -> Any:
            return torch.nn.functional.silu(gate_up[:, :k]) * gate_up[:, k:]

        def silu_then_gemm(gate_up: Any) -> Any:
            return matmul(*silu_mul_quantize(gate_up), w, ws)

        w4 = w8_of_w4 = ws_tiles = None
        if w4a8:
            from .w4a8_op import w4a8_matmul

            w4, w8_of_w4, ws_tiles = w4a8_weight(w16)

        for m in ms:
            x16 = torch.randn(m, k, device="cuda", generator=g).half()
            x, xs = quantize_activations(x16)
            y = matmul(x, xs, w, ws)
            record("dqgen int8", m, k, n, functools.partial(matmul, x, xs, w, ws), _exact_int(y, x, xs, w, ws))
            record("dqgen quantize + int8", m, k, n, functools.partial(quantize_then_gemm, x16), None)
            # the quantizer fused into the op that makes x (issue 24): the RMSNorm before q / k / v / gate / up, the
            # SiLU-and-mul before down; beside them the fp16 producer a model runs without W8A8
            record("torch rms_norm (fp16)", m, k, n, functools.partial(rms_norm, x16), None)
            record("dqgen rmsnorm_quantize", m, k, n, functools.partial(rmsnorm_quantize, x16, gamma, EPS), None)
            record("dqgen rmsnorm_quantize + int8", m, k, n, functools.partial(norm_then_gemm, x16), None)
            gate_up = torch.randn(m, 2 * k, device="cuda", generator=g).half()
            record("torch silu * mul (fp16)", m, k, n, functools.partial(silu_mul, gate_up), None)
            record("dqgen silu_mul_quantize", m, k, n, functools.partial(silu_mul_quantize, gate_up), None)
            record("dqgen silu_mul_quantize + int8", m, k, n, functools.partial(silu_then_gemm, gate_up), None)
            record("torch._int_mm", m, k, n, functools.partial(torch._int_mm, x, wt), None)
            record("torch._int_mm + scaling", m, k, n, functools.partial(int_mm_scaled, x, xs), None)
            if fp8:
                x8, xs8 = quantize_activations_fp8(x16)
                y8 = matmul(x8, xs8, w8, ws8).double()
                y64 = (x8.double() @ w8.double().T) * xs8.double()[:, None] * ws8.double()[None, :]
                ok = bool(((y8 - y64).abs().max() <= 2e-3 * y64.abs().max()).item())
                record("dqgen fp8", m, k, n, functools.partial(matmul, x8, xs8, w8, ws8), ok)
                record("torch._scaled_mm fp8 rowwise", m, k, n, functools.partial(scaled_mm, x8, xs8), None)
            record("cuBLAS fp16 (dense W)", m, k, n, functools.partial(dense, x16), None)
            if w4 is not None and (m <= W4A8_SMALL_M or m >= W4A8_LARGE_M):
                operands = (x, xs, *w4)
                ok = w4a8_close(w4a8_matmul(*operands), *w4a8_model_torch(x, xs, w8_of_w4, ws_tiles), k // 128)
                record("dqgen w4a8", m, k, n, functools.partial(w4a8_matmul, *operands), ok)

    for k, n in kn:
        bench_shape(k, n)
        torch.cuda.empty_cache()
    result = {
        "device": torch.cuda.get_device_name(),
        "method": method(),
        "copy_GBps": round(copy, 1),
        "floor": "int8 weights (N x K bytes) read once at the copy bandwidth",
        "exact": "int8: bit-equal to the documented epilogue on the exact product; fp8: within 2e-3 of float64; "
        "w4a8: within one fp16 ulp of its model (exact int32 per 128-k tile, fp32 rescale in K order) plus split-K's "
        "fp32 reordering bound",
        "rows": rows,
    }
    if out is not None:
        write_json(out, result)
    return result


if __name__ == "__main__":
    run(out=Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
