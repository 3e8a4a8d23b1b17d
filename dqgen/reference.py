"""The independent CPU reference dequantizer: the oracle every generated kernel is checked against.

It is written straight from the formula in ``dqgen.spec`` with plain shifts and masks, and on
purpose imports nothing else from dqgen (no formats, ISA, plan or solver): a bug shared by the
generator and its oracle would otherwise go unnoticed.

Layouts (P = 32 // bits codes per int32 word; field j = bits [j*bits, (j+1)*bits) holds element
``order[j]`` of the word's run of P consecutive elements):

- packing along N: ``qweight`` int32 [K, N/P]; word (k, i) field j is W[k, i*P + order[j]].
- packing along K: ``qweight`` int32 [K/P, N]; word (i, n) field j is W[i*P + order[j], n].
- ``scales`` [G, N] in the target dtype, G = K // group_size (1 for group_size -1).
- ``zeros`` (mode integer only) int32 [G, N/P], packed along N exactly like qweight.

Each element is ``round_to_nearest_even_in_target((code_value - zero) * scale)``. The product of
a <=9-bit integer and an <=11-bit-significand scale is exact in float64, so rounding that float64
once to the target is the correctly rounded result.
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
def _dequant_kernel(
    qw: np.ndarray,  # uint32 2-D
    sc: np.ndarray,  # float64 [G, N], exact copies of the target-dtype scales
    zw: np.ndarray,  # uint32 [G, N/P], or a dummy when has_zeros is False
    has_zeros: bool,
    order: np.ndarray,  # int64 [P]
    bits: int,
    kind: int,
    bias: int,
    axis_n: bool,
    group: int,  # rows per scale group, already resolved for group_size -1
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
            g = k // group
            for i in range(qw.shape[1]):
                # Widen to int64 first: uint32 is read as unsigned, and int64 shifts stay integral.
                w = np.int64(qw[k, i])
                zword = np.int64(zw[g, i]) if has_zeros else np.int64(0)
                for j in range(per_word):
                    q = (w >> (bits * j)) & mask
                    d = _code_value(q, bits, kind, bias)
                    if has_zeros:
                        d -= (zword >> (bits * j)) & mask
                    n = i * per_word + order[j]
                    out[k, n] = _round_bits(np.float64(d) * sc[g, n], ebits, mbits)
    else:
        for i in range(qw.shape[0]):
            for n in range(n_cols):
                w = np.int64(qw[i, n])
                for j in range(per_word):
                    q = (w >> (bits * j)) & mask
                    d = _code_value(q, bits, kind, bias)
                    k = i * per_word + order[j]
                    out[k, n] = _round_bits(np.float64(d) * sc[k // group, n], ebits, mbits)
    return out


# ----------------------------------------------------------------------------------------------
# Shapes, validation and the public entry points.
# ----------------------------------------------------------------------------------------------


def _groups(spec: Spec, k: int) -> int:
    g = spec.scales.group_size
    return 1 if g == -1 else k // g


def shapes_for(spec: Spec, K: int, N: int) -> dict[str, tuple[int, ...]]:
    """Expected shapes of ``qweight``, ``scales`` and (integer zeros only) ``zeros`` for W[K, N]."""
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
    if spec.zeros.mode == "integer":
        if N % p:
            raise ValueError(f"N={N} is not a multiple of {p} (zeros are packed along N)")
        shapes["zeros"] = (_groups(spec, K), N // p)
    return shapes


def element_value(spec: Spec, code: int, zero: int = 0) -> int:
    """The exact integer ``code_value(code) - zero`` of one element (pure Python)."""
    bits = spec.source.bits
    q = code & ((1 << bits) - 1)
    if spec.source.kind is SourceKind.signed:
        v = q - (1 << bits) if q >> (bits - 1) else q
    elif spec.source.kind is SourceKind.biased:
        assert spec.source.bias is not None
        v = q - spec.source.bias
    else:
        v = q
    return v - (zero & ((1 << bits) - 1))


def _describe(a: np.ndarray) -> str:
    return f"{tuple(a.shape)} {a.dtype.name}"


def _check_array(name: str, a: object, ndim: int) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array, got shape {tuple(a.shape)} {a.dtype.name}")
    return a


_WORD_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))


def _validate(
    spec: Spec, qweight: object, scales: object, zeros: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int]:
    """Check every input against the spec; return (qweight, scales, zeros, K, N)."""
    p = spec.per_word
    bits = spec.source.bits
    axis = spec.packing.axis
    g = spec.scales.group_size
    tdt = target_dtype(spec)

    qw = _check_array("qweight", qweight, 2)
    if qw.dtype not in _WORD_DTYPES:
        raise ValueError(f"qweight: expected dtype int32 (or uint32) packed words, got {_describe(qw)}")
    sc = _check_array("scales", scales, 2)
    if sc.dtype != tdt:
        raise ValueError(
            f"scales: expected dtype {tdt.name} (the target {spec.target.value}), got {_describe(sc)}"
        )
    zr: np.ndarray | None = None
    if spec.zeros.mode == "integer":
        if zeros is None:
            raise ValueError("zeros: required for zeros.mode 'integer' (packed int32 [G, N/P]), got None")
        zr = _check_array("zeros", zeros, 2)
        if zr.dtype not in _WORD_DTYPES:
            raise ValueError(f"zeros: expected dtype int32 (or uint32) packed words, got {_describe(zr)}")
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
        raise ValueError(f"zeros: expected shape {shapes['zeros']} int32 for {ctx}, got {_describe(zr)}")
    return qw, sc, zr, k_rows, n_cols


def dequantize_reference(
    spec: Spec, qweight: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None = None
) -> np.ndarray:
    """Dequantize packed ``qweight`` to ``W[K, N]`` in the target dtype (float16 or bfloat16)."""
    qw, sc, zr, k_rows, n_cols = _validate(spec, qweight, scales, zeros)
    ebits, mbits = _FORMAT_BITS[spec.target]
    g = spec.scales.group_size
    group = max(k_rows, 1) if g == -1 else g
    qw_u = np.ascontiguousarray(qw).view(np.uint32)
    zw_u = np.ascontiguousarray(zr).view(np.uint32) if zr is not None else np.zeros((1, 1), dtype=np.uint32)
    sc64 = np.ascontiguousarray(sc.astype(np.float64))  # exact widening of fp16 / bf16
    bits_out = _dequant_kernel(
        qw_u,
        sc64,
        zw_u,
        zr is not None,
        np.asarray(spec.order, dtype=np.int64),
        int(spec.source.bits),
        _KIND_CODE[spec.source.kind],
        int(spec.source.offset),
        spec.packing.axis == "N",
        int(group),
        int(k_rows),
        int(n_cols),
        ebits,
        mbits,
    )
    return bits_out.view(target_dtype(spec))


def random_inputs(
    spec: Spec, K: int, N: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Random full-range packed ``qweight``, finite signed scales of varied magnitude, and zeros."""
    rng = np.random.default_rng(seed)
    shapes = shapes_for(spec, K, N)

    def words(shape: tuple[int, ...]) -> np.ndarray:
        # Uniform 32-bit words make every code, including 0 and 2^bits - 1, equally likely.
        return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.int32)

    qweight = words(shapes["qweight"])
    sshape = shapes["scales"]
    sign = np.where(rng.random(sshape) < 0.5, -1.0, 1.0)
    mag = 2.0 ** rng.uniform(-12.0, 2.0, size=sshape)
    scales = (sign * mag).astype(target_dtype(spec))
    zeros = words(shapes["zeros"]) if "zeros" in shapes else None
    return qweight, scales, zeros
