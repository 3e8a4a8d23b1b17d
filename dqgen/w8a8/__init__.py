"""SmoothQuant W8A8 (issue 15): activation quantization (a generated kernel, bit-exact with a numpy reference),
the smoothing-factor conversion of linear layers, per-channel weight quantization and the int8 / fp8 GEMM with
the scales in its epilogue (templates/w8a8_gemm.cu.j2)."""

from __future__ import annotations

import sys
from typing import Any

from ..core.optional import require_torch
from . import gemm_reference, reference
from .smooth import SmoothedLinear, smooth_factors, smooth_linear

__all__ = [
    "SmoothedLinear",
    "gemm_reference",
    "matmul",
    "quantize_activations",
    "quantize_weight",
    "reference",
    "rmsnorm_quantize",
    "silu_mul_quantize",
    "smooth_factors",
    "smooth_linear",
]


def quantize_weight(w: Any, kind: gemm_reference.WeightKind = "int8") -> tuple[Any, Any]:
    """Per-output-channel quantization of a weight [N, K] (torch.nn.Linear's layout) to (codes [N, K], scale [N]
    float32): int8 (kind="int8", scale max|W[n]| / 127) or e4m3 (kind="fp8", / 448). A torch tensor is quantized
    on its device (torch tensors back); anything else with numpy (dqgen.w8a8.gemm_reference.quantize_weight)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(w, torch.Tensor):
        from .matmul_op import quantize_weight as on_device

        return on_device(w, kind)
    return gemm_reference.quantize_weight(w, kind)


def __getattr__(name: str) -> object:
    # the torch custom ops are loaded on first use, so the numpy core imports without torch
    if name == "quantize_activations":
        require_torch("dqgen.w8a8.quantize_activations")
        from .op import quantize_activations

        return quantize_activations
    if name in ("rmsnorm_quantize", "silu_mul_quantize"):
        require_torch(f"dqgen.w8a8.{name}")
        from . import producer_op

        return getattr(producer_op, name)
    if name == "matmul":
        require_torch("dqgen.w8a8.matmul")
        from .matmul_op import matmul

        return matmul
    raise AttributeError(f"module 'dqgen.w8a8' has no attribute {name!r}")
