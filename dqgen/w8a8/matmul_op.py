"""The W8A8 matmul as a torch custom op (``dqgen::w8a8_matmul``), the per-channel weight quantizer on torch
tensors, and the fp8 activation quantizer the fp8 layer uses.

y [M, N] = round(acc[m, n] * (x_scale[m] * w_scale[n]) (+ bias[n])), acc = x_q @ w.T accumulated exactly in
int32 (int8) or in fp32 (e4m3); the order of the float32 operations is the template's (docs/w8a8.md)."""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

import torch

from ..kernels.w8a8_gemm import MAX_K_S8, Elem, Out, choose_w8a8_gemm
from ..kernels.w8a8_gemm90 import choose_w8a8_gemm90
from ..run import device as dev
from ..run.bound_x import BoundForX, BoundPerX, launch_patched, markers
from ..run.calls import CALLS_MAX, remember
from ..run.gemm90 import is_hopper
from ..run.operands import x_aligned
from ..run.workspace import GrowOnlyCounters
from .gemm import GemmKernel, loaded
from .gemm90 import PARAMS as GEMM90_PARAMS
from .gemm90 import Gemm90Kernel, loaded90
from .gemm_reference import QMAX, WeightKind

_ELEMS: dict[torch.dtype, Elem] = {torch.int8: "s8", torch.float8_e4m3fn: "e4m3"}
_OUTS: dict[torch.dtype, Out] = {torch.float16: "f16", torch.bfloat16: "bf16"}


def _zeroed_counters(ordinal: int, n: int) -> torch.Tensor:
    c = torch.zeros(n, dtype=torch.int32, device=torch.device("cuda", ordinal))
    torch.cuda.current_stream(ordinal).synchronize()  # zero before a launch on any stream reads them (once a size)
    return c


#: Per device: uint32 counters of the split-K tiles, zero between launches (the kernel resets the ones it uses);
#: grown only, and an outgrown buffer is kept, because bound launches and captured CUDA graphs hold its address.
_COUNTERS: GrowOnlyCounters[torch.Tensor] = GrowOnlyCounters(_zeroed_counters, torch.cuda.is_current_stream_capturing)


def check_epilogue_inputs(x_scale: Any, m: Any, bias: Any, n: int, out_dtype: Any) -> None:
    """The per-token scales [M], the bias [N] and the output dtype both W8A8 and W4A8 matmuls take: a one-line
    ValueError naming the argument (M may be symbolic under torch.compile: compared, not specialized)."""
    if x_scale.dtype != torch.float32 or tuple(x_scale.shape) != (m,):
        raise ValueError(f"x_scale: expected float32 [M={m}], got {x_scale.dtype} {list(x_scale.shape)}")
    if not isinstance(out_dtype, torch.dtype) or out_dtype not in _OUTS:
        raise ValueError(f"out_dtype: expected torch.float16 or torch.bfloat16, got {out_dtype}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise ValueError(f"bias: expected a tensor [N] or None, got {type(bias).__name__}")
        if bias.dtype != out_dtype or tuple(bias.shape) != (n,):
            raise ValueError(f"bias: expected {out_dtype} [N={n}], got {bias.dtype} {list(bias.shape)}")


def check_inputs(x_q: Any, x_scale: Any, w: Any, w_scale: Any, bias: Any, out_dtype: Any) -> None:
    """Raise a one-line ValueError naming the bad argument; nothing has run yet."""
    for name, t in (("x_q", x_q), ("x_scale", x_scale), ("w", w), ("w_scale", w_scale)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a CUDA torch.Tensor, got {type(t).__name__}")
    if x_q.dtype not in _ELEMS:
        raise ValueError(f"x_q: expected int8 or float8_e4m3fn, got {x_q.dtype}")
    if w.dtype != x_q.dtype:
        raise ValueError(f"w: expected x_q's dtype {x_q.dtype} (W8A8: both operands of one type), got {w.dtype}")
    if x_q.dim() != 2:
        raise ValueError(f"x_q: expected a 2-D tensor [M, K], got shape {list(x_q.shape)}")
    if w.dim() != 2 or w.shape[1] != x_q.shape[1]:
        raise ValueError(f"w: expected [N, K={x_q.shape[1]}] (torch.nn.Linear's layout), got {list(w.shape)}")
    m, k = x_q.shape
    n = w.shape[0]
    if x_q.dtype == torch.int8 and k > MAX_K_S8:
        raise ValueError(f"x_q: K = {k} exceeds {MAX_K_S8}, where int32 accumulation of int8 products could wrap")
    if w_scale.dtype != torch.float32 or tuple(w_scale.shape) != (n,):
        raise ValueError(f"w_scale: expected float32 [N={n}], got {w_scale.dtype} {list(w_scale.shape)}")
    check_epilogue_inputs(x_scale, m, bias, n, out_dtype)
    for name, t in (("x_q", x_q), ("x_scale", x_scale), ("w", w), ("w_scale", w_scale), ("bias", bias)):
        if t is not None and t.device.type != "cuda":
            raise ValueError(f"{name}: expected a CUDA tensor, got device {t.device}")
        if t is not None and t.device != x_q.device:
            raise ValueError(f"{name}: expected x_q's device {x_q.device}, got {t.device}")


def _in_place(t: torch.Tensor) -> bool:
    """Whether the kernel reads t [rows, K] in place: unit inner stride, K, the row stride and the pointer 16-byte
    multiples."""
    rows, k = t.shape
    row_stride = t.stride(0) if rows > 1 else k  # one row: no row stride to align
    return k > 0 and t.stride(1) == 1 and x_aligned(t.data_ptr(), row_stride, k, t.element_size())


def _kernel_ready(t: torch.Tensor) -> torch.Tensor:
    """t [rows, K] as the kernel reads it: t itself where _in_place, otherwise a zero-padded copy [rows, ceil16(K)]
    (zeros add nothing to the product)."""
    if _in_place(t):
        return t
    rows, k = t.shape
    kp = max(16, -(-k // 16) * 16)
    padded = torch.zeros((rows, kp), dtype=t.dtype, device=t.device)
    padded[:, :k] = t
    return padded


@functools.cache
def _device_limits(ordinal: int) -> tuple[int, int]:
    """(SMs, dynamic shared memory a block may opt in to) of a device: what the tile choice depends on."""
    from ..run import device as dev

    return dev.sm_count(ordinal), dev.max_shared_optin(ordinal)


@functools.lru_cache(maxsize=1024)
def _prepared(elem: Elem, out: Out, m: int, n: int, k: int, ordinal: int) -> tuple[GemmKernel | Gemm90Kernel, Any, int]:
    """(kernel, plan, workspace elements) of a call's shape, decided once (the host time of a call sits in front of
    a short kernel): the wgmma kernel on an sm_90 GPU, the mma.sync one elsewhere."""
    if is_hopper(ordinal):
        k90 = loaded90(choose_w8a8_gemm90(elem, out, m, n, dev.sm_count(ordinal)), ordinal)
        plan90 = k90.plan(m, n, k)
        return k90, plan90, k90.workspace_elems(plan90)
    kern = loaded(choose_w8a8_gemm(elem, out, m, n, k, *_device_limits(ordinal)), ordinal)
    plan = kern.plan(m, n, k)
    return kern, plan, kern.workspace_elems(plan)


def _counters(device: torch.device, tiles: int) -> torch.Tensor:
    """The device's split-K counters, at least ``tiles`` of them (allocated on a device's first call, never inside
    a CUDA graph capture: a one-line RuntimeError there)."""
    return _COUNTERS.get(device.index if device.index is not None else torch.cuda.current_device(), tiles)


def _launch(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    m = x_q.shape[0]
    n = w.shape[0]
    y = torch.empty((m, n), dtype=out_dtype, device=x_q.device)
    if m == 0 or n == 0:
        return y
    xk, wk = _kernel_ready(x_q), _kernel_ready(w)  # both padded to the same K, or neither's K changes
    kp = xk.shape[1]
    ordinal = x_q.device.index if x_q.device.index is not None else torch.cuda.current_device()
    kern, plan, ws_elems = _prepared(_ELEMS[x_q.dtype], _OUTS[out_dtype], m, n, kp, ordinal)
    ws = torch.empty(ws_elems, dtype=torch.int32 if x_q.dtype == torch.int8 else torch.float32, device=y.device)
    counters = _counters(y.device, kern.counters_needed(plan))
    xs, ws_ = x_scale.contiguous(), w_scale.contiguous()
    b = None if bias is None else bias.contiguous()
    stream = torch.cuda.current_stream(y.device).cuda_stream
    kern(
        m,
        n,
        kp,
        xk.data_ptr(),
        xk.stride(0) if m > 1 else kp,
        wk.data_ptr(),
        wk.stride(0) if n > 1 else kp,
        xs.data_ptr(),
        ws_.data_ptr(),
        0 if b is None else b.data_ptr(),
        y.data_ptr(),
        ws.data_ptr() if ws_elems else 0,
        counters.data_ptr(),
        plan,
        stream=stream,
    )
    return y


@torch.library.custom_op("dqgen::w8a8_matmul", mutates_args=(), device_types="cuda")
def w8a8_matmul_op(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return _call(x_q, x_scale, w, w_scale, bias, out_dtype)  # checks a new signature: direct torch.ops calls too


@w8a8_matmul_op.register_fake
def _(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return x_q.new_empty((x_q.shape[0], w.shape[0]), dtype=out_dtype)


def matmul(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.float16,
) -> torch.Tensor:
    """y [M, N] (out_dtype) = (x_q [M, K] @ w [N, K].T) * x_scale[:, None] * w_scale[None, :] (+ bias), x_q and w
    both int8 (int32 accumulation, exact) or both float8_e4m3fn (sm_89+). x_q, x_scale: quantize_activations'
    outputs; w, w_scale: quantize_weight's."""
    if torch.compiler.is_compiling():  # traced: one custom op in the graph
        check_inputs(x_q, x_scale, w, w_scale, bias, out_dtype)
        return torch.ops.dqgen.w8a8_matmul(x_q, x_scale, w, w_scale, bias, out_dtype)
    return _call(x_q, x_scale, w, w_scale, bias, out_dtype)  # eager: the dispatcher's overhead skipped


@dataclasses.dataclass(slots=True)
class _Call:
    """What a call's input signature fixes, decided once: the checks passed, the kernel, its plan, the workspace's
    size, and its launch bound once with every argument, the per-call pointers (x_q, x_scale, y and the workspace)
    in patchable slots (dqgen.run.device.BoundLaunch). The workspace is taken per call from torch's caching
    allocator (stream-ordered, and kept alive by a CUDA graph that captured it), so nothing a launch reads is freed
    by clearing this cache."""

    fn: dev.BoundLaunch
    launch: Any  # fn.launch: cuLaunchKernel with the function, grid and block bound
    params: int
    slots: Any  # fn.slots
    x_slot: int  # -1: x is read through a tensor map (the Hopper kernel): one bound launch per x address, bind_x
    x_scale_slot: int
    y_slot: int
    ws_slot: int  # -1: no workspace (a plan without split-K)
    mn: tuple[int, int]
    ws_elems: int
    ws_dtype: torch.dtype
    counters: torch.Tensor  # this signature's counters (the device's buffer when first seen; never freed)
    ordinal: int
    device: torch.device
    out_dtype: torch.dtype
    #: x's address -> (the launch bound with x's tensor map at it, its x_scale, y and ws slots) (x_slot -1)
    bind_x: BoundPerX | None = None

    def bound_for(self, x_ptr: int) -> BoundForX:
        """The launch with x at ``x_ptr`` and the slots of its other per-call pointers (x_scale, y, ws; -1: none),
        which the caller patches: the bound one with x's slot patched, or (x in a tensor map) the one bound for
        that address, whose slots are its own (a tensor map's padding follows its argument array's address)."""
        if self.x_slot >= 0:
            self.slots[self.x_slot] = x_ptr
            return self.fn, self.x_scale_slot, self.y_slot, self.ws_slot
        assert self.bind_x is not None  # x_slot -1 comes with it
        return self.bind_x(x_ptr)


_CALLS: dict[tuple, _Call] = {}
_raw_stream = dev.torch_raw_stream_fn(torch)
_ident = threading.get_ident
_empty = torch.empty


def _call(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """An eager call through the signature cache (the pattern of dqgen.run.fastcall). The key holds everything the
    checks, the plan and the bound arguments depend on: x_q's and x_scale's shapes, strides, dtypes and devices
    and x_q's pointer alignment (their pointers are patched into the launch: new tensors every call in a model),
    the weight's, its scale's and the bias's pointers, shapes, strides and dtypes (bound: a pointer fixes the
    device), out_dtype and the calling thread (the stream is read per call). A new signature is checked (the
    one-line errors) and planned first; inputs the kernel cannot read in place (padded copies), and anything the
    key cannot be built from, take the checked _launch every time."""
    try:
        key = (
            x_q.shape, x_q.stride(), x_q.dtype, x_q.get_device(), not x_q.data_ptr() % 16,
            x_scale.shape, x_scale.stride(), x_scale.dtype, x_scale.get_device(),
            w.data_ptr(), w.shape, w.stride(), w.dtype,
            w_scale.data_ptr(), w_scale.shape, w_scale.stride(), w_scale.dtype,
            None if bias is None else (bias.data_ptr(), bias.shape, bias.stride(), bias.dtype),
            out_dtype, _ident(),
        )  # fmt: skip
        hit = _CALLS.get(key)
    except (AttributeError, TypeError, RuntimeError):  # no tensors (or no storage): check_inputs names them
        check_inputs(x_q, x_scale, w, w_scale, bias, out_dtype)
        return _launch(x_q, x_scale, w, w_scale, bias, out_dtype)
    if hit is None:
        check_inputs(x_q, x_scale, w, w_scale, bias, out_dtype)
        hit = plan(x_q, x_scale, w, w_scale, bias, out_dtype)
        if hit is None:  # empty, padded copies, strided scales: the checked launch, every time
            return _launch(x_q, x_scale, w, w_scale, bias, out_dtype)
        remember(_CALLS, key, hit, CALLS_MAX)
    y = _empty(*hit.mn, dtype=hit.out_dtype, device=hit.device)  # sizes as ints: torch parses them faster
    ws = _empty(hit.ws_elems, dtype=hit.ws_dtype, device=hit.device) if hit.ws_elems else None
    per_call = (x_scale.data_ptr(), y.data_ptr(), 0 if ws is None else ws.data_ptr())
    launch_patched(hit.bound_for(x_q.data_ptr()), per_call, _raw_stream(hit.ordinal))
    return y  # ws goes back to the caching allocator after the launch, stream-ordered


def plan(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> _Call | None:
    """The _Call of checked inputs: the kernel and plan of their shape, the launch bound with every argument (y's
    and the workspace's pointers those of buffers allocated here for the purpose: each call patches its own in)
    and the slot of each per-call pointer; None where the inputs are empty, the kernel cannot read x_q or w in
    place, a scale or the bias is not contiguous, or two per-call pointers share a slot value."""
    m, n = x_q.shape[0], w.shape[0]
    if m == 0 or n == 0 or not (_in_place(x_q) and _in_place(w)):  # asked, not copied: _launch pads them once
        return None
    if not (x_scale.is_contiguous() and w_scale.is_contiguous() and (bias is None or bias.is_contiguous())):
        return None
    k = x_q.shape[1]
    ordinal = x_q.device.index if x_q.device.index is not None else torch.cuda.current_device()
    kern, plan_, ws_elems = _prepared(_ELEMS[x_q.dtype], _OUTS[out_dtype], m, n, k, ordinal)
    counters = _counters(x_q.device, kern.counters_needed(plan_))
    ws_dtype = torch.int32 if x_q.dtype == torch.int8 else torch.float32
    y = torch.empty((m, n), dtype=out_dtype, device=x_q.device)
    ws = torch.empty(ws_elems, dtype=ws_dtype, device=x_q.device) if ws_elems else None
    pointers = (x_q.data_ptr(), x_scale.data_ptr(), y.data_ptr(), 0 if ws is None else ws.data_ptr())
    x_ld, w_ptr, w_ld = x_q.stride(0) if m > 1 else k, w.data_ptr(), w.stride(0) if n > 1 else k
    tma = isinstance(kern, Gemm90Kernel)
    if tma:
        # x is in its tensor map (opaque bytes that may hold any address, a freed buffer's included): a launch is
        # bound per x address, its per-call pointers as markers no argument can equal (never device addresses)
        marks = markers((True, True, ws is not None))
        pointers = (pointers[0], marks[0], marks[1], marks[2])
    rest = (w_scale.data_ptr(), 0 if bias is None else bias.data_ptr(), pointers[2], pointers[3], counters.data_ptr())

    def bind(x_ptr: int) -> dev.BoundLaunch:
        return kern.bind(plan_, kern.launch_args(m, n, k, x_ptr, x_ld, w_ptr, w_ld, pointers[1], *rest, plan_))

    device = torch.device("cuda", ordinal)
    if tma:
        x_arg = [name for name, _ in GEMM90_PARAMS].index("qmap" if kern.cfg.swap else "pmap")
        per_x = BoundPerX(bind, (pointers[1], pointers[2], pointers[3]), "w8a8 matmul", x_arg)
        fn, x_scale_slot, y_slot, ws_slot = per_x(pointers[0])
        return _Call(
            fn, fn.launch, fn.params, fn.slots, -1, x_scale_slot, y_slot, ws_slot, (m, n), ws_elems, ws_dtype,
            counters, ordinal, device, out_dtype, per_x,
        )  # fmt: skip
    fn = bind(pointers[0])
    found = (fn.slot_of(pointers[0]), fn.slot_of(pointers[1]), fn.slot_of(pointers[2]))
    ws_found = -1 if ws is None else fn.slot_of(pointers[3])
    if None in found or ws_found is None:
        return None
    x_slot, x_scale_slot, y_slot = (int(s) for s in found if s is not None)
    return _Call(
        fn, fn.launch, fn.params, fn.slots, x_slot, x_scale_slot, y_slot, ws_found, (m, n), ws_elems, ws_dtype,
        counters, ordinal, device, out_dtype,
    )  # fmt: skip


def quantize_weight(w: torch.Tensor, kind: WeightKind = "int8") -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [N, K] int8 / float8_e4m3fn, scale [N] float32) of a weight [N, K] on its device, per output channel:
    scale = max|W[n]| / 127 (448 for fp8; 1 for a zero row), codes = round(W[n] / scale) clamped (the float32
    operations of dqgen.w8a8.gemm_reference.quantize_weight)."""
    if not isinstance(w, torch.Tensor):
        raise ValueError(f"w: expected a torch.Tensor [N, K], got {type(w).__name__}")
    if kind not in QMAX:
        raise ValueError(f"kind: expected 'int8' or 'fp8', got {kind!r}")
    if w.dim() != 2:
        raise ValueError(f"w: expected a 2-D weight [N, K], got shape {list(w.shape)}")
    wf = w.detach().float()
    if not bool(torch.isfinite(wf).all()):
        raise ValueError("w: expected finite values, found non-finite ones")
    amax = wf.abs().amax(dim=1) if w.shape[1] else wf.new_zeros(w.shape[0])
    qmax = torch.full_like(amax, QMAX[kind])
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    v = (wf / scale[:, None]).clamp_(-QMAX[kind], QMAX[kind])
    if kind == "int8":
        return torch.round(v).to(torch.int8), scale
    return v.to(torch.float8_e4m3fn), scale


def quantize_activations_fp8(x: torch.Tensor, smooth: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 codes [M, K], scale [M] float32), scale = max|x[m]| / 448 (in torch ops, not a generated
    kernel: the fp8 layer's activations; int8's quantize_activations is the generated one)."""
    xf = x.float()
    if smooth is not None:
        xf = xf * torch.reciprocal(smooth.float())
    amax = xf.abs().amax(dim=1)
    scale = amax / torch.full_like(amax, QMAX["fp8"])
    inv = torch.where(amax > 0, torch.full_like(amax, QMAX["fp8"]) / amax, torch.zeros_like(amax))
    return (xf * inv[:, None]).clamp_(-448.0, 448.0).to(torch.float8_e4m3fn), scale
