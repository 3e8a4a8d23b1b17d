"""A numpy model of the W8A8 GEMM's index math (templates/w8a8_gemm.cu.j2), beside the PTX ISA's fragment tables
of mma.m16n8k32 with 8-bit operands (.s8 / .e4m3: the same layout), so the CPU tests can check that what the
kernel's ldmatrix loads put in each lane's registers is the fragment the mma expects, and that a block's tile
computes P @ Q.T.

Every formula here is written as in the template (swizzle = swz, ldsm_a / ldsm_b = the a_row / b_row lines,
c_index = the epilogue's r, c); the PTX tables and the data movement are written from the ISA
(docs.nvidia.com/cuda/parallel-thread-execution: "Matrix Fragments for mma.m16n8k32", "Warp-level matrix load
instruction: ldmatrix", "cp.async"), independently of the kernel."""

from __future__ import annotations

import numpy as np

BK = 128  # bytes of K a stage: 8 chunks of 16


# -- the PTX ISA's tables ------------------------------------------------------------------------------------------
def ptx_a(lane: int, i: int) -> tuple[int, int]:
    """(row, k) of element a_i (i < 16, 4 per .b32 register) of lane ``lane`` in the 16 x 32 A fragment."""
    group, tig = lane >> 2, lane % 4
    row = group if (i < 4 or 8 <= i < 12) else group + 8
    col = tig * 4 + (i & 3) + (16 if i >= 8 else 0)
    return row, col


def ptx_b(lane: int, i: int) -> tuple[int, int]:
    """(k, column) of element b_i (i < 8) of lane ``lane`` in the 32 x 8 B fragment."""
    group, tig = lane >> 2, lane % 4
    return tig * 4 + (i & 3) + (16 if i >= 4 else 0), group


def ptx_c(lane: int, i: int) -> tuple[int, int]:
    """(row, column) of accumulator c_i (i < 4) of lane ``lane`` in the 16 x 8 C fragment."""
    group, tig = lane >> 2, lane % 4
    return group + (8 if i >= 2 else 0), tig * 2 + (i & 1)


# -- the kernel's formulas -----------------------------------------------------------------------------------------
def swizzle(r: int, c: int) -> int:
    """Byte offset of 16-byte chunk c of row r in an operand's shared tile (swz)."""
    return r * BK + ((c ^ (r & 7)) << 4)


def ldsm_a(lane: int, wm: int, wtile: int, mi: int, ks: int) -> tuple[int, int]:
    """(row, chunk) whose address lane ``lane`` gives to the A ldmatrix.x4 of fragment mi, k-step ks."""
    return wm * wtile + (lane & 7) + ((lane >> 3) & 1) * 8 + mi * 16, 2 * ks + (lane >> 4)


def ldsm_b(lane: int, wn: int, wtile: int, nj: int, ks: int) -> tuple[int, int]:
    """(row, chunk) whose address lane ``lane`` gives to the B ldmatrix.x4 of fragment pair nj, k-step ks."""
    return wn * wtile + (lane & 7) + (lane >> 4) * 8 + nj * 16, 2 * ks + ((lane >> 3) & 1)


def c_index(lane: int, wm: int, wn: int, wtile_m: int, wtile_n: int, mi: int, ni: int, j: int) -> tuple[int, int]:
    """(row, column) inside the block's tile of accumulator j of fragment (mi, ni) (the epilogue's r, c)."""
    g, t = lane >> 2, lane & 3
    return wm * wtile_m + mi * 16 + g + 8 * (j >> 1), wn * wtile_n + ni * 8 + 2 * t + (j & 1)


# -- the hardware's data movement, modelled ------------------------------------------------------------------------
def ldmatrix_x4(smem: np.ndarray, addrs: list[int]) -> np.ndarray:
    """ldmatrix.m8n8.x4.b16: lanes 8j..8j+7 give the row addresses of matrix j; register j of lane l gets bytes
    4(l % 4) .. 4(l % 4) + 3 of row l // 4 of matrix j. Returns [32 lanes, 4 registers, 4 bytes]."""
    out = np.zeros((32, 4, 4), smem.dtype)
    for lane in range(32):
        for j in range(4):
            a = addrs[8 * j + lane // 4] + 4 * (lane % 4)
            out[lane, j] = smem[a : a + 4]
    return out


def store_tile(tile: np.ndarray) -> np.ndarray:
    """The shared bytes of one operand's tile [rows, BK] after the cp.async copies (chunk (r, c) at swizzle)."""
    rows = tile.shape[0]
    smem = np.zeros(rows * BK, tile.dtype)
    for r in range(rows):
        for c in range(BK // 16):
            off = swizzle(r, c)
            smem[off : off + 16] = tile[r, 16 * c : 16 * c + 16]
    return smem


def block_product(p_tile: np.ndarray, q_tile: np.ndarray, warps_m: int, warps_n: int) -> np.ndarray:
    """acc [bm, bn] of one stage (p_tile [bm, BK], q_tile [bn, BK] int8) as the kernel computes it: ldmatrix
    from the swizzled tiles at the kernel's addresses, each mma taking its operands where the PTX tables say they
    are, accumulators placed by c_index. int64 arithmetic."""
    bm, bn = p_tile.shape[0], q_tile.shape[0]
    wtm, wtn = bm // warps_m, bn // warps_n
    sp, sq = store_tile(p_tile), store_tile(q_tile)
    acc = np.zeros((bm, bn), np.int64)
    for warp in range(warps_m * warps_n):
        wm, wn = warp % warps_m, warp // warps_m
        for ks in range(BK // 32):
            a = [
                ldmatrix_x4(sp, [swizzle(*ldsm_a(lane, wm, wtm, mi, ks)) for lane in range(32)])
                for mi in range(wtm // 16)
            ]
            b = []
            for nj in range(wtn // 16):
                t = ldmatrix_x4(sq, [swizzle(*ldsm_b(lane, wn, wtn, nj, ks)) for lane in range(32)])
                b += [t[:, 0:2], t[:, 2:4]]  # registers 0, 1: n8 fragment 2 nj; 2, 3: fragment 2 nj + 1
            for mi in range(len(a)):
                for ni in range(len(b)):
                    frag = mma_m16n8k32(a[mi].reshape(32, 16), b[ni].reshape(32, 8))
                    for lane in range(32):
                        for j in range(4):
                            r, c = c_index(lane, wm, wn, wtm, wtn, mi, ni, j)
                            acc[r, c] += frag[lane, j]
    return acc


def mma_m16n8k32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One mma from the lanes' registers (a [32, 16], b [32, 8] int8 elements in register order): the 16 x 32 and
    32 x 8 matrices are assembled from the PTX tables, multiplied in int64, handed back per the C table [32, 4]."""
    A = np.zeros((16, 32), np.int64)
    B = np.zeros((32, 8), np.int64)
    for lane in range(32):
        for i in range(16):
            A[ptx_a(lane, i)] = a[lane, i]
        for i in range(8):
            B[ptx_b(lane, i)] = b[lane, i]
    D = A @ B
    return np.array([[D[ptx_c(lane, j)] for j in range(4)] for lane in range(32)], np.int64)


def load_tile(mat: np.ndarray, row0: int, rows: int, k0: int) -> np.ndarray:
    """The tile [rows, BK] a block's cp.async copies bring in from mat [R, K] at (row0, k0): chunk (r, c) is read
    when row0 + r < R and k0 + 16 c < K (K a multiple of 16), else zero-filled (the template's load_tile)."""
    R, K = mat.shape
    tile = np.zeros((rows, BK), mat.dtype)
    for r in range(rows):
        for c in range(BK // 16):
            k = k0 + 16 * c
            if row0 + r < R and k < K:
                tile[r, 16 * c : 16 * c + 16] = mat[row0 + r, k : k + 16]
    return tile


def gemm(p: np.ndarray, q: np.ndarray, bm: int, bn: int, warps_m: int, warps_n: int, kt_per_split: int) -> np.ndarray:
    """acc [R, C] = p [R, K] @ q [C, K].T (K % 16 == 0) the way the kernel's grid computes it: tiles of bm x bn, each
    split a range of kt_per_split k-tiles, partials added in split order, rows / columns past R, C dropped."""
    R, K = p.shape
    C = q.shape[0]
    kt = -(-K // BK)
    splits = -(-kt // kt_per_split)
    out = np.zeros((R, C), np.int64)
    for r0 in range(0, R, bm):
        for c0 in range(0, C, bn):
            total = np.zeros((bm, bn), np.int64)
            for s in range(splits):
                part = np.zeros((bm, bn), np.int64)
                for t in range(s * kt_per_split, min(kt, (s + 1) * kt_per_split)):
                    part += block_product(load_tile(p, r0, bm, t * BK), load_tile(q, c0, bn, t * BK), warps_m, warps_n)
                total += part
            out[r0 : r0 + bm, c0 : c0 + bn] = total[: min(bm, R - r0), : min(bn, C - c0)]
    return out
