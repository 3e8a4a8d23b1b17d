"""Time every aligned kernel variant of some specs at some shapes (GB/s), to choose launch rules.
Usage on a GPU machine: python scripts/variant_sweep.py awq_int4_fp16 8192x28672 3584x37888"""

from __future__ import annotations

import sys

import torch

from dqgen.bench import bytes_moved, make_inputs, time_us
from dqgen.render import kernel_name, variants
from dqgen.runtime import Kernel
from dqgen.spec import load_spec


def main(args: list[str]) -> None:
    specs = [a for a in args if a.endswith(".yaml")]
    shapes = [tuple(int(v) for v in a.split("x")) for a in args if "x" in a and not a.endswith(".yaml")]
    for path in specs:
        k = Kernel(load_spec(path))
        for K, N in shapes:
            sets = [make_inputs(k.spec, K, N, i) for i in range(2)]
            outs = [torch.empty((K, N), dtype=sets[0][1].dtype, device="cuda") for _ in sets]
            nbytes = bytes_moved(k.spec, *sets[0], K, N)
            row = []
            for v in variants(k.spec):
                if not v.aligned:
                    continue
                ls = [k.prepare(*sets[i], out=outs[i], variant=v) for i in range(2)]
                us = time_us(lambda i: ls[i](torch.cuda.current_stream()), 2, reps=10, calls=20)
                row.append((nbytes / us / 1e3, kernel_name(k.spec, v)))
            row.sort(reverse=True)
            print(f"{k.spec.name} {K}x{N}: " + ", ".join(f"{name.split('_v', 1)[1]} {gbps:.0f}" for gbps, name in row))


if __name__ == "__main__":
    main(sys.argv[1:])
