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
    return dynamic(xf)


def dynamic(xf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q, row_scale) of float32 xf [M, K] with the dynamic per-row scale max|xf| / 127."""
    amax = np.fmax.reduce(np.abs(xf), axis=1, initial=F32(0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, F32(127) / amax, F32(0)).astype(np.float32)
    return codes(xf, inv), (amax / F32(127)).astype(np.float32)


# ----------------------------------------------------------------------------------- fused producers
# The ops that make a linear's input, fused in front of the quantizer (templates/act_quant.cu.j2's prologues):
# HF Llama's RMSNorm and SiLU-and-mul in the model's dtype, each cast of HF's float32 opmath to that dtype kept.


def _rx(a: np.ndarray, dtype: Any) -> np.ndarray:
    """float32 ``a`` rounded to the model's 16-bit ``dtype`` (nearest-even) and back."""
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dtype).astype(np.float32)


def block_sum_of_squares(xf: np.ndarray, threads: int) -> np.ndarray:
    """Per row of float32 xf [M, K] (K a multiple of 8), sum(xf^2) in float32 in the kernel's order for a block of
    ``threads``: thread t sums its vectors t, t + threads, ... element by element in column order; the 32 lanes of
    a warp then add in a butterfly (lane l takes lane l ^ 16, ^ 8, ... ^ 1); the warps' sums add in warp order."""
    m, k = xf.shape
    chunks = -(-(k // 8) // threads)
    v = np.zeros((m, chunks * threads * 8), np.float32)
    v[:, :k] = xf
    v = v.reshape(m, chunks, threads, 8)
    s = np.zeros((m, threads), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for c in range(chunks):
            for e in range(8):
                s = s + v[:, c, :, e] * v[:, c, :, e]
        lanes = s.reshape(m, threads // 32, 32)
        idx = np.arange(32)
        for off in (16, 8, 4, 2, 1):
            lanes = lanes + lanes[:, :, idx ^ off]
        total = lanes[:, 0, 0]
        for w in range(1, threads // 32):
            total = total + lanes[:, w, 0]
    return total.astype(np.float32)


def rmsnorm(x: Any, gamma: Any, eps: float, threads: int) -> np.ndarray:
    """float32 values of HF LlamaRMSNorm(x) in x's dtype: rx(gamma * rx(x * r)), r = 1 / sqrt(ss / K + eps) with ss
    the kernel's float32 sum of squares (``block_sum_of_squares``; ``threads``: the kernel's block size)."""
    x = np.asarray(x)
    xf = _f32(x)
    ss = block_sum_of_squares(xf, threads)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        r = F32(1) / np.sqrt(ss / F32(xf.shape[1]) + F32(eps))
        return _rx(_f32(gamma)[None, :] * _rx(xf * r[:, None], x.dtype), x.dtype)


def silu_mul(gate_up: Any) -> np.ndarray:
    """float32 values of HF LlamaMLP's act_fn(gate) * up in the input's dtype, gate_up [M, 2K] = [gate | up]:
    rx(rx(g / (1 + exp(-g))) * u). numpy's float32 exp and CUDA's expf may differ in the last bit, so a kernel's
    codes can differ from these by one where a value sits on a rounding boundary."""
    a = np.asarray(gate_up)
    k = a.shape[1] // 2
    g, u = _f32(a[:, :k]), _f32(a[:, k:])
    with np.errstate(over="ignore", invalid="ignore"):
        s = _rx(g / (F32(1) + np.exp(-g)), a.dtype)
        return _rx(s * u, a.dtype)


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
