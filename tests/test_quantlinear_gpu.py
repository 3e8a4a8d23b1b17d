"""dqgen.nn.QuantLinear on the GPU: from_linear against the dense layer within the quantization error (a bound
computed from the quantized weight), against float64 x @ dequant(W) within the issue's tolerance, the same under
torch.compile, and buffers that follow .to() / state_dict. Runs on Kernel.matmul; where this tree has none yet, on
tests/matmul_standin.py when DQGEN_MATMUL_STANDIN=1 (else skipped)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dqgen.check.matmul_reference import TOLERANCE

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _matmul_api(monkeypatch):
    from dqgen.run.runtime import Kernel

    if hasattr(Kernel, "matmul"):
        return
    if os.environ.get("DQGEN_MATMUL_STANDIN") != "1":
        pytest.skip("this tree has no Kernel.matmul (issue 13's kernel); DQGEN_MATMUL_STANDIN=1 runs the stand-in")
    from tests import matmul_standin

    matmul_standin.install(lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False))


def _layer(spec: str, K: int = 512, N: int = 256, seed: int = 0):
    import torch

    from dqgen.core.formats import torch_dtype
    from dqgen.core.spec import load_spec

    torch.manual_seed(seed)
    dt = torch_dtype(load_spec(spec).target_type, torch)
    linear = torch.nn.Linear(K, N, bias=True).to("cuda", dt)
    return linear, dt


def _host(t):
    """A buffer as numpy (bf16 through its bits: numpy has no bfloat16 of torch's)."""
    import ml_dtypes
    import torch

    if t is None:
        return None
    t = t.cpu()
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()


def _dequantized(ql) -> np.ndarray:
    """W[K, N] of the layer's checkpoint buffers, by the CPU reference (float64)."""
    from dqgen.check.reference import dequantize_reference

    args = [_host(getattr(ql, n)) for n in ("qweight", "scales", "zeros", "g_idx", "global_scale")]
    return dequantize_reference(ql.spec, *args).astype(np.float64)


@pytest.mark.parametrize("spec", ["awq_int4_fp16", "awq_int4_bf16", "gptq_int4_fp16", "nf4_bf16", "mxfp4_bf16"])
def test_from_linear_matches_dense_within_quantization_error(spec: str) -> None:
    import torch

    from dqgen.nn import QuantLinear

    linear, dt = _layer(spec)
    ql = QuantLinear.from_linear(linear, spec)
    x = torch.randn(2, 3, 512, device="cuda", dtype=dt)
    y = ql(x)
    assert y.shape == (2, 3, 256) and y.dtype == dt
    Wq = _dequantized(ql)
    W = linear.weight.detach().double().cpu().numpy().T  # [K, N]
    b = linear.bias.detach().double().cpu().numpy()
    xs = x.reshape(-1, 512).double().cpu().numpy()
    ref = xs @ Wq + b  # float64 x @ dequant(W) + bias
    got = y.reshape(-1, 256).double().cpu().numpy()
    assert np.isfinite(got).all()
    tol = TOLERANCE["fp16" if dt == torch.float16 else "bf16"]
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert rel <= tol, rel
    # against the dense layer: |x (Wq - W)| <= |x| |Wq - W|, plus the output's rounding
    dense = xs @ W + b
    bound = np.abs(xs) @ np.abs(Wq - W) + tol * (np.abs(xs) @ np.abs(Wq) + np.abs(b))
    assert (np.abs(got - dense) <= bound).all()
    assert np.abs(got - dense).max() > 0  # quantized: not the dense layer itself
    assert torch.equal(ql(x), y)  # deterministic


def test_under_torch_compile_equals_eager() -> None:
    import torch

    from dqgen.nn import QuantLinear

    linear, dt = _layer("awq_int4_fp16", seed=1)
    ql = QuantLinear.from_linear(linear, "awq_int4_fp16")
    x = torch.randn(4, 512, device="cuda", dtype=dt)
    eager = ql(x)
    compiled = torch.compile(ql, fullgraph=True)
    ref = x.double() @ torch.from_numpy(_dequantized(ql)).cuda() + ql.bias.double()
    for xi in (x, torch.randn(16, 512, device="cuda", dtype=dt)):  # another M: recompiled or dynamic, still right
        got = compiled(xi)
        want = xi.double() @ torch.from_numpy(_dequantized(ql)).cuda() + ql.bias.double()
        rel = float(torch.linalg.vector_norm(got.double() - want) / torch.linalg.vector_norm(want))
        assert got.shape == want.shape and rel <= TOLERANCE["fp16"], rel
        # inductor may pick another GEMM for a graph around the op (the stand-in's torch.matmul): equal up to rounding
        torch.testing.assert_close(got, ql(xi), rtol=2e-3, atol=2e-3)
    assert ref.shape == eager.shape


def test_buffers_follow_to_and_state_dict() -> None:
    import torch

    from dqgen.nn import QuantLinear

    linear, dt = _layer("awq_int4_bf16", seed=2)
    ql = QuantLinear.from_linear(linear, "awq_int4_bf16")
    assert set(ql.state_dict()) == {"qweight", "scales", "zeros", "bias"}
    assert "spec=awq_int4_bf16, in_features=512, out_features=256, group_size=128, bias=True" in repr(ql)
    x = torch.randn(3, 512, device="cuda", dtype=dt)
    y = ql(x)
    ql.half()  # a model-wide dtype change leaves the spec's dtypes alone
    assert ql.scales.dtype == torch.bfloat16 and ql.bias.dtype == torch.bfloat16
    assert torch.equal(ql(x), y)
    ql.cpu()
    assert ql.qweight.device.type == "cpu"
    with pytest.raises(RuntimeError, match="dqgen's matmul runs on CUDA"):
        ql(x.cpu())
    ql.cuda()
    assert torch.equal(ql(x), y)
    other_linear, _ = _layer("awq_int4_bf16", seed=3)
    other = QuantLinear.from_linear(other_linear, "awq_int4_bf16")
    assert not torch.equal(other(x), y)
    other.load_state_dict(ql.state_dict())  # in-place copies: the packed weight must follow
    assert torch.equal(other(x), y)
    with pytest.raises(ValueError, match=r"^x: expected last dimension 512"):
        ql(torch.randn(3, 256, device="cuda", dtype=dt))


def test_from_checkpoint_is_the_same_layer() -> None:
    """A layer built from quantize's checkpoint tensors (torch in, torch out on the GPU) equals from_linear's."""
    import torch

    import dqgen
    from dqgen.nn import QuantLinear

    linear, dt = _layer("gptq_int4_asym_act_order_fp16", seed=4)
    ck = dqgen.quantize("gptq_int4_asym_act_order_fp16", linear.weight.detach().t())
    assert all(t.device.type == "cuda" for t in ck.values()) and ck["g_idx"].dtype == torch.int32
    a = QuantLinear.from_checkpoint("gptq_int4_asym_act_order_fp16", **ck, bias=linear.bias.detach())
    b = QuantLinear.from_linear(linear, "gptq_int4_asym_act_order_fp16")
    x = torch.randn(5, 512, device="cuda", dtype=dt)
    assert torch.equal(a(x), b(x))
    assert set(a.state_dict()) == {"qweight", "scales", "zeros", "g_idx", "bias"}
    with pytest.raises(ValueError, match=r"^bias: expected shape \(256,\) torch.float16"):
        QuantLinear.from_checkpoint("gptq_int4_asym_act_order_fp16", **ck, bias=linear.bias.detach().float())
