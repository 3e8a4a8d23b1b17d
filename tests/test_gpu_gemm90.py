"""GPU (sm_90): the Hopper GEMM (dqgen.run.gemm90) against a float64 reference of x @ W: every 4/8-bit integer spec
and every token tile (wgmma n 8 .. 256) on shapes with tails (a partial 128-feature tile, K past the last 64-k
tile, M not a multiple of the token tile), outputs poisoned with NaN, the same bits twice; forced split-K the same
bits as one split's sum order allows (deterministic); a bias; the launch picks the Hopper kernel by itself on an
H100 where it may; act-order (GPTQ desc_act layers as dqgen.quantize writes them, groups padded to whole tiles) through
the gather of x into slot order and the Hopper kernel, eagerly, through QuantLinear and inside a CUDA graph; the 2-CTA
cluster entries (x multicast) with tails and odd feature-tile counts, and the rule that picks them."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from dqgen.check.matmul_reference import matmul_inputs, matmul_reference, random_x
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec
from dqgen.kernels.gemm90 import CONFIGS90, NARROW_CONFIGS90, hopper_only
from dqgen.run import gemm, gemm90
from dqgen.run.gpucheck import to_torch

from .matmul_checks import check, twice

pytestmark = pytest.mark.gpu

SPECS = [s for s in (load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))) if gemm.supports(s)]
IDS = [s.name for s in SPECS]
#: the float and codebook specs the Hopper GEMM alone takes (fp8 e4m3 / e5m2, fp4 e2m1, MXFP4, nf4, a codebook)
FLOAT_SPECS = [s for s in (load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))) if hopper_only(s)]


def _hopper() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100 / H200)")


def hopper_ran(gw: Any) -> bool:
    """Whether a Hopper GEMM launch ran on this weight: its tensor maps (one set a feature tile) exist."""
    return any(key.startswith("w") for key in gw.tensor_maps)


def _replays_on_new_x(spec: Spec, call: Any, x: Any, W: np.ndarray, seeds: tuple[int, ...]) -> None:
    """``call`` (reading x, returning y) run once on a side stream (its launch bound, any split-K workspace and
    tensor maps made before the capture), captured in a CUDA graph, then replayed on new x written into the captured
    x, each into a NaN-poisoned y: within tolerance of its own float64 reference (what a serving graph does)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = call()
    M, K = int(x.shape[0]), int(x.shape[1])
    for seed in seeds:
        x_np = random_x(spec, M, K, seed=seed)
        x.copy_(to_torch(x_np))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(spec, y, matmul_reference(x_np, W))


def _dtype(W: np.ndarray):
    return to_torch(np.zeros(1, W.dtype)).dtype


def _weight(spec: Spec, K: int, N: int, seed: int, group: int | None):
    """The packed GemmWeight (NVFP4: with its global scale) and the float reference W [K, N]."""
    (q, s, z, gi, gs), W = matmul_inputs(spec, K, N, seed=seed, group_size=group)
    gw = gemm.pack_gemm(spec, to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gs))
    return gw, W


@pytest.mark.quick
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_spec_every_token_tile_with_tails(spec: Spec) -> None:
    _hopper()
    if spec.act_order:
        pytest.skip("act-order: its desc_act layers in test_act_order_every_token_tile_through_the_gather")
    auto = spec.scales.group_size == "auto"
    K, N = (4096 + 128 if auto else 4096 + 8), 1448  # a partial feature tile; per-channel: a K tail
    gw, W = _weight(spec, K, N, K + N, 128 if auto else None)
    assert not gw.gather
    _every_token_tile(spec, gw, W, K, N)


@pytest.mark.quick
@pytest.mark.parametrize("name", ["awq_int4_fp16", "int8_bf16"])
def test_an_out_not_16_byte_aligned_gets_the_same_bits(name: str) -> None:
    """An ``out`` view 2 bytes past 16-byte alignment takes the epilogue's 2-byte stores (the staged 16-byte runs
    need an aligned y): the same bits as an aligned out, with a bias, a partial feature tile and partial token tiles,
    on every token tile, whole tiles and split-K; every element outside the view's [M, N] window left as it was."""
    _hopper()
    import torch

    spec = load_spec(name)
    K, N = 640, 256 + 8  # 3 feature tiles, the last of 8 features; 10 K tiles
    gw, W = _weight(spec, K, N, 5, None)  # the spec's own groups: AWQ's 128, int8's per-channel scales
    bias_np = np.random.default_rng(1).standard_normal(N).astype(W.dtype)
    bias = to_torch(bias_np)
    for cfg in CONFIGS90:
        M = cfg.bn - 3 if cfg.bn > 8 else 5
        x_np = random_x(spec, M, K, seed=cfg.bn)
        x = to_torch(x_np)
        for splits in (1, 3):
            aligned = twice(
                lambda out: gemm.run_gemm(spec, x, gw, bias=bias, out=out, config=cfg, splits=splits),  # noqa: B023
                (M, N),
                _dtype(W),
            )
            check(spec, aligned, matmul_reference(x_np, W, bias_np))
            buf = torch.full((M * N + 2,), float("nan"), dtype=_dtype(W), device="cuda")
            out = buf[1 : 1 + M * N].view(M, N)  # 2 bytes past the allocation's 16-byte alignment
            assert out.data_ptr() % 16 == 2 and out.is_contiguous()
            assert gemm.run_gemm(spec, x, gw, bias=bias, out=out, config=cfg, splits=splits) is out
            torch.cuda.synchronize()
            assert torch.equal(out.view(torch.int16), aligned.view(torch.int16)), (cfg.tag, splits)
            assert torch.isnan(buf[0]) and torch.isnan(buf[-1]), (cfg.tag, splits)


def _bound_shares(w: Any) -> int:
    """The ``shares`` argument (gemm90.PARAMS90) of the weight's most recently bound launch."""
    launch = list(w._bound.values())[-1]
    i = [name for name, _ in gemm90.PARAMS90].index("shares")
    word = (launch._addresses[i] - launch.slots.buffer_info()[0]) // 8  # tensor maps take 16 slots each
    return int(launch.slots[word]) & 0xFFFFFFFF


def _run_into_offset(spec: Spec, x: Any, cfg: Any, splits: int, bias: Any, offset: int, w: Any, out: Any) -> Any:
    """run_gemm in ``splits`` pieces a tile into a NaN-poisoned y ``offset`` elements into its buffer, copied to out."""
    import torch

    M, N = out.shape
    buf = torch.full((M * N + offset,), float("nan"), dtype=out.dtype, device="cuda")
    view = buf[offset:].view(M, N)
    gemm.run_gemm(spec, x, w, bias=bias, out=view, config=cfg, splits=splits)
    out.copy_(view)
    return out


@pytest.mark.quick
@pytest.mark.parametrize("name", ["awq_int4_fp16", "int8_bf16"])
def test_shared_fixup_the_same_bits_as_the_last_arriver(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiles in 2, 4 and 8 pieces whose CTAs add their shares (gemm90.shares_for) give the same bits as the last
    arriver adding every piece (the same K-order sums), within tolerance of the reference, the same bits twice, on
    every token tile with a bias, partial tiles and an out 2 bytes off 16-byte alignment (the 2-byte stores)."""
    _hopper()
    import torch

    spec = load_spec(name)
    K, N = 1024, 256 + 8  # 16 K tiles; 3 feature tiles, the last of 8 features
    bias_np = np.random.default_rng(2).standard_normal(N).astype(np.float32)
    shared, _ = _weight(spec, K, N, 6, None)
    serial, W = _weight(spec, K, N, 6, None)  # its own bound launches: built with the shared fixup off
    bias = to_torch(bias_np.astype(W.dtype))
    ran = 0
    for cfg in CONFIGS90:
        M = cfg.bn - 3 if cfg.bn > 8 else 5
        x_np = random_x(spec, M, K, seed=cfg.bn + 1)
        x = to_torch(x_np)
        tiles = cfg.tiles(M, N)
        for S in (2, 4, 8):
            if gemm90.shares_for(gemm90.Plan90.of(tiles, tiles * S, shared.k_tiles), cfg, tiles * S) != S:
                continue
            ran += 1
            for offset in (0, 1):  # 1: y 2 bytes past 16-byte alignment
                run = functools.partial(_run_into_offset, spec, x, cfg, S, bias, offset)
                got = twice(functools.partial(run, shared), (M, N), _dtype(W))
                assert _bound_shares(shared) == S, (cfg.tag, S)  # the launch that ran shared its pieces
                check(spec, got, matmul_reference(x_np, W, bias_np.astype(W.dtype)))
                monkeypatch.setattr(gemm90, "SHARED_FIXUP", False)
                want = twice(functools.partial(run, serial), (M, N), _dtype(W))
                assert _bound_shares(serial) == 1, (cfg.tag, S)
                monkeypatch.setattr(gemm90, "SHARED_FIXUP", True)
                assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (cfg.tag, S, offset)
    assert ran >= 8, ran


@pytest.mark.quick
def test_split_k_stream_k_bias_and_automatic_choice() -> None:
    """Forced split-K (1, 3, 7 pieces a tile) and the automatic stream-K split agree with the reference, with a
    bias; on a weight whose resident CTAs get enough K tiles (gemm90.hopper_pays) the automatic launch takes the
    Hopper kernel by itself, on a narrow one the sm_80 kernel."""
    _hopper()
    import torch

    from dqgen.kernels.gemm90 import choose_config90

    spec = load_spec("awq_int4_fp16")
    K, N = 8192 + 128, 4096 + 8  # 33 feature tiles x 130 K tiles: each of 264 resident CTAs gets 16 K tiles
    gw, W = _weight(spec, K, N, 3, 128)
    rng = np.random.default_rng(0)
    bias_np = rng.standard_normal(N).astype(np.float16)
    bias = to_torch(bias_np)
    for M in (7, 100, 300):
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        ref = matmul_reference(x_np, W, bias_np)
        cfg = choose_config90(M)
        for splits in (1, 3, 7):
            y = twice(
                lambda out: gemm.run_gemm(spec, x, gw, bias=bias, out=out, config=cfg, splits=splits),  # noqa: B023
                (M, N),
                _dtype(W),
            )
            check(spec, y, ref)
        auto = twice(lambda out: gemm.run_gemm(spec, x, gw, bias=bias, out=out), (M, N), _dtype(W))  # noqa: B023
        torch.cuda.synchronize()
        check(spec, auto, ref)
    hopper = [k for k in gw.workspace if isinstance(k[0], tuple) and k[0][0] == "sm90"]
    assert any(k[2] > k[1] for k in hopper), "no Hopper launch shared tiles out among more CTAs than tiles"
    assert gemm90.hopper_pays(gw.N, gw.k_tiles, 7, gw.device) and hopper_ran(gw)
    narrow, _ = _weight(spec, 4096, 1024, 4, 128)  # 8 feature tiles x 64 K tiles: under 12 K tiles a CTA
    assert not gemm90.hopper_pays(narrow.N, narrow.k_tiles, 7, narrow.device)
    gemm.run_gemm(spec, to_torch(random_x(spec, 7, 4096, seed=1)), narrow)
    assert not hopper_ran(narrow)  # the sm_80 kernel ran


def _automatic_launch_runs_n128_tiles(spec: Spec, gw: Any, W: np.ndarray, M: int, seed: int) -> None:
    """run_gemm's own choice on M rows: within tolerance of the reference, the same bits twice, on the Hopper GEMM
    in 128-token tiles (its split workspace is that tile's)."""
    x_np = random_x(spec, M, gw.K, seed=seed)
    y = twice(lambda out: gemm.run_gemm(spec, to_torch(x_np), gw, out=out), (M, gw.N), _dtype(W))
    check(spec, y, matmul_reference(x_np, W))
    assert hopper_ran(gw) and {k[0] for k in gw.workspace if isinstance(k[0], tuple)} == {("sm90", 128, 128)}


@pytest.mark.quick
def test_short_pieces_halve_the_256_token_tile() -> None:
    """At 200 tokens on 4096 x 4096 + 8 (33 feature tiles, 64 K tiles) the automatic launch runs 128-token tiles
    (gemm90.config90_for: n256's pieces would be 16 K tiles), two token tiles with a tail, within tolerance of the
    reference, the same bits twice."""
    _hopper()
    spec = load_spec("awq_int4_fp16")
    K, N, M = 4096, 4096 + 8, 200
    gw, W = _weight(spec, K, N, 5, 128)
    assert gemm90.config90_for(M, N, gw.k_tiles, gemm90.dev.sm_count(gw.device)).bn == 128
    _automatic_launch_runs_n128_tiles(spec, gw, W, M, seed=3)


@pytest.mark.quick
def test_the_halved_tile_decides_whether_hopper_pays() -> None:
    """At 256 tokens on 4096 x 2048 + 8 (17 feature tiles, 64 K tiles) n256 would give each of 132 resident CTAs 8.2
    K tiles (under gemm90.MIN_K_TILES_PER_CTA: the sm_80 GEMM), but config90_for runs n128, 34 tiles, 16.5 K tiles a
    CTA: the automatic launch is the Hopper GEMM on 128-token tiles, within tolerance, the same bits twice."""
    _hopper()
    spec = load_spec("awq_int4_fp16")
    K, N, M = 4096, 2048 + 8, 256
    gw, W = _weight(spec, K, N, 5, 128)
    if gemm90.dev.sm_count(gw.device) != 132:
        pytest.skip("the K tiles a CTA worked out for the H100's 132 SMs")
    assert gemm90.hopper_pays(N, gw.k_tiles, M, gw.device, spec)
    _automatic_launch_runs_n128_tiles(spec, gw, W, M, seed=4)


@pytest.mark.quick
def test_whole_tiles_then_a_stream_k_tail() -> None:
    """Plan90 schedules with whole tiles before a stream-K tail (blocks/splitk.cuh.j2): 16 CTAs on a whole tile each,
    then the other 17 tiles' K tiles in ranges that cross tiles; 32 whole, then the last tile in 3 pieces. The same
    answer as the reference, the same bits twice."""
    _hopper()
    import torch

    from dqgen.kernels.gemm90 import choose_config90

    spec = load_spec("awq_int4_fp16")
    K, N, M = 8192 + 128, 4096 + 8, 100  # 33 feature tiles x 130 K tiles, one token tile
    gw, W = _weight(spec, K, N, 5, 128)
    x_np = random_x(spec, M, K, seed=9)
    x = to_torch(x_np)
    ref = matmul_reference(x_np, W)
    cfg = choose_config90(M)
    for plan in (gemm90.Plan90(33, 16, 130, 16, 16), gemm90.Plan90(33, 32, 130, 32, 3)):

        def run(out: object, plan: gemm90.Plan90 = plan) -> object:
            fn = gemm90.bind90(spec, gw, x.data_ptr(), K, M, None, out, cfg, None, plan)
            fn(torch.cuda.current_stream().cuda_stream)
            return out

        y = twice(run, (M, N), _dtype(W))
        check(spec, y, ref)


def _act_order_layer(K: int, N: int, group: int, seed: int):
    """A GPTQ desc_act layer as dqgen.quantize writes it (g_idx in the Hessian's order): torch tensors (qweight,
    scales, zeros, g_idx) and the independent float dequantization W [K, N]."""
    from dqgen.check.reference import dequantize_reference
    from dqgen.nn.quantize import quantize

    spec = load_spec("gptq_int4_asym_act_order_fp16")
    dense = (np.random.default_rng(seed).standard_normal((K, N)) * 0.02).astype(np.float32)
    t = quantize(spec, dense, group_size=group, act_order=True)
    gi = np.asarray(t["g_idx"])
    assert not np.array_equal(gi, np.arange(K) // group)
    W = dequantize_reference(spec, t["qweight"], t["scales"], t["zeros"], gi, None)
    return spec, tuple(to_torch(np.asarray(a)) for a in (t["qweight"], t["scales"], t["zeros"], gi)), W


@pytest.mark.quick
def test_act_order_every_token_tile_through_the_gather() -> None:
    """K = 45 groups of 96 rows (each padded to 128 slots: 32 -1 slots a group, K past the last whole tile), N with a
    partial feature tile: every token tile forced, M with tails, x unaligned too (the gather reads x with 2-byte
    loads; the Hopper path still takes it); the float64 reference, NaN-poisoned outputs, the same bits twice."""
    _hopper()
    K, N = 96 * 45, 1448
    spec, (q, s, z, gi), W = _act_order_layer(K, N, 96, seed=1)
    gw = gemm.pack_gemm(spec, q, s, z, g_idx=gi)
    assert gw.gather and gw.slots == 45 * 128
    assert gemm90.hopper_ineligible(gw, 2, K) == ""
    _every_token_tile(spec, gw, W, K, N)
    assert hopper_ran(gw)  # the Hopper kernel ran
    x_np = random_x(spec, 20, K + 1, seed=3)
    x = to_torch(x_np)[:, 1:]  # rows 2 bytes off a 16-byte boundary
    y = twice(lambda out: gemm.run_gemm(spec, x, gw, out=out, config=CONFIGS90[1], splits=3), (20, N), _dtype(W))
    check(spec, y, matmul_reference(x_np[:, 1:], W))


@pytest.mark.quick
def test_act_order_automatic_choice_quantlinear_and_cuda_graph() -> None:
    """A desc_act layer whose resident CTAs get enough K tiles (gemm90.hopper_pays): run_gemm takes the Hopper path by
    itself at M = 7 and 100; QuantLinear (the torch module, no new API) does too, and a CUDA graph captured around
    it holds the gather and the GEMM: replayed on new x it gives the new answer."""
    _hopper()

    from dqgen.nn.linear import QuantLinear
    from dqgen.run import dispatch

    K, N = 128 * 64, 4096 + 8  # 33 feature tiles x 128 K tiles
    spec, (q, s, z, gi), W = _act_order_layer(K, N, 128, seed=2)
    gw = gemm.pack_gemm(spec, q, s, z, g_idx=gi)
    assert gw.gather and gemm90.hopper_pays(gw.N, gw.k_tiles, 7, gw.device)
    for M in (7, 100):
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        y = twice(lambda out: gemm.run_gemm(spec, x, gw, out=out), (M, N), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))
    assert hopper_ran(gw)
    layer = QuantLinear(spec, q, s, z, g_idx=gi)
    beside = dispatch.beside(layer._packed)
    assert beside is not None and beside.gather
    M = 64
    x_np = random_x(spec, M, K, seed=5)
    static_x = to_torch(x_np)
    check(spec, layer(static_x), matmul_reference(x_np, W))
    assert hopper_ran(beside)  # the module's call took the Hopper path
    _replays_on_new_x(spec, lambda: layer(static_x), static_x, W, (6, 7))


def test_act_order_bad_input_is_one_line_before_anything_is_written() -> None:
    _hopper()
    import torch

    spec, (q, s, z, gi), _ = _act_order_layer(128 * 20, 256, 128, seed=3)
    gw = gemm.pack_gemm(spec, q, s, z, g_idx=gi)
    out = torch.full((33, 256), float("nan"), dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match=r"^x: expected shape \[\.\.\., 2560\] \(K of the weight\), got \(33, 2552\)$"):
        gemm.run_gemm(spec, to_torch(random_x(spec, 33, 128 * 20 - 8, seed=1)), gw, out=out)
    with pytest.raises(ValueError, match=r"^x: expected dtype fp16 \(the spec's target\), got torch\.bfloat16$"):
        gemm.run_gemm(spec, to_torch(random_x(spec, 33, 128 * 20, seed=1)).to(torch.bfloat16), gw, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()


def test_unaligned_x_falls_back() -> None:
    _hopper()
    import torch

    spec = load_spec("awq_int4_fp16")
    K, N = 1024, 256
    gw, W = _weight(spec, K, N, 9, 128)
    x_np = random_x(spec, 20, K + 1, seed=1)
    x = to_torch(x_np)[:, 1:]  # rows 2 bytes off a 16-byte boundary
    assert gemm90.hopper_ineligible(gw, x.data_ptr(), int(x.stride(0))).startswith("x's rows are not 16-byte aligned")
    y = gemm.run_gemm(spec, x, gw)
    torch.cuda.synchronize()
    check(spec, y, matmul_reference(x_np[:, 1:], W))


def _float_k(spec: Spec) -> int:
    """K with a tail: per-channel 4096 + 8 (inside a 64-k tile); groups of 16 / 32 end half-way through a tile (its
    last scale rows past G); whole-tile groups one group past 4096."""
    group = spec.scales.group_size
    assert isinstance(group, int)
    return 4096 + 8 if group == -1 else 4096 + 32 if group < 64 else 4096 + group


def _every_token_tile(spec: Spec, gw: Any, W: Any, K: int, N: int, configs: tuple = CONFIGS90) -> None:
    """Each token tile of the Hopper GEMM (``configs``' CTA shapes) at M = 1, the tile less 3 and the tile + 5, twice
    into NaN-poisoned outputs, against the float64 reference."""
    for cfg in configs:
        for M in {1, cfg.bn - 3 if cfg.bn > 8 else 5, cfg.bn + 5}:
            x_np = random_x(spec, M, K, seed=M + cfg.bn)
            x = to_torch(x_np)
            y = twice(lambda out: gemm.run_gemm(spec, x, gw, out=out, config=cfg), (M, N), _dtype(W))  # noqa: B023
            check(spec, y, matmul_reference(x_np, W))


@pytest.mark.quick
@pytest.mark.parametrize("name", ["awq_int4_fp16", "int8_bf16", "nvfp4_fp16"])
def test_narrow_feature_tiles_with_tails(name: str) -> None:
    """The 64-feature CTA shapes (NARROW_CONFIGS90: one m64 row a CTA, their own tensor-map boxes) at M = 1, the
    tile less 3 and the tile + 5, a partial last feature tile (1448 = 22 x 64 + 40) and a K tail, twice into
    NaN-poisoned outputs; then split-K in 3 and a stream-K grid on the 128-token shape."""
    _hopper()
    spec = load_spec(name)
    K, N = (4096 + 64 if spec.scales.group_size != "auto" else 4096 + 128), 1448
    gw, W = _weight(spec, K, N, K + N, 128 if spec.scales.group_size == "auto" else None)
    _every_token_tile(spec, gw, W, K, N, NARROW_CONFIGS90)
    wide = NARROW_CONFIGS90[-1]
    x_np = random_x(spec, 100, K, seed=9)
    x = to_torch(x_np)
    for splits in (3, None):
        y = twice(lambda out: gemm.run_gemm(spec, x, gw, out=out, config=wide, splits=splits), (100, N), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))
    assert "w64" in gw.tensor_maps and "w128" not in gw.tensor_maps  # the 64-feature boxes, made for these alone


@pytest.mark.parametrize("spec", FLOAT_SPECS, ids=[s.name for s in FLOAT_SPECS])
def test_float_spec_every_token_tile_with_tails(spec: Spec) -> None:
    """Each float / codebook spec the Hopper GEMM takes, each token tile (M = 1, the tile less 3, the tile + 5),
    a partial feature tile, K with a tail, twice into NaN-poisoned outputs; split-K in 3 at one tile."""
    _hopper()
    K, N = _float_k(spec), 1448
    gw, W = _weight(spec, K, N, K + N, None)
    assert not gw.gather
    _every_token_tile(spec, gw, W, K, N)
    x_np = random_x(spec, 40, K, seed=3)
    x = to_torch(x_np)
    y = twice(lambda out: gemm.run_gemm(spec, x, gw, out=out, config=CONFIGS90[3], splits=3), (40, N), _dtype(W))
    check(spec, y, matmul_reference(x_np, W))


@pytest.mark.quick
@pytest.mark.parametrize("name", ["fp8_e4m3_fp16", "mxfp4_bf16"])
def test_float_spec_dispatch_takes_the_hopper_gemm(name: str) -> None:
    """Kernel.matmul on a packed float weight: from the rule's M (4 on sm_90) the Hopper GEMM runs (its tensor maps
    are made), even on a narrow weight where the integer specs would take the sm_80 kernel; an x TMA cannot address
    takes the GEMV (no sm_80 GEMM of these specs); every answer within tolerance."""
    _hopper()
    import torch

    import dqgen
    from dqgen.run import dispatch

    spec = load_spec(name)
    k = dqgen.compile(spec)
    assert k.target.hopper_only and k.gemm_ok
    for K, N in ((4096, 1024), (2048, 4096 + 8)):
        (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=K, group_size=None)
        w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z))
        gw = dispatch.beside(w)
        assert gw is not None and not hopper_ran(gw)
        x_np = random_x(spec, 128, K, seed=1)
        y = k.matmul(to_torch(x_np), w)
        torch.cuda.synchronize()
        check(spec, y, matmul_reference(x_np, W))
        assert hopper_ran(gw)  # the Hopper kernel ran
    x_np = random_x(spec, 64, K + 1, seed=2)
    xu = to_torch(x_np)[:, 1:]  # rows 2 bytes off a 16-byte boundary: the GEMV (no sm_80 GEMM of these specs)
    assert not dispatch._hopper_can_take(gw, xu)
    y = k.matmul(xu, w)
    torch.cuda.synchronize()
    check(spec, y, matmul_reference(x_np[:, 1:], W))


def test_nvfp4_through_kernel_matmul_and_quantlinear() -> None:
    """NVFP4 (e4m3 scales in groups of 16: two a converted word; the fp32 global scale a launch argument) through the
    user's calls on an sm_90 GPU: Kernel.matmul on a packed weight at M reaching every token tile (8 .. 256 and two
    256-token tiles; under 16 rows the GPU's rule may keep the GEMV) on a weight where the Hopper GEMM pays, twice
    into NaN-poisoned outputs, and the checkpoint form once; QuantLinear (its buffers, no new API) likewise; the
    Hopper kernel ran (the weight beside it got its tensor maps), each answer within the fp16 tolerance of the
    float64 reference. Bad global
    scales are one line naming the tensor, before any launch."""
    _hopper()
    import torch

    import dqgen
    from dqgen.nn.linear import QuantLinear
    from dqgen.run import dispatch

    spec = load_spec("nvfp4_fp16")
    K, N = 4096 + 32, 8192 + 8  # a K tail half-way through a tile, a partial feature tile; 65 x 65 tiles
    (q_np, s_np, _, _, gs_np), W = matmul_inputs(spec, K, N, seed=11)
    q, s, gs = to_torch(q_np), to_torch(s_np), to_torch(gs_np)
    k = dqgen.compile(spec)
    assert k.target.hopper_only and k.gemm_ok and k.target.global_scale
    w = k.pack_matmul(q, s, global_scale=gs)
    gw = dispatch.beside(w)
    assert gw is not None and gw.global_scale is not None and not hopper_ran(gw)
    assert gemm90.hopper_pays(gw.N, gw.k_tiles, 5, gw.device)
    for M in (5, 13, 29, 61, 125, 253, 261):
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        y = twice(lambda out: k.matmul(x, w, out=out), (M, N), torch.float16)  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))
    assert hopper_ran(gw)  # the Hopper kernel ran
    x_np = random_x(spec, 40, K, seed=3)
    y = k.matmul(to_torch(x_np), q, s, global_scale=gs)  # the checkpoint form: packed once per tensor version
    torch.cuda.synchronize()
    check(spec, y, matmul_reference(x_np, W))
    layer = QuantLinear(spec, q, s, global_scale=gs)
    lw = dispatch.beside(layer._packed)
    assert lw is not None and not hopper_ran(lw)
    for M in (7, 100):
        x_np = random_x(spec, M, K, seed=M + 1)
        x = to_torch(x_np)
        y1, y2 = layer(x), layer(x)
        torch.cuda.synchronize()
        assert torch.equal(y1.view(torch.int16), y2.view(torch.int16))
        check(spec, y1, matmul_reference(x_np, W))
    assert hopper_ran(lw)  # the module's calls took the Hopper path
    for bad, want in (
        (None, r"^global_scale: this spec has a global scale"),
        (gs.half(), r"^global_scale: expected a one-element float32 tensor, got shape \(1,\) float16"),
        (torch.ones(2, device="cuda"), r"^global_scale: expected a one-element float32 tensor, got shape \(2,\)"),
    ):
        with pytest.raises(ValueError, match=want):
            gemm.pack_gemm(spec, q, s, global_scale=bad)


@pytest.mark.quick
@pytest.mark.parametrize("name", ["awq_int4_fp16", "int8_bf16", "mxfp4_bf16", "nvfp4_fp16"])
def test_cluster_entries_with_tails_and_odd_feature_tiles(name: str) -> None:
    """The 2-CTA cluster entries (x multicast in halves, __cluster_dims__ launched by cuLaunchKernel), at M = 1, the
    tile less 3, the tile + 5 (the second token tile's rank-1 half wholly past M) and 3 tiles + 7: N with an even
    count of feature tiles (the last partial) and an odd one (the last pair's spare CTA), K with a tail; twice into
    NaN-poisoned outputs, against the float64 reference, and the same bits as the one-CTA entry on whole tiles (the
    same wgmmas in the same order); persistent clusters on pair tiles P apart; split-K refused in one line."""
    _hopper()
    import torch

    from dqgen.kernels.gemm90 import CLUSTER_CONFIGS90, cluster_config90

    spec = load_spec(name)
    K = _float_k(spec) if hopper_only(spec) else 4096 + 8 if spec.scales.group_size == -1 else 4096 + 128
    group = 128 if spec.scales.group_size == "auto" else None
    for N in (1448, 1448 + 128):  # 12 feature tiles, 13
        gw, W = _weight(spec, K, N, K + N, group)
        for cfg in CLUSTER_CONFIGS90:
            one = next(c for c in CONFIGS90 if cluster_config90(c) == cfg)
            for M in (1, cfg.bn - 3, cfg.bn + 5, 3 * cfg.bn + 7):
                x_np = random_x(spec, M, K, seed=M + N)
                x = to_torch(x_np)
                y = twice(lambda out: gemm.run_gemm(spec, x, gw, out=out, config=cfg), (M, N), _dtype(W))  # noqa: B023
                check(spec, y, matmul_reference(x_np, W))
                y1 = gemm.run_gemm(spec, x, gw, config=one, splits=1)
                torch.cuda.synchronize()
                assert torch.equal(y.view(torch.int16), y1.view(torch.int16)), (cfg.tag, M, N)
    # persistent clusters: 21 pair tiles (3 token tiles, M = 3 BN - 4; 13 feature tiles -> 7 pairs) on 4 clusters
    cfg = CLUSTER_CONFIGS90[0]
    M = 3 * cfg.bn - 4
    x_np = random_x(spec, M, K, seed=11)
    x = to_torch(x_np)
    plan = gemm90.Plan90.of(3 * 7, 4, gw.k_tiles)

    def run(out: object) -> object:
        fn = gemm90.bind90(spec, gw, x.data_ptr(), K, M, None, out, cfg, None, plan)
        fn(torch.cuda.current_stream().cuda_stream)
        return out

    check(spec, twice(run, (M, gw.N), _dtype(W)), matmul_reference(x_np, W))
    with pytest.raises(ValueError, match=r"^want_splits: a 2-CTA cluster entry \(n128c2s8b1x2\) runs whole tiles"):
        gemm.run_gemm(spec, x, gw, config=cfg, splits=2)


@pytest.mark.quick
def test_the_rule_launches_the_cluster_entry_by_itself() -> None:
    """run_gemm with no config at M = 1024 on a weight of N = 8192 (gemm90.CLUSTER_RULE) binds the 2-CTA entry; at
    M = 512 the one-CTA one; both within tolerance."""
    _hopper()
    spec = load_spec("awq_int4_fp16")
    K, N = 1024, 8192
    gw, W = _weight(spec, K, N, 8, 128)
    for M, clustered in ((1024, True), (512, False)):
        assert gemm90.use_cluster90(M, N) == clustered
        x_np = random_x(spec, M, K, seed=M)
        y = twice(lambda out: gemm.run_gemm(spec, to_torch(x_np), gw, out=out), (M, N), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))
        names = [b.kernel.name for b in gw._bound.values() if hasattr(b, "kernel")]
        assert any(n.endswith("x2") for n in names) == clustered, names
        gw._bound.clear()


@pytest.mark.quick
def test_a_cluster_launch_replays_in_a_cuda_graph() -> None:
    """The rule's 2-CTA entry (M = 1024, N = 8192) captured into a CUDA graph and replayed on new x written into the
    captured input: each replay within tolerance of its own reference (what a prefill graph does)."""
    _hopper()
    import torch

    spec = load_spec("awq_int4_fp16")
    K, N, M = 1024, 8192, 1024
    gw, W = _weight(spec, K, N, 9, 128)
    assert gemm90.use_cluster90(M, N, spec)
    x = to_torch(random_x(spec, M, K, seed=1))
    out = torch.empty(M, N, dtype=torch.float16, device="cuda")
    _replays_on_new_x(spec, lambda: gemm.run_gemm(spec, x, gw, out=out), x, W, (2, 3))
    assert any(b.kernel.name.endswith("x2") for b in gw._bound.values() if hasattr(b, "kernel"))


@pytest.mark.quick
@pytest.mark.parametrize("spec_name", ["awq_int4_fp16", "int8_bf16"])
def test_split_k_clusters_with_tails(spec_name: str) -> None:
    """Split-K clusters (cluster_splits 2, 4, 8: one output tile a cluster, each CTA a contiguous share of the K
    tiles, the pieces added in rank order through distributed shared memory) on every one-CTA token tile, with a
    bias, a partial feature tile, M not a multiple of the token tile and 66 K tiles (no cluster size divides them):
    within tolerance of the float64 reference, the same bits twice (NaN-poisoned outputs), and a CUDA graph of the
    launch replayed on new x."""
    _hopper()
    import torch

    spec = load_spec(spec_name)
    K, N = 4096 + 128, 1448
    gw, W = _weight(spec, K, N, 11, None)  # the spec's groups: 128 (AWQ), per channel (int8)
    bias_np = np.random.default_rng(1).standard_normal(N).astype(np.float32).astype(W.dtype)
    bias = to_torch(bias_np)
    for cfg in CONFIGS90:
        M = 3 * cfg.bn // 2 + 1  # two token tiles, the second partial
        x_np = random_x(spec, M, K, seed=cfg.bn)
        x = to_torch(x_np)
        ref = matmul_reference(x_np, W, bias_np)
        for ks in gemm90.CLUSTER_SPLITS:
            y = twice(
                lambda out: gemm.run_gemm(spec, x, gw, bias=bias, out=out, config=cfg, cluster_splits=ks),  # noqa: B023
                (M, N),
                _dtype(W),
            )
            check(spec, y, ref)
    assert not any(isinstance(k[0], tuple) and k[0][0] == "sm90" for k in gw.workspace), "no workspace is needed"
    x = to_torch(random_x(spec, 40, K, seed=5))
    _replays_on_new_x(spec, lambda: gemm.run_gemm(spec, x, gw, cluster_splits=4), x, W, (6, 7))
    torch.cuda.synchronize()


@pytest.mark.quick
def test_the_dispatch_takes_split_k_clusters_on_a_narrow_weight() -> None:
    """With no config, 4096 x 1024 at M = 32 (8 tiles of n32, 64 K tiles: gemm90.ksplit_for gives clusters of 8 on
    132 SMs) runs as a launch of 64 CTAs in clusters of 8, within tolerance and the same bits twice; at M = 256 (past
    KSPLIT_MAX_M) the launch is not in clusters."""
    _hopper()
    from dqgen.run import device as dev

    if dev.sm_count(0) != 132:
        pytest.skip("the rule's cluster sizes are for 132 SMs (H100 / H200 SXM)")
    spec = load_spec("awq_int4_fp16")
    gw, W = _weight(spec, 4096, 1024, 21, None)
    for M, cluster in ((32, 8), (256, 1)):
        x_np = random_x(spec, M, 4096, seed=M)
        gw._bound.clear()
        y = twice(lambda out: gemm.run_gemm(spec, to_torch(x_np), gw, out=out), (M, 1024), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))
        launches = list(gw._bound.values())
        assert launches and all(b.cluster == cluster for b in launches), [(b.grid, b.cluster) for b in launches]
        if cluster > 1:
            assert all(b.grid == (64, 1, 1) for b in launches)
