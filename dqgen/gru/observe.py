"""The calibration pass: the float haste GRU run once over a batch, keeping only the min and max of every tensor
the integer cell quantizes (no per-step trace). One body for numpy arrays and torch tensors (CPU or GPU): the
operations used (``@``, slicing, ``exp``, ``tanh``, ``minimum``, ``.min()``) mean the same in both, so the torch
path on the module's device computes what the numpy path computes, in float64, at the speed of a forward pass.

Why it is fast where ``floatref.gru_float`` + ``Trace`` was slow (hidden 1024, T 50, N 64 on one CPU core: 4.9 s):
W·x for all steps was ``np.einsum("tnc,gc->tng")``, which numpy runs as a plain loop (4.2 s of the 4.9); here it
is one BLAS matmul. The trace also kept every step's tensors to concatenate them at the end; here each step
folds into running minima and maxima (on the device for torch: one synchronisation per batch, at the end).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

Ranges = dict[str, tuple[float, float]]

# The tensors whose ranges calibration needs, besides x and h (docs/gru.md's table).
STEP_TENSORS = ("rh_z", "rh_r", "rh_g", "pre_z", "pre_r", "pre_g", "rrh", "old", "new")


def _namespace(a: Any) -> Any:
    """numpy for numpy arrays, torch for torch tensors (torch is not imported here: the numpy core runs without
    it, and a torch tensor can only exist where torch was imported already)."""
    if isinstance(a, np.ndarray):
        return np
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        return torch
    raise TypeError(f"expected a numpy array or a torch tensor, got {type(a).__name__}")


def _sigmoid(xp: Any, v: Any) -> Any:
    return 1.0 / (1.0 + xp.exp(-v))  # the formula floatref uses, so both round alike


class _RunningRange:
    """Running min / max per name, kept as 0-d arrays (device tensors for torch: no synchronisation per step)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.lo: dict[str, Any] = {}
        self.hi: dict[str, Any] = {}

    def see(self, name: str, v: Any) -> None:
        lo, hi = v.min(), v.max()
        if name in self.lo:
            lo, hi = self.xp.minimum(self.lo[name], lo), self.xp.maximum(self.hi[name], hi)
        self.lo[name], self.hi[name] = lo, hi

    def result(self) -> Ranges:
        names = list(self.lo)
        both = self.xp.stack([self.lo[n] for n in names] + [self.hi[n] for n in names])
        values = [float(v) for v in both.tolist()]  # one transfer from the device
        return {n: (values[i], values[len(names) + i]) for i, n in enumerate(names)}


def float_direction(
    x: Any,
    h0: Any,
    w: Any,
    r: Any,
    bx: Any,
    br: Any,
    active: Sequence[int] | None = None,
) -> tuple[Any, Ranges]:
    """The float haste GRU over x [T, N, C] from h0 [N, H] with W [3H, C], R [3H, H], bx/br [3H] (haste order, all
    numpy or all torch on one device) -> (h [T, N, H], the min/max of x, h (h0 and every output) and every
    intermediate of ``STEP_TENSORS`` and ``wx_z/r/g``).

    ``active``: per step, how many leading rows are real (rows sorted by length, longest first, as a
    PackedSequence's batch_sizes say); the other rows are padding, left out of every range and of the
    recurrence (their outputs are 0). None: every row is real at every step.
    """
    xp = _namespace(x)
    steps, rows, c = x.shape
    hsz = h0.shape[1]
    if active is None:
        active = [rows] * steps
    if len(active) != steps or any(not 0 < a <= rows for a in active) or list(active) != sorted(active, reverse=True):
        raise ValueError(f"active: expected {steps} non-increasing row counts in [1, {rows}], got {list(active)}")
    seen = _RunningRange(xp)
    wx_all = (x.reshape(steps * rows, c) @ w.T + bx).reshape(steps, rows, 3 * hsz)
    out = np.zeros((steps, rows, hsz), dtype=x.dtype) if xp is np else x.new_zeros((steps, rows, hsz))
    full = all(a == rows for a in active)
    for gi, name in enumerate("zrg"):
        part = wx_all[:, :, gi * hsz : (gi + 1) * hsz]
        if full:
            seen.see(f"wx_{name}", part)
        else:
            for t, a in enumerate(active):
                seen.see(f"wx_{name}", part[t, :a])
    seen.see("h", h0)
    h = h0
    for t, a in enumerate(active):
        h = h[:a]
        wx = wx_all[t, :a]
        rh = h @ r.T + br
        pre_z = wx[:, :hsz] + rh[:, :hsz]
        pre_r = wx[:, hsz : 2 * hsz] + rh[:, hsz : 2 * hsz]
        z, rg = _sigmoid(xp, pre_z), _sigmoid(xp, pre_r)
        rrh = rg * rh[:, 2 * hsz :]
        pre_g = wx[:, 2 * hsz :] + rrh
        g = xp.tanh(pre_g)
        old, new = z * h, (1.0 - z) * g
        for gi, name in enumerate("zrg"):
            seen.see(f"rh_{name}", rh[:, gi * hsz : (gi + 1) * hsz])
        for name, v in (("pre_z", pre_z), ("pre_r", pre_r), ("pre_g", pre_g), ("rrh", rrh), ("old", old)):
            seen.see(name, v)
        seen.see("new", new)
        h = old + new
        seen.see("h", h)
        out[t, :a] = h
    if full:
        seen.see("x", x)
    else:
        for t, a in enumerate(active):
            seen.see("x", x[t, :a])
    return out, seen.result()
