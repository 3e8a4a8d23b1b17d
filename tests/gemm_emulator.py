"""A numpy model of one launch of templates/gemm.cu.j2 (CPU): the byte-exact shared-memory stages (swizzle,
zero-filled tails, the A gather through perm), ldmatrix as the PTX ISA defines it (matrix i from the row addresses
of lanes 8i..8i+7; lane 4g + t gets word t of row g), the converter as the solved Plan of converter_spec(spec)
(plan.run, the prover's emulation of the PTX ops), and mma.m16n8k16 through the fragment tables of the PTX ISA
(A: a0 = (g, 2t..2t+1), a1 = (g+8, ..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..); B: b0 = (2t..2t+1, g), b1 =
(2t+8.., g); C: c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, ..)), summed in float64.

Every address below is the kernel's expression restated; the tables above are not: they are the hardware's. If
the kernel's index math is right, the model's y equals x @ dequantize(W) to float64 rounding; any mismatch
between the layout, the swizzle, the ldmatrix addresses and the fragment registers shows up as a wrong y.
"""

from __future__ import annotations

import numpy as np

from dqgen.core.spec import Spec
from dqgen.emit.gemm import GemmConfig
from dqgen.emit.pipeline import compile_artifact
from dqgen.layout.gemm import TILE_K, TILE_N, GemmPacked
from dqgen.layout.gemm_trt import columns_interleaved, converter_spec

LINE = 128


def swz(r: int | np.ndarray, c: int | np.ndarray) -> int | np.ndarray:
    return r * LINE + ((c ^ (r & 7)) << 4)


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
    for m_tile in range(-(-M // BM)):
        for n_tile in range(-(-N // TILE_N)):
            m0, n0 = m_tile * BM, n_tile * TILE_N
            total = {}
            for split in range(splits):
                acc = {(w, i, j): np.zeros((32, 4)) for w in range(WM * WN) for i in range(MI) for j in range(NI)}
                for kt in range(split * per_split, min(k_tiles, (split + 1) * per_split)):
                    # the stage as load_stage leaves it
                    a_s = np.zeros(BM * LINE, dtype=np.uint8)
                    a16 = a_s.view(np.uint16)
                    for row in range(BM):
                        for ch in range(8):
                            m = m0 + row
                            vals = np.zeros(8, dtype=np.uint16)
                            for e in range(8):
                                s = kt * TILE_K + ch * 8 + e
                                src = int(sl.perm[s]) if gather else s
                                if m < M and 0 <= src < K:
                                    vals[e] = x16[m, src]
                            off = int(swz(row, ch))
                            a16[off // 2 : off // 2 + 8] = vals
                    b_s = np.zeros(b_lines * LINE, dtype=np.uint8)
                    for line in range(b_lines):
                        gl = n0 // cols + line
                        for ch in range(8):
                            if gl < n_lines:
                                off = int(swz(line, ch))
                                b_s[off : off + 16] = wq[gl, kt * 128 + ch * 16 : kt * 128 + ch * 16 + 16]
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
                                col = warp_n * warp_n_cols + 8 * (4 * q + (lanes >> 3)) + (lanes & 7)
                                bw[:, 4 * q : 4 * q + 4] = ldsm_x4(b_s, swz(col // cols, (col % cols) * blk + b))
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
                                    row = warp_m * warp_m_rows + 16 * i + (lanes & 15)
                                    af = ldsm_x4(a_s, swz(row, 2 * ks + (lanes >> 4)))
                                    for j in range(NI):
                                        mma(acc[(w, i, j)], af, bf[j][:, 2 * h : 2 * h + 2], bf16)
                for k_, v in acc.items():  # split order
                    total[k_] = total.get(k_, 0) + v
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

    return y
