"""The checks of the checkpoint tensors against a spec, shared by every entry point that takes them (the dequantize
call, the GEMV's and the GEMM's packers): ``infer_problem`` (shapes, dtypes, devices, layout; one line naming the
tensor), ``check_g_idx`` (an act-order g_idx's values, one device->host copy) and the ``Problem`` they describe."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..core.formats import BF16, numpy_dtype, scalar_type, torch_dtype_name
from ..core.spec import Spec, resolve_group_size
from ..layout.layout import Layout
from . import device as dev
from .errors import ShapeError


class Dequantizer(Protocol):
    """A compiled dequantize call (dqgen.run.runtime.Kernel is one): what the checks of a build run."""

    @property
    def spec(self) -> Spec: ...

    def __call__(
        self,
        qweight: Any,
        scales: Any,
        zeros: Any = None,
        *,
        g_idx: Any = None,
        global_scale: Any = None,
        out: Any = None,
        stream: Any = None,
    ) -> Any: ...


_INT_WORDS = (np.dtype(np.int32), np.dtype(np.uint32))


def target_dtype(spec: Spec) -> np.dtype:
    return numpy_dtype(spec.target_type)


@dataclass(frozen=True)
class Problem:
    K: int
    N: int
    groups: int
    aligned: bool  # every base pointer 16-byte aligned (and, packing along K, N % 8 == 0; N % 4 for multi-word blocks)
    # The call's group size (-1: per-channel). The kernels take it as a launch argument and divide by it once per
    # row of a tile (k / group_size, to find the row's group); a compile-time size would save that divide but
    # would need a module per size, and `group_size: auto` makes the size a property of each call's scales.
    # Measured kernel times already include the divide (the launch argument predates 'auto').
    group_size: int = field(default=-1, compare=False)  # K / groups (K for per-channel): derived, not compared


def _dt(a: dev.DeviceArray) -> str:
    return "bfloat16" if a.dtype == numpy_dtype(BF16) else str(a.dtype)


def infer_problem(
    spec: Spec,
    qweight: dev.DeviceArray,
    scales: dev.DeviceArray,
    zeros: dev.DeviceArray | None,
    out: dev.DeviceArray | None,
    g_idx: dev.DeviceArray | None = None,
    global_scale: dev.DeviceArray | None = None,
) -> Problem:
    """Validate shapes/dtypes/devices/layout against the spec (g_idx values are checked by the caller).
    With multi-word blocks (3-bit: 32 codes in 3 words) qweight is [K * words / per_block, N];
    block scales are uint8 codes [K / group_size, N]; ``global_scale`` is a one-element fp32 tensor."""
    lay = Layout.of(spec)
    P, W = lay.per_block, lay.words
    tdt = target_dtype(spec)
    if qweight.dtype not in _INT_WORDS or len(qweight.shape) != 2:
        raise ShapeError(
            f"qweight: expected a 2-D int32 tensor of packed words, got {len(qweight.shape)}-D {_dt(qweight)}"
        )
    if lay.axis == "K" and qweight.shape[0] % W:
        raise ShapeError(
            f"qweight: expected shape [{W}K/{P}, N] "
            f"({W}-word blocks of {P} {spec.source.bits}-bit codes packed along K), "
            f"got {tuple(qweight.shape)}: {qweight.shape[0]} rows is not a multiple of {W}"
        )
    K, N = lay.kn_of(tuple(qweight.shape))
    layout = lay.qweight_text()
    if spec.scales.group_size == "auto":
        if len(scales.shape) != 2:
            raise ShapeError(
                f"scales: expected a 2-D tensor (G, {N}), G groups of K / G rows (group_size auto), "
                f"got shape {tuple(scales.shape)}"
            )
        try:
            gs = resolve_group_size(spec, K, scales.shape[0])
        except ValueError as e:
            raise ShapeError(str(e)) from None
    else:
        gs = spec.scales.group_size
    if gs > 0 and K % gs:
        raise ShapeError(
            f"qweight: K = {K} (from shape {qweight.shape} {layout}) is not a multiple of scales.group_size = {gs}"
        )
    G = K // gs if gs > 0 else 1
    shapes = lay.shapes(K, N, G)
    if spec.scales.block:
        # a block-scale tensor is its raw bytes (uint8) or the float8 dtype of the same bytes (torch's
        # float8_e8m0fnu / float8_e4m3fn, seen here as ml_dtypes' dtypes)
        assert spec.scales.dtype is not None  # Scales.block implies a dtype
        sd = scalar_type(spec.scales.dtype.value)
        if scales.dtype not in (np.dtype(np.uint8), numpy_dtype(sd)):
            raise ShapeError(
                f"scales: expected uint8 {sd.name} block-scale codes (or a torch.{torch_dtype_name(sd)} tensor), "
                f"got {_dt(scales)}"
            )
    elif scales.dtype != tdt:
        raise ShapeError(f"scales: expected dtype {spec.target.value} (the spec's target), got {_dt(scales)}")
    if tuple(scales.shape) != shapes["scales"]:
        raise ShapeError(
            f"scales: expected shape ({G}, {N}) = [K/group_size, N] for K={K}, N={N}, group_size={gs}; "
            f"got {tuple(scales.shape)}"
        )
    mode = spec.zeros.mode
    if spec.zeros.packed:
        if N % P:
            raise ShapeError(f"qweight: N = {N} is not a multiple of {P}, so qzeros cannot be packed along N")
        if zeros is None:
            raise ShapeError(
                f"zeros: this spec has packed integer zero points ({mode}); pass qzeros of shape ({G}, {N // P}) int32"
            )
        if zeros.dtype not in _INT_WORDS:
            raise ShapeError(
                f"zeros: expected int32 packed words ({mode}), got {_dt(zeros)}"
                + ("; unpacked float zeros need zeros.mode 'float'" if zeros.dtype.kind == "f" else "")
            )
        if tuple(zeros.shape) != shapes["zeros"]:
            raise ShapeError(f"zeros: expected shape ({G}, {N // P}) = [K/group_size, N/{P}], got {tuple(zeros.shape)}")
    elif spec.zeros.dense:
        if zeros is None:
            raise ShapeError(f"zeros: this spec has {mode} zeros; pass a ({G}, {N}) {spec.target.value} tensor")
        if zeros.dtype != tdt or tuple(zeros.shape) != shapes["zeros"]:
            raise ShapeError(
                f"zeros: expected a ({G}, {N}) {spec.target.value} tensor ({mode} zeros), "
                f"got {tuple(zeros.shape)} {_dt(zeros)}"
            )
    elif zeros is not None:
        raise ShapeError("zeros: this spec has no zero points (zeros.mode 'none'), but a zeros tensor was given")
    if spec.act_order:
        if g_idx is None:
            raise ShapeError(f"g_idx: this spec has act_order; pass g_idx, an int32 tensor of shape ({K},)")
        if g_idx.dtype != np.dtype(np.int32) or tuple(g_idx.shape) != shapes["g_idx"]:
            raise ShapeError(f"g_idx: expected an int32 tensor of shape ({K},), got {tuple(g_idx.shape)} {_dt(g_idx)}")
    elif g_idx is not None:
        raise ShapeError("g_idx: this spec has no act_order, but a g_idx tensor was given (set act_order: true)")
    if spec.scales.global_scale:
        if global_scale is None:
            raise ShapeError(
                "global_scale: this spec has a global scale (scales.global_scale: true); pass global_scale=, "
                "a one-element float32 tensor on the GPU"
            )
        if global_scale.dtype != np.dtype(np.float32) or global_scale.size != 1:
            raise ShapeError(
                "global_scale: expected a one-element float32 tensor, "
                f"got shape {tuple(global_scale.shape)} {_dt(global_scale)}"
            )
        if global_scale.ptr % 4:
            raise ShapeError("global_scale: expected a 4-byte aligned float32 tensor")
    elif global_scale is not None:
        raise ShapeError(
            "global_scale: this spec has no global scale (scales.global_scale: false), "
            "but a global_scale tensor was given"
        )
    if out is not None:
        if out.dtype != tdt:
            raise ShapeError(f"out: expected dtype {spec.target.value}, got {_dt(out)}")
        if tuple(out.shape) != shapes["out"]:
            raise ShapeError(f"out: expected shape ({K}, {N}), got {tuple(out.shape)}")
        if out.readonly:
            raise ShapeError("out: expected a writable tensor, got one its producer marked read-only")
    arrays = {"qweight": qweight, "scales": scales, "zeros": zeros, "g_idx": g_idx, "out": out}
    for name, a in arrays.items():
        if a is not None and not a.is_c_contiguous:
            raise ShapeError(
                f"{name}: expected a contiguous (row-major) tensor, got shape {a.shape} "
                f"with byte strides {a.strides_bytes}; call .contiguous() first"
            )
    for name, a in (arrays | {"global_scale": global_scale}).items():
        if a is not None and a.device != qweight.device:
            raise ShapeError(
                f"{name}: on CUDA device {a.device}, but qweight is on device {qweight.device}; "
                "all tensors must share one device"
            )
    # (the global scale is one float, read with a 4-byte load: it takes no part in the vector-access rule)
    aligned = all(a.ptr % 16 == 0 for a in arrays.values() if a is not None and a.size)
    if spec.packing.axis == "K":  # a thread's 8 columns (4 for multi-word blocks) are one vector access
        aligned = aligned and N % (8 if W == 1 else 4) == 0
    return Problem(K, N, G, aligned, gs)


def checkpoint_problem(
    spec: Spec, qweight: Any, scales: Any, zeros: Any = None, g_idx: Any = None, global_scale: Any = None
) -> Problem:
    """The checks of a call (shapes, dtypes, devices; g_idx values apart) on the checkpoint tensors."""
    as_arr = dev.as_device_array
    return infer_problem(
        spec,
        as_arr(qweight, "qweight"),
        as_arr(scales, "scales"),
        None if zeros is None else as_arr(zeros, "zeros"),
        None,
        None if g_idx is None else as_arr(g_idx, "g_idx"),
        None if global_scale is None else as_arr(global_scale, "global_scale"),
    )


def output_shape(spec: Spec, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
    """(K, N) of the dequantized weight for a qweight of this shape (shape checks are the call's)."""
    lay = Layout.of(spec)
    return lay.k_of(int(qweight_shape[0])), lay.n_of(int(qweight_shape[1]))


def torch_capturing() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def check_g_idx(gi: dev.DeviceArray, groups: int) -> None:
    """Every act-order group index in [0, G): one device->host copy (the caller caches the verdict)."""
    if torch_capturing():
        raise ShapeError(
            "g_idx: not checked yet (new tensor or changed in place) while a CUDA graph is being captured; "
            "checking copies it to the host: call the kernel once before capturing"
        )
    host = dev.to_host(gi)
    bad = np.nonzero((host < 0) | (host >= groups))[0]
    if bad.size:
        raise ShapeError(
            f"g_idx: entry {int(bad[0])} is {int(host[bad[0]])}, outside [0, {groups}) "
            f"({bad.size} such entries; G = K / group_size = {groups})"
        )
