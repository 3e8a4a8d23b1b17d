"""``dqgen.compile``: a spec in, a callable dequantize kernel out.

The callable checks every tensor against the spec before anything launches (dtype, shape,
device, contiguity, alignment) and raises an error that names the tensor and what was
expected. The launch goes through the CUDA driver API (cuda-bindings); torch and cupy are
only used, when present, to accept their tensors, allocate outputs and find the current stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from . import device as dev
from .nvrtc import compile_source
from .prove import quick_check
from .render import BLOCK, Variant, kernel_name, render_kernel, variants
from .solver import solve
from .spec import Spec, load_spec

_INT_WORDS = (np.dtype(np.int32), np.dtype(np.uint32))
# gridDim.x limit; past it the kernel loops over tiles (grid-stride).
MAX_GRID = 2**31 - 1


#: Dtypes a block-scale tensor may have, per ``scales.dtype``: its raw bytes (uint8), or the torch float8
#: dtype of the same bytes (torch.float8_e8m0fnu / torch.float8_e4m3fn, seen here as ml_dtypes' dtypes).
_BLOCK_SCALE_DTYPES: dict[str, tuple[np.dtype, ...]] = {
    "e8m0": (np.dtype(np.uint8), np.dtype(ml_dtypes.float8_e8m0fnu)),
    "e4m3": (np.dtype(np.uint8), np.dtype(ml_dtypes.float8_e4m3fn)),
}
_TORCH_FLOAT8 = {"e8m0": "torch.float8_e8m0fnu", "e4m3": "torch.float8_e4m3fn"}


class ShapeError(ValueError):
    """A tensor does not match the spec; the message names the tensor."""


def target_dtype(spec: Spec) -> np.dtype:
    return np.dtype(np.float16) if spec.target.value == "fp16" else np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class Problem:
    K: int
    N: int
    groups: int
    aligned: bool  # every base pointer 16-byte aligned (and, packing along K, N % 8 == 0; N % 4 for multi-word blocks)


def _dt(a: dev.DeviceArray) -> str:
    return "bfloat16" if a.dtype == np.dtype(ml_dtypes.bfloat16) else str(a.dtype)


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
    P, gs, W = spec.per_word, spec.scales.group_size, spec.words
    tdt = target_dtype(spec)
    if qweight.dtype not in _INT_WORDS or len(qweight.shape) != 2:
        raise ShapeError(
            f"qweight: expected a 2-D int32 tensor of packed words, got {len(qweight.shape)}-D {_dt(qweight)}"
        )
    if spec.packing.axis == "N":
        K, N = qweight.shape[0], qweight.shape[1] * P
        layout = f"[K, N/{P}] (packed along N)"
    elif W > 1:
        if qweight.shape[0] % W:
            raise ShapeError(
                f"qweight: expected shape [{W}K/{P}, N] ({W}-word blocks of {P} {spec.source.bits}-bit codes packed along K), "
                f"got {tuple(qweight.shape)}: {qweight.shape[0]} rows is not a multiple of {W}"
            )
        K, N = qweight.shape[0] // W * P, qweight.shape[1]
        layout = f"[{W}K/{P}, N] (packed along K in {W}-word blocks)"
    else:
        K, N = qweight.shape[0] * P, qweight.shape[1]
        layout = f"[K/{P}, N] (packed along K)"
    if gs > 0 and K % gs:
        raise ShapeError(
            f"qweight: K = {K} (from shape {qweight.shape} {layout}) is not a multiple of scales.group_size = {gs}"
        )
    G = K // gs if gs > 0 else 1
    if spec.scales.block:
        sd = spec.scales.dtype.value
        if scales.dtype not in _BLOCK_SCALE_DTYPES[sd]:
            raise ShapeError(
                f"scales: expected uint8 {sd} block-scale codes (or a {_TORCH_FLOAT8[sd]} tensor), got {_dt(scales)}"
            )
    elif scales.dtype != tdt:
        raise ShapeError(f"scales: expected dtype {spec.target.value} (the spec's target), got {_dt(scales)}")
    if tuple(scales.shape) != (G, N):
        raise ShapeError(
            f"scales: expected shape ({G}, {N}) = [K/group_size, N] for K={K}, N={N}, group_size={gs}; got {tuple(scales.shape)}"
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
        if tuple(zeros.shape) != (G, N // P):
            raise ShapeError(f"zeros: expected shape ({G}, {N // P}) = [K/group_size, N/{P}], got {tuple(zeros.shape)}")
    elif mode in ("float", "additive"):
        if zeros is None:
            raise ShapeError(f"zeros: this spec has {mode} zeros; pass a ({G}, {N}) {spec.target.value} tensor")
        if zeros.dtype != tdt or tuple(zeros.shape) != (G, N):
            raise ShapeError(
                f"zeros: expected a ({G}, {N}) {spec.target.value} tensor ({mode} zeros), got {tuple(zeros.shape)} {_dt(zeros)}"
            )
    elif zeros is not None:
        raise ShapeError("zeros: this spec has no zero points (zeros.mode 'none'), but a zeros tensor was given")
    if spec.act_order:
        if g_idx is None:
            raise ShapeError(f"g_idx: this spec has act_order; pass g_idx, an int32 tensor of shape ({K},)")
        if g_idx.dtype != np.dtype(np.int32) or tuple(g_idx.shape) != (K,):
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
                f"global_scale: expected a one-element float32 tensor, got shape {tuple(global_scale.shape)} {_dt(global_scale)}"
            )
        if global_scale.ptr % 4:
            raise ShapeError("global_scale: expected a 4-byte aligned float32 tensor")
    elif global_scale is not None:
        raise ShapeError(
            "global_scale: this spec has no global scale (scales.global_scale: false), but a global_scale tensor was given"
        )
    if out is not None:
        if out.dtype != tdt:
            raise ShapeError(f"out: expected dtype {spec.target.value}, got {_dt(out)}")
        if tuple(out.shape) != (K, N):
            raise ShapeError(f"out: expected shape ({K}, {N}), got {tuple(out.shape)}")
    arrays = {"qweight": qweight, "scales": scales, "zeros": zeros, "g_idx": g_idx, "out": out}
    for name, a in arrays.items():
        if a is not None and not a.is_c_contiguous:
            raise ShapeError(
                f"{name}: expected a contiguous (row-major) tensor, got shape {a.shape} with byte strides {a.strides_bytes}; call .contiguous() first"
            )
    for name, a in (arrays | {"global_scale": global_scale}).items():
        if a is not None and a.device != qweight.device:
            raise ShapeError(
                f"{name}: on CUDA device {a.device}, but qweight is on device {qweight.device}; all tensors must share one device"
            )
    # (the global scale is one float, read with a 4-byte load: it takes no part in the vector-access rule)
    aligned = all(a.ptr % 16 == 0 for a in arrays.values() if a is not None and a.size)
    if spec.packing.axis == "K":  # a thread's 8 columns (4 for multi-word blocks) are one vector access
        aligned = aligned and N % (8 if W == 1 else 4) == 0
    return Problem(K, N, G, aligned)


def default_variant(spec: Spec, aligned: bool) -> Variant:
    """The launch rule before tuning: 4 rows per thread along N (one zero/scale preparation for
    4 rows, 4 independent loads in flight), 2 word-rows (16 rows of K) along K, one block (32 rows
    of K, 3 word-rows) for multi-word blocks."""
    rows = 4 if spec.packing.axis == "N" else 1 if spec.words > 1 else 2  # multi-word: 1 block = 32 rows of K
    for v in variants(spec):
        if v.rows == rows and v.aligned == aligned and not v.stream and (v.vec == 1 or spec.packing.axis == "K"):
            return v
    raise AssertionError("no default variant")


class Kernel:
    """A compiled dequantizer for one spec. Call it on CUDA tensors (torch, cupy, or any object with
    ``__cuda_array_interface__`` / DLPack):
    ``kernel(qweight, scales, zeros=None, *, g_idx=None, global_scale=None, out=None, stream=None)``;
    ``global_scale`` (a one-element fp32 tensor) is required exactly when the spec has one (NVFP4)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.plan = solve(spec)
        bad = quick_check(self.plan, spec)
        if bad:  # solve() only returns checked plans; this guards the render path's input
            raise RuntimeError(f"{spec.name}: plan failed its lane check: {bad}")
        self.source = render_kernel(spec, self.plan)
        self._loaded: dict[tuple[int, str], dev.LoadedKernel] = {}
        self._tuned: dict[int, dict[str, Variant] | None] = {}

    def _function(self, ordinal: int, name: str) -> dev.LoadedKernel:
        key = (ordinal, name)
        if key not in self._loaded:
            arch = dev.device_arch(ordinal)
            if int(arch[3:].rstrip("af")) < self.spec.sm:
                raise RuntimeError(f"{self.spec.name}: spec targets {self.spec.arch} but GPU {ordinal} is {arch}")
            res = compile_source(self.source, arch=arch, want="cubin", name=f"{self.spec.name}.cu")
            assert res.cubin is not None
            self._loaded[key] = dev.LoadedKernel(res.cubin, name, ordinal)
        return self._loaded[key]

    def variant_for(self, ordinal: int, prob: Problem) -> Variant:
        """The variant tuned on this GPU for the problem's size class (`dqgen build` tunes once),
        else the default rule; unaligned tensors always take the 4-byte-access variant."""
        from .tune import load_tuning, size_class

        if ordinal not in self._tuned:
            self._tuned[ordinal] = load_tuning(self, ordinal)
        tuned = self._tuned[ordinal]
        if tuned is not None and prob.aligned:
            return tuned[size_class(prob.K, prob.N)]
        return default_variant(self.spec, prob.aligned)

    def prepare(
        self,
        qweight: Any,
        scales: Any,
        zeros: Any = None,
        *,
        g_idx: Any = None,
        global_scale: Any = None,
        out: Any = None,
        stream: Any = None,
        variant: Variant | None = None,
    ) -> Launch:
        """Validate the tensors and bind a launch: ``launch()`` runs the kernel, ``launch.out`` is the output.
        Re-launching a prepared Launch skips the checks (for hot loops and CUDA graphs). With act_order,
        g_idx is copied to the host once here and every entry checked against [0, G)."""
        q = dev.as_device_array(qweight, "qweight")
        s = dev.as_device_array(scales, "scales")
        z = dev.as_device_array(zeros, "zeros") if zeros is not None else None
        gi = dev.as_device_array(g_idx, "g_idx") if g_idx is not None else None
        gsc = dev.as_device_array(global_scale, "global_scale") if global_scale is not None else None
        o = dev.as_device_array(out, "out") if out is not None else None
        prob = infer_problem(self.spec, q, s, z, o, gi, gsc)
        if gi is not None and gi.size:
            host = dev.to_host(gi)
            bad = np.nonzero((host < 0) | (host >= prob.groups))[0]
            if bad.size:
                raise ShapeError(
                    f"g_idx: entry {int(bad[0])} is {int(host[bad[0]])}, outside [0, {prob.groups}) "
                    f"({bad.size} such entries; G = K / group_size = {prob.groups})"
                )
        if out is None:
            out = dev.allocate_like(q.kind, (prob.K, prob.N), target_dtype(self.spec), q.device)
            o = dev.as_device_array(out, "out")
        assert o is not None
        v = variant or self.variant_for(q.device, prob)
        if v not in variants(self.spec):
            raise ValueError(
                f"variant {v} is not instantiated for {self.spec.name}; choose one of dqgen.render.variants(spec)"
            )
        if v.aligned and not prob.aligned:
            raise ShapeError(f"qweight: variant {kernel_name(self.spec, v)} needs 16-byte aligned tensors")
        P = self.spec.per_word
        if self.spec.packing.axis == "N":
            rows, cols = prob.K, prob.N // P
            tiles = -(-cols // (BLOCK * v.vec)) * -(-rows // v.rows)
        else:  # rows: packing blocks along K (one word each, or spec.words words for 3-bit codes)
            rows, cols = prob.K // P, prob.N
            tiles = -(-cols // (BLOCK * v.vec)) * -(-rows // v.rows)
        # One block per tile: the hardware balances blocks across SMs at the granularity of one tile,
        # where a capped grid-stride loop leaves a tail of up to a whole block's share of tiles.
        blocks = max(1, min(tiles, MAX_GRID))
        handle = dev.stream_handle(stream) if stream is not None else dev.current_stream(q.kind, q.device)
        args = [
            np.uint64(q.ptr),
            np.uint64(s.ptr),
            np.uint64(z.ptr if z is not None else 0),
            np.uint64(gi.ptr if gi is not None else 0),
        ]
        if self.spec.scales.global_scale:  # the entry points of such specs take `const float* global_scale` here
            assert gsc is not None
            args.append(np.uint64(gsc.ptr))
        args += [np.uint64(o.ptr), np.int64(rows), np.int64(cols), np.int64(self.spec.scales.group_size)]
        fn = (
            self._function(q.device, kernel_name(self.spec, v)).bind((blocks,), (BLOCK,), args)
            if rows and cols
            else None
        )
        return Launch(fn, handle, out, v)

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
    ) -> Any:
        launch = self.prepare(qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale, out=out, stream=stream)
        launch()
        return launch.out


@dataclass
class Launch:
    fn: dev.BoundLaunch | None  # None for an empty output
    stream: int
    out: Any
    variant: Variant

    def __call__(self, stream: Any = None) -> None:
        """Launch on the stream given at prepare time, or on ``stream`` (e.g. a graph-capture stream)."""
        if self.fn is not None:
            self.fn(self.stream if stream is None else dev.stream_handle(stream))


def compile(spec: Spec | str | Path | dict) -> Kernel:
    """Solve, check and render ``spec`` (a Spec, a YAML path or a dict); returns a callable Kernel.
    The CUDA binary is built for the GPU the tensors live on at first call, through NVRTC's cache."""
    return Kernel(spec if isinstance(spec, Spec) else load_spec(spec))
