"""``W8A8Linear``: a torch.nn.Module over dqgen's W8A8 GEMM. The weight is quantized once per output channel (int8,
or e4m3 with kind="fp8"), optionally after SmoothQuant smoothing; each forward quantizes its input per token on
the fly (dqgen.w8a8.quantize_activations, dividing by the smoothing factors) and runs the GEMM with both scales
(and the bias) in its epilogue."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch

from ..run import device as dev
from ..run.bound_x import launch_patched
from ..run.fastcall import FastTable
from ..w8a8 import matmul_op, op, quantize_weight, smooth_linear
from ..w8a8.gemm_reference import WeightKind
from ..w8a8.matmul_op import matmul, quantize_activations_fp8
from ..w8a8.op import quantize_activations
from .buffers import move_buffers
from .quantized_activation import QuantizedActivation

#: Start of each part of a forward's scratch buffer, in bytes: a multiple of 256 (the GEMM's cp.async and the
#: quantizer's vector stores need 16; torch's own allocations start on 512).
_ALIGN = 256


def _up(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


@dataclasses.dataclass(slots=True, eq=False)
class _Forward:
    """One input signature's forward, checked once: the quantizer's and the GEMM's launches (dqgen.w8a8's _Calls,
    bound on their own), the buffers they were bound to (a replaced buffer is a miss), and the layout of the one
    scratch allocation per call that holds x_q, x_scale and the GEMM's split-K workspace (none escapes forward)."""

    quant: op._Call
    gemm: matmul_op._Call
    buffers: tuple[torch.Tensor | None, ...]  # weight, weight_scale, bias, smooth as bound
    pointers: tuple[int, ...]  # their data pointers as bound (0 for None)
    scratch_bytes: int
    scale_at: int  # x_scale's offset in the scratch
    ws_at: int  # the workspace's offset (unused without split-K)
    out_shape: tuple[int, ...]
    out_dtype: torch.dtype
    device: torch.device
    ordinal: int


_ident = threading.get_ident
_Tensor = torch.Tensor
_empty = torch.empty
_int8 = torch.int8
_raw_stream = dev.torch_raw_stream_fn(torch)


class W8A8Linear(torch.nn.Module):
    """y = x @ W.T (+ bias) for x [..., K] float16 / bfloat16, y [..., N] in x's dtype. Buffers: ``weight`` codes
    [N, K] (int8 or float8_e4m3fn), ``weight_scale`` [N] float32, ``bias`` [N] or None, ``smooth`` [K] float32 or
    None (the input is divided by it before quantization). Build one with ``from_linear``."""

    # the buffers' types (nn.Module's __getattr__ would type them Tensor | Module)
    weight: torch.Tensor
    weight_scale: torch.Tensor
    bias: torch.Tensor | None
    smooth: torch.Tensor | None

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
        #: forward's launches by input signature (a copy or a pickle of the layer starts with none)
        self._fast = FastTable()
        # load_state_dict copies into the buffers (pointers kept) or, with assign=True, replaces them: let go
        self.register_load_state_dict_post_hook(lambda module, _keys: module._fast.clear())

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
        move_buffers(self, fn)
        self._fast.clear()  # its entries hold the old buffers (a hit would miss them, but they would stay allocated)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if type(x) is QuantizedActivation:  # quantized by the op that made it (W8A8RMSNorm): the codes as they are
            return self.forward_quantized(x.q, x.scale, x.dtype)
        compiling = torch.compiler.is_compiling()
        if not compiling:
            y = self._forward_hit(x)
            if y is not None:
                return y
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dimension {self.in_features} (in_features), got {list(x.shape)}")
        x2 = x.reshape(-1, self.in_features)
        if self.kind == "int8":
            q, s = quantize_activations(x2, self.smooth)
        else:
            q, s = quantize_activations_fp8(x2, self.smooth)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        y = matmul(q, s, self.weight, self.weight_scale, bias, x.dtype)
        if not compiling:
            self._remember(x, x2, q, s, bias, y)
        return y.reshape(*x.shape[:-1], self.out_features)

    def forward_quantized(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """y [..., N] in ``dtype`` of an input already quantized per token: q int8 [..., K], scale float32 [...]
        (the fused producers' outputs: dqgen.w8a8.rmsnorm_quantize, silu_mul_quantize). An fp8 or a smoothed layer
        cannot take them (its input must be quantized its own way): one-line error."""
        if self.kind != "int8":
            raise ValueError("x: int8 codes quantized upstream reach an fp8 layer (it takes e4m3 activations)")
        if self.smooth is not None:
            raise ValueError(
                "x: codes quantized upstream reach a smoothed layer; fold its smoothing factors into the producer"
            )
        if q.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dimension {self.in_features} (in_features), got {list(q.shape)}")
        bias = None if self.bias is None else self.bias.to(dtype)
        y = matmul(q.reshape(-1, self.in_features), scale.reshape(-1), self.weight, self.weight_scale, bias, dtype)
        return y.reshape(*q.shape[:-1], self.out_features)

    def _forward_hit(self, x: torch.Tensor) -> torch.Tensor | None:
        """The forward of a signature checked before (the quantizer's and the GEMM's launches with this call's
        pointers patched in: one scratch allocation for x_q, x_scale and the workspace, one for y), or None."""
        if type(x) is not _Tensor:  # a subclass keeps its own dispatch; a non-tensor is named by the checked path
            return None
        try:
            hit = self._fast.get((x.shape, x.dtype, x.get_device(), x.is_contiguous(), not x.data_ptr() % 16, _ident()))
        except RuntimeError:  # no storage (a fake tensor): the checked path
            return None
        if hit is None:
            return None
        b = self._buffers
        w, w_scale, bias, smooth = b["weight"], b["weight_scale"], b["bias"], b["smooth"]
        bound_w, bound_scale, bound_bias, bound_smooth = hit.buffers
        if w is not bound_w or w_scale is not bound_scale or bias is not bound_bias or smooth is not bound_smooth:
            return None  # a buffer was replaced (moved, reassigned): checked again
        if (w.data_ptr(), w_scale.data_ptr()) != hit.pointers[:2] or (
            (bias is not None and bias.data_ptr() != hit.pointers[2])
            or (smooth is not None and smooth.data_ptr() != hit.pointers[3])
        ):
            return None  # the same tensor over other memory (set_): checked again
        # sizes passed as ints: torch parses them faster than a tuple (about 0.5 us an allocation)
        scratch = _empty(hit.scratch_bytes, dtype=_int8, device=hit.device)
        y = _empty(*hit.out_shape, dtype=hit.out_dtype, device=hit.device)
        base = scratch.data_ptr()
        stream = _raw_stream(hit.ordinal)
        qc = hit.quant
        slots = qc.slots
        slots[qc.x_slot] = x.data_ptr()
        slots[qc.q_slot] = base
        slots[qc.scale_slot] = base + hit.scale_at
        err = qc.launch(stream, qc.params, 0)[0]
        if err:
            qc.fn.failed(err, stream)
        # x's slot patched, or the launch bound for x's tensor map at base (Hopper), with its slots
        launch_patched(hit.gemm.bound_for(base), (base + hit.scale_at, y.data_ptr(), base + hit.ws_at), stream)
        return y  # the scratch goes back to torch's caching allocator after both launches, stream-ordered

    def _remember(
        self, x: torch.Tensor, x2: torch.Tensor, q: torch.Tensor, s: torch.Tensor, bias: Any, y: torch.Tensor
    ) -> None:
        """After a checked int8 forward on a contiguous x: bind its two launches for the signature (where both
        ops can: dqgen.w8a8's plan), the bias only where it is a buffer in x's dtype (a cast copy would go stale)."""
        if self.kind != "int8" or type(x) is not torch.Tensor or not x.is_contiguous() or x2.shape[0] == 0:
            return
        if self.bias is not None and bias is not self.bias:
            return
        quant = op.plan(x2, self.smooth, None)
        gemm = matmul_op.plan(q, s, self.weight, self.weight_scale, bias, x.dtype)
        if quant is None or gemm is None:
            return
        m, k = quant.shape
        scale_at = _up(m * k)
        ws_at = scale_at + _up(4 * m)
        key = (x.shape, x.dtype, x.get_device(), x.is_contiguous(), not x.data_ptr() % 16, _ident())
        buffers = (self.weight, self.weight_scale, self.bias, self.smooth)
        self._fast.put(
            key,
            _Forward(
                quant, gemm, buffers, tuple(0 if t is None else t.data_ptr() for t in buffers),
                ws_at + 4 * gemm.ws_elems, scale_at, ws_at, (*x.shape[:-1], self.out_features), x.dtype,
                gemm.device, gemm.ordinal,
            ),
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, kind={self.kind}, "
            f"smoothed={self.smooth is not None}, bias={self.bias is not None}"
        )
