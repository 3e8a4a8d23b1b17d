"""SmoothQuant's per-channel smoothing factors (Xiao et al., 2023, eq. 4) and the conversion of a linear layer.

  s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)

X_j is input channel j of the activations (``act_absmax[j]`` = max|X_j| from calibration), W_j the weights that
multiply it: column j of a weight in torch.nn.Linear's layout [N, K] (out_features x in_features). Dividing the
activations by s and multiplying the weight's columns by s leaves the product unchanged in exact arithmetic,
(x / s) @ (W * s).T == x @ W.T, while moving quantization difficulty from activations to weights by alpha.

Zero guard: where max|X_j| == 0 or max|W_j| == 0 the channel contributes nothing on one side, any s keeps the
identity, and s_j = 1 (no migration) is taken; the formula would give 0 or infinity there. The factors are
computed in float64 and returned as float32; one that is not a positive finite float32 is refused.

numpy arrays are the core; torch tensors are accepted and given back as tensors on their own device."""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np


def _is_torch(a: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def _f64(a: Any, name: str) -> np.ndarray:
    if _is_torch(a):
        a = a.detach().double().cpu().numpy()
    arr = np.asarray(a)
    if arr.dtype.kind not in "fiu" and arr.dtype.name != "bfloat16":
        raise ValueError(f"{name}: expected a real-valued array, got dtype {arr.dtype}")
    out = arr.astype(np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"{name}: expected finite values, found {int((~np.isfinite(out)).sum())} non-finite")
    return out


def _check(act_absmax: np.ndarray, weight: np.ndarray, alpha: float) -> None:
    if act_absmax.ndim != 1:
        raise ValueError(f"act_absmax: expected a vector [K], got shape {list(act_absmax.shape)}")
    if (act_absmax < 0).any():
        raise ValueError("act_absmax: expected per-channel maxima of |X| (>= 0), found negative values")
    if weight.ndim != 2 or weight.shape[1] != act_absmax.shape[0]:
        raise ValueError(
            f"weight: expected [N, K={act_absmax.shape[0]}] (torch.nn.Linear's layout), got {list(weight.shape)}"
        )
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha: expected a migration strength in [0, 1], got {alpha}")


def _factors(act: np.ndarray, w: np.ndarray, alpha: float) -> np.ndarray:
    w_absmax = np.abs(w).max(axis=0) if w.shape[0] else np.zeros(w.shape[1])
    dead = (act == 0) | (w_absmax == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(dead, 1.0, act**alpha / w_absmax ** (1.0 - alpha))
    with np.errstate(over="ignore"):  # an overflow becomes inf, refused below
        s32 = s.astype(np.float32)
    bad = ~(np.isfinite(s32) & (s32 > 0))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"act_absmax/weight: smoothing factor of channel {j} ({s[j]:.3g}) is not a positive finite float32"
        )
    return s32


def smooth_factors(act_absmax: Any, weight: Any, alpha: float = 0.5) -> Any:
    """s [K] float32 (a tensor on act_absmax's device if it is one) from act_absmax [K] and weight [N, K]."""
    act, w = _f64(act_absmax, "act_absmax"), _f64(weight, "weight")
    _check(act, w, alpha)
    s = _factors(act, w, alpha)
    if _is_torch(act_absmax):
        import torch

        return torch.from_numpy(s).to(act_absmax.device)
    return s


class SmoothedLinear(NamedTuple):
    weight: Any  # W * s along K, [N, K], the input weight's dtype (and device, for a tensor)
    bias: Any  # unchanged: smoothing only rescales the inner dimension
    smooth: Any  # s [K] float32: the layer's input is to be divided by it (quantize_activations(x, smooth=s))


def smooth_linear(weight: Any, bias: Any | None, act_absmax: Any, alpha: float = 0.5) -> SmoothedLinear:
    """Smooth a linear layer y = x @ weight.T + bias: weight [N, K] -> weight * s[None, :] (computed in float64,
    rounded once to the weight's dtype), bias [N] or None passed through, and s."""
    act, w = _f64(act_absmax, "act_absmax"), _f64(weight, "weight")
    _check(act, w, alpha)
    if bias is not None:
        b_shape = tuple(bias.shape)
        if b_shape != (w.shape[0],):
            raise ValueError(f"bias: expected [N={w.shape[0]}] or None, got {list(b_shape)}")
    s = _factors(act, w, alpha)
    w_s = w * s.astype(np.float64)[None, :]
    if _is_torch(weight):
        import torch

        w_t = torch.from_numpy(w_s).to(device=weight.device, dtype=weight.dtype)
        s_t = torch.from_numpy(s).to(weight.device)
        return SmoothedLinear(w_t, bias, s_t)
    return SmoothedLinear(w_s.astype(np.asarray(weight).dtype), bias, s)
