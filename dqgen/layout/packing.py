"""Pack, unpack and repack integer codes and zero points in a spec's 32-bit word layout (numpy, CPU).

The layouts (field positions, blocks of several words, packed zero points along N in
``zero_order``, every tensor's shape) are ``dqgen.layout.layout.Layout``'s: this module validates
codes and moves them with its ``pack_fields`` / ``unpack_fields``.

Everything here works on *stored* field values, the unsigned ``bits``-wide integers that sit in
the words; what they mean (``source.kind``, ``zeros.mode``) is the spec's business. For ``float``
sources (e4m3, e5m2, e2m1) and ``codebook`` sources the codes are the raw bit patterns / codebook
indices ``0 .. 2^bits - 1``. All work is
integer numpy arithmetic, vectorised over elements (the only Python loops run over the ``P``
fields of a word), so repacking never passes through floats and is exact.
"""

from __future__ import annotations

import numpy as np

from dqgen.core.formats import numpy_dtype
from dqgen.core.spec import (
    CONTAINER_BITS,
    PACKED_ZERO_MODES,
    SourceKind,
    Spec,
    SpecError,
    SpecLike,
    block_words,
    load_spec,
)
from dqgen.layout.layout import Layout

__all__ = ["pack", "pack_zeros", "repack", "unpack", "unpack_zeros", "zeros_from_stored", "zeros_to_stored"]

_WORD_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32))


# ----------------------------------------------------------------------------------------------
# Validation helpers: every error is one line that starts with the tensor (or spec field) name.
# ----------------------------------------------------------------------------------------------


def _describe(a: np.ndarray) -> str:
    return f"{tuple(a.shape)} {a.dtype.name}"


def _check_spec(spec: object, name: str = "spec") -> Spec:
    """A Spec from anything ``dqgen.load_spec`` takes (a Spec, a shipped name, a path, YAML text or a dict)."""
    if isinstance(spec, Spec):
        return spec
    try:
        return load_spec(spec)  # type: ignore[arg-type]  # load_spec itself refuses other types (TypeError)
    except (SpecError, TypeError) as e:
        # name the argument: repack takes two specs
        raise type(e)(f"{name}: {str(e).removeprefix('spec: ')}") from None


def _int_array(name: str, a: object, ndim: int | None) -> np.ndarray:
    """An integer numpy array of ``ndim`` dimensions (None: any), else ValueError naming ``name``."""
    arr = np.asarray(a)
    # bool is not an integer dtype to numpy, and silently packing True as 1 would hide a mistake.
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer array, got {_describe(arr)}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array, got shape {_describe(arr)}")
    return arr


def _word_array(name: str, a: object) -> np.ndarray:
    """A 2-D int32/uint32 array of packed words, returned as a uint32 view (no copy)."""
    arr = np.asarray(a)
    if arr.dtype not in _WORD_DTYPES:
        raise ValueError(f"{name}: expected dtype int32 (or uint32) packed words, got {_describe(arr)}")
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array of packed words, got shape {_describe(arr)}")
    # Same itemsize, so the view reinterprets the two's complement bits as they are, strides and all.
    return arr.view(np.uint32)


def _check_range(name: str, a: np.ndarray, lo: int, hi: int, what: str) -> None:
    """Raise unless every element of ``a`` lies in ``[lo, hi)``; the message gives the offending min/max."""
    if a.size == 0:
        return
    # Python ints: exact for every integer dtype (uint64 included), no wrap in the comparison.
    mn, mx = int(a.min()), int(a.max())
    if mn < lo or mx >= hi:
        raise ValueError(f"{name}: values must be in [{lo}, {hi}) ({what}), got min {mn}, max {mx}")


def _check_packed_axis(name: str, a: np.ndarray, axis: str, p: int, bits: int) -> None:
    dim = 1 if axis == "N" else 0
    size = a.shape[dim]
    if size % p:
        words = block_words(bits)
        unit = f"{CONTAINER_BITS}-bit word" if words == 1 else f"block of {words} {CONTAINER_BITS}-bit words"
        raise ValueError(
            f"{name}: {axis}={size} ({name}.shape[{dim}]) is not a multiple of {p}, the number of "
            f"{bits}-bit codes per {unit} packed along {axis}"
        )


def _check_block_rows(name: str, words: np.ndarray, bits: int, axis: str) -> None:
    """Multi-word blocks: the packed rows must come in whole blocks of ``words`` int32 words."""
    nw = block_words(bits)
    if nw == 1:
        return
    if axis != "K":
        raise ValueError(f"[packing.axis] {bits}-bit codes straddle words and are packed along K only, got {axis!r}")
    if words.shape[0] % nw:
        b = CONTAINER_BITS * nw // bits
        raise ValueError(
            f"{name}: {words.shape[0]} rows ({name}.shape[0]) is not a multiple of {nw}: {bits}-bit codes are packed "
            f"along K in blocks of {nw} int32 words holding {b} rows each; expected shape (K * {nw} / {b}, N), "
            f"got {_describe(words)}"
        )


def _packed_zero_spec(spec: Spec, name: str = "zeros.mode") -> None:
    if not spec.zeros.packed:
        raise ValueError(
            f"[{name}] got {spec.zeros.mode!r}; expected one of the packed modes {PACKED_ZERO_MODES} "
            f"(only those store zero points as packed integer words)"
        )


# ----------------------------------------------------------------------------------------------
# Weights.
# ----------------------------------------------------------------------------------------------


def _codes_to_fields(codes: object, spec: Spec, name: str) -> np.ndarray:
    """Validate codes W[K, N] against the spec and reduce them to unsigned field values."""
    bits = spec.source.bits
    kind = spec.source.kind
    arr = np.asarray(codes)
    element = spec.source.scalar_type
    # an ml_dtypes array of the spec's format (float8_e4m3fn, float4_e2m1fn): its bit patterns are the codes
    if kind is SourceKind.float and element is not None and arr.dtype == numpy_dtype(element):
        arr = arr.view(np.uint8)
    arr = _int_array(name, arr, 2)
    if kind is SourceKind.signed:
        # Signed specs take either the stored field value or the two's complement value it means;
        # both reduce to the same field bits under the mask below.
        _check_range(
            name,
            arr,
            -(1 << (bits - 1)),
            1 << bits,
            f"{spec.source.short}: stored field values [0, {1 << bits}) or two's complement "
            f"values [{-(1 << (bits - 1))}, {1 << (bits - 1)})",
        )
    elif kind is SourceKind.float:
        _check_range(name, arr, 0, 1 << bits, f"raw {bits}-bit patterns of {spec.source.short} codes")
    elif kind is SourceKind.codebook:
        _check_range(name, arr, 0, 1 << bits, f"{bits}-bit indices into the {spec.source.short} codebook")
    else:
        # Biased codes are given as stored q (value q - bias), so the same unsigned range applies.
        _check_range(name, arr, 0, 1 << bits, f"stored {bits}-bit field values of {spec.source.short} codes")
    _check_packed_axis(name, arr, spec.packing.axis, spec.per_word, bits)
    # int64 holds every in-range value of every integer dtype; & keeps the two's complement bits.
    return (arr.astype(np.int64) & ((1 << bits) - 1)).astype(np.uint32)


def pack(codes: np.ndarray, spec: SpecLike) -> np.ndarray:
    """Pack integer codes ``W[K, N]`` into the spec's int32 ``qweight`` layout.

    ``codes`` (any integer dtype) are the *stored* unsigned field values in ``[0, 2^bits)``; for a
    ``biased`` spec that is ``q`` (the value being ``q - bias``), not the value. For a ``signed``
    spec negative values in ``[-2^(bits-1), 0)`` are accepted as well and stored as their two's
    complement bits (``-1`` stores as ``2^bits - 1``), so both the values and their stored fields
    may be given. For ``float`` specs the codes are the minifloats' raw bit patterns (an ml_dtypes
    float8_e4m3fn / float8_e5m2 / float4_e2m1fn array of the spec's format is accepted as such), for
    ``codebook`` specs the indices into the codebook. Returns int32 ``[K, N/P]`` (packing along N),
    ``[K/P, N]`` (along K) or, for multi-word blocks (``spec.words`` > 1, e.g. 3-bit),
    ``[K * words / P, N]`` with P = ``spec.per_word`` codes per block (3-bit: ``[3K/32, N]``).

    Raises ValueError naming ``codes`` for a non-integer or non-2-D array, a value out of range
    (with the offending min/max and the allowed range) or a packed axis not a multiple of P.
    """
    spec = _check_spec(spec)
    fields = _codes_to_fields(codes, spec, "codes")
    return Layout.of(spec).pack_fields(fields)


def unpack(qweight: np.ndarray, spec: SpecLike) -> np.ndarray:
    """Inverse of ``pack``: the stored unsigned field values ``W[K, N]`` of int32/uint32 ``qweight``,
    as uint8 (codes are at most 8 bits wide). Signed and biased codes come back as stored, not as
    values; float codes as their bit patterns. Raises ValueError naming ``qweight`` for a wrong dtype,
    a non-2-D array, or (multi-word blocks) a row count that is not a whole number of blocks."""
    spec = _check_spec(spec)
    words = _word_array("qweight", qweight)
    _check_block_rows("qweight", np.asarray(qweight), spec.source.bits, spec.packing.axis)
    return Layout.of(spec).unpack_fields(words)


# ----------------------------------------------------------------------------------------------
# Zero points (packed modes only).
# ----------------------------------------------------------------------------------------------


def _zero_fields(zeros: object, spec: Spec, name: str) -> np.ndarray:
    bits = spec.source.bits
    arr = _int_array(name, zeros, 2)
    _check_range(name, arr, 0, 1 << bits, f"stored {bits}-bit zero fields for zeros.mode {spec.zeros.mode!r}")
    _check_packed_axis(name, arr, "N", spec.per_word, bits)  # zeros are packed along N in every layout
    return arr.astype(np.uint32)


def pack_zeros(zeros: np.ndarray, spec: SpecLike) -> np.ndarray:
    """Pack stored zero values ``Z[G, N]`` (unsigned, ``[0, 2^bits)``) into int32 ``qzeros [G, N/P]``,
    along N in ``spec.zero_order`` (the weights' order for AWQ-style specs, sequential for GPTQ-style
    ones). These are *stored* values: use ``zeros_to_stored`` first to go from true zero points
    (gptq_v1 stores z - 1). Raises ValueError naming ``zeros`` for bad values or shapes, and
    ``[zeros.mode]`` when the spec has no packed zeros."""
    spec = _check_spec(spec)
    _packed_zero_spec(spec)
    fields = _zero_fields(zeros, spec, "zeros")
    return (lay := Layout.of(spec)).pack_fields(fields, lay.zero_order, "N")


def unpack_zeros(qzeros: np.ndarray, spec: SpecLike) -> np.ndarray:
    """Inverse of ``pack_zeros``: stored zero values ``Z[G, N]`` as uint8 (``zeros_from_stored``
    turns them into true zero points)."""
    spec = _check_spec(spec)
    _packed_zero_spec(spec)
    words = _word_array("qzeros", qzeros)
    return (lay := Layout.of(spec)).unpack_fields(words, lay.zero_order, "N")


def _zeros_to_stored(z: object, spec: Spec, name: str) -> np.ndarray:
    bits = spec.source.bits
    arr = _int_array(name, z, None)
    if spec.zeros.mode == "gptq_v1":
        if arr.size and int(arr.min()) == 0:
            # Checked before the range so the message says why 0 in particular is refused.
            raise ValueError(
                f"{name}: a zero point of 0 is not representable in gptq_v1 (stored as z - 1 it wraps to "
                f"{(1 << bits) - 1}, which reads back as {1 << bits}); use zeros.mode 'gptq_v2' "
                f"(or 'integer'), which stores z as is"
            )
        _check_range(
            name,
            arr,
            1,
            (1 << bits) + 1,
            f"true zero points for gptq_v1, stored as z - 1 in {bits} bits; 0 needs gptq_v2",
        )
    else:
        _check_range(name, arr, 0, 1 << bits, f"true zero points for zeros.mode {spec.zeros.mode!r}, stored as is")
    return (arr.astype(np.int64) - spec.zeros.stored_offset).astype(np.uint8)


def zeros_to_stored(z: np.ndarray, spec: SpecLike) -> np.ndarray:
    """True integer zero points ``z`` (any shape) -> the stored fields for ``spec.zeros.mode``, uint8.

    ``integer`` / ``gptq_v2`` store ``z`` in ``[0, 2^bits)`` as is; ``gptq_v1`` stores ``z - 1``, so it
    takes ``z`` in ``[1, 2^bits]``. A zero point of 0 under gptq_v1 would wrap (it is what GPTQ's
    original packer silently did) and raises ValueError naming ``zeros`` and suggesting gptq_v2."""
    spec = _check_spec(spec)
    _packed_zero_spec(spec)
    return _zeros_to_stored(z, spec, "zeros")


def _zeros_from_stored(stored: object, spec: Spec, name: str) -> np.ndarray:
    bits = spec.source.bits
    arr = _int_array(name, stored, None)
    _check_range(name, arr, 0, 1 << bits, f"stored {bits}-bit zero fields for zeros.mode {spec.zeros.mode!r}")
    return arr.astype(np.int32) + np.int32(spec.zeros.stored_offset)


def zeros_from_stored(stored: np.ndarray, spec: SpecLike) -> np.ndarray:
    """Inverse of ``zeros_to_stored``: stored fields -> true zero points as int32
    (``stored + 1`` for gptq_v1, so a stored ``2^bits - 1`` reads as ``2^bits``; ``stored`` otherwise)."""
    spec = _check_spec(spec)
    _packed_zero_spec(spec)
    return _zeros_from_stored(stored, spec, "zeros")


# ----------------------------------------------------------------------------------------------
# Repacking between layouts.
# ----------------------------------------------------------------------------------------------


def repack(
    qweight: np.ndarray, from_spec: SpecLike, to_spec: SpecLike, *, qzeros: np.ndarray | None = None
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Move packed integer codes from ``from_spec``'s layout to ``to_spec``'s, exactly, in integers.

    E.g. GPTQ (sequential along K, ``[K/P, N]``) -> AWQ (awq order along N, ``[K, N/P]``). Multi-word
    blocks (3-, 5-, 6-, 7-bit, along K only) and float / codebook codes move as raw bits too. Both specs
    need the same ``source.bits`` (ValueError naming ``[source.bits]`` otherwise). Repack moves
    *stored bits*; it does not re-bias: when ``source.kind`` (or ``bias``) differ, every element keeps
    its stored field, and so may mean a different value under ``to_spec`` (stored 8 is 0 in u4b8,
    8 in u4 and -8 in s4). Re-bias the unpacked codes yourself if that is what you want.

    With ``qzeros`` (``[G, N/P]``, both specs need a packed ``zeros.mode``) the zero points are repacked
    too, from ``from_spec.zero_order`` to ``to_spec.zero_order``, and ``(qweight, qzeros)`` is
    returned. Unlike the weights, zero points keep their *meaning*: when the zero modes store them
    differently (gptq_v1 stores z - 1, integer / gptq_v2 store z) they are converted, because moving
    the bits would shift every dequantized value by one scale step; a zero point the target mode
    cannot hold (gptq_v1's z = 2^bits into gptq_v2, z = 0 into gptq_v1) raises ValueError naming ``qzeros``.
    """
    from_spec = _check_spec(from_spec, "from_spec")
    to_spec = _check_spec(to_spec, "to_spec")
    bits = from_spec.source.bits
    if to_spec.source.bits != bits:
        raise ValueError(
            f"[source.bits] from_spec has {bits}-bit codes but to_spec has {to_spec.source.bits}-bit codes; "
            f"repack moves codes between layouts of one width"
        )
    words = _word_array("qweight", qweight)
    _check_block_rows("qweight", np.asarray(qweight), bits, from_spec.packing.axis)
    src, dst = Layout.of(from_spec), Layout.of(to_spec)
    codes = src.unpack_fields(words)
    # The unpacked W[K, N] is in range by construction; only the new packed axis can fail, and the
    # message names qweight and the axis (e.g. N not a multiple of P for GPTQ -> AWQ).
    _check_packed_axis_repacked(codes, to_spec)
    new_qweight = dst.pack_fields(codes)
    if qzeros is None:
        return new_qweight
    _packed_zero_spec(from_spec, "zeros.mode (from_spec)")
    _packed_zero_spec(to_spec, "zeros.mode (to_spec)")
    stored = src.unpack_fields(_word_array("qzeros", qzeros), src.zero_order, "N")
    if stored.shape[1] != codes.shape[1]:
        raise ValueError(
            f"qzeros: holds N={stored.shape[1]} columns (qzeros.shape[1] * {from_spec.per_word}) but qweight "
            f"holds N={codes.shape[1]}; expected qzeros of shape (G, {codes.shape[1] // from_spec.per_word})"
        )
    if from_spec.zeros.stored_offset != to_spec.zeros.stored_offset:
        z = _zeros_from_stored(stored, from_spec, "qzeros")
        stored = _zeros_to_stored(z, to_spec, "qzeros")
    return new_qweight, dst.pack_fields(stored, dst.zero_order, "N")


def _check_packed_axis_repacked(codes: np.ndarray, to_spec: Spec) -> None:
    p = to_spec.per_word
    axis = to_spec.packing.axis
    size = codes.shape[1 if axis == "N" else 0]
    if size % p:
        unit = "word" if to_spec.words == 1 else f"{to_spec.words}-word block"
        raise ValueError(
            f"qweight: unpacks to W{tuple(codes.shape)}, whose {axis}={size} is not a multiple of {p}, the "
            f"number of {to_spec.source.bits}-bit codes per {unit} packed along {axis} in to_spec"
        )
