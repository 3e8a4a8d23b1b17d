"""A stand-in for Kernel.pack_matmul / Kernel.matmul (issue 13's fused kernel, written apart), so QuantLinear and
`dqgen bench --matmul` can be exercised before it lands: x @ dequantize(W) with dqgen's dequantizer and torch.matmul.
Only installed where the tree has no Kernel.matmul and DQGEN_MATMUL_STANDIN=1; never a figure of dqgen's GEMV."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LABEL = "stand-in: dequantize + torch.matmul (not dqgen's GEMV)"


@dataclass
class StandInWeight:
    qweight: Any
    scales: Any
    zeros: Any
    g_idx: Any
    global_scale: Any


def _pack_matmul(
    self: Any, qweight: Any, scales: Any, zeros: Any = None, *, g_idx: Any = None, global_scale: Any = None
):
    return StandInWeight(qweight, scales, zeros, g_idx, global_scale)


def _matmul(self: Any, x: Any, w: Any, scales: Any = None, zeros: Any = None, *, g_idx: Any = None,
            global_scale: Any = None, bias: Any = None, out: Any = None) -> Any:  # fmt: skip
    if not isinstance(w, StandInWeight):
        w = StandInWeight(w, scales, zeros, g_idx, global_scale)
    y = x @ self(w.qweight, w.scales, w.zeros, g_idx=w.g_idx, global_scale=w.global_scale)
    if bias is not None:
        y = y + bias
    if out is not None:
        out.copy_(y)
        return out
    return y


_matmul.bench_label = LABEL  # type: ignore[attr-defined]


def install(setattr_fn: Any) -> None:
    """Put the stand-in on Kernel (``setattr_fn``: pytest's monkeypatch.setattr, or setattr)."""
    from dqgen.run.runtime import Kernel

    setattr_fn(Kernel, "pack_matmul", _pack_matmul)
    setattr_fn(Kernel, "matmul", _matmul)
