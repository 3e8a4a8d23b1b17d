"""``dqgen bench --matmul``: y = x @ dequant(W) for decode (M = 1..16), dqgen's fused matmul side by side with what a
user could run instead, in one run on the same inputs (issue 13 items 6 and 7).

Per spec and shape K x N: random full-range checkpoint tensors (dqgen.run.inputs), the dense weight W that dqgen's
dequantizer makes of them (checked bit-equal to the CPU reference at the first shape of each spec), and per M an
activation x. Implementations: ``dqgen`` (``Kernel.pack_matmul`` once, then ``Kernel.matmul``), ``cublas dense``
(torch.matmul on W: what the weight costs unquantized), ``dequant + cublas`` (dqgen's dequantize into a buffer, then
torch.matmul), ``torch int4`` (``torch.ops.aten._weight_int4pack_mm``, bf16 specs with 4-bit codes, integer zeros and
group 128 only; its weight made by ``torch._convert_weight_to_int4pack`` from the same codes, its zero the same
zero point as tinygemm's additive form; left out when its output does not match the reference), ``humming``
(``humming-kernels``' HummingLayer, uint4 with zero points, group 128, quantizing the same dense W itself: int4 specs
with integer zeros and group 128 only; left out, in one line, where humming is not installed). ``gemlite`` is named
when importable (no adapter here yet) and reported 'not installed' otherwise.

Each row: ``rel_err`` = ||y - ref|| / ||ref|| against ref = float64(x) @ float64(W) on the same input, so a wrong
fast path shows; ``us`` = one call after an L2 flush, median (dqgen.run.timing.single_call_us); ``pct_floor`` =
100 * floor / us, floor = (packed weight + scales + zeros + global scale bytes) / copy bandwidth measured in the
same run (read + write, dqgen.tools.bench.copy_bandwidth). Written as docs/bench/matmul.json, a "matmul" section of
docs/performance.md (dqgen.tools.report) and docs/bench/matmul.png (matplotlib; ``dqgen bench --plot`` draws it
from the JSON on a machine that has matplotlib).
"""

from __future__ import annotations

import functools
import importlib.util
import io
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..check.matmul_reference import TOLERANCE
from ..core.spec import SourceKind, Spec
from ..layout.layout import Layout
from .options import parse_subset

DEFAULT_SPECS = ("awq_int4_fp16", "awq_int4_bf16")
DEFAULT_SHAPES = ((4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192))
DEFAULT_MS = (1, 2, 4, 8, 16)
#: Issue 14's M (the GEMM's range); ``--m`` takes both lists joined for the whole table.
GEMM_MS = (16, 32, 64, 128, 256, 512, 1024, 4096)
#: Implementation names, as rows and ``--impls`` give them.
IMPLS = ("dqgen", "dqgen gemm", "cublas dense", "dequant + cublas", "torch int4", "humming")
#: The GEMV's largest M; from it on, ``dqgen gemm`` (the tensor-core GEMM alone, whatever the dispatch picks) is
#: timed beside ``dqgen``.
GEMV_MAX_M = 16
#: Optional pip packages named in the output when present ("not installed" otherwise); they add no rows yet.
EXTRAS = ("gemlite",)
#: humming's (``pip install humming-kernels``) weight format as the issue measured it: AWQ's int4 g128 with zeros.
HUMMING_WEIGHT_CONFIG = {"dtype": "uint4", "group_size": 128, "has_zero_point": True}
#: Keys every JSON row carries (issue 13 item 7), in this order; later keys are extra.
ROW_KEYS = ("impl", "spec", "dtype", "M", "K", "N", "us", "pct_floor", "rel_err")
HEADER_KEYS = ("gpu", "date", "copy_gbps")
#: Timing rounds over a shape's calls (the second in reverse order); a row's ``us`` is the lowest round's median.
ROUNDS = 2
#: The four large shapes of the M = 1 floor target, and the small one of the latency target.
LARGE_SHAPES = ((4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192))
SMALL_SHAPE = (4096, 6144)


@dataclass
class MatmulRow:
    impl: str
    spec: str
    dtype: str
    M: int
    K: int
    N: int
    us: float
    pct_floor: float
    rel_err: float
    floor_us: float
    group: int
    us_rounds: list[float] = field(default_factory=list)  # each round's median; ``us`` is the lowest


# ----------------------------------------------------------------------------------------------- arithmetic


def weight_bytes(spec: Spec, K: int, N: int, G: int) -> int:
    """Bytes one matmul must read of the weight: packed words, scales (2 bytes, or 1 for block-scale codes),
    zeros (packed words, or 2-byte dense zeros) and the fp32 global scale, in the checkpoint's layout."""
    shapes = Layout.of(spec).shapes(K, N, G)
    n = math.prod(shapes["qweight"]) * 4
    n += math.prod(shapes["scales"]) * (1 if spec.scales.block else 2)
    if "zeros" in shapes:
        n += math.prod(shapes["zeros"]) * (4 if spec.zeros.packed else 2)
    if "global_scale" in shapes:
        n += 4
    return n


def floor_us(nbytes: int, copy_gbps: float) -> float:
    """Microseconds to read ``nbytes`` at the copy bandwidth (GB/s = 1e3 bytes per microsecond)."""
    return nbytes / (copy_gbps * 1e3)


def pct_floor(floor: float, us: float) -> float:
    return 100.0 * floor / us


# ----------------------------------------------------------------------------------------------- flags


def parse_ms(text: str) -> list[int]:
    """``--m``: comma-separated positive integers; ValueError (one line) otherwise."""
    try:
        ms = [int(p) for p in text.split(",")]
    except ValueError:
        ms = []
    if not ms or min(ms) < 1:
        raise ValueError(f"[--m] got {text!r}; expected comma-separated positive integers, e.g. 1,2,4,8,16")
    return ms


def parse_impls(text: str) -> list[str]:
    """``--impls`` with --matmul: a comma-separated subset of IMPLS."""
    return parse_subset("--impls", text, IMPLS, "--matmul")


# ----------------------------------------------------------------------------------------------- measuring


def _torch() -> Any:
    import torch

    return torch


def _unpack_torch(spec: Spec, words: Any, order: list[int], axis: str) -> Any:
    """Field values W[K, N] (int32) of single-word ``words`` on the GPU: element order[j] of each run in field j."""
    torch = _torch()
    bits = spec.source.bits
    P = 32 // bits
    shifts = torch.tensor([bits * order.index(e) for e in range(P)], dtype=torch.int32, device=words.device)
    if axis == "N":
        return ((words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).reshape(words.shape[0], -1)
    return ((words.unsqueeze(1) >> shifts.view(1, P, 1)) & ((1 << bits) - 1)).reshape(-1, words.shape[1])


def torch_int4_applies(spec: Spec, G: int, K: int) -> bool:
    """tinygemm's domain: bf16, 4-bit unsigned codes with packed integer zeros (or none), group 128, no act-order."""
    return (
        spec.target.value == "bf16"
        and spec.source.bits == 4
        and spec.source.kind is SourceKind.unsigned
        and spec.zeros.mode in ("integer", "gptq_v2", "gptq_v1")
        and not spec.act_order
        and K // G == 128
    )


def torch_int4(spec: Spec, q: Any, s: Any, z: Any, high_first: bool) -> Callable[[Any], Any]:
    """``_weight_int4pack_mm`` on the same codes: torch packs them itself from uint8 [N, K/2] (two codes per byte,
    ``high_first``: the even k in the high nibble), scales and tinygemm's additive zeros [G, N, 2] in bf16, where
    (q - z) * s = (q - 8) * s + (8 - z) * s."""
    torch = _torch()
    codes = _unpack_torch(spec, q, spec.order, spec.packing.axis)  # [K, N]
    zq = _unpack_torch(spec, z, spec.zero_order, "N") + spec.zeros.stored_offset  # [G, N]
    nk = codes.t().contiguous()
    hi, lo = (nk[:, 0::2], nk[:, 1::2]) if high_first else (nk[:, 1::2], nk[:, 0::2])
    packed = torch._convert_weight_to_int4pack((hi << 4 | lo).to(torch.uint8), 8)
    zero = ((8 - zq).float() * s.float()).to(torch.bfloat16)
    sz = torch.stack([s, zero], dim=2).contiguous()

    def fn(x: Any) -> Any:
        return torch.ops.aten._weight_int4pack_mm(x, packed, 128, sz)

    return fn


def humming_installed() -> bool:
    """Whether ``humming`` (pip package humming-kernels) is importable here (looked up, not imported)."""
    return importlib.util.find_spec("humming") is not None


def humming_applies(spec: Spec, G: int, K: int) -> bool:
    """The format HUMMING_WEIGHT_CONFIG times: 4-bit unsigned codes with integer zeros, group 128, no act-order."""
    return (
        spec.source.bits == 4
        and spec.source.kind is SourceKind.unsigned
        and spec.zeros.mode in ("integer", "gptq_v2", "gptq_v1")
        and not spec.act_order
        and K // G == 128
    )


def humming_layer(W_nk: Any) -> Callable[[Any], Any]:
    """humming's W4A16 layer on the dense weight ``W_nk`` [N, K] (fp16 or bf16, on the GPU), which it quantizes
    itself (round-to-nearest, uint4, group 128, zero points): for W made of a spec's codes, every group of 128 on
    a 16-level grid, its codes are the same weight up to the rounding of its own scales."""
    from humming.layer import HummingLayer

    torch = _torch()
    N, K = (int(d) for d in W_nk.shape)
    layer = HummingLayer(shape_n=N, shape_k=K, weight_config=dict(HUMMING_WEIGHT_CONFIG), torch_dtype=W_nk.dtype).cuda()
    layer.load_from_unquantized(W_nk.contiguous())
    layer.transform()
    torch.cuda.synchronize()
    return layer


def _rel_err(y: Any, ref: Any) -> float:
    torch = _torch()
    d = y.double() - ref
    if not torch.isfinite(y).all():
        return math.inf
    return float(torch.linalg.vector_norm(d) / torch.linalg.vector_norm(ref))


def _finite_weights(spec: Spec, q: Any, W: Any) -> Any:
    """``q`` with the codes of W's non-finite weights set to +0 (check.matmul_reference.zero_codes_where)."""
    from ..check.matmul_reference import zero_codes_where

    torch = _torch()
    bad = (~torch.isfinite(W)).cpu().numpy()
    return torch.from_numpy(zero_codes_where(spec, q.cpu().numpy(), bad)).to(q.device)


def _check_dense_against_reference(spec: Spec, q: Any, s: Any, z: Any, gi: Any, gsc: Any, W: Any) -> None:
    """dqgen's dequantize output, the W every baseline multiplies by, equals the CPU reference bit for bit."""
    import numpy as np

    from ..check.reference import dequantize_reference

    torch = _torch()

    def host(t: Any) -> Any:
        if t is None:
            return None
        t = t.cpu()
        if t.dtype == torch.bfloat16:  # numpy has no torch bfloat16: through its bits
            import ml_dtypes

            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()

    want = dequantize_reference(spec, host(q), host(s), host(z), host(gi), host(gsc))
    got = W.view(torch.int16).cpu().numpy()
    if not np.array_equal(got, want.view(np.int16)):
        raise RuntimeError(f"{spec.name}: dqgen's dequantize differs from the CPU reference; no matmul rows")


def bench_matmul(
    specs: list[Spec],
    shapes: list[tuple[int, int]],
    ms: list[int],
    copy_gbps: float,
    impls: list[str] | None = None,
    log: Callable[[str], None] = print,
) -> list[MatmulRow]:
    """Every implementation at every (spec, shape, M), on the same inputs (see the module docstring)."""
    from ..core.formats import torch_dtype
    from ..run.inputs import make_g_idx, make_global_scale, make_inputs
    from ..run.runtime import Kernel
    from ..run.timing import single_call_us

    torch = _torch()
    wanted = list(impls or IMPLS)
    if "humming" in wanted and not humming_installed():
        log("humming: not installed (pip install humming-kernels): no humming rows")
        wanted.remove("humming")
    for extra in EXTRAS:
        present = importlib.util.find_spec(extra) is not None
        log(
            f"{extra}: "
            + ("installed, but this bench has no adapter for it yet: no row" if present else "not installed")
        )
    rows: list[MatmulRow] = []
    for spec in specs:
        kernel: Any = Kernel(spec)  # Any: pack_matmul / matmul are issue 13's, absent from older trees
        matmul = getattr(kernel, "matmul", None)
        label = str(getattr(matmul, "bench_label", "dqgen"))
        if matmul is None and "dqgen" in wanted:
            log(f"{spec.name}: this dqgen has no Kernel.matmul: no dqgen rows")
        tdt = torch_dtype(spec.target_type, torch)
        for index, (K, N) in enumerate(shapes):
            q, s, z = make_inputs(spec, K, N, 0)
            gi, gsc = make_g_idx(spec, K, 0), make_global_scale(spec, 0)
            G = int(s.shape[0])
            W = kernel(q, s, z, g_idx=gi, global_scale=gsc)
            if not bool(torch.isfinite(W).all()):  # e4m3 / e5m2 NaN and Inf codes: a NaN weight poisons its column
                q = _finite_weights(spec, q, W)
                W = kernel(q, s, z, g_idx=gi, global_scale=gsc)
            if index == 0:
                _check_dense_against_reference(spec, q, s, z, gi, gsc, W)
            W64 = W.double()
            floor = floor_us(weight_bytes(spec, K, N, G), copy_gbps)
            buf = torch.empty_like(W)
            fns: dict[str, Callable[[Any], Any]] = {}
            packed = None
            if matmul is not None and ("dqgen" in wanted or "dqgen gemm" in wanted):
                packed = kernel.pack_matmul(q, s, z, g_idx=gi, global_scale=gsc)
            if packed is not None and "dqgen" in wanted:
                fns[label] = _fused(kernel, packed)
            gemm_fn = _gemm_alone(kernel, packed) if packed is not None and "dqgen gemm" in wanted else None
            if gemm_fn is not None:
                fns["dqgen gemm"] = gemm_fn
            if "cublas dense" in wanted:
                fns["cublas dense"] = _dense(W)
            if "dequant + cublas" in wanted:
                fns["dequant + cublas"] = _dequant_then_dense(kernel, q, s, z, gi, gsc, buf)
            torch_int4_fn = None
            x_check = torch.randn((16, K), dtype=tdt, device="cuda", generator=_gen(torch, 99))
            if "torch int4" in wanted and torch_int4_applies(spec, G, K):
                ref_check = x_check.double() @ W64
                errs = []
                for high_first in (True, False):
                    fn = torch_int4(spec, q, s, z, high_first)
                    errs.append(_rel_err(fn(x_check), ref_check))
                    if errs[-1] <= TOLERANCE["bf16"]:
                        torch_int4_fn = fn
                        break
                if torch_int4_fn is None:
                    log(f"{spec.name} {K}x{N} torch int4: output differs from the reference (rel_err {errs}): no row")
                else:
                    fns["torch int4"] = torch_int4_fn
            if "humming" in wanted and humming_applies(spec, G, K):
                try:
                    fns["humming"] = humming_layer(W.t())
                except Exception as e:  # a JIT compile or a format humming refuses: its rows only are lost
                    log(f"{spec.name} {K}x{N} humming: failed ({type(e).__name__}: {str(e)[:200]}): no row")
            calls: list[tuple[int, str, Callable[[], Any], float]] = []  # (M, impl, the call, rel_err)
            for M in ms:
                x = torch.randn((M, K), dtype=tdt, device="cuda", generator=_gen(torch, M))
                ref = x.double() @ W64
                for name, fn in fns.items():
                    if name == "dqgen gemm" and M < GEMV_MAX_M:
                        continue
                    try:
                        err = _rel_err(fn(x), ref)
                    except Exception as e:  # humming JIT-compiles per M: a failure there loses that row only
                        if name != "humming":
                            raise
                        log(f"{spec.name} {K}x{N} M={M} humming: failed ({type(e).__name__}: {str(e)[:200]}): no row")
                        continue
                    calls.append((M, name, functools.partial(fn, x), err))
            # ROUNDS rounds over every call of this shape, every other one in reverse order; a call's figure is the
            # lowest of its rounds' medians: a transient slowdown of the machine (seen on the H100 at ~1 point in
            # 25, torch's kernels included, 2-3x for one ~100 ms median) then needs to hit every round to show
            times = [[single_call_us(c[2]) for c in (calls if r % 2 == 0 else calls[::-1])] for r in range(ROUNDS)]
            for i, (M, name, _, err) in enumerate(calls):
                rounds = [t[i] if r % 2 == 0 else t[len(calls) - 1 - i] for r, t in enumerate(times)]
                us = min(rounds)
                row = MatmulRow(
                    name, spec.name, spec.target.value, M, K, N, us, pct_floor(floor, us), err, floor, G, rounds
                )
                rows.append(row)
                log(
                    f"{spec.name} {K}x{N} M={M} {name}: {us:.1f} us ({row.pct_floor:.0f}% of the "
                    f"{floor:.1f} us floor; rounds {', '.join(f'{t:.1f}' for t in rounds)}), rel_err {err:.2e}"
                )
            del calls
            del W, W64, buf, fns, q, s, z, packed, gemm_fn
            torch.cuda.empty_cache()
    return rows


def _fused(kernel: Any, packed: Any) -> Callable[[Any], Any]:
    return lambda x: kernel.matmul(x, packed)


def _gemm_alone(kernel: Any, packed: Any) -> Callable[[Any], Any] | None:
    """The tensor-core GEMM on the layout pack_matmul put beside ``packed`` (None for specs it does not take)."""
    from ..run import dispatch, gemm

    gw = dispatch.beside(packed)
    return None if gw is None else (lambda x: gemm.run_gemm(kernel.spec, x, gw))


def _dense(W: Any) -> Callable[[Any], Any]:
    torch = _torch()
    return lambda x: torch.matmul(x, W)


def _dequant_then_dense(kernel: Any, q: Any, s: Any, z: Any, gi: Any, gsc: Any, buf: Any) -> Callable[[Any], Any]:
    torch = _torch()
    return lambda x: torch.matmul(x, kernel(q, s, z, g_idx=gi, global_scale=gsc, out=buf))


def _gen(torch: Any, seed: int) -> Any:
    return torch.Generator(device="cuda").manual_seed(seed)


# ----------------------------------------------------------------------------------------------- the record


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def matmul_document(gpu: str, copy_gbps: float, rows: list[MatmulRow], method: str, when: str = "") -> dict:
    """The JSON record: header (gpu, date, copy_gbps, method) and the rows, the issue's keys first."""
    out = []
    for r in rows:
        d = asdict(r)
        out.append({k: d[k] for k in ROW_KEYS} | {k: v for k, v in d.items() if k not in ROW_KEYS})
    return {"gpu": gpu, "date": when or _now(), "copy_gbps": copy_gbps, "method": method, "rows": out}


def load_document(path: Path) -> dict:
    """A matmul JSON record, checked: ValueError (one line naming the file) for anything else."""
    from .report import read_json_record

    doc = read_json_record(path, "matmul")
    if not isinstance(doc, dict) or any(k not in doc for k in (*HEADER_KEYS, "rows")):
        raise ValueError(f"{path}: expected a JSON object with {', '.join((*HEADER_KEYS, 'rows'))}")
    rows = doc["rows"]
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: 'rows' must be a non-empty list")
    for i, r in enumerate(rows):
        missing = [k for k in (*ROW_KEYS, "floor_us") if not isinstance(r, dict) or k not in r]
        if missing:
            raise ValueError(f"{path}: row {i} lacks {', '.join(missing)}")
    return doc


# ----------------------------------------------------------------------------------------------- markdown


def _by(rows: list[dict], impl: str, spec: str, K: int, N: int, M: int) -> dict | None:
    for r in rows:
        if (r["impl"], r["spec"], r["K"], r["N"], r["M"]) == (impl, spec, K, N, M):
            return r
    return None


def targets(doc: dict) -> list[str]:
    """The issue's speed targets, each stated met or missed with the figure (dqgen rows only); a target whose rows
    this run lacks says so."""
    rows = doc["rows"]
    lines: list[str] = []
    dq = [r for r in rows if r["impl"] == "dqgen"]
    if not dq:
        return ["No `dqgen` rows in this run: no target is evaluated."]
    specs = sorted({r["spec"] for r in dq})
    int4 = [s for s in specs if "int4" in s]
    for spec in int4:
        for K, N in LARGE_SHAPES:
            r = _by(rows, "dqgen", spec, K, N, 1)
            if r is None:
                lines.append(f"- M = 1, {spec} {K}x{N}: >= 80% of the floor: not measured in this run")
                continue
            ok = r["pct_floor"] >= 80.0
            lines.append(
                f"- M = 1, {spec} {K}x{N}: >= 80% of the floor: {'met' if ok else 'MISSED'} "
                f"({r['pct_floor']:.1f}%, {r['us']:.1f} us against {r['floor_us']:.1f} us)"
            )
        r = _by(rows, "dqgen", spec, *SMALL_SHAPE, 1)
        if r is None:
            lines.append(f"- M = 1, {spec} 4096x6144: <= 8 us: not measured in this run")
        else:
            lines.append(
                f"- M = 1, {spec} 4096x6144: <= 8 us: {'met' if r['us'] <= 8.0 else 'MISSED'} ({r['us']:.1f} us)"
            )
    for spec in specs:
        for K, N in sorted({(r["K"], r["N"]) for r in dq if r["spec"] == spec}):
            one = _by(rows, "dqgen", spec, K, N, 1)
            more = [r for r in dq if r["spec"] == spec and (r["K"], r["N"]) == (K, N) and 2 <= r["M"] <= 16]
            if one is None or not more:
                continue
            worst = max(more, key=lambda r: r["us"])
            ratio = worst["us"] / one["us"]
            lines.append(
                f"- M = 2..16, {spec} {K}x{N}: <= 1.15x the M = 1 time: {'met' if ratio <= 1.15 else 'MISSED'} "
                f"(worst M = {worst['M']}: {worst['us']:.1f} us = {ratio:.2f}x {one['us']:.1f} us)"
            )
    for spec in specs:
        if "int8" in spec:
            ones = [r for r in dq if r["spec"] == spec and r["M"] == 1]
            worst = min(ones, key=lambda r: r["pct_floor"])
            ok = worst["pct_floor"] >= 80.0
            lines.append(
                f"- int8 (W8A16) {spec}, M = 1: >= 80% of its floor: {'met' if ok else 'MISSED'} "
                f"(lowest {worst['pct_floor']:.1f}% at {worst['K']}x{worst['N']})"
            )
    for spec in specs:
        if any(t in spec for t in ("fp8", "fp4", "nf4")):
            base = next((s for s in int4 if s.endswith(spec.rsplit("_", 1)[-1])), int4[0] if int4 else None)
            pairs: list[tuple[dict, dict]] = []
            for r in dq:
                other = (
                    _by(rows, "dqgen", base, r["K"], r["N"], 1) if base and r["spec"] == spec and r["M"] == 1 else None
                )
                if other is not None:
                    pairs.append((r, other))
            if not pairs:
                lines.append(f"- {spec}, M = 1: within 10% of int4's fraction of floor: no int4 rows to compare")
                continue
            a, b = min(pairs, key=lambda p: p[0]["pct_floor"] / p[1]["pct_floor"])
            ok = a["pct_floor"] >= 0.9 * b["pct_floor"]
            lines.append(
                f"- {spec}, M = 1: within 10% of int4's fraction of floor: {'met' if ok else 'MISSED'} "
                f"(worst {a['K']}x{a['N']}: {a['pct_floor']:.1f}% vs {base} {b['pct_floor']:.1f}%)"
            )
    pairs16 = [
        (b, f)
        for b in dq
        if b["dtype"] == "bf16"
        for f in dq
        if f["dtype"] == "fp16"
        and (f["K"], f["N"], f["M"]) == (b["K"], b["N"], b["M"])
        and f["spec"].removesuffix("_fp16") == b["spec"].removesuffix("_bf16")
    ]
    if pairs16:
        b, f = max(pairs16, key=lambda p: p[0]["us"] / p[1]["us"])
        lines.append(
            f"- bf16 at the speed of fp16 (item 1), worst case: {b['spec']} {b['K']}x{b['N']} M = {b['M']}: "
            f"{b['us']:.1f} us vs {f['spec']} {f['us']:.1f} us ({b['us'] / f['us']:.2f}x)"
        )
    return lines


#: Issue 14's published comparison point: humming at M = 64, 8192 x 28672, fp16, on the same H100 model (µs).
HUMMING_M64_8192X28672_US = 87.6
#: Issue 14's regimes: up to SMALL_M beat cuBLAS dense; LARGE_M..MAX_M stay within DENSE_SLACK of it.
GEMM_SMALL_M = 128
GEMM_LARGE_M = 256
GEMM_MAX_M = 1024
DENSE_SLACK = 1.1
#: Issue 14: the dispatcher's choice within this factor of the best path timed at the same M.
DISPATCH_SLACK = 1.03


def _ratio(rows: list[dict], r: dict, impl: str) -> float | None:
    """r's time over ``impl``'s on the same spec, shape and M (None where ``impl`` was not timed)."""
    other = _by(rows, impl, r["spec"], r["K"], r["N"], r["M"])
    return None if other is None else r["us"] / other["us"]


def gemm_targets(doc: dict) -> list[str]:
    """Issue 14's targets, per spec and shape, each met or missed with its worst figure (a target whose rows this
    run lacks is left out). The GEMM's own targets judge the ``dqgen gemm`` rows (the tensor-core GEMM alone, M >=
    16), so that a dispatch that picked dequantize + cuBLAS is not compared with itself; the dispatcher's target
    judges the ``dqgen`` rows at the largest M past MAX_M."""
    rows = doc["rows"]
    lines: list[str] = []
    gemm = [r for r in rows if r["impl"] == "dqgen gemm"]
    dq = [r for r in rows if r["impl"] == "dqgen" and r["M"] > GEMM_MAX_M]
    for spec in sorted({r["spec"] for r in gemm + dq}):
        for K, N in sorted({(r["K"], r["N"]) for r in gemm + dq if r["spec"] == spec}):
            where = f"{spec} {K}x{N}"
            here = sorted((r for r in gemm if r["spec"] == spec and (r["K"], r["N"]) == (K, N)), key=lambda r: r["M"])
            small = [
                (r, q) for r in here if r["M"] <= GEMM_SMALL_M if (q := _ratio(rows, r, "cublas dense")) is not None
            ]
            if small:
                r, q = max(small, key=lambda p: p[1])
                lines.append(
                    f"- M = {small[0][0]['M']}..{small[-1][0]['M']}, {where}: the GEMM faster than cuBLAS dense: "
                    f"{'met' if q < 1.0 else 'MISSED'} (worst M = {r['M']}: {r['us']:.1f} us = {q:.2f}x cuBLAS)"
                )
            big = [
                (r, q) for r in here if GEMM_LARGE_M <= r["M"] <= GEMM_MAX_M if (q := _ratio(rows, r, "cublas dense"))
            ]
            if big:
                bad = [(r, q) for r, q in big if q > (1.0 if r["M"] == GEMM_LARGE_M else DENSE_SLACK)]
                r, q = max(bad or big, key=lambda p: p[1])
                lines.append(
                    f"- M = {GEMM_LARGE_M}..{GEMM_MAX_M}, {where}: the GEMM <= cuBLAS dense at M = {GEMM_LARGE_M}, "
                    f"<= {DENSE_SLACK}x it beyond: {'MISSED' if bad else 'met'} (worst M = {r['M']}: {q:.2f}x cuBLAS)"
                )
            deq = [
                (r, q)
                for r in here
                if GEMM_LARGE_M <= r["M"] <= GEMM_MAX_M
                if (q := _ratio(rows, r, "dequant + cublas")) is not None
            ]
            if deq:
                r, q = max(deq, key=lambda p: p[1])
                lines.append(
                    f"- M = {GEMM_LARGE_M}..{GEMM_MAX_M}, {where}: the GEMM faster than dequantize + cuBLAS: "
                    f"{'met' if q < 1.0 else 'MISSED'} (worst M = {r['M']}: {q:.2f}x)"
                )
            tops = [r for r in dq if r["spec"] == spec and (r["K"], r["N"]) == (K, N)]
            if tops:
                top = max(tops, key=lambda r: r["M"])
                paths = [
                    o["us"] for i in ("dqgen gemm", "dequant + cublas") if (o := _by(rows, i, spec, K, N, top["M"]))
                ]
                if paths:
                    best = min([top["us"], *paths])
                    lines.append(
                        f"- M = {top['M']}, {where}: the dispatcher within 3% of the best path: "
                        f"{'met' if top['us'] <= DISPATCH_SLACK * best else 'MISSED'} "
                        f"({top['us']:.1f} us, best {best:.1f} us)"
                    )
            m64 = _by(rows, "dqgen gemm", spec, K, N, 64)
            if m64 is not None and (K, N) == (8192, 28672) and spec.endswith("fp16"):
                ok = m64["us"] < HUMMING_M64_8192X28672_US
                lines.append(
                    f"- M = 64, {where}: the GEMM ahead of humming's {HUMMING_M64_8192X28672_US} us (the issue's "
                    f"H100 figure): {'met' if ok else 'MISSED'} ({m64['us']:.1f} us)"
                )
    return lines


def markdown_section(doc: dict) -> str:
    """The "matmul" section of docs/performance.md, from the JSON record alone: one line per spec, shape and M,
    one column per implementation (µs and % of the weight floor), the worst rel_err of the line, then the targets."""
    rows = doc["rows"]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    lines = [
        "## Fused quantized matmul: GEMV (M <= 16) and tensor-core GEMM (M > 16)",
        "",
        f"Written by `dqgen bench --matmul` on {doc['date']}, GPU: {doc['gpu']}. Device-to-device copy: "
        f"{doc['copy_gbps']:.0f} GB/s (read + write), timed like the rows.",
        "",
        f"Method: {doc.get('method', 'one call after an L2 flush, median')}. y = x @ dequant(W), x [M, K] in the "
        "spec's dtype, random full-range codes. `floor` = (packed weight + scales + zeros bytes) / copy bandwidth: "
        "reading the weight once. Cells: µs (% of the floor). `rel_err` = the largest ||y - ref|| / ||ref|| of the "
        "line against float64 x @ W on the same input (W: dqgen's dequantized weight, bit-equal to the CPU "
        "reference). Implementations: `dqgen` (Kernel.matmul on a pack_matmul'ed weight, as QuantLinear calls it: "
        "the GEMV up to M = 16, then what the per-GPU dispatch rule picks), `dqgen gemm` (the tensor-core GEMM "
        "alone, M >= 16), `cublas dense` (torch.matmul on W, unquantized), `dequant + cublas` (dqgen's dequantize, "
        "then torch.matmul), `torch int4` (aten._weight_int4pack_mm, bf16 and group 128 only, its weight packed by "
        "torch from the same codes)"
        + (
            ", `humming` (humming-kernels' HummingLayer, uint4 g128 with zero points, quantizing the same W itself)."
            if "humming" in impls
            else "."
        ),
        "",
        "| spec | K x N | M | floor us | " + " | ".join(impls) + " | rel_err |",
        "|---|---|---|---|" + "---|" * len(impls) + "---|",
    ]
    keys = dict.fromkeys((r["spec"], r["K"], r["N"], r["M"]) for r in rows)
    for spec, K, N, M in sorted(keys, key=lambda k: (k[0], k[1], k[2], k[3])):
        here = {r["impl"]: r for r in rows if (r["spec"], r["K"], r["N"], r["M"]) == (spec, K, N, M)}
        cells = [f"{here[i]['us']:.1f} ({here[i]['pct_floor']:.0f}%)" if i in here else "" for i in impls]
        floor = next(iter(here.values()))["floor_us"]
        err = max(r["rel_err"] for r in here.values())
        lines.append(f"| {spec} | {K}x{N} | {M} | {floor:.1f} | " + " | ".join(cells) + f" | {err:.1e} |")
    lines += ["", "### Targets (issue 13: M <= 16)", "", *targets(doc)]
    big = gemm_targets(doc)
    if big:
        lines += ["", "### Targets (issue 14: M > 16)", "", *big]
    return "\n".join(lines)


def merge_documents(old: dict, new: dict) -> dict:
    """``new`` with the rows of ``old`` it did not measure (same impl, spec, M, K, N), for a table measured over
    several runs (``--merge``); the header is the new run's, and the old run's date is named in its method."""
    if old["gpu"] != new["gpu"]:
        raise ValueError(f"--merge: the record is from {old['gpu']!r}, this run from {new['gpu']!r}; not one table")
    seen = {(r["impl"], r["spec"], r["M"], r["K"], r["N"]) for r in new["rows"]}
    kept = [r for r in old["rows"] if (r["impl"], r["spec"], r["M"], r["K"], r["N"]) not in seen]
    if not kept:
        return new
    method = (
        f"{new.get('method', '')}; {len(kept)} rows from the run of {old['date']} (copy {old['copy_gbps']:.0f} GB/s)"
    )
    return new | {"method": method, "rows": kept + new["rows"]}


def write_markdown(path: Path, doc: dict) -> None:
    from .report import write_section

    write_section(path, "matmul", markdown_section(doc))


# ----------------------------------------------------------------------------------------------- the plot


def plot_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def plot(doc: dict, path: Path) -> None:
    """us against M per implementation (one line per implementation and dtype), the weight floor as a dashed
    line, one panel per shape; the PNG is written whole."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..core.files import write_whole_bytes

    rows = doc["rows"]
    shapes = list(dict.fromkeys((r["K"], r["N"]) for r in rows))
    cols = min(3, len(shapes))
    nrows = -(-len(shapes) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.0 * nrows), squeeze=False)
    for ax, (K, N) in zip(axes.flat, shapes, strict=False):
        here = [r for r in rows if (r["K"], r["N"]) == (K, N)]
        colors: dict[str, str] = {}
        for impl, dtype in dict.fromkeys((r["impl"], r["dtype"]) for r in here):
            line = sorted((r["M"], r["us"]) for r in here if (r["impl"], r["dtype"]) == (impl, dtype))
            color = colors.setdefault(impl, f"C{len(colors)}")  # one colour per implementation, a style per dtype
            style = "-" if dtype == "fp16" else "-."
            ax.plot(
                [m for m, _ in line], [u for _, u in line], style, color=color, marker="o", label=f"{impl} ({dtype})"
            )
        floors: dict[float, list[str]] = {}
        for spec, fl in dict.fromkeys((r["spec"], r["floor_us"]) for r in here):
            floors.setdefault(round(fl, 3), []).append(spec)
        for fl, names in floors.items():
            ax.axhline(fl, linestyle="--", color="black", linewidth=1.0, label=f"weight floor ({', '.join(names)})")
        ms = sorted({r["M"] for r in here})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.set_yscale("log")
        ax.set_title(f"K x N = {K} x {N}")
        ax.set_xlabel("M")
        ax.set_ylabel("us (one call after an L2 flush, median)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(shapes) :]:
        ax.axis("off")
    fig.suptitle(f"y = x @ dequant(W) on {doc['gpu']}, {doc['date']} (copy {doc['copy_gbps']:.0f} GB/s)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_whole_bytes(Path(path), buf.getvalue())
