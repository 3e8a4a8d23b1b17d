"""``W4A8Linear``: a torch.nn.Module over dqgen's Hopper W4A8 GEMM. The weight is int4 (per group of 128 or more
rows of K, or per channel; with AWQ-style zero points or symmetric as GPTQ's q - 8), packed once into the W4A8
layout (dqgen.layout.w4a8); each forward quantizes its input per token on the fly (dqgen.w8a8.quantize_activations,
W8A8Linear's quantizer, dividing by SmoothQuant's factors when the layer has them) and runs
``torch.ops.dqgen.w4a8_matmul`` (dqgen.w8a8.w4a8_op) with the bias in its epilogue.

Build one from a float layer (``from_linear``: round-to-nearest int4 by dqgen.nn.quantize's rules) or from AWQ /
GPTQ checkpoint tensors (``from_checkpoint``). ``packed()`` gives the buffers back as dqgen.layout.w4a8's arrays,
which dqgen.check.w4a8_model computes the product of exactly as the kernel does (tests/w4a8_module_model.py: the
forward's numpy model, bit-equal to forward on an sm_90 GPU without split-K, within one output ulp with it)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch

from ..core.spec import Spec, load_spec, with_group_size
from ..layout.layout import Layout
from ..layout.packing import zeros_from_stored
from ..layout.w4a8 import RESCALE_K, W4A8_TILE_N, W4A8Packed, pack_w4a8
from ..w8a8 import smooth_linear
from ..w8a8.op import quantize_activations
from ..w8a8.w4a8_op import SPEC_SYMMETRIC, layout_tensors, spec_for, w4a8_matmul, weight_shape
from .buffers import move_buffers
from .quantize_torch import quantize_tensors
from .quantized_activation import QuantizedActivation

CheckpointKind = Literal["awq", "gptq"]

#: GPTQ's checkpoint layout with zero points (qweight [K/8, N] along K; qzeros [G, N/8] along N, stored z - 1:
#: checkpoint_format "gptq", AutoGPTQ's v1): how ``from_checkpoint("gptq", ...)`` reads them.
_GPTQ_ZEROS = {
    "name": "gptq_int4_zeros_reader",
    "source": {"bits": 4, "kind": "unsigned"},
    "target": "fp16",
    "packing": {"axis": "K", "order": "sequential"},
    "scales": {"group_size": "auto"},
    "zeros": {"mode": "gptq_v1"},
}


def _float_twin(spec: Spec) -> Spec:
    """``spec`` with an fp16 target: the same checkpoint tensors (qweight, fp16 scales, qzeros), for dqgen.nn's
    round-to-nearest quantizer (it takes the scale's dtype from the target, which for the W4A8 specs is s8)."""
    data = spec.model_dump(mode="json", exclude_none=True)
    data["name"] = f"{spec.name}_fp16"
    data["target"] = "fp16"
    data.pop("arch", None)
    data["scales"].pop("dtype", None)
    return load_spec(data)


def _host(t: Any) -> np.ndarray | None:
    if t is None:
        return None
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return np.asarray((t.float() if t.dtype == torch.bfloat16 else t).numpy())
    return np.asarray(t)


def _group_size_of(K: int, scales: Any) -> int:
    groups = int(scales.shape[0]) if getattr(scales, "ndim", 0) == 2 else 0
    if groups <= 0 or K % groups:
        raise ValueError(f"scales: expected [G, N] with G dividing K = {K}, got {list(np.shape(scales))}")
    return -1 if groups == 1 else K // groups


class W4A8Linear(torch.nn.Module):
    """y = x @ W.T (+ bias) for x [..., K] float16 / bfloat16 (y [..., N] in x's dtype), W int4. Buffers (the
    W4A8 layout, dqgen.w8a8.w4a8_op's operands): ``w_q`` int32 [N/64, K/64, 128, 4], ``w_scale`` float32
    [N/64, K/128, 64], ``w_zeros`` int32 [N/64, K/128, 64] (zero points) or None (symmetric, q - 8), ``bias`` [N]
    or None, ``smooth`` [K] float32 or None (the input is divided by it before quantization). K is a multiple of
    128 and N of 64. Build one with ``from_linear`` or ``from_checkpoint``."""

    # the buffers' types (nn.Module's __getattr__ would type them Tensor | Module)
    w_q: torch.Tensor
    w_scale: torch.Tensor
    w_zeros: torch.Tensor | None
    bias: torch.Tensor | None
    smooth: torch.Tensor | None

    def __init__(
        self,
        w_q: torch.Tensor,
        w_scale: torch.Tensor,
        w_zeros: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        smooth: torch.Tensor | None = None,
        group_size: int = 128,
    ) -> None:
        super().__init__()
        for name, t in (("w_q", w_q), ("w_scale", w_scale), ("w_zeros", w_zeros), ("bias", bias), ("smooth", smooth)):
            if t is not None and not isinstance(t, torch.Tensor):
                raise ValueError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if w_scale.dtype != torch.float32 or w_scale.dim() != 3 or w_scale.shape[2] != W4A8_TILE_N:
            got = f"{w_scale.dtype} {list(w_scale.shape)}"
            raise ValueError(f"w_scale: expected float32 [N/64, K/128, 64] (the W4A8 layout's scales), got {got}")
        self.in_features, self.out_features = weight_shape(w_scale)
        k, n = self.in_features, self.out_features
        want_q = [n // W4A8_TILE_N, k // 64, 128, 4]
        if w_q.dtype != torch.int32 or list(w_q.shape) != want_q:
            raise ValueError(
                f"w_q: expected int32 {want_q} (the W4A8 layout's words), got {w_q.dtype} {list(w_q.shape)}"
            )
        if w_zeros is not None and (w_zeros.dtype != torch.int32 or w_zeros.shape != w_scale.shape):
            got = f"{w_zeros.dtype} {list(w_zeros.shape)}"
            raise ValueError(f"w_zeros: expected int32 {list(w_scale.shape)} (w_scale's shape) or None, got {got}")
        if bias is not None and tuple(bias.shape) != (n,):
            raise ValueError(f"bias: expected [N={n}] or None, got {list(bias.shape)}")
        if smooth is not None and tuple(smooth.shape) != (k,):
            raise ValueError(f"smooth: expected [K={k}] or None, got {list(smooth.shape)}")
        if (
            smooth is not None
            and smooth.device.type != "meta"
            and not bool((torch.isfinite(smooth) & (smooth > 0)).all())
        ):
            raise ValueError("smooth: expected positive finite smoothing factors (x is divided by them)")
        _check_group_size(group_size, k)
        self.group_size = group_size  # what the scales were made with (the layout holds one scale per 128-k tile)
        self.register_buffer("w_q", w_q.contiguous())
        self.register_buffer("w_scale", w_scale.contiguous())
        self.register_buffer("w_zeros", None if w_zeros is None else w_zeros.contiguous())
        self.register_buffer("bias", None if bias is None else bias.contiguous())  # the kernel reads N in a row
        self.register_buffer("smooth", None if smooth is None else smooth.float().contiguous())
        #: the bias cast to the activations' dtype, by (dtype, pointer, version) of the buffer: a cast per forward
        #: would be a new bias pointer, so a new op signature (checked and planned again), every call
        self._bias_cast: tuple[tuple[Any, ...], torch.Tensor] | None = None

    # ------------------------------------------------------------------------------------------ builders

    @classmethod
    def _packed(
        cls,
        spec: Spec,
        qweight: Any,
        scales: Any,
        qzeros: Any,
        group_size: int,
        bias: torch.Tensor | None,
        smooth: torch.Tensor | None,
        device: torch.device,
    ) -> W4A8Linear:
        """Checkpoint tensors in ``spec``'s layout packed once (on the host) into the W4A8 layout on ``device``."""
        packed = pack_w4a8(spec, _host(qweight), _host(scales), _host(qzeros), group_size)  # type: ignore[arg-type]
        w_q, w_scale, w_zeros = (None if t is None else t.to(device) for t in layout_tensors(*_arrays(packed)))
        assert w_q is not None and w_scale is not None
        # the bias and the smoothing factors go where the weight goes (a checkpoint is read on the host)
        bias = None if bias is None else bias.to(device)
        smooth = None if smooth is None else smooth.to(device)
        return cls(w_q, w_scale, w_zeros, bias, smooth, group_size)

    @classmethod
    def from_linear(
        cls,
        linear: torch.nn.Linear,
        *,
        group_size: int = 128,
        zero_point: bool = True,
        act_absmax: torch.Tensor | None = None,
        alpha: float = 0.5,
        smooth: torch.Tensor | None = None,
    ) -> W4A8Linear:
        """Quantize ``linear`` to int4 by round-to-nearest (dqgen.nn.quantize's rules, on the weight's device) per
        ``group_size`` rows of K (a multiple of 128, or -1: per output channel), with integer zero points
        (``zero_point``, AWQ-style: codes 0..15, value q - z) or symmetric (GPTQ-style: value q - 8).

        Smoothing (SmoothQuant): ``act_absmax`` [K] (max |x| per input channel from calibration) gives the factors
        s with migration strength ``alpha`` (dqgen.w8a8.smooth_factors), or ``smooth`` [K] gives them; the weight
        is W * s along K (float64, rounded to float32) before quantization and the input is divided by s on the
        fly."""
        if not isinstance(linear, torch.nn.Linear):
            raise ValueError(f"linear: expected a torch.nn.Linear, got {type(linear).__name__}")
        n, k = (int(d) for d in linear.weight.shape)
        if k % RESCALE_K or n % W4A8_TILE_N:
            raise ValueError(
                f"linear: in_features {k} and out_features {n}; W4A8 needs K a multiple of {RESCALE_K} and N of "
                f"{W4A8_TILE_N}"
            )
        _check_group_size(group_size, k)
        if act_absmax is not None and smooth is not None:
            raise ValueError("smooth: give either act_absmax (calibration) or smooth (the factors), not both")
        weight = linear.weight.detach().float()
        bias = None if linear.bias is None else linear.bias.detach().clone()
        if act_absmax is not None:
            smoothed = smooth_linear(weight, bias, act_absmax, alpha)
            weight, smooth = smoothed.weight, smoothed.smooth
        elif smooth is not None:
            if not isinstance(smooth, torch.Tensor) or tuple(smooth.shape) != (k,):
                raise ValueError(f"smooth: expected a tensor [K={k}], got {getattr(smooth, 'shape', type(smooth))}")
            s = smooth.detach().to(weight.device, torch.float32)
            if not bool(torch.isfinite(s).all()) or not bool((s > 0).all()):
                raise ValueError("smooth: expected positive finite smoothing factors")
            weight = (weight.double() * s.double()[None, :]).float()
            smooth = s
        spec = spec_for(zero_point)
        tensors = quantize_tensors(with_group_size(_float_twin(spec), group_size), weight.t(), group_size=group_size)
        return cls._packed(
            spec, tensors["qweight"], tensors["scales"], tensors.get("zeros"), group_size, bias, smooth,
            linear.weight.device,
        )  # fmt: skip

    @classmethod
    def from_checkpoint(
        cls,
        kind: CheckpointKind,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        qzeros: torch.Tensor | None = None,
        g_idx: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        smooth: torch.Tensor | None = None,
        device: Any = None,
        checkpoint_format: Literal["gptq", "gptq_v2"] = "gptq",
    ) -> W4A8Linear:
        """A layer over a checkpoint's int4 tensors as stored, packed once into the W4A8 layout (on ``device``,
        by default qweight's; the bias and smoothing factors move there too):

        - ``"awq"`` (AutoAWQ gemm): qweight int32 [K, N/8], qzeros int32 [G, N/8], scales fp16 [G, N];
        - ``"gptq"``: qweight int32 [K/8, N], scales [G, N], qzeros int32 [G, N/8] or None, and g_idx [K] or
          None; ``checkpoint_format`` as the checkpoint's quantize_config says: "gptq" (AutoGPTQ, v1: stored
          z - 1) or "gptq_v2" (GPTQModel: stored z). All zero points 8 (GPTQ's sym=True): the symmetric
          kernel on qweight as it is; other zero points: the codes and zeros repacked to AWQ's layout. Act-order
          (desc_act) checkpoints, whose g_idx is not k // group_size, are refused.

        The group size is K / G (a multiple of 128, or one group: per channel)."""
        if kind not in ("awq", "gptq"):
            raise ValueError(f"kind: expected 'awq' or 'gptq', got {kind!r}")
        if checkpoint_format not in ("gptq", "gptq_v2"):
            raise ValueError(f"checkpoint_format: expected 'gptq' or 'gptq_v2', got {checkpoint_format!r}")
        for name, t in (("qweight", qweight), ("scales", scales)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                raise ValueError(f"{name}: expected a 2-D torch.Tensor, got {getattr(t, 'shape', type(t).__name__)}")
        if qweight.dtype != torch.int32:
            raise ValueError(f"qweight: expected int32 packed words, got {qweight.dtype}")
        if scales.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise ValueError(f"scales: expected float16 / bfloat16 / float32 [G, N], got {scales.dtype}")
        dev_ = torch.device(device) if device is not None else qweight.device
        awq = spec_for(True)
        if kind == "awq":
            if qzeros is None:
                raise ValueError("qzeros: an AWQ checkpoint has zero points (int32 [G, N/8]); got None")
            if g_idx is not None:
                raise ValueError("g_idx: AWQ checkpoints have none (groups are contiguous rows of K)")
            k = int(qweight.shape[0])
            return cls._packed(awq, qweight, scales, qzeros, _group_size_of(k, scales), bias, smooth, dev_)
        k = int(qweight.shape[0]) * 8
        gs = _group_size_of(k, scales)
        if g_idx is not None:
            gi = _host(g_idx)
            assert gi is not None
            want = np.arange(k) // (k if gs == -1 else gs)
            if gi.shape != (k,) or not np.array_equal(gi.astype(np.int64), want):
                raise ValueError(
                    "g_idx: an act-order (desc_act) checkpoint; W4A8 takes groups of contiguous rows "
                    "(g_idx[k] = k // group_size) only"
                )
        if qzeros is None:
            return cls._packed(spec_for(False), qweight, scales, None, gs, bias, smooth, dev_)
        reader = Layout.of(load_spec(_GPTQ_ZEROS))
        qz = _host(qzeros)
        assert qz is not None
        stored = reader.unpack_fields(np.ascontiguousarray(qz).view(np.uint32), reader.zero_order, "N")
        # v1 stores z - 1 (zeros_from_stored adds the 1 back), v2 stores z
        z = (
            zeros_from_stored(stored, load_spec(_GPTQ_ZEROS))
            if checkpoint_format == "gptq"
            else stored.astype(np.int64)
        )
        if z.shape != tuple(scales.shape):
            raise ValueError(f"qzeros: expected {list(scales.shape)} zero points after unpacking, got {list(z.shape)}")
        if (z == 8).all():  # sym=True: q - 8, the symmetric kernel on qweight as stored
            return cls._packed(load_spec(SPEC_SYMMETRIC), qweight, scales, None, gs, bias, smooth, dev_)
        if z.max() > 15:
            raise ValueError("qzeros: a zero point of 16 (stored 15 in gptq_v1) does not fit AWQ's 4-bit zeros")
        qw = _host(qweight)
        assert qw is not None
        codes = reader.unpack_fields(np.ascontiguousarray(qw).view(np.uint32))  # [K, N]
        lay = Layout.of(awq)
        return cls._packed(
            awq, lay.pack_fields(codes), scales, lay.pack_fields(z.astype(np.uint8), lay.zero_order, "N"), gs, bias,
            smooth, dev_,
        )  # fmt: skip

    # ------------------------------------------------------------------------------------------ forward

    def _apply(self, fn: Any, recurse: bool = True) -> W4A8Linear:
        # Buffers follow a device move but keep their dtypes: .half() would turn the float32 scales and smoothing
        # factors into other numbers (the forward casts the bias to x's dtype itself).
        move_buffers(self, fn)
        self._bias_cast = None
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dimension {self.in_features} (in_features), got {list(x.shape)}")
        if type(x) is QuantizedActivation:  # int8 per-token codes made by the op before (W8A8RMSNorm): as they are
            if self.smooth is not None:
                raise ValueError(
                    "x: codes quantized upstream reach a smoothed layer; fold its smoothing factors into the producer"
                )
            q, s = x.q.reshape(-1, self.in_features), x.scale.reshape(-1)
        else:
            q, s = quantize_activations(x.reshape(-1, self.in_features), self.smooth)
        y = w4a8_matmul(q, s, self.w_q, self.w_scale, self.w_zeros, self._bias_for(x.dtype), x.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def _bias_for(self, dtype: torch.dtype) -> torch.Tensor | None:
        """The bias in ``dtype`` (the op takes it in the output's dtype): the buffer itself, or its cast, kept
        while the buffer's pointer and version hold (made at a warm-up call, it is what a captured graph reads)."""
        bias = self.bias
        if bias is None or bias.dtype == dtype:
            return bias
        if torch.compiler.is_compiling():
            return bias.to(dtype)
        # an inference tensor (a layer built under torch.inference_mode) has no version counter: it cannot change
        key = (dtype, bias.data_ptr(), -1 if torch.is_inference(bias) else bias._version, bias.device)
        if self._bias_cast is None or self._bias_cast[0] != key:
            self._bias_cast = (key, bias.to(dtype))
        return self._bias_cast[1]

    def packed(self) -> W4A8Packed:
        """The buffers as dqgen.layout.w4a8's arrays (on the host)."""
        wq = self.w_q.detach().cpu().numpy().view(np.uint32)
        zeros = None if self.w_zeros is None else self.w_zeros.detach().cpu().numpy().view(np.uint32)
        return W4A8Packed(wq, self.w_scale.detach().cpu().numpy(), zeros, self.in_features, self.out_features)

    def extra_repr(self) -> str:
        group = "per-channel" if self.group_size == -1 else str(self.group_size)
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, group_size={group}, "
            f"zero_point={self.w_zeros is not None}, smoothed={self.smooth is not None}, bias={self.bias is not None}"
        )


def _check_group_size(group_size: object, k: int) -> None:
    """-1 (per channel) or a multiple of the 128-k rescale tile dividing K: one scale per 128-k tile holds it."""
    if (
        isinstance(group_size, bool)
        or not isinstance(group_size, int)
        or not (group_size == -1 or (group_size > 0 and group_size % RESCALE_K == 0 and k % group_size == 0))
    ):
        raise ValueError(f"group_size: expected -1 or a multiple of {RESCALE_K} dividing K = {k}, got {group_size!r}")


def _arrays(packed: W4A8Packed) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    return packed.wq, packed.scales, packed.zeros
