"""Minimal CUDA driver-API runtime: load cubins, launch kernels, view user tensors.

Importing this module never touches the GPU (or libcuda), and torch / cupy are
only imported lazily, so CPU-only tooling (codegen, NVRTC, tests) can use it.
Kernels run in the device's *primary* context, the one torch and cupy use, so
pointers and streams from those libraries are valid in our launches.
"""

from __future__ import annotations

import array
import ctypes
import functools
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cuda.bindings import driver

from dqgen.core.formats import SCALAR_TYPES, numpy_dtype

__all__ = [
    "DeviceArray",
    "DeviceBuffer",
    "LoadedKernel",
    "TensorMapArg",
    "allocate_like",
    "as_device_array",
    "current_stream",
    "device_arch",
    "encode_tensor_map_2d",
    "gpu_available",
    "primary_context",
    "stream_handle",
]


# --------------------------------------------------------------------------- errors


def _err_name(err: Any) -> str:
    try:
        res, name = driver.cuGetErrorName(err)
        if res == driver.CUresult.CUDA_SUCCESS and name:
            return name.decode(errors="replace")
    except Exception:
        pass
    return getattr(err, "name", str(err))


def _check(result: tuple[Any, ...], what: str) -> Any:
    """Unpack a cuda-bindings ``(err, *values)`` tuple; raise RuntimeError on failure."""
    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {_err_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


# --------------------------------------------------------------------------- init / contexts

# Re-entrant: primary_context() holds it while _device() may run _ensure_init(), which takes it too.
_init_lock = threading.RLock()
_initialized = False
_primary_ctx: dict[int, Any] = {}


def _ensure_init() -> None:
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        try:
            res = driver.cuInit(0)
        except RuntimeError as e:
            # cuda-bindings raises (rather than returning an error code) when
            # libcuda.so.1 cannot be dlopen'ed, i.e. no NVIDIA driver at all.
            raise RuntimeError(f"CUDA driver not available: {e}") from e
        _check(res, "cuInit")
        _initialized = True


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        _ensure_init()
        return int(_check(driver.cuDeviceGetCount(), "cuDeviceGetCount")) >= 1
    except Exception:
        return False


def _device(ordinal: int) -> Any:
    _ensure_init()
    return _check(driver.cuDeviceGet(int(ordinal)), f"cuDeviceGet({ordinal})")


def device_arch(ordinal: int = 0) -> str:
    dev = _device(ordinal)
    attr = driver.CUdevice_attribute
    major = _check(
        driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute"
    )
    minor = _check(
        driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute"
    )
    return f"sm_{int(major)}{int(minor)}"


@functools.cache
def sm_count(ordinal: int = 0) -> int:
    """Number of streaming multiprocessors: sizes persistent grids. Asked of the driver once per device (the dispatch
    reads it on every small-M call)."""
    dev = _device(ordinal)
    attr = driver.CUdevice_attribute
    return int(
        _check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute")
    )


def max_shared_optin(ordinal: int = 0) -> int:
    """Most dynamic shared memory one block may opt in to (cuFuncSetAttribute), in bytes."""
    attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    return int(_check(driver.cuDeviceGetAttribute(attr, _device(ordinal)), "cuDeviceGetAttribute"))


def primary_context(ordinal: int = 0) -> Any:
    """Retain (once per process) and make current the primary context of ``ordinal``.

    The current context is per thread, so this is called before every
    driver call that needs one rather than once at load time.
    """
    ctx = _primary_ctx.get(ordinal)
    if ctx is None:
        with _init_lock:
            ctx = _primary_ctx.get(ordinal)
            if ctx is None:
                # Deliberately never released: torch/cupy keep the primary
                # context alive for the process lifetime too, and releasing it
                # while modules are loaded would invalidate them.
                ctx = _check(driver.cuDevicePrimaryCtxRetain(_device(ordinal)), "cuDevicePrimaryCtxRetain")
                _primary_ctx[ordinal] = ctx
    _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


# --------------------------------------------------------------------------- kernels


@functools.lru_cache(maxsize=1)
def param_holder_type() -> Any:
    """cuda.core's argument packer (a C array of pointers to each argument's bytes, owned by the holder).

    Imported on first use: cuda.core takes a few hundred milliseconds to import, which `import dqgen` and the
    CPU-only tools should not pay. ``_kernel_arg_handler`` is a private module of cuda.core, hence the ``<2`` pin."""
    from cuda.core._kernel_arg_handler import ParamHolder

    return ParamHolder


def pack_args(args: Sequence[Any]) -> Any:
    """The kernel arguments packed once (cuda.core ParamHolder: ``.ptr`` is the ``void**`` cuLaunchKernel takes).

    Each argument must say its width: a numpy scalar (np.uint64 for pointers, np.int32 / np.int64, ...), a ctypes
    scalar or a DeviceArray (its pointer). Plain Python ints and floats are refused although ParamHolder takes them:
    it packs an int as a 64-bit pointer and a float as a double, and a wrong guess at a parameter's width silently
    shifts every argument after it."""
    packed: list[Any] = []
    for i, arg in enumerate(args):
        if isinstance(arg, DeviceArray):
            packed.append(np.uint64(arg.ptr))
        elif isinstance(arg, np.ndarray) and arg.ndim == 0:
            packed.append(arg[()])
        elif isinstance(arg, (np.generic, ctypes._SimpleCData)) and not isinstance(arg, ctypes.c_void_p):
            packed.append(arg)
        else:
            raise TypeError(
                f"kernel argument {i}: expected a numpy scalar (np.uint64 for pointers, np.int32/np.int64, ...), "
                f"a ctypes scalar or a DeviceArray, got {type(arg).__name__}"
            )
    return param_holder_type()(packed)


#: Bytes of a TMA tensor map (CUtensorMap): an opaque, 64-byte aligned kernel parameter.
TENSOR_MAP_BYTES = 128


@dataclass(frozen=True)
class TensorMapArg:
    """A tensor map passed by value (a ``const __grid_constant__`` parameter of 128 bytes): ``encode_tensor_map_2d``."""

    raw: bytes

    def __post_init__(self) -> None:
        if len(self.raw) != TENSOR_MAP_BYTES:
            raise ValueError(f"TensorMapArg: expected {TENSOR_MAP_BYTES} bytes, got {len(self.raw)}")


def encode_tensor_map_2d(
    ptr: int, elem_bytes: int, inner: int, outer: int, row_bytes: int, box: tuple[int, int], swizzle: bool = True
) -> TensorMapArg:
    """A 2-D tensor map over ``outer`` rows of ``inner`` elements of ``elem_bytes`` (1 or 2) bytes, rows
    ``row_bytes`` apart (a multiple of 16; ``ptr`` 16-byte aligned), copied in boxes of (inner, outer) elements,
    with the 128-byte swizzle (box[0] x elem_bytes must then be 128) or none; out-of-bounds elements read as
    zeros."""
    if elem_bytes not in (1, 2):
        raise ValueError(f"elem_bytes: expected 1 or 2, got {elem_bytes}")
    if ptr % 16 or row_bytes % 16:
        raise ValueError(f"tensor map: address and row stride must be 16-byte aligned, got {ptr:#x}, {row_bytes}")
    dt = driver.CUtensorMapDataType
    dtype = dt.CU_TENSOR_MAP_DATA_TYPE_UINT8 if elem_bytes == 1 else dt.CU_TENSOR_MAP_DATA_TYPE_UINT16
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    tmap = _check(
        driver.cuTensorMapEncodeTiled(
            dtype,
            2,
            int(ptr),
            [u64(int(inner)), u64(int(outer))],
            [u64(int(row_bytes))],
            [u32(int(box[0])), u32(int(box[1]))],
            [u32(1), u32(1)],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
            if swizzle
            else driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        "cuTensorMapEncodeTiled",
    )
    return TensorMapArg(ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES))


def _arg_bytes(i: int, arg: Any) -> bytes:
    """One kernel argument's bytes, by pack_args' rules (a width-carrying scalar or a DeviceArray's pointer), or a
    tensor map's 128."""
    if isinstance(arg, TensorMapArg):
        return arg.raw
    if isinstance(arg, DeviceArray):
        return np.uint64(arg.ptr).tobytes()
    if isinstance(arg, np.ndarray) and arg.ndim == 0:
        arg = arg[()]
    if isinstance(arg, np.generic):
        raw = arg.tobytes()
    elif isinstance(arg, ctypes._SimpleCData) and not isinstance(arg, ctypes.c_void_p):
        raw = bytes(arg)
    else:
        raise TypeError(
            f"kernel argument {i}: expected a numpy scalar (np.uint64 for pointers, np.int32/np.int64, ...), "
            f"a ctypes scalar, a DeviceArray or a TensorMapArg, got {type(arg).__name__}"
        )
    if len(raw) > 8:
        raise TypeError(f"kernel argument {i}: {len(raw)} bytes; a bound launch takes arguments of up to 8 bytes")
    return raw


def pack_slots(args: Sequence[Any]) -> tuple[array.array, array.array]:
    """(slots, addresses): each argument's bytes in 8-byte slots of one array (little-endian, so a 4-byte argument
    is the first half of its slot, where the driver reads it; a tensor map takes 16 slots from a 64-byte boundary),
    and the array of the arguments' addresses that cuLaunchKernel takes as ``kernelParams``. Neither array is ever
    resized (their buffers must not move). Without tensor maps, argument i is slot i."""
    raws = [_arg_bytes(i, arg) for i, arg in enumerate(args)]
    maps = sum(len(r) > 8 for r in raws)
    words = sum(-(-len(r) // 8) for r in raws) + 8 * maps  # up to 56 bytes of padding before each map
    slots = array.array("Q", bytes(8 * words))
    view = memoryview(slots).cast("B")
    base = slots.buffer_info()[0]
    at, offsets = 0, []
    for raw in raws:
        if len(raw) > 8:
            at += (-(base + at)) % 64
        view[at : at + len(raw)] = raw
        offsets.append(at)
        at += -(-len(raw) // 8) * 8
    addresses = array.array("Q", [base + off for off in offsets])
    return slots, addresses


class LoadedKernel:
    """A ``__global__`` function from a cubin (or NUL-terminated PTX), loaded into a primary context."""

    _owner: LoadedKernel | None = None  # set on siblings: the entry point whose module they share
    #: The kernel waits for its stream predecessor itself (KernelConfig.pdl): its launches may be programmatic.
    pdl: bool = False

    def __init__(self, image: bytes, name: str, device: int = 0) -> None:
        self.name = name
        self.device = int(device)
        primary_context(self.device)
        if not image.startswith(b"\x7fELF") and not image.endswith(b"\x00"):
            # The driver reads PTX as a C string.
            image = image + b"\x00"
        self._image = image
        self._module: Any = _check(driver.cuModuleLoadData(image), "cuModuleLoadData")
        try:
            self._function: Any = _check(
                driver.cuModuleGetFunction(self._module, name.encode()), f"cuModuleGetFunction({name!r})"
            )
        except BaseException:
            self.close()
            raise

    def __call__(
        self,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        stream: Any = 0,
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> None:
        """``cooperative``: cuLaunchCooperativeKernel, which refuses a grid whose blocks cannot all be resident at
        once (what a grid-wide barrier needs)."""
        if self._module is None:
            raise RuntimeError(f"kernel {self.name!r}: module already unloaded")
        gx, gy, gz = _dim3(grid)
        bx, by, bz = _dim3(block)
        params = pack_args(args)  # owns the argument bytes until the launch has copied them
        primary_context(self.device)
        common = (self._function, gx, gy, gz, bx, by, bz, int(shared_mem), stream_handle(stream), params.ptr)
        if cooperative:
            _check(driver.cuLaunchCooperativeKernel(*common), f"cuLaunchCooperativeKernel({self.name!r})")
        elif self.pdl and programmatic_launches(self.device):
            launch = _launch_ex(self._function, (gx, gy, gz), (bx, by, bz), int(shared_mem), programmatic=True)
            _check(launch(stream_handle(stream), params.ptr, 0), f"cuLaunchKernelEx({self.name!r})")
        else:  # cuLaunchKernel takes one more argument: its `extra` array, unused
            _check(driver.cuLaunchKernel(*common, 0), f"cuLaunchKernel({self.name!r})")
        del params

    def _cluster_config(self, grid: int, block: int, cluster: int, shared_mem: int, stream: Any) -> Any:
        """cuLaunchKernelEx's launch config: a 1-D grid of 1-D clusters of ``cluster`` blocks."""
        attrs = [cluster_attribute(cluster)]
        return launch_config((int(grid), 1, 1), (int(block), 1, 1), shared_mem, attrs, stream_handle(stream))

    def allow_nonportable_cluster(self) -> None:
        """Opt in to clusters of more than 8 blocks (16 on the H100)."""
        primary_context(self.device)
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        _check(driver.cuFuncSetAttribute(self._function, attr, 1), "cuFuncSetAttribute")

    def max_active_clusters(self, grid: int, block: int, cluster: int, shared_mem: int) -> int:
        """Clusters of ``cluster`` blocks of this kernel that can be resident at once (cuOccupancyMaxActiveClusters)."""
        primary_context(self.device)
        cfg = self._cluster_config(grid, block, cluster, shared_mem, 0)
        return int(_check(driver.cuOccupancyMaxActiveClusters(self._function, cfg), "cuOccupancyMaxActiveClusters"))

    def launch_cluster(
        self, grid: int, block: int, cluster: int, args: Sequence[Any], stream: Any = 0, shared_mem: int = 0
    ) -> None:
        """A 1-D launch in clusters of ``cluster`` blocks (cuLaunchKernelEx with the cluster-dimension attribute)."""
        if self._module is None:
            raise RuntimeError(f"kernel {self.name!r}: module already unloaded")
        params = pack_args(args)
        primary_context(self.device)
        cfg = self._cluster_config(grid, block, cluster, shared_mem, stream)
        _check(driver.cuLaunchKernelEx(cfg, self._function, params.ptr, 0), f"cuLaunchKernelEx({self.name!r})")
        del params

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Opt in to more than 48 KB of dynamic shared memory per block."""
        primary_context(self.device)
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(driver.cuFuncSetAttribute(self._function, attr, int(nbytes)), "cuFuncSetAttribute")

    def max_active_blocks(self, block: int, shared_mem: int) -> int:
        """Blocks of this kernel that fit on one SM at once (the occupancy API)."""
        primary_context(self.device)
        return int(
            _check(
                driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(self._function, int(block), int(shared_mem)),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )
        )

    def sibling(self, name: str) -> LoadedKernel:
        """Another entry point of the same loaded module (no second load); it keeps this one, the module's owner,
        alive."""
        other = object.__new__(LoadedKernel)
        other.name, other.device, other._image = name, self.device, self._image
        primary_context(self.device)
        other._function = _check(
            driver.cuModuleGetFunction(self._module, name.encode()), f"cuModuleGetFunction({name!r})"
        )
        other._module = self._module
        other._owner = self
        return other

    def bind(
        self,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        shared_mem: int = 0,
        programmatic: bool = True,
        cluster: int = 1,
    ) -> BoundLaunch:
        """Pack the arguments once; the returned launcher only calls cuLaunchKernel (cuLaunchKernelEx for a
        programmatic dependent or a launch in clusters; hot loops). ``programmatic`` False keeps a launch of a ``pdl``
        kernel in plain stream order (where the caller measured it faster so); ``cluster`` > 1: a 1-D grid of
        clusters of that many blocks (the launch attribute: for kernels without __cluster_dims__)."""
        return BoundLaunch(self, grid, block, args, shared_mem, programmatic, cluster)

    def close(self) -> None:
        module, self._module = getattr(self, "_module", None), None
        if module is not None and getattr(self, "_owner", None) is None:  # siblings leave the module to its owner
            try:
                primary_context(self.device)
                driver.cuModuleUnload(module)
            except Exception:
                pass

    def __del__(self) -> None:
        if sys is not None and not sys.is_finalizing():
            self.close()


def _dim3(dims: Sequence[int]) -> tuple[int, int, int]:
    x, y, z = (*(int(v) for v in dims), 1, 1, 1)[:3]
    return x, y, z


def launch_config(
    grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int, attrs: Sequence[Any], stream: int = 0
) -> Any:
    """cuLaunchKernelEx's launch config with these launch attributes."""
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = int(shared_mem)
    cfg.hStream = stream
    cfg.attrs = list(attrs)
    cfg.numAttrs = len(attrs)
    return cfg


def cluster_attribute(cluster: int) -> Any:
    """The launch attribute of 1-D clusters of ``cluster`` blocks."""
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = int(cluster), 1, 1
    return attr


def programmatic_attribute() -> Any:
    """The launch attribute that lets a kernel start while the one before it in the stream finishes
    (programmatic stream serialization: the kernel waits itself, blocks/pdl.cuh.j2)."""
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    return attr


def arch_sm(arch: str) -> int:
    """75 of "sm_75", 90 of "sm_90a"."""
    return int(arch[3:].rstrip("af"))


#: The environment switch of programmatic dependent launch: "0" launches every kernel in plain stream order (what
#: a before / after measurement compares against); unset or anything else, kernels that wait for their predecessor
#: themselves (LoadedKernel.pdl) are launched as programmatic dependents on GPUs that have it.
PDL_ENV = "DQGEN_PDL"


@functools.cache
def programmatic_launches(ordinal: int) -> bool:
    """Whether launches of LoadedKernel.pdl kernels on this GPU carry the programmatic-stream-serialization
    attribute: compute capability 9.0 or newer (griddepcontrol), unless DQGEN_PDL=0. Read once per device (a
    kernel's launches are bound once)."""
    return os.environ.get(PDL_ENV, "1") != "0" and arch_sm(device_arch(ordinal)) >= 90


def _launch_ex(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_mem: int,
    programmatic: bool = False,
    cluster: int = 1,
) -> Callable[[int, int, int], tuple]:
    """cuLaunchKernelEx with the programmatic-stream-serialization attribute and / or clusters of ``cluster``
    blocks, called as cuLaunchKernel's partial is: ``(stream, params, extra) -> (CUresult,)``. The launch config is
    built once; its stream is set per call under a lock (the driver copies the config when it is called), so threads
    may share the launcher."""
    attrs = [cluster_attribute(cluster)] if cluster > 1 else []
    attrs += [programmatic_attribute()] if programmatic else []
    cfg = launch_config(grid, block, shared_mem, attrs)
    lock = threading.Lock()
    launch_ex = driver.cuLaunchKernelEx

    def launch(stream: int, params: int, extra: int) -> tuple:
        with lock:
            cfg.hStream = stream
            return launch_ex(cfg, function, params, extra)

    return launch


class BoundLaunch:
    """A kernel with its grid and arguments packed once: calling it costs one cuLaunchKernel (cuLaunchKernelEx
    where ``programmatic`` or in clusters, ``cluster`` > 1).

    ``launch(stream, params, 0)`` is cuda-bindings' cuLaunchKernel with everything else bound, or, for a
    ``LoadedKernel.pdl`` kernel on a GPU where ``programmatic_launches`` and for a launch in clusters,
    cuLaunchKernelEx with the programmatic-serialization and / or cluster-dimension attribute behind the same call
    (the per-call fast
    path of ``Kernel.__call__`` calls it directly: a Kernel's modules stay loaded for the process, in
    ``runtime._MODULES``); it returns ``(CUresult,)``, nonzero on failure, which
    ``failed`` turns into a retry or an error. No current-context check per call: the function belongs to the
    primary context it was loaded in, so a launch from a thread with no (or another) current context fails
    rather than running elsewhere, and ``failed`` then makes the primary context current and launches again.

    The arguments live in ``slots``, one 8-byte slot each (a 4-byte argument in its first bytes), and ``params``
    is the ``void**`` array of the slots' addresses. cuLaunchKernel copies the argument bytes when it is called,
    so a slot may be rewritten between launches: ``slots[i] = pointer`` re-targets argument ``i`` (the signature
    caches of dqgen.run.fastcall patch the pointers of per-call tensors: x, a freshly allocated output) at the cost
    of one array store. A launcher that is patched belongs to one thread (the caches key on the thread): a patch
    and the launch that reads it must not interleave with another thread's."""

    def __init__(
        self,
        kernel: LoadedKernel,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[Any],
        shared_mem: int,
        programmatic: bool = True,
        cluster: int = 1,
    ) -> None:
        self.kernel = kernel
        self.grid = _dim3(grid)
        self.block = _dim3(block)
        self.shared_mem = int(shared_mem)
        self.cluster = int(cluster)  # > 1: a 1-D grid of clusters of this many blocks (a launch attribute)
        self.slots, self._addresses = pack_slots(args)  # both owned for as long as this launcher lives
        self.params: int = self._addresses.buffer_info()[0]
        self.launch: Callable[[int, int, int], tuple]
        #: launched as a programmatic dependent (it may start while the kernel before it finishes; it waits itself)
        self.programmatic = programmatic and kernel.pdl and programmatic_launches(kernel.device)
        if self.programmatic:
            self.launch = _launch_ex(
                kernel._function, self.grid, self.block, self.shared_mem, programmatic=True, cluster=self.cluster
            )
        else:
            self.launch = self._plain()

    def readdress_map(self, arg: int, ptr: int) -> None:
        """Point the tensor map of argument ``arg`` at ``ptr`` in place (``cuTensorMapReplaceAddress`` on a copy of
        its bytes, written back): the map's shape, strides and box stay. A launch already made or captured into a
        graph keeps the arguments it had (cuLaunchKernel copies them)."""
        at = self._addresses[arg]  # the map's bytes in this launcher's argument buffer
        tmap = driver.CUtensorMap()
        ctypes.memmove(tmap.getPtr(), at, TENSOR_MAP_BYTES)
        _check(driver.cuTensorMapReplaceAddress(tmap, int(ptr)), "cuTensorMapReplaceAddress")
        ctypes.memmove(at, tmap.getPtr(), TENSOR_MAP_BYTES)

    def slot_of(self, value: int) -> int | None:
        """The index of the one argument slot holding ``value`` (a device pointer the caller bound), or None where
        no slot or more than one holds it (a patch could not tell them apart)."""
        found = [i for i, v in enumerate(self.slots) if v == value]
        return found[0] if len(found) == 1 else None

    def __call__(self, stream: int = 0) -> None:
        if self.kernel._module is None:  # closed by its owner: the function handle is gone with the module
            raise RuntimeError(f"kernel {self.kernel.name!r}: module already unloaded")
        err = self.launch(stream, self.params, 0)[0]
        if err:
            self.failed(err, stream)

    def failed(self, err: Any, stream: int) -> None:
        """After a launch returned ``err``: launch again with the kernel's primary context current (the thread had
        none, or another); a programmatic launch that fails again falls back to plain ones for good (the kernel's
        wait is a no-op without the attribute); raise if the module is gone or the plain launch fails too."""
        k = self.kernel
        if k._module is None:
            raise RuntimeError(f"kernel {k.name!r}: module already unloaded")
        primary_context(k.device)
        err = self.launch(stream, self.params, 0)[0]
        if err and self.programmatic:
            self.programmatic = False
            self.launch = self._plain()
            err = self.launch(stream, self.params, 0)[0]
        if err:
            what = "cuLaunchKernelEx" if self.cluster > 1 else "cuLaunchKernel"
            raise RuntimeError(f"{what}({k.name!r}) failed: {_err_name(err)}")

    def _plain(self) -> Callable[[int, int, int], tuple]:
        """The launch in plain stream order (cuLaunchKernel, or cuLaunchKernelEx with only the cluster attribute)."""
        if self.cluster > 1:
            return _launch_ex(self.kernel._function, self.grid, self.block, self.shared_mem, cluster=self.cluster)
        return functools.partial(driver.cuLaunchKernel, self.kernel._function, *self.grid, *self.block, self.shared_mem)


# --------------------------------------------------------------------------- arrays


@dataclass(frozen=True)
class DeviceArray:
    ptr: int
    shape: tuple[int, ...]
    strides_bytes: tuple[int, ...]
    dtype: np.dtype
    device: int
    kind: str  # "torch" | "cupy" | "cai" | "dlpack"
    obj: Any = field(repr=False, compare=False)
    # Keeps e.g. a DLPack capsule alive as long as this view exists.
    keepalive: Any = field(default=None, repr=False, compare=False)
    # The producer marked its memory read-only (a CAI "data" flag, a DLPack 1.x flag): never a kernel's output.
    readonly: bool = False

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def is_c_contiguous(self) -> bool:
        expected = self.itemsize
        for dim, stride in zip(reversed(self.shape), reversed(self.strides_bytes), strict=True):
            if dim != 1 and stride != expected:
                return False
            expected *= dim
        return True


def _bfloat16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _type_name(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides: list[int] = []
    acc = itemsize
    for dim in reversed(shape):
        strides.append(acc)
        acc *= max(dim, 1)
    return tuple(reversed(strides))


def _torch_to_numpy_dtype(torch: Any, tdtype: Any, name: str) -> np.dtype:
    table: dict[Any, Any] = {
        torch.float16: np.float16,
        torch.float32: np.float32,
        torch.float64: np.float64,
        torch.int8: np.int8,
        torch.uint8: np.uint8,
        torch.int16: np.int16,
        torch.int32: np.int32,
        torch.int64: np.int64,
    }
    for attr, np_t in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
        if hasattr(torch, attr):  # unsigned wide dtypes only exist in torch >= 2.3
            table[getattr(torch, attr)] = np_t
    if tdtype == torch.bfloat16:
        return _bfloat16()
    # float8 tensors (e.g. NVFP4's e4m3 / MXFP4's e8m0 block scales) map to ml_dtypes' dtypes of the same bytes
    for attr in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"):
        if hasattr(torch, attr) and tdtype == getattr(torch, attr):
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, attr))
    if tdtype not in table:
        raise TypeError(f"{name}: unsupported torch dtype {tdtype}")
    return np.dtype(table[tdtype])


def _from_torch(obj: Any, name: str) -> DeviceArray:
    torch = sys.modules["torch"]
    if not obj.is_cuda:
        where = "CPU" if obj.device.type == "cpu" else f"{obj.device.type!r}-device"
        raise ValueError(f"{name}: expected a CUDA tensor, got a {where} torch.Tensor")
    dtype = _torch_to_numpy_dtype(torch, obj.dtype, name)
    index = obj.device.index
    if index is None:
        index = torch.cuda.current_device()
    return DeviceArray(
        ptr=int(obj.data_ptr()),
        shape=tuple(int(s) for s in obj.shape),
        strides_bytes=tuple(int(s) * obj.element_size() for s in obj.stride()),
        dtype=dtype,
        device=int(index),
        kind="torch",
        obj=obj,
    )


def _from_cupy(obj: Any, name: str) -> DeviceArray:
    return DeviceArray(
        ptr=int(obj.data.ptr),
        shape=tuple(int(s) for s in obj.shape),
        strides_bytes=tuple(int(s) for s in obj.strides),
        dtype=np.dtype(obj.dtype),
        device=int(obj.device.id),
        kind="cupy",
        obj=obj,
    )


@functools.lru_cache(maxsize=1)
def strided_memory_view_type() -> Any:
    """cuda.core's ``StridedMemoryView``: reads a ``__cuda_array_interface__`` or DLPack producer (pointer with the
    DLPack byte offset, shape, strides in elements, dtype, device ordinal, read-only flag).

    Imported on first use, like ``param_holder_type``: only CAI / DLPack inputs need it (torch and cupy arrays are
    read through their own accessors). cuda-core 1.2.0 and 1.2.2 have it in ``cuda.core.utils`` only."""
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:  # pragma: no cover - a cuda-core that moved it to the top level
        from cuda.core import StridedMemoryView
    return StridedMemoryView


#: The ml_dtypes dtypes a tensor of dqgen's may hold, from the formats registry: the targets' and the block
#: scales' formats that numpy lacks (bfloat16, float8_e4m3fn, float8_e8m0fnu).
_REGISTRY_DTYPES: frozenset[np.dtype] = frozenset(
    numpy_dtype(t)
    for t in SCALAR_TYPES.values()
    if t.is_float and t.roles & {"target", "block_scale"} and numpy_dtype(t).kind == "V"
)
_EXPECTED_DTYPES = "integer words, float16 / bfloat16 / float32 values or uint8 / float8 block-scale codes"


def _view_dtype(view: Any, name: str, protocol: str) -> np.dtype:
    """The dtype a StridedMemoryView reports, checked against what dqgen's kernels read.

    cuda-core 1.2.0 and 1.2.2 answer alike (read from both wheels, tests/test_device_views.py): DLPack's bfloat16
    (code 4) is ml_dtypes' ``bfloat16``; DLPack's float8 codes (7-14) raise TypeError("Unsupported dtype. dtype
    code: N") from ``.dtype``; a CAI typestr is ``np.dtype(typestr)``, so ml_dtypes' ``<V2`` / ``|V1`` arrive as
    plain numpy void, which names no format and is refused rather than guessed. A later cuda-core that answers a
    float8 code with ml_dtypes' dtype is accepted through the registry like bfloat16."""
    try:
        dt = np.dtype(view.dtype)
    except (TypeError, NotImplementedError) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise TypeError(
            f"{name}: cuda.core cannot read this {protocol} dtype ({why}); expected {_EXPECTED_DTYPES} "
            "(pass float8 block scales as a torch tensor or as uint8 bytes)"
        ) from None
    if dt.kind in "iuf" and dt.isbuiltin == 1:  # numpy's own, native byte order (ml_dtypes' float8_e5m2 is "f" too)
        return dt
    if dt in _REGISTRY_DTYPES:
        return dt
    if dt.type is np.void:
        raise TypeError(
            f"{name}: {protocol} dtype {dt} is opaque {dt.itemsize}-byte values, not a number format "
            "(bfloat16 and float8 have no __cuda_array_interface__ typestr); pass a torch tensor or a DLPack "
            "producer, or block-scale codes as uint8"
        )
    raise TypeError(f"{name}: unsupported {protocol} dtype {dt}; expected {_EXPECTED_DTYPES}")


def _from_view(make: Any, obj: Any, name: str, kind: str, protocol: str) -> DeviceArray:
    """A DeviceArray of the StridedMemoryView ``make(obj)``; any error of cuda.core's (BufferError, ValueError,
    CUDAError, ...: it has no common base) becomes one line naming the tensor."""
    try:
        view = make(obj)
        ptr, device, readonly = int(view.ptr), int(view.device_id), bool(view.readonly)
        shape = tuple(int(s) for s in view.shape)
        strides = view.strides  # in elements; None: C-contiguous
    except Exception as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise TypeError(f"{name}: cannot view this {_type_name(obj)} through {protocol} ({why})") from None
    dtype = _view_dtype(view, name, protocol)
    if strides is None:
        strides_b = _c_strides(shape, dtype.itemsize)
    else:
        strides_b = tuple(int(s) * dtype.itemsize for s in strides)
    # the view owns a DLPack capsule (renamed "used_dltensor", freed with the view): kept alive with the array
    return DeviceArray(ptr, shape, strides_b, dtype, device, kind, obj, keepalive=view, readonly=readonly)


def _from_cai(obj: Any, name: str) -> DeviceArray:
    # stream_ptr=-1: no wait on the producer's stream, as dqgen never did for CAI inputs (the kernel runs on the
    # caller's stream, else the legacy default one)
    smv = strided_memory_view_type()
    return _from_view(
        lambda o: smv.from_cuda_array_interface(o, stream_ptr=-1), obj, name, "cai", "__cuda_array_interface__"
    )


# DLPack device types (dlpack.h): dqgen reads device memory only, so host and pinned-host producers are refused
# before any capsule is taken (StridedMemoryView reports pinned memory as device-accessible, with no way to tell).
_kDLCUDA, _kDLCUDAManaged = 2, 13
_DLPACK_HOST = {1: "CPU", 3: "CUDA-host (pinned)"}


def _from_dlpack(obj: Any, name: str) -> DeviceArray:
    dev_type = int(obj.__dlpack_device__()[0])
    if dev_type not in (_kDLCUDA, _kDLCUDAManaged):
        where = _DLPACK_HOST.get(dev_type, f"non-CUDA (DLPack device type {dev_type})")
        raise ValueError(f"{name}: expected a CUDA tensor, got a {where} {_type_name(obj)}")
    # stream_ptr=0: cuda.core then calls __dlpack__(stream=None), what dqgen always asked (the producer orders its
    # work before the legacy default stream)
    smv = strided_memory_view_type()
    return _from_view(lambda o: smv.from_dlpack(o, stream_ptr=0), obj, name, "dlpack", "DLPack")


def as_device_array(obj: Any, name: str) -> DeviceArray:
    """Normalize a CUDA torch tensor / cupy array / CAI or DLPack object.

    Raises ValueError (naming ``name``) for host-resident data and TypeError
    for anything else that is not understood.
    """
    if isinstance(obj, DeviceArray):
        return obj
    # Checked via sys.modules so that merely handling an array never imports
    # torch/cupy; if obj is one of theirs, the library is already loaded.
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, name)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return _from_cupy(obj, name)
    if isinstance(obj, np.ndarray):
        # numpy also speaks DLPack; give the clearer message up front.
        raise ValueError(f"{name}: expected a CUDA tensor, got a CPU numpy.ndarray")
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cai(obj, name)
    if hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, name)
    raise TypeError(
        f"{name}: unsupported array type {_type_name(obj)}; expected a CUDA torch.Tensor, a cupy.ndarray, "
        "or an object implementing __cuda_array_interface__ or __dlpack__"
    )


def _numpy_to_torch_dtype(torch: Any, dtype: Any) -> Any:
    dt = np.dtype(dtype)
    if dt == _bfloat16():
        return torch.bfloat16
    table = {
        np.dtype(np.float16): torch.float16,
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float64): torch.float64,
        np.dtype(np.int8): torch.int8,
        np.dtype(np.uint8): torch.uint8,
        np.dtype(np.int16): torch.int16,
        np.dtype(np.int32): torch.int32,
        np.dtype(np.int64): torch.int64,
    }
    for attr, np_t in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
        if hasattr(torch, attr):
            table[np.dtype(np_t)] = getattr(torch, attr)
    if dt not in table:
        raise TypeError(f"no torch dtype for numpy dtype {dt}")
    return table[dt]


def to_host(a: DeviceArray) -> np.ndarray:
    """Copy a (contiguous) device array to a new numpy array."""
    host = np.empty(a.shape, dtype=a.dtype)
    if a.size:
        primary_context(a.device)
        _check(driver.cuMemcpyDtoH(host.ctypes.data, a.ptr, host.nbytes), "cuMemcpyDtoH")
    return host


class DeviceBuffer:
    """Device memory from cuMemAlloc (no torch or cupy needed), freed with the object; ``as_array`` views it."""

    def __init__(self, nbytes: int, device: int = 0) -> None:
        self.device = int(device)
        self.nbytes = int(nbytes)
        primary_context(self.device)
        self.ptr = int(_check(driver.cuMemAlloc(max(self.nbytes, 1)), "cuMemAlloc"))

    @classmethod
    def from_host(cls, host: np.ndarray, device: int = 0) -> DeviceBuffer:
        host = np.ascontiguousarray(host)
        buf = cls(host.nbytes, device)
        if host.nbytes:
            _check(driver.cuMemcpyHtoD(buf.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
        return buf

    def as_array(self, shape: Sequence[int], dtype: Any) -> DeviceArray:
        dt = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        return DeviceArray(self.ptr, shape, _c_strides(shape, dt.itemsize), dt, self.device, "cai", self)

    def close(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                primary_context(self.device)
                driver.cuMemFree(ptr)
            except Exception:
                pass

    def __del__(self) -> None:
        if sys is not None and not sys.is_finalizing():
            self.close()


def synchronize(device: int = 0) -> None:
    primary_context(device)
    _check(driver.cuCtxSynchronize(), "cuCtxSynchronize")


def allocate_like(kind: str, shape: Sequence[int], dtype: Any, device: int) -> Any:
    """A new uninitialized CUDA array of the library that ``kind`` names.

    For "cai"/"dlpack" inputs there is no producing library to mirror, so the
    first of torch, cupy that is importable is used.
    """
    shape = tuple(int(s) for s in shape)
    order = {"torch": ("torch",), "cupy": ("cupy",)}.get(kind, ("torch", "cupy"))
    errors: list[str] = []
    for lib in order:
        try:
            if lib == "torch":
                import torch

                return torch.empty(shape, dtype=_numpy_to_torch_dtype(torch, dtype), device=f"cuda:{device}")
            import cupy

            if np.dtype(dtype) == _bfloat16():
                raise TypeError("cupy has no bfloat16 dtype")
            with cupy.cuda.Device(device):
                return cupy.empty(shape, dtype=np.dtype(dtype))
        except ImportError as e:
            errors.append(f"{lib}: {e}")
    raise RuntimeError(f"cannot allocate an output for kind {kind!r}: " + "; ".join(errors))


def current_stream(kind: str, device: int) -> int:
    """The raw CUstream the producing library is currently using on ``device`` (0 = legacy default)."""
    if kind == "torch":
        import torch

        return torch_raw_stream(torch, device)
    if kind == "cupy":
        import cupy

        with cupy.cuda.Device(device):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def torch_raw_stream(torch: Any, device: int) -> int:
    """torch's current raw CUstream on ``device``: its C accessor, with no Stream object made (a tenth of
    ``torch.cuda.current_stream``'s time), where this torch has one."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def torch_raw_stream_fn(torch: Any) -> Callable[[int], int]:
    """``torch_raw_stream`` with the accessor looked up once: the callable (device -> raw CUstream) that a per-call
    fast path keeps (torch's C accessor itself where this torch has one)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else functools.partial(torch_raw_stream, torch)


def stream_handle(stream: Any) -> int:
    """Raw CUstream value for None / int / torch.cuda.Stream / cupy Stream / driver.CUstream."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream must be None, an int handle or a stream object, not bool")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream / ExternalStream
        return int(stream.cuda_stream)
    if hasattr(stream, "ptr"):  # cupy.cuda.Stream
        return int(stream.ptr)
    if isinstance(stream, driver.CUstream):
        return int(stream)
    raise TypeError(f"unsupported stream object {_type_name(stream)}")
