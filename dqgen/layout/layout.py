"""The Layout: where every code of a spec sits, and the shape of every tensor a kernel takes.

``Layout.of(spec)`` (cached) is how every stage gets it: the solver and the prover (field positions), the
packer (pack / unpack), the reference, the runtime and the GPU checks (shapes, K / N from ``qweight``),
``explain`` (which element a bit belongs to). Nothing else computes a field position or a shape.

Words and blocks: codes of ``bits`` bits fill 32-bit words in blocks of ``words = bits / gcd(bits, 32)``
words (``Spec.words``: 1 for 1/2/4/8 bits, 3 for 3-bit codes and for 6-bit codes) holding
``per_block = 32 * words / bits`` codes. Field ``j`` of a block is bits ``[j*bits, (j+1)*bits)`` of the
little-endian integer of its words (word 0 lowest); it holds element ``order[j]`` of the block's run of
``per_block`` consecutive elements along ``axis``. A field that crosses a word boundary has its low bits at
the top of one word and the rest at the bottom of the next (3-bit: fields 10 and 21).

Tensors for W[K, N] with G groups:

- ``qweight`` int32: ``[K, N/P]`` packed along N, ``[K/P * words, N]`` packed along K;
- ``scales`` ``[G, N]``; packed zeros int32 ``[G, N/P]`` (always along N, in ``zero_order``), dense zeros
  ``[G, N]``; ``g_idx`` ``[K]`` (act_order); ``global_scale`` ``[1]``; ``out`` ``[K, N]``.

Extension point (the GEMM issues): tile-interleaved and register-permuted layouts (ldmatrix fragments,
Marlin-style tiles) are a further permutation applied on top of ``order``: a map from (tile, lane,
register, field) to the (k, n) element it holds. They belong here, as fields of ``Layout`` with their own
``field``/``shapes``/``pack_fields`` rules, so that the solver, the templates and the packer read one
description; no stage outside this module should re-derive a permuted position. TensorRT-LLM's GEMM layout
(LDSM row permutation, column interleave, register order) is derived in ``gemm_trt.py`` as one index map,
``element_slots``; a word of it is described by ``gemm_trt.converter_spec(spec)``'s Layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

from ..core.spec import CONTAINER_BITS, Spec, block_words

Axis = Literal["N", "K"]
ZerosKind = Literal["none", "packed", "dense"]


@dataclass(frozen=True)
class Layout:
    bits: int
    axis: Axis
    order: tuple[int, ...]  # order[j]: the element in field j
    zero_order: tuple[int, ...]  # the same for packed zero words (always packed along N)
    words: int  # 32-bit words per block
    zeros: ZerosKind = "none"
    act_order: bool = False
    global_scale: bool = False

    @staticmethod
    def of(spec: Spec) -> Layout:
        """The spec's Layout (one object per distinct layout)."""
        zeros: ZerosKind = "packed" if spec.zeros.packed else "none" if spec.zeros.mode == "none" else "dense"
        return _layout(
            spec.source.bits,
            spec.packing.axis,
            tuple(spec.order),
            tuple(spec.zero_order),
            spec.words,
            zeros,
            spec.act_order,
            spec.scales.global_scale,
        )

    # -- positions ----------------------------------------------------------------------------------------

    @property
    def per_block(self) -> int:
        """Codes per block (P): 32 * words / bits."""
        return CONTAINER_BITS * self.words // self.bits

    def field_pos(self, element: int) -> int:
        """Bit of the block where ``element``'s code starts (word 0's bit 0 is bit 0)."""
        return self.bits * self.order.index(element)

    def field(self, element: int) -> tuple[int, int]:
        """(word, bit offset in that word) where ``element``'s code starts."""
        return divmod(self.field_pos(element), CONTAINER_BITS)

    def straddles(self, element: int) -> bool:
        """Whether ``element``'s code runs on into the next word."""
        return self.field(element)[1] + self.bits > CONTAINER_BITS

    def element_at(self, word: int, bit: int) -> int:
        """The element whose code holds bit ``bit`` of word ``word`` of a block."""
        return self.order[(CONTAINER_BITS * word + bit) // self.bits]

    def block_codes(self, blocks: np.ndarray) -> np.ndarray:
        """[n, per_block] raw unsigned code of each element, in element order, of [n, words] blocks (a 1-D
        array is one word per block)."""
        w = np.asarray(blocks, dtype=np.uint32)
        w = (w[:, None] if w.ndim == 1 else w).astype(np.uint64)
        out = np.zeros((w.shape[0], self.per_block), dtype=np.int64)
        for e in range(self.per_block):
            k, off = self.field(e)
            v = w[:, k] >> np.uint64(off)
            if off + self.bits > CONTAINER_BITS:  # the code straddles into the next word
                v |= w[:, k + 1] << np.uint64(CONTAINER_BITS - off)
            out[:, e] = (v & np.uint64((1 << self.bits) - 1)).astype(np.int64)
        return out

    # -- shapes -------------------------------------------------------------------------------------------

    def qweight_shape(self, K: int, N: int) -> tuple[int, int]:
        P = self.per_block
        return (K, N // P) if self.axis == "N" else (K // P * self.words, N)

    def shapes(self, K: int, N: int, G: int) -> dict[str, tuple[int, ...]]:
        """The shape of every tensor a kernel takes for W[K, N] with G groups (K, N already whole blocks):
        qweight, scales, zeros (unless none), g_idx (act_order), global_scale, out."""
        shapes: dict[str, tuple[int, ...]] = {"qweight": self.qweight_shape(K, N), "scales": (G, N)}
        if self.zeros == "packed":
            shapes["zeros"] = (G, N // self.per_block)
        elif self.zeros == "dense":
            shapes["zeros"] = (G, N)
        if self.act_order:
            shapes["g_idx"] = (K,)
        if self.global_scale:
            shapes["global_scale"] = (1,)
        shapes["out"] = (K, N)
        return shapes

    def k_of(self, rows: int) -> int:
        """K from the rows of ``qweight`` (whole blocks along K: check ``rows % words`` first)."""
        return rows if self.axis == "N" else rows // self.words * self.per_block

    def n_of(self, cols: int) -> int:
        """N from the columns of ``qweight``."""
        return cols * self.per_block if self.axis == "N" else cols

    def kn_of(self, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
        """(K, N) from ``qweight``'s 2-D shape; ValueError naming qweight when its rows are no whole blocks."""
        rows, cols = qweight_shape
        if self.axis == "K" and rows % self.words:
            raise ValueError(
                f"qweight: {rows} rows (qweight.shape[0]) is not a multiple of {self.words}: {self.bits}-bit codes "
                f"are packed along K in blocks of {self.words} int32 words holding {self.per_block} rows each; "
                f"expected shape (K * {self.words} / {self.per_block}, N), got {tuple(qweight_shape)}"
            )
        return self.k_of(rows), self.n_of(cols)

    def qweight_text(self) -> str:
        """qweight's shape in words: [K, N/8] (packed along N), [3K/32, N] (packed along K in 3-word blocks)."""
        P, W = self.per_block, self.words
        if self.axis == "N":
            return f"[K, N/{P}] (packed along N)"
        if W > 1:
            return f"[{W}K/{P}, N] (packed along K in {W}-word blocks)"
        return f"[K/{P}, N] (packed along K)"

    # -- the bit movers (``vals`` hold stored field values already reduced to [0, 2^bits)) ------------------

    def pack_fields(
        self, vals: np.ndarray, order: tuple[int, ...] | None = None, axis: Axis | None = None
    ) -> np.ndarray:
        """Pack a 2-D array of field values into int32 words along ``axis`` ("N": columns, "K": rows); by
        default the weights' order and axis (packed zeros pass ``zero_order`` and "N")."""
        return pack_fields(vals, self.bits, self.order if order is None else order, axis or self.axis)

    def unpack_fields(
        self, words: np.ndarray, order: tuple[int, ...] | None = None, axis: Axis | None = None
    ) -> np.ndarray:
        return unpack_fields(words, self.bits, self.order if order is None else order, axis or self.axis)

    def group_columns(
        self, scales: np.ndarray, zeros: np.ndarray | None, columns: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Scales and zeros as one value per (group, column), zero-padded to ``columns`` columns (the prepacked
        layouts' tails): scales as their raw bits (uint16, or uint8 for 1-byte block-scale codes), packed zero
        words unpacked to their fields, dense zeros as raw 16-bit bits."""

        def padded(a: np.ndarray) -> np.ndarray:
            out = np.zeros((a.shape[0], columns), dtype=a.dtype)
            out[:, : a.shape[1]] = a
            return out

        def raw(a: np.ndarray) -> np.ndarray:
            a = np.ascontiguousarray(a)
            return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)

        z = None
        if zeros is not None and self.zeros == "packed":
            z = padded(self.unpack_fields(np.ascontiguousarray(zeros).view(np.uint32), self.zero_order, "N"))
        elif zeros is not None:
            z = padded(raw(zeros))
        return padded(raw(scales)), z


@cache
def _layout(
    bits: int,
    axis: Axis,
    order: tuple[int, ...],
    zero_order: tuple[int, ...],
    words: int,
    zeros: ZerosKind,
    act_order: bool,
    global_scale: bool,
) -> Layout:
    return Layout(bits, axis, order, zero_order, words, zeros, act_order, global_scale)


def pack_fields(vals: np.ndarray, bits: int, order: list[int] | tuple[int, ...], axis: str) -> np.ndarray:
    """Pack a 2-D array of field values into int32 words along ``axis`` ("N": columns, "K": rows).

    Along K, widths that do not divide 32 fill blocks of several words (see the module docstring):
    field j of a block sits at bits [j*bits, (j+1)*bits) of the block, and one that crosses a word
    boundary puts its low bits at the top of word j*bits // 32 and the rest at the bottom of the next."""
    nw = block_words(bits)
    p = CONTAINER_BITS * nw // bits
    v = vals.astype(np.uint32, copy=False)
    rows, cols = v.shape
    if axis == "N":
        if nw != 1:
            raise ValueError(f"[packing.axis] {bits}-bit codes straddle words and are packed along K only, got 'N'")
        runs = v.reshape(rows, cols // p, p)  # runs[k, i, e] = W[k, i*P + e]
        out = np.zeros((rows, cols // p), dtype=np.uint32)
        for j, e in enumerate(order):
            out |= runs[:, :, e] << np.uint32(j * bits)
        # Work in uint32 so shifts into bit 31 are plain bit moves; hand back the usual int32 words.
        return out.view(np.int32)
    runs = v.reshape(rows // p, p, cols)  # runs[b, e, n] = W[b*P + e, n]
    blocks = np.zeros((rows // p, nw, cols), dtype=np.uint32)
    for j, e in enumerate(order):
        w, off = divmod(j * bits, CONTAINER_BITS)
        # uint32 shifts drop the bits pushed past bit 31; a straddling field's rest goes to the next word.
        blocks[:, w, :] |= runs[:, e, :] << np.uint32(off)
        if off + bits > CONTAINER_BITS:
            blocks[:, w + 1, :] |= runs[:, e, :] >> np.uint32(CONTAINER_BITS - off)
    return blocks.reshape(rows // p * nw, cols).view(np.int32)


def unpack_fields(words: np.ndarray, bits: int, order: list[int] | tuple[int, ...], axis: str) -> np.ndarray:
    """Inverse of ``pack_fields``: uint32 words -> uint8 field values W (bits <= 8 always fits)."""
    nw = block_words(bits)
    p = CONTAINER_BITS * nw // bits
    mask = (1 << bits) - 1
    rows, cols = words.shape
    if axis == "N":
        if nw != 1:
            raise ValueError(f"[packing.axis] {bits}-bit codes straddle words and are packed along K only, got 'N'")
        out = np.empty((rows, cols, p), dtype=np.uint8)
        for j, e in enumerate(order):
            out[:, :, e] = (words >> np.uint32(j * bits)) & np.uint32(mask)
        return out.reshape(rows, cols * p)
    blocks = words.reshape(rows // nw, nw, cols)  # callers check rows % nw == 0
    out = np.empty((rows // nw, p, cols), dtype=np.uint8)
    for j, e in enumerate(order):
        w, off = divmod(j * bits, CONTAINER_BITS)
        x = blocks[:, w, :] >> np.uint32(off)
        if off + bits > CONTAINER_BITS:  # the field's high bits are the low bits of the next word
            x = x | (blocks[:, w + 1, :] << np.uint32(CONTAINER_BITS - off))
        out[:, e, :] = x & np.uint32(mask)
    return out.reshape(rows // nw * p, cols)
