"""Magic numbers and fix-up constants, derived from a float format.

The trick: a float whose biased exponent is ``bias + mbits`` has a mantissa unit of exactly 1,
so OR-ing an integer ``q < 2^mbits`` into its mantissa makes the float ``2^mbits + q``. If the
integer sits ``p`` bits higher, the float is ``2^mbits + q * 2^p``. One float op then removes
``2^mbits`` (and any bias or zero point) and the ``2^p`` scale. Each function here returns the
constant together with the sentence that derives it, so the Plan can carry both.
"""

from __future__ import annotations

from fractions import Fraction

from ..core.formats import FloatFormat
from .isa import Const


def half_pair(lo: int, hi: int) -> int:
    return (lo & 0xFFFF) | ((hi & 0xFFFF) << 16)


def magic_exponent(fmt: FloatFormat) -> int:
    """The biased exponent that makes the mantissa's least significant bit worth exactly 1."""
    return fmt.bias + fmt.mbits


def magic_value(fmt: FloatFormat) -> int:
    return 1 << fmt.mbits


def magic_bits(fmt: FloatFormat) -> int:
    bits = fmt.encode_exact(magic_value(fmt))
    assert bits == magic_exponent(fmt) << fmt.mbits
    return bits


def magic_fact(fmt: FloatFormat) -> str:
    e = magic_exponent(fmt)
    return (
        f"{fmt.name} magic 0x{magic_bits(fmt):0{fmt.width // 4}X} = {magic_value(fmt)}.0: biased exponent "
        f"{e} = bias {fmt.bias} + {fmt.mbits} mantissa bits, "
        f"so the mantissa's unit is 2^({e}-{fmt.bias}-{fmt.mbits}) = 1 "
        f"and (magic | q) = {magic_value(fmt)} + q for any integer 0 <= q < {magic_value(fmt)}"
    )


def magic_pair(fmt: FloatFormat, xor_bits: tuple[int, int] = (0, 0)) -> Const:
    """The magic in both 16-bit halves; ``xor_bits`` are field sign bits to flip in the same LOP3."""
    m = magic_bits(fmt)
    lo, hi = m | xor_bits[0], m | xor_bits[1]
    why = (
        f"magic {fmt.name}x2 {{{magic_value(fmt)}, {magic_value(fmt)}}}: "
        f"exponent field {magic_exponent(fmt)} = {fmt.bias}+{fmt.mbits} makes the mantissa unit 1"
    )
    if any(xor_bits):
        why += (
            f"; XOR-ing the code's top bit (0x{xor_bits[0]:X} per half) turns two's complement into offset binary, "
            "i.e. adds 2^(bits-1)"
        )
    return Const(half_pair(lo, hi), why, "b32")


def pair_const(fmt: FloatFormat, lo: Fraction | int | float, hi: Fraction | int | float, why: str) -> Const:
    """A pair of exact target values; raises ValueError if either is not representable."""
    return Const(half_pair(fmt.encode_exact(lo), fmt.encode_exact(hi)), why, f"{fmt.name}x2")


def field_mask(bits: int, p_lo: int, p_hi: int) -> Const:
    m = (1 << bits) - 1
    value = (m << p_lo) | (m << (16 + p_hi))
    return Const(value, f"mask: the {bits}-bit fields at bit {p_lo} of the low half and bit {p_hi} of the high half")


def fmt_num(x: Fraction | int) -> str:
    x = Fraction(x)
    if x.denominator == 1:
        return str(x.numerator)
    if x.numerator == 1 or x.numerator == -1:
        return f"{'-' if x < 0 else ''}1/{x.denominator}"
    return f"{x.numerator}/{x.denominator}"
