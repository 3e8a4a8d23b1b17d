"""The independent CPU reference dequantizer: the oracle every generated kernel is checked against.

It is written straight from the formulas in ``dqgen.core.spec`` (the docstrings of ``Spec``, ``Source``,
``Packing``, ``Scales`` and ``Zeros``) with plain shifts and masks, and on purpose imports nothing
else from dqgen (no formats, ISA, plan or solver) but the Layout's tensor shapes (``shapes_for``, K
from qweight's rows; the bits inside the words it decodes itself): a bug shared by the generator and
its oracle would otherwise go unnoticed. Even the packed-zeros field order is derived here from the prose,
not taken from ``Spec.zero_order``. In particular it does not use the number-format registry
(``dqgen.core.formats``, which the solver, the prover and the runtime read): its minifloat, e8m0,
integer and fp16 / bf16 / fp32 decodings below are its own, and tests/test_formats.py checks that the
registry and this module agree on every code of every format (a new registry row without a decoding
here fails that test).

Layouts (P = 32 // bits codes per int32 word; field j = bits [j*bits, (j+1)*bits) holds element
``order[j]`` of the word's run of P consecutive elements):

- packing along N: ``qweight`` int32 [K, N/P]; word (k, i) field j is W[k, i*P + order[j]].
- packing along K: ``qweight`` int32 [K/P, N]; word (i, n) field j is W[i*P + order[j], n].
- multi-word blocks (``bits`` does not divide 32: specs accept 3 and 6; along K only): a block of
  ``words = bits / gcd(bits, 32)`` int32 words holds ``B = 32 * words / bits`` codes; ``qweight`` is
  int32 [K * words / B, N] (3-bit: [3K/32, N]), and code i of block b (row b*B + order[i]) is bits
  [bits*i, bits*i + bits) of the little-endian integer of words qweight[b*words + 0 .. words-1, n]
  (word 0 lowest), so some codes straddle two words (3-bit: codes 10 and 21; 6-bit FP6: 16 codes in 3
  words, codes 5 and 10).
- ``scales`` [G, N] in the target dtype, G = K // group_size (1 for group_size -1); for block
  scales (``scales.dtype`` e8m0 / e4m3) uint8 codes [G, N] (ml_dtypes float8_e8m0fnu /
  float8_e4m3fn arrays are read as their bytes).
- ``global_scale`` (``scales.global_scale`` only): a one-element float32 array.
- ``zeros`` by ``zeros.mode``:
  - ``none``: no tensor.
  - ``integer`` / ``gptq_v2`` / ``gptq_v1``: int32 [G, N/P], always packed along N: word (g, i)
    field j is the stored zero of column i*P + zorder[j], where zorder is the weights' order when
    they are packed along N and sequential when they are packed along K. z = stored (+1 for
    ``gptq_v1``, without wrap-around: stored 2^bits - 1 reads as z = 2^bits).
  - ``float`` / ``additive``: [G, N] in the target dtype.
- ``g_idx`` (``act_order`` only): int [K]; row k uses scales / zeros row ``g_idx[k]`` instead of
  ``k // group_size``.

Code values (``source.kind``), decoded here from the bit fields with this module's own constants:

- unsigned / signed / biased: q, two's complement, q - bias (small integers).
- float: OCP minifloats, sign = top bit. e4m3 (bias 7, E=0 subnormal m/8 2^-6, S.1111.111 NaN, no
  inf), e5m2 (bias 15, IEEE-like: E=31 m=0 inf, m!=0 NaN; subnormal m/4 2^-14), e2m1 (bias 1, every
  code finite: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; 0x8 is -0), the OCP MX FP6 codes e2m3 (bias 1, subnormal
  m/8, every code finite, max 7.5) and e3m2 (bias 3, subnormal m/4 2^-2, every code finite, max 28).
  Each is exact in float64 and in fp16/bf16.
- codebook: codebook[q] rounded once (nearest-even) to the target; codes past the end of a short
  list have value 0. The product with the scale is rounded once more.

Values (q is the element's code value, s its scale, round = round-to-nearest-even in the target):

- ``none``: round(q * s). q * s (<= 11-bit significand times <= 11-bit significand) is exact in
  float64, so rounding that float64 once is the correctly rounded result. inf and NaN codes (e5m2,
  e4m3) propagate as IEEE says (inf * 0 is NaN); every NaN result is the target's canonical NaN.
- e8m0 block scales: byte E is 2^(E-127) (E = 0xFF: NaN); round(q * 2^(E-127)), exact in float64,
  one rounding.
- e4m3 block scales with the fp32 global scale g: round(round_fp32(q * e4m3(s) * g)). The product of
  the three (<= 2 + 4 + 24 significant bits, magnitudes in [2^-159, 2^142]) is exact in float64; it
  is rounded to fp32 (nearest-even, subnormals kept) by this module's own rounding, then to the target.
- packed modes: round((q - z) * s); q - z is an exact small integer, then as above.
- ``float``: round(round(q - z) * s). Both steps are done as below: q - z by an exact TwoSum and a
  round-to-odd sticky bit (z may be far larger than 2^53 in bf16), then one rounding; the product
  of two <= 11-bit significands is exact in float64, then one rounding.
- ``additive``: round(q * s + b), ONE rounding of the exact sum. q * s is exact in float64, but the
  float64 sum q * s + b may not be (b can be 2^200 times smaller), and rounding it to float64 first
  and then to 16 bits can double-round. So the reference computes the float64 sum rounded *to odd*
  instead: TwoSum gives the exact error e of fl(q*s + b); when e != 0 and fl's last significand bit
  is even, it is moved one ulp towards e. Rounding to odd at 53 bits then to nearest-even at
  p <= 11 bits (p + 2 <= 53, also for target subnormals, since every nonzero sum is >= 2^-133 in
  magnitude, a float64 normal) equals rounding the exact sum once (Boldo & Melquiond, "Emulation
  of FMA and correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numba import njit

from dqgen.core.spec import SourceKind, Spec, Target, resolve_group_size, with_group_size
from dqgen.layout.layout import Layout

__all__ = [
    "dequantize_reference",
    "element_value",
    "random_global_scale",
    "random_inputs",
    "shapes_for",
    "target_dtype",
]

# (ebits, mbits) of the targets; stated here rather than imported so the oracle stays independent.
_FORMAT_BITS: dict[Target, tuple[int, int]] = {Target.fp16: (5, 10), Target.bf16: (8, 7)}

_KIND_CODE: dict[SourceKind, int] = {SourceKind.unsigned: 0, SourceKind.signed: 1, SourceKind.biased: 2}

# Special-value conventions of the source minifloats.
_SPECIAL_IEEE = 0  # all-ones exponent: inf (mantissa 0) or NaN
_SPECIAL_FN = 1  # finite except S.1..1.1..1 (all exponent and mantissa bits set): NaN
_SPECIAL_FINITE = 2  # every code is a finite number

#: (ebits, mbits, bias, special) of each source minifloat, written from the OCP MX / OFP8 definitions
#: (see the module docstring), not taken from dqgen.core.spec.
_MINIFLOATS: dict[str, tuple[int, int, int, int]] = {
    "e4m3": (4, 3, 7, _SPECIAL_FN),
    "e5m2": (5, 2, 15, _SPECIAL_IEEE),
    "e2m1": (2, 1, 1, _SPECIAL_FINITE),
    "e2m3": (2, 3, 1, _SPECIAL_FINITE),
    "e3m2": (3, 2, 3, _SPECIAL_FINITE),
}
#: e8m0 scale bytes: 2^(E - 127); E = 0xFF is NaN.
_E8M0_BIAS = 127
_E8M0_NAN = 0xFF
#: fp32's exponent and mantissa widths (the global-scale step of e4m3 block scales rounds to fp32).
_FP32_EBITS = 8
_FP32_MBITS = 23


def target_dtype(spec: Spec) -> np.dtype:
    """The numpy dtype of the target (and of the scales)."""
    return np.dtype(np.float16) if spec.target is Target.fp16 else np.dtype(ml_dtypes.bfloat16)


# ----------------------------------------------------------------------------------------------
# Rounding float64 -> fp16 / bf16 (and fp32) bits, round to nearest even.
# ----------------------------------------------------------------------------------------------
# Every njit below caches its machine code on disk (numba's __pycache__, or its per-user cache where the package
# folder is read-only): compiling them costs ~1.5 s per process, which `dqgen build`'s GPU check paid every time.


@njit(cache=True)
def _round_to_bits(x: float, ebits: int, mbits: int) -> np.int64:
    """Round a float64 to the nearest-even value of a 1+ebits+mbits format (up to fp32); return its bits."""
    sign_bit = np.int64(1) << (ebits + mbits)
    exp_all_ones = (np.int64(1) << ebits) - 1
    if x != x:  # NaN: the canonical quiet NaN (payloads are not propagated)
        return np.int64((exp_all_ones << mbits) | (np.int64(1) << (mbits - 1)))
    # copysign, not x < 0, so that -0.0 keeps its sign.
    sign = sign_bit if math.copysign(1.0, x) < 0.0 else np.int64(0)
    a = abs(x)
    if a == 0.0:
        return np.int64(sign)
    if math.isinf(a):
        return np.int64(sign | (exp_all_ones << mbits))
    bias = (np.int64(1) << (ebits - 1)) - 1
    emin = 1 - bias  # exponent of the smallest normal
    m, e = math.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    big_m = np.int64(m * 9007199254740992.0)  # exact: a = big_m * 2^(e - 53), big_m in [2^52, 2^53)
    exp = np.int64(e) - 1  # a = 1.f * 2^exp
    if exp + bias >= exp_all_ones:
        # Even the rounded-down value would not fit: beyond any finite value.
        return np.int64(sign | (exp_all_ones << mbits))
    # Below the normal range the quantum stays 2^(emin - mbits), so more bits are dropped.
    shift = np.int64(52 - mbits)
    if exp < emin:
        shift += emin - exp
    if shift > 60:
        # big_m < 2^53 <= 2^(shift - 1) / 2^6: far below half the smallest subnormal.
        return np.int64(sign)
    r = big_m >> shift
    rem = big_m & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    if rem > half or (rem == half and (r & 1) == 1):
        r += 1
    if exp < emin:
        # r counts quanta of the subnormal range; r == 2^mbits lands exactly on the smallest
        # normal, whose bit pattern is that same integer.
        return np.int64(sign | r)
    # r includes the hidden bit (in [2^mbits, 2^(mbits+1)]); adding it to (biased_exp - 1)
    # lets a rounding carry bump the exponent, and turn the largest finite into inf.
    return np.int64(sign | (((exp + bias - 1) << mbits) + r))


@njit(cache=True)
def _round_bits(x: float, ebits: int, mbits: int) -> np.uint16:
    """Round a float64 to the nearest-even value of a 1+ebits+mbits (<= 16-bit) format; return its bits."""
    return np.uint16(_round_to_bits(x, ebits, mbits))


@njit(cache=True)
def _round_array(x: np.ndarray, ebits: int, mbits: int) -> np.ndarray:
    """``_round_bits`` over a 1-D float64 array (for tests and small conversions)."""
    out = np.empty(x.shape[0], dtype=np.uint16)
    for i in range(x.shape[0]):
        out[i] = _round_bits(x[i], ebits, mbits)
    return out


@njit(cache=True)
def _round_to_bits_array(x: np.ndarray, ebits: int, mbits: int) -> np.ndarray:
    """``_round_to_bits`` over a 1-D float64 array, as int64 bit patterns (for tests)."""
    out = np.empty(x.shape[0], dtype=np.int64)
    for i in range(x.shape[0]):
        out[i] = _round_to_bits(x[i], ebits, mbits)
    return out


_MODE_CODE: dict[str, int] = {"none": 0, "integer": 1, "gptq_v2": 1, "gptq_v1": 1, "float": 2, "additive": 3}
#: What is added to a stored packed zero field to get z (from the ``Zeros`` docstring).
_STORED_ZERO_OFFSET: dict[str, int] = {"integer": 0, "gptq_v2": 0, "gptq_v1": 1}
_PACKED_MODES = tuple(_STORED_ZERO_OFFSET)


def _zero_field_order(spec: Spec) -> list[int]:
    """Field order of packed zero words: the weights' order when they are packed along N (AWQ's
    qzeros are packed like qweight), sequential when they are packed along K (GPTQ's qzeros)."""
    return list(spec.order) if spec.packing.axis == "N" else list(range(spec.per_word))


# ----------------------------------------------------------------------------------------------
# Exact helpers: decoding 16-bit floats, and a float64 sum rounded to odd.
# ----------------------------------------------------------------------------------------------


@njit(cache=True)
def _decode_minifloat(u: np.integer | int, ebits: int, mbits: int, bias: int, special: int) -> float:
    """The float64 value (exact) of the bits ``u`` of a 1+ebits+mbits source minifloat.

    Sign = the top bit; E = 0: subnormal m * 2^(1 - bias - mbits); otherwise (2^mbits + m) *
    2^(E - bias - mbits), except the special codes of ``special``: IEEE (E all ones: inf for m = 0,
    NaN otherwise), fn (only E and m all ones: NaN) or finite (none)."""
    u = np.int64(u)
    neg = (u >> (ebits + mbits)) & 1
    e = (u >> mbits) & ((np.int64(1) << ebits) - 1)
    m = u & ((np.int64(1) << mbits) - 1)
    e_ones = (np.int64(1) << ebits) - 1
    m_ones = (np.int64(1) << mbits) - 1
    if special == 0 and e == e_ones:
        v = math.inf if m == 0 else math.nan
    elif special == 1 and e == e_ones and m == m_ones:
        v = math.nan
    elif e == 0:
        v = math.ldexp(np.float64(m), 1 - bias - mbits)
    else:
        v = math.ldexp(np.float64(m + (np.int64(1) << mbits)), e - bias - mbits)
    return -v if neg else v


@njit(cache=True)
def _decode_bits(u: np.integer | int, ebits: int, mbits: int) -> float:
    """The float64 value (exact) of the bits of an IEEE-style 1+ebits+mbits format (fp16, bf16, fp32)."""
    return _decode_minifloat(u, ebits, mbits, (1 << (ebits - 1)) - 1, 0)


@njit(cache=True)
def _decode_e8m0(u: np.int64) -> float:
    """The float64 value (exact) of an e8m0 scale byte: 2^(E - 127), NaN for E = 0xFF."""
    u = np.int64(u) & 0xFF
    if u == _E8M0_NAN:
        return math.nan
    return math.ldexp(1.0, u - _E8M0_BIAS)


@njit(cache=True)
def _decode_minifloat_array(u: np.ndarray, ebits: int, mbits: int, bias: int, special: int) -> np.ndarray:
    out = np.empty(u.shape[0], dtype=np.float64)
    for i in range(u.shape[0]):
        out[i] = _decode_minifloat(u[i], ebits, mbits, bias, special)
    return out


@njit(cache=True)
def _decode_e8m0_array(u: np.ndarray) -> np.ndarray:
    out = np.empty(u.shape[0], dtype=np.float64)
    for i in range(u.shape[0]):
        out[i] = _decode_e8m0(u[i])
    return out


@njit(cache=True)
def _sum_round_to_odd(a: float, b: float) -> float:
    """``a + b`` rounded to odd at float64 precision (exact sums, zeros and non-finite sums are
    returned as the plain float64 sum, with IEEE signed-zero rules).

    Knuth's TwoSum gives ``a + b = s + err`` exactly (no overflow for the magnitudes here). If
    ``err != 0`` the exact sum lies strictly between ``s`` and its float64 neighbour towards
    ``err``; rounding to odd picks whichever of the two has an odd significand.
    """
    s = a + b
    if math.isinf(s) or math.isnan(s):
        return s
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    if err == 0.0:
        return s
    m, e = math.frexp(abs(s))  # s != 0 here: a zero float64 sum is exact
    big_m = np.int64(m * 9007199254740992.0)  # |s| = big_m * 2^(e - 53), big_m in [2^52, 2^53)
    if big_m & 1:
        return s
    # big_m is even, so big_m + 1 <= 2^53 - 1 and big_m - 1 >= 2^52 - 1: both exact at scale e - 53.
    big_m += 1 if (err > 0.0) == (s > 0.0) else -1
    return math.copysign(math.ldexp(np.float64(big_m), e - 53), s)


@njit(cache=True)
def _sum_round_to_odd_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``_sum_round_to_odd`` elementwise over 1-D float64 arrays (for tests)."""
    out = np.empty(a.shape[0], dtype=np.float64)
    for i in range(a.shape[0]):
        out[i] = _sum_round_to_odd(a[i], b[i])
    return out


# ----------------------------------------------------------------------------------------------
# The dequantization loop.
# ----------------------------------------------------------------------------------------------


@njit(cache=True)
def _code_value(q: np.int64, bits: int, kind: int, bias: int) -> np.int64:
    if kind == 1:
        # Two's complement: the top bit of the field weighs -2^(bits-1) instead of +2^(bits-1).
        return q - ((q >> (bits - 1)) << bits)
    if kind == 2:
        return q - bias
    return q


@njit(cache=True)
def _element(
    d: float,  # code value (exact)
    g: np.integer | int,
    n: np.integer | int,
    sc: np.ndarray,  # float64 [G, N]: target scales, or decoded block scales
    zi: np.ndarray,  # int64 [G, N] (packed modes) or a dummy
    zf: np.ndarray,  # float64 [G, N] (float / additive) or a dummy
    mode: int,
    gscale: float,  # the fp32 global scale (NaN-free dummy 1.0 when there is none)
    fp32_step: bool,  # e4m3 block scales: apply gscale and round to fp32 first
    ebits: int,
    mbits: int,
) -> np.uint16:
    s = sc[g, n]
    if fp32_step:
        # d * s * g: at most 2 + 4 + 24 significant bits, magnitudes in [2^-159, 2^142]: exact in float64.
        t = d * s * gscale
        t = _decode_bits(_round_to_bits(t, _FP32_EBITS, _FP32_MBITS), _FP32_EBITS, _FP32_MBITS)  # one fp32 rounding
        return _round_bits(t, ebits, mbits)
    if mode == 1:  # packed integer zeros: exact integer subtraction, one rounding
        return _round_bits((d - np.float64(zi[g, n])) * s, ebits, mbits)
    if mode == 2:  # float zeros: round(round(q - z) * s)
        t = _decode_bits(_round_bits(_sum_round_to_odd(d, -zf[g, n]), ebits, mbits), ebits, mbits)
        return _round_bits(t * s, ebits, mbits)  # <= 11-bit times <= 11-bit significands: exact
    if mode == 3:  # additive: round(q * s + b), one rounding of the exact sum
        return _round_bits(_sum_round_to_odd(d * s, zf[g, n]), ebits, mbits)
    return _round_bits(d * s, ebits, mbits)


@njit(cache=True)
def _unpack_zeros(zw: np.ndarray, order: np.ndarray, bits: int, offset: int) -> np.ndarray:
    """uint32 [G, N/P] words packed along N -> int64 z [G, N] (stored field + offset)."""
    per_word = 32 // bits
    mask = (np.int64(1) << bits) - 1
    out = np.empty((zw.shape[0], zw.shape[1] * per_word), dtype=np.int64)
    for g in range(zw.shape[0]):
        for i in range(zw.shape[1]):
            w = np.int64(zw[g, i])
            for j in range(per_word):
                out[g, i * per_word + order[j]] = ((w >> (bits * j)) & mask) + offset
    return out


@njit(cache=True)
def _dequant_kernel(
    qw: np.ndarray,  # uint32 2-D
    cvals: np.ndarray,  # float64 [2^bits]: the exact code value of every stored code
    sc: np.ndarray,  # float64 [G, N], exact values of the scales (target dtype or decoded block scales)
    zi: np.ndarray,  # int64 [G, N] unpacked integer zero points z (mode 1), else a dummy
    zf: np.ndarray,  # float64 [G, N] float zeros / additive b (modes 2, 3), else a dummy
    row_group: np.ndarray,  # int64 [K]: the scales / zeros row of each row k
    order: np.ndarray,  # int64 [P]
    bits: int,
    words: int,
    axis_n: bool,
    mode: int,
    gscale: float,
    fp32_step: bool,
    k_rows: int,
    n_cols: int,
    ebits: int,
    mbits: int,
) -> np.ndarray:
    mask = (np.int64(1) << bits) - 1
    out = np.empty((k_rows, n_cols), dtype=np.uint16)
    if words > 1:
        # Multi-word blocks along K: code i of block b is bits [bits*i, bits*i + bits) of the
        # little-endian integer of words qw[b*words + 0 .. words-1, n]. Read one bit at a time:
        # bit p of the block is bit p % 32 of its word p // 32.
        per_block = 32 * words // bits
        for b in range(qw.shape[0] // words):
            for n in range(n_cols):
                for i in range(per_block):
                    q = np.int64(0)
                    for t in range(bits):
                        p = bits * i + t
                        w = np.int64(qw[b * words + p // 32, n])
                        q |= ((w >> (p % 32)) & 1) << t
                    k = b * per_block + order[i]
                    out[k, n] = _element(cvals[q], row_group[k], n, sc, zi, zf, mode, gscale, fp32_step, ebits, mbits)
        return out
    per_word = 32 // bits
    if axis_n:
        for k in range(k_rows):
            g = row_group[k]
            for i in range(qw.shape[1]):
                # Widen to int64 first: uint32 is read as unsigned, and int64 shifts stay integral.
                w = np.int64(qw[k, i])
                for j in range(per_word):
                    q = (w >> (bits * j)) & mask
                    n = i * per_word + order[j]
                    out[k, n] = _element(cvals[q], g, n, sc, zi, zf, mode, gscale, fp32_step, ebits, mbits)
    else:
        for i in range(qw.shape[0]):
            for n in range(n_cols):
                w = np.int64(qw[i, n])
                for j in range(per_word):
                    q = (w >> (bits * j)) & mask
                    k = i * per_word + order[j]
                    out[k, n] = _element(cvals[q], row_group[k], n, sc, zi, zf, mode, gscale, fp32_step, ebits, mbits)
    return out


def _code_values(spec: Spec) -> np.ndarray:
    """float64 [2^bits]: the exact code value of every stored code q (see the module docstring).

    Integer kinds: q, two's complement or q - bias. float: the minifloat decoded from its fields.
    codebook: each listed value rounded once (nearest-even) to the target; codes past the end: 0."""
    bits = spec.source.bits
    codes = np.arange(1 << bits, dtype=np.int64)
    kind = spec.source.kind
    if kind is SourceKind.float:
        assert spec.source.format is not None
        ebits, mbits, bias, special = _MINIFLOATS[spec.source.format]
        if 1 + ebits + mbits != bits:
            raise ValueError(f"[source.bits] {spec.source.format} is {1 + ebits + mbits} bits wide, got {bits}")
        return _decode_minifloat_array(codes, ebits, mbits, bias, special)
    if kind is SourceKind.codebook:
        tb, tm = _FORMAT_BITS[spec.target]
        vals = [float(v) for v in spec.source.codebook_values]
        out = np.zeros(1 << bits, dtype=np.float64)
        for q, v in enumerate(vals[: 1 << bits]):
            out[q] = _decode_bits(_round_bits(v, tb, tm), tb, tm)
        return out
    return np.array(
        [float(_code_value(q, bits, _KIND_CODE[kind], int(spec.source.offset))) for q in codes], dtype=np.float64
    )


# ----------------------------------------------------------------------------------------------
# Shapes, validation and the public entry points.
# ----------------------------------------------------------------------------------------------


def example_group_size(spec: Spec, K: int) -> int:
    """The group size to generate inputs with: the spec's, or for ``group_size: auto`` 128 when it divides K
    (AWQ's and GPTQ's usual size), else one group of all of K."""
    g = spec.scales.group_size
    if g != "auto":
        return g
    return 128 if K % 128 == 0 and 128 % spec.per_word == 0 else max(K, 1)


def _groups(spec: Spec, k: int) -> int:
    g = example_group_size(spec, k)
    return 1 if g == -1 else k // g


def _resolve_auto(spec: Spec, qweight: object, scales: object) -> Spec:
    """An auto-group spec fixed to K / rows of ``scales`` (unchanged otherwise, or when the shapes are malformed:
    ``_validate`` then names the bad tensor)."""
    if spec.scales.group_size != "auto":
        return spec
    if not (isinstance(qweight, np.ndarray) and isinstance(scales, np.ndarray) and qweight.ndim == scales.ndim == 2):
        return with_group_size(spec, example_group_size(spec, 0))
    K = Layout.of(spec).k_of(qweight.shape[0])
    return with_group_size(spec, resolve_group_size(spec, K, scales.shape[0]))


def shapes_for(spec: Spec, K: int, N: int) -> dict[str, tuple[int, ...]]:
    """Expected shapes of ``qweight``, ``scales``, ``zeros`` (any mode but ``none``), ``g_idx``
    (``act_order`` only) and ``global_scale`` (``scales.global_scale`` only: (1,)) for W[K, N].

    With multi-word blocks (``spec.words`` > 1, e.g. 3-bit) ``qweight`` is ``(K * words / B, N)``,
    B = ``spec.per_word`` codes per block (3-bit: ``(3K/32, N)``)."""
    p = spec.per_word
    words = spec.words
    g = example_group_size(spec, K)
    if K < 0 or N < 0:
        raise ValueError(f"K and N must be non-negative, got K={K}, N={N}")
    if g != -1 and K % g:
        raise ValueError(f"K={K} is not a multiple of scales.group_size={g}")
    if spec.packing.axis == "N" and N % p:
        raise ValueError(f"N={N} is not a multiple of {p} ({p} {spec.source.bits}-bit codes per word packed along N)")
    if spec.packing.axis == "K" and K % p:
        unit = "word" if words == 1 else f"{words}-word block"
        raise ValueError(f"K={K} is not a multiple of {p} ({p} {spec.source.bits}-bit codes per {unit} packed along K)")
    if spec.zeros.mode in _PACKED_MODES and N % p:
        raise ValueError(f"N={N} is not a multiple of {p} (zeros are packed along N)")
    # the shapes are the Layout's (the one owner of shapes); the words' bits are decoded here independently
    shapes = Layout.of(spec).shapes(K, N, _groups(spec, K))
    del shapes["out"]
    return shapes


def element_value(spec: Spec, code: int, zero: int = 0) -> int | float:
    """The exact integer ``code_value(code) - z`` of one element (pure Python). ``zero`` is the
    stored packed zero field; z is that field plus 1 for ``gptq_v1`` (no wrap-around).

    For ``float`` and ``codebook`` sources (which take no zero points) the exact code value as a
    float: the decoded minifloat (inf / NaN included), or the codebook entry rounded to the target."""
    bits = spec.source.bits
    q = code & ((1 << bits) - 1)
    if spec.source.kind in (SourceKind.float, SourceKind.codebook):
        return float(_code_values(spec)[q])
    if spec.source.kind is SourceKind.signed:
        v = q - (1 << bits) if q >> (bits - 1) else q
    elif spec.source.kind is SourceKind.biased:
        assert spec.source.bias is not None
        v = q - spec.source.bias
    else:
        v = q
    z = (zero & ((1 << bits) - 1)) + _STORED_ZERO_OFFSET.get(spec.zeros.mode, 0)
    return v - z


def _describe(a: np.ndarray) -> str:
    return f"{tuple(a.shape)} {a.dtype.name}"


def _check_array(name: str, a: object, ndim: int) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array, got shape {tuple(a.shape)} {a.dtype.name}")
    return a


_WORD_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))
_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


#: ml_dtypes arrays accepted as block-scale codes (read as their bytes), besides uint8.
_BLOCK_SCALE_ML_DTYPES: dict[str, np.dtype] = {
    "e8m0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
}


def _validate(
    spec: Spec, qweight: object, scales: object, zeros: object, g_idx: object, global_scale: object = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, float | None, int, int]:
    """Check every input against the spec; return (qweight, scales, zeros, g_idx, global_scale, K, N).

    Block-scale codes come back as a uint8 view; the global scale as the float64 value of its fp32."""
    spec = _resolve_auto(spec, qweight, scales)
    p = spec.per_word
    words = spec.words
    bits = spec.source.bits
    axis = spec.packing.axis
    g = spec.scales.group_size
    tdt = target_dtype(spec)
    mode = spec.zeros.mode

    qw = _check_array("qweight", qweight, 2)
    if qw.dtype not in _WORD_DTYPES:
        raise ValueError(f"qweight: expected dtype int32 (or uint32) packed words, got {_describe(qw)}")
    sc = _check_array("scales", scales, 2)
    if spec.scales.block:
        assert spec.scales.dtype is not None
        sd = spec.scales.dtype.value
        ml = _BLOCK_SCALE_ML_DTYPES[sd]
        if sc.dtype not in (np.dtype(np.uint8), ml):
            raise ValueError(
                f"scales: expected uint8 {sd} block-scale codes (or ml_dtypes {ml.name}) for scales.dtype {sd}, "
                f"got {_describe(sc)}"
            )
        sc = sc.view(np.uint8)
        sdt_name = f"uint8 ({sd} codes)"
    else:
        if sc.dtype != tdt:
            raise ValueError(f"scales: expected dtype {tdt.name} (the target {spec.target.value}), got {_describe(sc)}")
        sdt_name = tdt.name
    zr: np.ndarray | None = None
    if mode in _PACKED_MODES:
        if zeros is None:
            raise ValueError(f"zeros: required for zeros.mode '{mode}' (packed int32 [G, N/P]), got None")
        zr = _check_array("zeros", zeros, 2)
        if zr.dtype not in _WORD_DTYPES:
            raise ValueError(
                f"zeros: expected dtype int32 (or uint32) packed words for zeros.mode '{mode}', got {_describe(zr)}"
            )
    elif mode != "none":
        if zeros is None:
            raise ValueError(f"zeros: required for zeros.mode '{mode}' ({tdt.name} [G, N]), got None")
        zr = _check_array("zeros", zeros, 2)
        if zr.dtype != tdt:
            raise ValueError(
                f"zeros: expected dtype {tdt.name} (the target {spec.target.value}) for zeros.mode '{mode}', "
                f"got {_describe(zr)}"
            )
    elif zeros is not None:
        raise ValueError(f"zeros: spec has zeros.mode 'none' but zeros were given ({_describe(np.asarray(zeros))})")

    if words > 1 and qw.shape[0] % words:
        raise ValueError(
            f"qweight: {qw.shape[0]} rows (qweight.shape[0]) is not a multiple of {words}: {bits}-bit codes are "
            f"packed along K in blocks of {words} int32 words holding {p} rows each; expected shape "
            f"(K * {words} / {p}, N), got {_describe(qw)}"
        )
    k_rows = Layout.of(spec).k_of(qw.shape[0])
    n_cols = sc.shape[1]
    if axis == "N":
        k_src = "qweight.shape[0]"
    elif words == 1:
        k_src = f"qweight.shape[0] * {p}"
    else:
        k_src = f"qweight.shape[0] / {words} * {p}"
    assert g != "auto", "_resolve_auto fixed the group size"
    if g != -1 and k_rows % g:
        raise ValueError(f"qweight: K={k_rows} (from {k_src}) is not a multiple of scales.group_size={g}")
    if axis == "N" and n_cols % p:
        raise ValueError(
            f"scales: N={n_cols} (scales.shape[1]) is not a multiple of {p}, "
            f"the number of {bits}-bit codes per word packed along N"
        )
    if mode in _PACKED_MODES and n_cols % p:
        raise ValueError(
            f"zeros: N={n_cols} (scales.shape[1]) is not a multiple of {p}, "
            f"the number of {bits}-bit zero points per word packed along N"
        )
    shapes = shapes_for(spec, k_rows, n_cols)
    ctx = f"K={k_rows} (from {k_src}), N={n_cols} (from scales.shape[1]) packed along {axis}"
    if qw.shape != shapes["qweight"]:
        raise ValueError(f"qweight: expected shape {shapes['qweight']} int32 for {ctx}, got {_describe(qw)}")
    if sc.shape != shapes["scales"]:
        gdesc = "per-channel (group_size -1)" if g == -1 else f"group_size={g}"
        raise ValueError(
            f"scales: expected shape {shapes['scales']} {sdt_name} for K={k_rows}, N={n_cols}, {gdesc}, "
            f"got {_describe(sc)}"
        )
    if zr is not None and zr.shape != shapes["zeros"]:
        zdt = "int32" if mode in _PACKED_MODES else tdt.name
        raise ValueError(
            f"zeros: expected shape {shapes['zeros']} {zdt} for zeros.mode '{mode}', {ctx}, got {_describe(zr)}"
        )

    gi: np.ndarray | None = None
    if spec.act_order:
        if g_idx is None:
            raise ValueError(f"g_idx: required for act_order (int32 [K={k_rows}], the group of each row), got None")
        gi = _check_array("g_idx", g_idx, 1)
        if gi.dtype not in _INDEX_DTYPES:
            raise ValueError(f"g_idx: expected dtype int32 (or int64), got {_describe(gi)}")
        if gi.shape != (k_rows,):
            raise ValueError(
                f"g_idx: expected shape ({k_rows},) int32 for K={k_rows} (from {k_src}), got {_describe(gi)}"
            )
        n_groups = shapes["scales"][0]
        bad = np.nonzero((gi < 0) | (gi >= n_groups))[0]
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"g_idx: value {int(gi[i])} at index {i} is out of range; expected group ids in "
                f"[0, {n_groups}) (G = K / group_size = {k_rows} / {g}); {bad.size} such entries"
            )
    elif g_idx is not None:
        raise ValueError(
            f"g_idx: spec has act_order false but g_idx was given ({_describe(np.asarray(g_idx))}); "
            "rows use group k // group_size"
        )

    gs: float | None = None
    if spec.scales.global_scale:
        if global_scale is None:
            raise ValueError(
                "global_scale: required for scales.global_scale true (NVFP4: a 1-element float32 array, the "
                "per-tensor fp32 scale), got None"
            )
        if not isinstance(global_scale, np.ndarray):
            raise ValueError(
                f"global_scale: expected a 1-element float32 numpy array, got {type(global_scale).__name__}"
            )
        if global_scale.dtype != np.float32 or global_scale.size != 1:
            raise ValueError(f"global_scale: expected a 1-element float32 array, got {_describe(global_scale)}")
        gs = float(global_scale.reshape(-1)[0])  # exact widening of fp32
    elif global_scale is not None:
        raise ValueError(
            f"global_scale: spec has scales.global_scale false but global_scale was given "
            f"({_describe(np.asarray(global_scale))})"
        )
    return qw, sc, zr, gi, gs, k_rows, n_cols


def dequantize_reference(
    spec: Spec,
    qweight: np.ndarray,
    scales: np.ndarray,
    zeros: np.ndarray | None = None,
    g_idx: np.ndarray | None = None,
    global_scale: np.ndarray | None = None,
) -> np.ndarray:
    """Dequantize packed ``qweight`` to ``W[K, N]`` in the target dtype (float16 or bfloat16).

    ``scales`` are in the target dtype, or uint8 block-scale codes for ``scales.dtype`` e8m0 / e4m3
    (ml_dtypes float8_e8m0fnu / float8_e4m3fn arrays are read as their bytes). ``zeros`` is required
    iff ``zeros.mode`` is not ``none`` (see the module docstring for its layout per mode); ``g_idx``
    is required iff ``spec.act_order``; ``global_scale`` (a one-element float32 array) is required iff
    ``scales.global_scale``. Every error is a ValueError starting with the offending tensor's name."""
    spec = _resolve_auto(spec, qweight, scales)
    qw, sc, zr, gi, gs, k_rows, n_cols = _validate(spec, qweight, scales, zeros, g_idx, global_scale)
    ebits, mbits = _FORMAT_BITS[spec.target]
    g = spec.scales.group_size
    assert g != "auto"  # _resolve_auto fixed it from the scales
    mode = spec.zeros.mode
    group = max(k_rows, 1) if g == -1 else g
    if gi is not None:
        row_group = gi.astype(np.int64)
    else:
        row_group = np.arange(k_rows, dtype=np.int64) // group
    zi = np.zeros((1, 1), dtype=np.int64)
    zf = np.zeros((1, 1), dtype=np.float64)
    if mode in _PACKED_MODES:
        assert zr is not None
        zi = _unpack_zeros(
            np.ascontiguousarray(zr).view(np.uint32),
            np.asarray(_zero_field_order(spec), dtype=np.int64),
            int(spec.source.bits),
            _STORED_ZERO_OFFSET[mode],
        )
    elif mode != "none":
        assert zr is not None
        zf = np.ascontiguousarray(zr.astype(np.float64))  # exact widening of fp16 / bf16
    qw_u = np.ascontiguousarray(qw).view(np.uint32)
    fp32_step = False
    if spec.scales.block:
        assert spec.scales.dtype is not None
        codes = np.ascontiguousarray(sc, dtype=np.uint8).reshape(-1).astype(np.int64)
        if spec.scales.dtype.value == "e8m0":
            flat = _decode_e8m0_array(codes)
        else:
            eb, mb, bias, special = _MINIFLOATS["e4m3"]
            flat = _decode_minifloat_array(codes, eb, mb, bias, special)
            fp32_step = gs is not None
        sc64 = flat.reshape(sc.shape)
    else:
        sc64 = np.ascontiguousarray(sc.astype(np.float64))  # exact widening of fp16 / bf16
    bits_out = _dequant_kernel(
        qw_u,
        _code_values(spec),
        sc64,
        zi,
        zf,
        row_group,
        np.asarray(spec.order, dtype=np.int64),
        int(spec.source.bits),
        int(spec.words),
        spec.packing.axis == "N",
        _MODE_CODE[mode],
        1.0 if gs is None else gs,
        fp32_step,
        int(k_rows),
        int(n_cols),
        ebits,
        mbits,
    )
    return bits_out.view(target_dtype(spec))


#: Exponent of the global scale per ``seed % 7`` in ``random_global_scale``: tiny ones first
#: (2^-20 * an e4m3 scale underflows fp16 before the element is applied), then ordinary ones.
_GLOBAL_SCALE_EXPONENTS = (-20, -24, -12, -6, -2, 0, 3)


def _block_scale_codes(spec: Spec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """uint8 block-scale codes [G, N]: mostly structured, realistic scales, plus every one of the 256
    codes somewhere (up to a quarter of the blocks; the special codes first when fewer fit).

    Structured part: the scale exponent of block (g, n) is a shuffled cycle of 13 exponents indexed
    by (3g + 5n) mod 13, so neighbouring blocks along K and along N always differ (random exponents
    repeat, and hide a block read from the wrong place). e8m0: 2^-10 .. 2^2; e4m3: positive, exponent
    2^-6 .. 2^6 with a random mantissa."""
    assert spec.scales.dtype is not None
    sd = spec.scales.dtype.value
    G, N = shape
    idx = (3 * np.arange(G)[:, None] + 5 * np.arange(N)[None, :]) % 13
    cycle = rng.permutation(13)
    if sd == "e8m0":
        codes = (127 - 10 + cycle[idx]).astype(np.int64)
        specials = [0x00, 0xFF, 0x01, 0xFE, 0x7F, 0x80]
    else:
        mant = rng.integers(0, 8, size=(G, N))
        codes = ((1 + cycle[idx]) << 3) | mant  # exponent field 1..13: 2^-6 .. 2^6
        # NaNs, zeros, subnormals (smallest, largest), the largest finite, negatives.
        specials = [0x7F, 0xFF, 0x00, 0x80, 0x01, 0x07, 0x7E, 0x81, 0xFE, 0x08]
    flat = codes.reshape(-1)
    rest = [c for c in rng.permutation(256).tolist() if c not in specials]
    every = np.array(specials + rest, dtype=np.int64)
    n_every = min(256, flat.size // 4)
    if n_every:
        flat[rng.choice(flat.size, size=n_every, replace=False)] = every[:n_every]
    return flat.reshape(G, N).astype(np.uint8)


def random_global_scale(spec: Spec, seed: int) -> np.ndarray | None:
    """A random per-tensor fp32 global scale, float32 shape (1,), for specs with
    ``scales.global_scale``; None otherwise.

    Positive, with a random 24-bit mantissa (so the fp32 rounding of ``q * e4m3(s) * g`` is inexact)
    and an exponent picked by ``seed % 7`` from (-20, -24, -12, -6, -2, 0, 3): seeds 0 and 1 give
    tiny scales (2^-20, 2^-24), with which scaling in fp16 before applying the global scale
    underflows although the bf16 result is representable."""
    if not spec.scales.global_scale:
        return None
    rng = np.random.default_rng(seed)
    e = _GLOBAL_SCALE_EXPONENTS[seed % len(_GLOBAL_SCALE_EXPONENTS)]
    mant = 1.0 + rng.integers(1, 1 << 23) * 2.0**-23  # in (1, 2), exact in fp32
    return np.array([math.ldexp(mant, e)], dtype=np.float32)


def random_inputs(
    spec: Spec, K: int, N: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Random ``(qweight, scales, zeros, g_idx)`` for W[K, N]: full-range packed words, finite
    signed scales of varied magnitude, zeros per ``zeros.mode`` (None for ``none``) and, for
    ``act_order``, a g_idx in which every group id appears exactly group_size times, shuffled
    (like GPTQ's desc_act); None otherwise.

    - ``qweight``: uniform random words, so every code appears (minifloat NaN / inf / -0 codes
      included); multi-word blocks are ``[K * words / per_block, N]``.
    - block scales (e8m0 / e4m3): uint8 codes, see ``_block_scale_codes``: structured per-block
      exponents plus every one of the 256 codes (NaN ones included) somewhere in the tensor. The
      global scale of NVFP4 specs comes from ``random_global_scale``.
    - packed zero modes: full-range packed words (every stored zero, 2^bits - 1 included).
    - ``float``: zeros uniform in [0, 2^bits), rounded to the target (mostly non-integers).
    - ``additive``: b = -u * s with u uniform in [0, 2^bits), rounded to the target: a pre-scaled
      zero of the same magnitude as q * s.
    """
    rng = np.random.default_rng(seed)
    shapes = shapes_for(spec, K, N)
    tdt = target_dtype(spec)
    bits = spec.source.bits

    def words(shape: tuple[int, ...]) -> np.ndarray:
        # Uniform 32-bit words make every code, including 0 and 2^bits - 1, equally likely.
        return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.int32)

    qweight = words(shapes["qweight"])
    sshape = shapes["scales"]
    if spec.scales.block:
        scales = _block_scale_codes(spec, sshape, rng)
    else:
        sign = np.where(rng.random(sshape) < 0.5, -1.0, 1.0)
        mag = 2.0 ** rng.uniform(-12.0, 2.0, size=sshape)
        scales = (sign * mag).astype(tdt)
    mode = spec.zeros.mode
    zeros: np.ndarray | None = None
    if mode in _PACKED_MODES:
        zeros = words(shapes["zeros"])
    elif mode == "float":
        zeros = rng.uniform(0.0, 2.0**bits, size=shapes["zeros"]).astype(np.float32).astype(tdt)
    elif mode == "additive":
        u = rng.uniform(0.0, 2.0**bits, size=shapes["zeros"])
        zeros = (-u * scales.astype(np.float64)).astype(np.float32).astype(tdt)
    g_idx: np.ndarray | None = None
    if spec.act_order:
        gs = example_group_size(spec, K)
        g_idx = np.repeat(np.arange(K // gs, dtype=np.int32), gs)
        rng.shuffle(g_idx)
    return qweight, scales, zeros, g_idx
