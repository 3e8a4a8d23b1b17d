"""Host time of one eager call of every dqgen entry point beside torch's own ops (issue 22, deliverable 4): a call
must cost at most 1.2x the host time of ``torch.ops.aten._weight_int4pack_mm`` on the same host.

In one process, on a tiny shape (K = N = 256, M = 1: the GPU's time is far below the host's), each row is timed
for ``--calls`` calls per round, every call on its own ``time.perf_counter_ns`` pair (the GPU synchronized every
1000 calls, outside the timed region, so that the launch queue never fills); a round's figure is the median of
its calls, and the rows take turns round by round (``--rounds``), so that a drift of the host's clocks reaches
every row alike. A row's figure is the median of its rounds; ``ratio_to_torch_int4`` divides it by the reference
row's. Writes ``docs/bench/host_overhead.json`` (or ``--out``) whole or not at all, and prints a markdown table.

Run on the GPU host: ``python devtools/host_overhead.py [--calls N] [--rounds R] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: this checkout's dqgen
    sys.path.insert(0, str(ROOT))

#: The row every other is divided by.
REFERENCE = "torch int4pack_mm (bf16)"
#: A dqgen entry point meets the issue's bound at this ratio or below.
BOUND = 1.2
#: The torch rows (the reference and context); every other row is a dqgen entry point held to BOUND.
TORCH_ROWS = (REFERENCE, "F.linear", "torch.mul", "nn.Linear(x)")
K = N = 256
DEFAULT_OUT = ROOT / "docs" / "bench" / "host_overhead.json"


def summarize(rounds: dict[str, list[float]], reference: str = REFERENCE) -> list[dict[str, Any]]:
    """One row per impl, in the order given: the median of its rounds' figures (us per call), its ratio to the
    reference row's median, and the rounds themselves."""
    if reference not in rounds or not rounds[reference]:
        raise ValueError(f"rounds: no figures for the reference row {reference!r}")
    ref = statistics.median(rounds[reference])
    rows = []
    for impl, figures in rounds.items():
        if not figures:
            raise ValueError(f"rounds: no figures for {impl!r}")
        us = statistics.median(figures)
        rows.append(
            {
                "impl": impl,
                "us_per_call": round(us, 2),
                "ratio_to_torch_int4": round(us / ref, 2),
                "us_rounds": [round(f, 2) for f in figures],
            }
        )
    return rows


def within_bound(row: dict[str, Any]) -> bool | None:
    """Whether a dqgen row meets the bound (None for the torch rows, which are not held to it)."""
    if row["impl"] in TORCH_ROWS:
        return None
    return bool(row["ratio_to_torch_int4"] <= BOUND)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table (us per call, the ratio, and whether a dqgen row is within the bound)."""
    lines = [
        f"| impl | us per call | ratio to torch int4 | within {BOUND}x |",
        "|---|---|---|---|",
    ]
    for row in rows:
        ok = within_bound(row)
        mark = "" if ok is None else ("yes" if ok else "no")
        lines.append(f"| {row['impl']} | {row['us_per_call']:.1f} | {row['ratio_to_torch_int4']:.2f} | {mark} |")
    return "\n".join(lines)


def record(header: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {**header, "rows": rows}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def header(torch: Any, calls: int, rounds: int) -> dict[str, Any]:
    return {
        "host": f"{platform.node()} ({_cpu_model()})",
        "gpu": torch.cuda.get_device_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "shape": f"M=1, K={K}, N={N}",
        "method": (
            f"{calls} calls per round, each timed alone (time.perf_counter_ns), GPU synchronized every 1000 calls "
            f"outside the timed region; a round's figure is the median of its calls; {rounds} rounds, the rows in "
            "turn each round; us_per_call is the median of the rounds. QuantLinear, W8A8Linear and nn.Linear are "
            "called as modules (layer(x): nn.Module.__call__ included)"
        ),
    }


def time_round(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> float:
    """Median microseconds of one ``fn()`` over ``calls`` calls, each timed alone."""
    ns = []
    clock = time.perf_counter_ns
    for i in range(calls):
        t0 = clock()
        fn()
        ns.append(clock() - t0)
        if i % 1000 == 999:
            sync()
    sync()
    return statistics.median(ns) / 1000.0


def _int4pack(torch: Any) -> Callable[[], Any]:
    """torch's int4 weight-only matmul on bf16 (the reference): the packing API of torch >= 2.5 (uint8 [N, K/2]),
    else the older int32 [N, K/8] one; the first inner-k-tiles count this torch takes."""
    gs = 128
    x = torch.randn(1, K, dtype=torch.bfloat16, device="cuda")
    sz = torch.randn(K // gs, N, 2, dtype=torch.bfloat16, device="cuda")
    op = torch.ops.aten._weight_int4pack_mm
    words = {
        "uint8": lambda: torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda"),
        "int32": lambda: torch.randint(0, 2**31 - 1, (N, K // 8), dtype=torch.int32, device="cuda"),
    }
    errors = []
    for name, make in words.items():
        for inner in (8, 4, 2):
            try:
                packed = torch.ops.aten._convert_weight_to_int4pack(make(), inner)
                op(x, packed, gs, sz)
            except RuntimeError as e:
                errors.append(f"{name}/{inner}: {str(e).splitlines()[0]}")
                continue
            return lambda: op(x, packed, gs, sz)
    raise RuntimeError("torch int4pack_mm: no packing of this torch worked: " + "; ".join(errors))


def cases(torch: Any) -> dict[str, Callable[[], Any]]:
    """Every timed call, by row name, its tensors made once."""
    import itertools

    import torch.nn.functional as F

    import dqgen
    from dqgen.core.spec import load_spec
    from dqgen.nn.linear import QuantLinear
    from dqgen.nn.w8a8_linear import W8A8Linear
    from dqgen.run.inputs import make_inputs
    from dqgen.w8a8.matmul_op import matmul as w8a8_matmul
    from dqgen.w8a8.op import quantize_activations

    cuda = torch.device("cuda")
    spec = load_spec("awq_int4_fp16")
    q, s, z = make_inputs(spec, K, N, seed=0)
    k = dqgen.compile(spec)
    out_w = torch.empty((K, N), dtype=torch.float16, device=cuda)
    w = k.pack_matmul(q, s, z)
    x = torch.randn(1, K, dtype=torch.float16, device=cuda) * 0.1
    xs = itertools.cycle([torch.randn(1, K, dtype=torch.float16, device=cuda) * 0.1 for _ in range(8)])
    layer = QuantLinear(spec, q, s, z)
    lin = torch.nn.Linear(K, N, dtype=torch.float16, device=cuda)
    w8 = W8A8Linear.from_linear(lin)
    xq, x_scale = quantize_activations(x)
    wq, w_scale = w8.weight, w8.weight_scale
    a, b = torch.randn(1, K, device=cuda), torch.randn(1, K, device=cuda)
    return {
        REFERENCE: _int4pack(torch),
        "F.linear": lambda: F.linear(x, lin.weight),
        "torch.mul": lambda: torch.mul(a, b),
        "nn.Linear(x)": lambda: lin(x),
        "dequantize k(q, s, z, out=w)": lambda: k(q, s, z, out=out_w),
        "k.matmul(x, w)": lambda: k.matmul(x, w),
        "k.matmul(x, w), 8 x tensors in turn": lambda: k.matmul(next(xs), w),
        "k.matmul(x, q, s, z)": lambda: k.matmul(x, q, s, z),
        "QuantLinear.forward": lambda: layer(x),
        "W8A8Linear.forward": lambda: w8(x),
        "w8a8.matmul": lambda: w8a8_matmul(xq, x_scale, wq, w_scale),
        "w8a8.quantize_activations": lambda: quantize_activations(x),
    }


def measure(calls: int, rounds: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    import torch

    fns = cases(torch)
    for fn in fns.values():  # warm-up: compiles, packs, signature tables
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    figures: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            figures[name].append(time_round(fn, calls, torch.cuda.synchronize))
    return header(torch, calls, rounds), summarize(figures)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10_000, help="calls per round and row (default 10^4)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON record (default {DEFAULT_OUT})")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        ap.error("--calls and --rounds must be at least 1")
    from dqgen.core.files import write_json

    head, rows = measure(args.calls, args.rounds)
    write_json(args.out, record(head, rows))
    print(f"{head['gpu']}, {head['host']}, torch {head['torch']}, {head['date']}")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
