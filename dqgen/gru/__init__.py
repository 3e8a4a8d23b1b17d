"""The int8 quantized haste GRU (issue 16): calibration, derived requantization, bit-exact reference, CUDA cell."""

from .calibrate import calibrate
from .params import QParam, QuantGRUParams
from .requant import Rescale, derive

__all__ = ["QParam", "QuantGRUParams", "Rescale", "calibrate", "derive"]
