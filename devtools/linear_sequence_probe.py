"""Where the e2e graph's per-call cost at small M goes: the Llama-3-8B linears x layers (dqgen.tools.bench_linears's
weights) in three CUDA graphs per implementation: the model's order, the same calls sorted by shape, and each shape
alone; each graph's µs, and from torch.profiler over replays each kernel's median duration and the median gap before
it (what a mixed sequence costs beyond the kernels themselves).

    python devtools/linear_sequence_probe.py --ms 1,16 --impls "dqgen,torch int4" --out probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ms", default="1")
    ap.add_argument("--impls", default="dqgen,torch int4")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from dqgen.core.spec import load_spec
    from dqgen.run.inputs import make_inputs
    from dqgen.run.runtime import Kernel
    from dqgen.tools.bench_linears import LINEARS, SPEC, _build, graph_replays_us

    spec = load_spec(SPEC)
    kernel: Any = Kernel(spec)
    weights: list[dict[str, Any]] = []
    for layer in range(args.layers):
        for i, (name, K, N) in enumerate(LINEARS):
            q, s, z = make_inputs(spec, K, N, 1000 * layer + i)
            W = kernel(q, s, z)
            weights.append({"name": name, "K": K, "N": N, "q": q, "s": s, "z": z, "W_nk": W.t().contiguous()})
    names = [n for n, _, _ in LINEARS]
    orders: dict[str, list[int]] = {"model": list(range(len(weights)))}
    orders["sorted"] = sorted(orders["model"], key=lambda i: (names.index(weights[i]["name"]), i))
    for n in names:
        orders[n] = [i for i in orders["model"] if weights[i]["name"] == n]
    out: list[dict[str, Any]] = []
    for impl in [s.strip() for s in args.impls.split(",") if s.strip()]:
        calls = _build(impl, weights)
        dtype = torch.bfloat16 if impl == "torch int4" else torch.float16
        for M in [int(m) for m in args.ms.split(",")]:
            xs = {K: torch.randn((M, K), dtype=dtype, device="cuda") for K in {w["K"] for w in weights}}
            graphs: dict[str, tuple[Any, Callable[[], float]]] = {}
            for what, order in orders.items():
                pairs = [(xs[weights[i]["K"]], calls[i]) for i in order]

                def run(pairs: list[tuple[Any, Callable[[Any], Any]]] = pairs) -> None:
                    for x, fn in pairs:
                        fn(x)

                graphs[what] = graph_replays_us(run, args.replays)
            rounds = [{w: t() for w, (_, t) in graphs.items()} for _ in range(2)]
            us = {w: min(r[w] for r in rounds) for w in graphs}
            alone = sum(us[n] for n in names)
            print(f"{impl} M={M}: model {us['model']:.1f} sorted {us['sorted']:.1f} sum of shapes alone {alone:.1f}")
            print("   " + "  ".join(f"{n} {us[n]:.1f}" for n in names))
            kernels: dict[str, Any] = {}
            for what in ("model", "sorted"):
                graph = graphs[what][0]
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        graph.replay()
                    torch.cuda.synchronize()
                evs = sorted(
                    (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start,
                )
                per = len(evs) // 20
                if per == 0 or len(evs) % 20:
                    print(f"   {what}: {len(evs)} device events over 20 replays, not a whole number a replay")
                    continue
                dur: dict[int, list[float]] = defaultdict(list)
                gap: dict[int, list[float]] = defaultdict(list)
                for r in range(20):
                    seq = evs[r * per : (r + 1) * per]
                    for j, e in enumerate(seq):
                        dur[j].append(e.time_range.end - e.time_range.start)
                        if j:
                            gap[j].append(e.time_range.start - seq[j - 1].time_range.end)
                rows = []
                for j in range(per):
                    e = evs[j]
                    rows.append(
                        {
                            "kernel": e.name[:80],
                            "us": statistics.median(dur[j]),
                            "gap_before": statistics.median(gap[j]) if j else 0.0,
                        }
                    )
                kernels[what] = rows
                print(
                    f"   {what}: {per} kernels a replay, kernel time {sum(r['us'] for r in rows):.1f}, "
                    f"gaps {sum(r['gap_before'] for r in rows):.1f}"
                )
                for r in rows[: 2 * len(names) + 2]:
                    print(f"      {r['us']:7.2f} gap {r['gap_before']:5.2f}  {r['kernel']}")
            out.append({"impl": impl, "M": M, "us": us, "kernels": kernels, "gpu": torch.cuda.get_device_name()})
            del graphs
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
