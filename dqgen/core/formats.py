"""IEEE-style binary float formats: the facts every magic number is derived from.

A value with biased exponent field ``E`` (0 < E < 2^ebits - 1) and mantissa field ``m`` is
``2^(E - bias) * (1 + m / 2^mbits)``. Everything the solver computes (magic words, fix-up
constants, scale factors) starts from these three numbers per format, never from a table of
hex literals.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    name: str
    ebits: int
    mbits: int
    ptx: str  # the PTX type name of one value
    np_dtype: np.dtype

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def emax(self) -> int:
        return (1 << self.ebits) - 2 - self.bias

    @property
    def emin(self) -> int:
        return 1 - self.bias

    def encode_exact(self, value: Fraction | int | float) -> int:
        """Bit pattern of ``value``; raises ValueError if ``value`` is not exactly representable."""
        try:
            v = Fraction(value)
        except (OverflowError, ValueError):
            raise ValueError(f"{value} is not a finite number, so not exactly representable in {self.name}") from None
        sign = 0
        if v < 0:
            sign, v = 1, -v
        if v == 0:
            return sign << (self.width - 1)
        e = v.numerator.bit_length() - v.denominator.bit_length()
        if Fraction(2) ** e > v:
            e -= 1
        # v in [2^e, 2^(e+1))
        if e < self.emin:
            quantum = Fraction(2) ** (self.emin - self.mbits)
            m = v / quantum
            if m.denominator != 1:
                raise ValueError(f"{value} is not exactly representable in {self.name}")
            return (sign << (self.width - 1)) | int(m)
        if e > self.emax:
            raise ValueError(f"{value} overflows {self.name}")
        m = (v / Fraction(2) ** e - 1) * (1 << self.mbits)
        if m.denominator != 1:
            raise ValueError(f"{value} is not exactly representable in {self.name}")
        biased = e + self.bias
        return (sign << (self.width - 1)) | (biased << self.mbits) | int(m)

    def decode(self, bits: int) -> Fraction | float:
        """Exact value of a bit pattern (inf/nan as Python floats)."""
        sign = -1 if (bits >> (self.width - 1)) & 1 else 1
        e = (bits >> self.mbits) & ((1 << self.ebits) - 1)
        m = bits & ((1 << self.mbits) - 1)
        if e == (1 << self.ebits) - 1:
            return float("nan") if m else sign * float("inf")
        if e == 0:
            return sign * Fraction(m, 1 << self.mbits) * Fraction(2) ** self.emin
        return sign * (1 + Fraction(m, 1 << self.mbits)) * Fraction(2) ** (e - self.bias)

    def round_from_f64(self, x: np.ndarray) -> np.ndarray:
        """Round float64 values to this format, nearest-even, returning bit patterns.

        Exact when ``x`` was itself rounded to odd at 53 bits (see ``isa``), because
        53 >= (mbits + 1) + 2 for every format here.
        """
        x = np.asarray(x, dtype=np.float64)
        ax = np.abs(x)
        finite = np.isfinite(ax) & (ax > 0)
        safe = np.where(finite, ax, 1.0)
        _, e2 = np.frexp(safe)  # safe = f * 2^e2, f in [0.5, 1)
        e = np.maximum(e2.astype(np.int64) - 1, self.emin)
        quantum = np.ldexp(1.0, (e - self.mbits).astype(np.int32))
        r = np.rint(safe / quantum) * quantum  # np.rint rounds half to even
        r = np.where(finite, r, ax)
        r = np.where(r >= 2.0 ** (self.emax + 1), np.inf, r)
        r = np.copysign(r, x)
        return self.bits_of(r)

    def bits_of(self, exact: np.ndarray) -> np.ndarray:
        """Bit patterns of float64 values that are exactly representable (or inf/nan)."""
        with np.errstate(invalid="ignore", over="ignore"):  # NaN / inf inputs are meant
            cast = np.asarray(exact, dtype=np.float64).astype(self.np_dtype)
        uint = {16: np.uint16, 32: np.uint32}[self.width]
        return cast.view(uint).astype(np.uint32)

    def values_of(self, bits: np.ndarray) -> np.ndarray:
        uint = {16: np.uint16, 32: np.uint32}[self.width]
        with np.errstate(invalid="ignore"):  # NaN patterns are meant (ml_dtypes warns on their cast)
            return np.asarray(bits).astype(uint).view(self.np_dtype).astype(np.float64)

    def describe(self) -> str:
        return f"{self.name}: 1 sign bit, {self.ebits} exponent bits (bias {self.bias}), {self.mbits} mantissa bits"


FP16 = FloatFormat("fp16", 5, 10, "f16", np.dtype(np.float16))
BF16 = FloatFormat("bf16", 8, 7, "bf16", np.dtype(ml_dtypes.bfloat16))
FP32 = FloatFormat("fp32", 8, 23, "f32", np.dtype(np.float32))

FORMATS: dict[str, FloatFormat] = {f.name: f for f in (FP16, BF16, FP32)}


@dataclass(frozen=True)
class MiniFloat:
    """A narrow storage float (OCP OFP8 / MX element and scale formats).

    ``specials`` says how the all-ones patterns read: ``ieee`` (all-ones exponent: inf if the
    mantissa is 0, else NaN; e5m2), ``fn`` (no infinities; only S.1..1.1..1 is NaN; e4m3fn),
    ``finite`` (every code a number; e2m1) or ``e8m0`` (no sign, no mantissa: 2^(E-127), 0xFF NaN).
    """

    name: str
    ebits: int
    mbits: int
    specials: str
    signed: bool = True

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def width(self) -> int:
        return int(self.signed) + self.ebits + self.mbits

    def is_nan(self, code: int) -> bool:
        e = (code >> self.mbits) & ((1 << self.ebits) - 1)
        m = code & ((1 << self.mbits) - 1)
        emax = (1 << self.ebits) - 1
        if self.specials == "ieee":
            return e == emax and m != 0
        if self.specials in ("fn", "e8m0"):
            return e == emax and m == (1 << self.mbits) - 1
        return False

    def decode(self, code: int) -> Fraction | float:
        """Exact value of a code (NaN and inf as Python floats)."""
        sign = -1 if self.signed and (code >> (self.width - 1)) & 1 else 1
        e = (code >> self.mbits) & ((1 << self.ebits) - 1)
        m = code & ((1 << self.mbits) - 1)
        if self.is_nan(code):
            return float("nan")
        if self.specials == "ieee" and e == (1 << self.ebits) - 1:
            return sign * float("inf")
        if self.specials == "e8m0":
            return Fraction(2) ** (e - 127)
        if e == 0:
            if m == 0 and sign < 0:
                return -0.0  # keeps its sign; Fraction has no negative zero
            return sign * Fraction(m, 1 << self.mbits) * Fraction(2) ** (1 - self.bias)
        return sign * (1 + Fraction(m, 1 << self.mbits)) * Fraction(2) ** (e - self.bias)

    def describe(self) -> str:
        rules = {
            "ieee": "all-ones exponent is inf (mantissa 0) or NaN",
            "fn": "no infinities, only the all-ones code is NaN",
            "finite": "no inf or NaN",
            "e8m0": "no sign or mantissa: 2^(E-127), 0xFF is NaN",
        }[self.specials]
        return (
            f"{self.name}: {int(self.signed)} sign bit, {self.ebits} exponent bits (bias {self.bias}), "
            f"{self.mbits} mantissa bits; {rules}"
        )


E4M3 = MiniFloat("e4m3", 4, 3, "fn")
E5M2 = MiniFloat("e5m2", 5, 2, "ieee")
E2M1 = MiniFloat("e2m1", 2, 1, "finite")
E8M0 = MiniFloat("e8m0", 8, 0, "e8m0", signed=False)
MINIFLOATS: dict[str, MiniFloat] = {f.name: f for f in (E4M3, E5M2, E2M1, E8M0)}


def exact_bits(fmt: FloatFormat, value: Fraction | float) -> int:
    """``fmt``'s bit pattern of a value it holds exactly (NaN as the canonical NaN, inf as inf)."""
    if isinstance(value, float) and value != value:
        return (1 << (fmt.width - 1)) - 1  # 0x7FFF / 0x7FFFFFFF: PTX's canonical NaN
    if isinstance(value, float) and value == 0 and str(value).startswith("-"):
        return 1 << (fmt.width - 1)
    if isinstance(value, float) and abs(value) == float("inf"):
        return ((1 << fmt.ebits) - 1) << fmt.mbits | (1 << (fmt.width - 1) if value < 0 else 0)
    return fmt.encode_exact(value)
