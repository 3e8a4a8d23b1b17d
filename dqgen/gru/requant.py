"""Fixed-point requantization: a real rescale m = S_a*S_b/S_c as an integer multiplier and a right shift.

Scheme (``multiplier_bits`` b, 31 by default; 15 gives the public design's 16-bit multiplier):
    y = round_half_even(x * M / 2**k),   M in [2**(b-1), 2**b), k >= 0
The product x*M is formed in int64 and shifted once (single rounding, as TFLite's TFLITE_SINGLE_ROUNDING), so the
only errors are the multiplier's quantization (|M/2**k - m| <= 2**-(k+1), i.e. relative <= 2**-b) and the one
final rounding (<= 0.5 LSB). A sum of two rescaled terms rounded once (``derive_shared``) shares the larger factor's
k: the smaller term's M then has fewer bits (still |M/2**k - m| <= 2**-(k+1); relative error above 2**-b).
Half-to-even is chosen because it is what torch.round / rintf do, so a float model
rounding its requantized values agrees on ties; half-away-from-zero would bias every tie outward.
b = 31 rather than 15: on the GPU both cost one 32x32->64 multiply (mul.wide.s32), and int32 accumulators
(|x| < 2**31) times M < 2**31 stay below 2**62, so the wider multiplier is free and 65536x more exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

MultiplierBits = Literal[15, 31]
MAX_SHIFT = 62  # x*M < 2**62 for int32 x and a 31-bit M: a larger shift rounds every input to 0 anyway


class Rescale(BaseModel):
    """One real factor ``real`` approximated by ``multiplier / 2**shift``."""

    model_config = ConfigDict(frozen=True)

    real: float
    multiplier: int
    shift: int

    @property
    def approx(self) -> float:
        return self.multiplier / 2.0**self.shift

    @property
    def abs_error(self) -> float:
        return abs(self.approx - self.real)

    @property
    def abs_error_bound(self) -> float:
        """Bound of |M/2**k - m| from rounding M to an integer: half a unit of 2**-k."""
        return 2.0 ** -(self.shift + 1)


def derive(real: float, multiplier_bits: MultiplierBits = 31) -> Rescale:
    """The multiplier in [2**(b-1), 2**b) and shift k with M/2**k closest to ``real`` (real > 0)."""
    if not math.isfinite(real) or real <= 0.0:
        raise ValueError(f"rescale factor must be a positive finite number, got {real!r}")
    mant, exp = math.frexp(real)  # real = mant * 2**exp, mant in [0.5, 1)
    shift = multiplier_bits - exp
    multiplier = round(mant * 2**multiplier_bits)
    if multiplier == 2**multiplier_bits:  # mantissa rounded up to 1.0: renormalize
        multiplier //= 2
        shift -= 1
    if shift < 0:
        raise ValueError(f"rescale factor {real!r} is too large for a {multiplier_bits}-bit multiplier with shift >= 0")
    if shift > MAX_SHIFT:
        # Below 2**-31 of an LSB per unit input: no int32 input can reach half an output LSB.
        return Rescale(real=real, multiplier=0, shift=0)
    return Rescale(real=real, multiplier=multiplier, shift=shift)


def derive_shared(reals: Sequence[float], multiplier_bits: MultiplierBits = 31) -> list[Rescale]:
    """The terms of one sum that is rounded once, y = round_half_even(sum_i v_i * M_i / 2**k): one shift k for all.

    k is the smallest of the terms' own shifts (``derive``), so every M_i stays below 2**b: the term of the largest
    factor keeps its b-bit multiplier, a smaller one has fewer bits (|M_i/2**k - real_i| <= 2**-(k+1) still).
    Why one rounding: rounding each term onto the output grid and adding the codes (the cell's first form) doubles
    the rounding noise of the pre-activations and of h (issue 25: 2e-4 of 1 - cosine through two layers)."""
    own = [derive(r, multiplier_bits) for r in reals]
    live = [r.shift for r in own if r.multiplier]
    if not live:
        return own
    shift = min(live)
    return [Rescale(real=real, multiplier=round(real * 2.0**shift), shift=shift) for real in reals]


def apply(x: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int) -> np.ndarray:
    """Vectorised round_half_even(x*M / 2**k) on int64 (the CPU statement of the formula, for tests)."""
    p = np.asarray(x, dtype=np.int64) * np.asarray(multiplier, dtype=np.int64)
    k = np.asarray(shift, dtype=np.int64)
    q = p >> k
    rem = p - (q << k)
    half = np.where(k > 0, np.left_shift(np.int64(1), np.maximum(k - 1, 0)), np.int64(1) << 62)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    return q + up.astype(np.int64)
