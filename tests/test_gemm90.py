"""CPU: the Hopper GEMM (dqgen.kernels.gemm90) renders and compiles for sm_90a for every spec it takes, with wgmma
(HGMMA) in the SASS, no slow conversion (I2F), no local memory (no spills, no stack frame); its launch arguments are
the rendered signature; its configs fit the shared memory and registers they claim; the loader compiles it for the
architecture-specific target."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec
from dqgen.emit.nvrtc import compile_source
from dqgen.emit.sass import disassemble
from dqgen.kernels.gemm import zero_bytes
from dqgen.kernels.gemm90 import (
    CLUSTER_CONFIGS90,
    CONFIGS90,
    NARROW_CONFIGS90,
    Gemm90Config,
    Gemm90KernelConfig,
    choose_config90,
    cluster_config90,
    gemm90_entry_name,
)
from dqgen.layout.gemm import group_rows
from dqgen.run.loader import target_arch

from .kernel_signature import C_WIDTHS, entry_params

#: every spec the Hopper GEMM takes: the sm_80 GEMM's integer specs and the float / codebook ones (gemm90.refusal90)
SPECS = [s for s in (load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))) if Gemm90KernelConfig.supports(s)]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_compiles_for_sm90a_with_wgmma_and_no_local_memory(spec: Spec) -> None:
    kc = Gemm90KernelConfig(spec)
    res = compile_source(kc.source(), arch="sm_90a", want="cubin", name=kc.source_name, options=["-Xptxas=-v"])
    assert res.cubin is not None
    # every entry point: no stack frame, no spills (ptxas -v prints one line of each per function)
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", res.log)
    assert len(frames) == len(CONFIGS90) + len(CLUSTER_CONFIGS90), res.log
    assert all(f == ("0", "0", "0") for f in frames), res.log
    ops = Counter(line.split()[0] for line in disassemble(res.cubin) if line.strip())
    assert sum(v for k, v in ops.items() if k.startswith("HGMMA")) > 0
    # no int -> float conversion of weights (the Plan's magic numbers do it): the only I2F allowed is the .RP
    # reciprocal of the integer divisions that share the work out (stream-K ranges, once a CTA and a segment)
    slow = sorted(k for k in ops if (k.startswith("I2F") and ".RP" not in k) or k.startswith(("LDL", "STL")))
    assert not slow, slow
    # the warp-specialised pipeline: TMA loads completing on mbarriers
    assert any(k.startswith("UTMALDG") for k in ops) and any(k.startswith("SYNCS") for k in ops)


def test_cluster_entries_multicast_x_and_the_others_do_not() -> None:
    """The 2-CTA entries: the multicast form of the TMA load (x), the cluster barrier (UCGABAR) after the mbarrier
    init, and no split-K path through global memory; the one-CTA entries of the same module have no multicast, and
    the cluster barrier only for their split-K cluster launches (``ksplit``, a run-time argument)."""
    spec = load_spec("awq_int4_fp16")
    for cfg in CONFIGS90[-2:] + CLUSTER_CONFIGS90:
        kc = Gemm90KernelConfig(spec, (cfg,))
        res = compile_source(kc.source(), arch="sm_90a", want="cubin", name=kc.source_name)
        assert res.cubin is not None
        ops = Counter(line.split()[0] for line in disassemble(res.cubin) if line.strip())
        clustered = cfg.cluster > 1
        assert (ops["UTMALDG.2D.MULTICAST"] > 0) == clustered, (cfg.tag, sorted(ops))
        assert (ops["UTMALDG.2D"] > 0) and any(k.startswith("HGMMA") for k in ops)
        assert any(k.startswith("UCGABAR") for k in ops), (cfg.tag, sorted(ops))
        assert not any(k.startswith(("LDL", "STL")) for k in ops)
        # the split tiles' partials (__stcg to the workspace, STG.E.STRONG.GPU) only where tiles may split
        assert any(k.startswith("ATOMG") or k.startswith("RED") for k in ops) != clustered, (cfg.tag, sorted(ops))


@pytest.mark.parametrize("name", ["awq_int4_fp16", "nvfp4_fp16"])
def test_launch_arguments_match_the_rendered_signature(name: str) -> None:
    """PARAMS90, and for NVFP4 its fp32 global scale's pointer after them (one argument more)."""
    from dqgen.run.device import TensorMapArg
    from dqgen.run.gemm90 import PARAMS90, params90

    spec = load_spec(name)
    src = Gemm90KernelConfig(spec).source()
    widths = {**C_WIDTHS, "TensorMap": TensorMapArg}
    for cfg in CONFIGS90 + CLUSTER_CONFIGS90:
        assert entry_params(src, gemm90_entry_name(spec, cfg), widths) == list(params90(spec))
    assert len(params90(spec)) == len(PARAMS90) + (1 if spec.scales.global_scale else 0)


def test_configs_fit_and_the_choice_holds_m() -> None:
    for cfg in CONFIGS90 + CLUSTER_CONFIGS90:
        for bits, zero_elem in ((4, 1), (8, 2), (4, 0)):
            assert cfg.shared_bytes(bits, zero_elem) <= 228 * 1024 // cfg.min_blocks - 1024
        # after setmaxnreg the CTA's registers fit the SM's 64K among min_blocks CTAs, the consumers holding what the
        # accumulators and two register sets of A need (216 / 232: docs/layouts.md's table)
        assert 128 * 40 + cfg.consumers * 128 * cfg.consumer_regs <= 65536 // cfg.min_blocks
        assert cfg.consumer_regs == {(1, 2): 216, (2, 1): 232}[(cfg.consumers, cfg.min_blocks)]
    for M in (1, 8, 9, 64, 65, 200, 256, 257, 4096):
        cfg = choose_config90(M)
        assert cfg.bn >= min(M, 256) and (cfg.bn == 8 or cfg.bn // 2 < M) and cfg.cluster == 1
    # each cluster entry is a one-CTA shape's twin (the same pipeline, x's box half the token tile)
    for cfg in CONFIGS90:
        twin = cluster_config90(cfg)
        assert (twin is not None) == (cfg.bn >= 128)
        if twin is not None:
            assert twin.cluster == 2 and twin.x_box_rows == cfg.bn // 2 and twin.tag == cfg.tag + "x2"
            assert twin.shared_bytes(4, 1) == cfg.shared_bytes(4, 1)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"bn": 24, "consumers": 1, "stages": 4, "min_blocks": 1}, "bn"),
        ({"bn": 64, "consumers": 3, "stages": 4, "min_blocks": 1}, "consumers"),
        ({"bn": 256, "consumers": 1, "stages": 2, "min_blocks": 1}, "320 accumulator and A registers"),
        ({"bn": 128, "consumers": 1, "stages": 3, "min_blocks": 3, "features": 64}, "exceed the 80 registers of 3"),
        ({"bn": 256, "consumers": 1, "stages": 2, "min_blocks": 2, "features": 64}, "exceed the 128 registers"),
        ({"bn": 256, "consumers": 2, "stages": 8, "min_blocks": 1}, "does not fit"),
        ({"bn": 8, "consumers": 1, "stages": 4, "min_blocks": 1, "features": 32}, "features"),
        ({"bn": 8, "consumers": 2, "stages": 4, "min_blocks": 1, "features": 64}, "cannot share 64 features"),
        ({"bn": 128, "consumers": 1, "stages": 4, "min_blocks": 1, "features": 64, "cluster": 2}, "pair 128-feature"),
    ],
)
def test_config_errors_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Gemm90Config(**kwargs)


def test_config_text_and_tile_counts() -> None:
    assert Gemm90Config.parse("128:1:5:2:1:64") == Gemm90Config(128, 1, 5, 2, features=64)
    assert Gemm90Config.parse("256:2:5:1:2") == Gemm90Config(256, 2, 5, 1, cluster=2)
    for bad in ("128:2:8", "128:2:x:1", "1:2:3:4:5:6:7"):
        with pytest.raises(ValueError, match="config: expected bn:consumers:stages:min_blocks"):
            Gemm90Config.parse(bad)
    # 4096 x 4104 at 200 tokens: 2 token tiles x 33 feature tiles; 64-feature tiles: 65; a 2-CTA cluster's pairs: 17
    assert Gemm90Config(128, 2, 8, 1).tiles(200, 4104) == 66
    assert Gemm90Config(128, 1, 5, 2, features=64).tiles(200, 4104) == 2 * 65
    assert Gemm90Config(128, 2, 8, 1, cluster=2).tiles(200, 4104) == 2 * 17


@pytest.mark.parametrize("name", ["awq_int4_fp16", "int8_bf16", "nvfp4_fp16"])
def test_narrow_feature_tiles_compile_with_half_the_w_box_and_no_local_memory(name: str) -> None:
    """The 64-feature shapes (NARROW_CONFIGS90) as entries of their own module: HGMMA from one m64 row a step, TMA,
    no spills under their 3-4 CTAs an SM; their stages hold half of the 128-feature tile's W lines and scales."""
    spec = load_spec(name)
    kc = Gemm90KernelConfig(spec, NARROW_CONFIGS90)
    res = compile_source(kc.source(), arch="sm_90a", want="cubin", name=kc.source_name, options=["-Xptxas=-v"])
    assert res.cubin is not None
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", res.log)
    assert len(frames) == len(NARROW_CONFIGS90) and all(f == ("0", "0", "0") for f in frames), res.log
    ops = Counter(line.split()[0] for line in disassemble(res.cubin) if line.strip())
    assert any(k.startswith("HGMMA") for k in ops) and ops["UTMALDG.2D"] > 0, sorted(ops)
    assert not any(k.startswith(("LDL", "STL")) for k in ops)
    # a stage of this spec: 64 features x 64 k of codes, BN x rows, 64 columns of each scale row (2 bytes, or 1 for
    # block-scale codes; a row a group under the tile), 64 zeros; 1024-aligned, one full and one empty barrier each;
    # then the epilogue's staging of the warpgroup's 4 warps, 16 tokens x 16 features of 2 bytes each
    scale_bytes = (1 if spec.scales.block else 2) * group_rows(spec)
    for cfg in NARROW_CONFIGS90:
        raw = 64 * 64 * spec.source.bits // 8 + cfg.bn * 128 + 64 * scale_bytes + 64 * zero_bytes(spec)
        staging = 4 * 16 * 16 * 2
        assert cfg.launch_shared_bytes(spec) == 1024 + cfg.stages * (-(-raw // 1024) * 1024 + 16) + staging
        assert cfg.tag == f"n{cfg.bn}c1s{cfg.stages}b{cfg.min_blocks}f64"


@pytest.mark.parametrize("name", ["awq_int4_fp16", "int8_bf16"])
def test_the_epilogue_stores_y_in_16_byte_runs_through_stmatrix(name: str) -> None:
    """Every token tile of two chunks or more (n16 .. n256) stages its outputs by stmatrix (STSM) and stores them as
    16-byte runs (STG.E.128), keeping the 2-byte stores (STG.E.U16) for a y not 16-byte aligned; the 8-token tile,
    one chunk, has only the 2-byte stores. No local memory either way."""
    spec = load_spec(name)
    for cfg in CONFIGS90:
        kc = Gemm90KernelConfig(spec, (cfg,))
        res = compile_source(kc.source(), arch="sm_90a", want="cubin", name=kc.source_name)
        assert res.cubin is not None
        ops = Counter(line.split()[0] for line in disassemble(res.cubin) if line.strip())
        staged = cfg.bn >= 16
        assert any(k.startswith("STSM") for k in ops) == staged, (cfg.tag, sorted(ops))
        assert (ops["STG.E.128"] > 0) == staged, (cfg.tag, sorted(ops))
        assert ops["STG.E.U16"] > 0, (cfg.tag, sorted(ops))
        assert not any(k.startswith(("LDL", "STL")) for k in ops)


def test_the_loader_compiles_the_architecture_specific_target() -> None:
    kc = Gemm90KernelConfig.one(load_spec("awq_int4_fp16"), CONFIGS90[0])
    assert target_arch(kc, "sm_90") == "sm_90a" and target_arch(kc, "sm_90a") == "sm_90a"
    assert kc.min_sm == 90


# -- the gather kernel of gathered K slots (act-order): x' = x[:, perm] in slot order --------------------------------


def test_gather_kernel_signature_compile_and_config_errors() -> None:
    """Its launch arguments are its rendered signature; it compiles for sm_80 and sm_90 with vector loads of perm
    and one 16-byte store of x' a thread, no local memory; a config or grid it cannot take is one line."""
    from dqgen.kernels.gather_x import GATHER_X, GatherXConfig
    from dqgen.run.gemm90 import GATHER_PARAMS

    src = GATHER_X.source()
    assert entry_params(src, GATHER_X.name) == list(GATHER_PARAMS)
    for arch in ("sm_80", "sm_90"):
        res = compile_source(src, arch=arch, want="cubin", name=GATHER_X.source_name)
        assert res.cubin is not None
        ops = Counter(line.split()[0] for line in disassemble(res.cubin) if line.strip())
        assert any(k.startswith("STG.E.128") for k in ops), sorted(ops)
        assert any(k.startswith("LDG.E.128") for k in ops), sorted(ops)
        assert not any(k.startswith(("LDL", "STL")) for k in ops)
    with pytest.raises(ValueError, match=r"^GatherXConfig\.block: expected a multiple of 32 in 32\.\.1024, got 48$"):
        GatherXConfig(48)
    with pytest.raises(ValueError, match=r"^gather: expected M >= 1 rows of a multiple of 8 slots, got M=2, slots=60$"):
        GATHER_X.grid(2, 60)
    assert GATHER_X.grid(1, 8192) == 4 and GATHER_X.grid(10**6, 8192) == 65535
