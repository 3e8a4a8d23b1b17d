"""Quantized layers for torch models (issue 13): ``quantize`` (numpy round-to-nearest, torch-free) and
``QuantLinear`` (a torch.nn.Module over dqgen's fused matmul, loaded on first use so the package imports without
torch)."""

from .quantize import quantize

__all__ = ["QuantLinear", "quantize"]


def __getattr__(name: str) -> object:
    if name == "QuantLinear":
        from .linear import QuantLinear

        return QuantLinear
    raise AttributeError(f"module 'dqgen.nn' has no attribute {name!r}")
