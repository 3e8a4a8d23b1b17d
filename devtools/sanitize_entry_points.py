"""One launch of every kernel entry point (every variant of every shipped spec) on a shape with partial
tiles, each output checked bit-exact against the numba reference; meant to run under
`compute-sanitizer --tool memcheck` (devtools/gpu_all.sh, quick tier). `--shared` prints the specs whose
kernel source uses shared memory (those also need `--tool racecheck`) and exits.
Usage on a GPU machine: python devtools/sanitize_entry_points.py [SPEC.yaml ...] (default: every shipped spec)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from dqgen.check.reference import dequantize_reference, random_global_scale, random_inputs
from dqgen.core.spec import Spec, load_spec
from dqgen.kernels.dequant import kernel_name, variants
from dqgen.run.gpucheck import exact_allocations, nan_equal_mismatches, to_numpy, to_torch
from dqgen.run.runtime import Kernel

ROOT = Path(__file__).resolve().parent.parent


def tail_spec(path: Path) -> Spec:
    """The spec with one group (any K fits), except act-order and block-scale formats, which keep theirs."""
    spec = load_spec(path)
    if spec.act_order or spec.scales.block:
        return spec
    data = spec.model_dump(mode="json")
    data["scales"]["group_size"] = -1
    return load_spec(data)


def tail_shape(spec: Spec) -> tuple[int, int]:
    P = spec.per_word
    zp = 32 // spec.source.bits if spec.zeros.packed else 1
    return (37, P * 333) if spec.packing.axis == "N" else (P * 32, -(-1000 // zp) * zp)


def launch_all(paths: list[Path]) -> int:
    """Launch every variant of every spec once; raise on the first output that differs. Returns the count."""
    import torch

    launched = 0
    for path in paths:
        spec = tail_spec(path)
        K, N = tail_shape(spec)
        kernel = Kernel(spec)
        q, s, z, gi = random_inputs(spec, K, N, 5)
        gsc = random_global_scale(spec, 5)
        want = dequantize_reference(spec, q, s, z, gi, global_scale=gsc).view(np.uint16)
        tq, ts, tz, tg, tgs = to_torch(q), to_torch(s), to_torch(z), to_torch(gi), to_torch(gsc)
        for v in variants(spec):
            launch = kernel.prepare(tq, ts, tz, g_idx=tg, global_scale=tgs, variant=v)
            launch()
            torch.cuda.synchronize()
            got = to_numpy(launch.out).view(np.uint16)
            bad = nan_equal_mismatches(got, want, spec.target.value)
            if bad.size:
                raise AssertionError(f"{kernel_name(spec, v)} {K}x{N}: {len(bad)} mismatches, first at {bad[0]}")
            launched += 1
    return launched


def main(args: list[str]) -> None:
    shared = "--shared" in args
    paths = [Path(a) for a in args if a.endswith(".yaml")] or sorted((ROOT / "dqgen" / "specs").glob("*.yaml"))
    if shared:
        print(" ".join(str(p) for p in paths if "__shared__" in Kernel(tail_spec(p)).source))
        return
    print(f"{launch_all(paths)} entry points launched, every output bit-exact")


if __name__ == "__main__":
    # only as a script, before torch's first allocation (the quick tier's tests import it after CUDA started)
    exact_allocations()  # memcheck then sees each tensor's own end
    main(sys.argv[1:])
