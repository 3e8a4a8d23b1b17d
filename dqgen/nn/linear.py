"""``QuantLinear``: a torch.nn.Module whose weight is a spec's quantized checkpoint and whose forward is dqgen's fused
matmul (``Kernel.matmul``), y = x @ dequant(W) + bias over any leading dimensions of x."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..core.formats import torch_dtype
from ..core.spec import Spec, SpecLike, load_spec
from ..layout.layout import Layout
from ..run import fastcall
from .buffers import move_buffers
from .quantize_torch import quantize_tensors

_compiling = torch.compiler.is_compiling
_ident = threading.get_ident
_Tensor = torch.Tensor


@dataclass(slots=True, eq=False)
class _LayerHit:
    """A layer's remembered decode call: the Kernel's checked launch (dqgen.run.fastcall.Patched) and what it was
    bound to, the packed weight and the bias (its pointer, and a weak reference: a buffer replaced by another at
    the same address is no hit)."""

    launch: fastcall.Patched
    weight: Callable[[], Any]
    bias: int | None
    bias_ref: Callable[[], Any]


#: The checkpoint tensors a layer holds as buffers (None where the spec has no such tensor), in state_dict order.
CHECKPOINT_NAMES = ("qweight", "scales", "zeros", "g_idx", "global_scale", "bias")


def _kernel(spec: Spec) -> Any:
    """What ``dqgen.compile(spec)`` gives (the pipeline, memoized, then a Kernel), without importing the api layer."""
    from ..emit.pipeline import compile_artifact
    from ..run.runtime import Kernel

    return Kernel(compile_artifact(spec))


class QuantLinear(torch.nn.Module):
    """y = x @ dequant(W) (+ bias) for x [..., K] in the spec's target dtype, y [..., N] in the same dtype.

    The checkpoint tensors (``qweight``, ``scales``, ``zeros``, ``g_idx``, ``global_scale``, ``bias``) are buffers:
    ``state_dict`` saves them in the checkpoint's own layout and ``.to(device)`` moves them. A dtype change
    (``.half()``, ``.to(torch.bfloat16)``) leaves them alone: their dtypes are the spec's, not the model's. The
    layout the matmul reads is packed from them once (``Kernel.pack_matmul``) when the layer is built or moved to
    a GPU, and again after ``load_state_dict``. Build one with ``from_checkpoint`` or ``from_linear``."""

    # the buffers' types (nn.Module's __getattr__ would type them Tensor | Module)
    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    g_idx: torch.Tensor | None
    global_scale: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(
        self,
        spec: SpecLike,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None = None,
        g_idx: torch.Tensor | None = None,
        global_scale: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.spec = load_spec(spec)
        for name, t in zip(CHECKPOINT_NAMES, (qweight, scales, zeros, g_idx, global_scale, bias), strict=True):
            if t is not None and not isinstance(t, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor or None, got {type(t).__name__}")
        if qweight.dim() != 2:
            raise ValueError(f"qweight: expected a 2-D packed tensor, got shape {tuple(qweight.shape)}")
        self.in_features, self.out_features = Layout.of(self.spec).kn_of(tuple(qweight.shape))
        fixed = self.spec.scales.group_size
        rows = int(scales.shape[0]) if scales.dim() == 2 else 0
        self.group_size = fixed if fixed != "auto" else (-1 if rows == 1 else self.in_features // max(rows, 1))
        tdt = torch_dtype(self.spec.target_type, torch)
        if bias is not None and (bias.shape != (self.out_features,) or bias.dtype != tdt):
            raise ValueError(f"bias: expected shape ({self.out_features},) {tdt}, got {tuple(bias.shape)} {bias.dtype}")
        for name, t in zip(CHECKPOINT_NAMES, (qweight, scales, zeros, g_idx, global_scale, bias), strict=True):
            self.register_buffer(name, t)
        self._kernel = _kernel(self.spec)
        self._packed: Any = None
        #: Decode calls checked before, by x's signature (forward); a copy or pickle of the layer starts empty.
        self._fast = fastcall.FastTable()
        self.register_load_state_dict_post_hook(lambda module, _keys: module._repack())
        self._repack()

    # ------------------------------------------------------------------------------------------ builders

    @classmethod
    def from_checkpoint(
        cls,
        spec: SpecLike,
        qweight: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor | None = None,
        g_idx: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        global_scale: torch.Tensor | None = None,
    ) -> QuantLinear:
        """A layer over an AWQ / GPTQ (or any spec's) checkpoint's tensors, as stored (``qweight`` [K, N/P] or
        [K/P, N], ``scales`` [G, N], packed ``qzeros`` or dense zeros as ``zeros``)."""
        return cls(spec, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, spec: SpecLike, group_size: int | None = None) -> QuantLinear:
        """Quantize ``linear``'s weight (torch's [N, K], transposed to the checkpoints' [K, N]) with
        ``dqgen.quantize``'s round-to-nearest (``group_size`` None: the spec's, or 128) on its device: integer
        specs in torch there (dqgen.nn.quantize_torch, no host round trip), others through the numpy path."""
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"linear: expected a torch.nn.Linear, got {type(linear).__name__}")
        sp = load_spec(spec)
        weight = linear.weight.detach()
        tensors = quantize_tensors(sp, weight.t(), group_size=group_size)
        bias = None
        if linear.bias is not None:
            bias = linear.bias.detach().to(torch_dtype(sp.target_type, torch)).clone()
        return cls(sp, **tensors, bias=bias)

    # ------------------------------------------------------------------------------------------ packing

    def _repack(self) -> None:
        """Pack the buffers for the matmul where they are on a GPU (dropped elsewhere: a CPU layer cannot run)."""
        self._packed = None
        self._fast.clear()  # bound to the old packed weight (a hit checks it too: this frees the entries at once)
        if self.qweight.is_cuda:
            self._packed = self._kernel.pack_matmul(
                self.qweight, self.scales, self.zeros, g_idx=self.g_idx, global_scale=self.global_scale
            )

    def _apply(self, fn: Any, recurse: bool = True) -> QuantLinear:
        # Buffers follow a device move but keep their dtypes: fn is .to(dtype) as well as .to(device) (and
        # .half() casts every float buffer), and fp16 scales in a bf16 spec would be a different weight.
        move_buffers(self, fn)
        self._repack()
        return self

    # ------------------------------------------------------------------------------------------ forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not _compiling():
            # eager: this layer's own signature table first (x's shape, dtype, device, contiguity, alignment and the
            # thread: the weight and the bias are the layer's), whose entries are the Kernel's checked launches
            hit = None
            if type(x) is _Tensor:  # a subclass keeps its own dispatch; a non-tensor is named by the checked path
                try:
                    hit = self._fast.get(
                        (x.shape, x.dtype, x.get_device(), x.is_contiguous(), not x.data_ptr() % 16, _ident())
                    )
                except RuntimeError:  # no storage (a fake tensor): the checked path
                    hit = None
            if hit is not None:
                bias = self._buffers["bias"]
                same_bias = hit.bias is None if bias is None else hit.bias == bias.data_ptr() and hit.bias_ref() is bias
                if same_bias and hit.weight() is self._packed:
                    return fastcall.run_patched(hit.launch, x)
            packed = self._packed
            if packed is not None and x.shape[-1] == self.in_features and x.is_contiguous():
                # Kernel.matmul takes [..., K] as it is (the rows of the reshape below): a decode call it checked and
                # remembered is then this layer's too
                bias = self._buffers["bias"]
                y = self._kernel.matmul(x, packed, bias=bias)
                self._remember(x, packed, bias)
                return y
        return self._forward(x)

    def _remember(self, x: torch.Tensor, packed: Any, bias: torch.Tensor | None) -> None:
        """After a checked call: the Kernel's table entry of this signature (dqgen.run.fastcall), if it kept one,
        becomes this layer's, with weak references to the packed weight and the bias it was bound with."""
        try:
            launch = self._kernel.fast.get(fastcall.matmul_key(x, packed, None, None, bias, None))
        except (AttributeError, RuntimeError):
            return
        if launch is not None:
            key = (x.shape, x.dtype, x.get_device(), x.is_contiguous(), not x.data_ptr() % 16, _ident())
            self._fast.put(
                key,
                _LayerHit(
                    launch,
                    weakref.ref(packed),
                    None if bias is None else bias.data_ptr(),
                    (lambda: None) if bias is None else weakref.ref(bias),
                ),
            )

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        """The forward on x [..., K] as rows [M, K] (what torch.compile traces)."""
        if self._packed is None:
            raise RuntimeError(
                f"QuantLinear: the weights are on {self.qweight.device}; dqgen's matmul runs on CUDA (call .cuda())"
            )
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dimension {self.in_features} (in_features), got {tuple(x.shape)}")
        y = self._kernel.matmul(x.reshape(-1, self.in_features), self._packed, bias=self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"spec={self.spec.name}, in_features={self.in_features}, out_features={self.out_features}, "
            f"group_size={self.group_size}, bias={self.bias is not None}"
        )
