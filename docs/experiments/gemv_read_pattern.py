"""Is the GEMV's M = 1 time set by the order in which it reads the weights? A read-only kernel with the GEMV's grid
and loads (4 warps a block, 4 blocks an SM, a warp's batch = 4 x 512 contiguous bytes of 16-byte loads through
ld.global.nc.L1::no_allocate, the next batch in flight while the current one is consumed) reads the same bytes in
three orders: ``tiles``, the GEMV's (each warp its own contiguous range of the packed weights, as the tile-major
layout wq[n_tile][chunk] gives it); ``interleaved``, batch j of every warp of the grid side by side (what a layout
[batch][tile][warp] would give); ``linear``, a grid-stride read (a copy kernel's order). ``work`` adds about the
GEMV's per-batch instruction count of dependent ALU work, so that the loads are spaced as the GEMV spaces them.
Times: triton.testing.do_bench (L2 flushed, median); GB/s of bytes read.

Usage on the GPU machine: python docs/experiments/gemv_read_pattern.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cupy as cp
import torch
import triton.testing

SOURCE = r"""
__device__ __forceinline__ uint4 ld_na(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
// MODE 0 tiles, 1 interleaved, 2 linear; WORK: dependent ALU steps per batch
template <int MODE, int WORK>
__device__ void body(const uint4* __restrict__ w, unsigned* __restrict__ out, int batches) {
    const int lane = threadIdx.x & 31;
    const long long gw = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
    const long long warps = (long long)gridDim.x * 4;
    auto addr = [&](int j, int u) -> const uint4* {
        long long batch = MODE == 0 ? gw * batches + j : (long long)j * warps + gw;
        if (MODE == 2) return w + ((long long)j * 4 + u) * warps * 32 + gw * 32 + lane;
        return w + (batch * 4 + u) * 32 + lane;
    };
    uint4 q[4], qn[4];
    unsigned acc = lane;
#pragma unroll
    for (int u = 0; u < 4; ++u) q[u] = ld_na(addr(0, u));
    for (int j = 0; j < batches; ++j) {
        if (j + 1 < batches) {
#pragma unroll
            for (int u = 0; u < 4; ++u) qn[u] = ld_na(addr(j + 1, u));
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            unsigned v = q[u].x ^ q[u].y ^ q[u].z ^ q[u].w;
#pragma unroll
            for (int i = 0; i < WORK / 4; ++i) v = v * 0x9E3779B1u + (v >> 7);
            acc += v;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) q[u] = qn[u];
    }
    if (acc == 0x12345678u) out[0] = acc;  // keeps the loads; practically never stores
}
extern "C" {
#define K(NAME, MODE, WORK) \
    __global__ void __launch_bounds__(128, 4) NAME(const uint4* w, unsigned* o, int b) { body<MODE, WORK>(w, o, b); }
K(tiles0, 0, 0) K(interleaved0, 1, 0) K(linear0, 2, 0) K(tiles_work, 0, 160) K(interleaved_work, 1, 160)
K(linear_work, 2, 160)
}
"""

#: (name, blocks, batches per warp): the GEMV grids of 8192x28672 (1792 tiles, 1 split, 32 chunks a warp) and
#: 28672x8192 (512 tiles, 112 chunks a warp); 4 chunks a batch
GRIDS = [("8192x28672", 1792, 8), ("28672x8192", 512, 28)]
KERNELS = ["tiles0", "interleaved0", "linear0", "tiles_work", "interleaved_work", "linear_work"]


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17", "--gpu-architecture=sm_90"))
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    rows = []
    for name, blocks, batches in GRIDS:
        nbytes = blocks * 4 * batches * 2048
        w = torch.randint(-(2**31), 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda")
        o = torch.zeros(1, dtype=torch.int32, device="cuda")
        wp, op = cp.uint64(w.data_ptr()), cp.uint64(o.data_ptr())
        row: dict = {"grid": name, "bytes": nbytes}
        fns = {k: mod.get_function(k) for k in KERNELS}

        def launch(k: str, fns=fns, blocks=blocks, wp=wp, op=op, batches=batches) -> None:
            with stream:
                fns[k]((blocks,), (128,), (wp, op, cp.int32(batches)))

        for k in KERNELS:
            launch(k)
        torch.cuda.synchronize()
        for rnd in (KERNELS, KERNELS[::-1]):
            for k in rnd:
                us = float(triton.testing.do_bench(lambda k=k: launch(k), return_mode="median")) * 1e3
                row.setdefault(k, []).append(round(us, 2))
        rows.append(row)
        print(name, {k: (v, round(nbytes / (min(v) * 1e3), 0)) for k, v in row.items() if isinstance(v, list)})
    (out / "read_pattern.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
