"""`python -m dqgen.w8a8.bench`: the activation-quantization kernel against a torch eager implementation of the
same arithmetic, as a share of the device's copy bandwidth measured in the same run.

Each time is one call after an L2 flush, median (dqgen.run.timing.single_call_us). Bytes moved: x read once
(2 bytes an element), q written (1 byte), the row scales written (4 bytes a row), the smoothing factors read
(4 bytes a column). ``exact``: the torch implementation's codes and scales equal the kernel's bit for bit."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.files import write_json
from ..kernels.act_quant import ActQuantConfig, Hold, SmoothIn

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
    # tensor / tensor: torch turns a division by a Python scalar into a multiplication by its reciprocal
    c127 = torch.full_like(amax, 127.0)
    inv = torch.where(amax > 0, c127 / amax, torch.zeros_like(amax))
    q = torch.round(xf * inv[:, None]).clamp_(-128, 127).to(torch.int8)
    return q, amax / c127


def copy_gbps(time_us: Callable[[Callable[[], Any]], float]) -> float:
    import torch

    src = torch.empty(COPY_BYTES // 2, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src))
    return 2 * src.numel() / us / 1e3


def _bound_launch(x: Any, smooth: Any | None, v: ActQuantConfig) -> Callable[[], None]:
    """A launch of variant ``v`` on x with outputs of its own, bound once: a forced placement's row times its kernel
    as the default row does through the signature cache, not the checked per-call path (whose host time showed
    through the L2 flush at small M, run to run differently)."""
    import torch

    from ..run import device as dev
    from .kernel import loaded

    rows, k = x.shape
    q = torch.empty((rows, k), dtype=torch.int8, device=x.device)
    scales = torch.empty((rows,), dtype=torch.float32, device=x.device)
    ordinal = x.device.index if x.device.index is not None else torch.cuda.current_device()
    smooth_ptr = None if smooth is None else smooth.data_ptr()
    stride = x.stride(0) if rows > 1 else k
    launch = loaded(v, ordinal).bind(x.data_ptr(), stride, rows, smooth_ptr, None, q.data_ptr(), scales.data_ptr())
    stream = dev.torch_raw_stream(torch, ordinal)

    def run(outputs: tuple[Any, Any] = (q, scales)) -> None:  # the default keeps the outputs it writes alive
        launch(stream)

    return run


#: (label, smoothing?, hold, smooth_in): the default variant first, then the alternatives the defaults were chosen
#: over (act_quant.DEFAULT_HOLD, act_quant.SMEM_MIN_ROWS).
VARIANTS: tuple[tuple[str, bool, Hold | None, SmoothIn | None], ...] = (
    ("dqgen", False, None, None),
    ("dqgen hold=f32", False, "f32", None),
    ("dqgen + smooth", True, None, None),
    ("dqgen + smooth, 1/s in regs", True, None, "regs"),
    ("dqgen + smooth, 1/s per element", True, None, "rcp"),
    ("dqgen + smooth, hold=f32", True, "f32", None),
)


def run(shapes: Sequence[tuple[int, int]] = SHAPES, out: Path | None = DEFAULT_OUT) -> dict[str, Any]:
    import torch

    from ..kernels.act_quant import choose_act_quant
    from ..run.timing import method, single_call_us
    from .op import _aligned, _launch, quantize_activations

    copy = copy_gbps(single_call_us)
    print(f"copy bandwidth {copy:.0f} GB/s (read + write)", flush=True)
    rows: list[dict[str, Any]] = []

    def record(impl: str, m: int, k: int, variant: str, us: float, nbytes: int, exact: bool) -> None:
        gbps = nbytes / us / 1e3
        row = {
            "impl": impl,
            "variant": variant,
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
            f"{impl:34s} {m:6d} x {k:6d} {us:9.2f} us {gbps:6.0f} GB/s {row['pct_copy']:5.1f}% exact {exact}",
            flush=True,
        )

    for m, k in shapes:
        x = (torch.randn(m, k, device="cuda") * torch.rand(m, 1, device="cuda") * 10).half()
        x[:, torch.randint(0, k, (max(1, k // 64),))] *= 50  # outlier channels
        smooth = torch.rand(k, device="cuda") * 4 + 0.25
        want = {False: torch_eager(x, None), True: torch_eager(x, smooth)}
        for impl, smoothed, hold, smooth_in in VARIANTS:
            s = smooth if smoothed else None
            nbytes = 3 * m * k + 4 * m + (4 * k if smoothed else 0)
            q, sc = _launch(x, s, None, hold, smooth_in)
            exact = bool(torch.equal(q, want[smoothed][0]) and torch.equal(sc, want[smoothed][1]))
            v = choose_act_quant("fp16", k, "fp32" if smoothed else None, False, _aligned(x, s, q), m, hold, smooth_in)
            if hold is None and smooth_in is None:  # the default: through the public call, as a user runs it
                us = single_call_us(functools.partial(quantize_activations, x, s))
            else:  # a forced placement: its launch bound once, as the public call's signature cache binds its own
                us = single_call_us(_bound_launch(x, s, v))
            record(impl, m, k, v.name, us, nbytes, exact)
        for smoothed in (False, True):
            s = smooth if smoothed else None
            nbytes = 3 * m * k + 4 * m + (4 * k if smoothed else 0)
            us = single_call_us(functools.partial(torch_eager, x, s))
            record("torch eager" + (" + smooth" if smoothed else ""), m, k, "", us, nbytes, True)
        del x, want
        torch.cuda.empty_cache()
    result = {
        "device": torch.cuda.get_device_name(),
        "method": method(),
        "copy_GBps": round(copy, 1),
        "bytes": "x read (2 B/element) + q written (1 B/element) + scales (4 B/row) + smoothing factors (4 B/column)",
        "exact": "the kernel's codes and scales equal torch_eager's (the same arithmetic in torch ops) bit for bit",
        "rows": rows,
    }
    if out is not None:
        write_json(out, result)
    return result


if __name__ == "__main__":
    run(out=Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
