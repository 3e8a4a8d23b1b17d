"""The packers of dqgen.layout on torch tensors, on their own device (issue 26): the checkpoint's words <-> field
values (``pack_fields`` / ``unpack_fields``), the GEMV's prepacked layout (layout.matmul ``prepack``) and the GEMM's
(layout.gemm ``pack_gemm``), so that a weight quantized on a GPU is packed there with no host round trip.

Each function is the numpy one's twin, step for step (the same reshapes, transposes and field loops), and gives the
same bytes: tests/test_quantize_model_pack.py holds them equal on CPU tensors for every spec the GEMV and the GEMM
take. Only the K-slot maps (``perm``, ``block_group`` / ``tile_group``: K entries) are made on the host, by the
numpy code itself, and uploaded; a ``g_idx`` on a GPU is read back for them (K integers, not the weight).

Words are int32 tensors (torch has no full uint32 arithmetic): fields are moved in int64 and the words wrapped back
to int32 two's complement, the bits the numpy path's uint32 words hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.spec import CONTAINER_BITS, SourceKind, Spec, block_words
from .gemm import TILE_K, TILE_N, GemmSlots, gemm_slots, group_rows
from .gemm_trt import bias as trt_bias
from .gemm_trt import columns_interleaved, converter_spec, ldsm_row_permutation, register_order, threadblock_k
from .layout import Layout
from .matmul import CHUNK_BLOCKS, K_LANES, LANE_BLOCKS, LANES, ROWS, ROWS_PER_LANE, VEC_WORDS, MatmulLayout, Slots

__all__ = [
    "TorchGemmPacked",
    "TorchPrepacked",
    "torch_pack_fields",
    "torch_pack_gemm",
    "torch_prepack",
    "torch_unpack_fields",
]

_WORD = 1 << CONTAINER_BITS


def _torch() -> Any:
    import torch

    return torch


def _to_int32(words: Any) -> Any:
    """int64 words in [0, 2^32) -> int32 with the same 32 bits."""
    torch = _torch()
    return torch.where(words >= (1 << 31), words - _WORD, words).to(torch.int32)


def torch_pack_fields(vals: Any, bits: int, order: tuple[int, ...] | list[int], axis: str) -> Any:
    """layout.pack_fields on a torch tensor of field values (already in [0, 2^bits)): int32 words."""
    torch = _torch()
    nw = block_words(bits)
    p = CONTAINER_BITS * nw // bits
    v = vals.to(torch.int64)
    rows, cols = v.shape
    if axis == "N":
        if nw != 1:
            raise ValueError(f"[packing.axis] {bits}-bit codes straddle words and are packed along K only, got 'N'")
        runs = v.reshape(rows, cols // p, p)
        out = torch.zeros((rows, cols // p), dtype=torch.int64, device=v.device)
        for j, e in enumerate(order):
            out |= runs[:, :, e] << (j * bits)
        return _to_int32(out)
    runs = v.reshape(rows // p, p, cols)
    blocks = torch.zeros((rows // p, nw, cols), dtype=torch.int64, device=v.device)
    mask = _WORD - 1
    for j, e in enumerate(order):
        w, off = divmod(j * bits, CONTAINER_BITS)
        blocks[:, w, :] |= (runs[:, e, :] << off) & mask
        if off + bits > CONTAINER_BITS:
            blocks[:, w + 1, :] |= runs[:, e, :] >> (CONTAINER_BITS - off)
    return _to_int32(blocks.reshape(rows // p * nw, cols))


def torch_unpack_fields(words: Any, bits: int, order: tuple[int, ...] | list[int], axis: str) -> Any:
    """layout.unpack_fields on int32 torch words: uint8 field values."""
    torch = _torch()
    nw = block_words(bits)
    p = CONTAINER_BITS * nw // bits
    mask = (1 << bits) - 1
    w64 = words.to(torch.int64) & (_WORD - 1)
    rows, cols = w64.shape
    if axis == "N":
        if nw != 1:
            raise ValueError(f"[packing.axis] {bits}-bit codes straddle words and are packed along K only, got 'N'")
        out = torch.empty((rows, cols, p), dtype=torch.uint8, device=w64.device)
        for j, e in enumerate(order):
            out[:, :, e] = ((w64 >> (j * bits)) & mask).to(torch.uint8)
        return out.reshape(rows, cols * p)
    blocks = w64.reshape(rows // nw, nw, cols)
    out = torch.empty((rows // nw, p, cols), dtype=torch.uint8, device=w64.device)
    for j, e in enumerate(order):
        w, off = divmod(j * bits, CONTAINER_BITS)
        x = blocks[:, w, :] >> off
        if off + bits > CONTAINER_BITS:
            x = x | (blocks[:, w + 1, :] << (CONTAINER_BITS - off))
        out[:, e, :] = (x & mask).to(torch.uint8)
    return out.reshape(rows // nw * p, cols)


def _raw(t: Any) -> Any:
    """A tensor's raw bits: 16-bit values as int16, 1-byte codes as uint8."""
    torch = _torch()
    if t.element_size() == 2:
        return t.contiguous().view(torch.int16)
    return t.contiguous().view(torch.uint8)


def _padded(t: Any, columns: int) -> Any:
    torch = _torch()
    out = torch.zeros((t.shape[0], columns), dtype=t.dtype, device=t.device)
    out[:, : t.shape[1]] = t
    return out


def torch_group_columns(lay: Layout, scales: Any, zeros: Any, columns: int) -> tuple[Any, Any]:
    """Layout.group_columns on torch tensors: raw scales (int16 / uint8), zero fields (uint8) or raw 16-bit zeros,
    zero-padded to ``columns``."""
    z = None
    if zeros is not None and lay.zeros == "packed":
        z = _padded(torch_unpack_fields(zeros.contiguous(), lay.bits, lay.zero_order, "N"), columns)
    elif zeros is not None:
        z = _padded(_raw(zeros), columns)
    return _padded(_raw(scales), columns), z


def torch_unpack_codes(spec: Spec, qweight: Any) -> Any:
    """The stored field values W[K, N] (uint8) of a checkpoint's int32 ``qweight``."""
    lay = Layout.of(spec)
    return torch_unpack_fields(qweight.contiguous(), lay.bits, lay.order, lay.axis)


def _slot_codes(codes: Any, perm: np.ndarray, slots: int, columns: int) -> Any:
    """codes[perm[slot]] per slot (padding slots and columns 0), uint8 [slots, columns]."""
    torch = _torch()
    K, N = codes.shape
    out = torch.zeros((slots, columns), dtype=torch.uint8, device=codes.device)
    if np.array_equal(perm[:K], np.arange(K)) and not (perm[K:] >= 0).any():
        out[:K, :N] = codes  # direct slots: no gather
        return out
    valid = np.nonzero(perm >= 0)[0]
    dst = torch.from_numpy(valid.astype(np.int64)).to(codes.device)
    src = torch.from_numpy(perm[valid].astype(np.int64)).to(codes.device)
    out[dst, :N] = codes.index_select(0, src)
    return out


# -- the GEMV layout ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchPrepacked:
    """layout.matmul.Prepacked with device tensors: ``wq`` int32 [n_tiles, chunks, words, 32, 4] (the numpy
    path's uint32 words), ``scales`` / ``zeros`` raw bits padded to whole tiles of N."""

    wq: Any
    scales: Any
    zeros: Any
    slots: Slots
    N: int
    groups: int
    group_size: int


def _gemv_words(mm: MatmulLayout, codes: Any, sl: Slots) -> Any:
    """MatmulLayout.pack on torch codes."""
    N, W = codes.shape[1], mm.words
    Np = mm.n_padded(N)
    slot_codes = _slot_codes(codes, sl.perm, sl.slots, Np)
    blocks = torch_pack_fields(slot_codes, mm.bits, mm.order, "K")
    chunks, tiles = sl.slots // mm.chunk_k, Np // ROWS
    a = blocks.reshape(chunks, K_LANES, LANE_BLOCKS, W, tiles, ROWS_PER_LANE, ROWS // ROWS_PER_LANE)
    a = a.permute(4, 0, 6, 1, 5, 2, 3)
    units = a.reshape(tiles, chunks, LANES, mm.unit_words)
    return units.reshape(tiles, chunks, LANES, W, VEC_WORDS).permute(0, 1, 3, 2, 4).contiguous()


def torch_prepack(
    spec: Spec, qweight: Any, scales: Any, zeros: Any, g_idx: np.ndarray | None, group_size: int
) -> TorchPrepacked:
    """layout.matmul.prepack on torch tensors (validated by the caller), on their device; ``g_idx`` on the host."""
    lay, mm = Layout.of(spec), MatmulLayout.of(spec)
    codes = torch_unpack_codes(spec, qweight)
    K, N = codes.shape
    Np = mm.n_padded(N)
    sl = mm.slots(K, group_size, g_idx)
    s, z = torch_group_columns(lay, scales, zeros, Np)
    assert CHUNK_BLOCKS * mm.per_block == mm.chunk_k
    return TorchPrepacked(_gemv_words(mm, codes, sl), s, z, sl, N, int(scales.shape[0]), group_size)


# -- the GEMM layout ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchGemmPacked:
    """layout.gemm.GemmPacked with device tensors: ``wq`` uint8 TensorRT-LLM bytes, ``scales`` int16, ``zeros``
    uint8 fields or int16 raw halves."""

    wq: Any
    scales: Any
    zeros: Any
    slots: GemmSlots
    N: int
    n_cols: int
    groups: int


def _row_sources(K: int, bits: int) -> np.ndarray:
    perm = np.array(ldsm_row_permutation(bits, 16))
    p = np.arange(K)
    return (p // perm.size) * perm.size + perm[p % perm.size]


def torch_to_trt_layout(fields: Any, bits: int) -> Any:
    """gemm_trt.to_trt_layout (unsigned fields, fp16/bf16 activations) on a torch uint8 tensor."""
    torch = _torch()
    K, N = fields.shape
    tk, cols, per_word = threadblock_k(16), columns_interleaved(bits, 16), CONTAINER_BITS // bits
    rows = torch.from_numpy(_row_sources(K, bits).astype(np.int64)).to(fields.device)
    stored = fields.index_select(0, rows)
    tiles = stored.reshape(K // tk, tk, N // cols, cols).permute(2, 0, 3, 1)
    order = torch.tensor(list(register_order(bits)), dtype=torch.int64, device=fields.device)
    stream = tiles.reshape(-1, per_word).index_select(1, order).reshape(-1)
    if bits == 4:
        stream = stream[0::2] | (stream[1::2] << 4)
    return stream.reshape(N // cols, K * cols * bits // 8)


def torch_pack_gemm(
    spec: Spec, qweight: Any, scales: Any, zeros: Any, g_idx: np.ndarray | None, group_size: int
) -> TorchGemmPacked:
    """layout.gemm.pack_gemm on torch tensors (validated by the caller), on their device; ``g_idx`` on the host."""
    converter_spec(spec)  # the same one-line refusal of a spec the layout cannot hold
    lay = Layout.of(spec)
    bits = spec.source.bits
    codes = torch_unpack_codes(spec, qweight)
    if spec.source.kind is SourceKind.signed:
        codes = codes ^ trt_bias(bits)
    K, N = codes.shape
    sl = gemm_slots(K, group_size, g_idx, group_rows(spec) if group_size > 0 else 1)
    cols = columns_interleaved(bits)
    Nw = -(-N // cols) * cols
    Ns = -(-N // TILE_N) * TILE_N
    assert sl.slots % TILE_K == 0
    wq = torch_to_trt_layout(_slot_codes(codes, sl.perm, sl.slots, Nw), bits)
    for name, t in (("scales", scales), ("zeros", None if spec.zeros.packed else zeros)):
        want = 1 if name == "scales" and spec.scales.block else 2  # a block-scale code (e8m0, e4m3) is one byte
        if t is not None and t.element_size() != want:
            raise ValueError(
                f"{name}: expected {'8-bit codes' if want == 1 else '16-bit values (fp16/bf16)'}, got {t.dtype}"
            )
    s, z = torch_group_columns(lay, scales, zeros, Ns)
    return TorchGemmPacked(wq, s, z, sl, N, Nw, int(scales.shape[0]))
