"""The activation quantizer fused into the op that makes its input (issue 24: quantize + GEMM within 5% of the GEMM
alone): ``rmsnorm_quantize`` (HF LlamaRMSNorm, then the per-token int8 codes) and ``silu_mul_quantize`` (HF
LlamaMLP's SiLU(gate) * up from the merged gate / up projection, then the codes). x is read once and only its int8
codes and row scales are written: the float activation a separate quantizer would read back never goes to memory.

Both are torch custom ops (``dqgen::rmsnorm_quantize``, ``dqgen::silu_mul_quantize``) for torch.compile, and in eager
mode go through dqgen.w8a8.op's signature cache (one bound launch a signature). The kernel is the activation
quantizer's (templates/act_quant.cu.j2, its prologues); dqgen.w8a8.reference.rmsnorm / silu_mul state the
arithmetic."""

from __future__ import annotations

import math

import torch

from . import op

__all__ = ["rmsnorm_quantize", "silu_mul_quantize"]


def _check_x(x: torch.Tensor, name: str, halves: bool) -> None:
    """x's one-line errors, shared by both producers (``halves``: a row is [gate | up], the codes half as wide)."""
    op.check_inputs(x, None, None, name)  # the quantizer's own checks of x (type, dtype, 2-D, device, rows)
    if halves and x.shape[1] % 2:
        raise ValueError(f"{name}: expected [M, 2K] ([gate | up]), got an odd width {x.shape[1]}")
    k = x.shape[1] // 2 if halves else x.shape[1]
    if k % 8 or k == 0:
        raise ValueError(f"{name}: the fused quantizer takes rows of a positive multiple of 8 elements, got {k}")
    if x.shape[0] > 1 and x.stride(0) % 8:
        raise ValueError(
            f"{name}: expected rows a multiple of 8 elements apart (16-byte vectors), got stride {x.stride(0)}"
        )
    if not torch.compiler.is_compiling() and x.data_ptr() % 16:  # traced tensors have no address: checked when run
        raise ValueError(f"{name}: expected a 16-byte aligned start (the kernel reads 16-byte vectors)")


def _check_rmsnorm(x: torch.Tensor, producer: op.Producer) -> None:
    _check_x(x, "x", False)
    gamma, eps = producer.gamma, producer.eps
    if not isinstance(gamma, torch.Tensor):
        raise ValueError(f"weight: expected the RMSNorm's weight tensor [K], got {type(gamma).__name__}")
    if tuple(gamma.shape) != (x.shape[1],) or gamma.dtype != x.dtype:
        raise ValueError(f"weight: expected {x.dtype} [K={x.shape[1]}], got {gamma.dtype} {list(gamma.shape)}")
    if gamma.device != x.device:
        raise ValueError(f"weight: expected x's device {x.device}, got {gamma.device}")
    if gamma.stride(0) != 1 or (not torch.compiler.is_compiling() and gamma.data_ptr() % 16):
        raise ValueError("weight: expected a contiguous vector starting on a 16-byte boundary")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise ValueError(f"eps: expected a float, got {type(eps).__name__}")
    if torch.compiler.is_compiling():  # a traced constant; its float32 is checked when the op runs
        e32 = float(eps)
    else:
        try:
            e32 = op._as_f32(eps)  # what the kernel gets
        except OverflowError:
            e32 = math.inf
    if not (math.isfinite(e32) and e32 >= 0):
        raise ValueError(f"eps: expected a float >= 0 that is finite in float32, got {eps!r}")


def _check_silu_mul(x: torch.Tensor, producer: op.Producer) -> None:
    _check_x(x, "gate_up", True)


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return op._call(x, None, None, op.Producer("rmsnorm", weight, eps), _check_rmsnorm)


_SILU_MUL = op.Producer("silu_mul")


def _silu_mul(gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return op._call(gate_up, None, None, _SILU_MUL, _check_silu_mul)


@torch.library.custom_op("dqgen::rmsnorm_quantize", mutates_args=(), device_types="cuda")
def rmsnorm_quantize_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _rmsnorm(x, weight, eps)


@rmsnorm_quantize_op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty((x.shape[0],), dtype=torch.float32)


@torch.library.custom_op("dqgen::silu_mul_quantize", mutates_args=(), device_types="cuda")
def silu_mul_quantize_op(gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _silu_mul(gate_up)


@silu_mul_quantize_op.register_fake
def _(gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, k2 = gate_up.shape
    return gate_up.new_empty((m, k2 // 2), dtype=torch.int8), gate_up.new_empty((m,), dtype=torch.float32)


def rmsnorm_quantize(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of x [M, K] (float16 / bfloat16, K a multiple of 8) with ``weight`` [K] in x's dtype, quantized per
    row: (x_q int8 [M, K], x_scale float32 [M]) with rmsnorm(x) ~ x_q * x_scale[:, None], the codes those of
    ``quantize_activations(LlamaRMSNorm(x))`` (the norm in HF's order; dqgen.w8a8.reference.rmsnorm). SmoothQuant's
    factors fold into ``weight`` (weight / s) before the call."""
    if torch.compiler.is_compiling():
        _check_rmsnorm(x, op.Producer("rmsnorm", weight, eps))
        return torch.ops.dqgen.rmsnorm_quantize(x, weight, float(eps))
    return _rmsnorm(x, weight, eps)


def silu_mul_quantize(gate_up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SiLU(gate) * up of gate_up [M, 2K] = [gate | up] (the merged gate / up projection's output, float16 /
    bfloat16, K a multiple of 8), quantized per row: (x_q int8 [M, K], x_scale float32 [M])."""
    if torch.compiler.is_compiling():
        _check_silu_mul(gate_up, _SILU_MUL)
        return torch.ops.dqgen.silu_mul_quantize(gate_up)
    return _silu_mul(gate_up)
