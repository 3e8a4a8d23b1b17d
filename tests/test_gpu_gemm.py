"""GPU: the tensor-core GEMM (dqgen.run.gemm) and Kernel.matmul's dispatch by M against a float64 reference of
x @ W (W from the independent dequantization): every 4/8-bit integer spec at M = 17, 64, 200 on shapes with tails
(direct slots and padded groups), outputs poisoned with NaN before each run, every element checked, the same bits
twice; deterministic split-K; act-order; unaligned x (the gather entry); bias, leading dims, out; the three
dispatch paths; layers quantized into real AWQ and GPTQ (act-order) checkpoint tensors through matmul equal to
x @ dequantize(W); errors before launch."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.check.matmul_reference import matmul_inputs, matmul_reference, random_x
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec
from dqgen.run import dispatch, gemm
from dqgen.run.gpucheck import to_numpy, to_torch
from dqgen.run.runtime import Kernel, ShapeError

from .matmul_checks import check, twice

pytestmark = pytest.mark.gpu

SPECS = [s for s in (load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))) if gemm.supports(s)]
IDS = [s.name for s in SPECS]


def _dtype(W: np.ndarray):
    return to_torch(np.zeros(1, W.dtype)).dtype


@pytest.mark.quick
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_spec_m_17_64_200_with_tails(spec: Spec, group: int) -> None:
    """N = 1448 (a partial 128-column tile); K = 4096 + 32 with groups of 32 (padded groups: the gather entry)
    or 4096 + 128 with groups of 128 (direct); per-channel specs K = 4096 + 8 (a K tail inside a tile)."""
    auto = spec.scales.group_size == "auto"
    if not auto and group == 32:
        pytest.skip("per-channel scales: one case")
    K, N = (4096 + group if auto else 4096 + 8), 1448
    k = Kernel(spec)
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=K + N, group_size=group if auto else None)
    w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi))
    gw = dispatch.beside(w)
    assert gw is not None and gw.gather == ((auto and group == 32) or spec.act_order)
    for M in (17, 64, 200):
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        y = twice(lambda out: k.matmul(x, w, out=out), (M, N), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))
    for M in (1, 16):  # the GEMM itself takes any M (the dispatch sends these to the GEMV)
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        y = twice(lambda out: gemm.run_gemm(k.spec, x, gw, out=out), (M, N), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))


def test_split_k_is_deterministic() -> None:
    spec = load_spec("awq_int4_fp16")
    k = Kernel(spec)
    K, N = 8192, 256  # 2 column tiles: split-K
    (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=1, group_size=128)
    gw = gemm.pack_gemm(k.spec, to_torch(q), to_torch(s), to_torch(z))
    for M in (17, 130):
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        first = twice(lambda out: gemm.run_gemm(k.spec, x, gw, out=out), (M, N), _dtype(W))  # noqa: B023
        again = twice(lambda out: gemm.run_gemm(k.spec, x, gw, out=out), (M, N), _dtype(W))  # noqa: B023
        assert np.array_equal(to_numpy(first).view(np.uint16), to_numpy(again).view(np.uint16))
        check(spec, first, matmul_reference(x_np, W))
    assert any(key[2] > 1 for key in gw.workspace), "no launch was split along K"


@pytest.mark.parametrize("name,group", [("gptq_int4_asym_act_order_fp16", 128), ("awq_int4_bf16", 36)])
def test_act_order_and_groups_that_are_no_whole_tiles(name: str, group: int) -> None:
    spec = load_spec(name)
    k = Kernel(spec)
    K, N = group * 33, 200
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=5, group_size=group)
    gw = gemm.pack_gemm(k.spec, to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi))
    assert gw.gather
    for M in (17, 100, 300):
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        y = twice(lambda out: gemm.run_gemm(k.spec, x, gw, out=out), (M, N), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))


def test_an_in_order_g_idx_takes_the_direct_entry() -> None:
    """GPTQ's desc_act=False g_idx (arange(K) // 128) on the act-order spec: direct slots, x copied, not gathered."""
    spec = load_spec("gptq_int4_asym_act_order_fp16")
    k = Kernel(spec)
    K, N = 128 * 9, 200
    (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=6, group_size=128)
    gi = (np.arange(K) // 128).astype(np.int32)
    from dqgen.check.reference import dequantize_reference

    W = dequantize_reference(spec, q, s, z, gi, None)
    gw = gemm.pack_gemm(k.spec, to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi))
    assert not gw.gather
    for M in (17, 300):
        x_np = random_x(spec, M, K, seed=M)
        y = twice(lambda out: gemm.run_gemm(k.spec, to_torch(x_np), gw, out=out), (M, N), _dtype(W))  # noqa: B023
        check(spec, y, matmul_reference(x_np, W))


def test_bias_leading_dims_and_unaligned_x() -> None:
    import torch

    spec = load_spec("int8_bf16")
    k = Kernel(spec)
    K, N = 1024, 264
    (q, s, _, _, _), W = matmul_inputs(spec, K, N, seed=3)
    gw = gemm.pack_gemm(k.spec, to_torch(q), to_torch(s))
    rng = np.random.default_rng(0)
    bias_np = rng.standard_normal(N).astype(np.float32).astype(W.dtype)
    bias = to_torch(bias_np)
    x_np = random_x(spec, 40, K, seed=4)
    y = twice(lambda out: gemm.run_gemm(k.spec, to_torch(x_np), gw, bias=bias, out=out), (40, N), torch.bfloat16)
    check(spec, y, matmul_reference(x_np, W, bias_np))
    y3 = gemm.run_gemm(k.spec, to_torch(x_np).reshape(2, 20, K), gw)
    assert tuple(y3.shape) == (2, 20, N)
    check(spec, y3.reshape(40, N), matmul_reference(x_np, W))
    # rows K + 1 apart: no 16-byte copies of x, the gather entry with perm = identity
    big = torch.zeros((40, K + 1), dtype=torch.bfloat16, device="cuda")
    big[:, 1:] = to_torch(x_np)
    y4 = twice(lambda out: gemm.run_gemm(k.spec, big[:, 1:], gw, out=out), (40, N), torch.bfloat16)
    check(spec, y4, matmul_reference(x_np, W))


def test_dispatch_takes_each_path(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec("gptq_int4_fp16")
    k = Kernel(spec)
    K, N = 2048, 512
    (q, s, _, _, _), W = matmul_inputs(spec, K, N, seed=7, group_size=128)
    qt, st = to_torch(q), to_torch(s)
    device = qt.device.index or 0
    monkeypatch.setitem(
        dispatch._RULES, dispatch.dev_name(device), dispatch.DispatchRule(gemm_min_m=17, dense_min_m=64)
    )
    seen: list[str] = []
    real_pick = dispatch.pick

    def spy(M: int, rule: dispatch.DispatchRule, **kw: bool) -> str:
        seen.append(real_pick(M, rule, **kw))
        return seen[-1]

    monkeypatch.setattr(dispatch, "pick", spy)
    for M in (16, 17, 64):
        x_np = random_x(spec, M, K, seed=M)
        check(spec, k.matmul(to_torch(x_np), qt, st), matmul_reference(x_np, W))
    assert seen == ["gemv", "gemm", "dense"]
    x_np = random_x(spec, 64, K, seed=64)
    w = k.pack_matmul(qt, st)  # packed from tensors the caller keeps: M = 64 dequantizes them for cuBLAS
    check(spec, k.matmul(to_torch(x_np), w), matmul_reference(x_np, W))
    assert seen[-1] == "dense"
    st_copy = st.clone()
    w = k.pack_matmul(qt, st_copy)
    st_copy.mul_(2)  # changed after packing: the packed layouts are the truth, so the GEMM runs
    check(spec, k.matmul(to_torch(x_np), w), matmul_reference(x_np, W))
    assert seen[-1] == "gemm"
    w = k.pack_matmul(qt.clone(), st.clone())  # the checkpoint is gone once packed: the GEMM
    check(spec, k.matmul(to_torch(x_np), w), matmul_reference(x_np, W))
    assert seen[-1] == "gemm"
    w_gemv = k.pack_matmul(qt, st, gemm=False)  # the GEMV's layout alone: M = 64 runs the GEMV
    assert dispatch.beside(w_gemv) is None
    check(spec, k.matmul(to_torch(x_np), w_gemv), matmul_reference(x_np, W))
    assert seen[-1] == "gemv"


REAL_FORMATS = {
    # spec that quantizes the layer, the checkpoint's quantization config (config.json quantization_config)
    "awq": (
        "awq_int4_fp16",
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    ),
    "gptq_desc_act": (
        "gptq_int4_asym_act_order_fp16",
        {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 128,
            "desc_act": True,
            "sym": False,
            "checkpoint_format": "gptq",
        },
    ),
}


@pytest.mark.parametrize("fmt", sorted(REAL_FORMATS))
def test_real_format_checkpoint_layer_equals_x_at_dequantize(fmt: str, tmp_path) -> None:
    """A dense layer quantized into the checkpoint's own tensors (AWQ gemm qweight/qzeros; GPTQ v1 with desc_act
    g_idx), written as a safetensors checkpoint with its config, read back by dqgen.io (which infers the spec),
    then Kernel.matmul on the read tensors against x @ (the dequantize kernel's W), for prefill-sized M."""
    import json

    from safetensors.numpy import save_file

    from dqgen.io.checkpoint import read_layers
    from dqgen.nn.quantize import quantize

    name, config = REAL_FORMATS[fmt]
    K, N = 4096, 1448
    rng = np.random.default_rng(11)
    dense = (rng.standard_normal((K, N)) * 0.02).astype(np.float32)
    kwargs = {"act_order": True} if config.get("desc_act") else {}
    t = quantize(load_spec(name), dense, group_size=128, **kwargs)
    tensors = {"model.layers.0.mlp.up_proj.qweight": t["qweight"], "model.layers.0.mlp.up_proj.scales": t["scales"]}
    tensors["model.layers.0.mlp.up_proj.qzeros"] = t["zeros"]
    if "g_idx" in t:
        tensors["model.layers.0.mlp.up_proj.g_idx"] = t["g_idx"]
        assert not np.array_equal(t["g_idx"], np.arange(K) // 128), "desc_act: rows out of order"
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": config}))
    (layer,) = read_layers(tmp_path)
    assert layer.spec.act_order == bool(config.get("desc_act"))
    k = Kernel(layer.spec)
    q, s, z, gi = (
        to_torch(a) if a is not None else None for a in (layer.qweight, layer.scales, layer.zeros, layer.g_idx)
    )
    W = k(q, s, z, g_idx=gi)
    assert tuple(W.shape) == (K, N)
    for M in (64, 333):
        x = to_torch(random_x(layer.spec, M, K, seed=M))
        y = k.matmul(x, q, s, z, g_idx=gi)
        ref = x.double() @ W.double()
        check(layer.spec, y, to_numpy(ref))


def test_errors_before_launch() -> None:
    import torch

    spec = load_spec("awq_int4_fp16")
    k = Kernel(spec)
    K, N = 1024, 256
    (q, s, z, _, _), _W = matmul_inputs(spec, K, N, seed=9, group_size=128)
    gw = gemm.pack_gemm(k.spec, to_torch(q), to_torch(s), to_torch(z))
    x = torch.zeros((32, K), dtype=torch.float16, device="cuda")
    with pytest.raises(ShapeError, match=r"^x: expected shape \[\.\.\., 1024\]"):
        gemm.run_gemm(k.spec, x[:, :512], gw)
    with pytest.raises(ShapeError, match=r"^bias: "):
        gemm.run_gemm(k.spec, x, gw, bias=torch.zeros(N + 1, dtype=torch.float16, device="cuda"))
    out = torch.full((32, N + 1), float("nan"), dtype=torch.float16, device="cuda")
    with pytest.raises(ShapeError, match=r"^out: "):
        gemm.run_gemm(k.spec, x, gw, out=out)
    assert torch.isnan(out).all()  # nothing written
    with pytest.raises(ShapeError, match=r"^x: expected dtype fp16"):
        gemm.run_gemm(k.spec, x.float(), gw)
    with pytest.raises(ValueError, match=r"^\[source\.bits\] 6-bit float codes: the GEMM's layout holds 4- and 8-bit"):
        gemm.pack_gemm(load_spec("fp6_e2m3_fp16"), to_torch(q), to_torch(s))  # a spec no GEMM main loop takes


def test_torch_compile_and_cuda_graph_at_prefill_sizes() -> None:
    """Under torch.compile(fullgraph) the dispatch is one custom op that picks the path when it runs: the same
    bits as eager for M = 4 (GEMV) and M = 64 (GEMM); a CUDA graph captures the GEMM launch and replays it on
    new x."""
    import torch

    spec = load_spec("awq_int4_fp16")
    k = Kernel(spec)
    K, N = 2048, 1440
    (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=11, group_size=128)
    qt, st, zt = to_torch(q), to_torch(s), to_torch(z)
    w = k.pack_matmul(qt, st, zt)

    def packed_fn(x):
        return k.matmul(x, w) * 2

    def checkpoint_fn(x):
        return k.matmul(x, qt, st, zt) * 2

    for M in (4, 64):
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        for fn in (packed_fn, checkpoint_fn):
            eager = fn(x)
            y = torch.compile(fn, fullgraph=True, dynamic=True)(x)
            torch.cuda.synchronize()
            assert torch.equal(y, eager)
            check(spec, y / 2, matmul_reference(x_np, W))
    static_x = to_torch(random_x(spec, 64, K, seed=1))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        k.matmul(static_x, w)  # binds the launch and allocates any split-K workspace before capture
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ya = k.matmul(static_x, w)
    x2_np = random_x(spec, 64, K, seed=2)
    static_x.copy_(to_torch(x2_np))
    g.replay()
    torch.cuda.synchronize()
    check(spec, ya, matmul_reference(x2_np, W))
