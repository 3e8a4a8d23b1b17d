"""The reference of the fused matmul: y = x @ W in float64, W from this package's independent dequantization
(dqgen.check.reference), and random inputs on which it is finite.

``matmul_inputs`` starts from ``random_inputs`` (full-range codes) and makes W finite where a format has NaN/Inf
codes (e4m3 / e5m2 specials are set to code 0, NaN block-scale codes are drawn again from ordinary exponents):
a NaN weight poisons a whole output column, which would hide every other error of that column."""

from __future__ import annotations

import numpy as np

from ..core.spec import Spec, with_group_size
from ..layout.layout import Layout
from .reference import dequantize_reference, random_global_scale, random_inputs, target_dtype

Inputs = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]


def _block_scale_codes(spec: Spec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Ordinary block scales: e8m0 2^-6 .. 2^2; e4m3 positive, 2^-4 .. 2^3 with a random mantissa."""
    assert spec.scales.dtype is not None
    if spec.scales.dtype.value == "e8m0":
        return (127 + rng.integers(-6, 3, size=shape)).astype(np.uint8)
    return ((rng.integers(3, 11, size=shape) << 3) | rng.integers(0, 8, size=shape)).astype(np.uint8)


def zero_codes_where(spec: Spec, qweight: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """``qweight`` (packed words, int32 or uint32) with the code of every weight where ``bad[K, N]`` is set to 0,
    which is +0 in every minifloat format: how the matmul's inputs (here and in the bench) drop NaN/Inf weights."""
    lay = Layout.of(spec)
    codes = lay.unpack_fields(np.ascontiguousarray(qweight).view(np.uint32))
    codes[bad] = 0
    return lay.pack_fields(codes).view(qweight.dtype)


def matmul_inputs(spec: Spec, K: int, N: int, seed: int, group_size: int | None = None) -> tuple[Inputs, np.ndarray]:
    """((qweight, scales, zeros, g_idx, global_scale), W) for W[K, N] with every weight finite; W in the target
    dtype. ``group_size`` overrides the spec's (``auto`` specs, tests of odd group sizes)."""
    sp = with_group_size(spec, group_size) if group_size is not None else spec
    q, s, z, gi = random_inputs(sp, K, N, seed)
    rng = np.random.default_rng(seed + 1)
    if sp.scales.block:
        s = _block_scale_codes(sp, s.shape, rng)
    gs = random_global_scale(sp, 5)  # 2^0 .. 2: ordinary magnitudes (tiny ones underflow whole products)
    w = dequantize_reference(sp, q, s, z, gi, gs)
    bad = ~np.isfinite(w.astype(np.float64))
    if bad.any():
        q = zero_codes_where(sp, q, bad)
        w = dequantize_reference(sp, q, s, z, gi, gs)
    assert np.isfinite(w.astype(np.float64)).all()
    return (q, s, z, gi, gs), w


def random_x(spec: Spec, M: int, K: int, seed: int) -> np.ndarray:
    """Activations [M, K] in the target dtype, about 1 / sqrt(K) each (keeps fp16 outputs far from overflow)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((M, K)) / np.sqrt(max(K, 1))).astype(np.float32).astype(target_dtype(spec))


def matmul_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y = x @ W (+ bias) in float64 from the target-dtype values (exact widening)."""
    y = x.astype(np.float64) @ w.astype(np.float64)
    return y + bias.astype(np.float64) if bias is not None else y


#: Issue 13's bound on relative_error for a matmul output in the target dtype (the fused GEMV, the GEMM, the bench).
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}


def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    """||y - ref|| / ||ref|| over every element (float64)."""
    d = np.linalg.norm(y.astype(np.float64) - ref)
    return float(d / max(np.linalg.norm(ref), np.finfo(np.float64).tiny))
