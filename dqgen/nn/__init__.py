"""Quantized layers for torch models (issue 13): ``quantize`` (numpy round-to-nearest, torch-free) and
``QuantLinear`` (a torch.nn.Module over dqgen's fused matmul, loaded on first use so the package imports without
torch)."""

from ..core.optional import require_torch
from .quantize import quantize

__all__ = ["QuantLinear", "W8A8Linear", "quantize"]


def __getattr__(name: str) -> object:
    # the torch-only names load on first use; without torch, one line naming the extra
    if name == "QuantLinear":
        require_torch("dqgen.nn.QuantLinear")
        from .linear import QuantLinear

        return QuantLinear
    if name == "W8A8Linear":
        require_torch("dqgen.nn.W8A8Linear")
        from .w8a8_linear import W8A8Linear

        return W8A8Linear
    raise AttributeError(f"module 'dqgen.nn' has no attribute {name!r}")
