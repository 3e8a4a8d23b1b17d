"""The dqgen calls as torch custom ops, so that ``torch.compile`` puts them in its graph (and CUDA graphs of
``mode="reduce-overhead"`` capture them) instead of breaking the graph at the ctypes launch. Every op is keyed by
a compiled spec's ``op_key`` (a string the graph can hold) and runs, when the graph runs, the eager call of the
target dqgen.run.registry finds for it. All are functional (a new output) but ``dqgen::dequantize_out``; their fake
implementations only shape the output.

- ``dqgen::dequantize`` returns a new dequantized weight; ``dqgen::dequantize_out`` writes a given ``out``
  (declared mutated, which torch.compile functionalizes);
- ``dqgen::matmul`` / ``dqgen::matmul_checkpoint``: the GEMV of specs the GEMM does not take, on a packed
  MatmulWeight (held by its key) or on the checkpoint tensors (packed once on the first eager run: call it once
  before capturing a graph);
- ``dqgen::matmul_dispatch`` / ``dqgen::matmul_dispatch_checkpoint``: the dispatch by M (dqgen.run.dispatch) of
  specs the GEMM takes, made when the op runs (under torch.compile M may be symbolic).

Imported by dqgen.run.runtime once torch is loaded; never imports torch on its own before that."""

from __future__ import annotations

from typing import Any

import torch

from ..core.formats import torch_dtype
from .matmul import weight
from .problem import output_shape
from .registry import lookup

_registered = False


def _dtype(key: str) -> torch.dtype:
    return torch_dtype(lookup(key).spec.target_type, torch)


def _weight_shape(key: str, qweight: torch.Tensor) -> tuple[int, int]:
    return output_shape(lookup(key).spec, tuple(qweight.shape))


def register() -> None:
    """Every op, once."""
    global _registered
    if _registered:
        return
    _registered = True
    _register_dequantize()
    for name in ("matmul", "matmul_dispatch"):  # the same eager call: Kernel.matmul picks the GEMV or the dispatch
        _register_matmul(name)


def _register_dequantize() -> None:
    @torch.library.custom_op("dqgen::dequantize", mutates_args=(), device_types="cuda")
    def dequantize(
        key: str,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
    ) -> torch.Tensor:
        return lookup(key).torch_call(torch, qweight, scales, zeros, g_idx, global_scale, None, None)

    @dequantize.register_fake
    def _(
        key: str,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
    ) -> torch.Tensor:
        return qweight.new_empty(_weight_shape(key, qweight), dtype=_dtype(key))

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
        lookup(key).torch_call(torch, qweight, scales, zeros, g_idx, global_scale, out, None)

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


def _register_matmul(name: str) -> None:
    """``dqgen::<name>`` (a packed MatmulWeight by its key) and ``dqgen::<name>_checkpoint``."""

    @torch.library.custom_op(f"dqgen::{name}", mutates_args=(), device_types="cuda")
    def packed(key: str, weight_key: str, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return lookup(key).matmul(x, weight(weight_key), bias=bias)

    @packed.register_fake
    def _(key: str, weight_key: str, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], weight(weight_key).N))

    @torch.library.custom_op(f"dqgen::{name}_checkpoint", mutates_args=(), device_types="cuda")
    def checkpoint(
        key: str,
        x: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        return lookup(key).matmul(x, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias)

    @checkpoint.register_fake
    def _ck(
        key: str,
        x: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        _, n = _weight_shape(key, qweight)
        return x.new_empty((*x.shape[:-1], n), dtype=_dtype(key))


def traced_call(key: str, qweight: Any, scales: Any, zeros: Any, g_idx: Any, global_scale: Any, out: Any) -> Any:
    """What torch.compile traces for ``kernel(...)``: one op call (checks run when the compiled graph runs)."""
    if out is None:
        return torch.ops.dqgen.dequantize(key, qweight, scales, zeros, g_idx, global_scale)
    torch.ops.dqgen.dequantize_out(key, qweight, scales, zeros, g_idx, global_scale, out)
    return out
