"""``dqgen.compile``: a spec in, a callable dequantize kernel out.

The callable checks every tensor against the spec before anything launches (dtype, shape,
device, contiguity, alignment) and raises an error that names the tensor and what was
expected. The launch goes through the CUDA driver API (cuda-bindings); torch and cupy are
only used, when present, to accept their tensors, allocate outputs and find the current stream.
"""

from __future__ import annotations

import hashlib
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.formats import torch_dtype
from ..core.spec import Spec
from ..emit.pipeline import Artifact, compile_artifact
from ..emit.render import BLOCK
from ..kernels.dequant import DequantConfig, DequantVariant, kernel_name, variants
from ..kernels.gemm import supports as gemm_supports
from ..kernels.gemm90 import hopper_only
from . import device as dev
from . import fastcall, registry
from . import problem as checks
from . import tune as tuning
from .calls import SIGNATURES_MAX, remember
from .dispatch import MatmulTarget
from .errors import ShapeError
from .loader import compile_for, load
from .problem import Problem, infer_problem, output_shape, target_dtype
from .tune import default_variant, load_tuning, size_class

# gridDim.x limit; past it the kernel loops over tiles (grid-stride).
MAX_GRID = 2**31 - 1


def _never() -> bool:
    return False


#: torch.compiler.is_compiling once torch is loaded: under torch.compile a call goes through the dqgen custom op.
_compiling: Callable[[], bool] = _never
_traced_call: Callable[..., Any] | None = None
#: torch.Tensor once torch is loaded (None before): the per-call fast path is for exactly this type.
_torch_tensor: Any = None
#: torch's current raw CUstream of a device, as an int (torch's C accessor: no Stream object per call).
_raw_stream: Callable[[int], int] | None = None


def _hook_torch() -> None:
    """Register the torch custom ops (dqgen.run.torch_op) once torch is imported; never imports torch itself."""
    if _torch_tensor is None and "torch" in sys.modules:
        torch = sys.modules["torch"]
        from . import torch_op

        torch_op.register()  # the dequantize and matmul ops, over dqgen.run.registry's Kernels
        _use_torch(torch, torch_op.traced_call, torch.compiler.is_compiling)


def _use_torch(torch: Any, traced_call: Callable[..., Any], compiling: Callable[[], bool]) -> None:
    """What the call path takes from torch, looked up once."""
    global _compiling, _traced_call, _torch_tensor, _raw_stream
    _raw_stream = dev.torch_raw_stream_fn(torch)
    _traced_call, _compiling, _torch_tensor = traced_call, compiling, torch.Tensor


@dataclass(slots=True)
class _Checked:
    """A launch checked for one tensor signature: re-running it needs no check (stream aside)."""

    fn: dev.BoundLaunch | None
    device: int
    stream: int | None  # the explicit stream, or None: the producing library's current stream
    gidx_version: int | None  # torch's _version of the g_idx checked (act-order), re-checked when it moves on
    # The g_idx tensor checked: a new tensor at a freed one's address starts at _version 0 too, so identity counts
    gidx_ref: Callable[[], Any] | None = None
    # fn's launch (BoundLaunch.launch) and packed arguments, read straight off the entry by the fast path
    launch: Callable[[int, int, int], tuple[Any]] | None = field(init=False)
    params: int = field(init=False)

    def __post_init__(self) -> None:
        self.launch, self.params = (None, 0) if self.fn is None else (self.fn.launch, self.fn.params)


class Kernel:
    """A compiled dequantizer for one spec. Call it on CUDA tensors (torch, cupy, or any object with
    ``__cuda_array_interface__`` / DLPack):
    ``kernel(qweight, scales, zeros=None, *, g_idx=None, global_scale=None, out=None, stream=None)``;
    ``global_scale`` (a one-element fp32 tensor) is required exactly when the spec has one (NVFP4).

    Each variant's entry point is compiled on first use, alone (NVRTC's time grows with the entry points in a
    source). Calls on torch tensors are checked once per tensor signature (pointers, shapes, strides, dtypes;
    act-order g_idx once per tensor version); later calls with the same signature only launch."""

    def __init__(self, spec: Spec | Artifact) -> None:
        # a Spec goes through the pipeline (memoized): a Kernel never solves or renders on its own
        artifact = spec if isinstance(spec, Artifact) else compile_artifact(spec)
        self.artifact = artifact
        self.spec = artifact.spec
        self.plan = artifact.plan
        self._loaded: dict[tuple[int, str], dev.LoadedKernel] = {}
        #: Per device: (tune.saves when read, the tuned table or None): re-read once a tuning was saved since.
        self._tuned: dict[int, tuple[int, dict[str, DequantVariant] | None]] = {}
        self._by_name = {kernel_name(self.spec, v): v for v in variants(self.spec)}
        self._signatures: dict[tuple, _Checked] = {}
        #: Checked decode matmuls by signature (dqgen.run.fastcall): QuantLinear's forward looks its calls up here too.
        self.fast = fastcall.FastTable()
        self.compiled: list[str] = []  # entry points this Kernel compiled or loaded, in order
        self.op_key = f"{self.spec.name}-{hashlib.sha256(self.spec.model_dump_json().encode()).hexdigest()[:16]}"
        #: Whether the tensor-core GEMM takes this spec (MatmulTarget.gemm_ok says why it is decided here).
        #: Float and codebook specs (fp8, nf4, ...) have the Hopper GEMM alone (gemm90.hopper_only).
        only90 = hopper_only(self.spec)
        self.gemm_ok = gemm_supports(self.spec) or only90
        #: What the matmul paths (dqgen.run.dispatch) take of this spec; the dense path dequantizes through self.
        self.target = MatmulTarget(artifact, self.op_key, self.gemm_ok, self, only90, self.spec.scales.global_scale)
        registry.add(self.op_key, self)
        _hook_torch()
        # cuda.core (the argument packer) takes a few hundred ms to import: here, not in the first call
        dev.param_holder_type()

    @property
    def source(self) -> str:
        """Every variant's entry point in one source: what `dqgen build` writes and the tuner's cache is keyed on."""
        return DequantConfig(self.artifact).source()

    def variant_source(self, v: DequantVariant) -> str:
        """The source NVRTC compiles for variant ``v``: the kernel with ``v``'s entry point alone."""
        return DequantConfig(self.artifact, v).source()

    def _function(self, ordinal: int, name: str) -> dev.LoadedKernel:
        """The entry point ``name`` on GPU ``ordinal`` (dqgen.run.loader: the variant's own cubin, else the whole
        set's if `dqgen build` or load_all left it in the disk cache, else the variant compiled alone)."""
        key = (ordinal, name)
        if key not in self._loaded:
            v = self._by_name.get(name)
            if v is None:
                raise ValueError(f"{name}: not an entry point of {self.spec.name}'s dequantize kernel")
            self._loaded[key] = load(DequantConfig(self.artifact, v), ordinal)
            self.compiled.append(name)
        return self._loaded[key]

    def load_all(self, ordinal: int) -> None:
        """Compile (or take from the cache) the whole variant set in one source and load every entry point: one
        NVRTC run for all, where the tuner would otherwise compile each variant apart (the loader then finds each
        variant in the set's cached cubin and loads the module once)."""
        compile_for(DequantConfig(self.artifact), ordinal)
        for name in self._by_name:
            self._function(ordinal, name)

    def variant_for(self, ordinal: int, prob: Problem) -> DequantVariant:
        """The variant tuned on this GPU for the problem's size class (`dqgen build` tunes once),
        else the default rule; unaligned tensors always take the 4-byte-access variant."""
        hit = self._tuned.get(ordinal)
        if hit is None or hit[0] != tuning.saves:
            hit = self._tuned[ordinal] = (tuning.saves, load_tuning(self.artifact, ordinal))
        tuned = hit[1]
        if tuned is not None and prob.aligned:
            return tuned[size_class(prob.K, prob.N)]
        return default_variant(self.spec, prob.aligned)

    def output_shape(self, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
        """(K, N) of the output for a qweight of this shape (shape checks are the call's)."""
        return output_shape(self.spec, qweight_shape)

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
        variant: DequantVariant | None = None,
        check_g_idx: bool = True,
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
        if gi is not None and gi.size and check_g_idx:
            checks.check_g_idx(gi, prob.groups)
        if out is None:
            out = dev.allocate_like(q.kind, (prob.K, prob.N), target_dtype(self.spec), q.device)
            o = dev.as_device_array(out, "out")
        assert o is not None
        v = variant or self.variant_for(q.device, prob)
        if v not in self._by_name.values():
            raise ValueError(
                f"variant {v} is not instantiated for {self.spec.name}; "
                "choose one of dqgen.kernels.dequant.variants(spec)"
            )
        if v.aligned and not prob.aligned:
            raise ShapeError(f"qweight: variant {kernel_name(self.spec, v)} needs 16-byte aligned tensors")
        P = self.spec.per_word
        if self.spec.packing.axis == "N":
            rows, cols = prob.K, prob.N // P
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
        args += [np.uint64(o.ptr), np.int64(rows), np.int64(cols), np.int64(prob.group_size)]
        fn = (
            self._function(q.device, kernel_name(self.spec, v)).bind((blocks,), (BLOCK,), args)
            if rows and cols
            else None
        )
        return Launch(fn, handle, out, v, q.device)

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
        # The per-call fast path (a torch.Tensor qweight, a given out, no act-order): build the signature key, one
        # dict lookup, one cuLaunchKernel. The key is _signature_key's, written out here (no function call per
        # tensor: they cost a good part of the budget); tests hold the two to the same table entries.
        if out is not None and g_idx is None and type(qweight) is _torch_tensor and not _compiling():
            try:
                key = (
                    qweight.data_ptr(),
                    qweight.shape,
                    qweight.is_contiguous(),
                    qweight.dtype,
                    scales.data_ptr(),
                    scales.shape,
                    scales.is_contiguous(),
                    scales.dtype,
                    None if zeros is None else (zeros.data_ptr(), zeros.shape, zeros.is_contiguous(), zeros.dtype),
                    None,
                    None if global_scale is None else _sig(global_scale),
                    out.data_ptr(),
                    out.shape,
                    out.is_contiguous(),
                    out.dtype,
                    None if stream is None else dev.stream_handle(stream),
                )
            except AttributeError:  # not a tensor where one belongs: the checked path names it
                pass
            else:
                hit = self._signatures.get(key)
                if hit is not None:
                    if hit.launch is not None:
                        handle = hit.stream if hit.stream is not None else _raw_stream(hit.device)  # type: ignore[misc]
                        err = hit.launch(handle, hit.params, 0)[0]
                        if err:
                            hit.fn.failed(err, handle)  # type: ignore[union-attr]
                    return out
        return self._call(qweight, scales, zeros, g_idx, global_scale, out, stream)

    def _call(self, qweight: Any, scales: Any, zeros: Any, g_idx: Any, global_scale: Any, out: Any, stream: Any) -> Any:
        """Every call the fast path does not take: traced by torch.compile, torch tensors seen for the first time
        (or act-order, or no ``out``), and the other array libraries (checked on every call)."""
        if _compiling():  # traced by torch.compile: one custom op in the graph (see dqgen.run.torch_op)
            assert _traced_call is not None
            return _traced_call(self.op_key, qweight, scales, zeros, g_idx, global_scale, out)
        if _torch_tensor is None:
            _hook_torch()  # torch may have been imported after this Kernel was made
        if _torch_tensor is not None and isinstance(qweight, _torch_tensor):
            return self.torch_call(sys.modules["torch"], qweight, scales, zeros, g_idx, global_scale, out, stream)
        launch = self.prepare(qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale, out=out, stream=stream)
        launch()
        return launch.out

    def torch_call(
        self, torch: Any, qweight: Any, scales: Any, zeros: Any, g_idx: Any, global_scale: Any, out: Any, stream: Any
    ) -> Any:
        """The call on torch tensors (also what the custom ops run): checked once per signature, then a dict lookup
        and one launch."""
        if out is None:
            K, N = self.output_shape(qweight.shape) if qweight.dim() == 2 else (0, 0)
            if qweight.dim() == 2 and qweight.is_cuda:
                out = torch.empty((K, N), dtype=torch_dtype(self.spec.target_type, torch), device=qweight.device)
        key = _signature_key(qweight, scales, zeros, g_idx, global_scale, out, stream)
        hit = self._signatures.get(key)
        if hit is None:
            hit = self._check_signature(key, qweight, scales, zeros, g_idx, global_scale, out, stream)
        elif g_idx is not None and (
            g_idx._version != hit.gidx_version or hit.gidx_ref is None or hit.gidx_ref() is not g_idx
        ):
            checks.check_g_idx(dev.as_device_array(g_idx, "g_idx"), self._groups_of(scales))
            hit.gidx_version, hit.gidx_ref = g_idx._version, weakref.ref(g_idx)
        if hit.fn is not None:
            hit.fn(dev.torch_raw_stream(torch, hit.device) if hit.stream is None else hit.stream)
        return out

    def pack_matmul(
        self,
        qweight: Any,
        scales: Any,
        zeros: Any = None,
        *,
        g_idx: Any = None,
        global_scale: Any = None,
        gemm: bool = True,
    ) -> Any:
        """Check the checkpoint tensors and prepack them once for ``matmul``: a dqgen.run.matmul.MatmulWeight, with
        the tensor-core GEMM's layout packed beside it for M > 16 (``gemm=False``: the GEMV's alone, half the
        memory; M > 16 then runs the GEMV 16 rows at a time). From the dispatch rule's dense M on, the call
        dequantizes the checkpoint tensors and runs cuBLAS while they are still alive and unchanged (weak
        references: a QuantLinear keeps them as buffers); else the GEMM runs."""
        from . import dispatch, matmul

        _hook_torch()  # the matmul custom ops, for torch imported after this Kernel was made
        w = matmul.pack_gemv(self.artifact, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale)
        dispatch.attach(self.target, w, qweight, scales, zeros, g_idx, gemm, global_scale)
        return w

    def matmul(
        self,
        x: Any,
        w: Any,
        scales: Any = None,
        zeros: Any = None,
        *,
        g_idx: Any = None,
        global_scale: Any = None,
        bias: Any = None,
        out: Any = None,
    ) -> Any:
        """y = x @ dequant(W) (+ bias), fused (dqgen.run.matmul): ``matmul(x, w)`` with a MatmulWeight from
        ``pack_matmul``, or ``matmul(x, qweight, scales, zeros, g_idx=..., global_scale=...)``, packed once per
        weight tensor version. Dispatched by M (dqgen.run.dispatch): GEMV, tensor-core GEMM or dense.

        Eager calls of the decode case (the GEMV's one launch) are checked once per signature (dqgen.run.fastcall:
        the weight, x's shape, dtype, device, contiguity and alignment, bias, out) and then re-launched with x's and
        y's pointers patched in."""
        traced = _compiling()  # decided once for the call: the dispatch takes it as given
        if not traced and g_idx is None and global_scale is None:
            y = fastcall.matmul_hit(self.fast, x, w, scales, zeros, bias, out)
            if y is not None:
                return y
        from . import dispatch

        if traced:  # (traced: the ops are registered already)
            return dispatch.dispatch(
                self.target,
                x,
                w,
                scales,
                zeros,
                g_idx=g_idx,
                global_scale=global_scale,
                bias=bias,
                out=out,
                traced=True,
            )
        _hook_torch()
        y = dispatch.dispatch(
            self.target, x, w, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias, out=out
        )
        if g_idx is None and global_scale is None:
            fastcall.matmul_remember(self.target, self.fast, x, w, scales, zeros, bias, out, y)
        return y

    def _groups_of(self, scales: Any) -> int:
        return int(scales.shape[0])

    def _check_signature(
        self, key: tuple, qweight: Any, scales: Any, zeros: Any, g_idx: Any, global_scale: Any, out: Any, stream: Any
    ) -> _Checked:
        """Every check of ``prepare`` (g_idx values included), then the launch cached under ``key``."""
        _hook_torch()  # torch may have been imported after this Kernel was made
        launch = self.prepare(
            qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale, out=out, stream=stream, check_g_idx=False
        )
        if g_idx is not None and g_idx.numel():
            checks.check_g_idx(dev.as_device_array(g_idx, "g_idx"), self._groups_of(scales))
        entry = _Checked(
            launch.fn,
            launch.device,
            None if stream is None else launch.stream,
            None if g_idx is None else g_idx._version,
            None if g_idx is None else weakref.ref(g_idx),
        )
        return remember(self._signatures, key, entry, SIGNATURES_MAX)


def _sig(t: Any) -> tuple | None:
    # A non-tensor argument keys by identity (it fails the check in prepare, which raises before caching).
    if t is None:
        return None
    try:
        return (t.data_ptr(), t.shape, t.is_contiguous(), t.dtype)
    except AttributeError:
        return (id(t),)


def _signature_key(
    qweight: Any, scales: Any, zeros: Any, g_idx: Any, global_scale: Any, out: Any, stream: Any
) -> tuple:
    """What a checked launch is valid for: every tensor's data pointer (which fixes the device: unified
    addressing), shape, contiguity and dtype (kept apart because a .view(dtype) shares the rest), and the explicit
    stream. Contiguity stands for the strides: it is all the launch depends on (the check refuses any other layout,
    and strides of size-1 dimensions do not matter), and is_contiguous() costs less than stride() per call.
    Flat for qweight, scales and out, as Kernel.__call__ builds it inline."""
    q, s, o = _sig(qweight) or (), _sig(scales) or (), _sig(out) or ()
    if len(q) != 4 or len(s) != 4 or len(o) != 4:  # one of them is no tensor: a key that no fast call builds
        return ("unchecked", q, s, _sig(zeros), _sig(g_idx), _sig(global_scale), o, stream)
    return (
        *q,
        *s,
        _sig(zeros),
        _sig(g_idx),
        _sig(global_scale),
        *o,
        None if stream is None else dev.stream_handle(stream),
    )


@dataclass
class Launch:
    fn: dev.BoundLaunch | None  # None for an empty output
    stream: int
    out: Any
    variant: DequantVariant
    device: int = 0

    def __call__(self, stream: Any = None) -> None:
        """Launch on the stream given at prepare time, or on ``stream`` (e.g. a graph-capture stream)."""
        if self.fn is not None:
            self.fn(self.stream if stream is None else dev.stream_handle(stream))
