"""How fast can an H100 read a decode weight at all? The decode target (>= 80% of bytes / copy bandwidth) assumes a
read at copy speed. This times a read-only CUDA kernel over the 8192 x 28672 int4 weight (117 MB) in the layout the
GEMV reads (each warp one contiguous range), two ways:

- ``bulk``: one lane per warp streams the warp's range through a shared-memory ring with ``cp.async.bulk`` (no
  registers hold bytes in flight: depth = stages x stage bytes a warp), the warp XORs each stage from shared memory;
- ``ldg``: every lane loads 16 bytes of each 512-byte chunk, ``unroll`` chunks in flight a warp (what the GEMV does).

Same bytes, L2 flushed, median (``triton.testing.do_bench``); a torch copy of the same bytes beside them. Writes JSON
(argv[1]).

    python devtools/bulk_read_floor.py docs/bench/bulk_read_floor_h100.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import cupy as cp
import torch
import triton.testing as tt

from dqgen.emit.nvrtc import compile_source

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(WARPS * 32) bulk(const uint4* __restrict__ w, long long n16,
                                                            long long per_warp, unsigned* __restrict__ out) {
    extern __shared__ __align__(128) uint4 smem[];
    __shared__ __align__(8) unsigned long long bar[WARPS][STAGES];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint4* ring = smem + warp * STAGES * CH;
    const long long gw = (long long)blockIdx.x * WARPS + warp;
    const long long begin = gw * per_warp;
    const long long end = begin + per_warp < n16 ? begin + per_warp : n16;
    const int n_st = begin < end ? (int)((end - begin + CH - 1) / CH) : 0;
    if (lane == 0)
        for (int s = 0; s < STAGES; ++s) {
            unsigned a = (unsigned)__cvta_generic_to_shared(&bar[warp][s]);
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(a));
        }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncwarp();
    auto issue = [&](int i) {
        const int s = i % STAGES;
        const long long off = begin + (long long)i * CH;
        const unsigned bytes = (unsigned)((end - off < CH ? end - off : CH) * 16);
        unsigned b = (unsigned)__cvta_generic_to_shared(&bar[warp][s]);
        unsigned d = (unsigned)__cvta_generic_to_shared(ring + s * CH);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(d), "l"(w + off), "r"(bytes), "r"(b) : "memory");
    };
    if (lane == 0)
        for (int i = 0; i < STAGES && i < n_st; ++i) issue(i);
    unsigned acc = 0;
    for (int i = 0; i < n_st; ++i) {
        const int s = i % STAGES;
        const unsigned phase = (unsigned)(i / STAGES) & 1u;
        unsigned b = (unsigned)__cvta_generic_to_shared(&bar[warp][s]);
        asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra W; }"
                     ::"r"(b), "r"(phase) : "memory");
        const long long off = begin + (long long)i * CH;
        const int n = (int)(end - off < CH ? end - off : CH);
        for (int j = lane; j < n; j += 32) {
            const uint4 v = ring[s * CH + j];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncwarp();
        if (lane == 0 && i + STAGES < n_st) issue(i + STAGES);
    }
    out[gw * 32 + lane] = acc;
}

extern "C" __global__ void __launch_bounds__(WARPS * 32) ldg(const uint4* __restrict__ w, long long n16,
                                                           long long per_warp, unsigned* __restrict__ out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long gw = (long long)blockIdx.x * WARPS + warp;
    const long long begin = gw * per_warp;
    const long long end = begin + per_warp < n16 ? begin + per_warp : n16;
    unsigned acc = 0;
    long long c = begin + lane;
    for (; c + 32 * (UNROLL - 1) < end; c += 32 * UNROLL) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = __ldg(w + c + 32 * u);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; c < end; c += 32) {
        const uint4 v = __ldg(w + c);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    out[gw * 32 + lane] = acc;
}
"""


def module(warps: int, stages: int, ch: int, unroll: int) -> cp.RawModule:
    """Compiled by dqgen's NVRTC path (sm_90a cubin, as the kernels are), loaded by cupy."""
    defs = f"#define WARPS {warps}\n#define STAGES {stages}\n#define CH {ch}\n#define UNROLL {unroll}\n"
    cubin = compile_source(defs + SOURCE, arch="sm_90a", want="cubin", options=["-std=c++17"]).cubin
    assert cubin is not None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    return cp.RawModule(path=f.name)


def launcher(kern: Any, ctas: int, threads: int, args: tuple[Any, ...], smem: int) -> Callable[[], None]:
    return lambda: kern((ctas,), (threads,), args, shared_mem=smem)


def main() -> None:
    K, N = 8192, 28672
    nbytes = K * N // 2
    n16 = nbytes // 16
    w_t = torch.randint(-(2**31), 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda")
    w = cp.asarray(w_t)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[dict[str, object]] = []

    def record(row: dict[str, object], fn: Callable[[], object]) -> None:
        fn()
        torch.cuda.synchronize()
        us = float(tt.do_bench(fn, warmup=25, rep=300, return_mode="median")) * 1e3
        rows.append({**row, "us": us, "gbs": nbytes / us / 1e3})
        print(f"{row}  {us:7.2f} us  {nbytes / us / 1e3:6.0f} GB/s", flush=True)

    for warps, ctas_per_sm in ((4, 4), (8, 2), (4, 8), (8, 4), (16, 1), (16, 2)):
        gw = sms * ctas_per_sm * warps
        per_warp = -(-n16 // gw)
        out = cp.empty(gw * 32, dtype=cp.uint32)
        for stages, ch_bytes in ((4, 2048), (8, 1024), (4, 4096), (2, 8192), (6, 2048), (3, 4096)):
            ch = ch_bytes // 16
            smem = warps * stages * ch_bytes
            if smem * ctas_per_sm > 220 * 1024 or smem > 227 * 1024:
                continue
            kern = module(warps, stages, ch, 8).get_function("bulk")
            kern.max_dynamic_shared_size_bytes = smem
            args = (w, cp.int64(n16), cp.int64(per_warp), out)
            row = {
                "kind": "bulk",
                "warps": warps,
                "ctas_per_sm": ctas_per_sm,
                "stages": stages,
                "stage_bytes": ch_bytes,
            }
            record(row, launcher(kern, sms * ctas_per_sm, warps * 32, args, smem))
        for unroll in (4, 8, 16):
            kern = module(warps, 1, 1, unroll).get_function("ldg")
            args = (w, cp.int64(n16), cp.int64(per_warp), out)
            row = {"kind": "ldg", "warps": warps, "ctas_per_sm": ctas_per_sm, "unroll": unroll}
            record(row, launcher(kern, sms * ctas_per_sm, warps * 32, args, 0))
    copy = torch.empty_like(w_t)
    record({"kind": "torch copy (read + write, GB/s counts both)"}, lambda: copy.copy_(w_t))
    rows[-1]["gbs"] = 2 * nbytes / float(rows[-1]["us"]) / 1e3  # type: ignore[arg-type]
    meta = {"gpu": torch.cuda.get_device_name(0), "bytes": nbytes, "shape": f"{K}x{N} int4"}
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
