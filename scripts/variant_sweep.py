"""Time every aligned kernel variant of some specs at some shapes (GB/s, one call after an L2 flush,
median: dqgen.run.timing), to choose launch rules.
Usage on a GPU machine: python scripts/variant_sweep.py awq_int4_fp16 8192x28672 3584x37888"""

from __future__ import annotations

import sys

import torch

from dqgen.core.spec import load_spec
from dqgen.kernels.dequant import kernel_name, variants
from dqgen.run.inputs import make_inputs
from dqgen.run.runtime import Kernel
from dqgen.run.timing import single_call_us
from dqgen.tools.bench import bytes_moved


def main(args: list[str]) -> None:
    specs = [a for a in args if a.endswith(".yaml")]
    shapes = [tuple(int(v) for v in a.split("x")) for a in args if "x" in a and not a.endswith(".yaml")]
    for path in specs:
        k = Kernel(load_spec(path))
        for K, N in shapes:
            inputs = make_inputs(k.spec, K, N, 0)
            out = torch.empty((K, N), dtype=inputs[1].dtype, device="cuda")
            nbytes = bytes_moved(k.spec, *inputs, K, N)
            row = []
            for v in variants(k.spec):
                if not v.aligned:
                    continue
                launch = k.prepare(*inputs, out=out, variant=v)
                us = single_call_us(lambda launch=launch: launch(torch.cuda.current_stream()))
                row.append((nbytes / us / 1e3, kernel_name(k.spec, v)))
            row.sort(reverse=True)
            print(f"{k.spec.name} {K}x{N}: " + ", ".join(f"{name.split('_v', 1)[1]} {gbps:.0f}" for gbps, name in row))


if __name__ == "__main__":
    main(sys.argv[1:])
