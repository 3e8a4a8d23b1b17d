"""GPU tests of the quantizer fused into its producer (dqgen.w8a8.rmsnorm_quantize, silu_mul_quantize) and of the
model path over it (W8A8RMSNorm -> QuantizedActivation -> W8A8Linear, W8A8MLP, quantize_model_w8a8): the RMSNorm
codes bit-equal to the numpy reference of HF's order, the SiLU-and-mul codes within one of it, graphs, compile,
one-line errors, a converted Llama layer against its float self."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dqgen.kernels.act_quant import choose_act_quant
from dqgen.w8a8 import reference

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


def _host(t: Any) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def _x(rows: int, k: int, dtype: Any, seed: int) -> Any:
    """Rows at mixed magnitudes with outlier channels, a zero row and a row of huge values."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g) * torch.empty(rows, 1).uniform_(1e-3, 30, generator=g)
    x[:, torch.randint(0, k, (max(1, k // 64),), generator=g)] *= 80
    if rows > 1:
        x[1] = 0
    if rows > 2:
        x[2] = torch.randn(k, generator=g) * 2000  # x^2 sums past fp16's range: the norm runs in fp32
    return x.to(dtype).cuda()


def _rms_reference(x: Any, gamma: Any, eps: float) -> tuple[np.ndarray, np.ndarray]:
    threads = choose_act_quant("fp16", x.shape[1], None, False, True, x.shape[0], prologue="rmsnorm").threads
    return reference.dynamic(reference.rmsnorm(_host(x), _host(gamma), eps, threads))


@pytest.mark.quick
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("rows", "k"), [(1, 4096), (7, 8), (300, 14336), (5, 40000)])
def test_rmsnorm_quantize_is_bit_exact(rows: int, k: int, dtype: str) -> None:
    from dqgen.w8a8 import rmsnorm_quantize

    dt = getattr(torch, dtype)
    x = _x(rows, k, dt, seed=rows + k)
    gamma = (1 + 0.3 * torch.randn(k, generator=torch.Generator().manual_seed(k))).to(dt).cuda()
    q, scale = rmsnorm_quantize(x, gamma, 1e-5)
    want_q, want_scale = _rms_reference(x, gamma, 1e-5)
    assert np.array_equal(q.cpu().numpy(), want_q)
    assert np.array_equal(scale.cpu().numpy().view(np.uint32), want_scale.view(np.uint32))


def test_rmsnorm_quantize_matches_hf_rmsnorm_then_the_quantizer() -> None:
    """Against HF's own module (torch's rsqrt, its own sum order) followed by the separate quantizer: the same codes
    up to one where the two norms' r differ in the last bit."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from dqgen.w8a8 import quantize_activations, rmsnorm_quantize

    k = 4096
    norm = LlamaRMSNorm(k, eps=1e-5).half().cuda()
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * torch.randn(k))
    x = _x(64, k, torch.float16, seed=3)
    q, scale = rmsnorm_quantize(x, norm.weight.detach(), norm.variance_epsilon)
    with torch.no_grad():
        q_hf, scale_hf = quantize_activations(norm(x))
    diff = (q.int() - q_hf.int()).abs()
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 1e-3
    assert torch.allclose(scale, scale_hf, rtol=2e-3, atol=0)


@pytest.mark.quick
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("rows", "k"), [(1, 14336), (33, 8), (256, 4096), (3, 40000)])
def test_silu_mul_quantize_is_within_one_code(rows: int, k: int, dtype: str) -> None:
    from dqgen.w8a8 import silu_mul_quantize

    dt = getattr(torch, dtype)
    gate_up = _x(rows, 2 * k, dt, seed=rows * k) / 64  # the huge row's SiLU(g) * u stays inside fp16
    q, scale = silu_mul_quantize(gate_up)
    want_q, want_scale = reference.dynamic(reference.silu_mul(_host(gate_up)))
    diff = np.abs(q.cpu().numpy().astype(np.int32) - want_q.astype(np.int32))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3
    assert np.allclose(scale.cpu().numpy(), want_scale, rtol=2.0**-9, atol=0)
    # against float64 of the unrounded SiLU-and-mul: the codes' own error, half a step plus the fp16 roundings
    g, u = gate_up[:, :k].double(), gate_up[:, k:].double()
    y = torch.nn.functional.silu(g) * u
    back = q.double() * scale.double()[:, None]
    assert float((back - y).abs().max()) <= float((0.5 + 2.0**-6 * 127) * scale.double().max()) + 1e-6


def test_graph_capture_and_repeated_calls_read_new_contents() -> None:
    from dqgen.w8a8 import rmsnorm_quantize, silu_mul_quantize

    k = 4096
    x = _x(16, k, torch.float16, seed=1)
    gamma = torch.ones(k, dtype=torch.float16, device="cuda")
    gu = _x(16, 2 * k, torch.float16, seed=2)
    rmsnorm_quantize(x, gamma, 1e-5)
    silu_mul_quantize(gu)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q1, s1 = rmsnorm_quantize(x, gamma, 1e-5)
        q2, s2 = silu_mul_quantize(gu)
    x.copy_(_x(16, k, torch.float16, seed=9))
    gu.copy_(_x(16, 2 * k, torch.float16, seed=10))
    gamma.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    want = _rms_reference(x, gamma, 1e-5)
    assert np.array_equal(q1.cpu().numpy(), want[0]) and np.array_equal(s1.cpu().numpy(), want[1])
    eager = silu_mul_quantize(gu)
    assert torch.equal(q2, eager[0]) and torch.equal(s2, eager[1])


def test_under_torch_compile_matches_eager() -> None:
    from dqgen.w8a8 import rmsnorm_quantize, silu_mul_quantize

    def f(x: Any, gamma: Any, gu: Any) -> Any:
        a, sa = rmsnorm_quantize(x, gamma, 1e-6)
        b, sb = silu_mul_quantize(gu)
        return a, sa * 2, b, sb

    compiled = torch.compile(f, fullgraph=True)
    x = _x(9, 2048, torch.bfloat16, seed=4)
    gamma = torch.full((2048,), 0.75, dtype=torch.bfloat16, device="cuda")
    gu = _x(9, 4096, torch.bfloat16, seed=5)
    for a, b in zip(f(x, gamma, gu), compiled(x, gamma, gu), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda f, g: f(torch.zeros(4, 8, dtype=torch.float16), g(8)), "x: expected a CUDA tensor"),
        (lambda f, g: f(torch.zeros(4, 12, dtype=torch.float16, device="cuda"), g(12)), "x: the fused quantizer"),
        (lambda f, g: f(torch.zeros(4, 8, dtype=torch.float16, device="cuda"), g(16)), r"weight: expected torch"),
        (
            lambda f, g: f(torch.zeros(4, 8, dtype=torch.float16, device="cuda"), g(8).float()),
            r"weight: expected torch\.float16 \[K=8\]",
        ),
        (
            lambda f, g: f(torch.zeros(4, 8, dtype=torch.float16, device="cuda"), g(8), eps=float("nan")),
            "eps: expected a float >= 0",
        ),
        (
            lambda f, g: f(torch.zeros(4, 9, dtype=torch.float16, device="cuda")[:, 1:], g(8)),
            "x: expected rows a multiple of 8",
        ),
    ],
)
def test_rmsnorm_bad_input_is_one_line(call: Any, match: str) -> None:
    from dqgen.w8a8 import rmsnorm_quantize

    def f(x: Any, w: Any, eps: float = 1e-5) -> Any:
        return rmsnorm_quantize(x, w, eps)

    with pytest.raises(ValueError, match=match) as info:
        call(f, lambda k: torch.ones(k, dtype=torch.float16, device="cuda"))
    assert "\n" not in str(info.value)


def test_silu_mul_bad_input_is_one_line() -> None:
    from dqgen.w8a8 import silu_mul_quantize

    with pytest.raises(ValueError, match=r"gate_up: expected \[M, 2K\]"):
        silu_mul_quantize(torch.zeros(2, 15, dtype=torch.float16, device="cuda"))
    with pytest.raises(ValueError, match="gate_up: the fused quantizer takes rows of a positive multiple of 8"):
        silu_mul_quantize(torch.zeros(2, 12, dtype=torch.float16, device="cuda"))
    with pytest.raises(ValueError, match="gate_up: expected float16 or bfloat16"):
        silu_mul_quantize(torch.zeros(2, 16, device="cuda"))


def _tiny_llama(layers: int = 2) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=512, intermediate_size=1408, num_attention_heads=8, num_key_value_heads=2,
        num_hidden_layers=layers, vocab_size=1000, max_position_embeddings=256,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).half().cuda().eval()


def test_quantized_llama_shares_one_quantization_and_tracks_the_float_model() -> None:
    """quantize_model_w8a8 on a 2-layer Llama: every decoder linear is W8A8, the norms hand codes to q / k / v and
    to gate_up; the logits stay close to the float model's; the attention's projections get a
    QuantizedActivation (one quantization for three GEMMs), and a CUDA graph of the forward replays."""
    from dqgen.nn import W8A8MLP, QuantizedActivation, W8A8Linear, W8A8RMSNorm, quantize_model_w8a8

    model = _tiny_llama()
    ids = torch.randint(0, 1000, (2, 24), device="cuda")
    with torch.no_grad():
        want = model(ids, use_cache=False).logits.float()
    report = quantize_model_w8a8(model)
    assert report.converted == [0, 1] and report.skipped == {}
    layer = model.model.layers[0]
    assert isinstance(layer.input_layernorm, W8A8RMSNorm) and isinstance(layer.mlp, W8A8MLP)
    assert isinstance(layer.self_attn.q_proj, W8A8Linear)
    seen: list[type] = []
    layer.self_attn.k_proj.register_forward_pre_hook(lambda _m, args: seen.append(type(args[0])))
    with torch.no_grad():
        got = model(ids, use_cache=False).logits.float()
    assert seen == [QuantizedActivation]
    rel = float((got - want).norm() / want.norm())
    assert rel < 0.05, rel
    static = torch.randint(0, 1000, (2, 24), device="cuda")
    with torch.no_grad():
        model(static, use_cache=False)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(static, use_cache=False).logits
        static.copy_(ids)
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(out.float(), got)


def test_a_quantized_activation_reaching_other_ops_is_dequantized() -> None:
    from dqgen.nn import QuantizedActivation, W8A8RMSNorm

    norm = W8A8RMSNorm(torch.ones(64, dtype=torch.float16, device="cuda"), 1e-5)
    x = _x(3, 64, torch.float16, seed=8)
    a = norm(x)
    assert isinstance(a, QuantizedActivation)
    plain = a * 1
    assert type(plain) is torch.Tensor
    h = x.float()
    want = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).half().float()
    assert torch.allclose(plain.float(), want, rtol=0, atol=float(want.abs().max()) / 127 * 0.51 + 1e-3)


def test_w4a8_linear_takes_the_codes_of_the_fused_norm() -> None:
    """W4A8Linear reads a QuantizedActivation's codes as they are: the same output as its op on rmsnorm_quantize's
    codes; a smoothed layer refuses them."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the W4A8 GEMM is sm_90's")
    from dqgen.nn import W4A8Linear, W8A8RMSNorm
    from dqgen.w8a8 import rmsnorm_quantize
    from dqgen.w8a8.w4a8_op import w4a8_matmul

    torch.manual_seed(1)
    lin = torch.nn.Linear(512, 256, bias=False).half().cuda()
    layer = W4A8Linear.from_linear(lin, group_size=128)
    gamma = (1 + 0.2 * torch.randn(512)).half().cuda()
    x = _x(5, 512, torch.float16, seed=12)
    y = layer(W8A8RMSNorm(gamma, 1e-5)(x))
    q, s = rmsnorm_quantize(x, gamma, 1e-5)
    assert torch.equal(y, w4a8_matmul(q, s, layer.w_q, layer.w_scale, layer.w_zeros, None, torch.float16))
    smoothed = W4A8Linear.from_linear(lin, group_size=128, act_absmax=torch.rand(512).cuda() + 0.5)
    with pytest.raises(ValueError, match="x: codes quantized upstream reach a smoothed layer"):
        smoothed(W8A8RMSNorm(gamma, 1e-5)(x))


def test_the_signature_cache_tells_gammas_eps_and_strides_apart() -> None:
    """One x signature called with two gammas, another eps and the first gamma again: each call bit-exact with its
    own reference (a key that left out gamma's pointer or eps would reuse the first bound launch); a strided gamma at
    the first one's address is refused, not read as contiguous."""
    from dqgen.w8a8 import rmsnorm_quantize

    k = 2048
    x = _x(9, k, torch.float16, seed=21)
    base = (1 + 0.3 * torch.randn(2 * k, generator=torch.Generator().manual_seed(3))).half().cuda()
    gamma1, gamma2 = base[:k], (base[k:] * 2).contiguous()
    for gamma, eps in ((gamma1, 1e-5), (gamma2, 1e-5), (gamma2, 0.5), (gamma1, 1e-5)):
        q, scale = rmsnorm_quantize(x, gamma, eps)
        want_q, want_scale = _rms_reference(x, gamma, eps)
        assert np.array_equal(q.cpu().numpy(), want_q), (eps, gamma is gamma1)
        assert np.array_equal(scale.cpu().numpy(), want_scale)
    with pytest.raises(ValueError, match="weight: expected a contiguous vector"):
        rmsnorm_quantize(x, base[::2], 1e-5)  # base's address, gamma1's shape and dtype, stride 2
    with pytest.raises(ValueError, match="eps: expected a float >= 0 that is finite in float32"):
        rmsnorm_quantize(x, gamma1, 1e40)


def test_rows_past_the_grid_and_strided_rows() -> None:
    """More rows than resident blocks (each block loops over rows: the reductions' slots alternate) and rows further
    apart than their width (x a slice of a wider buffer), for both producers."""
    from dqgen.w8a8 import rmsnorm_quantize, silu_mul_quantize
    from dqgen.w8a8.kernel import loaded

    k = 2048
    v = choose_act_quant("fp16", k, None, False, True, 1 << 20, prologue="rmsnorm")
    rows = 3 * loaded(v, torch.cuda.current_device()).max_blocks + 1
    buf = _x(rows, k + 64, torch.float16, seed=5)
    x = buf[:, :k]
    gamma = (1 + 0.3 * torch.randn(k, generator=torch.Generator().manual_seed(4))).half().cuda()
    q, scale = rmsnorm_quantize(x, gamma, 1e-5)
    want_q, want_scale = _rms_reference(x, gamma, 1e-5)
    assert np.array_equal(q.cpu().numpy(), want_q) and np.array_equal(scale.cpu().numpy(), want_scale)
    wide = _x(rows, 2 * k + 64, torch.float16, seed=6) / 64
    gate_up = wide[:, : 2 * k]
    q, scale = silu_mul_quantize(gate_up)
    want_q, want_scale = reference.dynamic(reference.silu_mul(_host(gate_up)))
    diff = np.abs(q.cpu().numpy().astype(np.int32) - want_q.astype(np.int32))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3
    assert np.allclose(scale.cpu().numpy(), want_scale, rtol=2.0**-9, atol=0)


def test_a_quantized_activation_is_refused_where_a_plain_tensor_is_read() -> None:
    from dqgen.nn import W8A8MLP, W8A8Linear, W8A8RMSNorm
    from dqgen.w8a8 import quantize_activations, rmsnorm_quantize

    norm = W8A8RMSNorm(torch.ones(64, dtype=torch.float16, device="cuda"), 1e-5)
    a = norm(_x(3, 64, torch.float16, seed=8))
    with pytest.raises(ValueError, match="x: a QuantizedActivation with no storage of its own"):
        quantize_activations(a)
    with pytest.raises(ValueError, match="x: a QuantizedActivation with no storage of its own"):
        rmsnorm_quantize(a, norm.weight, 1e-5)
    # an MLP on no tokens returns no tokens
    lin = torch.nn.Linear(128, 64, bias=False).half().cuda()
    mlp = W8A8MLP(
        W8A8Linear.from_linear(torch.nn.Linear(64, 256, bias=False).half().cuda()), W8A8Linear.from_linear(lin)
    )
    assert mlp(torch.zeros(2, 0, 64, dtype=torch.float16, device="cuda")).shape == (2, 0, 64)
