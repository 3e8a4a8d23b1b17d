"""The prepacked W4A8 weight layout: int4 codes placed so that each consumer thread of the Hopper W4A8 GEMM reads
its four words of an m64 x k64 tile with one 16-byte load and converts each with the s8 Plan of
``w4a8_converter_spec(spec)`` straight into the registers of ``wgmma.m64nNk32.s32.s8.s8`` with A from registers.

The GEMM computes out^T = W^T x^T: the weights' N is wgmma's M (64 rows per warpgroup), the tokens are wgmma's N.
The A fragment of one k32 step (PTX ISA, wgmma register fragments, .s8): warp ``w`` of the warpgroup holds rows
16w..16w+15; lane ``l`` (g = l // 4, t = l % 4) holds four registers of four int8 each:

    a0: row g,     k = 4t .. 4t+3        a2: row g,     k = 16+4t .. 16+4t+3
    a1: row g + 8, k = 4t .. 4t+3        a3: row g + 8, k = 16+4t .. 16+4t+3

One 32-bit word of the layout holds the 8 codes of (a0, a2) or (a1, a3) of one step: element e < 4 is k = 4t + e,
element e >= 4 is k = 16 + 4t + (e - 4), and the word's nibbles are in ``W4A8_ORDER`` (field 2b = element b,
field 2b+1 = element 4+b), so the s8 Plan's ``shift`` placement applies: out0 = the low nibbles (a0 / a1), out1 =
the high nibbles after one shared shift (a2 / a3), no PRMT. A thread's four words of one m64 x k64 tile are
(step 0, row g), (step 0, row g+8), (step 1, row g), (step 1, row g+8): 16 bytes, one LDS.128 per two wgmma.

Array: ``wq`` uint32 [N/64, K/64, 128, 4]: tile (n-tile, k-tile), thread 0..127, word 0..3; the k-tiles of one
n-tile are contiguous (a CTA streams its 64 rows along K with one bulk copy per stage).

Scales and zeros per 128-k tile (the GEMM rescales each 128-k partial sum, as its e4m3 path does): ``scales``
float32 [N/64, K/128, 64] (the group scale of each 128-k tile and row: exact, fp16/bf16 -> fp32), and with packed
zero points ``zeros`` uint32 [N/64, K/128, 64]: the stored zero replicated into all 8 fields, the zero word the
Plan's ``prepare_zeros`` takes. A group must hold whole 128-k tiles (group size a multiple of 128, or -1).

Shapes: K a multiple of 128 (whole rescale tiles), N a multiple of 64 (whole warpgroup rows); the checkpoint
shapes of every Llama / Qwen / Mistral projection are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.spec import Spec, load_spec
from .layout import Layout

#: field 2b holds element b (k = 4t + b: the low nibble of byte b -> out0's byte b), field 2b+1 element 4 + b
W4A8_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)
W4A8_TILE_N = 64  # wgmma M: the rows of one warpgroup
W4A8_TILE_K = 64  # k per 16-byte load: two k32 wgmma steps
RESCALE_K = 128  # k per int32 partial sum, rescaled in fp32
THREADS = 128  # one warpgroup
WORDS = 4  # words per thread per tile


def _check_spec(spec: Spec) -> None:
    if not spec.integer_target:
        raise ValueError(f"[target] the W4A8 layout feeds an int8 wgmma: expected 's8', got {spec.target.value!r}")
    if spec.source.bits != 4 or not spec.source.kind.integer:
        raise ValueError(f"[source] the W4A8 layout holds 4-bit integer codes, got {spec.source.short}")
    if spec.act_order:
        raise ValueError("[act_order] the W4A8 layout takes groups in K order (act_order: false)")


def w4a8_converter_spec(spec: Spec) -> Spec:
    """The spec whose Layout and proven Plan describe one word of the W4A8 layout of ``spec``'s weights: packed
    along K in ``W4A8_ORDER`` (element e: the e-th k of the word's two fragment registers), every other field kept
    (codes, zeros, scales, target s8). Its Plan: one shift, then a mask per register (plus add and XOR with an
    offset or zero point)."""
    _check_spec(spec)
    data = spec.model_dump(mode="json", exclude_none=True)
    data["name"] = f"{spec.name}_w4a8"
    data["packing"] = {"axis": "K", "order": list(W4A8_ORDER)}
    return load_spec(data)


def element_map() -> tuple[np.ndarray, np.ndarray]:
    """(n, k) within an m64 x k64 tile of every (thread, word, element): int arrays [128, 4, 8]."""
    thread = np.arange(THREADS)[:, None, None]
    word = np.arange(WORDS)[None, :, None]
    e = np.arange(8)[None, None, :]
    warp, lane = thread // 32, thread % 32
    g, t = lane // 4, lane % 4
    step, half = word // 2, word % 2
    n = 16 * warp + g + 8 * half
    k = 32 * step + np.where(e < 4, 4 * t + e, 16 + 4 * t + (e - 4))
    return np.broadcast_to(n, (THREADS, WORDS, 8)).copy(), np.broadcast_to(k, (THREADS, WORDS, 8)).copy()


@dataclass(frozen=True)
class W4A8Packed:
    wq: np.ndarray  # uint32 [N/64, K/64, 128, 4]
    scales: np.ndarray  # float32 [N/64, K/128, 64]
    zeros: np.ndarray | None  # uint32 [N/64, K/128, 64]: the stored zero in all 8 fields; None without zeros
    K: int
    N: int


def _check_shape(K: int, N: int) -> None:
    if K <= 0 or K % RESCALE_K:
        raise ValueError(f"qweight: K = {K}; the W4A8 layout needs K a positive multiple of {RESCALE_K}")
    if N <= 0 or N % W4A8_TILE_N:
        raise ValueError(f"qweight: N = {N}; the W4A8 layout needs N a positive multiple of {W4A8_TILE_N}")


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """Stored 4-bit codes [K, N] (uint8) -> ``wq`` uint32 [N/64, K/64, 128, 4]."""
    codes = np.asarray(codes)
    K, N = codes.shape
    _check_shape(K, N)
    n, k = element_map()
    # [n-tile, k-tile, n, k]
    tiles = codes.reshape(K // W4A8_TILE_K, W4A8_TILE_K, N // W4A8_TILE_N, W4A8_TILE_N).transpose(2, 0, 3, 1)
    fields = tiles[:, :, n, k].astype(np.uint32)  # [NT, KT, 128, 4, 8] in element order
    shifts = np.array([4 * W4A8_ORDER.index(e) for e in range(8)], dtype=np.uint32)
    return np.bitwise_or.reduce(fields << shifts, axis=-1).astype(np.uint32)


def unpack_codes(wq: np.ndarray) -> np.ndarray:
    """Inverse of ``pack_codes``: ``wq`` [N/64, K/64, 128, 4] -> codes [K, N] uint8."""
    NT, KT = wq.shape[:2]
    n, k = element_map()
    shifts = np.array([4 * W4A8_ORDER.index(e) for e in range(8)], dtype=np.uint32)
    fields = ((wq[..., None] >> shifts) & np.uint32(0xF)).astype(np.uint8)  # [NT, KT, 128, 4, 8]
    tiles = np.zeros((NT, KT, W4A8_TILE_N, W4A8_TILE_K), dtype=np.uint8)
    tiles[:, :, n, k] = fields
    return tiles.transpose(1, 3, 0, 2).reshape(KT * W4A8_TILE_K, NT * W4A8_TILE_N)


def tile_rows(per_group: np.ndarray, K: int, group_size: int) -> np.ndarray:
    """[G, N] per-group values -> [N/64, K/128, 64]: the row of each 128-k rescale tile (groups of whole tiles)."""
    G, N = per_group.shape
    g = K if group_size == -1 else group_size
    if g % RESCALE_K or G * g != K:
        raise ValueError(
            f"scales: {G} groups of {g} rows for K = {K}; the W4A8 layout needs groups of whole {RESCALE_K}-k tiles "
            "(a group size that is a multiple of 128, or -1) covering K"
        )
    rows = per_group[np.arange(K // RESCALE_K) * RESCALE_K // g]  # [K/128, N]
    return np.ascontiguousarray(rows.reshape(K // RESCALE_K, N // W4A8_TILE_N, W4A8_TILE_N).transpose(1, 0, 2))


def pack_w4a8(
    spec: Spec, qweight: np.ndarray, scales: np.ndarray, qzeros: np.ndarray | None, group_size: int
) -> W4A8Packed:
    """Checkpoint tensors in ``spec``'s layout (qweight int32, scales [G, N] fp16 / bf16, packed qzeros [G, N/8])
    -> the W4A8 layout. ValueError naming the tensor or spec field for what does not fit."""
    _check_spec(spec)
    lay = Layout.of(spec)
    codes = lay.unpack_fields(np.ascontiguousarray(qweight).view(np.uint32))
    K, N = codes.shape
    _check_shape(K, N)
    s = np.asarray(scales)
    if s.ndim != 2 or s.shape[1] != N:
        raise ValueError(f"scales: expected [G, N={N}], got {list(s.shape)}")
    s32 = tile_rows(s.astype(np.float32), K, group_size)  # fp16 / bf16 -> fp32 is exact
    zeros = None
    if spec.zeros.packed:
        if qzeros is None:
            raise ValueError(f"qzeros: spec {spec.name!r} has packed zero points ({spec.zeros.mode}); got none")
        z = lay.unpack_fields(np.ascontiguousarray(qzeros).view(np.uint32), lay.zero_order, "N")
        if z.shape != s.shape:
            raise ValueError(f"qzeros: expected {list(s.shape)} zero points after unpacking, got {list(z.shape)}")
        zeros = tile_rows(z.astype(np.uint32) * np.uint32(0x11111111), K, group_size)
    elif qzeros is not None:
        raise ValueError(f"qzeros: given, but spec {spec.name!r} has zeros.mode {spec.zeros.mode!r}")
    return W4A8Packed(pack_codes(codes), s32, zeros, K, N)
