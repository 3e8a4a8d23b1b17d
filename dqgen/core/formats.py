"""Every number format dqgen knows, as one typed registry: the facts every magic number is derived from.

One ``ScalarType`` per format (after vLLM's ``vllm/scalar_type.py``): exponent and mantissa bits, whether
there is a sign bit, the bias, the NaN representation and whether infinities exist. From a row follow its
value of every code (``decode``), its canonical name (``float8_e4m3fn``, ``uint4b8``) and the numpy /
ml_dtypes / torch dtypes (``numpy_dtype``, ``torch_dtype``: one function each, nothing else maps names).

A float with biased exponent field ``E`` (0 < E, or any E without mantissa bits) and mantissa field ``m`` is
``2^(E - bias) * (1 + m / 2^mbits)``; ``E = 0`` with mantissa bits is subnormal. An integer code ``q`` is
``q - bias`` (two's complement first when signed). Everything the solver computes (magic words, fix-up
constants, scale factors) starts from these numbers, never from a table of hex literals.

Adding a format is one row in ``_ROWS`` (its roles say where a spec may name it: ``element`` for
``source.format``, ``block_scale`` for ``scales.dtype``, ``target``). The independent reference
(``dqgen.check.reference``) decodes codes without this module on purpose; tests/test_formats.py checks that
the two agree on every code of every format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from functools import cache
from typing import Any

import ml_dtypes
import numpy as np


class NanRepr(str, Enum):
    """How NaN is written (vLLM's NanRepr)."""

    none = "none"  # every code is a number (e2m1, integer codes)
    ieee = "ieee"  # all-ones exponent: inf when the mantissa is 0, else NaN (fp16, bf16, fp32, e5m2)
    max = "max"  # only the all-ones magnitude is NaN, no infinities (OCP "fn": e4m3; e8m0's 0xFF)


#: The roles a spec may give a format.
ROLES = frozenset({"target", "element", "block_scale", "integer"})


@dataclass(frozen=True)
class ScalarType:
    """One number format. ``bias`` is the exponent bias of a float and the subtracted offset of an integer
    code (vLLM's uint4b8: stored q means q - 8): in both, the stored field minus ``bias`` is the value's part."""

    name: str  # dqgen's short name: fp16, e4m3, u4b8, s4
    ebits: int  # exponent bits (0 for integer codes)
    mbits: int  # mantissa bits; for integer codes the magnitude bits (vLLM: int4 has 3, uint4 4)
    signed: bool
    bias: int
    nan: NanRepr = NanRepr.none
    infs: bool = False
    ptx: str = ""  # the PTX type name of one value, where PTX has one
    roles: frozenset[str] = frozenset()
    doc: str = ""  # one line for ``dqgen list``
    #: element formats only: the block-scale formats that may scale them (``scales.dtype``)
    block_scales: tuple[str, ...] = ()

    @property
    def is_float(self) -> bool:
        return self.ebits > 0

    @property
    def width(self) -> int:
        return int(self.signed) + self.ebits + self.mbits

    @property
    def emax(self) -> int:
        """The largest exponent of a finite value."""
        top = (1 << self.ebits) - 1
        return (top - 1 if self.nan is NanRepr.ieee else top) - self.bias

    @property
    def emin(self) -> int:
        """The exponent of the smallest normal value (subnormals share it)."""
        return (1 if self.mbits else 0) - self.bias

    @property
    def canonical(self) -> str:
        """vLLM / ml_dtypes / torch's name: float16, bfloat16, float8_e4m3fn, float8_e8m0fnu, uint4b8, int4."""
        if not self.is_float:
            base = f"{'int' if self.signed else 'uint'}{self.width}"
            return base + (f"b{self.bias}" if self.bias else "")
        if self.nan is NanRepr.ieee and self.signed and self.bias == (1 << (self.ebits - 1)) - 1:
            ieee = {(5, 10): "float16", (8, 23): "float32", (8, 7): "bfloat16"}.get((self.ebits, self.mbits))
            if ieee:
                return ieee
        return (
            f"float{self.width}_e{self.ebits}m{self.mbits}" + ("" if self.infs else "fn") + ("" if self.signed else "u")
        )

    def fields(self, code: int) -> tuple[int, int, int]:
        """(sign, exponent field, mantissa field) of a code."""
        sign = (code >> (self.width - 1)) & 1 if self.signed else 0
        return sign, (code >> self.mbits) & ((1 << self.ebits) - 1), code & ((1 << self.mbits) - 1)

    def is_nan(self, code: int) -> bool:
        _, e, m = self.fields(code)
        top = (1 << self.ebits) - 1
        if not self.is_float or self.nan is NanRepr.none:
            return False
        if self.nan is NanRepr.ieee:
            return e == top and m != 0
        return e == top and m == (1 << self.mbits) - 1

    def decode(self, code: int) -> Fraction | float | int:
        """Exact value of a code: an int for integer codes; for floats a Fraction, or a Python float for NaN,
        the infinities and negative zero (Fraction has no negative zero)."""
        if not self.is_float:
            q = code - (1 << self.width) if self.signed and code >> (self.width - 1) & 1 else code
            return q - self.bias
        s, e, m = self.fields(code)
        sign = -1 if s else 1
        if self.is_nan(code):
            return float("nan")
        if self.infs and e == (1 << self.ebits) - 1:
            return sign * float("inf")
        if e == 0 and self.mbits:
            if m == 0:
                return -0.0 if s else Fraction(0)
            return sign * Fraction(m, 1 << self.mbits) * Fraction(2) ** self.emin
        return sign * (1 + Fraction(m, 1 << self.mbits)) * Fraction(2) ** (e - self.bias)

    def encode_exact(self, value: Fraction | int | float) -> int:
        """Bit pattern of ``value`` (a signed float format); raises ValueError if it is not exactly representable."""
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

    def round_from_f64(self, x: np.ndarray) -> np.ndarray:
        """Round float64 values to this (IEEE target) format, nearest-even, returning bit patterns.

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
            cast = np.asarray(exact, dtype=np.float64).astype(numpy_dtype(self))
        return cast.view(_uint(self.width)).astype(np.uint32)

    def values_of(self, bits: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # NaN patterns are meant (ml_dtypes warns on their cast)
            return np.asarray(bits).astype(_uint(self.width)).view(numpy_dtype(self)).astype(np.float64)

    def describe(self) -> str:
        if not self.is_float:
            kind = "two's complement" if self.signed else "unsigned"
            return f"{self.name}: {self.width}-bit {kind} integer" + (f", value q - {self.bias}" if self.bias else "")
        text = (
            f"{self.name}: {int(self.signed)} sign bit, {self.ebits} exponent bits (bias {self.bias}), "
            f"{self.mbits} mantissa bits"
        )
        if self.ptx:
            return text  # the IEEE arithmetic formats: the reader knows their specials
        if self.nan is NanRepr.ieee:
            rules = "all-ones exponent is inf (mantissa 0) or NaN"
        elif self.nan is NanRepr.none:
            rules = "no inf or NaN"
        elif self.mbits == 0:
            rules = f"no sign or mantissa: 2^(E-{self.bias}), 0x{(1 << self.width) - 1:X} is NaN"
        else:
            rules = "no infinities, only the all-ones code is NaN"
        return f"{text}; {rules}"


def _uint(width: int) -> type[np.unsignedinteger[Any]]:
    return {8: np.uint8, 16: np.uint16, 32: np.uint32}[width]


def _float(
    name: str,
    ebits: int,
    mbits: int,
    nan: NanRepr,
    *,
    signed: bool = True,
    ptx: str = "",
    roles: tuple[str, ...] = (),
    doc: str = "",
    block_scales: tuple[str, ...] = (),
) -> ScalarType:
    infs = nan is NanRepr.ieee
    bias = (1 << (ebits - 1)) - 1
    return ScalarType(name, ebits, mbits, signed, bias, nan, infs, ptx, frozenset(roles), doc, block_scales)


def integer(bits: int, signed: bool = False, bias: int = 0) -> ScalarType:
    """The integer code format of ``bits`` bits: u4, s4, u4b8 (stored q means q - 8)."""
    name = f"{'s' if signed else 'u'}{bits}" + (f"b{bias}" if bias else "")
    return ScalarType(name, 0, bits - int(signed), signed, bias, roles=frozenset({"integer"}))


_ROWS: tuple[ScalarType, ...] = (
    _float("fp32", 8, 23, NanRepr.ieee, ptx="f32"),
    _float("fp16", 5, 10, NanRepr.ieee, ptx="f16", roles=("target",)),
    _float("bf16", 8, 7, NanRepr.ieee, ptx="bf16", roles=("target",)),
    _float("e8m0", 8, 0, NanRepr.max, signed=False, roles=("block_scale",)),
    _float(
        "e4m3",
        4,
        3,
        NanRepr.max,
        roles=("element", "block_scale"),
        doc="OCP OFP8 E4M3 (torch float8_e4m3fn)",
    ),
    _float("e5m2", 5, 2, NanRepr.ieee, roles=("element",), doc="OCP OFP8 E5M2 (torch float8_e5m2)"),
    _float(
        "e2m1",
        2,
        1,
        NanRepr.none,
        roles=("element",),
        doc="OCP MX FP4, the element of MXFP4 and NVFP4",
        block_scales=("e8m0", "e4m3"),
    ),
    _float(
        "e2m3",
        2,
        3,
        NanRepr.none,
        roles=("element",),
        doc="OCP MX FP6 E2M3 (ml_dtypes float6_e2m3fn), the element of MXFP6",
        block_scales=("e8m0",),
    ),
    _float(
        "e3m2",
        3,
        2,
        NanRepr.none,
        roles=("element",),
        doc="OCP MX FP6 E3M2 (ml_dtypes float6_e3m2fn), the element of MXFP6",
        block_scales=("e8m0",),
    ),
    # The integer codes: u1..u8 and their two's-complement s-formats; biased codes (u4b8, u8b128) come from
    # ``integer`` with the spec's bias, so every bias 0 <= b < 2^bits is a format without a row per value.
    *(integer(b) for b in range(1, 9)),
    *(integer(b, signed=True) for b in range(2, 9)),
    integer(4, bias=8),
    integer(8, bias=128),
)

#: Every format by its short name.
SCALAR_TYPES: dict[str, ScalarType] = {t.name: t for t in _ROWS}

FP32, FP16, BF16 = SCALAR_TYPES["fp32"], SCALAR_TYPES["fp16"], SCALAR_TYPES["bf16"]
E4M3, E5M2, E2M1, E8M0 = (SCALAR_TYPES[n] for n in ("e4m3", "e5m2", "e2m1", "e8m0"))
E2M3, E3M2 = SCALAR_TYPES["e2m3"], SCALAR_TYPES["e3m2"]


def with_role(role: str) -> dict[str, ScalarType]:
    """The formats a spec may name in ``role`` (``element``, ``block_scale``, ``target``), in registry order."""
    return {t.name: t for t in _ROWS if role in t.roles}


#: The IEEE formats arithmetic runs in (``FloatFormat`` is their type; it is a ScalarType).
FORMATS: dict[str, ScalarType] = {t.name: t for t in (FP16, BF16, FP32)}
#: The narrow storage floats: element codes and block-scale codes.
MINIFLOATS: dict[str, ScalarType] = {**with_role("element"), **with_role("block_scale")}
#: ``FloatFormat`` reads as "a ScalarType used as an IEEE arithmetic format" in the ir modules' signatures.
FloatFormat = ScalarType

_INTEGER_NAME = re.compile(r"([us])([1-8])(?:b([0-9]{1,3}))?")


@cache
def scalar_type(name: str) -> ScalarType:
    """The format named ``name``: a registry row, or an integer code name (u3, s8, u4b8, u2b1)."""
    if name in SCALAR_TYPES:
        return SCALAR_TYPES[name]
    m = _INTEGER_NAME.fullmatch(name)
    if m and not (m.group(1) == "s" and m.group(3)):
        bits, bias = int(m.group(2)), int(m.group(3) or 0)
        if bias < 1 << bits:
            return integer(bits, m.group(1) == "s", bias)
    raise KeyError(f"no number format {name!r}; known: {', '.join(SCALAR_TYPES)} and integer codes like u4b8")


def numpy_dtype(t: ScalarType) -> np.dtype:
    """The numpy dtype holding one value of ``t`` (ml_dtypes' for the formats numpy lacks): float16, bfloat16,
    float8_e4m3fn, float4_e2m1fn, float8_e8m0fnu; int8 / uint8 for integer codes of up to 8 bits."""
    if not t.is_float:
        return np.dtype(np.int8 if t.signed else np.uint8)
    if t.canonical in ("float16", "float32"):
        return np.dtype(t.canonical)
    return np.dtype(getattr(ml_dtypes, t.canonical))


def torch_dtype_name(t: ScalarType) -> str | None:
    """torch's dtype name for ``t`` (``torch.float8_e4m3fn``), or None where torch has no dtype of one value
    (4-bit floats come only in pairs, integer codes below 8 bits not at all)."""
    if not t.is_float:
        return ("int8" if t.signed else "uint8") if t.width == 8 and not t.bias else None
    return t.canonical if t.width >= 8 else None


def torch_dtype(t: ScalarType, torch: Any) -> Any:
    """The torch dtype of ``t`` (the torch module is passed in: dqgen imports torch only where it runs)."""
    name = torch_dtype_name(t)
    if name is None:
        raise ValueError(f"torch has no dtype for one {t.name} value")
    return getattr(torch, name)


def exact_bits(fmt: ScalarType, value: Fraction | float | int) -> int:
    """``fmt``'s bit pattern of a value it holds exactly (NaN as the canonical NaN, inf as inf)."""
    if isinstance(value, float) and value != value:
        return (1 << (fmt.width - 1)) - 1  # 0x7FFF / 0x7FFFFFFF: PTX's canonical NaN
    if isinstance(value, float) and value == 0 and str(value).startswith("-"):
        return 1 << (fmt.width - 1)
    if isinstance(value, float) and abs(value) == float("inf"):
        return ((1 << fmt.ebits) - 1) << fmt.mbits | (1 << (fmt.width - 1) if value < 0 else 0)
    return fmt.encode_exact(value)
