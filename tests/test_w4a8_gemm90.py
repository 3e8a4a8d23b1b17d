"""CPU: the Hopper W4A8 GEMM (dqgen.kernels.w4a8_gemm90) renders and compiles for sm_90a for both W4A8 specs, with
IGMMA in the SASS, the weights and scales by bulk copies and x by TMA, no local memory and no wgmma serialisation;
its launch arguments are the rendered signature; its tiles fit what they claim; the launch's checks name the
argument."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from dqgen.core.spec import load_spec
from dqgen.emit.nvrtc import compile_source
from dqgen.emit.sass import disassemble
from dqgen.kernels.w4a8_gemm90 import W4A8_TILES, W4A8Gemm90Config, W4A8Tile, choose_w4a8_tile

from .kernel_signature import C_WIDTHS, entry_params

NAMES = ["awq_int4_s8", "gptq_int4_s8"]


@pytest.mark.parametrize("name", NAMES)
def test_compiles_for_sm90a_with_igmma_and_no_local_memory(name: str) -> None:
    kc = W4A8Gemm90Config(load_spec(name))
    res = compile_source(kc.source(), arch="sm_90a", want="cubin", name=kc.source_name, options=["-Xptxas=-v"])
    assert res.cubin is not None
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", res.log)
    assert frames == [("0", "0", "0")] * len(W4A8_TILES), res.log
    assert "C7514" not in res.log, res.log
    assert "C7519" not in res.log, res.log  # no wgmma.fence ptxas had to add (A registers written after the fence)
    ops = Counter(line.split()[0] for line in disassemble(res.cubin) if line.strip())
    assert any(k.startswith("IGMMA") for k in ops) and not any(k.startswith(("HMMA", "IMMA")) for k in ops)
    assert any(k.startswith("UTMALDG") for k in ops) and any(k.startswith("UBLKCP") for k in ops)
    assert not any(k.startswith(("LDL", "STL")) for k in ops)
    # a consumer releases a stage (its empty-mbarrier arrive) only after a wgmma wait that follows the last wgmma
    # issued: the wgmmas read x from the stage (in SASS order, IGMMA ... WARPGROUP.DEPBAR ... SYNCS.ARRIVE...A1T0)
    last = ""
    for line in disassemble(res.cubin):
        op = line.split()[0] if line.strip() else ""
        if op.startswith("IGMMA") or op.startswith("WARPGROUP.DEPBAR"):
            last = op
        elif op == "SYNCS.ARRIVE.TRANS64.A1T0":
            assert last.startswith("WARPGROUP.DEPBAR"), "a stage released while a wgmma may still read it"


def test_launch_arguments_match_the_rendered_signature() -> None:
    pytest.importorskip("torch")
    from dqgen.run.device import TensorMapArg
    from dqgen.w8a8.w4a8 import PARAMS

    kc = W4A8Gemm90Config(load_spec("awq_int4_s8"))
    for t in W4A8_TILES:
        assert entry_params(kc.source(), kc.entry_name(t), {**C_WIDTHS, "TensorMap": TensorMapArg}) == list(PARAMS)


def test_tiles_fit_and_the_choice_holds_m() -> None:
    for t in W4A8_TILES:
        assert t.min_blocks * (t.shared_bytes(True) + 1024) <= 228 * 1024
    for m in (1, 8, 9, 64, 65, 128, 129, 4096):
        t = choose_w4a8_tile(m)
        assert t.bn >= min(m, 128) and (t.bn == 8 or t.bn // 2 < m)
    with pytest.raises(ValueError, match="bn"):
        W4A8Tile(24, 1, 1, 4, 1)
    with pytest.raises(ValueError, match="mw x bn"):
        W4A8Tile(128, 1, 2, 4, 1)
    with pytest.raises(ValueError, match="stages"):
        W4A8Tile(8, 1, 2, 1, 2)


def test_only_w4a8_specs_are_taken() -> None:
    assert W4A8Gemm90Config.supports(load_spec("awq_int4_s8"))
    assert not W4A8Gemm90Config.supports(load_spec("awq_int4_fp16"))
