"""The numpy reference of the activation quantization: the same float32 operations, in the same order, as the
generated kernel (templates/act_quant.cu.j2), so that the two agree bit for bit.

  xf        = float32(x) * (1 / float32(smooth))   the conversion exact, 1/s and the product rounded to nearest
  amax      = max_k |xf|                          NaN passed over (CUDA's fmaxf)
  row_scale = amax / 127                          dynamic; static: the given scale, rounded once to float32
  inv       = 127 / amax if amax > 0 else 0       dynamic; static: 1 / scale
  q         = clamp(rint(xf * inv), -128, 127)    rint half-to-even; a NaN product gives 0

Multiplying by a reciprocal instead of dividing each element is what lets the kernel keep the smoothing
reciprocals in registers across rows; it can differ from a true division in the last bit of xf or xf / scale,
which is why the reference does the same and not the division."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

F32 = np.float32


def _f32(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float32)  # fp16 / bf16 -> fp32 is exact


def smoothed(x: Any, smooth: Any | None) -> np.ndarray:
    """xf: float32 x [M, K], times the rounded reciprocals of ``smooth`` [K] when given."""
    xf = _f32(x)
    if smooth is None:
        return xf
    with np.errstate(divide="ignore", over="ignore"):
        inv_s = F32(1) / _f32(smooth)
    with np.errstate(over="ignore", invalid="ignore"):
        return xf * inv_s[None, :]


def codes(xf: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """clamp(rint(xf * inv[:, None]), -128, 127) as int8, NaN products to 0."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.rint(xf * inv.astype(np.float32)[:, None])
        return np.where(np.isnan(v), 0, np.clip(v, -128, 127)).astype(np.int8)


def quantize(x: Any, smooth: Any | None = None, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(q int8 [M, K], row_scale float32 [M]) of x [M, K] (float16 or ml_dtypes bfloat16, any float array)."""
    s = None if scale is None else static_scale(scale)  # refused before any arithmetic
    xf = smoothed(x, smooth)
    rows = xf.shape[0]
    if s is not None:
        return codes(xf, np.full(rows, F32(1) / s, np.float32)), np.full(rows, s, np.float32)
    amax = np.fmax.reduce(np.abs(xf), axis=1, initial=F32(0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, F32(127) / amax, F32(0)).astype(np.float32)
    return codes(xf, inv), (amax / F32(127)).astype(np.float32)


def static_scale(scale: Any) -> np.float32:
    """``scale`` rounded to float32, as the kernel gets it: a ValueError unless it is a real number whose float32 is
    positive and finite with a finite reciprocal (0, -1, NaN or inf would quantize every row to garbage, and the
    kernel path, dqgen.w8a8.op, refuses the same values)."""
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise ValueError(f"scale: expected a real number (the static scale) or None, got {type(scale).__name__}")
    with np.errstate(over="ignore", divide="ignore"):
        try:
            s = F32(scale)
        except OverflowError:  # an int past float64's range
            s = F32(math.inf)
        inv = F32(1) / s if s else F32(math.inf)
    if not (math.isfinite(s) and s > 0 and math.isfinite(inv)):
        raise ValueError(f"scale: expected a positive finite float32 with a finite reciprocal, got {scale!r}")
    return s
