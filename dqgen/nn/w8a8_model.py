"""A whole Llama-style model on the int8 W8A8 GEMM with each linear's input quantizer fused into the op that makes it
(issue 24: quantize + GEMM within 5% of the GEMM alone):

- ``W8A8RMSNorm`` replaces a decoder layer's ``input_layernorm`` / ``post_attention_layernorm``: the norm and the
  per-token quantization in one kernel (dqgen.w8a8.rmsnorm_quantize), its output a ``QuantizedActivation`` that q, k
  and v (or the MLP) read as codes, so the attention's three projections share one quantization;
- ``W8A8MLP`` replaces the MLP: gate and up merged into one W8A8 GEMM (N = 2 x intermediate), SiLU(gate) * up
  quantized in one kernel (dqgen.w8a8.silu_mul_quantize), then down;
- ``quantize_model_w8a8`` converts a model's decoder layers (``model.model.layers``: Llama, Mistral, Qwen2 and any
  model with their layer layout), checking each norm against HF's RMSNorm formula on a probe first.

Without smoothing (SmoothQuant's factors would fold into the norms' weights; not done here). Under torch.compile the
norm returns its float output and each linear quantizes its own input (the fused carrier is an eager / CUDA-graph
path). Inference only, as the W8A8 linears are: the codes carry no gradient."""

from __future__ import annotations

import time
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from ..w8a8 import quantize_weight
from .quantized_activation import QuantizedActivation
from .w8a8_linear import W8A8Linear

__all__ = ["W8A8MLP", "W8A8ModelReport", "W8A8RMSNorm", "quantize_model_w8a8"]


def _rmsnorm_float(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF LlamaRMSNorm's formula (the reference a norm is checked against, and the compiled / CPU path)."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class W8A8RMSNorm(torch.nn.Module):
    """RMSNorm whose output is quantized per token in the same kernel: forward(x [..., K] float16 / bfloat16 on a
    GPU) -> QuantizedActivation (codes and row scales; any op but a W8A8 linear sees the dequantized tensor)."""

    weight: torch.Tensor

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        if weight.dim() != 1 or weight.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"weight: expected float16 / bfloat16 [K], got {weight.dtype} {list(weight.shape)}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (0 <= eps < float("inf")):
            raise ValueError(f"eps: expected a finite float >= 0, got {eps!r}")
        self.register_buffer("weight", weight.detach().contiguous())
        self.eps = float(eps)

    @classmethod
    def from_norm(cls, norm: Any) -> W8A8RMSNorm:
        """From an HF RMSNorm (``weight`` and ``variance_epsilon`` or ``eps``); a ValueError if ``norm`` does not
        compute HF LlamaRMSNorm's formula on a probe (Gemma's 1 + weight, a LayerNorm, ...)."""
        weight = getattr(norm, "weight", None)
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
        if not isinstance(weight, torch.Tensor) or not isinstance(eps, (int, float)):
            raise ValueError(f"norm: expected an RMSNorm with weight and variance_epsilon, got {type(norm).__name__}")
        gen = torch.Generator(device=weight.device).manual_seed(0)  # the caller's random stream left alone
        probe = torch.randn(4, weight.shape[0], device=weight.device, generator=gen).to(weight.dtype) * 3
        with torch.no_grad():
            same = torch.equal(norm(probe), _rmsnorm_float(probe, weight, float(eps)))
        if not same:
            raise ValueError(
                f"norm: {type(norm).__name__} does not compute HF's RMSNorm, x * rsqrt(mean(x^2) + eps) * w"
            )
        return cls(weight.detach(), float(eps))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            torch.compiler.is_compiling()
            or x.device.type != "cuda"
            or x.shape[-1] % 8
            or x.dtype != self.weight.dtype  # the fused kernel takes x and the weight in one 16-bit dtype
        ):
            return _rmsnorm_float(x, self.weight, self.eps)
        from ..w8a8.producer_op import rmsnorm_quantize

        q, scale = rmsnorm_quantize(x.reshape(-1, x.shape[-1]), self.weight, self.eps)
        return QuantizedActivation(q.view(x.shape), scale.view(x.shape[:-1]), x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class W8A8MLP(torch.nn.Module):
    """down(SiLU(gate(x)) * up(x)) with gate / up one W8A8 GEMM ([gate | up] out) and SiLU-and-mul fused into down's
    input quantization."""

    def __init__(self, gate_up: W8A8Linear, down: W8A8Linear) -> None:
        super().__init__()
        if gate_up.out_features != 2 * down.in_features:
            raise ValueError(
                f"gate_up: expected 2 x down's in_features = {2 * down.in_features} outputs, got {gate_up.out_features}"
            )
        self.gate_up = gate_up
        self.down = down

    @classmethod
    def from_mlp(cls, mlp: Any) -> W8A8MLP:
        """From an HF gated MLP (gate_proj, up_proj, down_proj linears, act_fn SiLU)."""
        gate, up, down = (getattr(mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj"))
        if not all(type(m) is torch.nn.Linear for m in (gate, up, down)):
            raise ValueError(f"mlp: expected gate_proj, up_proj and down_proj nn.Linear, got {type(mlp).__name__}")
        assert isinstance(gate, torch.nn.Linear) and isinstance(up, torch.nn.Linear)
        act = getattr(mlp, "act_fn", None)
        probe = torch.linspace(-12, 12, 4096, device=gate.weight.device).to(gate.weight.dtype)
        with torch.no_grad():
            silu = callable(act) and torch.equal(act(probe), torch.nn.functional.silu(probe))
        if not silu:  # transformers 4 names it nn.SiLU, 5 SiLUActivation: what it computes is checked
            raise ValueError(f"mlp: expected act_fn SiLU, got {type(act).__name__} (not x * sigmoid(x) on a probe)")
        assert isinstance(down, torch.nn.Linear)
        if (gate.bias is None) != (up.bias is None):
            raise ValueError("mlp: gate_proj and up_proj must both have a bias or neither")
        # per output channel, so [gate; up]'s codes are each layer's own (quantized in place of a merged nn.Linear,
        # whose construction would initialise 2 x intermediate x hidden floats on the host first)
        codes, scale = quantize_weight(torch.cat([gate.weight.detach(), up.weight.detach()]).float(), "int8")
        bias = None if gate.bias is None or up.bias is None else torch.cat([gate.bias, up.bias]).detach()
        return cls(W8A8Linear(codes, scale, bias), W8A8Linear.from_linear(down))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.gate_up(x)
        if torch.compiler.is_compiling() or h.device.type != "cuda" or self.down.in_features % 8:
            g, u = h.chunk(2, dim=-1)
            return self.down(torch.nn.functional.silu(g) * u)
        from ..w8a8.producer_op import silu_mul_quantize

        q, scale = silu_mul_quantize(h.reshape(-1, h.shape[-1]))
        codes = q.view(*h.shape[:-1], self.down.in_features)
        return self.down.forward_quantized(codes, scale.view(h.shape[:-1]), h.dtype)


class W8A8ModelReport(BaseModel):
    """What ``quantize_model_w8a8`` did: the converted decoder layers (indices), the skipped ones with the reason,
    and the seconds it took (the GPU synchronized)."""

    model_config = ConfigDict(extra="forbid")

    converted: list[int]
    skipped: dict[int, str]
    seconds: float


def _convert_layer(layer: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The replacements of one decoder layer (nothing is set until all of them are built)."""
    attn = getattr(layer, "self_attn", None)
    if attn is None or not hasattr(layer, "mlp"):
        raise ValueError(f"expected a decoder layer with self_attn and mlp, got {type(layer).__name__}")
    new: dict[str, torch.nn.Module] = {
        "input_layernorm": W8A8RMSNorm.from_norm(getattr(layer, "input_layernorm", None)),
        "post_attention_layernorm": W8A8RMSNorm.from_norm(getattr(layer, "post_attention_layernorm", None)),
        "mlp": W8A8MLP.from_mlp(getattr(layer, "mlp", None)),
    }
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        lin = getattr(attn, name, None)
        if type(lin) is not torch.nn.Linear:
            raise ValueError(f"self_attn.{name}: expected an nn.Linear, got {type(lin).__name__}")
        new[f"self_attn.{name}"] = W8A8Linear.from_linear(lin)
    return new


def quantize_model_w8a8(model: torch.nn.Module) -> W8A8ModelReport:
    """Convert, in place, every decoder layer of a Llama-style model (``model.model.layers``) to int8 W8A8 with the
    quantizers fused into the norms and the SiLU-and-mul; a layer that is not of that layout is left as it is,
    with its reason in the report (the embedding, the final norm and lm_head stay as they are)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"model: expected a decoder-only model with model.layers, got {type(model).__name__}")
    start = time.perf_counter()
    converted: list[int] = []
    skipped: dict[int, str] = {}
    for i, layer in enumerate(layers):
        try:
            new = _convert_layer(layer)
        except ValueError as e:
            skipped[i] = str(e)
            continue
        for path, module in new.items():
            parent: Any = layer
            *up, leaf = path.split(".")
            for part in up:
                parent = getattr(parent, part)
            setattr(parent, leaf, module)
        converted.append(i)
    if any(p.is_cuda for p in model.parameters()) or any(b.is_cuda for b in model.buffers()):
        torch.cuda.synchronize()
    return W8A8ModelReport(converted=converted, skipped=skipped, seconds=time.perf_counter() - start)
