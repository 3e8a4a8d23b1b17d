"""The Hopper GEMM's index math on the CPU (tests/gemm90_emulator.py: one launch of templates/gemm90.cu.j2 with TMA,
mbarriers, ldmatrix and wgmma as the PTX ISA states them, the converter as its solved Plan): for every in-order
spec the GEMM takes, every shipped CTA shape and the grids that matter (one tile a CTA, split-K in three, stream-K
ranges that cross tiles), on shapes with tails (N = 200: a partial feature tile past the weight's lines; K with a
tail inside a 64-tile; M not a multiple of the token tile), the model's y equals x @ dequantize(W), every workspace
slot read was written once and every output stored once. Gathered K slots (act-order with a real desc_act g_idx,
groups padded to whole tiles, K tails): the gather kernel's model writes x' = x[:, perm] (0 at padding) and the GEMM
over x' equals x @ W. 2-CTA clusters: pair tiles, x multicast in halves into both CTAs, both CTAs' releases of a
stage and the producer tail (dropping either is caught). Split-K clusters of 2, 4 and 8 CTAs on every one-CTA tile
(dropping the barrier that keeps a CTA until its piece is read is caught). The GPU runs are in
tests/test_gpu_gemm90.py."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.check.matmul_reference import matmul_inputs, matmul_reference, random_x
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec
from dqgen.kernels.gemm import supports
from dqgen.kernels.gemm90 import (
    CLUSTER_CONFIGS90,
    CLUSTER_SPLITS,
    CONFIGS90,
    NARROW_CONFIGS90,
    Gemm90Config,
    Gemm90KernelConfig,
)
from dqgen.layout.gemm import GemmPacked, pack_gemm
from dqgen.run.gemm90 import Plan90, shares_for

from . import gemm90_emulator as emu
from .test_gemm import ZERO_VARIANTS

#: every in-order spec the Hopper GEMM takes: the integer specs and the float / codebook ones (fp8, nf4, ...)
SPECS = [
    s
    for s in (load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml")))
    if Gemm90KernelConfig.supports(s) and not s.act_order
]
IDS = [s.name for s in SPECS]
N = 200


def _case_k(spec: Spec) -> tuple[int, int]:
    """(K, group size) of _case."""
    group = spec.scales.group_size
    group = 64 if group == "auto" else group
    return (296 if group == -1 else 320 - group if group < 64 else -(-320 // group) * group), group


def _case(spec: Spec, M: int, seed: int = 1) -> tuple[GemmPacked, np.ndarray, np.ndarray, np.ndarray | None]:
    """Packed W, x [M, K], the float64 reference: per-channel K = 296 (5 K tiles, the last 40 k of 64: x's box
    reads zeros past K), else groups of 64 over K = 320 (5 K tiles, a group each; a spec's fixed groups of 128
    over K = 384; groups of 16 or 32 over 320 - group: the last tile's last scale row lies past G, a TMA zero), and
    the global scale of a spec with one (NVFP4: the reference applies it by the formula, not by the Plan)."""
    K, group = _case_k(spec)
    (q, s, z, gi, gs), W = matmul_inputs(spec, K, N, seed=seed, group_size=group if group > 0 else None)
    G = s.shape[0]
    pk = pack_gemm(spec, q, s, z, gi, K // G if G > 1 else -1)
    assert not pk.slots.gather and pk.slots.slots == -(-K // 64) * 64
    x = random_x(spec, M, K, seed=seed + 2)
    return pk, x, matmul_reference(x, W), gs


def _grids(tiles: int, units: int) -> list[int]:
    """One tile a CTA, split-K in three, two stream-K grids whose ranges cross tiles (more CTAs than tiles, dividing
    no units), and, with fewer CTAs than tiles, persistent CTAs on whole tiles P apart."""
    crossing = [p for p in range(tiles + 1, 4 * tiles + 2) if units % p][:2]
    assert len(crossing) == 2
    return sorted({tiles, 3 * tiles, *crossing, max(1, (tiles + 1) // 2), max(1, tiles - 1)})


def _check(spec: Spec, cfg: Gemm90Config, M: int, bias: bool = False, misaligned: bool = False) -> None:
    pk, x, ref, gs = _case(spec, M)
    b = np.random.default_rng(6).standard_normal(N) if bias else None
    if b is not None:
        ref = ref + b
    tiles = -(-M // cfg.bn) * -(-N // cfg.features)
    # the grids of Plan90.of, then whole tiles before a stream-K tail: the last tile in up to 5 pieces (as plan_for
    # splits a short last wave), and a whole tile a CTA before ranges that cross tiles
    plans = [(P, None, None) for P in _grids(tiles, tiles * 5)]
    half = max(1, tiles // 2)
    plans += [(tiles, tiles - 1, min(tiles, 5)), (half, half, half)] if tiles > 1 else []
    for P, whole, q in plans:
        order = np.random.default_rng(P).permutation(P).tolist()  # any order is a schedule the counters allow
        y = emu.emulate90(
            spec,
            pk,
            x,
            cfg,
            P,
            bias=b,
            order=order,
            whole=whole,
            split_ctas=q,
            global_scale=gs,
            y_misaligned=misaligned,
        )
        # the model sums exact products in float64, in another order than the reference: rounding only
        assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max()), (cfg.tag, M, P, whole, q)


@pytest.mark.parametrize("cfg", CONFIGS90 + NARROW_CONFIGS90, ids=[c.tag for c in CONFIGS90 + NARROW_CONFIGS90])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_emulated_gemm90_equals_x_at_w(spec: Spec, cfg: Gemm90Config) -> None:
    _check(spec, cfg, cfg.bn - 3 if cfg.bn > 8 else 5)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_emulated_gemm90_two_token_tiles_with_bias(spec: Spec) -> None:
    """M = 21 on 16-token tiles: two m tiles (the second 5 rows), tiles ordered m fastest; bias in the epilogue."""
    _check(spec, CONFIGS90[1], 21, bias=True)


@pytest.mark.parametrize("cfg", [CONFIGS90[1], CONFIGS90[3], CONFIGS90[4]], ids=lambda c: c.tag)
def test_emulated_gemm90_epilogue_with_y_not_16_byte_aligned(cfg: Gemm90Config) -> None:
    """y 2 bytes past 16-byte alignment (an ``out`` view into a buffer): the 2-byte stores on tiles that would
    otherwise stage 16-byte runs (the 8-token tile always takes the 2-byte stores), with bias and a partial token
    tile, against the same reference."""
    _check(load_spec("awq_int4_fp16"), cfg, cfg.bn - 3, bias=True, misaligned=True)


@pytest.mark.parametrize("cfg", [c for c in CONFIGS90 if c.accumulators % 16 == 0], ids=lambda c: c.tag)
@pytest.mark.parametrize("name", ["awq_int4_fp16", "int8_bf16"])
def test_emulated_gemm90_shared_fixup(name: str, cfg: Gemm90Config) -> None:
    """Every tile in S pieces (each count dqgen.run.gemm90.shares_for allows on this tile: 2, 4, 8), the CTAs of a
    tile adding their shares of its pieces once all are stored, in reverse CTA order: x @ W with a bias and a partial
    token tile and feature tile, each piece read once by every share, every y element stored once, the counters back
    to 0; for two pieces also into a y 2 bytes off 16-byte alignment (the 2-byte stores)."""
    spec = load_spec(name)
    K = 640  # 10 K tiles: no piece empty at 8 pieces a tile
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=7)
    G = s.shape[0]
    pk = pack_gemm(spec, q, s, z, gi, K // G if G > 1 else -1)
    M = cfg.bn - 3
    x = random_x(spec, M, K, seed=8)
    b = np.random.default_rng(9).standard_normal(N)
    ref = matmul_reference(x, W) + b
    tiles = -(-M // cfg.bn) * -(-N // cfg.features)
    counts = [S for S in CLUSTER_SPLITS if shares_for(Plan90.of(tiles, tiles * S, K // 64), cfg, 1 << 20) == S]
    assert counts, "no count shares this tile"
    for S in counts:
        P = tiles * S
        for misaligned in (False, True) if S == 2 else (False,):
            order = list(range(P))[::-1]
            y = emu.emulate90(spec, pk, x, cfg, P, bias=b, order=order, shares=S, y_misaligned=misaligned)
            assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max()), (cfg.tag, S, misaligned)


@pytest.mark.parametrize("spec", ZERO_VARIANTS, ids=[s.name for s in ZERO_VARIANTS])
def test_emulated_gemm90_other_zero_modes(spec: Spec) -> None:
    """GPTQ v2, float and additive 16-bit zeros (a 2-byte zero box), int8 with packed zeros."""
    assert supports(spec) and not spec.act_order
    _check(spec, CONFIGS90[0], 7)


@pytest.mark.parametrize(
    "cfg", [CONFIGS90[0], CONFIGS90[3], CONFIGS90[5], NARROW_CONFIGS90[0], NARROW_CONFIGS90[-1]], ids=lambda c: c.tag
)
@pytest.mark.parametrize("name,K", [("awq_int4_fp16", 704), ("int8_bf16", 680)])
def test_emulated_gemm90_the_stage_ring_wraps(name: str, K: int, cfg: Gemm90Config) -> None:
    """11 K tiles: a CTA's range runs more K tiles than the ring has stages (8, 6, 5), so each stage is refilled
    while the wgmmas of the other stages may still read theirs (the model runs the producer as far ahead as the
    mbarriers let it and a wgmma group at the wait that retires it): one tile a CTA, and stream-K on 3 CTAs."""
    spec = load_spec(name)
    auto = spec.scales.group_size == "auto"
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=4, group_size=64 if auto else None)
    G = s.shape[0]
    pk = pack_gemm(spec, q, s, z, gi, K // G if G > 1 else -1)
    M = 6
    x = random_x(spec, M, K, seed=5)
    ref = matmul_reference(x, W)
    for P in (2, 3):
        y = emu.emulate90(spec, pk, x, cfg, P, order=[P - 1 - c for c in range(P)])
        assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max()), P


def _awq() -> tuple[Spec, GemmPacked, np.ndarray, np.ndarray]:
    spec = load_spec("awq_int4_fp16")
    pk, x, ref, _ = _case(spec, 13)
    return spec, pk, x, ref


def test_the_model_catches_an_unswizzled_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """W read by ldmatrix without the swizzle TMA wrote it with: a wrong y."""
    spec, pk, x, ref = _awq()
    real = emu.ldsm_x4

    def unswizzled(smem: np.ndarray, addr: np.ndarray) -> np.ndarray:
        off = addr % 1024
        row, chunk = off // 128, (off % 128) // 16
        return real(smem, addr - off + row * 128 + ((chunk ^ (row & 7)) << 4))

    monkeypatch.setattr(emu, "ldsm_x4", unswizzled)
    assert not np.allclose(emu.emulate90(spec, pk, x, CONFIGS90[1], 2), ref)


def test_the_model_catches_a_wrong_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    """owner() off by one unit (floor(u P / units)): the last arriver waits for the wrong CTAs' pieces, which the
    model refuses (a slot read that was never written, a counter left set, or a tile stored twice / never)."""
    spec, pk, x, _ = _awq()
    monkeypatch.setattr(emu, "owner", lambda u, units, P: u * P // units)
    with pytest.raises(AssertionError):
        emu.emulate90(spec, pk, x, CONFIGS90[1], 7)


def test_the_model_catches_a_descriptor_off_the_swizzle_atom(monkeypatch: pytest.MonkeyPatch) -> None:
    """A B descriptor 16 bytes past the k16 step's start reads the wrong k (or is refused)."""
    spec, pk, x, ref = _awq()
    real = emu.wgmma_desc_sw128
    monkeypatch.setattr(emu, "wgmma_desc_sw128", lambda addr: real(addr + 16))
    try:
        y = emu.emulate90(spec, pk, x, CONFIGS90[0], 2)
    except AssertionError as e:  # the descriptor's own checks, not any other check of the model
        assert "descriptor" in str(e) or "k16 step" in str(e), e
        return
    assert not np.allclose(y, ref)


def test_the_vectorised_ldmatrix_is_the_sm80_models() -> None:
    """The model's ldmatrix (batched over warps) reads what tests/gemm_emulator.py's per-lane ldsm_x4 reads."""
    from .gemm_emulator import ldsm_x4

    rng = np.random.default_rng(0)
    smem = rng.integers(0, 256, 4096, dtype=np.uint8)
    addr = rng.integers(0, 4096 // 16, (3, 32)) * 16
    got = emu.ldsm_x4(smem, addr)
    for w in range(3):
        assert np.array_equal(got[w], ldsm_x4(smem, addr[w]))


# -- gathered K slots: the gather kernel, then the GEMM over x' --------------------------------------------------


def _act_order_layer(K: int, N: int, group: int, seed: int) -> tuple[Spec, GemmPacked, np.ndarray, np.ndarray]:
    """A GPTQ desc_act layer as dqgen.quantize writes it (g_idx in the Hessian's order, not arange // group): the
    spec, the packed weight, its g_idx and the independent dequantization W [K, N]."""
    from dqgen.check.reference import dequantize_reference
    from dqgen.nn.quantize import quantize

    spec = load_spec("gptq_int4_asym_act_order_fp16")
    dense = (np.random.default_rng(seed).standard_normal((K, N)) * 0.02).astype(np.float32)
    t = quantize(spec, dense, group_size=group, act_order=True)
    gi = np.asarray(t["g_idx"])
    assert not np.array_equal(gi, np.arange(K) // group)  # really out of order
    W = dequantize_reference(spec, t["qweight"], t["scales"], t.get("zeros"), gi, None)
    return spec, pack_gemm(spec, t["qweight"], t["scales"], t.get("zeros"), gi, group), gi, W


@pytest.mark.parametrize(
    "K,group,cfg,M",
    [
        (288, 96, CONFIGS90[0], 5),  # K = 4.5 tiles; 3 groups of 96, each padded to 128 slots (32 x -1 a group)
        (200, 40, CONFIGS90[1], 21),  # 5 groups of 40 padded to 64: 24 padding slots a tile; two token tiles
        (256, 64, CONFIGS90[3], 61),  # whole-tile groups, still sorted by group: gathered without padding
        (288, 96, CONFIGS90[4], 130),  # two consumer warpgroups, 128-token tiles, two of them
    ],
)
def test_emulated_gemm90_act_order_gathers_x_into_slot_order(K: int, group: int, cfg: Gemm90Config, M: int) -> None:
    spec, pk, gi, W = _act_order_layer(K, N, group, seed=K + group)
    sl = pk.slots
    assert sl.gather and sl.slots % 64 == 0 and int((sl.perm < 0).sum()) == sl.slots - K
    # every 64-k tile of the gathered slots lies in one group: the kernel's one tile_group lookup per K tile holds
    real = np.nonzero(sl.perm >= 0)[0]
    assert np.array_equal(sl.tile_group[real // 64], gi[sl.perm[real]])
    x = random_x(spec, M, K, seed=M)
    ref = matmul_reference(x, W)
    tiles = -(-M // cfg.bn) * -(-N // cfg.features)
    units = tiles * (sl.slots // 64)
    for P in sorted({tiles, min(units, 3 * tiles), units // 2 + 1}):  # one tile a CTA, split-K, stream-K
        order = np.random.default_rng(P).permutation(P).tolist()
        y = emu.emulate90(spec, pk, x, cfg, P, order=order)
        assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max()), (cfg.tag, M, P)


def test_the_gather_model_is_x_at_perm_with_zero_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gather kernel's model (grid-stride loop included: a 32-thread block over 3 blocks at most) writes
    x'[m, s] = x[m, perm[s]], 0 where perm[s] = -1, on rows further apart than K."""
    from dqgen.kernels.gather_x import GatherXConfig

    rng = np.random.default_rng(1)
    K, M, stride = 200, 7, 216
    perm = np.full(256, -1, dtype=np.int32)
    perm[rng.permutation(256)[:K]] = rng.permutation(K)
    x = rng.integers(0, 1 << 16, (M, stride), dtype=np.uint16)
    x[:, K:] = 0xDEAD  # past K: never read
    want = np.where(perm >= 0, x[:, np.maximum(perm, 0)], 0)
    assert np.array_equal(emu.gather_x(x.reshape(-1), perm, M, stride), want)
    small = GatherXConfig(32)
    monkeypatch.setattr("dqgen.kernels.gather_x.MAX_BLOCKS", 3)
    assert small.grid(M, 256) == 3  # 224 vectors over 96 threads: the loop runs three passes
    assert np.array_equal(emu.gather_x(x.reshape(-1), perm, M, stride, small), want)


def test_the_model_catches_a_gather_that_ignores_the_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """x' with the padding slots reading x's row 0 (as perm = -1 would read x[m - 1]'s last element): a wrong y, so
    the GEMM's test of act-order depends on the zeros."""
    spec, pk, _, W = _act_order_layer(288, 8, 96, seed=3)
    x = random_x(spec, 5, 288, seed=2)
    ref = matmul_reference(x, W)
    real = emu.gather_x

    def unpadded(x16: np.ndarray, perm: np.ndarray, M: int, x_stride: int) -> np.ndarray:
        return real(x16, np.where(perm >= 0, perm, 0).astype(np.int32), M, x_stride)

    monkeypatch.setattr(emu, "gather_x", unpadded)
    assert not np.allclose(emu.emulate90(spec, pk, x, CONFIGS90[0], 1), ref, rtol=1e-3)


def _variant(name: str, **scales: object) -> Spec:
    data = load_spec(name).model_dump(mode="json", exclude_none=True)
    data["name"] = f"{name}_g{scales['group_size']}"
    data["scales"] = {**data["scales"], **scales}
    return load_spec(data)


#: groups under the 64-k tile that no shipped spec has: fp4 in groups of 16 (four scale rows a stage, two a converted
#: word), fp8 in groups of 32 (a 16-k word, two words a group) and of 16 (a scale row a word), MXFP4's e8m0 block
#: scales in groups of 16 (NVFP4's decoding, a scale a k16 step, without a global scale)
SMALL_GROUPS = [
    _variant("fp4_e2m1_bf16", group_size=16),
    _variant("mxfp4_bf16", group_size=16),
    _variant("fp8_e4m3_fp16", group_size=32),
    _variant("fp8_e5m2_fp16", group_size=16),
]


@pytest.mark.parametrize("cfg", [CONFIGS90[0], CONFIGS90[4]], ids=lambda c: c.tag)
@pytest.mark.parametrize("spec", SMALL_GROUPS, ids=[s.name for s in SMALL_GROUPS])
def test_emulated_gemm90_groups_under_a_tile(spec: Spec, cfg: Gemm90Config) -> None:
    """A pair's scale row is 16 (its k16 step) / group size: every row of the stage is read by the right pairs."""
    assert Gemm90KernelConfig.supports(spec)
    _check(spec, cfg, 7)


def test_specs_the_hopper_gemm_refuses_name_the_field() -> None:
    """Block scales in groups of 8 (under a k16 step), groups that are no divisor or multiple of a tile, 6-bit codes:
    a one-line reason naming the spec field."""
    from dqgen.kernels.gemm90 import refusal90

    cases = [
        (_variant("mxfp4_bf16", group_size=8), "[scales.group_size] e8m0 block scales in groups of 8"),
        (_variant("fp4_e2m1_bf16", group_size=96), "[scales.group_size] groups of 96"),
        (_variant("fp4_e2m1_bf16", group_size=8), "[scales.group_size] groups of 8"),
        (load_spec("fp6_e2m3_fp16"), "[source.bits] 6-bit float codes"),
        (load_spec("gptq_int3_fp16"), "[source] 3-bit biased codes"),
    ]
    for spec, start in cases:
        why = refusal90(spec)
        assert why.startswith(start) and "\n" not in why, why
        assert not Gemm90KernelConfig.supports(spec)


@pytest.mark.parametrize(
    "spec", [s for s in SPECS if s.source.kind.value in ("float", "codebook")], ids=lambda s: s.name
)
def test_float_specs_pack_and_unpack_to_the_same_checkpoint(spec: Spec) -> None:
    """The prepacked layout of each float / codebook spec is a bijection on the checkpoint: unpack_gemm gives back its
    qweight and raw scales (MXFP4's e8m0 bytes as they are); groups under a tile stay in order (direct slots, every
    tile naming its first group)."""
    from dqgen.layout.gemm import group_rows, unpack_gemm

    pk, _, _, _ = _case(spec, 3)
    K, group = _case_k(spec)
    (q, s, _, _, _), _ = matmul_inputs(spec, K, N, seed=1, group_size=group if group > 0 else None)
    q2, s2, z2 = unpack_gemm(spec, pk)
    assert z2 is None and np.array_equal(q2, np.ascontiguousarray(q).view(np.uint32).view(q.dtype).reshape(q.shape))
    raw = np.ascontiguousarray(s).view(np.uint8 if spec.scales.block else np.uint16)
    assert s2.dtype == raw.dtype and np.array_equal(s2, raw)
    first_group = np.arange(pk.slots.slots // 64) * 64 // max(group, 1)  # each tile's first group (group_rows rows)
    assert np.array_equal(pk.slots.tile_group, np.minimum(first_group, s.shape[0] - 1))
    assert group_rows(spec) == (64 // group if 0 < group < 64 else 1)


def test_the_model_catches_nvfp4_with_one_block_scale_a_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVFP4's groups of 16 put two block scales in one converted word (pairs 0, 1: the first group, 2, 3: the
    second): the emulated kernel decoding one scale a word (the MX path) is off the reference, so the NVFP4 cases
    above test the per-k16-step decoding."""
    spec = load_spec("nvfp4_fp16")
    pk, x, ref, gs = _case(spec, 5)
    cfg = CONFIGS90[0]
    y = emu.emulate90(spec, pk, x, cfg, 2, global_scale=gs)
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    real = Gemm90KernelConfig.context
    monkeypatch.setattr(Gemm90KernelConfig, "context", lambda self: {**real(self), "block_split": False})
    y = emu.emulate90(spec, pk, x, cfg, 2, global_scale=gs)
    assert not np.allclose(y, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


# -- 2-CTA clusters: pair tiles, x multicast in halves, both CTAs' releases ------------------------------------------

CLUSTER_SPECS = [load_spec(n) for n in ("awq_int4_fp16", "int8_bf16", "fp8_e4m3_fp16", "nvfp4_fp16")] + SMALL_GROUPS[:1]


def _cluster_grids(pair_tiles: int) -> list[int]:
    """One pair tile a cluster (Plan90.of's whole tiles), and fewer clusters than pair tiles (persistent clusters on
    pair tiles P apart)."""
    return sorted({pair_tiles, max(1, pair_tiles - 1), max(1, pair_tiles // 2)})


@pytest.mark.parametrize("cfg", CLUSTER_CONFIGS90, ids=lambda c: c.tag)
@pytest.mark.parametrize("spec", CLUSTER_SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("n,extra_rows", [(200, -3), (296, 5)])
def test_emulated_cluster_gemm90_equals_x_at_w(spec: Spec, cfg: Gemm90Config, n: int, extra_rows: int) -> None:
    """N = 200: one pair tile of two feature tiles (the second partial); N = 296: three feature tiles, so the second
    pair's rank-1 CTA is a spare (its W and scales land as TMA zeros, it stores nothing). M = BN - 3 (rank 1's half of
    x partly past M) and BN + 5 (two token tiles, the second's rank-1 half wholly past M: zeros); every y element is
    stored once, and the multicast halves land where the wgmma reads both."""
    assert cfg.cluster == 2 and cfg.x_box_rows == cfg.bn // 2
    M = cfg.bn + extra_rows
    K, group = _case_k(spec)
    (q, s, z, gi, gs), W = matmul_inputs(spec, K, n, seed=3, group_size=group if group > 0 else None)
    G = s.shape[0]
    pk = pack_gemm(spec, q, s, z, gi, K // G if G > 1 else -1)
    x = random_x(spec, M, K, seed=4)
    ref = matmul_reference(x, W)
    pair_tiles = -(-M // cfg.bn) * -(-n // (cfg.features * cfg.cluster))
    for P in _cluster_grids(pair_tiles):
        order = np.random.default_rng(P).permutation(P).tolist()
        y = emu.emulate90(spec, pk, x, cfg, P, order=order, global_scale=gs)  # NVFP4: its global scale
        assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max()), (cfg.tag, M, n, P)


@pytest.mark.parametrize("cfg", CLUSTER_CONFIGS90, ids=lambda c: c.tag)
def test_emulated_cluster_gemm90_the_stage_ring_wraps(cfg: Gemm90Config) -> None:
    """11 K tiles through 8 / 5 stages, two pair tiles on one persistent cluster: every stage is refilled by both
    producers (each multicasting into the other's ring) as soon as both CTAs' warps have released it."""
    spec = load_spec("awq_int4_fp16")
    K, n, M = 704, 512, 9
    (q, s, z, gi, _), W = matmul_inputs(spec, K, n, seed=4, group_size=64)
    pk = pack_gemm(spec, q, s, z, gi, 64)
    x = random_x(spec, M, K, seed=5)
    y = emu.emulate90(spec, pk, x, cfg, 1)
    ref = matmul_reference(x, W)
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_the_model_catches_a_cluster_without_the_peers_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consumer warps releasing a stage on their own CTA's empty barrier alone (the one-CTA kernel's count): the
    peer's producer multicasts its next x half into a stage whose wgmmas have not run yet — y is wrong, or the model
    refuses (bytes of a later phase on a barrier, a CTA gone before its peer's arrival)."""
    spec = load_spec("awq_int4_fp16")
    K, n, M = 704, 256, 100
    (q, s, z, gi, _), W = matmul_inputs(spec, K, n, seed=4, group_size=64)
    pk = pack_gemm(spec, q, s, z, gi, 64)
    x = random_x(spec, M, K, seed=5)
    ref = matmul_reference(x, W)
    monkeypatch.setattr(emu, "PEER_RELEASE", False)
    try:
        y = emu.emulate90(spec, pk, x, CLUSTER_CONFIGS90[0], 1)
    except AssertionError as e:  # the refusals this slip can meet, not any other check of the model
        assert "phase" in str(e) or "exited" in str(e), e
        return
    assert not np.allclose(y, ref)


def test_the_model_catches_a_cluster_cta_exiting_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the producer tail (its waits for the last releases) a CTA can exit while its peer still arrives on
    its barriers: the model refuses the remote arrival."""
    spec = load_spec("awq_int4_fp16")
    K, n, M = 704, 256, 100
    (q, s, z, gi, _), _ = matmul_inputs(spec, K, n, seed=4, group_size=64)
    pk = pack_gemm(spec, q, s, z, gi, 64)
    x = random_x(spec, M, K, seed=5)
    monkeypatch.setattr(emu, "PRODUCER_TAIL", False)
    with pytest.raises(AssertionError, match="exited"):
        emu.emulate90(spec, pk, x, CLUSTER_CONFIGS90[0], 1)


def test_cluster_schedule_and_config_errors() -> None:
    """bind90's cluster plan: whole pair tiles (an odd feature-tile count rounds up to a pair with a spare CTA), one
    a cluster up to two waves or whole waves, else the resident clusters; configs a cluster cannot take name the
    field."""
    from dqgen.run.gemm90 import cluster_ctas, cluster_plan

    cfg = CLUSTER_CONFIGS90[0]
    plan = cluster_plan(cfg, 300, 28672, 128, 66)  # 3 token tiles x 112 feature pairs = 336 pair tiles
    assert (plan.tiles, plan.ctas, plan.whole, plan.split) == (336, 66, 336, False)
    assert cluster_plan(cfg, 128, 4104, 64, 66).tiles == 17  # 33 feature tiles: 17 pairs, the last with a spare
    assert cluster_ctas(100, 66) == 100 and cluster_ctas(132, 66) == 132 and cluster_ctas(140, 66) == 66
    with pytest.raises(ValueError, match=r"^Gemm90Config\.cluster: expected 1 or 2, got 4$"):
        Gemm90Config(128, 2, 8, 1, cluster=4)
    with pytest.raises(ValueError, match=r"^Gemm90Config\.cluster: 2-CTA clusters take bn >= 64, got bn 32$"):
        Gemm90Config(32, 1, 8, 2, cluster=2)


def test_the_cluster_rule_takes_large_m_on_wide_weights() -> None:
    """bind90's automatic choice (CLUSTER_RULE, from docs/bench/gemm90_cluster_h100.json): the cluster entry from
    M = 1024 on weights of N >= 8192 (a 256-token tile, which has one), the one-CTA entries elsewhere."""
    import json
    from pathlib import Path

    from dqgen.run.gemm90 import CLUSTER_RULE, use_cluster90

    assert use_cluster90(1024, 8192) and use_cluster90(4096, 28672) and use_cluster90(1500, 8192)
    assert not use_cluster90(512, 28672) and not use_cluster90(1024, 4096) and not use_cluster90(4096, 4096)
    # measured on AWQ int4: 4-bit integer codes take it, 8-bit and float codes (not measured) do not
    for name, takes in (("awq_int4_fp16", True), ("gptq_int4_fp16", True), ("int8_fp16", False),
                        ("fp8_e4m3_fp16", False), ("nvfp4_fp16", False)):  # fmt: skip
        assert use_cluster90(4096, 28672, load_spec(name)) == takes, name
    # the rule is the bench's: every row it takes ran faster in clusters than bind90's one-CTA launch, every row it
    # leaves did not
    rows = json.loads((Path(__file__).parents[1] / "docs/bench/gemm90_cluster_h100.json").read_text())["rows"]
    assert CLUSTER_RULE is not None and len(rows) == 20
    for r in rows:
        assert use_cluster90(r["M"], r["N"]) == (r["us"]["sm90 cluster"] < r["us"]["sm90 gemm"]), r


@pytest.mark.parametrize("cfg", CONFIGS90, ids=[c.tag for c in CONFIGS90])
def test_emulated_split_k_clusters_equal_x_at_w(cfg: Gemm90Config) -> None:
    """Split-K clusters (bind90's ``cluster_splits``: one whole tile a cluster of 2, 4 or 8 CTAs, each a share of the
    K tiles, the shares' sums added in rank order after a cluster barrier) on every one-CTA token tile: AWQ int4 over
    10 K tiles (8 CTAs: some of one K tile, some of two), two token tiles, a partial feature tile, a bias."""
    spec = load_spec("awq_int4_fp16")
    K, M = 640, cfg.bn + 5
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=4)
    pk = pack_gemm(spec, q, s, z, gi, 128)
    x = random_x(spec, M, K, seed=5)
    b = np.random.default_rng(7).standard_normal(N)
    ref = matmul_reference(x, W) + b
    tiles = -(-M // cfg.bn) * -(-N // cfg.features)
    for ks in (2, 4, 8):
        y = emu.emulate90(spec, pk, x, cfg, tiles, bias=b, order=list(range(tiles))[::-1], ksplit=ks)
        np.testing.assert_allclose(y, ref, rtol=1e-9, atol=1e-9, err_msg=f"{cfg.tag} ksplit {ks}")


@pytest.mark.parametrize(
    "mutation,value",
    [
        # no second barrier: a CTA leaves once it has stored its share, while the others still read its piece
        ("KSPLIT_EXIT_BARRIER", False),
        # the arrival before the reads (the template's sits between them and the y stores): a peer may leave first
        ("KSPLIT_ARRIVE_BEFORE_READS", True),
    ],
)
def test_the_model_catches_a_split_k_cluster_peer_leaving_before_its_piece_is_read(
    mutation: str, value: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reduce_cluster's second barrier, arrived at after every read of the peers' pieces, keeps each CTA until its
    piece is read: without it, or with the arrival before the reads, the model refuses the read."""
    spec = load_spec("awq_int4_fp16")
    (q, s, z, gi, _), _ = matmul_inputs(spec, 640, N, seed=4)
    pk = pack_gemm(spec, q, s, z, gi, 128)
    x = random_x(spec, 13, 640, seed=5)
    monkeypatch.setattr(emu, mutation, value)
    with pytest.raises(AssertionError, match="a read of a CTA that has exited"):
        emu.emulate90(spec, pk, x, CONFIGS90[1], 2, ksplit=4)
