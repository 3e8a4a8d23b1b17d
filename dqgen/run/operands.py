"""The checks of a matmul's torch operands, written once for every path that takes them (the GEMV, the GEMM and
dequantize + cuBLAS): each tensor a CUDA torch.Tensor; ``x`` [..., K] in the spec's target dtype with a unit last
stride on the weight's device; ``bias`` a contiguous (N,) vector of that dtype; ``out`` a contiguous [..., N]
tensor of that dtype. Each error is one line naming the tensor. Also the one alignment fact of x the kernels
branch on (``x_aligned``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.formats import torch_dtype
from ..core.spec import Spec
from .errors import ShapeError


def check_torch_tensor(torch: Any, name: str, t: Any) -> None:
    """``t`` is a CUDA torch.Tensor (a TypeError, or a ValueError for a host tensor, naming it)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise ValueError(f"{name}: expected a CUDA tensor, got one on {t.device}")


def check_torch_tensors(torch: Any, named: Iterable[tuple[str, Any]]) -> None:
    """check_torch_tensor on each (name, tensor) that is given (None: an optional tensor left out)."""
    for name, t in named:
        if t is not None:
            check_torch_tensor(torch, name, t)


def check_activation(
    torch: Any, spec: Spec, x: Any, K: int, N: int, device: int, bias: Any, out: Any
) -> tuple[Any, Any]:
    """The call's checks (one line naming the tensor): x [..., K] in the target dtype with a unit last stride,
    bias (N,), out [..., N] contiguous, all on the weight's device. Returns (x as [M, K], out), out allocated when
    none was given."""
    dt = torch_dtype(spec.target_type, torch)
    check_torch_tensor(torch, "x", x)
    if x.dtype != dt:
        raise ShapeError(f"x: expected dtype {spec.target.value} (the spec's target), got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != K:
        raise ShapeError(f"x: expected shape [..., {K}] (K of the weight), got {tuple(x.shape)}")
    if x.device.index != device:
        raise ShapeError(f"x: on CUDA device {x.device.index}, but the weight is on device {device}")
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, K) if x.dim() != 2 else x
    if K > 1 and x2.stride(1) != 1:
        raise ShapeError(f"x: expected a unit stride along K, got strides {tuple(x.stride())}; call .contiguous()")
    if bias is not None:
        check_torch_tensor(torch, "bias", bias)
        if bias.dtype != dt or tuple(bias.shape) != (N,) or not bias.is_contiguous():
            raise ShapeError(
                f"bias: expected a contiguous ({N},) {spec.target.value} tensor, got {tuple(bias.shape)} {bias.dtype}"
            )
        if bias.device.index != device:
            raise ShapeError(f"bias: on CUDA device {bias.device.index}, but the weight is on device {device}")
    if out is None:
        out = torch.empty((*lead, N), dtype=dt, device=x.device)
    else:
        check_torch_tensor(torch, "out", out)
        if out.dtype != dt or tuple(out.shape) != (*lead, N) or not out.is_contiguous():
            raise ShapeError(
                f"out: expected a contiguous {(*lead, N)} {spec.target.value} tensor, "
                f"got {tuple(out.shape)} {out.dtype}"
            )
        if out.device.index != device:
            raise ShapeError(f"out: on CUDA device {out.device.index}, but the weight is on device {device}")
    return x2, out


def x_aligned(ptr: int, row_stride: int, K: int, itemsize: int = 2) -> bool:
    """Whether the kernels may copy the rows of an activation [rows, K] (elements of ``itemsize`` bytes; row_stride
    in elements) in 16-byte vectors: every 16-byte chunk of a row starts 16-byte aligned (PTX: a cp.async source
    is aligned to cp-size) and lies wholly inside its row (K a whole number of chunks, so the kernel's per-chunk
    predicate k < K never lets a copy run into the next row). The GEMV's ``xvec``, the GEMM's direct entry and the
    W8A8 GEMM's in-place operands (int8 / e4m3: itemsize 1) all read this."""
    return ptr % 16 == 0 and (row_stride * itemsize) % 16 == 0 and (K * itemsize) % 16 == 0
