"""CPU: the GEMV's launch grid as pure functions (the block width of dqgen.kernels.gemv.block_warps, the split-K of
dqgen.run.matmul.choose_gemv_splits), worked out by hand for an H100's 132 SMs, and the wide blocks' register budget
in the compiled code (NVRTC to cubin, ptxas's report: the same registers and spills as the 4-warp blocks)."""

from __future__ import annotations

import re

import pytest

from dqgen.core.spec import load_spec
from dqgen.emit.nvrtc import compile_source
from dqgen.emit.pipeline import compile_artifact
from dqgen.kernels.gemv import GemvConfig, Tuning, block_warps, min_blocks, wide_warps
from dqgen.run.matmul import choose_gemv_splits


def test_block_warps_widest_that_fits_one_wave() -> None:
    awq = load_spec("awq_int4_fp16")  # 4 blocks of 4 warps an SM: 16 warps an SM at 128 registers
    # K = 4096 (64 chunks): 1 / 64 / 128 / 132 tiles, a block of 16 warps each (4 chunks a warp), 132 fit 132 SMs
    assert [block_warps(awq, t, 64, 132) for t in (1, 64, 128, 132)] == [16, 16, 16, 16]
    # 133 .. 264 tiles (4096 x 4096's 256, 14336 x 4096's 256 of 224 chunks): two 8-warp blocks an SM, every SM busy
    assert [block_warps(awq, t, 64, 132) for t in (133, 256, 264)] == [8, 8, 8] and block_warps(awq, 256, 224, 132) == 8
    # past 264 (4096 x 6144's 384, 8192 x 28672's 1792): the 4-warp blocks
    assert [block_warps(awq, t, 64, 132) for t in (265, 384, 1792)] == [4, 4, 4]
    # 8192 x 1024 (64 tiles, 128 chunks): 8 chunks a warp of 16, unsplit; K = 28672 (448 chunks) on 64 or 96 tiles
    # would leave SMs idle with 28 chunks a warp of 16 (56 of 8): the 4-warp blocks, split along K
    assert block_warps(awq, 64, 128, 132) == 16 and block_warps(awq, 64, 129, 132) == 4
    assert block_warps(awq, 96, 448, 132) == 4 and block_warps(awq, 64, 448, 132) == 4
    # 3-word blocks hold 2 blocks of 4 warps an SM (more registers a thread): at most 8 warps, one block an SM
    int3 = load_spec("gptq_int3_fp16")
    assert min_blocks(int3) == 2 and wide_warps(int3) == (8,) and wide_warps(awq) == (16, 8)
    assert [block_warps(int3, t, 36, 132) for t in (64, 132, 133)] == [8, 8, 4]
    # another GPU's SM count moves the bounds with it (an A100's 108 SMs)
    assert [block_warps(awq, t, 64, 108) for t in (108, 109, 216, 217)] == [16, 8, 8, 4]


@pytest.mark.parametrize(
    "n_tiles,chunks,resident,warps,want",
    [
        (64, 128, 132, 16, 1),  # 8192 x 1024 on 16 warps: 8 chunks a warp, unsplit
        (64, 64, 132, 16, 1),  # 4096 x 1024: 4 chunks a warp
        (4, 160, 132, 16, 2),  # 160 chunks, 10 a warp: 2 splits bring it to 5
        (64, 448, 132, 16, 2),  # 28672 x 1024: 28 a warp wants 4 splits, one wave of 132 blocks holds 2
        (256, 224, 264, 8, 1),  # 14336 x 4096 on 8 warps: 28 a warp, but 256 tiles already fill the wave
        (896, 64, 528, 4, 1),  # 4096 x 14336 on 4 warps: more tiles than resident blocks
        (64, 64, 528, 4, 2),  # 4 warps asked for at 4096 x 1024: 16 chunks a warp, 2 splits
    ],
)
def test_choose_gemv_splits(n_tiles: int, chunks: int, resident: int, warps: int, want: int) -> None:
    assert choose_gemv_splits(n_tiles, chunks, resident, warps) == want


def _registers(spec_name: str, warps: int) -> dict[str, tuple[int, int]]:
    """Each entry point's (registers, spill-store bytes) from ptxas's report on the GEMV of ``warps`` warps a block."""
    cfg = GemvConfig(compile_artifact(load_spec(spec_name)), None, Tuning(warps=warps))
    res = compile_source(cfg.source(), arch="sm_90", want="cubin", name=cfg.source_name, options=["-Xptxas=-v"])
    found = {}
    for block in res.log.split("Compiling entry function ")[1:]:  # one entry point's report each
        name = re.match(r"'(\w+)'", block)
        regs = re.search(r"Used (\d+) registers", block)
        spills = re.search(r"(\d+) bytes spill stores", block)
        assert name and regs and spills, block
        found[name.group(1)] = (int(regs.group(1)), int(spills.group(1)))
    assert found, res.log
    return found


@pytest.mark.parametrize("spec_name,widest", [("awq_int4_fp16", 16), ("gptq_int3_fp16", 8)])
def test_wide_blocks_keep_the_registers_a_thread(spec_name: str, widest: int) -> None:
    """A wide block's launch bounds keep the 4-warp block's registers a thread: no entry point gets fewer registers
    or spills more (the width changes the barrier and the shared-memory reduction, not the per-thread code)."""
    assert _registers(spec_name, widest) == _registers(spec_name, 4)
