"""The independent CPU reference dequantizer: the oracle every generated kernel is checked against.

It is written straight from the formulas in ``dqgen.spec`` (the docstrings of ``Spec``, ``Source``,
``Packing``, ``Scales`` and ``Zeros``) with plain shifts and masks, and on purpose imports nothing
else from dqgen (no formats, ISA, plan or solver): a bug shared by the generator and its oracle
would otherwise go unnoticed. Even the packed-zeros field order is derived here from the prose,
not taken from ``Spec.zero_order``.

Layouts (P = 32 // bits codes per int32 word; field j = bits [j*bits, (j+1)*bits) holds element
``order[j]`` of the word's run of P consecutive elements):

- packing along N: ``qweight`` int32 [K, N/P]; word (k, i) field j is W[k, i*P + order[j]].
- packing along K: ``qweight`` int32 [K/P, N]; word (i, n) field j is W[i*P + order[j], n].
- ``scales`` [G, N] in the target dtype, G = K // group_size (1 for group_size -1).
- ``zeros`` by ``zeros.mode``:
  - ``none``: no tensor.
  - ``integer`` / ``gptq_v2`` / ``gptq_v1``: int32 [G, N/P], always packed along N: word (g, i)
    field j is the stored zero of column i*P + zorder[j], where zorder is the weights' order when
    they are packed along N and sequential when they are packed along K. z = stored (+1 for
    ``gptq_v1``, without wrap-around: stored 2^bits - 1 reads as z = 2^bits).
  - ``float`` / ``additive``: [G, N] in the target dtype.
- ``g_idx`` (``act_order`` only): int [K]; row k uses scales / zeros row ``g_idx[k]`` instead of
  ``k // group_size``.

Values (q is the element's code value, s its scale, round = round-to-nearest-even in the target):

- ``none``: round(q * s). q * s (<= 9-bit integer times <= 11-bit significand) is exact in float64,
  so rounding that float64 once is the correctly rounded result.
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

from dqgen.spec import SourceKind, Spec, Target

__all__ = ["dequantize_reference", "shapes_for", "element_value", "random_inputs", "target_dtype"]

# (ebits, mbits) of the targets; stated here rather than imported so the oracle stays independent.
_FORMAT_BITS: dict[Target, tuple[int, int]] = {Target.fp16: (5, 10), Target.bf16: (8, 7)}

_KIND_CODE: dict[SourceKind, int] = {SourceKind.unsigned: 0, SourceKind.signed: 1, SourceKind.biased: 2}


def target_dtype(spec: Spec) -> np.dtype:
    """The numpy dtype of the target (and of the scales)."""
    return np.dtype(np.float16) if spec.target is Target.fp16 else np.dtype(ml_dtypes.bfloat16)


# ----------------------------------------------------------------------------------------------
# Rounding float64 -> 16-bit float bits, round to nearest even.
# ----------------------------------------------------------------------------------------------


@njit(cache=False)
def _round_bits(x: float, ebits: int, mbits: int) -> np.uint16:
    """Round a float64 to the nearest-even value of a 1+ebits+mbits format; return its bits."""
    sign_bit = np.int64(1) << (ebits + mbits)
    exp_all_ones = (np.int64(1) << ebits) - 1
    if x != x:  # NaN: the canonical quiet NaN; the reference never produces one from finite inputs
        return np.uint16((exp_all_ones << mbits) | (np.int64(1) << (mbits - 1)))
    # copysign, not x < 0, so that -0.0 keeps its sign.
    sign = sign_bit if math.copysign(1.0, x) < 0.0 else np.int64(0)
    a = abs(x)
    if a == 0.0:
        return np.uint16(sign)
    if math.isinf(a):
        return np.uint16(sign | (exp_all_ones << mbits))
    bias = (np.int64(1) << (ebits - 1)) - 1
    emin = 1 - bias  # exponent of the smallest normal
    m, e = math.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    big_m = np.int64(m * 9007199254740992.0)  # exact: a = big_m * 2^(e - 53), big_m in [2^52, 2^53)
    exp = np.int64(e) - 1  # a = 1.f * 2^exp
    if exp + bias >= exp_all_ones:
        # Even the rounded-down value would not fit: beyond any finite value.
        return np.uint16(sign | (exp_all_ones << mbits))
    # Below the normal range the quantum stays 2^(emin - mbits), so more bits are dropped.
    shift = np.int64(52 - mbits)
    if exp < emin:
        shift += emin - exp
    if shift > 60:
        # big_m < 2^53 <= 2^(shift - 1) / 2^6: far below half the smallest subnormal.
        return np.uint16(sign)
    r = big_m >> shift
    rem = big_m & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    if rem > half or (rem == half and (r & 1) == 1):
        r += 1
    if exp < emin:
        # r counts quanta of the subnormal range; r == 2^mbits lands exactly on the smallest
        # normal, whose bit pattern is that same integer.
        return np.uint16(sign | r)
    # r includes the hidden bit (in [2^mbits, 2^(mbits+1)]); adding it to (biased_exp - 1)
    # lets a rounding carry bump the exponent, and turn the largest finite into inf.
    return np.uint16(sign | (((exp + bias - 1) << mbits) + r))


@njit(cache=False)
def _round_array(x: np.ndarray, ebits: int, mbits: int) -> np.ndarray:
    """``_round_bits`` over a 1-D float64 array (for tests and small conversions)."""
    out = np.empty(x.shape[0], dtype=np.uint16)
    for i in range(x.shape[0]):
        out[i] = _round_bits(x[i], ebits, mbits)
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


@njit(cache=False)
def _decode_bits(u: np.int64, ebits: int, mbits: int) -> float:
    """The float64 value (exact) of the bits of a 1+ebits+mbits format."""
    u = np.int64(u)
    neg = (u >> (ebits + mbits)) & 1
    e = (u >> mbits) & ((np.int64(1) << ebits) - 1)
    m = u & ((np.int64(1) << mbits) - 1)
    bias = (np.int64(1) << (ebits - 1)) - 1
    if e == (np.int64(1) << ebits) - 1:
        v = math.inf if m == 0 else math.nan
    elif e == 0:
        v = math.ldexp(np.float64(m), 1 - bias - mbits)
    else:
        v = math.ldexp(np.float64(m + (np.int64(1) << mbits)), e - bias - mbits)
    return -v if neg else v


@njit(cache=False)
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


@njit(cache=False)
def _sum_round_to_odd_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``_sum_round_to_odd`` elementwise over 1-D float64 arrays (for tests)."""
    out = np.empty(a.shape[0], dtype=np.float64)
    for i in range(a.shape[0]):
        out[i] = _sum_round_to_odd(a[i], b[i])
    return out


# ----------------------------------------------------------------------------------------------
# The dequantization loop.
# ----------------------------------------------------------------------------------------------


@njit(cache=False)
def _code_value(q: np.int64, bits: int, kind: int, bias: int) -> np.int64:
    if kind == 1:
        # Two's complement: the top bit of the field weighs -2^(bits-1) instead of +2^(bits-1).
        return q - ((q >> (bits - 1)) << bits)
    if kind == 2:
        return q - bias
    return q


@njit(cache=False)
def _element(
    d: np.int64,  # code value
    g: np.int64,
    n: np.int64,
    sc: np.ndarray,  # float64 [G, N]
    zi: np.ndarray,  # int64 [G, N] (packed modes) or a dummy
    zf: np.ndarray,  # float64 [G, N] (float / additive) or a dummy
    mode: int,
    ebits: int,
    mbits: int,
) -> np.uint16:
    s = sc[g, n]
    if mode == 1:  # packed integer zeros: exact integer subtraction, one rounding
        return _round_bits(np.float64(d - zi[g, n]) * s, ebits, mbits)
    if mode == 2:  # float zeros: round(round(q - z) * s)
        t = _decode_bits(_round_bits(_sum_round_to_odd(np.float64(d), -zf[g, n]), ebits, mbits), ebits, mbits)
        return _round_bits(t * s, ebits, mbits)  # <= 11-bit times <= 11-bit significands: exact
    if mode == 3:  # additive: round(q * s + b), one rounding of the exact sum
        return _round_bits(_sum_round_to_odd(np.float64(d) * s, zf[g, n]), ebits, mbits)
    return _round_bits(np.float64(d) * s, ebits, mbits)


@njit(cache=False)
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


@njit(cache=False)
def _dequant_kernel(
    qw: np.ndarray,  # uint32 2-D
    sc: np.ndarray,  # float64 [G, N], exact copies of the target-dtype scales
    zi: np.ndarray,  # int64 [G, N] unpacked integer zero points z (mode 1), else a dummy
    zf: np.ndarray,  # float64 [G, N] float zeros / additive b (modes 2, 3), else a dummy
    row_group: np.ndarray,  # int64 [K]: the scales / zeros row of each row k
    order: np.ndarray,  # int64 [P]
    bits: int,
    kind: int,
    bias: int,
    axis_n: bool,
    mode: int,
    k_rows: int,
    n_cols: int,
    ebits: int,
    mbits: int,
) -> np.ndarray:
    per_word = 32 // bits
    mask = (np.int64(1) << bits) - 1
    out = np.empty((k_rows, n_cols), dtype=np.uint16)
    if axis_n:
        for k in range(k_rows):
            g = row_group[k]
            for i in range(qw.shape[1]):
                # Widen to int64 first: uint32 is read as unsigned, and int64 shifts stay integral.
                w = np.int64(qw[k, i])
                for j in range(per_word):
                    q = (w >> (bits * j)) & mask
                    d = _code_value(q, bits, kind, bias)
                    n = i * per_word + order[j]
                    out[k, n] = _element(d, g, n, sc, zi, zf, mode, ebits, mbits)
    else:
        for i in range(qw.shape[0]):
            for n in range(n_cols):
                w = np.int64(qw[i, n])
                for j in range(per_word):
                    q = (w >> (bits * j)) & mask
                    d = _code_value(q, bits, kind, bias)
                    k = i * per_word + order[j]
                    out[k, n] = _element(d, row_group[k], n, sc, zi, zf, mode, ebits, mbits)
    return out


# ----------------------------------------------------------------------------------------------
# Shapes, validation and the public entry points.
# ----------------------------------------------------------------------------------------------


def _groups(spec: Spec, k: int) -> int:
    g = spec.scales.group_size
    return 1 if g == -1 else k // g


def shapes_for(spec: Spec, K: int, N: int) -> dict[str, tuple[int, ...]]:
    """Expected shapes of ``qweight``, ``scales``, ``zeros`` (any mode but ``none``) and ``g_idx``
    (``act_order`` only) for W[K, N]."""
    p = spec.per_word
    g = spec.scales.group_size
    if K < 0 or N < 0:
        raise ValueError(f"K and N must be non-negative, got K={K}, N={N}")
    if g != -1 and K % g:
        raise ValueError(f"K={K} is not a multiple of scales.group_size={g}")
    if spec.packing.axis == "N":
        if N % p:
            raise ValueError(f"N={N} is not a multiple of {p} ({p} {spec.source.bits}-bit codes per word packed along N)")
        shapes: dict[str, tuple[int, ...]] = {"qweight": (K, N // p)}
    else:
        if K % p:
            raise ValueError(f"K={K} is not a multiple of {p} ({p} {spec.source.bits}-bit codes per word packed along K)")
        shapes = {"qweight": (K // p, N)}
    shapes["scales"] = (_groups(spec, K), N)
    mode = spec.zeros.mode
    if mode in _PACKED_MODES:
        if N % p:
            raise ValueError(f"N={N} is not a multiple of {p} (zeros are packed along N)")
        shapes["zeros"] = (_groups(spec, K), N // p)
    elif mode != "none":
        shapes["zeros"] = (_groups(spec, K), N)
    if spec.act_order:
        shapes["g_idx"] = (K,)
    return shapes


def element_value(spec: Spec, code: int, zero: int = 0) -> int:
    """The exact integer ``code_value(code) - z`` of one element (pure Python). ``zero`` is the
    stored packed zero field; z is that field plus 1 for ``gptq_v1`` (no wrap-around)."""
    bits = spec.source.bits
    q = code & ((1 << bits) - 1)
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


def _validate(
    spec: Spec, qweight: object, scales: object, zeros: object, g_idx: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, int, int]:
    """Check every input against the spec; return (qweight, scales, zeros, g_idx, K, N)."""
    p = spec.per_word
    bits = spec.source.bits
    axis = spec.packing.axis
    g = spec.scales.group_size
    tdt = target_dtype(spec)
    mode = spec.zeros.mode

    qw = _check_array("qweight", qweight, 2)
    if qw.dtype not in _WORD_DTYPES:
        raise ValueError(f"qweight: expected dtype int32 (or uint32) packed words, got {_describe(qw)}")
    sc = _check_array("scales", scales, 2)
    if sc.dtype != tdt:
        raise ValueError(
            f"scales: expected dtype {tdt.name} (the target {spec.target.value}), got {_describe(sc)}"
        )
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

    k_rows = qw.shape[0] * (p if axis == "K" else 1)
    n_cols = sc.shape[1]
    k_src = "qweight.shape[0]" if axis == "N" else f"qweight.shape[0] * {p}"
    if g != -1 and k_rows % g:
        raise ValueError(
            f"qweight: K={k_rows} (from {k_src}) is not a multiple of scales.group_size={g}"
        )
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
            f"scales: expected shape {shapes['scales']} {tdt.name} for K={k_rows}, N={n_cols}, {gdesc}, "
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
            raise ValueError(f"g_idx: expected shape ({k_rows},) int32 for K={k_rows} (from {k_src}), got {_describe(gi)}")
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
    return qw, sc, zr, gi, k_rows, n_cols


def dequantize_reference(
    spec: Spec,
    qweight: np.ndarray,
    scales: np.ndarray,
    zeros: np.ndarray | None = None,
    g_idx: np.ndarray | None = None,
) -> np.ndarray:
    """Dequantize packed ``qweight`` to ``W[K, N]`` in the target dtype (float16 or bfloat16).

    ``zeros`` is required iff ``zeros.mode`` is not ``none`` (see the module docstring for its
    layout per mode); ``g_idx`` is required iff ``spec.act_order``."""
    qw, sc, zr, gi, k_rows, n_cols = _validate(spec, qweight, scales, zeros, g_idx)
    ebits, mbits = _FORMAT_BITS[spec.target]
    g = spec.scales.group_size
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
    sc64 = np.ascontiguousarray(sc.astype(np.float64))  # exact widening of fp16 / bf16
    bits_out = _dequant_kernel(
        qw_u,
        sc64,
        zi,
        zf,
        row_group,
        np.asarray(spec.order, dtype=np.int64),
        int(spec.source.bits),
        _KIND_CODE[spec.source.kind],
        int(spec.source.offset),
        spec.packing.axis == "N",
        _MODE_CODE[mode],
        int(k_rows),
        int(n_cols),
        ebits,
        mbits,
    )
    return bits_out.view(target_dtype(spec))


def random_inputs(
    spec: Spec, K: int, N: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Random ``(qweight, scales, zeros, g_idx)`` for W[K, N]: full-range packed words, finite
    signed scales of varied magnitude, zeros per ``zeros.mode`` (None for ``none``) and, for
    ``act_order``, a g_idx in which every group id appears exactly group_size times, shuffled
    (like GPTQ's desc_act); None otherwise.

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
        gs = spec.scales.group_size
        g_idx = np.repeat(np.arange(K // gs, dtype=np.int32), gs)
        rng.shuffle(g_idx)
    return qweight, scales, zeros, g_idx
