"""GPU: the Hopper W8A8 GEMM's accumulators against float64 on the GPU over many shapes (the default plan and forced
ones), printing where they differ; and the time of each configuration / CTA count for a shape (tuning)."""

from __future__ import annotations

import sys
from typing import Any

import torch

from dqgen.kernels.w8a8_gemm90 import W8A8Gemm90Config, all_configs, choose_w8a8_gemm90
from dqgen.w8a8.gemm90 import Plan90, loaded90
from dqgen.w8a8.matmul_op import _counters


def acc_launch(kern: Any, x: Any, w: Any, plan: Any) -> tuple[Any, Any]:
    """(y, launch) of either W8A8 kernel's "acc" output for x [M, K] @ w [N, K].T with ``plan`` (unit scales, no
    bias): the accumulators as int32 (int8) or fp32 (e4m3)."""
    m, k = x.shape
    n = w.shape[0]
    dt = torch.int32 if x.dtype == torch.int8 else torch.float32
    y = torch.empty((m, n), dtype=dt, device="cuda")
    ws = torch.empty(max(1, kern.workspace_elems(plan)), dtype=dt, device="cuda")
    one_m, one_n = torch.ones(m, device="cuda"), torch.ones(n, device="cuda")
    cnt = _counters(y.device, plan[0])
    ptrs = (x.data_ptr(), k, w.data_ptr(), k, one_m.data_ptr(), one_n.data_ptr(), 0, y.data_ptr(), ws.data_ptr())
    args = (m, n, k, *ptrs, cnt.data_ptr(), plan)
    buffers = (ws, one_m, one_n)

    def launch() -> None:
        assert buffers  # the launch holds its workspace and scales: their addresses are in args
        kern(*args, stream=torch.cuda.current_stream().cuda_stream)

    return y, launch


def raw(
    x: Any, w: Any, cfg: W8A8Gemm90Config, ctas: int | None = None, whole: int | None = None, q: int | None = None
) -> Any:
    """(y, launch, plan) of the Hopper kernel ``cfg``: its default plan or ``ctas`` CTAs (``whole`` tiles run whole,
    the rest stream-K; by default every tile where there are no more CTAs than tiles)."""
    m, k = x.shape
    kern = loaded90(cfg, 0)
    plan = kern.plan(m, w.shape[0], k)
    if ctas is not None:
        plan = Plan90.of(plan.tiles, ctas, plan.k_tiles, whole, q)
    y, fn = acc_launch(kern, x, w, plan)
    return y, fn, plan


def check(m: int, n: int, k: int, cfg: W8A8Gemm90Config | None = None, ctas: int | None = None) -> bool:
    cfg = cfg or choose_w8a8_gemm90("s8", "acc", m, n, 132)
    x = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
    y, fn, plan = raw(x, w, cfg, ctas)
    fn()
    want = x.double() @ w.double().T
    bad = (y.double() != want).nonzero()
    if len(bad):
        rows, cols = bad[:, 0].unique(), bad[:, 1].unique()
        tiles = (cols // 128).unique().tolist()[:20]
        print(f"BAD {cfg.name} m={m} n={n} k={k} plan={plan}: {len(bad)} wrong, rows {rows[:8].tolist()}..", flush=True)
        print(f"    ({len(rows)} rows), cols {cols[:8].tolist()}.. ({len(cols)}), column tiles {tiles}", flush=True)
        return False
    return True


def sm80(x: Any, w: Any, elem: str) -> Any:
    """A raw launch of the sm_80 W8A8 GEMM the dispatch would pick (its "acc" output)."""
    from dqgen.kernels.w8a8_gemm import choose_w8a8_gemm
    from dqgen.w8a8.gemm import loaded
    from dqgen.w8a8.matmul_op import _device_limits

    m, k = x.shape
    n = w.shape[0]
    kern = loaded(choose_w8a8_gemm(elem, "acc", m, n, k, *_device_limits(0)), 0)  # type: ignore[arg-type]
    return acc_launch(kern, x, w, kern.plan(m, n, k))[1]


def tune(m: int, n: int, k: int) -> None:
    """sm_80's kernel, then each Hopper configuration near the choice with one tile a CTA and with stream-K."""
    import triton.testing as tt

    x = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
    bench = lambda fn: tt.do_bench(fn, warmup=5, rep=30, return_mode="median") * 1e3  # noqa: E731
    line = [f"m={m} n={n} k={k} sm80 {bench(sm80(x, w, 's8')):.1f}"]
    for cfg in all_configs("s8", "acc"):
        if cfg.swap != (m <= 128) or (cfg.swap and not (m // 2 < cfg.bn <= 4 * max(m, 16))):
            continue
        kern = loaded90(cfg, 0)
        tiles, auto = kern.plan(m, n, k)[:2]
        for ctas in sorted({auto, tiles, min(tiles, kern.resident)}):  # fewer CTAs than tiles: persistent
            _, fn, _plan = raw(x, w, cfg, ctas)
            tag = "auto" if ctas == auto else "tiles"
            line.append(f"{cfg.bm}x{cfg.bn}:{ctas}{'*' if ctas == auto else ''} {bench(fn):.1f}")
            del tag
    print(" | ".join(line), flush=True)


def decode() -> None:
    """Decode-sized calls (M = 1, 16, 64) on the two large shapes with CTA shapes beyond the choice's: more stages,
    two consumer warpgroups, three CTAs an SM."""
    import triton.testing as tt

    from dqgen.kernels.w8a8_gemm90 import W8A8Gemm90Config as C

    shapes = {  # bn -> (consumers, mw, stages, min_blocks) variants
        8: [(1, 2, 6, 2), (2, 2, 6, 1), (1, 1, 8, 3), (2, 1, 6, 2), (1, 2, 4, 2)],
        16: [(1, 2, 6, 2), (2, 2, 6, 1), (1, 1, 8, 3), (2, 1, 6, 2)],
        64: [(1, 2, 4, 2), (2, 1, 6, 2), (2, 2, 4, 1), (1, 1, 6, 3)],
    }
    for n, k in ((28672, 8192), (8192, 28672)):
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
        floor_us = n * k / 2962e3
        for m, bn in ((1, 8), (16, 16), (64, 64)):
            x = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            line = [f"n={n} k={k} m={m} floor {floor_us:.1f}"]
            for c, mw, st, b in shapes[bn]:
                try:
                    cfg = C("s8", "acc", True, bn, c, mw, st, b)
                except ValueError as e:
                    line.append(f"c{c}mw{mw}s{st}b{b}: {e}")
                    continue
                kern = loaded90(cfg, 0)
                tiles, auto = kern.plan(m, n, k)[:2]
                for ctas in sorted({auto, tiles}):
                    _, fn, _plan = raw(x, w, cfg, ctas)
                    us = tt.do_bench(fn, warmup=5, rep=30, return_mode="median") * 1e3
                    line.append(f"c{c}mw{mw}s{st}b{b}:{ctas} {us:.1f} ({100 * floor_us / us:.0f}%)")
            print(" | ".join(line), flush=True)


def fp8_error() -> None:
    """max |acc - acc64| / max |acc64| of the e4m3 accumulators, sm_80's kernel (f16 mma) and the wgmma one, per K."""
    from dqgen.w8a8.matmul_op import quantize_activations_fp8

    for m, n, k in ((1, 6144, 4096), (256, 6144, 4096), (1, 28672, 8192), (256, 28672, 8192), (64, 8192, 28672)):
        x8 = quantize_activations_fp8(torch.randn(m, k, device="cuda").half())[0]
        w8 = quantize_activations_fp8(torch.randn(n, k, device="cuda").half())[0]
        want = x8.double() @ w8.double().T
        scale = float(want.abs().max())
        cfg = choose_w8a8_gemm90("e4m3", "acc", m, n, 132)
        y, fn = acc_launch(loaded90(cfg, 0), x8, w8, loaded90(cfg, 0).plan(m, n, k))
        fn()
        fn80 = sm80(x8, w8, "e4m3")
        fn80()
        torch.cuda.synchronize()
        err90 = float((y.double() - want).abs().max()) / scale
        print(f"fp8 m={m} n={n} k={k}: wgmma {err90:.2e} of max|acc| ({cfg.name})", flush=True)


def tail() -> None:
    """A partial last wave: one tile a CTA, persistent CTAs, and whole waves then a stream-K tail (plan_for's hybrid),
    int8 and e4m3, on the shapes whose tiles leave a partial wave."""
    import triton.testing as tt

    from dqgen.w8a8.matmul_op import quantize_activations_fp8

    for elem in ("s8", "e4m3"):
        for n, k, m in ((6144, 4096, 1024), (28672, 4096, 256), (28672, 4096, 1024), (28672, 8192, 1024),
                        (28672, 8192, 256), (4096, 14336, 1024), (8192, 28672, 1024), (6144, 4096, 4096)):  # fmt: skip
            x = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
            if elem == "e4m3":
                x = quantize_activations_fp8(torch.randn(m, k, device="cuda").half())[0]
                w = quantize_activations_fp8(torch.randn(n, k, device="cuda").half())[0]
            cfg = choose_w8a8_gemm90(elem, "acc", m, n, 132)  # type: ignore[arg-type]
            kern = loaded90(cfg, 0)
            auto = kern.plan(m, n, k)
            line = [f"{elem} m={m} n={n} k={k} {cfg.bm}x{cfg.bn} tiles={auto.tiles} auto={tuple(auto)}"]
            P = kern.resident
            waves, tail = divmod(auto.tiles, P)
            tries = [("one-a-CTA", auto.tiles, None, None), ("persistent", P, None, None)]
            # the tail split in s lockstep pieces a tile, and one stream-K range over every resident CTA
            tries += [(f"split{s}", P, waves * P, tail * s) for s in (2, 3, 4) if tail and tail * s <= P]
            tries += [("tail-over-all", P, waves * P, P)] if tail and tail * auto.k_tiles >= P else []
            for tag, ctas, whole, q in tries:
                if tag != "one-a-CTA" and auto.tiles <= P:
                    continue
                y, fn, plan = raw(x, w, cfg, ctas, whole, q)
                tag += "*" if plan == auto else ""
                us = tt.do_bench(fn, warmup=5, rep=40, return_mode="median") * 1e3
                want = x.double() @ w.double().T if elem == "s8" else None
                ok = "" if want is None else (" exact" if torch.equal(y.double(), want) else " WRONG")
                line.append(f"{tag} {us:.1f}{ok}")
            print(" | ".join(line), flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "tail":
        tail()
    elif what == "decode":
        decode()
    elif what == "fp8":
        fp8_error()
    elif what == "check":
        ok = True
        for n, k in ((6144, 4096), (28672, 8192), (4096, 14336), (1000, 4112)):
            for m in (1, 7, 16, 33, 64, 100, 128, 200, 256, 300):
                ok &= check(m, n, k)
        for _ in range(3):
            ok &= check(64, 6144, 4096)
        print("ALL OK" if ok else "SOME BAD")
    else:
        kn = ((4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192))
        ms = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 16, 64, 256, 1024, 4096]
        for k_, n_ in kn:
            for m_ in ms:
                tune(m_, n_, k_)
