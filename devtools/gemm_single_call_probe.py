"""Where a single eager call of the Hopper GEMM path goes (issue 23): host time a call, the GPU time after an L2
flush of the eager call and of the same launch bound once, and a profile of the host's share.

    python devtools/gemm_single_call_probe.py [--shapes 4096x4096,...] [--ms 32,64] [--out F.json]

Per (K x N, M), AWQ int4 g128 fp16, in one process:
- ``host_us``: ``k.matmul(x, w)`` eager, the median of 2000 calls each timed alone on the host (host_overhead.py's
  time_round: the GPU synchronized every 1000 calls outside the timed region), beside ``x @ W`` on the dense weight,
  and the modules' eager forward: ``QuantLinear(x)`` beside ``nn.Linear(x)`` (its own weight, quantized);
- ``flushed_us``: one call after an L2 flush (dqgen.run.timing.single_call_us) of the eager ``k.matmul``, of the
  GEMM's launch bound once (gemm90.bind90, the dispatch's choice) and called alone, and of ``x @ W``: where the
  eager figure exceeds the bound one's, the host's time per call outran the flush's on the GPU;
- the top of a cProfile of 300 eager calls of the first case (``--profile``).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import sys
from pathlib import Path
from typing import Any

from host_overhead import time_round  # devtools/ (this script's folder is first on sys.path)

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def call_on_current_stream(torch: Any, launch: Any) -> None:
    from dqgen.run.device import stream_handle

    launch(stream_handle(torch.cuda.current_stream()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096x4096,4096x6144,4096x1024")
    ap.add_argument("--ms", default="32,64,128")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    import torch

    import dqgen
    from dqgen.nn.linear import QuantLinear
    from dqgen.run import dispatch, gemm90
    from dqgen.run.inputs import make_inputs
    from dqgen.run.timing import single_call_us

    k = dqgen.compile("awq_int4_fp16")
    sync = torch.cuda.synchronize
    rows: list[dict[str, Any]] = []
    profiled = False
    for shape in a.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        q, s, z = make_inputs(k.spec, K, N, 0)
        w = k.pack_matmul(q, s, z)
        W = k(q, s, z)
        # the modules a transformers user calls: nn.Linear on the dense weight, QuantLinear of it (eager forward)
        lin = torch.nn.Linear(K, N, bias=False, dtype=torch.float16, device="cuda")
        layer = QuantLinear.from_linear(lin, k.spec, group_size=128)
        for M in (int(m) for m in a.ms.split(",")):
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            out = torch.empty(M, N, dtype=torch.float16, device="cuda")
            eager = functools.partial(k.matmul, x, w)
            dense = functools.partial(torch.matmul, x, W)
            gw = dispatch.beside(w)
            bound = launch = None
            if gw is not None:
                launch = gemm90.bind90(k.spec, gw, x.data_ptr(), K, M, None, out, None, None)
                bound = functools.partial(call_on_current_stream, torch, launch)
            for _ in range(50):
                eager(), dense()
                if bound is not None:
                    bound()
            sync()
            ref = eager().float()
            if bound is not None:
                bound()
                sync()
            row: dict[str, Any] = {"K": K, "N": N, "M": M, "bound": None if launch is None else launch.kernel.name}
            # the same bits where the eager call ran the Hopper GEMM's launch (the dispatch may run another path)
            row["bound_equals_eager"] = None if bound is None else bool(torch.equal(out.float(), ref))
            row["grid"] = None if launch is None else launch.grid[0]
            row["cluster"] = None if launch is None else launch.cluster
            modules = (("QuantLinear(x)", functools.partial(layer, x)), ("nn.Linear(x)", functools.partial(lin, x)))
            hosted = (("dqgen eager", eager), ("x @ W dense", dense), *modules)
            row["host_us"] = {name: time_round(fn, 2000, sync) for name, fn in hosted}
            fl: dict[str, list[float]] = {}
            for _ in range(2):
                fl.setdefault("dqgen eager", []).append(single_call_us(eager))
                if bound is not None:
                    fl.setdefault("dqgen bound once", []).append(single_call_us(bound))
                fl.setdefault("x @ W dense", []).append(single_call_us(dense))
            row["flushed_us"] = {name: [round(v, 2) for v in vs] for name, vs in fl.items()}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if a.profile and not profiled and bound is not None:
                profiled = True
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(300):
                    eager()
                prof.disable()
                sync()
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
                print(buf.getvalue()[:6000], flush=True)
    doc = {"gpu": torch.cuda.get_device_name(), "what": __doc__.splitlines()[0], "rows": rows}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
