"""CPU tests of the quantizer fused into its producer: the numpy reference's sum order and arithmetic against
plain loops and float64, the kernel variants' names, refusals and sm_90 builds (no spills), and the model-path
modules built on the CPU (QuantizedActivation's fallback, the norm and MLP checks, quantize_model_w8a8's report)."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.emit.nvrtc import compile_source
from dqgen.kernels.act_quant import ActQuantConfig, choose_act_quant, render_act_quant
from dqgen.w8a8 import reference


def test_sum_of_squares_follows_the_documented_order() -> None:
    """The vectorised reference against the order written out as loops: each thread its vectors t, t + T, ... and
    their 8 elements in order; a butterfly over each warp's lanes; the warps in order."""
    rng = np.random.default_rng(0)
    threads, k = 64, 8 * 64 * 3 - 8 * 5  # the last chunk is short: some threads have a vector fewer
    xf = (rng.standard_normal((2, k)) * rng.uniform(0.01, 300, (2, k))).astype(np.float32)
    for row in range(2):
        acc = np.zeros(threads, np.float32)
        for t in range(threads):
            for j in range(t, k // 8, threads):
                for e in range(8):
                    v = xf[row, 8 * j + e]
                    acc[t] = np.float32(acc[t] + np.float32(v * v))
        lanes = acc.reshape(threads // 32, 32).copy()
        for off in (16, 8, 4, 2, 1):
            lanes = np.array([[np.float32(w[i] + w[i ^ off]) for i in range(32)] for w in lanes], np.float32)
        total = lanes[0, 0]
        for w in range(1, threads // 32):
            total = np.float32(total + lanes[w, 0])
        got = reference.block_sum_of_squares(xf[row : row + 1], threads)[0]
        assert got.view(np.uint32) == total.view(np.uint32)
        assert abs(float(got) - float((xf[row].astype(np.float64) ** 2).sum())) <= 1e-5 * float(got)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_rmsnorm_and_silu_mul_references_against_float64(dtype: object) -> None:
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    step = 2.0**-8 if dtype == "bfloat16" else 2.0**-11  # half an ulp, relative, of the 16-bit type
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 256)) * 3).astype(dt)
    gamma = (1 + 0.2 * rng.standard_normal(256)).astype(dt)
    got = reference.rmsnorm(x, gamma, 1e-6, threads=32).astype(np.float64)
    h = x.astype(np.float64)
    want = h / np.sqrt((h**2).mean(axis=1, keepdims=True) + 1e-6) * gamma.astype(np.float64)
    assert np.all(np.abs(got - want) <= 3 * step * np.abs(want) + 1e-30)
    gu = (rng.standard_normal((5, 512)) * 4).astype(dt)
    got = reference.silu_mul(gu).astype(np.float64)
    g, u = gu[:, :256].astype(np.float64), gu[:, 256:].astype(np.float64)
    want = g / (1 + np.exp(-g)) * u
    assert np.all(np.abs(got - want) <= 3 * step * np.abs(want) + 1e-30)


def test_a_zero_row_gives_scale_zero_and_zero_codes() -> None:
    x = np.zeros((2, 64), np.float16)
    x[1, 3] = 2
    q, scale = reference.dynamic(reference.rmsnorm(x, np.ones(64, np.float16), 1e-5, threads=32))
    assert scale[0] == 0 and not q[0].any()
    assert q[1, 3] == 127 and np.count_nonzero(q[1]) == 1


def test_variant_names_and_refusals() -> None:
    v = choose_act_quant("bf16", 4096, None, False, True, 16, prologue="rmsnorm")
    assert v.name == "dqgen_act_quant_bf16_k4096_rms_dynraw_a"
    assert choose_act_quant("fp16", 4096, None, False, True, 16).name == "dqgen_act_quant_fp16_k4096_dynraw_a"
    assert choose_act_quant("fp16", 8, None, False, True, 1, prologue="silu_mul").name.endswith("_silu_dynraw_a")
    with pytest.raises(ValueError, match="prologue='rmsnorm': takes a dynamic scale and no smoothing factors"):
        render_act_quant(ActQuantConfig("fp16", 4096, "fp32", False, True, prologue="rmsnorm"))
    with pytest.raises(ValueError, match="prologue='silu_mul': needs the aligned variant"):
        render_act_quant(ActQuantConfig("fp16", 4096, None, False, False, prologue="silu_mul"))


@pytest.mark.parametrize(
    "v",
    [
        choose_act_quant("fp16", 4096, None, False, True, 16, prologue="rmsnorm"),
        choose_act_quant("bf16", 40000, None, False, True, 16, prologue="rmsnorm"),  # rows longer than the registers
        choose_act_quant("fp16", 14336, None, False, True, 16, prologue="silu_mul"),
        choose_act_quant("bf16", 40000, None, False, True, 16, prologue="silu_mul"),
    ],
    ids=lambda v: v.name,
)
def test_producer_variant_compiles_without_spills(v: ActQuantConfig) -> None:
    res = compile_source(
        render_act_quant(v), arch="sm_90", want="cubin", name="act_quant.cu",
        options=["--ptxas-options=-v"], use_cache=False,
    )  # fmt: skip
    assert "0 bytes spill stores" in res.log and "0 bytes stack frame" in res.log, res.log
    src = render_act_quant(v)
    assert ("block_sum(ss, red_sum, parity)" in src) == (v.prologue == "rmsnorm")
    assert ("xr + K + 8 * j" in src) == (v.prologue == "silu_mul")


def test_quantized_activation_falls_back_to_its_dequantized_values() -> None:
    torch = pytest.importorskip("torch")
    from dqgen.nn import QuantizedActivation

    q = torch.tensor([[[-127, 0, 5, 127]]], dtype=torch.int8)
    scale = torch.tensor([[0.5]])
    a = QuantizedActivation(q, scale, torch.float16)
    assert a.shape == (1, 1, 4) and a.dtype == torch.float16
    b = a + 0
    assert type(b) is torch.Tensor and b.tolist() == [[[-63.5, 0.0, 2.5, 63.5]]]
    with pytest.raises(ValueError, match=r"q, scale: expected int8 \[\.\.\., K\] and float32"):
        QuantizedActivation(q, scale.double(), torch.float16)


def test_model_conversion_checks_what_each_module_computes() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from dqgen.nn import W8A8MLP, W8A8Linear, W8A8RMSNorm, quantize_model_w8a8

    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=2, vocab_size=100, hidden_act="silu",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).half().eval()
    model.model.layers[1].mlp.act_fn = torch.nn.GELU()
    report = quantize_model_w8a8(model)
    assert report.converted == [0]
    assert "mlp: expected act_fn SiLU, got GELU" in report.skipped[1]
    layer0, layer1 = model.model.layers
    assert isinstance(layer0.post_attention_layernorm, W8A8RMSNorm) and isinstance(layer0.mlp, W8A8MLP)
    assert isinstance(layer0.self_attn.o_proj, W8A8Linear)
    assert type(layer1.self_attn.q_proj) is torch.nn.Linear  # a skipped layer is left whole
    # the merged gate / up weight is [gate; up]: its codes are the two layers' own per-channel codes
    mlp = model.model.layers[1].mlp
    mlp.act_fn = torch.nn.SiLU()
    merged = W8A8MLP.from_mlp(mlp).gate_up
    assert torch.equal(merged.weight[:512], W8A8Linear.from_linear(mlp.gate_proj).weight)
    assert torch.equal(merged.weight[512:], W8A8Linear.from_linear(mlp.up_proj).weight)
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    with pytest.raises(ValueError, match="norm: GemmaRMSNorm does not compute HF's RMSNorm,"):
        W8A8RMSNorm.from_norm(GemmaRMSNorm(64).half())
    with pytest.raises(ValueError, match=r"model: expected a decoder-only model with model\.layers"):
        quantize_model_w8a8(torch.nn.Linear(4, 4))
