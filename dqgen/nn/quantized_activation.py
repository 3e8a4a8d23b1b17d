"""``QuantizedActivation``: a layer's input already quantized per token by the op that made it (the fused RMSNorm of
``W8A8RMSNorm``), handed to the W8A8 linears that read it so that none quantizes it again.

It is a torch.Tensor wrapper of x's shape and float dtype holding ``q`` (int8 codes [..., K]) and ``scale`` (float32
[...]), x ~ q * scale[..., None]. A W8A8 layer takes the codes as they are; any other op sees the dequantized
tensor (``__torch_dispatch__`` dequantizes its arguments first), so code that reads the activation some other way
gets the right values, only slower. HF's attention reads nothing of it but its shape before the q / k / v
projections."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map


class QuantizedActivation(torch.Tensor):
    """x as (q int8 [..., K], scale float32 [...]); ``dtype`` is the float dtype x has in the model."""

    q: torch.Tensor
    scale: torch.Tensor

    @staticmethod
    def __new__(cls, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> QuantizedActivation:
        if q.dtype != torch.int8 or tuple(scale.shape) != tuple(q.shape[:-1]) or scale.dtype != torch.float32:
            raise ValueError(
                f"q, scale: expected int8 [..., K] and float32 [...], got {q.dtype} {list(q.shape)} and "
                f"{scale.dtype} {list(scale.shape)}"
            )
        t = torch.Tensor._make_wrapper_subclass(cls, q.shape, dtype=dtype, device=q.device)
        t.q = q
        t.scale = scale
        return t

    def dequantize(self) -> torch.Tensor:
        """x as a plain tensor of its dtype: q * scale, rounded once from float32."""
        return (self.q.to(torch.float32) * self.scale.unsqueeze(-1)).to(self.dtype)

    def __repr__(self) -> str:  # type: ignore[override,unused-ignore]
        return f"QuantizedActivation(shape={list(self.shape)}, dtype={self.dtype}, device={self.device})"

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment,unused-ignore]

    @classmethod
    def __torch_dispatch__(  # type: ignore[override,unused-ignore]
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        def plain(a: Any) -> Any:
            return a.dequantize() if isinstance(a, QuantizedActivation) else a

        return func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))
