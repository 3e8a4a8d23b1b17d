"""``W8A8Linear``: a torch.nn.Module over dqgen's W8A8 GEMM. The weight is quantized once per output channel (int8,
or e4m3 with kind="fp8"), optionally after SmoothQuant smoothing; each forward quantizes its input per token on
the fly (dqgen.w8a8.quantize_activations, dividing by the smoothing factors) and runs the GEMM with both scales
(and the bias) in its epilogue."""

from __future__ import annotations

from typing import Any

import torch

from ..w8a8 import quantize_weight, smooth_linear
from ..w8a8.gemm_reference import WeightKind
from ..w8a8.matmul_op import matmul, quantize_activations_fp8
from ..w8a8.op import quantize_activations


class W8A8Linear(torch.nn.Module):
    """y = x @ W.T (+ bias) for x [..., K] float16 / bfloat16, y [..., N] in x's dtype. Buffers: ``weight`` codes
    [N, K] (int8 or float8_e4m3fn), ``weight_scale`` [N] float32, ``bias`` [N] or None, ``smooth`` [K] float32 or
    None (the input is divided by it before quantization). Build one with ``from_linear``."""

    weight: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(
        self,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        smooth: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if weight.dtype not in (torch.int8, torch.float8_e4m3fn) or weight.dim() != 2:
            raise ValueError(
                f"weight: expected int8 or float8_e4m3fn codes [N, K], got {weight.dtype} {list(weight.shape)}"
            )
        self.out_features, self.in_features = (int(d) for d in weight.shape)
        if weight_scale.dtype != torch.float32 or tuple(weight_scale.shape) != (self.out_features,):
            got = f"{weight_scale.dtype} {list(weight_scale.shape)}"
            raise ValueError(f"weight_scale: expected float32 [N={self.out_features}], got {got}")
        if bias is not None and tuple(bias.shape) != (self.out_features,):
            raise ValueError(f"bias: expected [N={self.out_features}] or None, got {list(bias.shape)}")
        if smooth is not None and tuple(smooth.shape) != (self.in_features,):
            raise ValueError(f"smooth: expected [K={self.in_features}] or None, got {list(smooth.shape)}")
        self.kind: WeightKind = "int8" if weight.dtype == torch.int8 else "fp8"
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("bias", bias)
        self.register_buffer("smooth", None if smooth is None else smooth.float())

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        *,
        act_absmax: torch.Tensor | None = None,
        alpha: float = 0.5,
        kind: WeightKind = "int8",
    ) -> W8A8Linear:
        """Quantize ``linear`` (on its device). With ``act_absmax`` [K] (max |x| per input channel from
        calibration) the layer is smoothed first (SmoothQuant, migration strength ``alpha``):
        W * s along K, computed in float32, then quantized; the input is divided by s on the fly."""
        if not isinstance(linear, torch.nn.Linear):
            raise ValueError(f"linear: expected a torch.nn.Linear, got {type(linear).__name__}")
        weight = linear.weight.detach().float()
        bias = None if linear.bias is None else linear.bias.detach().clone()
        smooth = None
        if act_absmax is not None:
            smoothed = smooth_linear(weight, bias, act_absmax, alpha)
            weight, smooth = smoothed.weight, smoothed.smooth
        codes, scale = quantize_weight(weight, kind)
        return cls(codes, scale, bias, smooth)

    def _apply(self, fn: Any, recurse: bool = True) -> W8A8Linear:
        # Buffers follow a device move but keep their dtypes: .half() would turn the e4m3 codes and the float32
        # scales into other numbers (the forward casts the bias to x's dtype itself).
        for name, t in self._buffers.items():
            if t is None:
                continue
            moved = fn(t)
            if moved.dtype != t.dtype:
                moved = t.to(moved.device)
            self._buffers[name] = moved
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dimension {self.in_features} (in_features), got {list(x.shape)}")
        x2 = x.reshape(-1, self.in_features)
        if self.kind == "int8":
            q, s = quantize_activations(x2, self.smooth)
        else:
            q, s = quantize_activations_fp8(x2, self.smooth)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        y = matmul(q, s, self.weight, self.weight_scale, bias, x.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, kind={self.kind}, "
            f"smoothed={self.smooth is not None}, bias={self.bias is not None}"
        )
