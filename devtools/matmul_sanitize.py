"""Every entry point of the fused matmul (dqgen.run.matmul: the PAIRED, DIRECT, GATHER and GROUPED modes, M <= 8 and
9..16 tokens, blocks of 16, 8 and 4 warps (dqgen.kernels.gemv.block_warps), split-K with its workspace, the unsplit
grid and the flat grid of GROUPED weights; x rows 16-byte aligned and not) launched once on a shape with tails, for
`compute-sanitizer --tool memcheck`, `--tool racecheck` (the warps' partial sums meet in shared memory; on the flat
grid, in the workspace) and `--tool synccheck`; each output is also checked against the float64 reference, so a
launch that the sanitizer passes but computes wrongly fails here. Exit 1 when a mode, a block width or the split and
unsplit grids are not covered, or an output is off."""

from __future__ import annotations

import itertools
import sys

import numpy as np

from dqgen.check.matmul_reference import TOLERANCE, matmul_inputs, matmul_reference, random_x, relative_error
from dqgen.core.spec import load_spec
from dqgen.kernels.gemv import DIRECT, GATHER, GROUPED, PAIRED, WIDE_WARPS, Tuning
from dqgen.run import matmul as mm
from dqgen.run.gpucheck import exact_allocations, to_numpy, to_torch
from dqgen.run.runtime import Kernel

#: (spec, K, N, group size): K and N with tails; the group sizes pick the mode (see dqgen.kernels.gemv.entry_mode)
CASES = (
    ("awq_int4_fp16", 128 * 80, 56, 128),  # groups of two whole chunks: GROUPED; 4 tiles of 160 chunks -> split-K
    ("awq_int4_fp16", 128 * 9, None, 128),  # N: 16 x (SMs + 1), one tile past 16-warp blocks: 8-warp blocks
    ("awq_int4_fp16", 4096 + 8, 56, -1),  # one group, K inside the last chunk (the lean entry's guarded tail)
    ("awq_int4_bf16", 24 * 45, 56, 24),  # whole blocks, not pairs: DIRECT
    ("awq_int4_fp16", 36 * 30, 56, 36),  # groups that are no whole blocks: GATHER
    ("gptq_int4_asym_act_order_fp16", 128 * 9, 56, 128),  # act-order: GATHER through perm
    ("nvfp4_fp16", 16 * 70, 40, None),  # block scales and the global scale
    ("gptq_int3_fp16", 32 * 36, 8200, 32),  # 3-word blocks; 513 tiles: 4-warp blocks, no split
)
#: GROUPED weights again on the flat grid (run_flat, forced: the default takes it only past one wave of tiles):
#: warps whose ranges cross tiles, several warps a tile meeting in the workspace
FLAT_CASES = (("awq_int4_fp16", 128 * 10, 56, 128), ("awq_int4_fp16", 4096 + 8, 40, -1))


def main() -> int:
    import torch

    modes, splits, widths, bad, flat = set(), set(), set(), [], 0
    from dqgen.run import device as dev

    for name, K, n, group in CASES + FLAT_CASES:
        forced = (name, K, n, group) in FLAT_CASES
        N = n if n is not None else 16 * (dev.sm_count(0) + 1)
        spec = load_spec(name)
        k = Kernel(spec)
        (q, s, z, gi, gsc), W = matmul_inputs(spec, K, N, seed=K + N, group_size=group)
        tensors = (to_torch(q), to_torch(s), to_torch(z))
        if forced:  # the flat grid everywhere: a weight packed for the GEMV of that tuning
            w = mm.pack_gemv(
                k.artifact, *tensors, g_idx=to_torch(gi), global_scale=to_torch(gsc), tuning=Tuning(flat="on")
            )
        else:
            w = k.pack_matmul(*tensors, g_idx=to_torch(gi), global_scale=to_torch(gsc), gemm=False)
        modes.add(w.mode)
        splits.add(w.splits > 1)
        widths.add(w.tuning.warps)
        flat += forced and all(f is not None for f in w.flat)
        for M, offset in itertools.product((3, 13), (0, 1)):
            # offset 1: x one element into a wider tensor, no row 16-byte aligned: the guarded x loads throughout
            wide = random_x(spec, M, K + 8, seed=M)
            x = np.ascontiguousarray(wide[:, offset : offset + K])
            y = k.matmul(to_torch(wide)[:, offset : offset + K], w)
            torch.cuda.synchronize()
            err = relative_error(to_numpy(y).astype(np.float64), matmul_reference(x, W))
            ok = err <= TOLERANCE[spec.target.value]
            grid = ("flat" if forced else f"splits={w.splits}") + f" warps={w.tuning.warps}"
            where = f"M={M}" + (" x unaligned" if offset else "")
            print(f"{name} K={K} N={N} G={group} mode={w.mode} {grid} {where}: rel err {err:.2e}")
            if not ok:
                bad.append(f"{name} {grid} {where}")
    missing = {PAIRED, DIRECT, GATHER, GROUPED} - modes
    if missing or splits != {True, False} or widths != {4, *WIDE_WARPS} or bad or flat != len(FLAT_CASES):
        print(
            f"FAILED: modes not covered {sorted(missing)}, split/unsplit covered {sorted(splits)}, block widths "
            f"{sorted(widths)}, off: {bad}, flat grids {flat} of {len(FLAT_CASES)}"
        )
        return 1
    print("every matmul entry point launched, every output within tolerance")
    return 0


if __name__ == "__main__":
    # only as a script, before torch's first allocation (the quick tier's tests import it after CUDA started)
    exact_allocations()  # memcheck then sees each tensor's own end
    sys.exit(main())
