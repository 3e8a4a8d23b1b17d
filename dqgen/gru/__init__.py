"""The int8 quantized haste GRU (issue 16): calibration, derived requantization, bit-exact reference, CUDA cell."""

from ..core.optional import require_torch
from .calibrate import calibrate
from .params import QParam, QuantGRUParams
from .requant import Rescale, derive
from .stack import QuantGRUStack

__all__ = ["QParam", "QuantGRU", "QuantGRUParams", "QuantGRUStack", "Rescale", "calibrate", "derive", "quantize"]


def __getattr__(name: str) -> object:
    # dqgen.gru.quantize / QuantGRU need torch: loaded on first use, so the numpy core imports without it
    if name in ("quantize", "QuantGRU"):
        require_torch(f"dqgen.gru.{name}")
        from . import module

        return getattr(module, name)
    raise AttributeError(f"module 'dqgen.gru' has no attribute {name!r}")
