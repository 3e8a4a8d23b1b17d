"""Quantized layers for torch models (issue 13): ``quantize`` (numpy round-to-nearest, torch-free) and
``QuantLinear`` (a torch.nn.Module over dqgen's fused matmul, loaded on first use so the package imports without
torch)."""

from ..core.optional import require_torch
from .quantize import quantize

__all__ = [
    "W8A8MLP",
    "QuantLinear",
    "QuantizedActivation",
    "W4A8Linear",
    "W8A8Linear",
    "W8A8RMSNorm",
    "from_pretrained",
    "quantize",
    "quantize_model",
    "quantize_model_w8a8",
    "replace_linears",
    "save_quantized",
]


def __getattr__(name: str) -> object:
    # the torch-only names load on first use; without torch, one line naming the extra
    if name == "QuantLinear":
        require_torch("dqgen.nn.QuantLinear")
        from .linear import QuantLinear

        return QuantLinear
    if name == "quantize_model":
        require_torch("dqgen.nn.quantize_model")
        from .model_quantize import quantize_model

        return quantize_model
    if name == "save_quantized":
        require_torch("dqgen.nn.save_quantized")
        from .save import save_quantized

        return save_quantized
    if name == "W4A8Linear":
        require_torch("dqgen.nn.W4A8Linear")
        from .w4a8_linear import W4A8Linear

        return W4A8Linear
    if name == "W8A8Linear":
        require_torch("dqgen.nn.W8A8Linear")
        from .w8a8_linear import W8A8Linear

        return W8A8Linear
    if name in ("W8A8MLP", "W8A8RMSNorm", "quantize_model_w8a8"):
        require_torch(f"dqgen.nn.{name}")
        from . import w8a8_model

        return getattr(w8a8_model, name)
    if name == "QuantizedActivation":
        require_torch("dqgen.nn.QuantizedActivation")
        from .quantized_activation import QuantizedActivation

        return QuantizedActivation
    if name in ("from_pretrained", "replace_linears"):
        require_torch(f"dqgen.nn.{name}")
        from . import load

        return getattr(load, name)
    raise AttributeError(f"module 'dqgen.nn' has no attribute {name!r}")
