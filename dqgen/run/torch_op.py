"""The dqgen call as torch custom ops, so that ``torch.compile`` puts it in its graph (and CUDA graphs of
``mode="reduce-overhead"`` capture it) instead of breaking the graph at the ctypes launch.

Two ops, both keyed by a Kernel's ``op_key`` (a string the graph can hold): ``dqgen::dequantize`` returns a new
output (a functional op: no aliasing for the compiler to track), ``dqgen::dequantize_out`` writes a given ``out``
(declared mutated, which torch.compile functionalizes). Their fake implementations only shape the output.
Imported by dqgen.run.runtime once torch is loaded; never imports torch on its own before that."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..core.formats import torch_dtype

if TYPE_CHECKING:
    from .runtime import Kernel

_registered = False
#: runtime's live Kernels by op_key, handed over by register() (importing runtime here would be a cycle).
_kernels: Mapping[str, Kernel] = {}


def kernel_by_key(key: str) -> Kernel:
    """A live Kernel by its op_key (the string a traced graph holds); dqgen.run.matmul_op's ops read it too."""
    return _kernels[key]


def _dtype(kernel: Kernel) -> torch.dtype:
    return torch_dtype(kernel.spec.target_type, torch)


def register(kernels: Mapping[str, Kernel]) -> None:
    global _registered, _kernels
    if _registered:
        return
    _registered = True
    _kernels = kernels

    @torch.library.custom_op("dqgen::dequantize", mutates_args=(), device_types="cuda")
    def dequantize(
        key: str,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
    ) -> torch.Tensor:
        k = kernel_by_key(key)
        return k._torch_call(torch, qweight, scales, zeros, g_idx, global_scale, None, None)

    @dequantize.register_fake
    def _(
        key: str,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
    ) -> torch.Tensor:
        k = kernel_by_key(key)
        return qweight.new_empty(k.output_shape(tuple(qweight.shape)), dtype=_dtype(k))

    @torch.library.custom_op("dqgen::dequantize_out", mutates_args=("out",), device_types="cuda")
    def dequantize_out(
        key: str,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
        out: torch.Tensor,
    ) -> None:
        kernel_by_key(key)._torch_call(torch, qweight, scales, zeros, g_idx, global_scale, out, None)

    @dequantize_out.register_fake
    def _out(
        key: str,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
        out: torch.Tensor,
    ) -> None:
        return None


def traced_call(kernel: Kernel, qweight: Any, scales: Any, zeros: Any, g_idx: Any, global_scale: Any, out: Any) -> Any:
    """What torch.compile traces for ``kernel(...)``: one op call (checks run when the compiled graph runs)."""
    if out is None:
        return torch.ops.dqgen.dequantize(kernel.op_key, qweight, scales, zeros, g_idx, global_scale)
    torch.ops.dqgen.dequantize_out(kernel.op_key, qweight, scales, zeros, g_idx, global_scale, out)
    return out
