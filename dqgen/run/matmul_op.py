"""``kernel.matmul`` as torch custom ops, so that torch.compile(fullgraph=True) keeps it in its graph and CUDA
graphs capture it: ``dqgen::matmul`` (a packed MatmulWeight, held by its key) and ``dqgen::matmul_checkpoint``
(the checkpoint tensors, packed once on the first eager run: call it once before capturing a graph). Both are
functional (a new y); their fake implementations only shape it. Imported on first traced use (needs torch)."""

from __future__ import annotations

import torch

from ..core.formats import torch_dtype
from . import matmul as mm
from .torch_op import kernel_by_key as _kernel

_registered = False


def _out_shape(x: torch.Tensor, n: int) -> tuple[int, ...]:
    return (*x.shape[:-1], n)


def register() -> None:
    """The two ops, once, after dqgen.run.torch_op.register (the Kernels come from its registry)."""
    global _registered
    if _registered:
        return
    _registered = True

    @torch.library.custom_op("dqgen::matmul", mutates_args=(), device_types="cuda")
    def matmul(key: str, weight_key: str, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return mm.run(_kernel(key), x, mm.weight(weight_key), bias=bias)

    @matmul.register_fake
    def _(key: str, weight_key: str, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return x.new_empty(_out_shape(x, mm.weight(weight_key).N))

    @torch.library.custom_op("dqgen::matmul_checkpoint", mutates_args=(), device_types="cuda")
    def matmul_checkpoint(
        key: str,
        x: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        k = _kernel(key)
        w = mm.packed(k, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale)
        return mm.run(k, x, w, bias=bias)

    @matmul_checkpoint.register_fake
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
        k = _kernel(key)
        _, n = k.output_shape(tuple(qweight.shape))
        return x.new_empty(_out_shape(x, n), dtype=torch_dtype(k.spec.target_type, torch))
