"""Every entry point of the tensor-core GEMM (dqgen.run.gemm: the 16-, 32- and 64-row tiles, direct and gather A
loads, split-K with its workspace and the unsplit grid) launched once on a shape with tails, for
`compute-sanitizer --tool memcheck` and `--tool racecheck` (the cp.async pipeline reuses shared-memory stages);
each output is also checked against the float64 reference, so a launch that the sanitizer passes but computes
wrongly fails here. Exit 1 when an entry is not covered or an output is off."""

from __future__ import annotations

import sys

import numpy as np

from dqgen.check.matmul_reference import TOLERANCE, matmul_inputs, matmul_reference, random_x, relative_error
from dqgen.core.spec import load_spec
from dqgen.kernels.gemm import GEMM_ENTRIES
from dqgen.run import gemm
from dqgen.run.gpucheck import exact_allocations, to_numpy, to_torch
from dqgen.run.runtime import Kernel

#: (spec, K, N, group size, M values): tails in K, N and M; the launches below cover every entry, split and not
CASES = (
    ("awq_int4_fp16", 128 * 5, 200, 128, (9, 17, 300)),  # direct A; 2 x 128-column tiles: split-K
    ("gptq_int4_asym_act_order_fp16", 128 * 5, 200, 128, (9, 17, 40)),  # act-order: the gather entries
    ("int8_bf16", 64 * 3 + 8, 128 * 40 + 4, None, (5, 33, 290)),  # K tail inside a tile; 41 x 3 tiles: no split
)


def main() -> int:
    import torch

    entries, splits, bad = set(), set(), []
    for name, K, N, group, ms in CASES:
        spec = load_spec(name)
        k = Kernel(spec)
        (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=K + N, group_size=group)
        gw = gemm.pack_gemm(k.spec, to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi))
        for M in ms:
            x = random_x(spec, M, K, seed=M)
            before = set(gw.workspace)
            cfg = gemm.choose_config(M)
            y = gemm.run_gemm(k.spec, to_torch(x), gw, config=cfg)  # the sm_80 kernel on an H100 too
            torch.cuda.synchronize()
            entries.add((cfg.bm, gw.gather))
            split = bool(set(gw.workspace) - before)
            splits.add(split)
            err = relative_error(to_numpy(y).astype(np.float64), matmul_reference(x, W))
            print(f"{name} K={K} N={N} M={M} tile={cfg.bm} gather={gw.gather} split={split}: rel err {err:.2e}")
            if not err <= TOLERANCE[spec.target.value]:
                bad.append(f"{name} M={M}")
    missing = {(e.config.bm, e.gather) for e in GEMM_ENTRIES} - entries
    if missing or splits != {True, False} or bad:
        print(f"FAILED: entries not covered {sorted(missing)}, split/unsplit covered {sorted(splits)}, off: {bad}")
        return 1
    print("every GEMM entry point launched, every output within tolerance")
    return 0


if __name__ == "__main__":
    # only as a script, before torch's first allocation (the quick tier's tests import it after CUDA started)
    exact_allocations()  # memcheck then sees each tensor's own end
    sys.exit(main())
