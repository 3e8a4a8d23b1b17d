"""GPU (sm_90): dqgen.nn.W4A8Linear and the dqgen::w4a8_matmul op end to end. forward equals the numpy model of it
(tests/w4a8_module_model.py: the generated quantizer's reference, dqgen.check.w4a8_model's product, the kernel's
epilogue) bit for bit without split-K and within one output ulp with it; the op called through torch.ops, eager
calls on new activations, a captured CUDA graph, torch.compile; the SmoothQuant MLP against float64."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

from dqgen.core.spec import load_spec  # noqa: E402
from dqgen.layout.layout import Layout  # noqa: E402
from tests.test_w4a8_module import convert, outlier_activations, smoothquant_mlp  # noqa: E402
from tests.w4a8_module_model import model_forward  # noqa: E402


@pytest.fixture(autouse=True)
def _hopper() -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the W4A8 kernel needs an sm_90 GPU")


def _layer(K: int, N: int, seed: int, zero_point: bool = True, smooth: bool = False, bias: bool = True) -> Any:
    from dqgen.nn import W4A8Linear

    torch.manual_seed(seed)
    lin = torch.nn.Linear(K, N, bias=bias)
    absmax = torch.rand(K) * 20 + 0.5 if smooth else None
    return W4A8Linear.from_linear(lin, zero_point=zero_point, act_absmax=absmax).cuda()


def _x(m: int, k: int, dtype: Any, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g) * 2).to(dtype).cuda()


@pytest.mark.parametrize("m", [1, 5, 37, 130])
@pytest.mark.parametrize(
    ("zero_point", "dtype", "smooth", "bias"),
    [
        (True, torch.float16, False, True),
        (False, torch.float16, True, False),
        (True, torch.bfloat16, True, True),
        (False, torch.bfloat16, False, True),
    ],
)
def test_forward_equals_the_numpy_model(m: int, zero_point: bool, dtype: Any, smooth: bool, bias: bool) -> None:
    """K = 1024: 8 rescale tiles, no split-K; N = 320: 5 feature blocks, a partial CTA column; M with token tails."""
    layer = _layer(1024, 320, seed=m, zero_point=zero_point, smooth=smooth, bias=bias)
    x = _x(m, 1024, dtype, seed=m + 1)
    with torch.no_grad():
        y = layer(x)
    torch.cuda.synchronize()
    want = model_forward(layer, x)
    assert y.dtype == dtype and y.shape == (m, 320)
    assert torch.equal(y.cpu(), want), float((y.cpu().float() - want.float()).abs().max())


def test_split_k_within_one_output_ulp_of_the_model() -> None:
    from dqgen.w8a8.w4a8_op import _prepared

    layer = _layer(4096, 128, seed=3)
    x = _x(3, 4096, torch.float16, seed=4)
    assert _prepared(True, "f16", 3, 128, 4096, torch.cuda.current_device())[2] > 1  # the plan splits K
    ys = [layer(x) for _ in range(3)]
    assert all(torch.equal(ys[0], y) for y in ys[1:])  # split order fixed: deterministic
    want = model_forward(layer, x).float()
    ulp = torch.from_numpy(np.spacing(want.abs().numpy().astype(np.float16)).astype(np.float32))
    assert ((ys[0].cpu().float() - want).abs() <= ulp).all()


def test_the_op_through_torch_ops_and_its_errors() -> None:
    from dqgen.w8a8 import quantize_activations
    from dqgen.w8a8.w4a8_op import w4a8_matmul

    layer = _layer(512, 192, seed=5)
    x = _x(9, 512, torch.float16, seed=6)
    q, s = quantize_activations(x)
    b = layer.bias.half()
    y_ops = torch.ops.dqgen.w4a8_matmul(q, s, layer.w_q, layer.w_scale, layer.w_zeros, b, torch.float16)
    y = w4a8_matmul(q, s, layer.w_q, layer.w_scale, layer.w_zeros, b, torch.float16)
    assert torch.equal(y_ops, y) and torch.equal(y.cpu(), model_forward(layer, x))
    with pytest.raises(ValueError, match=r"^x_q: expected int8 \[M, K=512\]"):
        torch.ops.dqgen.w4a8_matmul(q[:, :256], s, layer.w_q, layer.w_scale, layer.w_zeros, b, torch.float16)
    with pytest.raises(ValueError, match=r"^bias: expected torch.bfloat16 \[N=192\]"):
        w4a8_matmul(q, s, layer.w_q, layer.w_scale, layer.w_zeros, b, torch.bfloat16)
    with pytest.raises(ValueError, match=r"^x_scale: expected a CUDA tensor"):
        w4a8_matmul(q, s.cpu(), layer.w_q, layer.w_scale, layer.w_zeros, b)
    assert w4a8_matmul(q[:0], s[:0], layer.w_q, layer.w_scale, layer.w_zeros).shape == (0, 192)
    # a strided x_q (a column slice of a wider buffer) is copied, not read wrongly
    wide = torch.zeros(9, 1024, dtype=torch.int8, device="cuda")
    wide[:, :512] = q
    assert torch.equal(w4a8_matmul(wide[:, :512], s, layer.w_q, layer.w_scale, layer.w_zeros, b), y)


def test_repeated_calls_read_each_new_x() -> None:
    """The signature cache binds a launch per x address (x is in a TMA tensor map): new tensors, new contents at an
    address seen before, more addresses than the cache keeps."""
    from dqgen.w8a8 import w4a8_op

    layer = _layer(512, 128, seed=7, smooth=True)  # a float32 bias, cast once for bf16 activations
    xs = [_x(16, 512, torch.bfloat16, seed=s) for s in range(20)]
    for i, x in enumerate(xs):
        assert torch.equal(layer(x).cpu(), model_forward(layer, x))
        if i == 0:
            signatures = len(w4a8_op._CALLS)
    assert len(w4a8_op._CALLS) == signatures  # one signature: the bias's cast is kept, not made per call
    xs[0].copy_(_x(16, 512, torch.bfloat16, seed=99))
    assert torch.equal(layer(xs[0]).cpu(), model_forward(layer, xs[0]))
    x3 = _x(6, 512, torch.bfloat16, seed=8).reshape(2, 3, 512)
    assert layer(x3).shape == (2, 3, 128)


def test_cuda_graph_replays_on_new_contents_after_the_cache_is_cleared() -> None:
    from dqgen.w8a8 import w4a8_op

    layer = _layer(1024, 256, seed=9)
    x = _x(8, 1024, torch.float16, seed=10)
    with torch.no_grad():
        layer(x)  # warm-up: checked, planned, bound (and the kernels loaded) outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y_graph = layer(x)
        w4a8_op._CALLS.clear()
        for m in (1, 64, 200):
            other = _x(m, 1024, torch.float16, seed=m)
            assert torch.equal(layer(other).cpu(), model_forward(layer, other))
        x.copy_(_x(8, 1024, torch.float16, seed=11))
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(y_graph.cpu(), model_forward(layer, x))


def test_under_torch_compile_matches_eager() -> None:
    layer = _layer(512, 384, seed=12, smooth=True)
    compiled = torch.compile(layer, fullgraph=True)
    for m in (7, 40, 130):
        x = _x(m, 512, torch.bfloat16, seed=m)
        with torch.no_grad():
            assert torch.equal(compiled(x), layer(x)), m


def test_checkpoint_layer_on_the_gpu_equals_its_model() -> None:
    from dqgen.nn import W4A8Linear

    K, N = 768, 128
    rng = np.random.default_rng(13)
    codes = rng.integers(0, 16, (K, N)).astype(np.uint8)
    zeros = rng.integers(1, 16, (K // 128, N)).astype(np.uint8)
    s16 = (rng.uniform(0.5, 2.0, (K // 128, N)) * 1e-2).astype(np.float16)
    lay = Layout.of(load_spec("awq_int4_s8"))

    def i32(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int32))

    layer = W4A8Linear.from_checkpoint(
        "awq", i32(lay.pack_fields(codes)), torch.from_numpy(s16), i32(lay.pack_fields(zeros, lay.zero_order, "N")),
        device="cuda",
    )  # fmt: skip
    assert layer.w_q.is_cuda
    x = _x(20, K, torch.float16, seed=14)
    assert torch.equal(layer(x).cpu(), model_forward(layer, x))


def test_smoothquant_mlp_against_float64() -> None:
    """The MLP of the CPU test on the GPU: each layer's output the model's bit for bit, the whole MLP against
    float64 of the float MLP within the int4 quantization error, smoothing keeping it down."""
    mlp = smoothquant_mlp()
    calib, x = outlier_activations(64, 512, seed=1), outlier_activations(32, 512, seed=2)
    fc1, _, fc2 = mlp
    with torch.no_grad():
        h64 = x.double() @ fc1.weight.double().T + fc1.bias.double()
        want = (0.5 * h64 * (1 + torch.erf(h64 / math.sqrt(2)))) @ fc2.weight.double().T + fc2.bias.double()
    errors = {}
    for smoothing in (True, False):
        q1, q2 = (q.cuda() for q in convert(mlp, calib, smoothing))
        with torch.no_grad():
            h1 = q1(x.cuda())
            assert torch.equal(h1.cpu(), model_forward(q1, x))
            h = torch.nn.functional.gelu(h1.float()).half()
            y = q2(h)
            assert torch.equal(y.cpu(), model_forward(q2, h))
        errors[smoothing] = float((y.cpu().double() - want).norm() / want.norm())
        print(f"W4A8 MLP (GPU) vs float64: smoothing {smoothing}: {errors[smoothing]:.4f}")
    assert errors[True] <= 0.2
    assert errors[True] < 0.7 * errors[False]


def test_more_x_addresses_than_bound_launches_re_address_the_oldest() -> None:
    """The op on 2 x X_BOUND_MAX quantized activations alive at once, each twice in turn: the oldest launches' x
    maps re-addressed in place past X_BOUND_MAX; each result the numpy model's."""
    from dqgen.run.bound_x import X_BOUND_MAX
    from dqgen.w8a8 import quantize_activations
    from dqgen.w8a8.w4a8_op import w4a8_matmul

    layer = _layer(512, 128, seed=3, bias=False)
    xs = [_x(16, 512, torch.float16, seed=200 + s) for s in range(2 * X_BOUND_MAX)]
    codes = [quantize_activations(x) for x in xs]  # all alive: distinct addresses
    for x, (q, s) in list(zip(xs, codes, strict=True)) * 2:
        y = w4a8_matmul(q, s, layer.w_q, layer.w_scale, layer.w_zeros, None, torch.float16)
        assert torch.equal(y.cpu(), model_forward(layer, x))
