"""CPU tests of the W8A8 GEMM (issue 15 items 2-4): the references on hand-checked cases, the kernel's index math
(dqgen.w8a8.fragments) against the PTX ISA's mma.m16n8k32 fragment tables and against the integer product,
the kernels rendered and compiled by NVRTC for sm_80 / sm_89 / sm_90 with the tensor-core instruction in their
SASS, the split-K plan, and the per-channel weight quantization. The GPU tests are tests/test_w8a8_gemm_gpu.py."""

from __future__ import annotations

import re
from collections import Counter

import ml_dtypes
import numpy as np
import pytest

from dqgen.kernels.w8a8_gemm import (
    BK,
    MAX_K_S8,
    MIN_KTILES_PER_SPLIT,
    SWAP_MAX_M,
    W8A8GemmConfig,
    choose_splits,
    choose_w8a8_gemm,
    render_w8a8_gemm,
)
from dqgen.w8a8 import fragments as fr
from dqgen.w8a8 import gemm_reference as ref
from dqgen.w8a8 import quantize_weight
from dqgen.w8a8.gemm import compile_config, launch_args

# -- references ---------------------------------------------------------------------------------------------------


def test_int_product_hand_checked() -> None:
    x = np.array([[1, 2], [3, -4]], np.int8)
    w = np.array([[5, 6], [-7, 8]], np.int8)
    assert ref.int_product(x, w).tolist() == [[17, 9], [-9, -53]]
    # the extremes: -128 * -128 over the largest K whose sum fits int32 (why MAX_K_S8 is what it is)
    big = ref.int_product(np.full((1, 3), -128, np.int8), np.full((1, 3), -128, np.int8))
    assert big.tolist() == [[49152]]
    assert MAX_K_S8 * 128 * 128 < 2**31 <= (MAX_K_S8 + 1) * 128 * 128


def test_epilogue_hand_checked() -> None:
    # exact: 7 * (0.5 * 0.25) + 1 = 1.875; and 2049 rounds to 2048 in fp16 (ties to even), 2051 to 2052
    y = ref.epilogue(np.array([[7, 4098, 4102]]), [0.5], [0.25, 1.0, 1.0], np.array([1.0, 0, 0], np.float16), "f16")
    assert y.dtype == np.float16 and y.tolist() == [[1.875, 2048.0, 2052.0]]
    # int -> float32 rounds once: 2^24 + 1 -> 2^24, 2^24 + 3 -> 2^24 + 4; then x 2^-20 exactly
    y = ref.epilogue(np.array([[2**24 + 1, 2**24 + 3]]), [2.0**-10], [2.0**-10, 2.0**-10], None, "bf16")
    assert y.dtype == ml_dtypes.bfloat16 and y.astype(np.float64).tolist() == [[16.0, 16.0]]
    # overflow of the output type is inf (no saturation), like the kernel's cvt.rn
    y = ref.epilogue(np.array([[70000]]), [1.0], [1.0], None, "f16")
    assert np.isinf(y[0, 0])


def _f32_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # two float32 multiply exactly in float64 (48 significant bits), so this is one rounding to float32
    return (a.astype(np.float64) * b.astype(np.float64)).astype(np.float32)


def test_epilogue_order_is_scale_product_first() -> None:
    # the documented order, computed independently of the reference with exact float64 products, on many cases;
    # among them cases where the other order ((acc * s_tok) * s_ch) rounds to another fp16, so it is told apart
    rng = np.random.default_rng(5)
    differ = 0
    for s_ch in rng.uniform(1e-3, 1, 20).astype(np.float32):
        acc = rng.integers(-(2**15), 2**15, 50_000)  # |y| < 65504: no fp16 overflow
        s_tok = rng.uniform(1e-3, 1, acc.size).astype(np.float32)
        documented = _f32_mul(acc.astype(np.float32), _f32_mul(s_tok, np.full_like(s_tok, s_ch))).astype(np.float16)
        other = _f32_mul(_f32_mul(acc.astype(np.float32), s_tok), np.full_like(s_tok, s_ch)).astype(np.float16)
        got = ref.epilogue(acc[:, None], s_tok, [s_ch], None, "f16")[:, 0]
        assert (got.view(np.int16) == documented.view(np.int16)).all()
        differ += int((documented != other).sum())
    assert differ > 0


def test_fp8_product_is_exact_on_e4m3_values() -> None:
    x = np.array([[1.5, -448.0, 0.0625]], ml_dtypes.float8_e4m3fn)
    w = np.array([[2.0, 1.0, 16.0]], ml_dtypes.float8_e4m3fn)
    assert ref.fp8_product(x, w).tolist() == [[3.0 - 448.0 + 1.0]]


# -- weight quantization --------------------------------------------------------------------------------------------


def test_quantize_weight_int8_hand_checked() -> None:
    codes, scale = quantize_weight(np.array([[127.0, -3.5, 2.5, 0.4], [0, 0, 0, 0], [-254.0, 1.0, 3.0, 0]]))
    assert codes.dtype == np.int8 and scale.dtype == np.float32
    assert scale.tolist() == [1.0, 1.0, 2.0]  # a zero row gets scale 1
    assert codes.tolist() == [[127, -4, 2, 0], [0, 0, 0, 0], [-127, 0, 2, 0]]  # rint: ties to even


def test_quantize_weight_fp8_hand_checked() -> None:
    codes, scale = quantize_weight(np.array([[448.0, 17.0, -0.3, 19.0]]), "fp8")
    assert codes.dtype == ml_dtypes.float8_e4m3fn and scale.tolist() == [1.0]
    # e4m3 between 16 and 32 steps by 2: 17 is a tie -> 16 (even mantissa), 19 -> 20; -0.3 -> -0.3125 (spacing 1/64)
    assert codes.astype(np.float64).tolist() == [[448.0, 16.0, -0.3125, 20.0]]


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_quantize_weight_round_trip_within_half_a_step(kind: str) -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 300)) * rng.uniform(0.01, 10, (64, 1))
    codes, scale = quantize_weight(w, kind)  # type: ignore[arg-type]
    back = ref.dequantize_weight(codes, scale)
    err = np.abs(back - w.astype(np.float32))
    if kind == "int8":
        assert (err <= scale[:, None] * 0.5 * (1 + 1e-6)).all()
        assert (np.abs(codes).max(axis=1) == 127).all()  # the row's max maps to the largest code
    else:  # e4m3: 3 mantissa bits, half a step is 1/16 of the value (subnormals: half of 2^-9)
        bound = np.maximum(np.abs(w) / 16, scale[:, None] * 2.0**-10) * (1 + 1e-6)
        assert (err <= bound).all()
    again, _ = quantize_weight(-w, kind)  # type: ignore[arg-type]
    assert (again.astype(np.float32) == -codes.astype(np.float32)).all()  # symmetric


def test_quantize_weight_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="w: expected a 2-D"):
        quantize_weight(np.zeros(4))
    with pytest.raises(ValueError, match="w: expected finite"):
        quantize_weight(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="kind: expected"):
        quantize_weight(np.ones((2, 2)), "int4")  # type: ignore[arg-type]


# -- the fragment index math ----------------------------------------------------------------------------------------
# The PTX ISA facts these tests hold the kernel to (PTX ISA 8.x/9.x, docs.nvidia.com/cuda/parallel-thread-execution):
#   mma.m16n8k32 fragments, section "Matrix Fragments for mma.m16n8k32" (#warp-level-matrix-fragment-mma-16832):
#     A (.s8 and .e4m3 alike): a_i of lane l at row groupID (+8 for 4 <= i < 8 and i >= 12), column
#     4 threadID_in_group + (i & 3) (+16 for i >= 8); B: b_i at row 4 threadID_in_group + (i & 3) (+16 for i >= 4),
#     column groupID; C: c_i at row groupID (+8 for i >= 2), column 2 threadID_in_group + (i & 1)
#     (groupID = lane >> 2, threadID_in_group = lane % 4): fr.ptx_a / ptx_b / ptx_c.
#   ldmatrix, section "Warp-level matrix load instruction: ldmatrix" (#warp-level-matrix-instructions-ldmatrix):
#     .x4: threads 8j..8j+7 give the row addresses of matrix j, each 16-byte aligned; "a group of four threads
#     loads an entire row", thread 0 the first fragment, matrix j into destination register j: fr.ldmatrix_x4.
#   cp.async, section "Data Movement and Conversion Instructions: cp.async": src-size < cp-size zero-fills the rest
#     of dst (src-size 0: 16 zero bytes, nothing read): fr.load_tile.


def _ids(rows: int) -> np.ndarray:
    """A tile whose every byte position holds its own id r * BK + k."""
    return np.arange(rows * BK, dtype=np.int64).reshape(rows, BK)


def test_swizzle_is_a_bijection_onto_the_tile() -> None:
    offs = sorted(fr.swizzle(r, c) for r in range(128) for c in range(8))
    assert offs == list(range(0, 128 * BK, 16))


def _banks(addr: int) -> set[int]:
    return {(addr // 4 + i) % 32 for i in range(4)}


def test_ldmatrix_and_cp_async_phases_are_bank_conflict_free() -> None:
    for wm, wt, mi, ks in ((0, 64, 0, 0), (1, 64, 3, 3), (3, 32, 1, 2)):
        addrs = [fr.swizzle(*fr.ldsm_a(lane, wm, wt, mi, ks)) for lane in range(32)]
        for j in range(4):  # one matrix per phase: its 8 row addresses cover all 32 banks once
            banks = [b for a in addrs[8 * j : 8 * j + 8] for b in _banks(a)]
            assert sorted(banks) == list(range(32))
        addrs = [fr.swizzle(*fr.ldsm_b(lane, wm, wt, mi, ks)) for lane in range(32)]
        for j in range(4):
            banks = [b for a in addrs[8 * j : 8 * j + 8] for b in _banks(a)]
            assert sorted(banks) == list(range(32))
    # cp.async: thread i of a pass stores chunk (i // 8, i % 8); 16-byte stores go 8 lanes a phase
    for base in (0, 256, 992):
        for phase in range(4):
            lanes = range(base + 8 * phase, base + 8 * phase + 8)
            banks = [b for i in lanes for b in _banks(fr.swizzle(i >> 3, i & 7))]
            assert sorted(banks) == list(range(32))


@pytest.mark.parametrize(("wm", "wt", "mi", "ks"), [(0, 64, 0, 0), (1, 64, 2, 3), (3, 32, 1, 1)])
def test_ldmatrix_delivers_the_ptx_a_fragment(wm: int, wt: int, mi: int, ks: int) -> None:
    tile = _ids(128)
    regs = fr.ldmatrix_x4(fr.store_tile(tile), [fr.swizzle(*fr.ldsm_a(lane, wm, wt, mi, ks)) for lane in range(32)])
    for lane in range(32):
        for i in range(16):
            row, k = fr.ptx_a(lane, i)
            assert regs[lane, i // 4, i % 4] == tile[wm * wt + mi * 16 + row, 32 * ks + k], (lane, i)


@pytest.mark.parametrize(("wn", "wt", "nj", "ks"), [(0, 32, 0, 0), (3, 32, 1, 2), (0, 64, 3, 3), (0, 16, 0, 1)])
def test_ldmatrix_delivers_the_ptx_b_fragments(wn: int, wt: int, nj: int, ks: int) -> None:
    tile = _ids(128)
    regs = fr.ldmatrix_x4(fr.store_tile(tile), [fr.swizzle(*fr.ldsm_b(lane, wn, wt, nj, ks)) for lane in range(32)])
    for half in range(2):  # registers 2 half, 2 half + 1: n8 fragment 2 nj + half
        for lane in range(32):
            for i in range(8):
                k, col = fr.ptx_b(lane, i)
                got = regs[lane, 2 * half + i // 4, i % 4]
                assert got == tile[wn * wt + nj * 16 + 8 * half + col, 32 * ks + k], (half, lane, i)


def test_ptx_tables_cover_each_fragment_once() -> None:
    # the ISA's formulas, spot-checked against its figures for mma.m16n8k32 (lane 5: groupID 1, threadID_in_group 1)
    assert [fr.ptx_a(5, i) for i in (0, 3, 4, 8, 15)] == [(1, 4), (1, 7), (9, 4), (1, 20), (9, 23)]
    assert [fr.ptx_b(5, i) for i in (0, 3, 4, 7)] == [(4, 1), (7, 1), (20, 1), (23, 1)]
    assert [fr.ptx_c(5, i) for i in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    assert sorted(fr.ptx_a(lane, i) for lane in range(32) for i in range(16)) == [
        (r, k) for r in range(16) for k in range(32)
    ]
    assert sorted(fr.ptx_b(lane, i) for lane in range(32) for i in range(8)) == [
        (k, n) for k in range(32) for n in range(8)
    ]
    assert sorted(fr.ptx_c(lane, i) for lane in range(32) for i in range(4)) == [
        (r, n) for r in range(16) for n in range(8)
    ]


@pytest.mark.parametrize("m", [1, 24, 64, 1000])
def test_a_block_computes_its_tile_of_the_product(m: int) -> None:
    cfg = choose_w8a8_gemm("s8", "f16", m)
    rng = np.random.default_rng(m)
    p = rng.integers(-128, 128, (cfg.bm, BK)).astype(np.int8)
    q = rng.integers(-128, 128, (cfg.bn, BK)).astype(np.int8)
    p[0, :] = -128
    q[0, :] = -128
    got = fr.block_product(p, q, cfg.warps_m, cfg.warps_n)
    assert (got == ref.int_product(p, q)).all()


@pytest.mark.parametrize(("m", "n", "k", "per"), [(37, 150, 272, 1), (5, 131, 400, 2), (130, 140, 144, 1)])
def test_the_grid_with_tails_and_splits_computes_the_product(m: int, n: int, k: int, per: int) -> None:
    """M, N and K tails (zero fill), and K split over blocks (partials added in split order)."""
    cfg = choose_w8a8_gemm("s8", "f16", m)
    kp = -(-k // 16) * 16  # the host pads K to 16
    rng = np.random.default_rng(k)
    x = np.zeros((m, kp), np.int8)
    w = np.zeros((n, kp), np.int8)
    x[:, :k] = rng.integers(-128, 128, (m, k))
    w[:, :k] = rng.integers(-127, 128, (n, k))
    p, q = (w, x) if cfg.swap else (x, w)
    acc = fr.gemm(p, q, cfg.bm, cfg.bn, cfg.warps_m, cfg.warps_n, per)
    assert (acc.T if cfg.swap else acc).tolist() == ref.int_product(x, w).tolist()


# -- configurations and the split-K plan ----------------------------------------------------------------------------


def test_choose_swaps_small_m_only() -> None:
    assert [choose_w8a8_gemm("s8", "f16", m).bn for m in (1, 16, 17, 32, 33, 64)] == [16, 16, 32, 32, 64, 64]
    assert all(choose_w8a8_gemm("s8", "f16", m).swap for m in (1, SWAP_MAX_M))
    big = choose_w8a8_gemm("e4m3", "bf16", SWAP_MAX_M + 1)
    assert not big.swap and (big.bm, big.bn) == (128, 128)
    for m in (1, 64, 65):  # every default fits sm_89's 99 KB of shared memory a block
        assert choose_w8a8_gemm("s8", "f16", m).shared_bytes <= 99 * 1024
    for m in (1, 16, 17, 64, 65, 4096):  # and so does every choice on a device of sm_89's limit
        assert choose_w8a8_gemm("s8", "f16", m, 28672, 8192, 128, 99 * 1024).shared_bytes <= 99 * 1024


H100 = (132, 227 * 1024)  # SMs, shared memory a block may opt in to


def test_choose_on_an_h100() -> None:
    """The device-informed rules (docs/w8a8.md): 256 bytes of K a stage for int8 at M <= 16 (fp8 keeps 128); at
    33..64 tokens, 32-token column tiles where the 128-channel strips occupy few SMs and 8-warp 64-token tiles
    otherwise; above 64 tokens, 128 x 256 tiles where 128 x 128 tiles would need two rounds of blocks on an SM."""
    for m in (1, 16):
        assert choose_w8a8_gemm("s8", "f16", m, 4096, 4096, *H100).bk == 256
        assert choose_w8a8_gemm("e4m3", "f16", m, 4096, 4096, *H100).bk == BK
    assert choose_w8a8_gemm("s8", "f16", 64, 6144, 4096, *H100).bn == 32  # 48 strips on 132 SMs
    wide = choose_w8a8_gemm("s8", "f16", 64, 28672, 8192, *H100)  # 224 strips
    assert (wide.bn, wide.warps_m * wide.warps_n) == (64, 8)
    for m, n, k in ((4096, 28672, 8192), (1024, 4096, 14336)):  # 7168 / 256 tiles of 128 x 128: 2+ an SM
        assert (
            choose_w8a8_gemm("s8", "f16", m, n, k, *H100).bn,
            choose_w8a8_gemm("s8", "f16", m, n, k, 132, 99 * 1024).bn,
        ) == (256, 128)
    # 384 tiles of 128 x 128 (3 an SM) against 192 of 128 x 256 (2 an SM, each twice as long): 128 x 128
    assert choose_w8a8_gemm("s8", "f16", 1024, 6144, 4096, *H100).bn == 128
    for m in (65, 4096):  # every choice on an H100 fits its shared memory
        assert choose_w8a8_gemm("e4m3", "bf16", m, 28672, 8192, *H100).shared_bytes <= H100[1]


@pytest.mark.parametrize(
    ("tiles", "k", "resident"), [(32, 4096, 264), (224, 8192, 264), (1, 128, 264), (3, 100000, 132)]
)
def test_splits_fill_the_gpu_and_leave_no_split_empty(tiles: int, k: int, resident: int) -> None:
    splits, per = choose_splits(tiles, k, resident)
    kt = -(-k // BK)
    assert splits >= 1 and per >= 1
    assert (splits - 1) * per < kt <= splits * per  # every split has work, together they cover K
    assert splits == 1 or per >= MIN_KTILES_PER_SPLIT  # a split keeps several stages
    assert tiles * splits <= max(tiles, resident)  # one wave
    if tiles * 2 <= resident and kt >= 8:
        assert splits >= 2  # idle SMs and K to share: split


# -- rendering and NVRTC --------------------------------------------------------------------------------------------


def _mma_ops(cfg: W8A8GemmConfig, arch: str) -> Counter:
    from dqgen.emit.sass import disassemble

    res = compile_config(cfg, arch)
    return Counter(op for op in disassemble(res.cubin) if "MMA" in op or op.startswith(("LDSM", "LDGSTS")))


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
@pytest.mark.parametrize("m", [1, 64, 256])
def test_int8_compiles_to_imma(arch: str, m: int) -> None:
    cfg = choose_w8a8_gemm("s8", "bf16" if m == 64 else "f16", m)
    ops = _mma_ops(cfg, arch)
    mmas = (cfg.bm // cfg.warps_m // 16) * (cfg.bn // cfg.warps_n // 8) * (cfg.bk // 32)
    assert ops["IMMA.16832.S8.S8"] == mmas  # one per fragment pair and k-step: the main loop fully unrolled
    assert ops["LDSM.16.M88.4"] > 0 and any(op.startswith("LDGSTS") for op in ops)


@pytest.mark.parametrize("m", [1, 256])
def test_fp8_compiles_to_qmma_on_sm89(m: int) -> None:
    cfg = choose_w8a8_gemm("e4m3", "f16", m)
    ops = _mma_ops(cfg, "sm_89")
    assert ops["QMMA.16832.F32.E4M3.E4M3"] == (cfg.bm // cfg.warps_m // 16) * (cfg.bn // cfg.warps_n // 8) * 4
    # sm_90 has no mma.sync for fp8 in hardware: ptxas converts to f16 and issues two HMMA.16816 per mma
    ops90 = _mma_ops(cfg, "sm_90")
    assert "QMMA.16832.F32.E4M3.E4M3" not in ops90 and ops90["HMMA.16816.F32"] == 2 * ops["QMMA.16832.F32.E4M3.E4M3"]
    # each loaded fragment register (4 codes) is converted once: two e4m3x2 -> f16x2 conversions
    from dqgen.emit.sass import disassemble

    conversions = sum(op.startswith("F2FP.F16.E4M3") for op in disassemble(compile_config(cfg, "sm_90").cubin))
    mi, ni = cfg.bm // cfg.warps_m // 16, cfg.bn // cfg.warps_n // 8
    assert conversions == (mi * 4 + ni * 2) * 2 * (cfg.bk // 32)


def test_fp8_refuses_archs_before_sm89() -> None:
    with pytest.raises(ValueError, match="arch: fp8"):
        compile_config(choose_w8a8_gemm("e4m3", "f16", 1), "sm_80")


def test_render_documents_the_epilogue_and_refuses_bad_tiles() -> None:
    src = render_w8a8_gemm(choose_w8a8_gemm("s8", "bf16", 1000))
    assert "scale = s_tok[m] * s_ch[n]" in src and "__fmul_rn(acc_to_f32(a), scale)" in src
    assert "cvt.rn.bf16.f32" in src and "swap-AB" not in src
    assert "swap-AB" in render_w8a8_gemm(choose_w8a8_gemm("s8", "f16", 8))
    with pytest.raises(ValueError, match="warp tiles"):
        render_w8a8_gemm(W8A8GemmConfig("s8", "f16", False, 128, 24, 2, 1, 3))
    with pytest.raises(ValueError, match="at least 2 stages"):
        render_w8a8_gemm(W8A8GemmConfig("s8", "f16", False, 128, 128, 2, 4, 1))


def test_the_template_uses_the_modelled_index_math() -> None:
    # the fragment model (dqgen.w8a8.fragments) is checked against the PTX tables above; these are its formulas as
    # the kernel spells them, so a change to one side alone fails here
    src = render_w8a8_gemm(choose_w8a8_gemm("s8", "f16", 1000))
    for line in (
        "return r * kBK + ((c ^ (r & 7)) << 4);",
        "const int a_row = wm * kWM + (lane & 7) + ((lane >> 3) & 1) * 8, a_half = lane >> 4;",
        "const int b_row = wn * kWN + (lane & 7) + (lane >> 4) * 8, b_half = (lane >> 3) & 1;",
        "ldsm_x4(a[mi], sp + swz(a_row + mi * 16, 2 * ks + a_half));",
        "ldsm_x4(t, sq + swz(b_row + nj * 16, 2 * ks + b_half));",
        "const bool ok = row0 + r < rows && k < K;",
        # the tiles' epilogue stores accumulators 2h and 2h + 1 (columns c and c + 1) together: c_index with j = 2h
        "const long long c = c0 + wn * kWN + ni * 8 + 2 * t;",
        "const long long r = r0 + wm * kWM + mi * 16 + g + 8 * h;",
        "const u16 lo = epilogue(acc[mi][ni][2 * h], st, s0, bias, n);",
        "const u16 hi = epilogue(acc[mi][ni][2 * h + 1], st, s1, bias, n + 1);",
    ):
        assert line in src, line
    swapped = render_w8a8_gemm(choose_w8a8_gemm("s8", "f16", 8))
    for line in (
        "const long long r = r0 + wm * kWM + mi * 16 + g + 8 * (j >> 1);",
        "const long long c = c0 + wn * kWN + ni * 8 + 2 * t + (j & 1);",
    ):
        assert line in swapped, line


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_default_configs_do_not_spill(arch: str) -> None:
    from dqgen.emit.nvrtc import compile_source

    for elem in ("s8", "e4m3"):
        if elem == "e4m3" and arch == "sm_80":
            continue
        h100 = [choose_w8a8_gemm(elem, "bf16", m, n, 8192, *H100) for m in (1, 64, 4096) for n in (4096, 28672)]  # type: ignore[arg-type]
        small = {choose_w8a8_gemm(elem, "bf16", m) for m in (1, 32, 64, 256)}  # type: ignore[arg-type]
        for cfg in small | (set(h100) if arch == "sm_90" else set()):
            res = compile_source(
                render_w8a8_gemm(cfg), arch=arch, want="cubin", name="w8a8_gemm.cu", options=["-Xptxas=-v"]
            )
            spilled = re.findall(r"(\d+) bytes spill stores", res.log)
            assert spilled, res.log[-300:]
            # fp8 on sm_90 goes through f16 conversions (no fp8 mma.sync in hardware): a few spilled words allowed
            allowed = 64 if (elem, arch) == ("e4m3", "sm_90") else 0
            assert int(spilled[0]) <= allowed, (cfg.name, res.log[-300:])


# -- the launch: arguments against the rendered signature -----------------------------------------------------------

_SIGNATURE = re.compile(r'extern "C" __global__ void __launch_bounds__\((\d+), (\d+)\) (\w+)\((.*?)\) \{', re.S)
#: C parameter type -> the numpy scalar that packs it (pointers: 64-bit)
_WIDTH = {"long long": np.int64, "int": np.int32}


def _signature(cfg: W8A8GemmConfig) -> tuple[int, int, str, list[tuple[type, str]]]:
    m = _SIGNATURE.search(render_w8a8_gemm(cfg))
    assert m is not None
    params = []
    for decl in m.group(4).split(","):
        ctype, name = decl.strip().rsplit(" ", 1)
        params.append((np.uint64 if "*" in ctype else _WIDTH[ctype], name))
    return int(m.group(1)), int(m.group(2)), m.group(3), params


@pytest.mark.parametrize("m", [1, 40, 300])
def test_launch_arguments_match_the_rendered_signature(m: int) -> None:
    """Each argument lands in the parameter of its name with the parameter's width; swap-AB hands the weight in as
    P (the mma's A operand) and the tokens as Q, as the template's header says. Distinct values per argument, so a
    swapped pair shows."""
    cfg = choose_w8a8_gemm("s8", "bf16", m)
    threads, min_blocks, name, params = _signature(cfg)
    assert (threads, min_blocks, name) == (cfg.threads, cfg.min_blocks, cfg.name)  # __launch_bounds__ = the launch
    n, k = 1000, 4096
    vals = dict(x_ptr=0x1000, x_ld=4112, w_ptr=0x2000, w_ld=4128, x_scale_ptr=0x3000, w_scale_ptr=0x4000)
    vals |= dict(bias_ptr=0x5000, y_ptr=0x6000, ws_ptr=0x7000, counters_ptr=0x8000)
    rows, cols = (n, m) if cfg.swap else (m, n)
    tiles = -(-rows // cfg.bm) * -(-cols // cfg.bn)
    args = launch_args(cfg, m, n, k, plan=(tiles, 4, 8), **vals)  # type: ignore[arg-type]
    x_side = {"ptr": vals["x_ptr"], "ld": vals["x_ld"], "rows": m}
    w_side = {"ptr": vals["w_ptr"], "ld": vals["w_ld"], "rows": n}
    p_side, q_side = (w_side, x_side) if cfg.swap else (x_side, w_side)
    want = {
        "P": p_side["ptr"], "Q": q_side["ptr"], "R": p_side["rows"], "C": q_side["rows"], "K": k,
        "ldp": p_side["ld"], "ldq": q_side["ld"], "s_tok": vals["x_scale_ptr"], "s_ch": vals["w_scale_ptr"],
        "bias": vals["bias_ptr"], "y": vals["y_ptr"], "ldy": n, "ws": vals["ws_ptr"],
        "counters": vals["counters_ptr"], "kt_per_split": 8,
    }  # fmt: skip
    assert [pname for _, pname in params] == list(want)
    assert len(args) == len(params)
    for arg, (width, pname) in zip(args, params, strict=True):
        assert type(arg) is width, (pname, type(arg), width)
        assert int(arg) == want[pname], pname


def test_launch_refuses_what_the_kernel_assumes() -> None:
    """The preconditions of the cp.async copies (16-byte aligned sources, K in whole 16-byte chunks) and of the
    grid, refused in one line before a launch (a misaligned cp.async source faults the whole context)."""
    cfg = choose_w8a8_gemm("s8", "f16", 300)
    ok = dict(x_ptr=0x1000, x_ld=256, w_ptr=0x2000, w_ld=256, x_scale_ptr=8, w_scale_ptr=8, bias_ptr=0)
    ok |= dict(y_ptr=8, ws_ptr=8, counters_ptr=8)
    tiles = 3 * 2  # 300 tokens x 200 channels in 128 x 128 tiles
    launch_args(cfg, 300, 200, 256, plan=(tiles, 2, 1), **ok)  # type: ignore[arg-type]
    bad = [
        ({"k": 200}, "k: expected a positive multiple of 16"),
        ({"k": 0}, "k: expected a positive multiple of 16"),
        ({"x_ptr": 0x1008}, "x_ptr: expected a multiple of 16"),
        ({"w_ld": 264}, "w_ld: expected a multiple of 16"),
        ({"plan": (tiles, 1, 1)}, r"plan: expected \(6 tiles"),  # 2 k-tiles, one covered
        ({"plan": (tiles - 1, 2, 1)}, r"plan: expected \(6 tiles"),
        ({"plan": (tiles, 70000, 1)}, "plan: expected"),
        ({"ws_ptr": 0}, "ws_ptr, counters_ptr: a plan of 2 splits"),
    ]
    for change, match in bad:
        kw: dict = {"k": 256, "plan": (tiles, 2, 1), **ok, **change}
        with pytest.raises(ValueError, match=match) as e:
            launch_args(cfg, 300, 200, **kw)
        assert "\n" not in str(e.value)


def test_workspace_and_shared_memory_match_the_template() -> None:
    """The host's sizes against the template's own constants: the split-K partials a block stores
    (kAccs x kThreads values at (tile * splits + split) * kAccs * kThreads) and the dynamic shared memory
    (kStages stages of kStageBytes, what the launch asks for and opts in to above 48 KB)."""
    for m in (1, 20, 64, 65):
        cfg = choose_w8a8_gemm("s8", "f16", m)
        src = render_w8a8_gemm(cfg)
        const = {n: int(v) for n, v in re.findall(r"constexpr int (k\w+) = (\d+);", src)}
        k_threads = 32 * const["kWarpsM"] * const["kWarpsN"]
        k_accs = (const["kBM"] // const["kWarpsM"] // 16) * (const["kBN"] // const["kWarpsN"] // 8) * 4
        assert (cfg.threads, cfg.accs) == (k_threads, k_accs)
        assert cfg.shared_bytes == const["kStages"] * (const["kBM"] + const["kBN"]) * const["kBK"]
        assert "(tile * splits + split) * (long long)(kAccs * kThreads)" in src


# -- the cp.async pipeline ------------------------------------------------------------------------------------------


def _pipeline_hazards(stages: int, nk: int, wait_n: int, ahead: int) -> list[str]:
    """The main loop's schedule under the ISA's cp.async rules (section "cp.async.wait_group / cp.async.wait_all"):
    commit_group closes the thread's uncommitted copies into a group (an empty group is trivially complete);
    wait_group N returns once at most the N most recent groups are pending, every older one complete; a copy's
    bytes may land at any moment between its issue and the completion of its group. With the template's loop
    (prologue: `ahead` k-tiles issued, one group each; iteration i: wait_group wait_n, barrier, issue k-tile
    i + ahead into stage (i + ahead) % stages, commit, read stage i % stages): returns every read that could
    see the wrong bytes or bytes still landing, and copies still pending at exit."""
    groups: list[list[tuple[int, int]]] = []  # per group: (k-tile, stage) copies
    complete: list[bool] = []
    landed: dict[int, int] = {}  # stage -> k-tile whose copy completed there last

    def issue_and_commit(t: int) -> None:
        groups.append([(t, t % stages)] if t < nk else [])
        complete.append(not groups[-1])

    def wait(n: int) -> None:
        for g in range(len(groups) - n):
            if not complete[g]:
                complete[g] = True
                for t, st in groups[g]:
                    landed[st] = t

    hazards = []
    for s in range(ahead):
        issue_and_commit(s)
    for i in range(nk):
        wait(wait_n)
        issue_and_commit(i + ahead)
        st = i % stages
        if landed.get(st) != i:
            hazards.append(f"iteration {i}: stage {st} holds k-tile {landed.get(st)}, not {i}")
        for g, copies in enumerate(groups):
            for t, dst in copies:
                if dst == st and not complete[g] and t != i:
                    hazards.append(f"iteration {i}: k-tile {t} may land in stage {st} while it is read")
    wait(0)  # the template's cp_async_wait<0>() after the loop
    return hazards + [f"group {g} pending at exit" for g, c in enumerate(complete) if not c]


@pytest.mark.parametrize("m", [1, 300])
def test_the_pipeline_reads_each_stage_after_it_landed_and_before_it_is_refilled(m: int) -> None:
    cfg = choose_w8a8_gemm("s8", "f16", m)
    src = render_w8a8_gemm(cfg)
    for line in (  # the schedule the model runs, as the template spells it
        "for (int s = 0; s < kStages - 1; ++s) {\n        if (s < nk) issue(s);\n        cp_async_commit();",
        "cp_async_wait<kStages - 2>();  // k-tile i has landed (this thread's copies) ...\n        __syncthreads();",
        "if (i + kStages - 1 < nk) issue(i + kStages - 1);\n        cp_async_commit();",
        "const unsigned st = sbase + (i % kStages) * kStageBytes;",
        "const unsigned sp = sbase + (i % kStages) * kStageBytes, sq = sp + kBM * kBK;",
        "cp_async_wait<0>();",
    ):
        assert line in src, line
    for nk in (1, 2, cfg.stages - 1, cfg.stages, cfg.stages + 1, 40):
        assert _pipeline_hazards(cfg.stages, nk, cfg.stages - 2, cfg.stages - 1) == [], nk
    # the model can fail: one group less waited for, or one stage more of look-ahead, reads bytes still landing
    assert _pipeline_hazards(cfg.stages, 40, cfg.stages - 1, cfg.stages - 1)
    assert _pipeline_hazards(cfg.stages, 40, cfg.stages - 2, cfg.stages)
