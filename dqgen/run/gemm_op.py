"""``Kernel.matmul``'s dispatch by M as torch custom ops, so that under torch.compile (where M may be symbolic) the
choice between the GEMV, the GEMM and dequantize + cuBLAS is made when the op runs, not when it is traced:
``dqgen::matmul_dispatch`` (a packed MatmulWeight, held by its key) and ``dqgen::matmul_dispatch_checkpoint``
(the checkpoint tensors, packed once on the first eager run: call it once before capturing a graph). Functional
(a new y); their fake implementations only shape it. Registered with the GEMV's ops (needs torch)."""

from __future__ import annotations

import torch

from ..core.formats import torch_dtype
from . import dispatch
from . import matmul as mm
from .torch_op import kernel_by_key as _kernel

_registered = False


def register() -> None:
    """The two ops, once, after dqgen.run.torch_op.register (the Kernels come from its registry)."""
    global _registered
    if _registered:
        return
    _registered = True

    @torch.library.custom_op("dqgen::matmul_dispatch", mutates_args=(), device_types="cuda")
    def matmul_dispatch(key: str, weight_key: str, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return dispatch.dispatch(_kernel(key), x, mm.weight(weight_key), bias=bias)

    @matmul_dispatch.register_fake
    def _(key: str, weight_key: str, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return x.new_empty((*x.shape[:-1], mm.weight(weight_key).N))

    @torch.library.custom_op("dqgen::matmul_dispatch_checkpoint", mutates_args=(), device_types="cuda")
    def matmul_dispatch_checkpoint(
        key: str,
        x: torch.Tensor,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None,
        g_idx: torch.Tensor | None,
        global_scale: torch.Tensor | None,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        return dispatch.dispatch(
            _kernel(key), x, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias
        )

    @matmul_dispatch_checkpoint.register_fake
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
        return x.new_empty((*x.shape[:-1], n), dtype=torch_dtype(k.spec.target_type, torch))
