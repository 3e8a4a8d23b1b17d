"""TensorRT-LLM's mixed-input GEMM weight layout (seed 002; ``fpA_intB`` on sm75-89), derived, as index maps.

TensorRT-LLM feeds ``mma.sync.m16n8k16`` tensor cores with 4- or 8-bit weights B[K, N] that are loaded like
16-bit data: 128-bit global loads, ``cp.async`` into shared memory, ``ldmatrix`` (8x8 tiles of b16), then a
LOP3/PRMT conversion to fp16/bf16 pairs between ``ldmatrix`` and ``mma``. Each of those steps assumes a byte
order, and the weights are moved into it once, offline. This module derives each of the three transforms from
the parameters that force it (weight bits, activation bits, the mma B fragment, the 128-byte line) instead of
typing TensorRT-LLM's tables, and composes them into ``element_slots``: the position of every code W[k, n] in
the packed byte stream, a bijection that ``to_trt_layout`` / ``from_trt_layout`` scatter and gather through.

1. ``ldsm_row_permutation`` (TensorRT-LLM's ``permute_B_rows_for_mixed_gemm``): ``ldmatrix`` hands thread
   ``4g + t`` the 32-bit word at bytes ``[4t, 4t+4)`` of row ``g`` of an 8x8 b16 tile. With B stored per column
   n (K contiguous) that word holds E = 32 / bits packed codes, where fp16 data would hold 2. The mma B
   fragment wants thread t of column g to hold, in each 32-bit operand register, c = 32 / activation_bits
   consecutive k (fp16: ``2t, 2t+1``), the next register 4c rows further (fp16: ``2t+8, 2t+9``), the next mma
   step another 4c on. So code j of thread t's word must be k = ``c*t + j % c + 4c * (j // c)``, and a block of
   4E rows (4 threads x E codes: 32 for int4, 16 for int8) is stored in that order.
2. ``columns_interleaved`` (``ColumnMajorTileInterleave<ThreadblockK, ColumnsInterleaved>``): a CTA steps
   through K by ``threadblock_k`` = one 128-byte line of activations (1024 / activation_bits = 64 for fp16).
   The weight codes of those 64 k of one column fill only 64 * bits / 8 bytes (32 for int4, 64 for int8), so
   the line-sized, 128-bit-loadable unit holds 1024 / (threadblock_k * bits) = activation_bits / bits columns
   (4 for int4, 2 for int8): tiles of 64 codes of columns ``I*c .. I*c + I - 1`` sit next to each other.
3. ``register_order`` and ``bias`` (``add_bias_and_interleave_quantized_tensor_inplace``): the converter
   turns one 32-bit word into fp16x2 pairs; one LOP3 (int4, mask 0x000F000F) or PRMT (int8) fills the two
   16-bit halves of a pair from fields f and f + F/2 (F = 32 / bits fields per word: the halves are 16 bits =
   F/2 fields apart). The mma wants pair h = elements (2h, 2h+1), so field f holds element 2f and field
   f + F/2 element 2f + 1: int4 [0 2 4 6 1 3 5 7], int8 [0 2 1 3] (dqgen's ``awq`` / ``ft_int8`` order
   presets). The magic-number converter reads a field as an unsigned mantissa, so signed codes are stored
   biased by 2^(bits-1) (+8, +128): dqgen's ``biased`` kind (u4b8, u8b128).

The packed array is uint8 ``[N / I, K * I * bits / 8]``: row r holds columns ``r*I .. r*I + I - 1`` tile after
tile; ``.reshape(-1)`` is TensorRT-LLM's preprocessed byte stream (``.view(np.int32)``: its 32-bit words,
little-endian as on the GPU). Shapes: K a multiple of ``threadblock_k``, N of ``columns_interleaved``.
"""

from __future__ import annotations

import numpy as np

from ..core.spec import CONTAINER_BITS, SourceKind, Spec, load_spec
from .layout import Layout
from .packing import _check_spec, _word_array, unpack

__all__ = [
    "ACTIVATION_BITS",
    "WEIGHT_BITS",
    "bias",
    "checkpoint_from_trt",
    "columns_interleaved",
    "converter_spec",
    "element_slots",
    "from_trt_layout",
    "interleave_index",
    "ldsm_positions",
    "ldsm_row_permutation",
    "register_order",
    "repack_checkpoint",
    "threadblock_k",
    "to_trt_layout",
]

WEIGHT_BITS = (4, 8)  # the widths TensorRT-LLM's fpA_intB GEMM takes (uint4b_t, uint8_t)
ACTIVATION_BITS = (16, 8)  # fp16 / bf16 (mma k16), fp8 (TensorRT-LLM's W4_AFP8, mma k32)
LINE_BYTES = 128  # the L2 / shared-memory line one ThreadblockK step of activations fills
LDSM_THREADS_PER_ROW = 4  # ldmatrix: a 16-byte tile row goes to 4 threads, 4 bytes each


def _check_bits(bits: int, activation_bits: int = 16) -> None:
    if bits not in WEIGHT_BITS:
        raise ValueError(f"bits: TensorRT-LLM's mixed GEMM layout is defined for {WEIGHT_BITS}-bit weights, got {bits}")
    if activation_bits not in ACTIVATION_BITS:
        raise ValueError(f"activation_bits: expected one of {ACTIVATION_BITS} (fp16/bf16, fp8), got {activation_bits}")
    if activation_bits < bits:
        raise ValueError(f"activation_bits: {activation_bits} is narrower than the {bits}-bit weights")


def threadblock_k(activation_bits: int = 16) -> int:
    """K per CTA step: one 128-byte line of activations (64 for fp16/bf16, 128 for fp8)."""
    return LINE_BYTES * 8 // activation_bits


def columns_interleaved(bits: int, activation_bits: int = 16) -> int:
    """Columns whose ``threadblock_k`` codes share one 128-byte line: 1024 / (ThreadblockK * bits) =
    activation_bits / bits (fp16: 4 for int4, 2 for int8)."""
    _check_bits(bits, activation_bits)
    return LINE_BYTES * 8 // (threadblock_k(activation_bits) * bits)


def ldsm_row_permutation(bits: int, activation_bits: int = 16) -> tuple[int, ...]:
    """Position p of a block of 4E rows -> the k (within the block) stored there; E = 32 / bits codes per word.

    Position ``E*t + j`` is code j of the word ``ldmatrix`` gives thread t of a tile row; the mma B fragment puts
    c = 32 / activation_bits consecutive k in a register and the next register 4c rows on, so that code is
    k = c*t + j % c + 4c * (j // c)."""
    _check_bits(bits, activation_bits)
    per_word = CONTAINER_BITS // bits
    per_reg = CONTAINER_BITS // activation_bits  # consecutive k in one mma operand register
    band = LDSM_THREADS_PER_ROW * per_reg  # k rows one register of the 4 threads of a tile row covers
    return tuple(
        per_reg * t + j % per_reg + band * (j // per_reg) for t in range(LDSM_THREADS_PER_ROW) for j in range(per_word)
    )


def register_order(bits: int) -> tuple[int, ...]:
    """Field f of a 32-bit word -> the element it holds, so that the converter's pair h (fields h and h + F/2,
    16 bits apart) is elements (2h, 2h + 1): int4 (0 2 4 6 1 3 5 7), int8 (0 2 1 3); any width dividing 16."""
    if bits not in (1, 2, 4, 8):
        raise ValueError(f"bits: the register interleave pairs fields 16 bits apart; expected 1, 2, 4 or 8, got {bits}")
    half = CONTAINER_BITS // bits // 2
    return tuple(2 * f if f < half else 2 * (f - half) + 1 for f in range(2 * half))


def bias(bits: int) -> int:
    """What a signed code is stored plus: 2^(bits-1), the offset that maps [-2^(bits-1), 2^(bits-1)) onto the
    unsigned field range the magic-number converter reads (+8 int4, +128 int8)."""
    return 1 << (bits - 1)


# -- the composed index map ---------------------------------------------------------------------------------


def _check_shape(name: str, K: int, N: int, bits: int, activation_bits: int) -> None:
    tk, cols = threadblock_k(activation_bits), columns_interleaved(bits, activation_bits)
    if K <= 0 or K % tk:
        raise ValueError(
            f"{name}: K={K} is not a positive multiple of ThreadblockK={tk} (one 128-byte line of "
            f"{activation_bits}-bit activations); pad K with zero codes first"
        )
    if N <= 0 or N % cols:
        raise ValueError(
            f"{name}: N={N} is not a positive multiple of {cols}, the columns a 128-byte line of {bits}-bit "
            f"codes interleaves; pad N first"
        )


def ldsm_positions(K: int, bits: int, activation_bits: int = 16) -> np.ndarray:
    """[K] the storage position within its column of each k (transform 1, the inverse of the permutation)."""
    perm = np.array(ldsm_row_permutation(bits, activation_bits))
    rows = perm.size
    pos_in_block = np.argsort(perm)  # k -> position
    k = np.arange(K)
    return (k // rows) * rows + pos_in_block[k % rows]


def interleave_index(K: int, N: int, bits: int, activation_bits: int = 16) -> np.ndarray:
    """[K, N] the code index in the stream of storage position p (rows) of column n (transform 2): column group
    n // I, then ThreadblockK tile p // TK, then column n % I within the tile group, then p % TK."""
    tk, cols = threadblock_k(activation_bits), columns_interleaved(bits, activation_bits)
    p = np.arange(K)[:, None]
    n = np.arange(N)[None, :]
    return (n // cols) * (K * cols) + (p // tk) * (tk * cols) + (n % cols) * tk + p % tk


def element_slots(K: int, N: int, bits: int, activation_bits: int = 16) -> np.ndarray:
    """[K, N] int64: the slot (32-bit word * E + field) of the packed stream that holds code W[k, n], all three
    transforms composed; a permutation of range(K * N) (tests/test_layout_trt.py proves it)."""
    _check_shape("W", K, N, bits, activation_bits)
    per_word = CONTAINER_BITS // bits
    idx = interleave_index(K, N, bits, activation_bits)[ldsm_positions(K, bits, activation_bits), :]
    field_of = np.argsort(np.array(register_order(bits)))  # element -> field
    return (idx // per_word) * per_word + field_of[idx % per_word]


# -- scatter / gather ---------------------------------------------------------------------------------------


def _codes(codes: object, bits: int, signed: bool) -> np.ndarray:
    arr = np.asarray(codes)
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim != 2:
        raise ValueError(f"codes: expected a 2-D integer array W[K, N], got {tuple(arr.shape)} {arr.dtype.name}")
    lo, hi = (-bias(bits), bias(bits)) if signed else (0, 1 << bits)
    if arr.size and (int(arr.min()) < lo or int(arr.max()) >= hi):
        what = "signed values (signed=True)" if signed else "stored unsigned fields (signed=False)"
        raise ValueError(
            f"codes: {bits}-bit {what} must be in [{lo}, {hi}), got min {int(arr.min())}, max {int(arr.max())}"
        )
    # In range, so the uint8 cast keeps each value mod 256 and uint8 addition wraps: s + 2^(bits-1) (TensorRT-LLM's
    # bias) lands in [0, 2^bits) for every signed s, with one byte per code for the largest layers.
    fields = arr.astype(np.uint8)
    return fields + np.uint8(bias(bits)) if signed else fields


def _row_sources(K: int, bits: int, activation_bits: int) -> np.ndarray:
    """[K] the k stored at each storage position down a column (transform 1 applied block by block)."""
    perm = np.array(ldsm_row_permutation(bits, activation_bits))
    p = np.arange(K)
    return (p // perm.size) * perm.size + perm[p % perm.size]


def to_trt_layout(codes: np.ndarray, bits: int, *, signed: bool = False, activation_bits: int = 16) -> np.ndarray:
    """W[K, N] codes -> TensorRT-LLM's preprocessed bytes, uint8 ``[N / I, K * I * bits / 8]`` (module docstring).

    ``signed=False``: ``codes`` are the unsigned fields the converter reads (u4b8 / u8b128 as stored, AWQ's q)
    and go in as they are; ``signed=True``: two's complement values in [-2^(bits-1), 2^(bits-1)), TensorRT-LLM's
    input, stored plus ``bias(bits)``. ValueError naming ``codes`` for a bad array, range or shape.

    The same map as ``element_slots`` (the tests hold them equal), done as a row gather, one transpose and a
    field gather on uint8 so that a 8192 x 28672 layer needs a few bytes per code, not int64 indices."""
    _check_bits(bits, activation_bits)
    fields = _codes(codes, bits, signed)
    K, N = fields.shape
    _check_shape("codes", K, N, bits, activation_bits)
    tk, cols, per_word = threadblock_k(activation_bits), columns_interleaved(bits, activation_bits), 32 // bits
    stored = fields[_row_sources(K, bits, activation_bits), :]  # transform 1
    tiles = stored.reshape(K // tk, tk, N // cols, cols).transpose(2, 0, 3, 1)  # transform 2: [N/I, K/TK, I, TK]
    stream = tiles.reshape(-1, per_word)[:, list(register_order(bits))].reshape(-1)  # 3: field f <- order[f]
    if bits == 4:  # field 2i is the low nibble of byte i: field f of a little-endian word sits at bits 4f
        stream = stream[0::2] | (stream[1::2] << np.uint8(4))
    return stream.reshape(N // cols, K * cols * bits // 8)


def from_trt_layout(packed: np.ndarray, bits: int, *, signed: bool = False, activation_bits: int = 16) -> np.ndarray:
    """Inverse of ``to_trt_layout``: W[K, N] as uint8 stored fields, or (``signed=True``) int8 values."""
    _check_bits(bits, activation_bits)
    arr = np.asarray(packed)
    if arr.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)) or arr.ndim != 2:
        raise ValueError(
            f"packed: expected a 2-D uint8 array [N / I, K * I * bits / 8], got {tuple(arr.shape)} {arr.dtype.name}"
        )
    tk, cols, per_word = threadblock_k(activation_bits), columns_interleaved(bits, activation_bits), 32 // bits
    row_codes = arr.shape[1] * 8 // bits
    if row_codes % (tk * cols):
        raise ValueError(
            f"packed: a row of {arr.shape[1]} bytes holds {row_codes} {bits}-bit codes, not a whole number of "
            f"{cols} columns x ThreadblockK={tk} rows; expected shape (N / {cols}, K * {cols * bits // 8})"
        )
    N, K = arr.shape[0] * cols, row_codes // cols
    _check_shape("packed", K, N, bits, activation_bits)
    stream = arr.view(np.uint8).reshape(-1)
    if bits == 4:
        stream = np.stack([stream & np.uint8(0xF), stream >> np.uint8(4)], axis=1).reshape(-1)
    elements = stream.reshape(-1, per_word)[:, np.argsort(np.array(register_order(bits)))]  # undo 3
    stored = elements.reshape(N // cols, K // tk, cols, tk).transpose(1, 3, 0, 2).reshape(K, N)  # undo 2
    fields = stored[ldsm_positions(K, bits, activation_bits), :]  # undo 1: k sits at position ldsm_positions[k]
    if signed:
        return (fields.astype(np.int16) - bias(bits)).astype(np.int8)
    return np.ascontiguousarray(fields)


# -- checkpoints --------------------------------------------------------------------------------------------


def _check_trt_spec(spec: Spec) -> None:
    bits = spec.source.bits
    if spec.integer_target:
        raise ValueError(
            "[target] TensorRT-LLM's GEMM layout feeds an fp16 / bf16 mma; got 's8' "
            "(the W4A8 layout: dqgen.layout.w4a8)"
        )
    if bits not in WEIGHT_BITS:
        raise ValueError(f"[source.bits] TensorRT-LLM's GEMM layout takes {WEIGHT_BITS}-bit codes, got {bits}")
    # Any kind of 4- or 8-bit code: the three transforms move fields by their width alone, and the converter of
    # converter_spec (the spec's own Plan, solved for the register order) reads a minifloat's or a codebook's field
    # as it reads an integer's. Only signed codes change their stored bits (re-biased, the same values).


def converter_spec(spec: object) -> Spec:
    """The spec whose Layout and proven Plan describe one word of the TensorRT-LLM layout of ``spec``'s weights:
    packed along K in ``register_order``, signed codes re-stored biased by 2^(bits-1) (same values), every other
    field (scales, zeros, act_order, target) kept. Its packed zeros are in sequential order along N."""
    spec = _check_spec(spec)
    _check_trt_spec(spec)
    data = spec.model_dump(mode="json", exclude_none=True)
    data["name"] = f"{spec.name}_trt"
    bits = spec.source.bits
    if spec.source.kind is SourceKind.signed:
        data["source"] = {"bits": bits, "kind": "biased", "bias": bias(bits)}
    data["packing"] = {"axis": "K", "order": list(register_order(bits))}
    return load_spec(data)


def _trt_fields(spec: Spec, stored: np.ndarray) -> np.ndarray:
    """A spec's stored fields -> the converter spec's: a signed code s (stored as its two's complement bits)
    is stored s + 2^(bits-1), which is its bits with the top bit flipped; other kinds keep their fields."""
    if spec.source.kind is SourceKind.signed:
        return stored ^ np.uint8(bias(spec.source.bits))
    return stored


def repack_checkpoint(
    spec: object, qweight: np.ndarray, *, qzeros: np.ndarray | None = None
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Move a checkpoint's ``qweight`` (``spec``'s layout: AWQ, GPTQ, int8 ...) into TensorRT-LLM's GEMM layout
    once at load: unpack with the spec's Layout, re-bias signed codes, ``to_trt_layout``. With ``qzeros``
    (packed zeros) also returns them repacked into ``converter_spec(spec)``'s zero order (sequential along N).
    ValueError naming ``qweight`` / ``qzeros`` / the spec field for what does not fit."""
    spec = _check_spec(spec)
    _check_trt_spec(spec)
    stored = unpack(qweight, spec)
    K, N = stored.shape
    _check_shape("qweight", K, N, spec.source.bits, 16)
    packed = to_trt_layout(_trt_fields(spec, stored), spec.source.bits)
    if qzeros is None:
        return packed
    if not spec.zeros.packed:
        raise ValueError(f"qzeros: given, but spec {spec.name!r} has zeros.mode {spec.zeros.mode!r} (not packed)")
    src, dst = Layout.of(spec), Layout.of(converter_spec(spec))
    zeros = src.unpack_fields(_word_array("qzeros", qzeros), src.zero_order, "N")
    if zeros.shape[1] != stored.shape[1]:
        raise ValueError(
            f"qzeros: holds N={zeros.shape[1]} columns but qweight holds N={stored.shape[1]}; expected "
            f"qzeros of shape (G, {stored.shape[1] // spec.per_word})"
        )
    return packed, dst.pack_fields(zeros, dst.zero_order, "N")


def checkpoint_from_trt(spec: object, packed: np.ndarray) -> np.ndarray:
    """Inverse of ``repack_checkpoint`` for the weights: TensorRT-LLM layout bytes -> ``spec``'s int32 qweight."""
    spec = _check_spec(spec)
    _check_trt_spec(spec)
    fields = _trt_fields(spec, from_trt_layout(packed, spec.source.bits))
    return Layout.of(spec).pack_fields(fields)
