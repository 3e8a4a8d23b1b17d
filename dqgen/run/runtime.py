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

from ..core.formats import BF16, numpy_dtype, scalar_type, torch_dtype, torch_dtype_name
from ..core.spec import Spec, resolve_group_size
from ..emit.nvrtc import cache_lookup, compile_source
from ..emit.pipeline import Artifact, compile_artifact
from ..emit.render import BLOCK, Variant, kernel_name
from ..layout.layout import Layout
from . import device as dev
from . import fastcall
from .errors import ShapeError
from .gemm import supports as gemm_supports
from .tune import default_variant, load_tuning, size_class

_INT_WORDS = (np.dtype(np.int32), np.dtype(np.uint32))
# gridDim.x limit; past it the kernel loops over tiles (grid-stride).
MAX_GRID = 2**31 - 1


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


#: Loaded entry points of this process, by (sha256 of the variant's source, arch, entry name, device): a second
#: Kernel of the same spec reuses the module, with no disk-cache read and no module load.
_MODULES: dict[tuple[str, str, str, int], dev.LoadedKernel] = {}
#: Checked launches kept per Kernel; past this many tensor signatures the table starts over.
_SIGNATURES_MAX = 256


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

        torch_op.register(_KERNELS)
        from . import gemm_op, matmul_op  # the fused matmul's ops, over torch_op's registry of Kernels

        matmul_op.register()
        gemm_op.register()
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
    # fn's cuLaunchKernel partial and packed arguments, read straight off the entry by the fast path
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
        #: Every variant's entry point in one source: what `dqgen build` writes and the tuner's cache is keyed on.
        self.source = artifact.source
        self._loaded: dict[tuple[int, str], dev.LoadedKernel] = {}
        self._tuned: dict[int, dict[str, Variant] | None] = {}
        self._by_name = {kernel_name(self.spec, v): v for v in artifact.variants}
        self._signatures: dict[tuple, _Checked] = {}
        #: matmul's launches checked once per signature, re-run with x's and y's pointers patched in (fastcall)
        self._fast = fastcall.FastTable()
        self.compiled: list[str] = []  # entry points this Kernel compiled or loaded, in order
        self.op_key = f"{self.spec.name}-{hashlib.sha256(self.spec.model_dump_json().encode()).hexdigest()[:16]}"
        #: Whether the tensor-core GEMM takes this spec: decided here, so that the dispatch reads a constant when
        #: torch.compile traces it (dynamo cannot trace the spec's properties).
        self.gemm_ok = gemm_supports(self.spec)
        _KERNELS[self.op_key] = self
        _hook_torch()
        # cuda.core (the argument packer) takes a few hundred ms to import: here, not in the first call
        dev.param_holder_type()

    def variant_source(self, v: Variant) -> str:
        """The source NVRTC compiles for variant ``v``: the kernel with ``v``'s entry point alone."""
        return self.artifact.variant_source(v)

    def _function(self, ordinal: int, name: str) -> dev.LoadedKernel:
        key = (ordinal, name)
        if key not in self._loaded:
            arch = dev.device_arch(ordinal)
            if int(arch[3:].rstrip("af")) < self.spec.sm:
                raise RuntimeError(f"{self.spec.name}: spec targets {self.spec.arch} but GPU {ordinal} is {arch}")
            v = self._by_name.get(name)
            cu_name = f"{self.spec.name}.cu"
            # The variant's own cubin; else the whole set's if `dqgen build` (or load_all) left it in the disk
            # cache; else compile the variant alone (a fraction of the whole set's NVRTC time).
            source = self.source if v is None else self.variant_source(v)
            module_key = (hashlib.sha256(source.encode()).hexdigest(), arch, name, ordinal)
            mod = _MODULES.get(module_key)
            if mod is None:
                res = cache_lookup(source, arch=arch, want="cubin", name=cu_name)
                if res is None and v is not None:
                    res = cache_lookup(self.source, arch=arch, want="cubin", name=cu_name)
                if res is None:
                    res = compile_source(source, arch=arch, want="cubin", name=cu_name)
                assert res.cubin is not None
                mod = _MODULES[module_key] = dev.LoadedKernel(res.cubin, name, ordinal)
            self._loaded[key] = mod
            self.compiled.append(name)
        return self._loaded[key]

    def load_all(self, ordinal: int) -> None:
        """Compile (or take from the cache) the whole variant set in one source and load every entry point: one
        NVRTC run for all, where the tuner would otherwise compile each variant apart."""
        arch = dev.device_arch(ordinal)
        res = compile_source(self.source, arch=arch, want="cubin", name=f"{self.spec.name}.cu")
        assert res.cubin is not None
        first: dev.LoadedKernel | None = None
        for name in self._by_name:
            if (ordinal, name) not in self._loaded:
                fn = first.sibling(name) if first is not None else dev.LoadedKernel(res.cubin, name, ordinal)
                first = first or fn
                self._loaded[(ordinal, name)] = fn
                self.compiled.append(name)

    def variant_for(self, ordinal: int, prob: Problem) -> Variant:
        """The variant tuned on this GPU for the problem's size class (`dqgen build` tunes once),
        else the default rule; unaligned tensors always take the 4-byte-access variant."""
        if ordinal not in self._tuned:
            self._tuned[ordinal] = load_tuning(self, ordinal)
        tuned = self._tuned[ordinal]
        if tuned is not None and prob.aligned:
            return tuned[size_class(prob.K, prob.N)]
        return default_variant(self.spec, prob.aligned)

    def output_shape(self, qweight_shape: tuple[int, ...]) -> tuple[int, int]:
        """(K, N) of the output for a qweight of this shape (shape checks are the call's)."""
        lay = Layout.of(self.spec)
        return lay.k_of(int(qweight_shape[0])), lay.n_of(int(qweight_shape[1]))

    def _check_g_idx(self, gi: dev.DeviceArray, groups: int) -> None:
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
            self._check_g_idx(gi, prob.groups)
        if out is None:
            out = dev.allocate_like(q.kind, (prob.K, prob.N), target_dtype(self.spec), q.device)
            o = dev.as_device_array(out, "out")
        assert o is not None
        v = variant or self.variant_for(q.device, prob)
        if v not in self.artifact.variants:
            raise ValueError(
                f"variant {v} is not instantiated for {self.spec.name}; choose one of dqgen.emit.render.variants(spec)"
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
            return _traced_call(self, qweight, scales, zeros, g_idx, global_scale, out)
        if _torch_tensor is None:
            _hook_torch()  # torch may have been imported after this Kernel was made
        if _torch_tensor is not None and isinstance(qweight, _torch_tensor):
            return self._torch_call(sys.modules["torch"], qweight, scales, zeros, g_idx, global_scale, out, stream)
        launch = self.prepare(qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale, out=out, stream=stream)
        launch()
        return launch.out

    def _torch_call(
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
            self._check_g_idx(dev.as_device_array(g_idx, "g_idx"), self._groups_of(scales))
            hit.gidx_version, hit.gidx_ref = g_idx._version, weakref.ref(g_idx)
        if hit.fn is not None:
            hit.fn(dev.torch_raw_stream(torch, hit.device) if hit.stream is None else hit.stream)
        return out

    def problem(
        self, qweight: Any, scales: Any, zeros: Any = None, g_idx: Any = None, global_scale: Any = None
    ) -> Problem:
        """The checks of a call (shapes, dtypes, devices; g_idx values apart) on the checkpoint tensors."""
        as_arr = dev.as_device_array
        return infer_problem(
            self.spec,
            as_arr(qweight, "qweight"),
            as_arr(scales, "scales"),
            None if zeros is None else as_arr(zeros, "zeros"),
            None,
            None if g_idx is None else as_arr(g_idx, "g_idx"),
            None if global_scale is None else as_arr(global_scale, "global_scale"),
        )

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
        w = matmul.pack(self, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale)
        dispatch.attach(self, w, qweight, scales, zeros, g_idx, gemm)
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
        if g_idx is None and global_scale is None and not _compiling():
            y = fastcall.matmul_hit(self._fast, x, w, scales, zeros, bias, out)
            if y is not None:
                return y
        from . import dispatch

        if _compiling():  # traced: the ops are registered already
            return dispatch.dispatch(
                self, x, w, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias, out=out
            )
        _hook_torch()
        y = dispatch.dispatch(self, x, w, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias, out=out)
        if g_idx is None and global_scale is None:
            fastcall.matmul_remember(self, self._fast, x, w, scales, zeros, bias, out, y)
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
            self._check_g_idx(dev.as_device_array(g_idx, "g_idx"), self._groups_of(scales))
        entry = _Checked(
            launch.fn,
            launch.device,
            None if stream is None else launch.stream,
            None if g_idx is None else g_idx._version,
            None if g_idx is None else weakref.ref(g_idx),
        )
        if len(self._signatures) >= _SIGNATURES_MAX:
            self._signatures.clear()
        self._signatures[key] = entry
        return entry


_KERNELS: dict[str, Kernel] = {}


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


def torch_capturing() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


@dataclass
class Launch:
    fn: dev.BoundLaunch | None  # None for an empty output
    stream: int
    out: Any
    variant: Variant
    device: int = 0

    def __call__(self, stream: Any = None) -> None:
        """Launch on the stream given at prepare time, or on ``stream`` (e.g. a graph-capture stream)."""
        if self.fn is not None:
            self.fn(self.stream if stream is None else dev.stream_handle(stream))
