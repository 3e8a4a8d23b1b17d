"""CPU: the Hopper W8A8 GEMM (dqgen.kernels.w8a8_gemm90) compiles for sm_90a in every configuration the choice
returns, with IGMMA (int8) / QGMMA (fp8) in the SASS, TMA loads on mbarriers, and no local memory; its launch
arguments are the rendered signature; its configurations fit what they claim; the choice holds M; the host's checks
name the bad argument."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from dqgen.emit.nvrtc import compile_source
from dqgen.emit.sass import disassemble
from dqgen.kernels.w8a8_gemm90 import SWAP_MAX_M90, W8A8Gemm90Config, all_configs, choose_w8a8_gemm90

from .hopper_plans import accepted_small_plans
from .kernel_signature import C_WIDTHS, entry_params

CONFIGS = [c for elem in ("s8", "e4m3") for out in ("f16", "bf16", "acc") for c in all_configs(elem, out)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_compiles_for_sm90a_with_wgmma_and_no_local_memory(cfg: W8A8Gemm90Config) -> None:
    res = compile_source(cfg.source(), arch="sm_90a", want="cubin", name=cfg.source_name, options=["-Xptxas=-v"])
    assert res.cubin is not None
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", res.log)
    assert frames == [("0", "0", "0")], res.log
    assert "C7514" not in res.log, res.log  # ptxas did not serialise the wgmmas (accumulators read while in flight)
    ops = Counter(line.split()[0] for line in disassemble(res.cubin) if line.strip())
    mma = "IGMMA" if cfg.elem == "s8" else "QGMMA"
    assert sum(v for k, v in ops.items() if k.startswith(mma)) > 0, sorted(ops)
    assert not any(k.startswith(("HMMA", "IMMA")) for k in ops)  # no mma.sync left in the main loop
    assert any(k.startswith("UTMALDG") for k in ops) and any(k.startswith("SYNCS") for k in ops)
    assert not any(k.startswith(("LDL", "STL")) for k in ops)


def test_launch_arguments_match_the_rendered_signature() -> None:
    from dqgen.run.device import TensorMapArg
    from dqgen.w8a8.gemm90 import PARAMS

    widths = {**C_WIDTHS, "TensorMap": TensorMapArg}
    for cfg in CONFIGS:
        assert entry_params(cfg.source(), cfg.name, widths) == list(PARAMS)


def test_configs_fit_one_sm_and_the_choice_holds_m() -> None:
    for cfg in CONFIGS:
        assert cfg.min_blocks * (cfg.shared_bytes + 1024) <= 228 * 1024
        # the accumulators of a consumer thread: at most 128 of its registers
        assert cfg.accs <= 128
    for m in (1, 8, 9, 17, 64, 65, 128, 129, 4096):
        cfg = choose_w8a8_gemm90("s8", "f16", m, 28672, 132)
        if m <= SWAP_MAX_M90:
            assert cfg.swap and cfg.bn >= m and (cfg.bn == 8 or cfg.bn // 2 < m)
        else:
            assert not cfg.swap and cfg.bm == 128
    # a grid the wide tiles leave short of the SMs takes the narrow ones
    assert choose_w8a8_gemm90("s8", "f16", 256, 4096, 132).bn == 128
    assert choose_w8a8_gemm90("s8", "f16", 4096, 4096, 132).bn == 256
    assert choose_w8a8_gemm90("e4m3", "f16", 4096, 4096, 132).bn == 192  # its sums and partial set: 192 registers


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"bn": 12}, "bn"),
        ({"bn": 264}, "bn"),
        ({"consumers": 3}, "consumers"),
        ({"mw": 2, "bn": 256}, "accumulators"),
        ({"stages": 1}, "stages"),
        ({"stages": 12}, "does not fit"),
        ({"elem": "e4m3", "bn": 256}, "partial set"),
    ],
)
def test_config_errors_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {"elem": "s8", "out": "f16", "swap": False, "bn": 128, "consumers": 2, "mw": 1}
    with pytest.raises(ValueError, match=field):
        W8A8Gemm90Config(**{**base, "stages": 4, "min_blocks": 1, **kwargs})


@pytest.mark.parametrize(
    "call,field",
    [
        ({"k": 24}, "k"),
        ({"x_ptr": 8}, "x_ptr"),
        ({"w_ld": 4104}, "w_ld"),
    ],
)
def test_operand_errors_name_the_argument(call: dict[str, int], field: str) -> None:
    from dqgen.w8a8.gemm90 import check_operands

    args = {"k": 4096, "x_ptr": 1 << 20, "x_ld": 4096, "w_ptr": 1 << 24, "w_ld": 4096, **call}
    with pytest.raises(ValueError, match=f"^{field}:"):
        check_operands(**args)
    check_operands(4096, 1 << 20, 4096, 1 << 24, 4096)  # aligned operands pass


def test_ctas_one_tile_each_persistent_or_pieces_of_at_least_twelve_k_tiles() -> None:
    from dqgen.w8a8.gemm90 import MIN_K_TILES_PER_PIECE, ctas_for

    assert ctas_for(3696, 64, 132) == 3696  # the tiles fill the SMs: one a CTA
    assert ctas_for(3696, 64, 132, persistent=True) == 132  # whole tiles 132 apart
    assert ctas_for(132, 64, 132, persistent=True) == 132
    assert ctas_for(48, 32, 264) == 48 * 2  # 32 K tiles: two pieces of 16, not five of 6.4
    assert ctas_for(48, 11, 264) == 48  # too short to split
    assert ctas_for(32, 112, 264) == 32 * 8  # 8 pieces of 14 K tiles fill the 264 resident CTAs
    for tiles, k_tiles in ((48, 32), (32, 112), (64, 224), (7, 40)):
        pieces = ctas_for(tiles, k_tiles, 264) // tiles
        assert pieces == 1 or k_tiles / pieces >= MIN_K_TILES_PER_PIECE


def test_a_short_last_wave_splits_into_lockstep_pieces() -> None:
    from dqgen.w8a8.gemm90 import Plan90, plan_for

    # 4096 x 6144 at M = 1024, 128 x 256 tiles: 8 x 24 = 192 tiles on 132 SMs; the 60 of the second wave (32 K
    # tiles each) run as 120 halves of 16 K tiles instead of whole on 60 SMs
    assert plan_for(192, 32, 132) == Plan90(192, 132, 32, 132, 120)
    # e4m3 128 x 192 tiles at M = 256 on 8192 x 28672: 300 tiles = 2 waves and 36, in 3 pieces of 21.3 K tiles
    assert plan_for(300, 64, 132) == Plan90(300, 132, 64, 264, 108)
    # M = 4096 on 8192 x 28672: 3584 tiles = 27 waves and 20: a split tail would save under 4%, one tile a CTA
    assert plan_for(3584, 64, 132) == Plan90(3584, 3584, 64, 3584, 3584)
    # 4096 x 28672 at M = 256: 224 tiles, 92 in the tail: more than half a wave, no room for two pieces each
    assert plan_for(224, 32, 132) == Plan90(224, 224, 32, 224, 224)
    assert plan_for(150, 20, 132) == Plan90(150, 150, 20, 150, 150)  # pieces of 10 K tiles: too short
    assert plan_for(264, 32, 132) == Plan90(264, 264, 32, 264, 264)  # whole waves
    assert plan_for(48, 32, 264) == Plan90(48, 96, 32, 0, 96)  # fewer tiles than CTAs: all stream-K
    assert not plan_for(224, 32, 132).split and plan_for(192, 32, 132).split and not plan_for(3584, 64, 132).split


def _units_of(plan: object) -> dict[int, list[tuple[int, int]]]:
    """CTA -> the (tile, K tile) units it runs, in order, by the schedule the kernel's comment states: tile t < whole by
    CTA t mod P, then CTA c < Q's range [c U / Q, (c + 1) U / Q) of the U stream-K units, counted K-fastest from tile
    `whole`'s first."""
    tiles, ctas, k_tiles, whole, q = plan  # type: ignore[misc]
    sk = (tiles - whole) * k_tiles
    out: dict[int, list[tuple[int, int]]] = {}
    for c in range(ctas):
        mine = [(t, kt) for t in range(c, whole, ctas) for kt in range(k_tiles)]
        if c < q:
            mine += [(whole + u // k_tiles, u % k_tiles) for u in range(c * sk // q, (c + 1) * sk // q)]
        out[c] = mine
    return out


@pytest.mark.parametrize(
    "tiles,ctas,k_tiles,whole,q",
    [
        (192, 132, 32, 132, 120),
        (3584, 132, 64, 3564, 100),
        (6, 4, 21, 3, 4),
        (6, 5, 21, 5, 3),
        (6, 4, 21, 6, 4),
        (6, 15, 21, 0, 15),
        (4, 3, 6, 3, 2),
    ],
)
def test_every_unit_runs_once_and_split_tiles_fit_two_slots_a_cta(
    tiles: int, ctas: int, k_tiles: int, whole: int, q: int
) -> None:
    from dqgen.w8a8.gemm90 import Plan90

    plan = Plan90(tiles, ctas, k_tiles, whole, q)
    runs = _units_of(plan)
    every = sorted(u for us in runs.values() for u in us)
    assert every == [(t, kt) for t in range(tiles) for kt in range(k_tiles)]
    # a split tile's pieces belong to CTAs c0..c1 in K order, each holding a piece at its range's start or end: the
    # two workspace slots a CTA has are enough
    for t in range(whole, tiles):
        owners = [c for c, us in runs.items() for u in us if u[0] == t]
        assert owners == sorted(owners)
        for c in set(owners):
            split_part = [u for u in runs[c] if u[0] >= whole]
            assert split_part[0][0] == t or split_part[-1][0] == t
    if plan.split:  # no CTA with an empty stream-K range between a tile's owners (whose slots would go unwritten)
        assert all(any(u[0] >= whole for u in runs[c]) for c in range(q))


def test_launch_rejects_a_tail_thinner_than_its_ctas() -> None:
    from dqgen.w8a8.gemm90 import Gemm90Kernel, Plan90

    kern = object.__new__(Gemm90Kernel)
    kern.cfg = choose_w8a8_gemm90("s8", "acc", 1024, 6144, 132)
    args = dict(m=1024, n=6144, k=4096, x_ptr=1 << 20, x_ld=4096, w_ptr=1 << 24, w_ld=4096, x_scale_ptr=0)
    bad = {
        "split_ctas 132 exceed the 32": Plan90(192, 132, 32, 191, 132),
        "split_ctas 133 outside": Plan90(192, 132, 32, 132, 133),
        "whole 193 outside": Plan90(192, 132, 32, 193, 1),
        "split_ctas 0 outside": Plan90(192, 132, 32, 132, 0),
    }
    for why, plan in bad.items():
        with pytest.raises(ValueError, match=f"plan: {why}"):
            kern.launch_args(**args, w_scale_ptr=0, bias_ptr=0, y_ptr=0, ws_ptr=64, counters_ptr=64, plan=plan)


def test_every_plan_check_accepts_runs_each_unit_once_and_stores_each_tile() -> None:
    """Over every small plan: those Plan90.check accepts cover each (tile, K tile) unit once, and each split tile's
    pieces come from exactly the CTAs owner() names for its first and last unit (the last arriver waits for c1 - c0
    + 1 arrivals); the reviewer's Plan90(3, 4, 2, 2, 4), whose CTA 2 would get no unit between owners, is refused."""
    from dqgen.w8a8.gemm90 import Plan90

    with pytest.raises(ValueError, match="split_ctas 4 exceed the 2"):
        Plan90(3, 4, 2, 2, 4).check()
    plans = list(accepted_small_plans())
    assert len(plans) > 1000
    for plan in plans:
        tiles, _, k_tiles, whole, q = plan
        runs = _units_of(plan)
        every = sorted(u for us in runs.values() for u in us)
        assert every == [(t, kt) for t in range(tiles) for kt in range(k_tiles)], plan
        sk = (tiles - whole) * k_tiles
        for t in range(whole, tiles):
            first = (t - whole) * k_tiles
            c0, c1 = ((first + 1) * q - 1) // sk, ((first + k_tiles) * q - 1) // sk  # owner()
            holders = sorted({c for c, us in runs.items() if any(u[0] == t for u in us)})
            assert holders == list(range(c0, c1 + 1)), plan
