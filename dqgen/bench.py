"""``dqgen bench``: the dequantize kernel against the device's copy bandwidth and against the other
ways a user could do the same job, on the same inputs, each checked for equal output first.

Method (see the device notes): CUDA events around every launch with the queue kept full, warm-up
first, the median of many repetitions, and input sets rotated so that their total is at least
twice the L2 cache. Bytes moved = packed weights + output + scales + zeros, each counted once.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from .runtime import Kernel
from .spec import SourceKind, Spec

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


def _torch():
    import torch

    return torch


def _with_group(spec: Spec, group: int) -> Spec:
    from .spec import load_spec

    data = spec.model_dump(mode="json")
    data["scales"]["group_size"] = group
    return load_spec(data)


#: Block-scale codes make_inputs draws from: scales of ordinary size (e8m0: 2^-10 .. 2^2; e4m3: 2^-2 .. 2^4).
_BLOCK_SCALE_CODES = {"e8m0": (117, 130), "e4m3": (0x28, 0x58)}


def make_inputs(spec: Spec, K: int, N: int, seed: int) -> tuple[Any, Any, Any]:
    """Full-range random packed words, random signed scales (block scales: uint8 codes), random zeros,
    on the GPU. Multi-word blocks (3-bit) give qweight [K * words / per_block, N]."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    from .reference import example_group_size

    P, gs = spec.per_word, example_group_size(spec, K)  # group_size auto: the usual 128 where it divides K
    G = K // gs if gs > 0 else 1
    qshape = (K, N // P) if spec.packing.axis == "N" else (K // P * spec.words, N)
    q = torch.randint(-(2**31), 2**31, qshape, dtype=torch.int32, device="cuda", generator=g)
    tdt = torch.float16 if spec.target.value == "fp16" else torch.bfloat16
    if spec.scales.block:
        lo, hi = _BLOCK_SCALE_CODES[spec.scales.dtype.value]
        s = torch.randint(lo, hi, (G, N), dtype=torch.uint8, device="cuda", generator=g)
    else:
        s = (torch.rand((G, N), device="cuda", generator=g) * 2 - 1).mul_(0.05).to(tdt)
    if spec.zeros.packed:
        z = torch.randint(-(2**31), 2**31, (G, N // P), dtype=torch.int32, device="cuda", generator=g)
    elif spec.zeros.mode in ("float", "additive"):
        z = (torch.rand((G, N), device="cuda", generator=g) * (1 << spec.source.bits)).to(tdt)
    else:
        z = None
    return q, s, z


def make_global_scale(spec: Spec, seed: int) -> Any:
    """NVFP4's per-tensor fp32 global scale (a one-element tensor on the GPU), or None."""
    if not spec.scales.global_scale:
        return None
    from .reference import random_global_scale

    return _torch().from_numpy(random_global_scale(spec, seed)).to("cuda")


def classic(spec: Spec) -> bool:
    """Formats the other implementations (torch eager, static_cast CUDA, Triton) know: integer codes
    in single words with target-dtype scales."""
    return (
        spec.words == 1
        and not spec.scales.block
        and spec.source.kind in (SourceKind.unsigned, SourceKind.signed, SourceKind.biased)
    )


def make_g_idx(spec: Spec, K: int, seed: int) -> Any:
    """An act-order g_idx as GPTQ desc_act makes it: each group id group_size times, shuffled."""
    torch = _torch()
    if not spec.act_order:
        return None
    g = torch.Generator(device="cuda").manual_seed(seed)
    from .reference import example_group_size

    ids = torch.arange(K, device="cuda", dtype=torch.int32) // example_group_size(spec, K)
    return ids[torch.randperm(K, device="cuda", generator=g)].contiguous()


def bytes_moved(spec: Spec, q: Any, s: Any, z: Any, K: int, N: int) -> int:
    n = q.numel() * 4 + s.numel() * s.element_size() + K * N * 2
    return n + (z.numel() * 4 if z is not None else 0)


# ----------------------------------------------------------------------------- other implementations


def torch_eager(spec: Spec) -> Callable:
    """The formula in torch ops, as a user without a kernel writes it."""
    torch = _torch()
    b, P, order = spec.source.bits, spec.per_word, spec.order
    mask = (1 << b) - 1
    shifts = torch.tensor([b * order.index(e) for e in range(P)], dtype=torch.int32, device="cuda")
    tdt = torch.float16 if spec.target.value == "fp16" else torch.bfloat16

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
    from . import device as dev
    from .nvrtc import compile_source
    from .render import naive_source

    src = naive_source(spec)
    cub = compile_source(src, arch=dev.device_arch(0), want="cubin", name=f"{spec.name}_naive.cu")
    kern = dev.LoadedKernel(cub.cubin, f"naive_{spec.name}", 0)
    torch = _torch()

    def fn(q: Any, s: Any, z: Any) -> Any:
        words = q.numel()
        K = q.shape[0] * (1 if spec.packing.axis == "N" else spec.per_word)
        N = q.shape[1] * (spec.per_word if spec.packing.axis == "N" else 1)
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


# ----------------------------------------------------------------------------- timing


def time_us(fn: Callable[[int], Any], nsets: int, reps: int = 20, calls: int = 20) -> float:
    """Median microseconds per call. ``calls`` calls (rotating over the input sets) are captured in a
    CUDA graph, so host launch overhead is out of the numbers for every implementation alike; each
    graph replay is timed with events, after a warm-up, and the median replay is divided by ``calls``."""
    torch = _torch()
    for i in range(max(nsets, 3)):  # warm-up: module loads, Triton JIT, allocator
        fn(i % nsets)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(0)  # a warm-up on the capture stream, as torch recommends
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fn(i % nsets)
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del graph
    return 1000.0 * statistics.median(times) / calls


_COPY_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(256) copy16(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n) {
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


_TRAFFIC_KERNEL = r"""
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
                    *reinterpret_cast<uint4*>(dst + w * OUT + k) = make_uint4(v[j] + k, v[j] + k + 1u, v[j] + k + 2u, v[j] + k + 3u);
            } else *reinterpret_cast<uint2*>(dst + w * 2) = make_uint2(v[j], v[j] + 1u);
        }
    }
}
extern "C" __global__ void __launch_bounds__(256) traffic4(const unsigned* s, unsigned* d, long long n) { traffic<4>(s, d, n); }
// 2-bit words: 16 values, 8 output words.
extern "C" __global__ void __launch_bounds__(256) traffic8(const unsigned* s, unsigned* d, long long n) { traffic<8>(s, d, n); }
// Multi-word blocks (3-bit): 3 words in, 16 words (32 fp16 values) out per block.
extern "C" __global__ void __launch_bounds__(256) traffic3x16(const unsigned* __restrict__ src, unsigned* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < n; b += stride) {
        const unsigned v0 = __ldg(src + 3 * b), v1 = __ldg(src + 3 * b + 1), v2 = __ldg(src + 3 * b + 2);
#pragma unroll
        for (int i = 0; i < 16; i += 4)
            *reinterpret_cast<uint4*>(dst + b * 16 + i) = make_uint4(v0 + i, v1 + i, v2 + i, v0 ^ v1 ^ i);
    }
}
extern "C" __global__ void __launch_bounds__(256) traffic2(const unsigned* s, unsigned* d, long long n) { traffic<2>(s, d, n); }
"""


def traffic_copy(spec: Spec) -> Callable:
    """A plain kernel with the format's read/write mix: read the packed words, write the output bytes."""
    from . import device as dev
    from .nvrtc import compile_source

    torch = _torch()
    out_words = spec.per_word // 2
    if spec.words > 1 and (spec.words, out_words) != (3, 16):
        raise ValueError(f"no same-bytes copy kernel for {spec.words}-word blocks of {spec.per_word} codes")
    if spec.words == 1 and out_words not in (2, 4, 8):
        raise ValueError(f"no same-bytes copy kernel for {spec.per_word} codes per word")
    cub = compile_source(_TRAFFIC_KERNEL, arch=dev.device_arch(0), want="cubin", name="traffic.cu").cubin
    kern = dev.LoadedKernel(cub, "traffic3x16" if spec.words > 1 else f"traffic{out_words}", 0)
    blocks = dev.sm_count(0) * 8

    def fn(q: Any, s: Any, z: Any, out: Any = None) -> Any:
        K = q.shape[0] * (1 if spec.packing.axis == "N" else spec.per_word) // spec.words
        N = q.shape[1] * (spec.per_word if spec.packing.axis == "N" else 1)
        if out is None:
            out = torch.empty(
                (K, N), dtype=torch.float16 if spec.target.value == "fp16" else torch.bfloat16, device="cuda"
            )
        kern(
            (blocks,),
            (256,),
            [np.uint64(q.data_ptr()), np.uint64(out.data_ptr()), np.int64(q.numel() // spec.words)],
            stream=torch.cuda.current_stream().cuda_stream,
        )
        return out

    return fn


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """GB/s of a device-to-device copy (read + write counted): the faster of torch's copy_ timed per
    call with the queue kept full, and a 16-byte-vector copy kernel timed like the dequantizers."""
    from . import device as dev
    from .nvrtc import compile_source

    torch = _torch()
    a = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(20)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(20)]
    for st, en in zip(starts, ends):
        st.record()
        b.copy_(a)
        en.record()
    torch.cuda.synchronize()
    torch_us = 1000.0 * statistics.median(st.elapsed_time(en) for st, en in zip(starts, ends))
    cub = compile_source(_COPY_KERNEL, arch=dev.device_arch(0), want="cubin", name="copy16.cu").cubin
    kern = dev.LoadedKernel(cub, "copy16", 0)
    n16 = nbytes // 16
    blocks = dev.sm_count(0) * 8
    args = [np.uint64(a.data_ptr()), np.uint64(b.data_ptr()), np.int64(n16)]
    kern_us = time_us(
        lambda i: kern((blocks,), (256,), args, stream=torch.cuda.current_stream().cuda_stream), 1, reps=10, calls=10
    )
    return 2 * nbytes / (min(torch_us, kern_us) * 1e-6) / 1e9


def l2_bytes() -> int:
    torch = _torch()
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))


def bench_spec(
    spec: Spec,
    shapes: list[tuple[int, int, int]],
    copy_gbps: float,
    impls: list[str] | None = None,
    reps: int = 60,
    log: Callable[[str], None] = print,
) -> list[Row]:
    torch = _torch()
    rows: list[Row] = []
    for K, N, G in shapes:
        if spec.scales.block:  # the block size is the format's (MXFP4: 32, NVFP4: 16), not the shape's
            G = spec.scales.group_size
        sp = _with_group(spec, G) if spec.scales.group_size != G else spec
        kernel = Kernel(sp)
        from .tune import load_tuning, tune

        if load_tuning(kernel, 0) is None:  # tune once per GPU and kernel, as `dqgen build` does
            tune(kernel, 0)
        first = make_inputs(sp, K, N, 0)
        per_set = bytes_moved(sp, *first, K, N)
        nsets = max(1, min(8, math.ceil(2 * l2_bytes() / per_set)))
        sets = [first] + [make_inputs(sp, K, N, i) for i in range(1, nsets)]
        gscales = [make_global_scale(sp, i) for i in range(nsets)]
        tdt = torch.float16 if sp.target.value == "fp16" else torch.bfloat16
        outs = [torch.empty((K, N), dtype=tdt, device="cuda") for _ in range(nsets)]
        want = kernel(*first, global_scale=gscales[0])
        candidates: dict[str, Callable] = {
            "dqgen": lambda q, s, z, i=None: kernel(q, s, z),
            "copy, same bytes": traffic_copy(sp),
        }
        others = classic(sp)  # the other implementations only know integer codes in single words
        if others and (impls is None or "torch" in impls):
            candidates["torch eager"] = torch_eager(sp)
        if others and (impls is None or "cuda-naive" in impls):
            candidates["cuda static_cast"] = naive_cuda(sp)
        if others and (impls is None or "triton" in impls):
            t = triton_impl(sp)
            if t is not None:
                candidates["triton"] = t
        launches = [kernel.prepare(*sets[i], global_scale=gscales[i], out=outs[i]) for i in range(nsets)]
        for name, fn in candidates.items():
            if name == "dqgen":
                run = lambda i: launches[i](torch.cuda.current_stream())  # noqa: E731
                equal: bool | None = True
            elif name == "copy, same bytes":
                run = lambda i, fn=fn: fn(*sets[i], out=outs[i])  # noqa: E731
                equal = None
            else:
                got = fn(*first)
                torch.cuda.synchronize()
                equal = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
                run = lambda i, fn=fn: fn(*sets[i])  # noqa: E731
            try:
                us = time_us(run, nsets, reps=reps, calls=20 if name != "torch eager" else 3)
            except torch.cuda.OutOfMemoryError:
                log(f"{sp.name} {K}x{N} {name}: out of memory, skipped")
                continue
            gbps = per_set / (us * 1e-6) / 1e9
            rows.append(Row(sp.name, K, N, G, name, us, gbps, 100 * gbps / copy_gbps, equal))
            log(
                f"{sp.name} {K}x{N} G={G} {name}: {us:.1f} us, {gbps:.0f} GB/s, {100 * gbps / copy_gbps:.1f}% of copy, equal={equal}"
            )
        sets = outs = launches = want = []  # free the GPU memory before the next shape
        torch.cuda.empty_cache()
    return rows


def write_markdown(path: Path, gpu: str, copy_gbps: float, rows: list[Row], sass: str = "") -> None:
    lines = [
        "# dqgen performance",
        "",
        f"Written by `dqgen bench` on {date.today().isoformat()}, GPU: {gpu}. Device-to-device copy: {copy_gbps:.0f} GB/s (read + write).",
        "Bytes moved = packed weights + output + scales + zeros. Median of many launches timed with CUDA events;",
        "inputs rotated among sets totalling at least twice the L2. Every implementation's output was compared",
        "with dqgen's before timing (`equal`). `copy, same bytes` is a plain 16-byte-vector kernel that reads the packed",
        "words and writes as many bytes as the output, with no arithmetic: it shows what the write-heavy mix of a",
        "dequantizer (it writes 2x (fp8) to 8x (2-bit) what it reads, a copy 1x) costs by itself. It is a reference point, not a ceiling.",
        "",
        "| spec | K x N | G | implementation | us | GB/s | % of copy | equal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        eq = "n/a" if r.equal is None else ("yes" if r.equal else "NO")
        lines.append(
            f"| {r.spec} | {r.K}x{r.N} | {r.group} | {r.impl} | {r.us:.1f} | {r.gbps:.0f} | {r.pct_copy:.1f} | {eq} |"
        )
    if sass:
        lines += ["", sass]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def rows_json(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]
