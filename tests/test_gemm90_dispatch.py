"""CPU: how the Hopper GEMM is chosen and its work shared out, as pure functions: the CTA count of the stream-K split
(dqgen.run.gemm90.stream_k_ctas), when the Hopper kernel pays against the sm_80 one (hopper_pays), and the
dispatch's small-M and sm_80 fallbacks on an sm_90 GPU (dqgen.run.dispatch.gemm_for_small_m, effective_rule); gathered
(act-order) weights take the Hopper path with any x, the gather and the GEMM launched as one call (GatheredLaunch)."""

from __future__ import annotations

import pytest

from dqgen.core.spec import load_spec
from dqgen.kernels.gemm90 import choose_config90
from dqgen.run import dispatch, gemm90
from dqgen.run.dispatch import HOPPER_RULE, SM80_ON_HOPPER_RULE, DispatchRule


@pytest.mark.parametrize(
    "tiles,k_tiles,resident,splits,want",
    [
        (32, 64, 264, None, 256),  # a quarter wave: each tile in 8 equal pieces, one wave
        (224, 128, 264, None, 224),  # under one wave: one tile a CTA
        (224, 128, 132, None, 224),  # under two waves: one tile a CTA (the partial wave costs less than pieces)
        (896, 128, 132, None, 132),  # past two waves: stream-K over the resident CTAs
        (264, 128, 132, None, 264),  # whole waves: one tile a CTA
        (3, 130, 264, 7, 21),  # split-K asked for: 7 pieces a tile
        (2, 3, 264, None, 6),  # never more CTAs than units
    ],
)
def test_stream_k_ctas(tiles: int, k_tiles: int, resident: int, splits: int | None, want: int) -> None:
    assert gemm90.stream_k_ctas(tiles, k_tiles, resident, splits) == want


def test_hopper_pays_where_each_resident_cta_gets_12_k_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm90, "is_hopper", lambda device: True)
    monkeypatch.setattr(gemm90.dev, "sm_count", lambda device: 132)
    # 8192 x 28672 at M = 1: 224 tiles x 128 K tiles over 264 resident CTAs
    assert gemm90.hopper_pays(28672, 128, 1, 0)
    # 4096 x 1024 at M = 1: 8 tiles x 64 K tiles / 264 = 1.9 K tiles a CTA; 4096 x 4096 at 16 tokens: 7.8 (and
    # below KSPLIT_MIN_M: no split-K cluster)
    assert not gemm90.hopper_pays(1024, 64, 1, 0) and not gemm90.hopper_pays(4096, 64, 16, 0)
    # 4096 x 4096 at 64 tokens: 7.8 K tiles a CTA, but its 32 tiles run split-K in clusters of 4 (16 K tiles a CTA)
    assert gemm90.hopper_pays(4096, 64, 64, 0)
    # 4096 x 4096 at 128 tokens: 32 tiles x 64 / 132 (one CTA an SM for 128-token tiles) = 15.5
    assert choose_config90(128).min_blocks == 1 and gemm90.hopper_pays(4096, 64, 128, 0)
    monkeypatch.setattr(gemm90, "is_hopper", lambda device: False)
    assert not gemm90.hopper_pays(28672, 128, 1, 0)


def test_the_256_token_tile_halved_where_its_pieces_are_short() -> None:
    """config90_for: n256 unless its stream-K pieces would be at most 32 K tiles and n128's longer."""
    n128, n256 = choose_config90(128), choose_config90(256)
    # 4096 x 4096 at 256 tokens: n256 has 32 tiles on 132 CTAs, 4 pieces of 16 K tiles; n128 64 tiles, 2 of 32
    assert gemm90.config90_for(256, 4096, 64, 132) == n128
    # 14336 x 4096: n256's 4 pieces of 56 K tiles are long enough; 4096 x 6144: 48 tiles, 2 pieces of 32 are not
    assert gemm90.config90_for(256, 4096, 224, 132) == n256 and gemm90.config90_for(256, 6144, 64, 132) == n128
    # 4096 x 4096 at 512 tokens: n256 64 tiles in 2 pieces of 32; n128 128 whole tiles
    assert gemm90.config90_for(512, 4096, 64, 132) == n128
    # 4096 x 6144 at 512 tokens: n256 96 whole tiles, nothing to halve
    assert gemm90.config90_for(512, 6144, 64, 132) == n256
    # 4096 x 14336: 112 whole tiles, no pieces; 4096 x 1024 at 512 tokens: n256 16 tiles in 8 pieces of 8, n128 4 of 16
    assert gemm90.config90_for(256, 14336, 64, 132) == n256 and gemm90.config90_for(512, 1024, 64, 132) == n128
    # up to 128 tokens the token tile that holds M, as before (halving n128 to n64 doubles the resident CTAs too)
    assert [gemm90.config90_for(m, 4096, 64, 132).bn for m in (1, 8, 9, 64, 65, 128)] == [8, 8, 16, 64, 128, 128]
    # a wide grid at many tokens: whole tiles, n256
    assert gemm90.config90_for(4096, 4096, 64, 132) == n256
    # measured on 4-bit integer codes only: an int8 weight keeps n256 (as the cluster rule keeps one CTA)
    int8, awq = load_spec("int8_fp16"), load_spec("awq_int4_fp16")
    assert gemm90.config90_for(256, 4096, 64, 132, int8) == n256
    assert gemm90.config90_for(256, 4096, 64, 132, awq) == n128


def test_pays90_judges_the_tile_that_would_run() -> None:
    """pays90 counts the K tiles a resident CTA gets on config90_for's tile, not on M's own token tile."""
    awq, int8 = load_spec("awq_int4_fp16"), load_spec("int8_fp16")
    # 4096 x 2048 at 256 tokens: n256 would give 16 tiles x 64 / 132 = 7.8 K tiles a CTA (under 12), but its pieces
    # (16 x 64 / 128 CTAs = 8) are short, so n128 runs: 32 tiles x 64 / 132 = 15.5 -> the Hopper GEMM
    assert gemm90.pays90(2048, 64, 256, 132, awq) and gemm90.pays90(2048, 64, 256, 132)
    # 8192 x 1024 at 192 tokens: n128's 16 tiles x 128 / 132 = 15.5
    assert gemm90.pays90(1024, 128, 192, 132, awq)
    # an int8 weight keeps n256 (config90_for): 7.8 K tiles a CTA, the sm_80 GEMM
    assert not gemm90.pays90(2048, 64, 256, 132, int8)
    # 4096 x 1024 at 256 / 384 tokens: n128's 16 / 24 tiles x 64 / 132 = 7.8 / 11.6, under 12 even halved, but its
    # stream-K pieces (8 / 4 a tile) are added by their CTAs together (shares_for); at 512, 32 tiles: 15.5
    assert gemm90.pays90(1024, 64, 256, 132, awq) and gemm90.pays90(1024, 64, 384, 132, awq)
    assert gemm90.pays90(1024, 64, 512, 132, awq)
    with pytest.MonkeyPatch.context() as mp:  # the last arriver adding every piece: the sm_80 GEMM there
        mp.setattr(gemm90, "SHARED_FIXUP", False)
        assert not gemm90.pays90(1024, 64, 256, 132, awq) and not gemm90.pays90(1024, 64, 384, 132, awq)


def test_small_m_and_the_sm80_fallback_on_hopper(monkeypatch: pytest.MonkeyPatch) -> None:
    rule4 = DispatchRule(gemm_min_m=4, dense_min_m=None)  # a Hopper rule that sends rows under 16 to the GEMM
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: True)
    monkeypatch.setattr(dispatch, "rule_for", lambda device: rule4)
    monkeypatch.setattr(dispatch, "hopper_pays", lambda n, k, m, device: n >= 8192)

    def small(M: int, rule: DispatchRule, hopper_ok: bool, n_k: tuple[int, int] | None) -> bool:
        return dispatch.gemm_for_small_m(M, rule, 0, hopper_ok, lambda: n_k, None)

    # the Hopper kernel can take the call: its rule, narrowed to the shapes where it pays
    assert dispatch.effective_rule(0, True) == rule4
    assert small(4, rule4, True, (28672, 128))
    assert not small(4, rule4, True, (1024, 64))  # narrow: the GEMV
    assert not small(3, rule4, True, (28672, 128))  # below the rule's 4 tokens
    # it cannot (x rows not 16-byte aligned on in-order slots): the sm_80 GEMM's rule, which keeps the GEMV below 16
    # and goes dense at 512
    assert dispatch.effective_rule(0, False) == SM80_ON_HOPPER_RULE
    assert not small(8, SM80_ON_HOPPER_RULE, False, (28672, 128))
    assert dispatch.pick(600, SM80_ON_HOPPER_RULE, gemm_ok=True, dense_ok=True) == "dense"
    assert dispatch.pick(600, HOPPER_RULE, gemm_ok=True, dense_ok=True) == "gemm"
    # another GPU: its measured rule alone
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: False)
    monkeypatch.setattr(dispatch, "rule_for", lambda device: DispatchRule(gemm_min_m=8, dense_min_m=None))
    assert dispatch.effective_rule(0, False) == DispatchRule(8, None)
    assert small(8, DispatchRule(8, None), False, None)


class _X:
    """Stands in for a torch tensor of x: shape, strides, address."""

    def __init__(self, shape: tuple[int, ...], stride: tuple[int, ...], ptr: int) -> None:
        self.shape, self._stride, self._ptr = shape, stride, ptr

    def dim(self) -> int:
        return len(self.shape)

    def stride(self, i: int) -> int:
        return self._stride[i]

    def data_ptr(self) -> int:
        return self._ptr


class _GW:
    def __init__(self, gather: bool) -> None:
        self.gather = gather


def test_gathered_weights_take_the_hopper_path_with_any_x() -> None:
    """A weight whose K slots are gathered (act-order): the Hopper GEMM takes it whatever x's alignment (the gather
    kernel reads x with 2-byte loads and TMA reads x'); an in-order weight, and the checkpoint form before packing
    tells which it is, need x rows TMA can address."""
    aligned = _X((33, 4096), (4096, 1), 1 << 20)
    unaligned = _X((33, 4095), (4096, 1), (1 << 20) + 2)
    assert dispatch._hopper_can_take(_GW(True), aligned) and dispatch._hopper_can_take(_GW(True), unaligned)
    assert dispatch._hopper_can_take(_GW(False), aligned) and not dispatch._hopper_can_take(_GW(False), unaligned)
    assert dispatch._hopper_can_take(None, aligned) and not dispatch._hopper_can_take(None, unaligned)


def test_hopper_ineligible_takes_gathered_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    class W:
        device, K, gather = 0, 4095, True

    monkeypatch.setattr(gemm90, "is_hopper", lambda device: True)
    assert gemm90.hopper_ineligible(W(), (1 << 20) + 2, 4095) == ""  # gathered: x' is what TMA reads
    W.gather = False
    assert gemm90.hopper_ineligible(W(), (1 << 20) + 2, 4095).startswith("x's rows are not 16-byte aligned")
    monkeypatch.setattr(gemm90, "is_hopper", lambda device: False)
    assert gemm90.hopper_ineligible(W(), 1 << 20, 4096) == "the GPU is not sm_90"


def test_gathered_launch_runs_the_gather_before_the_gemm_on_the_calls_stream() -> None:
    calls: list[tuple[str, int]] = []
    launch = gemm90.GatheredLaunch(lambda s: calls.append(("gather", s)), lambda s: calls.append(("gemm", s)))
    launch(5)
    launch(6)
    assert calls == [("gather", 5), ("gemm", 5), ("gather", 6), ("gemm", 6)]


@pytest.mark.parametrize(
    "K,N,M,want",
    [
        (4096, 1024, 32, 8),  # 8 tiles of n32: 64 CTAs, 8 K tiles each
        (4096, 1024, 64, 8),
        (4096, 1024, 128, 8),  # the one-an-SM n128 tile: 8 tiles x 8 = 64 CTAs <= 0.75 x 132
        (4096, 6144, 32, 4),  # 48 tiles: 192 CTAs <= 198 (8: 384 do not fit)
        (4096, 6144, 64, 4),
        (4096, 4096, 32, 4),  # 32 tiles: 128 CTAs (8: 256 > 198)
        (4096, 4096, 128, None),  # 32 one-an-SM tiles: 2 a tile, 64 of 132 CTAs with 32 K tiles each (> 16)
        (4096, 6144, 128, 2),  # 48 one-an-SM tiles: 2 a tile, 96 of 132 CTAs (>= 0.7) take their 32 K tiles
        (4096, 1024, 16, None),  # the GEMV's tokens
        (4096, 1024, 256, None),  # past KSPLIT_MAX_M
        (14336, 4096, 32, None),  # 224 K tiles: 4 a tile would leave 56 a CTA, on 128 of 264
        (4096, 14336, 32, 2),  # 112 tiles: clusters of 2 fill 224 of 264 CTAs (4: 448 do not fit), 32 K tiles each
        (4096, 14336, 64, 2),
        (4096, 14336, 128, None),  # 112 one-an-SM tiles: 224 CTAs exceed the 132 resident
        (4608, 6144, 32, None),  # clusters of 4 on 192 of 264 CTAs, 18 K tiles each: only pairs take more than 16
    ],
)
def test_split_k_clusters_where_measured_faster(
    K: int, N: int, M: int, want: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ksplit_for on 132 SMs, by hand from KSPLIT_FILL, KSPLIT_MAX_K_TILES and KSPLIT_MIN_FILL at the shapes the H200
    timed, against the stream-K schedule whose last arriver adds every piece."""
    monkeypatch.setattr(gemm90, "SHARED_FIXUP", False)
    spec = load_spec("awq_int4_fp16")
    cfg = gemm90.config90_for(M, N, K // 64, 132, spec)
    assert gemm90.ksplit_for(cfg, M, N, K // 64, 132, spec) == want


@pytest.mark.parametrize(
    "K,N,M,want",
    [
        (4096, 4096, 32, None),  # n32: 4 pieces a tile shared (not 8: a share would split a chunk pair) over 4
        (4096, 6144, 32, None),  # n32: 48 tiles x 4 shared pieces over clusters of 4
        (4096, 6144, 64, None),  # n64: 48 tiles x 4 (264 // 48 = 5, rounded down to a shared count)
        (4096, 6144, 128, None),  # n128: 48 tiles x 2 shared pieces over clusters of 2
        (4096, 14336, 32, None),  # 112 tiles x 2 shared pieces over clusters of 2
        (4096, 1024, 32, 8),  # n32 shares at most 4 pieces: clusters of 8 stay
        (4096, 1024, 64, 8),  # clusters of 8 against 8 shared pieces (a tie on the H200): clusters stay
        (4096, 1024, 128, 8),
    ],
)
def test_split_k_clusters_give_way_to_shared_pieces(K: int, N: int, M: int, want: int | None) -> None:
    """ksplit_for with the shared fixup: clusters of up to KSPLIT_OVER_SHARES CTAs give way to the stream-K schedule
    where its CTAs add at least as many pieces a tile themselves."""
    spec = load_spec("awq_int4_fp16")
    cfg = gemm90.config90_for(M, N, K // 64, 132, spec)
    assert gemm90.ksplit_for(cfg, M, N, K // 64, 132, spec) == want


def test_split_k_clusters_only_for_measured_codes_and_one_cta_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    from dqgen.kernels.gemm90 import CLUSTER_CONFIGS90

    monkeypatch.setattr(gemm90, "SHARED_FIXUP", False)  # 4 K tiles: else 4 shared pieces take the clusters' place

    cfg = choose_config90(64)
    assert gemm90.ksplit_for(cfg, 64, 1024, 64, 132, load_spec("awq_int4_fp16")) == 8
    assert gemm90.ksplit_for(cfg, 64, 1024, 64, 132, load_spec("int8_bf16")) is None  # 8-bit codes: not measured
    assert gemm90.ksplit_for(CLUSTER_CONFIGS90[0], 64, 1024, 64, 132) is None  # the 2-CTA entries: whole pair tiles
    assert gemm90.ksplit_for(cfg, 64, 1024, 4, 132) == 4  # never more CTAs than K tiles in a cluster


def test_cluster_splits_refused_in_one_line() -> None:
    """bind90 refuses a cluster size it has no share for, a split it cannot combine, and more CTAs than K tiles,
    before anything is loaded."""
    from types import SimpleNamespace

    from dqgen.kernels.gemm90 import CLUSTER_CONFIGS90, NARROW_CONFIGS90

    spec = load_spec("awq_int4_fp16")
    one, two = CLUSTER_CONFIGS90[0], NARROW_CONFIGS90[0]
    cases = [
        (r"^cluster_splits: expected one of \(2, 4, 8\), got 3$", 64, dict(cluster_splits=3)),
        (r"^cluster_splits: a split-K cluster launch takes no want_splits", 64, dict(cluster_splits=2, want_splits=2)),
        (r"^cluster_splits: 8 pieces of 4 K tiles leave a CTA none$", 4, dict(cluster_splits=8)),
        (r"^cluster_splits: the 2-CTA cluster entry n128c2s8b1x2 runs whole", 64, dict(cluster_splits=2, cfg=one)),
        (
            r"^cluster_splits: 8 CTAs cannot share n8c1s8b4f64's 4 accumulators a thread$",
            64,
            dict(cluster_splits=8, cfg=two),
        ),
    ]
    for pattern, k_tiles, kw in cases:
        w = SimpleNamespace(k_tiles=k_tiles, N=1024, device=0)
        args: dict = dict(cfg=choose_config90(64), want_splits=None) | kw
        with pytest.raises(ValueError, match=pattern):
            gemm90.bind90(spec, w, 0, 0, 64, None, None, args.pop("cfg"), args.pop("want_splits"), **args)


def test_the_rules_split_k_clusters_run_only_in_one_wave() -> None:
    """ksplit_resident: the rule's choice falls back to stream-K where its clusters would not all be resident at once
    (the H200's 30 resident clusters of 4 one-an-SM CTAs against a 32-tile launch); an explicit request runs wherever
    one cluster fits, and is refused in one line where none does."""
    assert gemm90.ksplit_resident(4, 30, 30, asked=False, tag="n128c2s8b1")
    assert not gemm90.ksplit_resident(4, 32, 30, asked=False, tag="n128c2s8b1")
    assert gemm90.ksplit_resident(4, 32, 30, asked=True, tag="n128c2s8b1")
    assert not gemm90.ksplit_resident(8, 1, 0, asked=False, tag="n128c2s8b1")
    with pytest.raises(ValueError, match=r"^cluster_splits: no cluster of 8 n128c2s8b1 CTAs can be resident here$"):
        gemm90.ksplit_resident(8, 1, 0, asked=True, tag="n128c2s8b1")


def test_pays90_counts_split_k_clusters_only_where_the_gpu_holds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """4096 x 4096 at M = 32 on 132 SMs: 32 tiles leave a resident CTA 7.8 K tiles (the stream-K schedule does not
    pay), so the Hopper GEMM pays only through split-K clusters of 4, and only where all 32 clusters are resident
    (else bind90 runs stream-K); hopper_pays asks the kernel for that where it knows the spec."""
    spec = load_spec("awq_int4_fp16")
    asked: list[tuple] = []
    # with the shared fixup, 4 shared pieces a tile replace the clusters and pay without a residency question
    assert gemm90.pays90(4096, 64, 32, 132, spec, lambda cfg, ks, tiles: 0)
    monkeypatch.setattr(gemm90, "SHARED_FIXUP", False)

    def holding(n: int):
        def resident(cfg, cluster_splits: int, tiles: int) -> int:
            asked.append((cfg.tag, cluster_splits, tiles))
            return n

        return resident

    assert gemm90.pays90(4096, 64, 32, 132, spec)  # no residency given: KSPLIT_FILL's assumption
    assert gemm90.pays90(4096, 64, 32, 132, spec, holding(32))
    assert not gemm90.pays90(4096, 64, 32, 132, spec, holding(31))
    cfg = gemm90.config90_for(32, 4096, 64, 132, spec)
    assert asked == [(cfg.tag, 4, 32)] * 2
    assert gemm90.pays90(4096, 64, 512, 132, spec, holding(0))  # whole tiles pay: residency not asked
    assert len(asked) == 2
    monkeypatch.setattr(gemm90, "is_hopper", lambda device: True)
    monkeypatch.setattr(gemm90.dev, "sm_count", lambda device: 132)
    monkeypatch.setattr(gemm90, "ksplit_clusters_resident", lambda spec, device, cfg, ks, tiles: 31)
    assert not gemm90.hopper_pays(4096, 64, 32, 0, spec)
    assert gemm90.hopper_pays(4096, 64, 32, 0)  # no spec: the shape alone, as KSPLIT_FILL assumes


def test_shared_fixup_where_every_cta_holds_one_piece_and_all_are_resident(monkeypatch: pytest.MonkeyPatch) -> None:
    """shares_for: S pieces a tile added by their own CTAs where no tile runs whole, every CTA holds one piece of one
    tile, S is a count the template unrolls (and no piece is empty), a share is whole chunk pairs, and every CTA is
    resident at once (each waits for the others); else 1 (the last arriver adds every piece)."""
    n128, n16, n8 = choose_config90(128), choose_config90(16), choose_config90(8)
    Plan90 = gemm90.Plan90
    # 4096 x 4096, M = 128: 32 tiles x 64 K tiles on 128 CTAs (stream_k_ctas over 132): 4 pieces a tile
    assert gemm90.shares_for(Plan90.of(32, gemm90.stream_k_ctas(32, 64, 132), 64), n128, 132) == 4
    assert gemm90.shares_for(Plan90.of(16, 128, 64), n128, 132) == 8  # 4096 x 1024 at M = 256 (halved tile)
    assert gemm90.shares_for(Plan90.of(64, 128, 64), n128, 132) == 2
    assert gemm90.shares_for(Plan90.of(40, 120, 64), n128, 132) == 1  # 3 pieces: not an unrolled count
    assert gemm90.shares_for(Plan90.of(32, 128, 64), n128, 127) == 1  # not every CTA resident at once
    assert gemm90.shares_for(Plan90.of(32, 132, 64), n128, 132) == 1  # ranges that cross tiles
    assert gemm90.shares_for(Plan90.of(32, 32, 64), n128, 132) == 1  # whole tiles
    assert gemm90.shares_for(Plan90.of(4, 32, 4), n128, 132) == 1  # 8 pieces of 4 K tiles: some empty
    assert gemm90.shares_for(Plan90.of(4, 8, 64), n16, 264) == 2  # 16 sums a thread: two shares of a pair each
    assert gemm90.shares_for(Plan90.of(4, 16, 64), n16, 264) == 1  # four shares: half a chunk pair each
    assert gemm90.shares_for(Plan90.of(4, 8, 64), n8, 264) == 1  # 8 sums a thread: no whole pair a share
    monkeypatch.setattr(gemm90, "SHARED_FIXUP", False)
    assert gemm90.shares_for(Plan90.of(32, 128, 64), n128, 132) == 1


def test_the_stream_k_schedule_pays_where_split_k_clusters_would_not_all_be_resident(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4096 x 1024 at M = 64: the rule's clusters of 8 (ksplit_for); where the GPU holds none of them at once bind90
    runs the stream-K schedule, whose 8 pieces a tile its CTAs share (64 CTAs of 8 K tiles): that pays too, unless
    the shared fixup is off (the last arriver adding 8 pieces: the sm_80 GEMM)."""
    spec = load_spec("awq_int4_fp16")
    cfg = gemm90.config90_for(64, 1024, 64, 132, spec)
    assert gemm90.ksplit_for(cfg, 64, 1024, 64, 132, spec) == 8
    assert gemm90.pays90(1024, 64, 64, 132, spec, lambda cfg, ks, tiles: 0)
    monkeypatch.setattr(gemm90, "SHARED_FIXUP", False)
    assert not gemm90.pays90(1024, 64, 64, 132, spec, lambda cfg, ks, tiles: 0)


def test_the_shared_fixup_environment_switch() -> None:
    """DQGEN_SHARED_FIXUP=0 turns the shared fixup off for the process (read at import); unset, it is on."""
    import os
    import subprocess
    import sys

    code = "from dqgen.run import gemm90; print(gemm90.SHARED_FIXUP)"
    for value, want in (("0", "False"), ("1", "True"), (None, "True")):
        env = {k: v for k, v in os.environ.items() if k != gemm90.SHARED_FIXUP_ENV}
        if value is not None:
            env[gemm90.SHARED_FIXUP_ENV] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, (value, out.stderr)
