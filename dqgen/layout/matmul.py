"""The GEMV weight layout: codes prepacked so that each lane's 16-byte loads hold exactly what its
``mma.sync.m16n8k16`` A fragments need ("swap AB": A = 16 output channels x 16 k-slots of the dequantized weights,
B = x^T, C = 16 channels x 8 tokens).

Derived, not tabulated: from the spec's Layout (``bits``, ``words``, ``per_block`` = P codes per block, the field
``order``) and the mma fragment shape. A dot product is invariant under a permutation of k, so the k-slot ->
physical k map is chosen such that every ``words``-word block holds P CONSECUTIVE k of ONE output channel n, in the
spec's own field order: the converter runs unchanged on it and outputs the P values in natural k order.

Fragment facts (PTX ISA, m16n8k16 f16/bf16): lane l = 4 g + t holds A rows g and g + 8 at k-slots
{2t, 2t+1} (registers a0, a1) and {2t+8, 2t+9} (a2, a3), and B column g at the same k-slots. Lane t's slots of
consecutive mma steps are mapped to consecutive physical k (4 per step), so a block of P codes feeds P/4 steps:
step s takes the block's output pairs 2s (slots 2t, 2t+1) and 2s+1 (slots 2t+8, 2t+9), and x's pairs 2s, 2s+1.

Tiles: ``ROWS`` = 16 channels (the mma's M) x one *chunk* of ``CHUNK_BLOCKS`` = 8 blocks along K (8P k: lane t
takes blocks 2t and 2t+1). A lane's *unit* is 2 rows (g, g+8) x 2 blocks x ``words`` words = 4 * words words,
stored as ``words`` 16-byte vectors; a warp's ``words`` loads of one chunk are each 512 contiguous bytes.
Word array: ``wq[n_tile][chunk][v][lane][4]`` (uint32), v < words; unit word j = 4 v + i holds row r, block b,
word w with j = (2 r + b) * words + w.

K-slots: K is laid out as slots. Where every block lies inside one group (no act-order and group_size -1 or a
multiple of P) slot = k ("direct"), padded with code 0 up to a whole chunk; the kernel reads x[k] and finds
the group as k / group_size. Otherwise ("gather": act-order, or groups that are no whole blocks) the rows are
sorted by group (stable) and each group padded to whole blocks, so that a block never crosses a group; ``perm``
maps slot -> original row (-1: padding, x reads 0), read by the kernel. Either way ``block_group`` maps
block -> group (the kernel reads it instead of dividing by the group size).
Padding codes are 0 (a finite value in every format), multiplied by x = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..core.spec import Spec
from .layout import Layout, pack_fields, unpack_fields
from .slots import in_order, sorted_by_group

#: Output channels per tile: the M of mma.m16n8k16 (A's rows; swap AB).
ROWS = 16
#: Lanes of a warp; the k-lanes t = lane % 4 split a chunk, the row lanes g = lane / 4 the tile's rows.
LANES = 32
K_LANES = 4
#: Blocks per lane and chunk (and rows per lane: g and g + 8).
LANE_BLOCKS = 2
ROWS_PER_LANE = 2
#: Blocks along K per chunk: 4 k-lanes x 2 blocks.
CHUNK_BLOCKS = K_LANES * LANE_BLOCKS
#: 32-bit words per 16-byte vector load.
VEC_WORDS = 4


@dataclass(frozen=True)
class Slots:
    """The K-slot map of one weight: ``perm[slot]`` = original row or -1 (gather), ``block_group[block]``."""

    K: int
    slots: int  # a whole number of chunks
    gather: bool
    perm: np.ndarray  # int32 [slots]; in direct mode arange(K) then -1
    block_group: np.ndarray  # int32 [slots / P]: the group of each block


@dataclass(frozen=True)
class MatmulLayout:
    bits: int
    words: int
    per_block: int  # P
    order: tuple[int, ...]

    @staticmethod
    def of(spec: Spec) -> MatmulLayout:
        lay = Layout.of(spec)
        return _matmul_layout(lay.bits, lay.words, lay.per_block, tuple(lay.order))

    @property
    def chunk_k(self) -> int:
        """k-slots per chunk: 8 blocks of P."""
        return CHUNK_BLOCKS * self.per_block

    @property
    def unit_words(self) -> int:
        """Words per lane and chunk: 2 rows x 2 blocks x words."""
        return ROWS_PER_LANE * LANE_BLOCKS * self.words

    def n_padded(self, N: int) -> int:
        return -(-N // ROWS) * ROWS

    def direct(self, group_size: int, act_order: bool) -> bool:
        """Whether every block lies in one group with slot = k (no gather through perm)."""
        return not act_order and (group_size <= 0 or group_size % self.per_block == 0)

    def slots(self, K: int, group_size: int, g_idx: np.ndarray | None = None) -> Slots:
        """The slot map for K rows in groups of ``group_size`` (-1: one group), or act-order's ``g_idx``."""
        P, C = self.per_block, self.chunk_k
        if g_idx is None and self.direct(group_size, False):
            slots = max(C, -(-K // C) * C)
            return Slots(K, slots, False, *in_order(K, slots, P, group_size))
        if g_idx is not None:
            row_group = np.asarray(g_idx, dtype=np.int64)
        else:
            row_group = np.arange(K, dtype=np.int64) // group_size
        perm, block_group = sorted_by_group(row_group, P, C)
        return Slots(K, perm.size, True, perm, block_group)

    # -- codes <-> prepacked words ------------------------------------------------------------------------

    def pack(self, codes: np.ndarray, sl: Slots) -> np.ndarray:
        """Stored field values ``codes[K, N]`` (natural k, n) -> prepacked uint32 words
        ``[n_tiles, chunks, words, 32, 4]`` (padding codes 0)."""
        N, W = codes.shape[1], self.words
        Np = self.n_padded(N)
        slot_codes = np.zeros((sl.slots, Np), dtype=np.uint8)
        valid = sl.perm >= 0
        slot_codes[np.nonzero(valid)[0], :N] = codes[sl.perm[valid]]
        # blocks of P consecutive slots of one column, in the spec's field order: [slots/P * W, Np]
        blocks = pack_fields(slot_codes, self.bits, self.order, "K").view(np.uint32)
        chunks, tiles = sl.slots // self.chunk_k, Np // ROWS
        # blocks[(chunk, t, b), w, (tile, r, g)] -> [tile, chunk, g, t, r, b, w]
        a = blocks.reshape(chunks, K_LANES, LANE_BLOCKS, W, tiles, ROWS_PER_LANE, ROWS // ROWS_PER_LANE)
        a = a.transpose(4, 0, 6, 1, 5, 2, 3)  # tile, chunk, g, t, r, b, w
        units = a.reshape(tiles, chunks, LANES, self.unit_words)
        # unit word j = 4 v + i goes to vector v, word i of the lane: [tile, chunk, v, lane, i]
        out = units.reshape(tiles, chunks, LANES, W, VEC_WORDS).transpose(0, 1, 3, 2, 4)
        return np.ascontiguousarray(out)

    def unpack(self, wq: np.ndarray, sl: Slots, N: int) -> np.ndarray:
        """Inverse of ``pack``: prepacked words -> ``codes[K, N]``."""
        P, W = self.per_block, self.words
        Np = self.n_padded(N)
        chunks, tiles = sl.slots // self.chunk_k, Np // ROWS
        units = np.asarray(wq, dtype=np.uint32).reshape(tiles, chunks, W, LANES, VEC_WORDS).transpose(0, 1, 3, 2, 4)
        a = units.reshape(tiles, chunks, ROWS // ROWS_PER_LANE, K_LANES, ROWS_PER_LANE, LANE_BLOCKS, W)
        blocks = a.transpose(1, 3, 5, 6, 0, 4, 2).reshape(sl.slots // P * W, Np)
        slot_codes = unpack_fields(np.ascontiguousarray(blocks), self.bits, self.order, "K")
        codes = np.zeros((sl.K, N), dtype=np.uint8)
        valid = sl.perm >= 0
        codes[sl.perm[valid]] = slot_codes[np.nonzero(valid)[0], :N]
        return codes


@cache
def _matmul_layout(bits: int, words: int, per_block: int, order: tuple[int, ...]) -> MatmulLayout:
    return MatmulLayout(bits, words, per_block, order)


@dataclass(frozen=True)
class Prepacked:
    """One weight in the GEMV layout (host arrays): words, scales and zeros padded to whole tiles of N."""

    wq: np.ndarray  # uint32 [n_tiles, chunks, words, 32, 4]
    scales: np.ndarray  # [G, Np]: raw 16-bit scales (uint16) or block-scale codes (uint8)
    zeros: np.ndarray | None  # [G, Np]: stored zero fields (uint8, packed modes) or raw 16-bit zeros (dense)
    slots: Slots
    N: int
    groups: int
    group_size: int  # -1: one group over all of K


def prepack(
    spec: Spec,
    qweight: np.ndarray,
    scales: np.ndarray,
    zeros: np.ndarray | None,
    g_idx: np.ndarray | None,
    group_size: int,
) -> Prepacked:
    """The checkpoint tensors (already validated: shapes, dtypes, g_idx in range) -> the GEMV layout."""
    lay, mm = Layout.of(spec), MatmulLayout.of(spec)
    words = np.ascontiguousarray(qweight).view(np.uint32)
    codes = lay.unpack_fields(words)  # [K, N] stored field values, natural (k, n)
    K, N = codes.shape
    Np = mm.n_padded(N)
    sl = mm.slots(K, group_size, g_idx)
    s, z = lay.group_columns(scales, zeros, Np)
    return Prepacked(mm.pack(codes, sl), s, z, sl, N, int(scales.shape[0]), group_size)


def unprepack(spec: Spec, pre: Prepacked) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Inverse of ``prepack``: (qweight int32 words, raw scales, zeros: int32 words or raw halves) in the
    checkpoint layout."""
    lay, mm = Layout.of(spec), MatmulLayout.of(spec)
    N = pre.N
    codes = mm.unpack(pre.wq, pre.slots, N)
    qweight = lay.pack_fields(codes)
    zeros: np.ndarray | None = None
    if pre.zeros is not None and lay.zeros == "packed":
        zeros = lay.pack_fields(pre.zeros[:, :N], lay.zero_order, "N")
    elif pre.zeros is not None:
        zeros = np.ascontiguousarray(pre.zeros[:, :N])
    return qweight, np.ascontiguousarray(pre.scales[:, :N]), zeros
