"""numpy references of the W8A8 GEMM (templates/w8a8_gemm.cu.j2) and of the per-channel weight quantization.

  int_product(x_q, w)  = x_q @ w.T in int64 (the exact value the kernel's int32 accumulation must equal)
  epilogue(acc, ...)   = the kernel's float32 operations in its order:
                           scale = float32(s_tok[m] * s_ch[n])
                           v     = float32(float32(acc) * scale)         int -> float32: round to nearest-even
                           v     = float32(v + float32(bias[n]))         with a bias
                           y     = out_dtype(v)                          round to nearest-even
  fp8_product(x_q, w)  = the e4m3 codes' exact values multiplied in float64 (fp8's tolerance reference)

quantize_weight: per output channel n, s_ch[n] = max|W[n]| / 127 (int8) or / 448 (e4m3), codes = W[n] / s_ch[n]
rounded to nearest-even (int8: clamped to [-127, 127]; e4m3: clamped to +-448, then rounded to e4m3); a zero row
gets scale 1 and codes 0."""

from __future__ import annotations

from typing import Any, Literal

import ml_dtypes
import numpy as np

F32 = np.float32
WeightKind = Literal["int8", "fp8"]
#: Largest magnitude of a code: int8 symmetric (so -W quantizes to -codes), e4m3fn's largest finite value.
QMAX: dict[str, float] = {"int8": 127.0, "fp8": 448.0}


def int_product(x_q: Any, w: Any) -> np.ndarray:
    """x_q [M, K] @ w[N, K].T, int64."""
    return np.asarray(x_q).astype(np.int64) @ np.asarray(w).astype(np.int64).T


def fp8_product(x_q: Any, w: Any) -> np.ndarray:
    """x_q [M, K] @ w[N, K].T of e4m3 codes (ml_dtypes.float8_e4m3fn arrays), float64 (exact products)."""
    return np.asarray(x_q).astype(np.float64) @ np.asarray(w).astype(np.float64).T


#: The output dtypes of the kernel's epilogue, by the names the kernel configs use.
OUT_DTYPES: dict[str, Any] = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def out_dtype(name: str) -> Any:
    """The numpy dtype of output ``name``; a ValueError naming ``out`` and the accepted names otherwise."""
    if not isinstance(name, str) or name not in OUT_DTYPES:
        raise ValueError(f"out: expected one of {', '.join(repr(n) for n in OUT_DTYPES)}, got {name!r}")
    return OUT_DTYPES[name]


def epilogue(acc: Any, s_tok: Any, s_ch: Any, bias: Any | None, out: str) -> np.ndarray:
    """y [M, N] in ``out`` ("f16" / "bf16") from acc [M, N] (int or float32), s_tok [M], s_ch [N] float32 and
    bias [N] (the output dtype) or None, in the kernel's order of float32 operations."""
    dtype = out_dtype(out)  # a bad name is refused before any arithmetic
    acc32 = np.asarray(acc).astype(np.float32)  # int64 -> float32 rounds to nearest-even (one rounding)
    with np.errstate(over="ignore", invalid="ignore"):
        scale = np.asarray(s_tok, np.float32)[:, None] * np.asarray(s_ch, np.float32)[None, :]
        v = acc32 * scale
        if bias is not None:
            v = v + np.asarray(bias).astype(np.float32)[None, :]
        return v.astype(dtype)


def quantize_weight(w: Any, kind: WeightKind = "int8") -> tuple[np.ndarray, np.ndarray]:
    """(codes [N, K] int8 or float8_e4m3fn, s_ch [N] float32) of a weight [N, K] (torch.nn.Linear's layout)."""
    if kind not in QMAX:
        raise ValueError(f"kind: expected 'int8' or 'fp8', got {kind!r}")
    wf = np.asarray(w).astype(np.float32)
    if wf.ndim != 2:
        raise ValueError(f"w: expected a 2-D weight [N, K], got shape {list(wf.shape)}")
    if not np.isfinite(wf).all():
        raise ValueError(f"w: expected finite values, found {int((~np.isfinite(wf)).sum())} non-finite")
    amax = np.abs(wf).max(axis=1) if wf.shape[1] else np.zeros(wf.shape[0], np.float32)
    scale = np.where(amax > 0, amax / F32(QMAX[kind]), F32(1)).astype(np.float32)
    v = np.clip(wf / scale[:, None], -QMAX[kind], QMAX[kind])
    if kind == "int8":
        return np.rint(v).astype(np.int8), scale
    return v.astype(ml_dtypes.float8_e4m3fn), scale


def dequantize_weight(codes: Any, scale: Any) -> np.ndarray:
    """codes * scale[:, None] in float32: what quantize_weight's output stands for."""
    return np.asarray(codes).astype(np.float32) * np.asarray(scale, np.float32)[:, None]
