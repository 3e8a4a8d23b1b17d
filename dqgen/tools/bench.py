"""``dqgen bench``: the dequantize kernel against the device's copy bandwidth and against the other
ways a user could do the same job, on the same inputs, each checked for equal output first.

Method (dqgen.run.timing): the primary figure is one call after an L2 flush, CUDA events around it, the
median of many (triton.testing.do_bench); the back-to-back CUDA-graph figure is a second column. Copy
bandwidth is measured in the same run the same way. Bytes moved = packed weights + output + scales +
zeros, each counted once. Every run also writes its rows as JSON (docs/bench/dequant.json).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..core.formats import torch_dtype
from ..core.spec import SourceKind, Spec
from ..layout.layout import Layout
from ..run.inputs import make_g_idx, make_global_scale, make_inputs
from ..run.runtime import Kernel
from ..run.timing import graph_us, method, single_call_us
from ..run.tune import default_variant
from .baselines import classic, field_shifts

DEFAULT_SHAPES = [(4096, 4096, 128), (4096, 11008, 128), (8192, 28672, 128), (18944, 37888, 128), (3584, 37888, -1)]


@dataclass
class Row:
    spec: str
    K: int
    N: int
    group: int
    impl: str
    us: float
    gbps: float
    pct_copy: float
    equal: bool | None  # None: not a dequantizer (the traffic-matched copy)
    graph_us: float | None = None  # back-to-back CUDA-graph replay, per call (second column)
    variant: str = ""  # dqgen rows: the launched entry point


def _torch():
    import torch

    return torch


def bytes_moved(spec: Spec, q: Any, s: Any, z: Any, K: int, N: int) -> int:
    n = q.numel() * 4 + s.numel() * s.element_size() + K * N * 2
    return n + (z.numel() * 4 if z is not None else 0)


# ----------------------------------------------------------------------------- other implementations


def _cubin(source: str, name: str) -> bytes:
    from ..emit.nvrtc import compile_source
    from ..run import device as dev

    cubin = compile_source(source, arch=dev.device_arch(0), want="cubin", name=name).cubin
    assert cubin is not None  # want="cubin" always gives one
    return cubin


def torch_eager(spec: Spec) -> Callable:
    """The formula in torch ops, as a user without a kernel writes it."""
    torch = _torch()
    b, P = spec.source.bits, spec.per_word
    mask = (1 << b) - 1
    shifts = torch.tensor(field_shifts(spec), dtype=torch.int32, device="cuda")
    tdt = torch_dtype(spec.target_type, torch)

    def unpack_n(words: Any) -> Any:  # [R, W] -> [R, W*P], element e of each word from its field
        return ((words.unsqueeze(-1) >> shifts) & mask).reshape(words.shape[0], -1)

    def fn(q: Any, s: Any, z: Any) -> Any:
        if spec.packing.axis == "N":
            codes = unpack_n(q)
        else:
            codes = ((q.unsqueeze(1) >> shifts.view(1, P, 1)) & mask).reshape(-1, q.shape[1])
        if spec.source.kind is SourceKind.signed:
            codes = torch.where(codes >= (1 << (b - 1)), codes - (1 << b), codes)
        elif spec.source.kind is SourceKind.biased:
            codes = codes - spec.source.offset
        K = codes.shape[0]
        reps = K // s.shape[0]
        if z is not None:
            codes = codes - unpack_n(z).repeat_interleave(reps, dim=0)
        # (q - z) * s is exact in float32 (<= 9-bit integer times an 11-bit significand): one rounding.
        return (codes.to(torch.float32) * s.to(torch.float32).repeat_interleave(reps, dim=0)).to(tdt)

    return fn


def naive_cuda(spec: Spec) -> Callable:
    """A plain CUDA kernel: shifts, integer -> float conversion (static_cast), fp32 multiply, cvt."""
    from ..emit.render import naive_source
    from ..run import device as dev

    src = naive_source(spec)
    kern = dev.LoadedKernel(_cubin(src, f"{spec.name}_naive.cu"), f"naive_{spec.name}", 0)
    torch = _torch()

    def fn(q: Any, s: Any, z: Any) -> Any:
        words = q.numel()
        K, N = Layout.of(spec).kn_of(tuple(q.shape))
        out = torch.empty((K, N), dtype=s.dtype, device="cuda")
        blocks = math.ceil(words / 256)
        kern(
            (blocks,),
            (256,),
            [
                np.uint64(q.data_ptr()),
                np.uint64(s.data_ptr()),
                np.uint64(0 if z is None else z.data_ptr()),
                np.uint64(out.data_ptr()),
                np.int64(q.shape[0]),
                np.int64(q.shape[1]),
                np.int64(spec.scales.group_size),
            ],
            stream=torch.cuda.current_stream().cuda_stream,
        )
        return out

    return fn


def triton_impl(spec: Spec) -> Callable | None:
    try:
        from .bench_triton import triton_dequant
    except ImportError:
        return None
    return triton_dequant(spec)


_COPY_KERNEL = (
    r"""
extern "C" __global__ void __launch_bounds__(256) copy16("""
    r"""const uint4* __restrict__ src, uint4* __restrict__ dst, long long n) {
    // four independent 16-byte loads in flight per thread, then four stores; grid-stride
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) if (i + j * stride < n) v[j] = __ldg(src + i + j * stride);
#pragma unroll
        for (int j = 0; j < 4; ++j) if (i + j * stride < n) dst[i + j * stride] = v[j];
    }
}
"""
)


_TRAFFIC_KERNEL = (
    r"""
// Reads one 32-bit word and writes OUT words per input word: the same bytes as a dequantizer of the
// same format, with no arithmetic: what the write-heavy traffic mix alone costs (a reference point).
template <int OUT>
__device__ __forceinline__ void traffic(const unsigned* __restrict__ src, unsigned* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        unsigned v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) if (i + j * stride < n) v[j] = __ldg(src + i + j * stride);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const long long w = i + j * stride;
            if (w >= n) continue;
            if constexpr (OUT >= 4) {
#pragma unroll
                for (int k = 0; k < OUT; k += 4)
                    *reinterpret_cast<uint4*>(dst + w * OUT + k) = """
    r"""make_uint4(v[j] + k, v[j] + k + 1u, v[j] + k + 2u, v[j] + k + 3u);
            } else *reinterpret_cast<uint2*>(dst + w * 2) = make_uint2(v[j], v[j] + 1u);
        }
    }
}
extern "C" __global__ void __launch_bounds__(256) traffic4("""
    r"""const unsigned* s, unsigned* d, long long n) { traffic<4>(s, d, n); }
// 2-bit words: 16 values, 8 output words.
extern "C" __global__ void __launch_bounds__(256) traffic8("""
    r"""const unsigned* s, unsigned* d, long long n) { traffic<8>(s, d, n); }
// Multi-word blocks (3-bit): 3 words in, 16 words (32 fp16 values) out per block.
extern "C" __global__ void __launch_bounds__(256) traffic3x16("""
    r"""const unsigned* __restrict__ src, unsigned* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < n; b += stride) {
        const unsigned v0 = __ldg(src + 3 * b), v1 = __ldg(src + 3 * b + 1), v2 = __ldg(src + 3 * b + 2);
#pragma unroll
        for (int i = 0; i < 16; i += 4)
            *reinterpret_cast<uint4*>(dst + b * 16 + i) = make_uint4(v0 + i, v1 + i, v2 + i, v0 ^ v1 ^ i);
    }
}
extern "C" __global__ void __launch_bounds__(256) traffic2("""
    r"""const unsigned* s, unsigned* d, long long n) { traffic<2>(s, d, n); }
"""
)


def traffic_copy(spec: Spec) -> Callable:
    """A plain kernel with the format's read/write mix: read the packed words, write the output bytes."""
    from ..run import device as dev

    torch = _torch()
    out_words = spec.per_word // 2
    if spec.words > 1 and (spec.words, out_words) != (3, 16):
        raise ValueError(f"no same-bytes copy kernel for {spec.words}-word blocks of {spec.per_word} codes")
    if spec.words == 1 and out_words not in (2, 4, 8):
        raise ValueError(f"no same-bytes copy kernel for {spec.per_word} codes per word")
    cub = _cubin(_TRAFFIC_KERNEL, "traffic.cu")
    kern = dev.LoadedKernel(cub, "traffic3x16" if spec.words > 1 else f"traffic{out_words}", 0)
    blocks = dev.sm_count(0) * 8

    def fn(q: Any, s: Any, z: Any, out: Any = None) -> Any:
        K, N = Layout.of(spec).kn_of(tuple(q.shape))
        if out is None:
            out = torch.empty((K, N), dtype=torch_dtype(spec.target_type, torch), device="cuda")
        kern(
            (blocks,),
            (256,),
            [np.uint64(q.data_ptr()), np.uint64(out.data_ptr()), np.int64(q.numel() // spec.words)],
            stream=torch.cuda.current_stream().cuda_stream,
        )
        return out

    return fn


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """GB/s of a device-to-device copy (read + write counted), timed like the dequantizers (one call
    after an L2 flush, median): the faster of torch's copy_ and a 16-byte-vector copy kernel."""
    from ..run import device as dev

    torch = _torch()
    a = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_()
    b = torch.empty_like(a)
    torch_us = single_call_us(lambda: b.copy_(a))
    cub = _cubin(_COPY_KERNEL, "copy16.cu")
    kern = dev.LoadedKernel(cub, "copy16", 0)
    blocks = dev.sm_count(0) * 8
    launch = kern.bind((blocks,), (256,), [np.uint64(a.data_ptr()), np.uint64(b.data_ptr()), np.int64(nbytes // 16)])
    kern_us = single_call_us(lambda: launch(torch.cuda.current_stream().cuda_stream))
    return 2 * nbytes / (min(torch_us, kern_us) * 1e-6) / 1e9


def l2_bytes() -> int:
    torch = _torch()
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))


def _as_called(spec: Spec) -> Spec:
    """The spec the overhead and compile-time figures call: 'auto' stays (it is what users call, resolved per call
    signature); a fixed group size becomes the usual 128 (per-channel stays per-channel)."""
    g = spec.scales.group_size
    return spec if g == "auto" else _shape_spec(spec, 128 if g > 0 else g)[0]


def _shape_spec(spec: Spec, G: int) -> tuple[Spec, int]:
    block_size = spec.scales.group_size
    if spec.scales.block:  # the block size is the format's (MXFP4: 32, NVFP4: 16), not the shape's
        # Spec validation refuses 'auto' with block scales; the check narrows the type
        assert isinstance(block_size, int)
        G = block_size
    from ..core.spec import with_group_size

    return with_group_size(spec, G), G


def bench_spec(
    spec: Spec,
    shapes: list[tuple[int, int, int]],
    copy_gbps: float,
    impls: list[str] | None = None,
    reps: int = 20,
    log: Callable[[str], None] = print,
) -> list[Row]:
    """Rows per shape: dqgen's tuned and default launches side by side, the same-bytes copy, and the
    other implementations a user could call (torch eager, static_cast CUDA, Triton) where they apply."""
    torch = _torch()
    rows: list[Row] = []
    for K, N, G0 in shapes:
        sp, G = _shape_spec(spec, G0)
        rows += _bench_shape(sp, K, N, G, copy_gbps, impls, reps, log)
        torch.cuda.empty_cache()  # the shape's tensors are gone: free the GPU memory before the next
    return rows


def _on_set(fn: Callable[..., Any], sets: list[tuple[Any, ...]]) -> Callable[[int], Any]:
    return lambda i: fn(*sets[i])


def _bench_shape(
    sp: Spec,
    K: int,
    N: int,
    G: int,
    copy_gbps: float,
    impls: list[str] | None,
    reps: int,
    log: Callable[[str], None],
) -> list[Row]:
    from ..kernels.dequant import kernel_name
    from ..run.tune import load_tuning, tune

    torch = _torch()
    rows: list[Row] = []
    kernel = Kernel(sp)
    if load_tuning(kernel.artifact, 0) is None:  # tune once per GPU and kernel, as `dqgen build` does
        tune(kernel.artifact, 0, prepare=kernel.prepare)
    first = make_inputs(sp, K, N, 0)
    per_set = bytes_moved(sp, *first, K, N)
    nsets = max(1, min(8, math.ceil(2 * l2_bytes() / per_set)))  # for the graph column only
    sets = [first] + [make_inputs(sp, K, N, i) for i in range(1, nsets)]
    gscales = [make_global_scale(sp, i) for i in range(nsets)]
    tdt = torch_dtype(sp.target_type, torch)
    outs = [torch.empty((K, N), dtype=tdt, device="cuda") for _ in range(nsets)]
    want = kernel(*first, global_scale=gscales[0])
    tuned = [kernel.prepare(*sets[i], global_scale=gscales[i], out=outs[i]) for i in range(nsets)]
    dflt = default_variant(sp, True)
    default = [kernel.prepare(*sets[i], global_scale=gscales[i], out=outs[i], variant=dflt) for i in range(nsets)]
    # name -> (run on input set i, equal, variant)
    runs: dict[str, tuple[Callable[[int], Any], bool | None, str]] = {
        "dqgen tuned": (lambda i: tuned[i](torch.cuda.current_stream()), True, kernel_name(sp, tuned[0].variant)),
        "dqgen default": (lambda i: default[i](torch.cuda.current_stream()), True, kernel_name(sp, dflt)),
    }
    copy = traffic_copy(sp)
    runs["copy, same bytes"] = (lambda i: copy(*sets[i], out=outs[i]), None, "")
    others: dict[str, Callable] = {}
    if classic(sp):  # the other implementations only know integer codes in single words
        if impls is None or "torch" in impls:
            others["torch eager"] = torch_eager(sp)
        if impls is None or "cuda-naive" in impls:
            others["cuda static_cast"] = naive_cuda(sp)
    if impls is None or "triton" in impls:
        t = triton_impl(sp)
        if t is not None:
            others["triton"] = t
    for name, fn in others.items():
        try:
            got = fn(*first)
            torch.cuda.synchronize()
        except Exception as e:  # a baseline that cannot run here is reported and left out, not fatal
            log(f"{sp.name} {K}x{N} {name}: failed, left out: {type(e).__name__}: {str(e)[:300]}")
            continue
        same = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
        runs[name] = (_on_set(fn, sets), same, "")
    measured: dict[str, tuple[float, float | None]] = {}  # dqgen variant -> its figures, timed once
    for name, (run, equal, variant) in runs.items():
        try:
            if variant and variant in measured:
                # tuning kept the default launch: one kernel, one measurement (two would differ by noise alone)
                us, g_us = measured[variant]
            else:
                us = single_call_us(functools.partial(run, 0))
                g_us = None if name == "torch eager" else graph_us(run, nsets, reps=reps)
                if variant:
                    measured[variant] = (us, g_us)
        except torch.cuda.OutOfMemoryError:
            log(f"{sp.name} {K}x{N} {name}: out of memory, skipped")
            continue
        gbps = per_set / (us * 1e-6) / 1e9
        rows.append(Row(sp.name, K, N, G, name, us, gbps, 100 * gbps / copy_gbps, equal, g_us, variant))
        log(
            f"{sp.name} {K}x{N} G={G} {name}: {us:.1f} us ({100 * gbps / copy_gbps:.1f}% of copy)"
            + (f", graph {g_us:.1f} us" if g_us else "")
            + f", equal={equal} {variant}"
        )
    return rows


# ----------------------------------------------------------------------------- call overhead (issue 10 item 3)


def host_median_us(fn: Callable[[], Any], calls: int = 10_000) -> float:
    """Median host microseconds of one ``fn()`` over ``calls`` calls (after 100 untimed), CPU timer; a synchronize
    every 1000 calls, outside the timed region, keeps the launch queue short. devtools/cuda_core_overhead.py times
    every launch path it compares with this too."""
    import time

    torch = _torch()
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    ns = []
    for i in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        ns.append(time.perf_counter_ns() - t0)
        if i % 1000 == 999:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(ns) / 1000.0


#: Alternating rounds of the flushed call-vs-prepared comparison.
OVERHEAD_ROUNDS = 6


def call_overhead(spec: Spec, calls: int = 10_000, big: tuple[int, int] = (4096, 4096)) -> dict[str, float]:
    """Host time of ``k(qweight, scales, qzeros, out=w)`` on a tiny shape (median of ``calls``
    calls, CPU timer; the GPU work is a few microseconds and overlaps), a torch op timed the same way
    for scale, and the same call vs the prepared launch at ``big``, both one call after an L2 flush (medians of
    alternating rounds)."""
    torch = _torch()
    sp = _as_called(spec)
    kernel = Kernel(sp)
    P = sp.per_word
    K, N = (128, 8 * P) if sp.packing.axis == "N" else (128, 64)
    q, s, z = make_inputs(sp, K, N, 0)
    gsc, gi = make_global_scale(sp, 0), make_g_idx(sp, K, 0)
    tdt = torch_dtype(sp.target_type, torch)
    w = torch.empty((K, N), dtype=tdt, device="cuda")

    call_us = host_median_us(lambda: kernel(q, s, z, g_idx=gi, global_scale=gsc, out=w), calls)
    a, b = torch.ones(K, N, dtype=tdt, device="cuda"), torch.empty(K, N, dtype=tdt, device="cuda")
    torch_us = host_median_us(lambda: torch.mul(a, 2, out=b), calls)
    Kb, Nb = big
    q, s, z = make_inputs(sp, Kb, Nb, 1)
    gsc, gi = make_global_scale(sp, 1), make_g_idx(sp, Kb, 1)
    w = torch.empty((Kb, Nb), dtype=tdt, device="cuda")
    launch = kernel.prepare(q, s, z, g_idx=gi, global_scale=gsc, out=w)
    # Alternating rounds, each pair in swapped order, medians of the rounds: one do_bench each would put the
    # order (clocks settling, the allocator's first flush buffer) into a difference of a few tenths of a us.
    timed: dict[str, list[float]] = {"prepared": [], "call": []}
    fns = {
        "prepared": lambda: launch(torch.cuda.current_stream()),
        "call": lambda: kernel(q, s, z, g_idx=gi, global_scale=gsc, out=w),
    }
    for i in range(OVERHEAD_ROUNDS):
        for name in ("prepared", "call") if i % 2 == 0 else ("call", "prepared"):
            timed[name].append(single_call_us(fns[name]))
    prepared, call = statistics.median(timed["prepared"]), statistics.median(timed["call"])
    return {
        "tiny_K": K,
        "tiny_N": N,
        "host_us_call": call_us,
        "host_us_torch_mul": torch_us,
        "big_K": Kb,
        "big_N": Nb,
        "flushed_us_call": call,
        "flushed_us_prepared": prepared,
        "pct_diff": 100.0 * (call - prepared) / prepared,
    }


# ----------------------------------------------------------------------------- compile time (issue 10 item 4)

_FIRST_CALL = r"""
import json, sys, time
t_import = time.perf_counter()
import torch
import dqgen
from dqgen.run.inputs import make_g_idx, make_global_scale, make_inputs
from dqgen.core.formats import torch_dtype
from dqgen.core.spec import load_spec
spec = load_spec(json.loads(sys.argv[1]))
K, N = int(sys.argv[2]), int(sys.argv[3])
q, s, z = make_inputs(spec, K, N, 0)
gsc, gi = make_global_scale(spec, 0), make_g_idx(spec, K, 0)
w = torch.empty((K, N), dtype=torch_dtype(spec.target_type, torch), device="cuda")
torch.cuda.synchronize()
t0 = time.perf_counter()
k = dqgen.compile(spec)
t1 = time.perf_counter()
k(q, s, z, g_idx=gi, global_scale=gsc, out=w)
torch.cuda.synchronize()
t2 = time.perf_counter()
k(q, s, z, g_idx=gi, global_scale=gsc, out=w)
torch.cuda.synchronize()
t3 = time.perf_counter()
print(json.dumps({"compile_s": t1 - t0, "first_call_s": t2 - t1, "second_call_s": t3 - t2}))
"""


def _run_json(cmd: list[str], env: dict[str, str] | None) -> tuple[dict, float]:
    """Run ``cmd``; the JSON document it printed, and the wall seconds it took."""
    import json
    import subprocess
    import time

    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({res.returncode}): {res.stderr.strip()[-400:]}")
    out = res.stdout
    decoder = json.JSONDecoder()
    # the document starts on the first line that opens an object (anything printed before it is skipped)
    for start in [0] + [i + 1 for i, ch in enumerate(out) if ch == "\n"]:
        if out.startswith("{", start):
            try:
                return decoder.raw_decode(out, start)[0], wall
            except ValueError:
                continue
    raise RuntimeError(f"{' '.join(cmd[:4])} ... printed no JSON: stdout {out[:300]!r}, stderr {res.stderr[-300:]!r}")


def compile_times(spec: Spec, shape: tuple[int, int] = (4096, 4096)) -> dict[str, Any]:
    """Cold and warm first-call times in fresh processes (DQGEN_CACHE_DIR an empty folder, then the
    same folder), and `dqgen build` wall time cold and cached, with its --json per-step times if any."""
    import json
    import os
    import sys
    import tempfile

    import yaml

    sp = _as_called(spec)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dqgen-bench-") as tmp:
        env = dict(os.environ, DQGEN_CACHE_DIR=str(Path(tmp) / "cache"))
        call = [sys.executable, "-c", _FIRST_CALL, sp.model_dump_json(), str(shape[0]), str(shape[1])]
        for label in ("cold", "warm"):
            got, _ = _run_json(call, env)
            result[f"{label}_compile_s"] = got["compile_s"]
            result[f"{label}_first_call_s"] = got["first_call_s"]
            result[f"{label}_second_call_s"] = got["second_call_s"]
        spec_file = Path(tmp) / f"{sp.name}.yaml"
        spec_file.write_text(yaml.safe_dump(sp.model_dump(mode="json")))
        # cold means numba's cache of the reference too (the GPU check's first compile is most of a cold build)
        build_env = dict(
            env, DQGEN_CACHE_DIR=str(Path(tmp) / "build-cache"), NUMBA_CACHE_DIR=str(Path(tmp) / "numba-cache")
        )
        build = [sys.executable, "-m", "dqgen", "build", str(spec_file), "--json", "--out", str(Path(tmp) / "gen")]
        for label in ("cold", "cached"):
            report, wall = _run_json(build, build_env)
            result[f"build_{label}_s"] = wall
            result[f"build_{label}_steps_s"] = {
                name: step[key]
                for name, step in report.get("steps", {}).items()
                for key in ("seconds", "s", "wall_s", "time_s")
                if isinstance(step, dict) and isinstance(step.get(key), (int, float))
            } or report.get("times", report.get("seconds"))
    return json.loads(json.dumps(result))


def _fmt_s(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {x:.2f}" for k, x in v.items()) or "(none in --json)"
    return "(none in --json)" if v is None else f"{v:.3f}"


def write_markdown(
    path: Path,
    gpu: str,
    copy_gbps: float,
    rows: list[Row],
    sass: str = "",
    overhead: dict[str, dict] | None = None,
    compile_s: dict[str, dict] | None = None,
    when: str = "",
) -> None:
    lines = [
        "# dqgen performance",
        "",
        f"Written by `dqgen bench` on {when or _now()}, GPU: {gpu}. Device-to-device copy: {copy_gbps:.0f} GB/s"
        " (read + write), timed like the rows.",
        "",
        f"Method: {method()}. `us` is that single-call figure: what one dequantize costs in a model, where the",
        "matmul that follows cannot overlap it. `graph us` is a second figure: back-to-back calls replayed from one",
        "CUDA graph over input sets totalling twice the L2, which lets one call's tail overlap the next call's start.",
        "Bytes moved = packed weights + output + scales + zeros. Every implementation's output was compared with",
        "dqgen's before timing (`equal`). `dqgen tuned` is the launch `dqgen.compile(...)` makes on this GPU after",
        "tuning (a variant is kept only if it beats the default launch by >= 2% single-call, screened and then",
        "confirmed in 5 alternating rounds); `dqgen default` is the launch rule without tuning; where both rows name",
        "the same kernel it was timed once. `copy, same bytes` is a plain kernel that reads the packed words and",
        "writes as many bytes as the output, with no arithmetic: a reference point for the write-heavy mix, not a",
        "ceiling.",
        "`triton` is dqgen.tools.bench_triton: tiles of whole packed words loaded once, unpacked by shifts in",
        "registers, scales and zeros loaded once per tile, tile sizes autotuned per shape.",
        "",
        "| spec | K x N | G | implementation | us | GB/s | % of copy | graph us | equal | variant |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        eq = "n/a" if r.equal is None else ("yes" if r.equal else "NO")
        g = "" if r.graph_us is None else f"{r.graph_us:.1f}"
        lines.append(
            f"| {r.spec} | {r.K}x{r.N} | {r.group} | {r.impl} | {r.us:.1f} | {r.gbps:.0f} | {r.pct_copy:.1f} | {g} "
            f"| {eq} | {r.variant} |"
        )
    behind = behind_triton(rows)
    lines += ["", "## dqgen vs the Triton baseline (single-call)", ""]
    if not any(r.impl == "triton" for r in rows):
        lines.append("No Triton rows in this run.")
    elif behind:
        lines += ["Shapes where dqgen (tuned) is still behind Triton:", ""]
        lines += [f"- {b}" for b in behind]
    else:
        lines.append("dqgen (tuned) is at least as fast as the Triton baseline at every shape of this run.")
    if overhead:
        lines += [
            "",
            "## Call overhead",
            "",
            "Host time of `k(qweight, scales, qzeros, out=w)` on torch tensors: median of 10^4 calls on a tiny shape,",
            "CPU timer (`torch.mul(a, 2, out=b)` on the same tiny shape timed the same way, for scale); and the same",
            "call vs the prepared launch at 4096x4096, each one call after an L2 flush (median). The flush itself",
            "takes the GPU tens of microseconds, so host time shorter than that is hidden in the second figure.",
            "",
            "| spec | tiny shape | call host us | torch.mul host us | 4096x4096 call us | prepared us | difference |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, o in overhead.items():
            lines.append(
                f"| {name} | {o['tiny_K']}x{o['tiny_N']} | {o['host_us_call']:.1f} | {o['host_us_torch_mul']:.1f} "
                f"| {o['flushed_us_call']:.1f} | {o['flushed_us_prepared']:.1f} | {o['pct_diff']:+.1f}% |"
            )
    if compile_s:
        lines += [
            "",
            "## Compile time",
            "",
            "Fresh Python processes (torch imported and inputs made before the clock starts): `dqgen.compile(spec)`",
            "then the first call at 4096x4096 (synchronized), with DQGEN_CACHE_DIR an empty folder (cold: NVRTC",
            "compiles what the call needs) and again with that folder filled (warm disk cache). `dqgen build` wall",
            "time (subprocess, proof + compile + GPU check + tuning) with empty caches (dqgen's and numba's) and",
            "again with them filled; per-step seconds from its `--json`: each step's own wall time, where compile",
            "runs beside the proof and the reference (a worker process) beside every step up to the check, so they",
            "add up to more.",
            "",
            "| spec | compile() cold s | first call cold s | compile() warm s | first call warm s | build cold s "
            "| build cached s | build steps cold | build steps cached |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, c in compile_s.items():
            lines.append(
                f"| {name} | {c['cold_compile_s']:.3f} | {c['cold_first_call_s']:.3f} | {c['warm_compile_s']:.3f} "
                f"| {c['warm_first_call_s']:.4f} | {c['build_cold_s']:.2f} | {c['build_cached_s']:.2f} "
                f"| {_fmt_s(c['build_cold_steps_s'])} | {_fmt_s(c['build_cached_steps_s'])} |"
            )
    if sass:
        lines += ["", sass]
    from .report import write_section

    write_section(path, "dequant", "\n".join(lines))


def behind_triton(rows: list[Row]) -> list[str]:
    """One line per shape where dqgen's tuned launch is slower (single-call) than the Triton row."""
    out = []
    by_shape: dict[tuple[str, int, int, int], dict[str, Row]] = {}
    for r in rows:
        by_shape.setdefault((r.spec, r.K, r.N, r.group), {})[r.impl] = r
    for (spec, K, N, G), impls in by_shape.items():
        d, t = impls.get("dqgen tuned"), impls.get("triton")
        if d and t and t.equal and d.us > t.us:
            out.append(
                f"{spec} {K}x{N} G={G}: dqgen {d.us:.1f} us ({d.pct_copy:.1f}% of copy) vs triton {t.us:.1f} us "
                f"({t.pct_copy:.1f}%)"
            )
    return out


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


#: Keys every JSON row carries (issue 10); later keys are extra.
JSON_ROW_KEYS = ("impl", "spec", "K", "N", "group", "us", "pct_copy", "equal")


def rows_json(rows: list[Row]) -> list[dict]:
    out = []
    for r in rows:
        d = asdict(r)
        out.append({k: d[k] for k in JSON_ROW_KEYS} | {k: v for k, v in d.items() if k not in JSON_ROW_KEYS})
    return out


def bench_document(
    gpu: str,
    copy_gbps: float,
    rows: list[Row],
    overhead: dict[str, dict] | None = None,
    compile_s: dict[str, dict] | None = None,
    when: str = "",
) -> dict:
    """The JSON written beside the markdown: a header (gpu, date, copy_gbps, method) and the rows."""
    return {
        "gpu": gpu,
        "date": when or _now(),
        "copy_gbps": copy_gbps,
        "method": method(),
        "rows": rows_json(rows),
        "call_overhead": overhead or {},
        "compile_time": compile_s or {},
    }
