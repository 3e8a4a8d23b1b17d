"""The tensor-core GEMM on the CPU: its layout over K-slots round-trips every 4/8-bit integer spec, the kernel renders
and NVRTC-compiles for every such spec at sm_80 and sm_90 with the main loop in HMMA / LDSM / LDGSTS and the
conversion in LOP3 / PRMT (no I2F, no spills), a numpy model of the kernel's index math (tests/gemm_emulator.py:
the shared-memory bytes, ldmatrix and mma as the PTX ISA defines them, the converter as its solved Plan) gives
x @ dequantize(W) on shapes with tails, act-order, padded groups and split-K, and the dispatch rule and split
choice do what their docstrings say. The GPU runs are in tests/test_gpu_gemm.py."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter

import numpy as np
import pytest

from dqgen.check.matmul_reference import matmul_inputs, matmul_reference, random_x
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec
from dqgen.kernels.gemm import CONFIGS, GEMM_ENTRIES, GemmConfig, gemm_entry_name, render_gemm, supports
from dqgen.layout.gemm import TILE_K, gemm_slots, pack_gemm, unpack_gemm
from dqgen.run.dispatch import DispatchRule, pick
from dqgen.run.gemm import choose_config, choose_gemm_splits

from .gemm_emulator import emulate
from .kernel_signature import entry_params

ALL = [load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))]
SPECS = [s for s in ALL if supports(s)]
IDS = [s.name for s in SPECS]


#: A tile of two warp rows (WM = 2): no longer shipped (slower on the H100 than 64-row tiles), kept in the model
#: so that the template's WM > 1 indexing (which docs/experiments/gemm_sweep.py can still time) stays right.
TWO_WARP_ROWS = GemmConfig(128, 2, 4, 3, 1)


def _cfg(bm: int) -> GemmConfig:
    """The shipped tile config of ``bm`` rows (128: TWO_WARP_ROWS)."""
    return TWO_WARP_ROWS if bm == 128 else next(c for c in CONFIGS if c.bm == bm)


def test_the_gemm_takes_every_shipped_int4_and_int8_spec() -> None:
    assert sorted(IDS) == [
        "awq_int4_bf16",
        "awq_int4_fp16",
        "ft_int8_fp16",
        "gptq_int4_asym_act_order_fp16",
        "gptq_int4_fp16",
        "int8_bf16",
        "int8_bf16_shuffled",
        "int8_fp16",
    ]


def _inputs(spec: Spec, K: int, N: int, group: int | None, seed: int = 1):
    g = group if spec.scales.group_size == "auto" else None
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=seed, group_size=g)
    G = s.shape[0]
    return q, s, z, gi, W, (K // G if G > 1 else -1)


# -- the layout ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@pytest.mark.parametrize("group", [128, 32])
def test_pack_round_trip_every_spec(spec: Spec, group: int) -> None:
    K, N = (7 * group if spec.scales.group_size == "auto" else 544), 136
    q, s, z, gi, _, gs = _inputs(spec, K, N, group)
    pk = pack_gemm(spec, q, s, z, gi, gs)
    assert pk.slots.slots % TILE_K == 0 and pk.scales.shape[1] % 128 == 0
    q2, s2, z2 = unpack_gemm(spec, pk)
    assert np.array_equal(q2, np.ascontiguousarray(q).view(np.uint32).view(q.dtype).reshape(q.shape))
    assert np.array_equal(s2, np.ascontiguousarray(s).view(np.uint16))
    if z is None:
        assert z2 is None
    else:
        assert np.array_equal(np.asarray(z2).view(np.uint32), np.ascontiguousarray(z).view(np.uint32))


@pytest.mark.parametrize("group,K", [(-1, 200), (128, 512), (64, 192), (32, 224), (96, 288)])
def test_every_tile_lies_in_one_group(group: int, K: int) -> None:
    sl = gemm_slots(K, group)
    assert sl.gather == (group > 0 and group % TILE_K != 0)
    rows = sl.perm[sl.perm >= 0]
    assert sorted(rows.tolist()) == list(range(K))  # every row once
    slot = np.nonzero(sl.perm >= 0)[0]
    want = np.zeros(K, np.int64) if group <= 0 else np.arange(K) // group
    assert np.array_equal(sl.tile_group[slot // TILE_K], want[sl.perm[slot]])


def test_act_order_slots_sort_rows_by_group_and_pad_each_group() -> None:
    rng = np.random.default_rng(0)
    g_idx = rng.permutation(np.arange(200) // 50)  # 4 groups of 50 rows, shuffled
    sl = gemm_slots(200, 50, g_idx)
    assert sl.gather and sl.slots == 4 * 64
    for grp in range(4):
        seg = sl.perm[grp * 64 : (grp + 1) * 64]
        assert (seg[50:] == -1).all() and (g_idx[seg[:50]] == grp).all()
        assert np.all(np.diff(seg[:50]) > 0)  # stable: rows of a group keep their order
    assert sl.tile_group.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("group,K,gather", [(64, 256, False), (128, 200, False), (32, 256, True)])
def test_an_in_order_g_idx_gives_the_direct_slots(group: int, K: int, gather: bool) -> None:
    """GPTQ checkpoints without act-order still ship g_idx = arange(K) // group_size: with groups of a multiple of
    64 that is the direct layout (x copied, not gathered); groups of 32 still pad inside K and gather."""
    sl = gemm_slots(K, group, np.arange(K) // group)
    assert sl.gather == gather
    if not gather:
        direct = gemm_slots(K, group)
        assert not direct.gather and direct.slots == sl.slots
        assert np.array_equal(sl.perm, direct.perm) and np.array_equal(sl.tile_group, direct.tile_group)


def test_a_spec_the_layout_cannot_hold_is_one_line_naming_the_field() -> None:
    for name in ("nf4_bf16", "fp8_e4m3_fp16", "gptq_int3_fp16"):
        spec = load_spec(name)
        assert not supports(spec)
        with pytest.raises(ValueError, match=r"^\[source\.(bits|kind)\] ") as e:
            render_gemm(spec)
        assert "\n" not in str(e.value)


# -- the kernel's index math, emulated -------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_emulated_kernel_equals_x_at_w_every_spec(spec: Spec) -> None:
    """Tails everywhere: M = 70 (two 64-row tiles, the second mostly empty), N = 136 (a partial 128-column tile),
    K = 192 + 32 for group-32 specs (padded groups, gathered A) else 192; two splits along K."""
    auto = spec.scales.group_size == "auto"
    K, N, M = (224 if auto else 192), 136, 70
    q, s, z, gi, W, gs = _inputs(spec, K, N, 32 if auto else None)
    pk = pack_gemm(spec, q, s, z, gi, gs)
    x = random_x(spec, M, K, seed=3)
    y = emulate(spec, pk, x, _cfg(64), gather=pk.slots.gather, splits=2)
    ref = matmul_reference(x, W)
    # the model sums exact products in float64, in another order than the reference: rounding only
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize(
    "name,K,N,M,group,cfg,gather",
    [
        ("gptq_int4_asym_act_order_fp16", 256, 72, 17, 64, 64, True),  # act-order: rows sorted, x gathered
        ("awq_int4_bf16", 224, 72, 33, 32, 128, True),  # 128 x 128 tile, 8 warps (TWO_WARP_ROWS), padded groups
        ("int8_fp16", 200, 264, 9, None, 128, False),  # K tail inside a tile, N tail of 8 columns
        ("int8_bf16", 192, 132, 20, None, 64, True),  # unaligned x: the gather entry with perm = identity
        ("awq_int4_fp16", 320, 200, 37, 64, 16, False),  # 16-row tiles: three of them, the last 5 rows
        ("gptq_int4_asym_act_order_fp16", 256, 136, 21, 64, 32, True),  # 32-row tile, gathered x
        ("int8_bf16", 200, 72, 30, None, 32, False),  # 32-row tile, int8, K tail
    ],
)
def test_emulated_kernel_other_entries(name: str, K: int, N: int, M: int, group: int | None, cfg: int, gather: bool):
    spec = load_spec(name)
    q, s, z, gi, W, gs = _inputs(spec, K, N, group)
    if spec.act_order:
        gi = np.random.default_rng(5).permutation(np.arange(K) // group).astype(np.int32)
        (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=1, group_size=group)
        from dqgen.check.reference import dequantize_reference

        W = dequantize_reference(spec, q, s, z, gi, None)
    pk = pack_gemm(spec, q, s, z, gi, gs)
    assert pk.slots.gather == (spec.act_order or (group is not None and group % TILE_K != 0))
    x = random_x(spec, M, K, seed=4)
    bias = np.random.default_rng(6).standard_normal(N)
    y = emulate(spec, pk, x, _cfg(cfg), gather=gather, splits=1, bias=bias)
    ref = matmul_reference(x, W) + bias
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_emulated_kernel_catches_a_wrong_swizzle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model is sensitive to the index math it restates: a swizzle that the store and the load disagree on
    (B read unswizzled) gives a wrong y."""
    from . import gemm_emulator as emu

    spec = load_spec("awq_int4_fp16")
    q, s, z, gi, W, gs = _inputs(spec, 128, 128, 64)
    pk = pack_gemm(spec, q, s, z, gi, gs)
    x = random_x(spec, 16, 128, seed=1)
    real = emu.ldsm_x4
    assert np.allclose(emu.emulate(spec, pk, x, _cfg(64), gather=False), matmul_reference(x, W))
    calls = {"n": 0}

    def unswizzled(smem: np.ndarray, addr: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        row = addr // 128
        chunk = (addr % 128) // 16
        return real(smem, row * 128 + ((chunk ^ (row & 7)) << 4))  # undo the swizzle of the address

    monkeypatch.setattr(emu, "ldsm_x4", unswizzled)
    assert not np.allclose(emu.emulate(spec, pk, x, _cfg(64), gather=False), matmul_reference(x, W))
    assert calls["n"] > 0


def test_split_k_partials_go_through_the_allocated_workspace_one_slot_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three splits on the 128-row tile (TWO_WARP_ROWS): each partial lands in its own slot of the workspace that
    run.gemm allocates (the model fills a NaN workspace at the kernel's indices, refuses a slot written twice or
    left unwritten, and sums the slots in split order); a slot map that ignores the warp is caught."""
    from . import gemm_emulator as emu

    spec = load_spec("awq_int4_fp16")
    q, s, z, gi, W, gs = _inputs(spec, 6 * 64, 136, 128)
    pk = pack_gemm(spec, q, s, z, gi, gs)
    x = random_x(spec, 130, 6 * 64, seed=8)
    y = emulate(spec, pk, x, _cfg(128), gather=False, splits=3)
    ref = matmul_reference(x, W)
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    real = emu.ws_slots
    monkeypatch.setattr(emu, "ws_slots", lambda *a: real(*a[:-1], 0))  # every warp's slots as warp 0's
    with pytest.raises(AssertionError, match="share a workspace slot"):
        emu.emulate(spec, pk, x, _cfg(128), gather=False, splits=3)


def test_direct_entry_copies_x_only_in_whole_chunks_of_a_row() -> None:
    """The direct entry copies x in 16-byte cp.async chunks predicated per chunk (k < K): with K % 8 != 0 the last
    chunk of a row would read the next row. The model refuses that copy, and run.operands.x_aligned sends such x (and
    x whose chunks are not 16-byte aligned: PTX aligns a cp.async source to cp-size) to the gather entry."""
    from dqgen.run.operands import x_aligned

    spec = load_spec("int8_fp16")
    K, N, M = 196, 72, 5
    q, s, z, gi, W, gs = _inputs(spec, K, N, None)
    pk = pack_gemm(spec, q, s, z, gi, gs)
    x = random_x(spec, M, K, seed=7)
    with pytest.raises(AssertionError, match="reads past"):
        emulate(spec, pk, x, _cfg(64), gather=False)
    assert np.allclose(emulate(spec, pk, x, _cfg(64), gather=True), matmul_reference(x, W), rtol=1e-12)
    assert not x_aligned(256, K, K) and x_aligned(256, 200, 200)
    assert not x_aligned(256 + 8, 200, 200) and not x_aligned(256, 204, 200)
    # one-byte elements (the W8A8 GEMM's int8 / e4m3 operands): a 16-byte chunk is 16 elements
    assert x_aligned(256, 208, 208, itemsize=1) and not x_aligned(256, 200, 200, itemsize=1)
    assert not x_aligned(256, 216, 208, itemsize=1)  # rows 216 bytes apart: every other row starts mid-chunk


def _banks(rows: np.ndarray) -> list[set[int]]:
    """The 4-byte banks (32, PTX/CUDA shared memory) each 8x8 matrix of one ldmatrix.x4 touches: its 8 rows of
    16 bytes, addressed by lanes 8i..8i+7."""
    return [{(int(a) // 4 + w) % 32 for a in rows[8 * i : 8 * i + 8] for w in range(4)} for i in range(4)]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("cfg", [*CONFIGS, TWO_WARP_ROWS], ids=[f"bm{c.bm}w{c.wm}" for c in [*CONFIGS, TWO_WARP_ROWS]])
def test_every_ldmatrix_phase_is_bank_conflict_free(cfg: GemmConfig, bits: int) -> None:
    """The swizzle's claim (templates/gemm.cu.j2): each 8-row matrix an ldmatrix reads hits 32 distinct banks, for
    every A and B fragment load of every warp (addresses as tests/gemm_emulator.py restates the kernel's; a stage
    base is a multiple of 16 bytes, which shifts every bank alike). Unswizzled B rows would conflict, so the
    check can fail."""
    from dqgen.layout.gemm_trt import columns_interleaved

    from .gemm_emulator import a_ldsm_rows, b_ldsm_rows

    cols = columns_interleaved(bits)
    blk = TILE_K // (4 * (32 // bits))
    for w in range(cfg.wm * cfg.wn):
        warp_m, warp_n = w % cfg.wm, w // cfg.wm
        for mi in range(cfg.bm // cfg.wm // 16):
            for ks in range(TILE_K // 16):
                assert all(len(b) == 32 for b in _banks(a_ldsm_rows(cfg, warp_m, mi, ks))), (w, mi, ks)
        for q in range(128 // cfg.wn // 32):
            for b in range(blk):
                rows = b_ldsm_rows(cfg, cols, blk, warp_n, q, b)
                assert all(len(bk) == 32 for bk in _banks(rows)), (w, q, b)
                unswizzled = (rows // 128) * 128 + (((rows % 128) // 16) ^ ((rows // 128) & 7)) * 16
                assert any(len(bk) < 32 for bk in _banks(unswizzled))


#: Shared memory per SM and the most one block may opt in to (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability": 8.0: 164 KB / 163 KB, 9.0: 228 KB / 227 KB), and the 1 KB the
#: system reserves per resident block.
_SMEM = {"sm_80": (164 * 1024, 163 * 1024), "sm_90": (228 * 1024, 227 * 1024)}
_RESERVED_PER_BLOCK = 1024


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_shared_memory_fits_and_the_launch_bounds_blocks_fit_an_h100_sm(spec: Spec) -> None:
    """Every entry's dynamic shared memory (what _bind passes, which the rendered static_assert holds equal to the
    kernel's stages) fits one block's opt-in limit at sm_80 and sm_90, needs the opt-in past 48 KB (run.gemm
    sets it on load), and __launch_bounds__' min blocks per SM fit an H100 SM's shared memory (else the register
    cap they force buys no occupancy)."""
    from dqgen.kernels.gemm import has_zeros

    for cfg in CONFIGS:
        smem = cfg.shared_bytes(spec.source.bits, has_zeros(spec)) + 16  # + the static split-K flag, aligned
        for arch, (_, per_block) in _SMEM.items():
            assert smem <= per_block, (arch, cfg, smem)
        assert cfg.min_blocks * (smem + _RESERVED_PER_BLOCK) <= _SMEM["sm_90"][0], (cfg, smem)
    assert max(c.shared_bytes(spec.source.bits, has_zeros(spec)) for c in CONFIGS) > 48 * 1024


def test_the_kernel_refuses_a_launch_size_that_is_not_its_pipeline() -> None:
    """Each entry point static_asserts STAGES x its stage bytes == the shared memory the launch passes."""
    from dqgen.emit.nvrtc import CompileError, compile_source

    src = render_gemm(load_spec("awq_int4_fp16"))
    sizes = re.findall(r"stage_bytes<\d+>\(\) == (\d+),", src)
    assert sizes and sorted(set(int(v) for v in sizes)) == sorted({c.shared_bytes(4, True) for c in CONFIGS})
    bad = re.sub(r"(stage_bytes<\d+>\(\) == )(\d+),", lambda m: f"{m.group(1)}{int(m.group(2)) + 16},", src, count=1)
    with pytest.raises(CompileError, match="not the kernel's pipeline"):
        compile_source(bad, arch="sm_90", want="cubin", name="gemm_bad_smem.cu")


# -- rules -----------------------------------------------------------------------------------------------------


def test_choose_splits_fills_the_gpu_once_and_keeps_work_per_split() -> None:
    from dqgen.run.gemm import MAX_SPLITS, MIN_TILES_PER_SPLIT

    assert choose_gemm_splits(tiles=792, k_tiles=128, resident=396) == 1  # two whole waves: a split only adds work
    assert choose_gemm_splits(tiles=500, k_tiles=128, resident=396) > 1  # 1.26 waves: the second mostly idle unsplit
    # 8192 x 28672 at M = 64 (224 tiles of 64 rows, 3 per SM): 2 splits make 448 CTAs, 1.13 waves, 2 rounds of
    # 64 K tiles: slower than unsplit (1 round of 128); 3 splits are 2 rounds of 43
    assert choose_gemm_splits(tiles=224, k_tiles=128, resident=396) == 3
    tiny = choose_gemm_splits(tiles=2, k_tiles=128, resident=396)  # splits until the reduction outweighs the K saved
    assert 1 < tiny < MAX_SPLITS and 128 // tiny >= MIN_TILES_PER_SPLIT
    assert choose_gemm_splits(tiles=2, k_tiles=2 * MIN_TILES_PER_SPLIT - 1, resident=396) == 1  # too little K to share
    # the same grid on 16-row tiles: partials an eighth of a 128-row tile's, so more splits pay
    assert choose_gemm_splits(tiles=48, k_tiles=64, resident=660, bm=16) > choose_gemm_splits(48, 64, 660, bm=128) > 1


def test_choose_config_by_m() -> None:
    assert choose_config(9).bm == 16 and choose_config(16).bm == 16
    assert choose_config(17).bm == 32 and choose_config(32).bm == 32
    assert choose_config(33).bm == 64 and choose_config(256).bm == 64 and choose_config(4096).bm == 64


def test_dispatch_rule() -> None:
    rule = DispatchRule(gemm_min_m=17, dense_min_m=2048)
    assert pick(16, rule, gemm_ok=True, dense_ok=True) == "gemv"
    assert pick(17, rule, gemm_ok=True, dense_ok=True) == "gemm"
    assert pick(2047, rule, gemm_ok=True, dense_ok=True) == "gemm"
    assert pick(2048, rule, gemm_ok=True, dense_ok=True) == "dense"
    assert pick(4096, rule, gemm_ok=True, dense_ok=False) == "gemm"  # a packed weight has no checkpoint to dequantize
    assert pick(4096, rule, gemm_ok=False, dense_ok=True) == "gemv"  # specs the GEMM does not take
    assert pick(4096, DispatchRule(17, None), gemm_ok=True, dense_ok=True) == "gemm"


# -- the kernel compiles; SASS of its main loop ------------------------------------------------------------------

_SECTION = re.compile(r"\n\s*\.section\s+\.text\.")
_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def _functions(cubin: bytes) -> dict[str, Counter]:
    from dqgen.emit.sass import nvdisasm_path

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm_path(), "-c", f.name], check=True, capture_output=True, text=True).stdout
    return {sec.split(",")[0]: Counter(_OP.findall(sec)) for sec in _SECTION.split(text)[1:]}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_gemm_compiles_with_tensor_cores_and_no_i2f(spec: Spec, arch: str) -> None:
    from dqgen.emit.nvrtc import compile_source

    src = render_gemm(spec)
    res = compile_source(src, arch=arch, want="cubin", name=f"{spec.name}_gemm.cu")
    fns = _functions(res.cubin or b"")
    assert sorted(fns) == sorted(gemm_entry_name(spec, e) for e in GEMM_ENTRIES)
    for e in GEMM_ENTRIES:
        ops = fns[gemm_entry_name(spec, e)]
        # one k tile of the main loop: MI x NI mmas per k16 step, 4 steps
        c = e.config
        assert ops["HMMA"] >= (c.bm // c.wm // 16) * (128 // c.wn // 8) * 4, ops["HMMA"]
        assert ops["LDSM"] > 0 and ops["LDGSTS"] > 0
        assert ops["LOP3"] > 0 and (ops["PRMT"] > 0 or spec.source.bits == 4)
        assert not [op for op in ops if op.startswith("I2F")], "an integer->float conversion in the kernel"
        if not e.gather:
            assert ops["LDL"] == 0 and ops["STL"] == 0, "register spills in the main entry"


@pytest.mark.parametrize("spec", [load_spec("awq_int4_fp16"), load_spec("int8_bf16")], ids=["int4", "int8"])
def test_launch_arguments_match_the_rendered_signature(spec: Spec) -> None:
    """run.gemm.PARAMS (what _bind packs, in order, at which width) is each entry point's parameter list."""
    from dqgen.run.gemm import PARAMS

    src = render_gemm(spec)
    for e in GEMM_ENTRIES:
        assert entry_params(src, gemm_entry_name(spec, e)) == list(PARAMS)


def _variant(base: str, mode: str, target: str, **extra: object) -> Spec:
    data = load_spec(base).model_dump(mode="json", exclude_none=True)
    data.update(name=f"{base}_{mode}_{target}", zeros={"mode": mode}, target=target, **extra)
    return load_spec(data)


ZERO_VARIANTS = [
    _variant("gptq_int4_asym_act_order_fp16", "gptq_v2", "bf16", act_order=False),
    _variant("awq_int4_bf16", "float", "bf16"),
    _variant("awq_int4_fp16", "additive", "fp16"),
    _variant("int8_fp16", "integer", "bf16", source={"bits": 8, "kind": "unsigned"}, scales={"group_size": 64}),
]


@pytest.mark.parametrize("spec", ZERO_VARIANTS, ids=[s.name for s in ZERO_VARIANTS])
def test_emulated_kernel_other_zero_modes(spec: Spec) -> None:
    """GPTQ v2 (stored z), float and additive 16-bit zeros, int8 with packed zeros: specs a user may write."""
    assert supports(spec)
    K, N, M = 192, 72, 20
    q, s, z, gi, W, gs = _inputs(spec, K, N, 64)
    pk = pack_gemm(spec, q, s, z, gi, gs)
    x = random_x(spec, M, K, seed=2)
    y = emulate(spec, pk, x, _cfg(64), gather=False)
    ref = matmul_reference(x, W)
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_float_zero_gemm_compiles() -> None:
    from dqgen.emit.nvrtc import compile_source

    spec = ZERO_VARIANTS[1]
    res = compile_source(render_gemm(spec), arch="sm_80", want="cubin", name=f"{spec.name}_gemm.cu")
    fns = _functions(res.cubin or b"")
    assert all(fns[gemm_entry_name(spec, e)]["HMMA"] >= 16 for e in GEMM_ENTRIES)


@pytest.mark.parametrize("name,act_order", [("awq_int4_fp16", False), ("gptq_int4_asym_act_order_fp16", True)])
def test_emulated_kernel_on_a_quantized_real_format_layer(name: str, act_order: bool) -> None:
    """dqgen.quantize's AWQ / GPTQ desc_act tensors (the checkpoint's own layout, g_idx out of order) through the
    modelled kernel equal x @ the independent dequantization."""
    from dqgen.check.reference import dequantize_reference
    from dqgen.nn.quantize import quantize

    spec = load_spec(name)
    K, N, M = 256, 136, 20
    dense = (np.random.default_rng(2).standard_normal((K, N)) * 0.02).astype(np.float32)
    t = quantize(spec, dense, group_size=64, **({"act_order": True} if act_order else {}))
    gi = t.get("g_idx")
    if act_order:
        assert not np.array_equal(gi, np.arange(K) // 64)
    W = dequantize_reference(spec, t["qweight"], t["scales"], t.get("zeros"), gi, None)
    pk = pack_gemm(spec, t["qweight"], t["scales"], t.get("zeros"), gi, 64)
    assert pk.slots.gather == act_order
    x = random_x(spec, M, K, seed=9)
    y = emulate(spec, pk, x, _cfg(64), gather=pk.slots.gather)
    ref = matmul_reference(x, W)
    assert np.allclose(y, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_pack_refuses_scales_and_zeros_that_are_not_16_bit() -> None:
    spec = _variant("awq_int4_bf16", "float", "bf16")  # 16-bit float zeros
    q, s, z, gi, _, gs = _inputs(spec, 256, 64, 128)
    with pytest.raises(ValueError, match=r"^scales: expected 16-bit values \(fp16/bf16\), got float32$"):
        pack_gemm(spec, q, s.astype(np.float32), z, gi, gs)
    with pytest.raises(ValueError, match=r"^zeros: expected 16-bit values \(fp16/bf16\), got float32$"):
        pack_gemm(spec, q, s, z.astype(np.float32), gi, gs)
