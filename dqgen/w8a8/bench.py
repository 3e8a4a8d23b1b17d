"""`python -m dqgen.w8a8.bench`: the activation-quantization kernel against a torch eager implementation of the
same arithmetic, as a share of the device's copy bandwidth measured in the same run.

Each time is one call after an L2 flush, median (dqgen.run.timing.single_call_us). Bytes moved: x read once
(2 bytes an element), q written (1 byte), the row scales written (4 bytes a row), the smoothing factors read
(4 bytes a column). ``exact``: the torch implementation's codes and scales equal the kernel's bit for bit."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SHAPES: tuple[tuple[int, int], ...] = ((1, 4096), (16, 4096), (4096, 4096), (8192, 8192), (16384, 14336))
#: Bytes of the copy that sets the ceiling (read + write counted): far beyond L2.
COPY_BYTES = 1 << 30
DEFAULT_OUT = Path("docs/bench/w8a8_act.json")


def torch_eager(x: Any, smooth: Any | None) -> tuple[Any, Any]:
    """The documented arithmetic in torch ops (dqgen.w8a8.reference, operation for operation)."""
    import torch

    xf = x.float()
    if smooth is not None:
        xf = xf * torch.reciprocal(smooth.float())
    amax = xf.abs().amax(dim=1)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    q = torch.round(xf * inv[:, None]).clamp_(-128, 127).to(torch.int8)
    return q, amax / 127.0


def copy_gbps(time_us: Callable[[Callable[[], Any]], float]) -> float:
    import torch

    src = torch.empty(COPY_BYTES // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src))
    return 2 * src.numel() / us / 1e3


def run(shapes: Sequence[tuple[int, int]] = SHAPES, out: Path | None = DEFAULT_OUT) -> dict[str, Any]:
    import torch

    from ..run.timing import method, single_call_us
    from .op import quantize_activations

    copy = copy_gbps(single_call_us)
    print(f"copy bandwidth {copy:.0f} GB/s (read + write)", flush=True)
    rows: list[dict[str, Any]] = []
    for m, k in shapes:
        x = (torch.randn(m, k, device="cuda") * torch.rand(m, 1, device="cuda") * 10).half()
        x[:, torch.randint(0, k, (max(1, k // 64),))] *= 50  # outlier channels
        smooth = torch.rand(k, device="cuda") * 4 + 0.25
        for label, s in (("", None), (" + smooth", smooth)):
            ours = quantize_activations(x, s)
            theirs = torch_eager(x, s)
            exact = bool(torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1]))
            nbytes = 3 * m * k + 4 * m + (4 * k if s is not None else 0)
            for impl, fn in (
                (f"dqgen{label}", lambda x=x, s=s: quantize_activations(x, s)),
                (f"torch eager{label}", lambda x=x, s=s: torch_eager(x, s)),
            ):
                us = single_call_us(fn)
                gbps = nbytes / us / 1e3
                row = {
                    "impl": impl,
                    "M": m,
                    "K": k,
                    "dtype": "fp16",
                    "us": round(us, 2),
                    "GBps": round(gbps, 1),
                    "pct_copy": round(100 * gbps / copy, 1),
                    "exact": exact,
                }
                rows.append(row)
                print(
                    f"{impl:22s} {m:6d} x {k:6d}  {us:9.2f} us  {gbps:7.0f} GB/s  {row['pct_copy']:5.1f}% of copy"
                    f"  exact {exact}",
                    flush=True,
                )
        del x
        torch.cuda.empty_cache()
    result = {
        "device": torch.cuda.get_device_name(),
        "method": method(),
        "copy_GBps": round(copy, 1),
        "bytes": "x read (2 B/element) + q written (1 B/element) + scales (4 B/row) + smoothing factors (4 B/column)",
        "rows": rows,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    run(out=Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
