"""quantize_activations as a torch custom op (``dqgen::quantize_activations``), so torch.compile keeps it in its
graph: the checks run on the traced (fake) tensors, the fake implementation only shapes the outputs, and the real
one picks the kernel variant (alignment is a property of the real pointers) and launches it on torch's stream."""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any

import numpy as np
import torch

from ..kernels.act_quant import Hold, Prologue, SmoothDtype, SmoothIn, XDtype, choose_act_quant
from ..run import device as dev
from ..run.calls import CALLS_MAX, remember
from .kernel import loaded

_X_DTYPES: dict[torch.dtype, XDtype] = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_S_DTYPES: dict[torch.dtype, SmoothDtype] = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _as_f32(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(v))


def check_inputs(x: torch.Tensor, smooth: torch.Tensor | None, scale: float | None, name: str = "x") -> None:
    """Raise a one-line ValueError naming the bad argument (x as ``name``: a fused producer's input); nothing has
    run yet."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a CUDA torch.Tensor [M, K], got {type(x).__name__}")
    if x.dtype not in _X_DTYPES:
        raise ValueError(f"{name}: expected float16 or bfloat16, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D tensor [M, K], got shape {list(x.shape)}")
    if x.device.type != "cuda":
        raise ValueError(f"{name}: expected a CUDA tensor, got device {x.device}")
    refuse_storageless(x, name)
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"{name}: expected contiguous rows (inner stride 1), got strides {list(x.stride())}")
    if x.shape[0] > 1 and x.stride(0) < x.shape[1]:
        raise ValueError(f"{name}: expected non-overlapping rows (row stride >= K = {x.shape[1]}), got {x.stride(0)}")
    if smooth is not None:
        if not isinstance(smooth, torch.Tensor):
            raise ValueError(f"smooth: expected a tensor [K] or None, got {type(smooth).__name__}")
        if tuple(smooth.shape) != (x.shape[1],):
            raise ValueError(f"smooth: expected shape [K={x.shape[1]}], got {list(smooth.shape)}")
        if smooth.dtype not in (torch.float32, x.dtype):
            raise ValueError(f"smooth: expected float32 or x's dtype {x.dtype}, got {smooth.dtype}")
        if smooth.device != x.device:
            raise ValueError(f"smooth: expected x's device {x.device}, got {smooth.device}")
        if smooth.shape[0] > 1 and smooth.stride(0) != 1:
            raise ValueError(f"smooth: expected a contiguous vector, got stride {smooth.stride(0)}")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ValueError(f"scale: expected a Python float (the static scale) or None, got {type(scale).__name__}")
        s32 = _as_f32(scale)  # the value the kernel gets
        if not (math.isfinite(s32) and s32 > 0 and math.isfinite(_as_f32(1.0 / s32))):
            raise ValueError(f"scale: expected a positive finite float32 with a finite reciprocal, got {scale!r}")


def refuse_storageless(x: torch.Tensor, name: str) -> None:
    """A tensor wrapper with no storage of its own (dqgen.nn.QuantizedActivation: data_ptr() is 0) would launch
    the kernel on address 0: refused with one line (not while tracing: a traced tensor has no address; the op
    checks when it runs)."""
    if not torch.compiler.is_compiling() and x.numel() and x.data_ptr() == 0:
        raise ValueError(
            f"{name}: a {type(x).__name__} with no storage of its own; pass a plain tensor (e.g. its dequantize())"
        )


def _inputs_aligned(x: torch.Tensor, smooth: torch.Tensor | None) -> bool:
    """All of x's rows and smooth (or a producer's gamma) start on 16-byte boundaries and K is a whole number of
    8-element vectors."""
    ok = x.shape[1] % 8 == 0 and x.data_ptr() % 16 == 0 and (x.shape[0] <= 1 or x.stride(0) % 8 == 0)
    return ok and (smooth is None or smooth.data_ptr() % 16 == 0)


@dataclasses.dataclass(frozen=True, slots=True)
class Producer:
    """The op fused in front of the quantizer (dqgen.kernels.act_quant.Prologue): "rmsnorm" with its weight
    ``gamma`` [K] in x's dtype and ``eps``; "silu_mul" on x = [gate | up] (2K columns), no arguments."""

    kind: Prologue
    gamma: torch.Tensor | None = None
    eps: float = 0.0

    def out_k(self, x: torch.Tensor) -> int:
        """Columns of the quantized output."""
        return x.shape[1] // 2 if self.kind == "silu_mul" else x.shape[1]

    def key(self) -> tuple:
        """What a bound launch depends on: a gamma's pointer, shape, strides, dtype and device (its contents are
        read at each launch)."""
        g = self.gamma
        if g is None:
            return (self.kind, self.eps)
        return (self.kind, self.eps, g.data_ptr(), g.shape, g.stride(), g.dtype, g.get_device())


_NO_PRODUCER = Producer("none")


def _aligned(x: torch.Tensor, smooth: torch.Tensor | None, q: torch.Tensor) -> bool:
    """_inputs_aligned, and q starts on a 16-byte boundary: the aligned variant's condition."""
    return _inputs_aligned(x, smooth) and q.data_ptr() % 16 == 0


def _launch(
    x: torch.Tensor,
    smooth: torch.Tensor | None,
    scale: float | None,
    hold: Hold | None = None,
    smooth_in: SmoothIn | None = None,
    producer: Producer = _NO_PRODUCER,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate the outputs, pick the variant (``hold`` / ``smooth_in``: the bench's overrides) and launch."""
    rows, k = x.shape[0], producer.out_k(x)
    q = torch.empty((rows, k), dtype=torch.int8, device=x.device)
    row_scale = torch.empty((rows,), dtype=torch.float32, device=x.device)
    if rows == 0:
        return q, row_scale
    if k == 0:  # no elements: max|x| of an empty row is 0 (dynamic), the static scale as given
        row_scale.fill_(0.0 if scale is None else _as_f32(scale))
        return q, row_scale
    v = choose_act_quant(
        _X_DTYPES[x.dtype],
        k,
        None if smooth is None else _S_DTYPES[smooth.dtype],
        scale is not None,
        _aligned(x, producer.gamma if smooth is None else smooth, q),
        rows,
        hold,
        smooth_in,
        producer.kind,
    )
    ordinal = x.device.index if x.device.index is not None else torch.cuda.current_device()
    kern = loaded(v, ordinal)
    stride = x.stride(0) if rows > 1 else x.shape[1]
    stream = torch.cuda.current_stream(x.device).cuda_stream
    kern(
        x.data_ptr(),
        stride,
        rows,
        None if smooth is None else smooth.data_ptr(),
        scale,
        q.data_ptr(),
        row_scale.data_ptr(),
        stream,
        gamma_ptr=None if producer.gamma is None else producer.gamma.data_ptr(),
        eps=producer.eps,
    )
    return q, row_scale


@torch.library.custom_op("dqgen::quantize_activations", mutates_args=(), device_types="cuda")
def quantize_activations_op(
    x: torch.Tensor, smooth: torch.Tensor | None, scale: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    return _call(x, smooth, scale)  # checks a new signature: direct torch.ops calls too


@quantize_activations_op.register_fake
def _(x: torch.Tensor, smooth: torch.Tensor | None, scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty((x.shape[0],), dtype=torch.float32)


def quantize_activations(
    x: torch.Tensor, smooth: torch.Tensor | None = None, *, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] float16/bfloat16 on a GPU -> (x_q int8 [M, K], x_scale float32 [M]), x ~ x_q * x_scale[:, None]
    (times smooth when given). ``smooth`` [K] (float32 or x's dtype): SmoothQuant's factors, x / smooth is what is
    quantized (as x * rcp(smooth), see dqgen.w8a8.reference). ``scale``: a static scale for the whole tensor
    (x_scale is then that scale in every row); by default a dynamic per-row scale max|x| / 127."""
    if torch.compiler.is_compiling():  # traced: one custom op in the graph
        check_inputs(x, smooth, scale)
        return torch.ops.dqgen.quantize_activations(x, smooth, None if scale is None else float(scale))
    return _call(x, smooth, scale)  # eager: the dispatcher's overhead skipped, the same implementation


@dataclasses.dataclass(slots=True)
class _Call:
    """What a call's input signature fixes, decided once (the checks passed, the variant, its kernel), and its
    launch bound once with x's and the outputs' pointers in patchable slots (dqgen.run.device.BoundLaunch): a
    repeated call costs a signature, two allocations, three slot stores and one cuLaunchKernel (the pattern of
    dqgen.run.fastcall)."""

    fn: dev.BoundLaunch
    launch: Any  # fn.launch: cuLaunchKernel with the function, grid and block bound
    params: int
    slots: Any  # fn.slots
    x_slot: int
    q_slot: int
    scale_slot: int
    aligned: bool  # the 16-byte variant: q must start on a 16-byte boundary too
    ordinal: int
    device: torch.device
    shape: tuple[int, int]


_CALLS: dict[tuple, _Call] = {}
_Tensor = torch.Tensor
_raw_stream = dev.torch_raw_stream_fn(torch)
_ident = threading.get_ident
_empty = torch.empty
_int8, _float32 = torch.int8, torch.float32


def _call(
    x: torch.Tensor,
    smooth: torch.Tensor | None,
    scale: float | None,
    producer: Producer = _NO_PRODUCER,
    check: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """An eager call through the signature cache. The key holds everything the checks and the bound launch depend
    on: x's shape, strides, dtype, device and pointer alignment (x's pointer itself is patched into the launch:
    in a model x is a new tensor every call), smooth's pointer, shape, strides, dtype and device, the static
    scale's value and the calling thread (the stream is read per call). A new signature is checked (the one-line
    errors) and planned first; empty inputs, and anything the key cannot be built from, take the checked _launch
    every time. A fused ``producer`` (its gamma's pointer and eps in the key) is checked by ``check(x, producer)``,
    which the producer's op passes in place of check_inputs."""
    if scale is not None and type(scale) is not float:  # an int, or no number: checked, then keyed as the float
        _check(check, x, smooth, scale, producer)
        scale = float(scale)
    if type(x) is not _Tensor:  # a subclass (a storage-less wrapper among them): checked and launched every call
        _check(check, x, smooth, scale, producer)
        return _launch(x, smooth, scale, producer=producer)
    try:
        key = (
            x.shape, x.stride(), x.dtype, x.get_device(), not x.data_ptr() % 16,
            None if smooth is None else (smooth.data_ptr(), smooth.shape, smooth.stride(), smooth.dtype,
                                         smooth.get_device()),
            scale, _ident(), producer.key(),
        )  # fmt: skip
        hit = _CALLS.get(key)
    except (AttributeError, TypeError, RuntimeError):  # no tensors (or no storage): the checks name them
        _check(check, x, smooth, scale, producer)
        return _launch(x, smooth, scale, producer=producer)
    if hit is None:
        _check(check, x, smooth, scale, producer)
        hit = plan(x, smooth, scale, producer)
        if hit is None:  # empty, or slots that cannot be told apart: the checked launch, every time
            return _launch(x, smooth, scale, producer=producer)
        remember(_CALLS, key, hit, CALLS_MAX)
    rows, k = hit.shape  # sizes passed as ints: torch parses them faster than a tuple (about 0.5 us a call)
    q = _empty(rows, k, dtype=_int8, device=hit.device)
    row_scale = _empty(rows, dtype=_float32, device=hit.device)
    q_ptr = q.data_ptr()
    if hit.aligned and q_ptr % 16:  # never from torch's allocator; the general variant then
        return _launch(x, smooth, scale, producer=producer)
    slots = hit.slots
    slots[hit.x_slot] = x.data_ptr()
    slots[hit.q_slot] = q_ptr
    slots[hit.scale_slot] = row_scale.data_ptr()
    stream = _raw_stream(hit.ordinal)
    err = hit.launch(stream, hit.params, 0)[0]
    if err:
        hit.fn.failed(err, stream)
    return q, row_scale


def _check(check: Any, x: torch.Tensor, smooth: torch.Tensor | None, scale: float | None, producer: Producer) -> None:
    """A new signature's checks: a producer's own (``check(x, producer)``), else check_inputs."""
    if check is None:
        check_inputs(x, smooth, scale)
    else:
        check(x, producer)


def plan(
    x: torch.Tensor, smooth: torch.Tensor | None, scale: float | None, producer: Producer = _NO_PRODUCER
) -> _Call | None:
    """The _Call of checked inputs: the variant (as _launch picks it for a 16-byte aligned q), its launch bound
    with x's pointer and those of outputs allocated here for the purpose (each call patches its own in), and the
    slot of each; None for an empty x, or where two of those pointers share a slot value (a patch could not tell
    them apart)."""
    rows, k = x.shape[0], producer.out_k(x)
    if rows == 0 or k == 0:
        return None
    aligned = _inputs_aligned(x, producer.gamma if smooth is None else smooth)
    s_dtype = None if smooth is None else _S_DTYPES[smooth.dtype]
    v = choose_act_quant(_X_DTYPES[x.dtype], k, s_dtype, scale is not None, aligned, rows, prologue=producer.kind)
    ordinal = x.device.index if x.device.index is not None else torch.cuda.current_device()
    q = torch.empty((rows, k), dtype=torch.int8, device=x.device)
    row_scale = torch.empty((rows,), dtype=torch.float32, device=x.device)
    pointers = (x.data_ptr(), q.data_ptr(), row_scale.data_ptr())
    fn = loaded(v, ordinal).bind(
        pointers[0], x.stride(0) if rows > 1 else x.shape[1], rows, None if smooth is None else smooth.data_ptr(),
        scale, pointers[1], pointers[2],
        gamma_ptr=None if producer.gamma is None else producer.gamma.data_ptr(), eps=producer.eps,
    )  # fmt: skip
    x_slot, q_slot, scale_slot = (fn.slot_of(p) for p in pointers)
    if x_slot is None or q_slot is None or scale_slot is None:
        return None
    device = torch.device("cuda", ordinal)
    return _Call(fn, fn.launch, fn.params, fn.slots, x_slot, q_slot, scale_slot, aligned, ordinal, device, (rows, k))
