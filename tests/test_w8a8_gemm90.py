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

    assert ctas_for(3584, 64, 132) == 3584  # the tiles fill the SMs: one a CTA
    assert ctas_for(3584, 64, 132, persistent=True) == 132  # whole tiles 132 apart
    assert ctas_for(132, 64, 132, persistent=True) == 132
    assert ctas_for(48, 32, 264) == 48 * 2  # 32 K tiles: two pieces of 16, not five of 6.4
    assert ctas_for(48, 11, 264) == 48  # too short to split
    assert ctas_for(32, 112, 264) == 32 * 8  # 8 pieces of 14 K tiles fill the 264 resident CTAs
    for tiles, k_tiles in ((48, 32), (32, 112), (64, 224), (7, 40)):
        pieces = ctas_for(tiles, k_tiles, 264) // tiles
        assert pieces == 1 or k_tiles / pieces >= MIN_K_TILES_PER_PIECE
