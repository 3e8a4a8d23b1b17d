"""SmoothQuant W8A8 (issue 15): activation quantization (a generated kernel, bit-exact with a numpy reference)
and the smoothing-factor conversion of linear layers."""

from . import reference
from .smooth import SmoothedLinear, smooth_factors, smooth_linear

__all__ = ["SmoothedLinear", "quantize_activations", "reference", "smooth_factors", "smooth_linear"]


def __getattr__(name: str) -> object:
    # quantize_activations is a torch custom op: loaded on first use, so the numpy core imports without torch
    if name == "quantize_activations":
        from .op import quantize_activations

        return quantize_activations
    raise AttributeError(f"module 'dqgen.w8a8' has no attribute {name!r}")
