"""The weight layout of the tensor-core GEMM (templates/gemm.cu.j2): TensorRT-LLM's mixed-GEMM layout
(dqgen.layout.gemm_trt) over *K-slots*, plus the group scales and zeros padded for 16-byte copies.

The GEMM steps through K one ThreadblockK tile (``TILE_K`` = 64 k, one 128-byte line of fp16 activations) at a
time and stages one row of scales (and zeros) per tile, so every tile must lie inside one group. K is laid out
as slots, as in the GEMV's layout: where every tile lies inside one group (no act-order, group_size -1 or a
multiple of 64) slot = k ("direct"), K padded with code 0 to whole tiles; otherwise ("gather": act-order, or
groups of 32 ...) the rows are sorted by group (stable) and each group padded to whole tiles, ``perm`` mapping
slot -> original row of W (and column of x: the kernel gathers the A tile through it; -1 reads 0).
``tile_group`` maps tile -> group either way, so the kernel never divides by the group size. A ``g_idx`` whose
sort leaves every row in place and pads only after the last (GPTQ's desc_act=False ``arange(K) // group_size``
with groups of a multiple of 64) gives the direct slots.

The float and codebook specs (fp4 in groups of 32, MXFP4, ...) run on the Hopper GEMM alone, which stages
``group_rows(spec)`` = TILE_K / group_size scale rows a tile for groups that divide a tile: their slots stay direct
(no padding between groups), ``tile_group`` naming each tile's first group.

Padding codes are 0, a finite value in every integer format, multiplied by x = 0. N is padded to whole
interleaved column groups (4 for int4, 2 for int8) in the weights and to whole ``TILE_N`` tiles in the scales
and zeros (the kernel copies a tile's row of them without predicates).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.spec import SourceKind, Spec
from .gemm_trt import bias, columns_interleaved, converter_spec, from_trt_layout, threadblock_k, to_trt_layout
from .layout import Layout
from .slots import in_order, sorted_by_group

__all__ = ["TILE_K", "TILE_N", "GemmPacked", "GemmSlots", "gemm_slots", "group_rows", "pack_gemm", "unpack_gemm"]

#: k per pipeline stage: one 128-byte line of fp16/bf16 activations (TensorRT-LLM's ThreadblockK).
TILE_K = threadblock_k(16)
#: Columns per CTA tile (every tile config): the scales and zeros are padded to a multiple of it.
TILE_N = 128


@dataclass(frozen=True)
class GemmSlots:
    """The K-slot map of one weight: ``perm[slot]`` = original row or -1, ``tile_group[tile]``."""

    K: int
    slots: int  # a whole number of TILE_K tiles
    gather: bool  # the kernel must read x through perm (rows sorted or padded)
    perm: np.ndarray  # int32 [slots]; direct: arange(K), then -1
    tile_group: np.ndarray  # int32 [slots / TILE_K]


def group_rows(spec: Spec) -> int:
    """Scale rows one TILE_K tile stages: TILE_K / group_size for a float or codebook spec whose groups divide a tile
    (the Hopper GEMM, their only GEMM, reads them in order), else 1 (one group a tile; smaller groups of the integer
    specs are padded to whole tiles for the sm_80 GEMM)."""
    gs = spec.scales.group_size
    if spec.source.kind in (SourceKind.float, SourceKind.codebook) and isinstance(gs, int) and 0 < gs < TILE_K:
        return TILE_K // gs if TILE_K % gs == 0 else 1
    return 1


def gemm_slots(K: int, group_size: int, g_idx: np.ndarray | None = None, rows_per_tile: int = 1) -> GemmSlots:
    """The slot map for K rows in groups of ``group_size`` (-1: one group), or act-order's ``g_idx``;
    ``rows_per_tile`` > 1 (group_rows: groups of TILE_K / rows_per_tile rows) keeps such groups in order, each tile
    naming its first."""
    if K <= 0:
        raise ValueError(f"K: expected a positive number of rows, got {K}")
    if rows_per_tile > 1 and (g_idx is not None or group_size * rows_per_tile != TILE_K):
        raise ValueError(
            f"rows_per_tile: {rows_per_tile} scale rows a tile need in-order groups of "
            f"{TILE_K // rows_per_tile}, got group_size {group_size}{' and a g_idx' if g_idx is not None else ''}"
        )
    if g_idx is None and (group_size <= 0 or group_size % TILE_K == 0 or rows_per_tile > 1):
        slots = -(-K // TILE_K) * TILE_K
        return GemmSlots(K, slots, False, *in_order(K, slots, TILE_K, group_size))
    if g_idx is not None:
        row_group = np.asarray(g_idx, dtype=np.int64).reshape(-1)
        if row_group.size != K:
            raise ValueError(f"g_idx: expected {K} entries (one per row of W), got {row_group.size}")
    else:
        row_group = np.arange(K, dtype=np.int64) // group_size
    perm, tile_group = sorted_by_group(row_group, TILE_K, TILE_K)
    # rows in order with no padding before the last: the direct slots (GPTQ's desc_act=False g_idx), which the
    # kernel reads with 16-byte copies instead of a gather through perm
    ordered = bool(np.array_equal(perm[:K], np.arange(K, dtype=np.int32)))
    return GemmSlots(K, perm.size, not ordered, perm, tile_group)


@dataclass(frozen=True)
class GemmPacked:
    """One weight in the GEMM layout (host arrays)."""

    wq: np.ndarray  # uint8 [Nw / I, slots * I * bits / 8]: TensorRT-LLM's layout of the slot-ordered codes
    scales: np.ndarray  # uint16 [G, Ns]: the raw 16-bit scales (uint8: block-scale codes)
    zeros: np.ndarray | None  # [G, Ns]: stored zero fields (uint8, packed zeros) or raw 16-bit zeros (uint16)
    slots: GemmSlots
    N: int
    n_cols: int  # Nw: N padded to whole interleaved column groups (the weights' columns)
    groups: int


def _trt_fields(spec: Spec, stored: np.ndarray) -> np.ndarray:
    """A signed code's two's complement bits with the top bit flipped = the code + 2^(bits-1) (gemm_trt)."""
    if spec.source.kind is SourceKind.signed:
        return stored ^ np.uint8(bias(spec.source.bits))
    return stored


def pack_gemm(
    spec: Spec,
    qweight: np.ndarray,
    scales: np.ndarray,
    zeros: np.ndarray | None,
    g_idx: np.ndarray | None,
    group_size: int,
) -> GemmPacked:
    """The checkpoint tensors (validated by the caller: shapes, dtypes, g_idx in range) -> the GEMM layout.
    ValueError naming the spec field for a spec the layout cannot hold (not 4/8-bit integer codes)."""
    converter_spec(spec)  # checks: 4- or 8-bit integer codes (one-line ValueError naming the spec field)
    lay = Layout.of(spec)
    bits = spec.source.bits
    codes = _trt_fields(spec, lay.unpack_fields(np.ascontiguousarray(qweight).view(np.uint32)))
    K, N = codes.shape
    sl = gemm_slots(K, group_size, g_idx, group_rows(spec) if group_size > 0 else 1)
    cols = columns_interleaved(bits)
    Nw = -(-N // cols) * cols
    Ns = -(-N // TILE_N) * TILE_N
    slot_codes = np.zeros((sl.slots, Nw), dtype=np.uint8)
    valid = np.nonzero(sl.perm >= 0)[0]
    slot_codes[valid, :N] = codes[sl.perm[valid]]
    wq = to_trt_layout(slot_codes, bits)
    for name, t in (("scales", scales), ("zeros", None if spec.zeros.packed else zeros)):
        want = 1 if name == "scales" and spec.scales.block else 2  # a block-scale code (e8m0, e4m3) is one byte
        if t is not None and np.asarray(t).dtype.itemsize != want:
            what = "8-bit codes" if want == 1 else "16-bit values (fp16/bf16)"
            raise ValueError(f"{name}: expected {what}, got {np.asarray(t).dtype}")
    s, z = lay.group_columns(scales, zeros, Ns)
    return GemmPacked(wq, s, z, sl, N, Nw, int(scales.shape[0]))


def unpack_gemm(spec: Spec, packed: GemmPacked) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Inverse of ``pack_gemm``: (qweight words, raw scales, zeros: words or raw halves) in the checkpoint's
    layout; what the tests hold equal to the input."""
    lay = Layout.of(spec)
    sl, N = packed.slots, packed.N
    slot_codes = from_trt_layout(packed.wq, spec.source.bits)
    codes = np.zeros((sl.K, N), dtype=np.uint8)
    valid = np.nonzero(sl.perm >= 0)[0]
    codes[sl.perm[valid]] = slot_codes[valid, :N]
    qweight = lay.pack_fields(_trt_fields(spec, codes))
    zeros: np.ndarray | None = None
    if packed.zeros is not None and spec.zeros.packed:
        zeros = lay.pack_fields(np.ascontiguousarray(packed.zeros[:, :N]), lay.zero_order, "N")
    elif packed.zeros is not None:
        zeros = np.ascontiguousarray(packed.zeros[:, :N])
    return qweight, np.ascontiguousarray(packed.scales[:, :N]), zeros
