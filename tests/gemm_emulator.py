"""A numpy model of one launch of templates/gemm.cu.j2 (CPU): the byte-exact shared-memory stages (swizzle,
zero-filled tails, the A gather through perm), the converter as the solved Plan of converter_spec(spec) (plan.run,
the prover's emulation of the PTX ops), and three instructions as the PTX ISA states them (PTX ISA 8.x, cited by
section title; g = %laneid >> 2 "groupID", t = %laneid % 4 "threadID_in_group"):

- ``cp.async`` (Data Movement and Conversion Instructions: cp.async): ``cp-size`` bytes land at dst; with
  ``src-size`` < ``cp-size`` only src-size bytes are read from src and "the remaining bytes in destination dst are
  filled with zeros" (src-size 0: all 16 zero, nothing read). ``cp_async16`` below is that, 16 bytes or none.
- ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` (Warp-level matrix load instruction: ldmatrix): lanes 8i..8i+7
  give the 16-byte-aligned addresses of the 8 rows of matrix i; destination register i of lane 4g + t holds
  elements 2t, 2t+1 of row g of matrix i (the 32-bit word t of that row).
- ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`` (Matrix Fragments for mma.m16n8k16 with floating point
  type): A a0..a7 at row g for a0, a1, a4, a5 and g+8 otherwise, column 2t + (i & 1) (+8 for i >= 4); registers
  hold pairs (a0,a1) (a2,a3) (a4,a5) (a6,a7), so reg r = (row g + 8 (r & 1), columns 2t + 8 (r >> 1) + 0/1).
  B b0..b3 at row (k) 2t + (i & 1) (+8 for i >= 2), column g: reg r = (k 2t + 8r + 0/1, column g). C c0..c3 at
  row g (c0, c1) / g+8 (c2, c3), column 2t + (i & 1). Products summed here in float64.

Every address below (``a_ldsm_rows``, ``b_ldsm_rows``, the stage fill) is the kernel's expression restated; the
instruction semantics above are not: they are the hardware's. If the kernel's index math is right, the model's y
equals x @ dequantize(W) to float64 rounding; any mismatch between the layout, the swizzle, the ldmatrix addresses
and the fragment registers shows up as a wrong y, and a 16-byte copy that would read past its x row (the kernel
reads the next row, or past the tensor) fails an assertion.
"""

from __future__ import annotations

import numpy as np

from dqgen.core.spec import Spec
from dqgen.emit.pipeline import compile_artifact
from dqgen.kernels.gemm import GemmConfig
from dqgen.layout.gemm import TILE_K, TILE_N, GemmPacked
from dqgen.layout.gemm_trt import columns_interleaved, converter_spec
from dqgen.run.gemm import workspace_floats

LINE = 128


def swz(r: int | np.ndarray, c: int | np.ndarray) -> int | np.ndarray:
    return r * LINE + ((c ^ (r & 7)) << 4)


def a_ldsm_rows(cfg: GemmConfig, warp_m: int, mi: int, ks: int) -> np.ndarray:
    """[32 lanes] the byte offsets in the A stage that the kernel's ldmatrix.x4 of A fragment (mi, k16 step ks)
    gives: lanes 0-15 rows 0-15 at k 0-7 of the step, lanes 16-31 the same rows at k 8-15."""
    lanes = np.arange(32)
    row = warp_m * (cfg.bm // cfg.wm) + 16 * mi + (lanes & 15)
    return np.asarray(swz(row, 2 * ks + (lanes >> 4)))


def b_ldsm_rows(cfg: GemmConfig, cols: int, blk: int, warp_n: int, q: int, b: int) -> np.ndarray:
    """[32 lanes] the byte offsets in the B stage that the kernel's ldmatrix.x4 of n8 tiles 4q..4q+3, block b
    gives: lanes 8i..8i+7 the 16-byte rows (columns) of n8 tile 4q + i."""
    lanes = np.arange(32)
    col = warp_n * (TILE_N // cfg.wn) + 8 * (4 * q + (lanes >> 3)) + (lanes & 7)
    return np.asarray(swz(col // cols, (col % cols) * blk + b))


def ws_slots(split: int, tiles: int, tile: int, acc0: int, acc_per_thread: int, threads: int, warp: int) -> np.ndarray:
    """[32 lanes, 4] workspace indices of accumulators acc0..acc0+3 of one warp (the kernel's
    (split * tiles + tile) * (kAcc * kThreads) + acc * kThreads + tid)."""
    tid = warp * 32 + np.arange(32)[:, None]
    acc = acc0 + np.arange(4)[None, :]
    return (split * tiles + tile) * (acc_per_thread * threads) + acc * threads + tid


def cp_async16(dst: np.ndarray, offset: int, src: np.ndarray | None) -> None:
    """cp.async.cg ... 16, src-size with src-size 16 (``src`` 16 bytes) or 0 (``src`` None: zero fill)."""
    assert offset % 16 == 0, "cp.async destination not 16-byte aligned"
    if src is None:
        dst[offset : offset + 16] = 0
    else:
        assert src.dtype == np.uint8 and src.size == 16, "a 16-byte cp.async reads 16 bytes of its source"
        dst[offset : offset + 16] = src


def ldsm_x4(smem: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """[32 lanes] byte addresses -> [32 lanes, 4] uint32 registers (PTX ldmatrix .x4, non-transposed)."""
    words = smem.view("<u4")
    out = np.zeros((32, 4), dtype=np.uint32)
    for i in range(4):
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            a = int(addr[8 * i + g])
            assert a % 16 == 0, "ldmatrix row address not 16-byte aligned"
            out[lane, i] = words[a // 4 + t]
    return out


def halves(reg: np.ndarray, bf16: bool) -> tuple[np.ndarray, np.ndarray]:
    """fp16x2 / bf16x2 registers -> (low, high) float64."""
    reg = np.asarray(reg, dtype=np.uint32)
    lo, hi = reg & np.uint32(0xFFFF), reg >> np.uint32(16)
    if bf16:
        return tuple((h << np.uint32(16)).view(np.float32).astype(np.float64) for h in (lo, hi))  # type: ignore[return-value]
    return tuple(h.astype(np.uint16).view(np.float16).astype(np.float64) for h in (lo, hi))  # type: ignore[return-value]


def mma(acc: np.ndarray, a: np.ndarray, b: np.ndarray, bf16: bool) -> None:
    """acc [32, 4] += A [16 x 16] @ B [16 x 8] with A from a [32, 4] and B from b [32, 2] (PTX fragment tables)."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for reg in range(4):
            lo, hi = halves(a[lane, reg], bf16)
            r, c = g + 8 * (reg & 1), 2 * t + 8 * (reg >> 1)
            A[r, c], A[r, c + 1] = lo, hi
        for reg in range(2):
            lo, hi = halves(b[lane, reg], bf16)
            k = 2 * t + 8 * reg
            B[k, g], B[k + 1, g] = lo, hi
    D = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        acc[lane] += (D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1])


def emulate(
    spec: Spec,
    packed: GemmPacked,
    x: np.ndarray,
    cfg: GemmConfig,
    *,
    gather: bool,
    splits: int = 1,
    bias: np.ndarray | None = None,
) -> np.ndarray:
    """y [M, N] (float64, before the output rounding) as the kernel would compute it."""
    conv = converter_spec(spec)
    plan = compile_artifact(conv).plan
    bf16 = spec.target.value == "bf16"
    bits, E = conv.source.bits, conv.per_word
    cols = columns_interleaved(bits)
    blk = TILE_K // (4 * E)
    steps = E // 4
    M, K = x.shape
    N = packed.N
    wq = packed.wq
    n_lines, line_bytes = wq.shape
    sl = packed.slots
    k_tiles = sl.slots // TILE_K
    per_split = -(-k_tiles // splits)
    x16 = np.ascontiguousarray(x).view(np.uint16)
    zeros = packed.zeros
    zero_rep = sum(1 << (bits * k) for k in range(E))
    BM, WM, WN = cfg.bm, cfg.wm, cfg.wn
    warp_m_rows, warp_n_cols = BM // WM, TILE_N // WN
    MI, NI = warp_m_rows // 16, warp_n_cols // 8
    b_lines = TILE_N // cols
    y = np.zeros((M, N))
    m_tiles, n_tiles = -(-M // BM), -(-N // TILE_N)
    threads = WM * WN * 32
    # split-K: partials through a workspace of the size run.gemm allocates, at the kernel's slots
    ws = np.full(workspace_floats(cfg, m_tiles * n_tiles, splits), np.nan) if splits > 1 else None
    for m_tile in range(m_tiles):
        for n_tile in range(n_tiles):
            m0, n0 = m_tile * BM, n_tile * TILE_N
            total = {}
            for split in range(splits):
                acc = {(w, i, j): np.zeros((32, 4)) for w in range(WM * WN) for i in range(MI) for j in range(NI)}
                for kt in range(split * per_split, min(k_tiles, (split + 1) * per_split)):
                    # the stage as load_stage leaves it
                    a_s = np.full(BM * LINE, 0xA5, dtype=np.uint8)  # garbage where no copy lands
                    a16 = a_s.view(np.uint16)
                    for row in range(BM):
                        for ch in range(8):
                            m = m0 + row
                            off = int(swz(row, ch))
                            if not gather:  # one 16-byte cp.async of halves k..k+7, predicate m < M && k < K
                                k = kt * TILE_K + ch * 8
                                chunk = x16[m, k : k + 8] if m < M and k < K else None
                                assert chunk is None or chunk.size == 8, f"cp.async of x row {m} reads past k={K}"
                                cp_async16(a_s, off, None if chunk is None else chunk.view(np.uint8))
                                continue
                            vals = np.zeros(8, dtype=np.uint16)  # st.shared.v4 of 8 gathered halves
                            for e in range(8):
                                src = int(sl.perm[kt * TILE_K + ch * 8 + e])
                                if m < M and src >= 0:
                                    vals[e] = x16[m, src]
                            a16[off // 2 : off // 2 + 8] = vals
                    b_s = np.full(b_lines * LINE, 0xA5, dtype=np.uint8)
                    for line in range(b_lines):
                        gl = n0 // cols + line
                        for ch in range(8):
                            src = wq[gl, kt * 128 + ch * 16 : kt * 128 + ch * 16 + 16] if gl < n_lines else None
                            cp_async16(b_s, int(swz(line, ch)), src)
                    grp = int(sl.tile_group[kt])
                    s_row = packed.scales[grp, n0 : n0 + TILE_N].astype(np.uint32)
                    z_row = zeros[grp, n0 : n0 + TILE_N].astype(np.uint32) if zeros is not None else None
                    assert line_bytes == sl.slots * 2
                    for w in range(WM * WN):
                        warp_m, warp_n = w % WM, w // WM
                        lanes = np.arange(32)
                        g = lanes >> 2
                        for b in range(blk):
                            bw = np.zeros((32, NI), dtype=np.uint32)
                            for q in range(NI // 4):
                                bw[:, 4 * q : 4 * q + 4] = ldsm_x4(b_s, b_ldsm_rows(cfg, cols, blk, warp_n, q, b))
                            bf = []
                            for j in range(NI):
                                col = warp_n * warp_n_cols + 8 * j + g
                                env = {"w": bw[:, j]}
                                sv = s_row[col] * np.uint32(0x10001)
                                for name in plan.scale_regs:
                                    env[name] = sv
                                if spec.zeros.packed:
                                    assert z_row is not None
                                    env["z"] = z_row[col] * np.uint32(zero_rep)
                                elif spec.zeros.dense:
                                    assert z_row is not None
                                    for h in range(E // 2):
                                        env[f"f{h}"] = z_row[col] * np.uint32(0x10001)
                                regs = plan.run(env)
                                bf.append(np.stack([regs[o] for o in plan.outputs], axis=1))  # [32, pairs]
                            for h in range(steps):
                                ks = b * steps + h
                                for i in range(MI):
                                    af = ldsm_x4(a_s, a_ldsm_rows(cfg, warp_m, i, ks))
                                    for j in range(NI):
                                        mma(acc[(w, i, j)], af, bf[j][:, 2 * h : 2 * h + 2], bf16)
                if ws is None:
                    total = acc
                    continue
                tile = n_tile * m_tiles + m_tile
                for (w, i, j), a in acc.items():
                    slots = ws_slots(split, m_tiles * n_tiles, tile, (i * NI + j) * 4, MI * NI * 4, threads, w)
                    assert np.isnan(ws[slots]).all(), "two partial sums share a workspace slot"
                    ws[slots] = a
            if ws is not None:  # the last CTA: every thread sums its own slots in split order
                tile = n_tile * m_tiles + m_tile
                for w in range(WM * WN):
                    for i in range(MI):
                        for j in range(NI):
                            parts = [
                                ws[ws_slots(s, m_tiles * n_tiles, tile, (i * NI + j) * 4, MI * NI * 4, threads, w)]
                                for s in range(splits)
                            ]
                            total[(w, i, j)] = sum(parts[1:], parts[0])
            for (w, i, j), a in total.items():
                warp_m, warp_n = w % WM, w // WM
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    n = n0 + warp_n * warp_n_cols + 8 * j + 2 * t
                    for hr in range(2):
                        m = m0 + warp_m * warp_m_rows + 16 * i + g + 8 * hr
                        for c in range(2):
                            if m < M and n + c < N:
                                y[m, n + c] = a[lane, 2 * hr + c] + (0.0 if bias is None else float(bias[n + c]))

    assert ws is None or not np.isnan(ws).any(), "workspace slots no partial sum was written to"
    return y
