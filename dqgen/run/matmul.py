"""``y = x @ dequant(W)`` for decode: the fused GEMV of dqgen.kernels.gemv on weights prepacked once.

``kernel.pack_matmul(qweight, scales, zeros=None, *, g_idx=None, global_scale=None)`` checks the checkpoint
tensors (the dequantize call's checks: one line naming the tensor) and prepacks them on the host, once, into the
GEMV layout of dqgen.layout.matmul: a ``MatmulWeight`` of device tensors. ``kernel.matmul(x, w, *, bias=None,
out=None)`` runs the kernel; ``kernel.matmul(x, qweight, scales, zeros, *, g_idx=..., ...)`` packs once per
weight tensor version (cached) and runs the same kernel.

x is ``[..., K]`` in the spec's target dtype with a unit last stride; y is ``[..., N]`` in the same dtype.
Tokens are taken 16 at a time (one launch per 16 rows of x; issue 14 adds a tensor-core GEMM for large M).
A MatmulWeight owns a small split-K workspace and counters: launches that use one weight must be ordered (one
stream, or a graph), not run concurrently on two streams.
Torch only (the ecosystem's tensors); the torch custom ops are in dqgen.run.matmul_op.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.formats import torch_dtype
from ..kernels.gemv import (
    DEFAULT_TUNING,
    GROUPED,
    PAD_GROUPS,
    WARPS,
    GemvConfig,
    MatmulEntry,
    Tuning,
    entry_mode,
    group_chunks,
    group_magic,
    launch_mode,
    unroll,
)
from ..layout.matmul import ROWS, MatmulLayout, Prepacked, prepack
from . import device as dev
from .errors import ShapeError
from .errors import imported_torch as _torch
from .loader import load
from .packcache import PackCache

if TYPE_CHECKING:
    from .runtime import Kernel

#: Tokens per launch: two mma n-tiles of 8.
TOKENS = 16
#: Chunks of zeros after the last one (a warp's loads of kUnroll chunks may run past its range).
PAD_CHUNKS = 4
#: Floats per (tile, split) partial in the workspace: 16 tokens x 16 channels.
PARTIAL = 256

_WEIGHTS: weakref.WeakValueDictionary[str, MatmulWeight] = weakref.WeakValueDictionary()
_ids = itertools.count()


@dataclass(eq=False)
class MatmulWeight:
    """One weight in the GEMV layout, on one device: what ``Kernel.matmul`` multiplies by."""

    spec_name: str
    K: int
    N: int
    group_size: int  # -1: one group over K
    groups: int
    gather: bool  # act-order or groups that are no whole blocks: x gathered through perm
    mode: int  # the entry points' mode (dqgen.kernels.gemv: PAIRED, DIRECT, GATHER, GROUPED)
    group_magic: int  # GROUPED: the reciprocal that maps a chunk to its group (0 otherwise)
    chunks: int
    n_tiles: int
    splits: int  # blocks per n-tile along K (the split-K of small shapes)
    device: int
    wq: Any  # int32 words [n_tiles, chunks, words, 32, 4]
    scales: Any  # [G, Np] raw 16-bit (int16) or block-scale codes (uint8); GROUPED: [G + PAD_GROUPS, Np]
    zeros: Any  # [G, Np] zero fields (uint8) / raw 16-bit zeros (int16), or None; GROUPED: [G + PAD_GROUPS, Np]
    global_scale: Any  # fp32 [1] or None
    perm: Any  # int32 [slots]: slot -> row of x (-1 padding); gather mode only
    block_group: Any  # int32 [slots / P + padding]: each block's group
    workspace: Any  # fp32 [n_tiles * splits * 256]
    counters: Any  # int32 [n_tiles], zero between launches
    flat: tuple[FlatGrid | None, FlatGrid | None] = (None, None)  # GROUPED on a flat grid: 1..8, 9..16 tokens
    tuning: Tuning = DEFAULT_TUNING  # the kernel's code shape (part of its config): chosen at pack time
    key: str = ""
    _bound: dict[tuple, list[dev.BoundLaunch]] = field(default_factory=dict, repr=False)

    @property
    def nbytes(self) -> int:
        """Bytes the prepacked weight holds (words, scales, zeros, with their padding chunks and rows)."""
        return sum(int(t.numel() * t.element_size()) for t in (self.wq, self.scales, self.zeros) if t is not None)


def _function(kernel: Kernel, e: MatmulEntry, device: int, tuning: Tuning = DEFAULT_TUNING) -> dev.LoadedKernel:
    return load(GemvConfig(kernel.artifact, e, tuning), device)


def choose_splits(n_tiles: int, chunks: int, resident_blocks: int) -> int:
    """Blocks per n-tile along K: the most that still fit the GPU's resident blocks in one wave (a second, partly
    filled wave costs more than the bytes in flight it adds), each warp keeping at least two chunks (the partial
    sums cost a workspace round trip)."""
    want = resident_blocks // max(n_tiles, 1)
    return max(1, min(want, chunks // (2 * WARPS)))


@dataclass(frozen=True)
class FlatGrid:
    """A GROUPED weight's flat grid (run_flat): the tiles' chunks end to end, per_worker of them a warp."""

    blocks: int
    per_worker: int
    slots: int  # workspace partials per tile: the most warps that share one tile
    tile_magic: int  # ceil(2**32 / chunks): chunk -> tile
    warp_magic: int  # ceil(2**32 / per_worker): chunk -> warp


def _magic(d: int) -> int:
    return -(-(1 << 32) // d)


def flat_grid(n_tiles: int, chunks: int, resident_blocks: int, unroll: int) -> FlatGrid | None:
    """The flat grid of one wave of ``resident_blocks`` (each warp a whole number of ``unroll``-chunk batches), or
    None where the kernel's magic reciprocals would not be exact for these counts."""
    total = n_tiles * chunks
    per = -(-total // (resident_blocks * WARPS))
    per = -(-per // unroll) * unroll
    used = -(-total // per)
    tm, wm = _magic(chunks), _magic(per)
    starts = np.arange(used, dtype=np.int64) * per
    t = np.arange(n_tiles, dtype=np.int64)
    firsts, lasts = t * chunks, (t + 1) * chunks - 1
    if total >= 1 << 31 or not (
        np.array_equal((starts * tm) >> 32, starts // chunks)
        and np.array_equal((firsts * wm) >> 32, firsts // per)
        and np.array_equal((lasts * wm) >> 32, lasts // per)
    ):
        return None
    slots = int((lasts // per - firsts // per).max()) + 1
    return FlatGrid(-(-used // WARPS), per, slots, tm, wm)


def _flat_grids(
    kernel: Kernel, mode: int, n_tiles: int, chunks: int, splits: int, resident: int, device: int, tuning: Tuning
) -> tuple:
    """GROUPED weights whose tile grid is more than one wave (Tuning.flat "waves"; "on": every one) run flat."""
    rule = tuning.flat
    if mode != GROUPED or rule == "off" or (rule == "waves" and n_tiles * splits <= resident):
        return (None, None)
    grids = []
    for tok16 in (False, True):
        fn = _function(kernel, MatmulEntry(tok16, GROUPED, True), device, tuning)
        blocks = dev.sm_count(device) * max(1, fn.max_active_blocks(WARPS * 32, 0))
        grids.append(flat_grid(n_tiles, chunks, blocks, unroll(kernel.spec, tuning)))
    return (grids[0], grids[1])


def _check_tensor(torch: Any, name: str, t: Any) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise ValueError(f"{name}: expected a CUDA tensor, got one on {t.device}")


def pack(
    kernel: Kernel,
    qweight: Any,
    scales: Any,
    zeros: Any = None,
    *,
    g_idx: Any = None,
    global_scale: Any = None,
    tuning: Tuning = DEFAULT_TUNING,
) -> MatmulWeight:
    """Check the checkpoint tensors and prepack them (on the host, once) into a MatmulWeight, run by the GEMV of
    ``tuning`` (the kept code shape by default; scripts/matmul_variants.py times others)."""
    torch = _torch()
    spec = kernel.spec
    for name, t in (("qweight", qweight), ("scales", scales), ("zeros", zeros), ("g_idx", g_idx)):
        if t is not None:
            _check_tensor(torch, name, t)
    if global_scale is not None:
        _check_tensor(torch, "global_scale", global_scale)
    prob = kernel.problem(qweight, scales, zeros, g_idx, global_scale)
    q = dev.as_device_array(qweight, "qweight")
    s = dev.as_device_array(scales, "scales")
    z = dev.as_device_array(zeros, "zeros") if zeros is not None else None
    gi = dev.as_device_array(g_idx, "g_idx") if g_idx is not None else None
    host_gidx = None
    if gi is not None:
        kernel._check_g_idx(gi, prob.groups)
        host_gidx = dev.to_host(gi)
    pre: Prepacked = prepack(
        spec,
        dev.to_host(q),
        dev.to_host(s),
        dev.to_host(z) if z is not None else None,
        host_gidx,
        prob.group_size if prob.group_size > 0 and prob.groups > 1 else -1,
    )
    device = q.device
    cuda = torch.device("cuda", device)

    def up(a: np.ndarray | None, dtype: Any) -> Any:
        if a is None:
            return None
        return torch.from_numpy(np.ascontiguousarray(a).view(dtype)).to(cuda)

    sl = pre.slots
    mm = MatmulLayout.of(spec)
    chunks = sl.slots // mm.chunk_k
    n_tiles = mm.n_padded(pre.N) // ROWS
    mode = entry_mode(spec, mm.per_block, pre.group_size, sl.gather, chunks)
    magic = group_magic(pre.group_size if pre.groups > 1 else -1, mm.per_block) if mode == GROUPED else 0
    fn = _function(kernel, MatmulEntry(False, launch_mode(mode, False, tuning)), device, tuning)
    resident = dev.sm_count(device) * max(1, fn.max_active_blocks(WARPS * 32, 0))
    splits = choose_splits(n_tiles, chunks, resident)
    flat = _flat_grids(kernel, mode, n_tiles, chunks, splits, resident, device, tuning)
    partials = max([n_tiles * splits] + [n_tiles * f.slots for f in flat if f is not None])
    zdtype = np.uint8 if pre.zeros is not None and pre.zeros.dtype == np.uint8 else np.int16

    def group_rows(a: np.ndarray | None) -> np.ndarray | None:
        """GROUPED: PAD_GROUPS rows of zeros after the last group (read ahead by the kernel, unused)."""
        if a is None or mode != GROUPED:
            return a
        return np.concatenate([a, np.zeros((PAD_GROUPS, *a.shape[1:]), a.dtype)])

    w = MatmulWeight(
        spec_name=spec.name,
        K=prob.K,
        N=prob.N,
        group_size=pre.group_size,
        groups=pre.groups,
        gather=sl.gather,
        mode=mode,
        group_magic=magic,
        chunks=chunks,
        n_tiles=n_tiles,
        splits=splits,
        device=device,
        wq=up(np.concatenate([pre.wq.reshape(-1), np.zeros(PAD_CHUNKS * pre.wq[0, 0].size, np.uint32)]), np.int32),
        scales=up(group_rows(pre.scales), np.uint8 if pre.scales.dtype == np.uint8 else np.int16),
        zeros=up(group_rows(pre.zeros), zdtype),
        global_scale=global_scale.detach().clone().reshape(1) if global_scale is not None else None,
        perm=up(sl.perm, np.int32) if sl.gather else None,
        # the kernel's loads run up to PAD_CHUNKS chunks past a warp's last one (unused): pad both tables
        block_group=up(np.concatenate([sl.block_group, np.zeros(PAD_CHUNKS * 8, np.int32)]), np.int32),
        workspace=torch.empty(partials * PARTIAL, dtype=torch.float32, device=cuda),
        counters=torch.zeros(n_tiles, dtype=torch.int32, device=cuda),
        flat=flat,
        tuning=tuning,
    )
    w.key = f"{spec.name}-{next(_ids)}"
    _WEIGHTS[w.key] = w
    return w


def weight(key: str) -> MatmulWeight:
    """A live MatmulWeight by its key (the custom op holds the key)."""
    return _WEIGHTS[key]


def _ptr(t: Any) -> np.uint64:
    return np.uint64(0 if t is None else t.data_ptr())


def run(kernel: Kernel, x: Any, w: MatmulWeight, *, bias: Any = None, out: Any = None) -> Any:
    """The launch(es) on checked tensors: y = x @ W (+ bias)."""
    torch = _torch()
    spec = kernel.spec
    if w.spec_name != spec.name:
        raise ValueError(f"w: packed for spec {w.spec_name!r}, but this kernel is {spec.name!r}")
    dt = torch_dtype(spec.target_type, torch)
    _check_tensor(torch, "x", x)
    if x.dtype != dt:
        raise ShapeError(f"x: expected dtype {spec.target.value} (the spec's target), got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != w.K:
        raise ShapeError(f"x: expected shape [..., {w.K}] (K of the weight), got {tuple(x.shape)}")
    if x.device.index != w.device:
        raise ShapeError(f"x: on CUDA device {x.device.index}, but the weight is on device {w.device}")
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, w.K) if x.dim() != 2 else x
    if w.K > 1 and x2.stride(1) != 1:
        raise ShapeError(f"x: expected a unit stride along K, got strides {tuple(x.stride())}; call .contiguous()")
    M = int(x2.shape[0])
    if bias is not None:
        _check_tensor(torch, "bias", bias)
        if bias.dtype != dt or tuple(bias.shape) != (w.N,) or not bias.is_contiguous():
            raise ShapeError(
                f"bias: expected a contiguous ({w.N},) {spec.target.value} tensor, got {tuple(bias.shape)} {bias.dtype}"
            )
        if bias.device.index != w.device:
            raise ShapeError(f"bias: on CUDA device {bias.device.index}, but the weight is on device {w.device}")
    if out is None:
        out = torch.empty((*lead, w.N), dtype=dt, device=x.device)
    else:
        _check_tensor(torch, "out", out)
        if out.dtype != dt or tuple(out.shape) != (*lead, w.N) or not out.is_contiguous():
            raise ShapeError(
                f"out: expected a contiguous {(*lead, w.N)} {spec.target.value} tensor, "
                f"got {tuple(out.shape)} {out.dtype}"
            )
        if out.device.index != w.device:
            raise ShapeError(f"out: on CUDA device {out.device.index}, but the weight is on device {w.device}")
    if M == 0 or w.N == 0:
        return out
    x_stride = int(x2.stride(0)) if M > 1 else w.K
    key = (x2.data_ptr(), M, x_stride, out.data_ptr(), 0 if bias is None else bias.data_ptr())
    launches = w._bound.get(key)
    if launches is None:
        launches = _bind(kernel, w, x2, x_stride, M, bias, out)
        if len(w._bound) >= 64:
            w._bound.clear()
        w._bound[key] = launches
    stream = dev.torch_raw_stream(torch, w.device)
    for launch in launches:
        launch(stream)
    return out


def _bind(kernel: Kernel, w: MatmulWeight, x2: Any, x_stride: int, M: int, bias: Any, out: Any) -> list:
    xvec = int(x2.data_ptr() % 16 == 0 and x_stride % 8 == 0 and w.K % 8 == 0)
    launches = []
    esize = x2.element_size()
    per_warp = -(-w.chunks // (w.splits * WARPS))
    chunks_per_group = group_chunks(w.group_size, MatmulLayout.of(kernel.spec).per_block, w.groups)
    for m0 in range(0, M, TOKENS):
        mt = min(TOKENS, M - m0)
        fg = w.flat[mt > 8]
        entry = MatmulEntry(mt > 8, launch_mode(w.mode, mt > 8, w.tuning), fg is not None)
        fn = _function(kernel, entry, w.device, w.tuning)
        args = [
            _ptr(w.wq),
            _ptr(w.scales),
            _ptr(w.zeros),
            _ptr(w.global_scale),
            _ptr(w.perm),
            _ptr(w.block_group),
            np.uint64(x2.data_ptr() + m0 * x_stride * esize),
            _ptr(bias),
            np.uint64(out.data_ptr() + m0 * w.N * esize),
            _ptr(w.workspace),
            _ptr(w.counters),
            np.int32(mt),
            np.int64(w.K),
            np.int64(w.N),
            np.int64(w.n_tiles * ROWS),
            np.int64(w.chunks),
            np.int64(per_warp if fg is None else fg.per_worker),  # chunks per warp
            np.int64(w.groups),
            np.int64(x_stride),
            np.int32(xvec),
            np.uint64(w.group_magic),
            np.int32(chunks_per_group),
            np.int32(0 if fg is None else fg.slots),
            np.uint64(0 if fg is None else fg.tile_magic),
            np.uint64(0 if fg is None else fg.warp_magic),
        ]
        grid = (w.n_tiles, w.splits, 1) if fg is None else (fg.blocks, 1, 1)
        launches.append(fn.bind(grid, (WARPS * 32,), args))
    return launches


# -- the checkpoint form: pack once per weight tensor version ---------------------------------------------------


_PACKED: PackCache[MatmulWeight] = PackCache()


def packed(
    kernel: Kernel, qweight: Any, scales: Any, zeros: Any = None, *, g_idx: Any = None, global_scale: Any = None
) -> MatmulWeight:
    """The MatmulWeight of these checkpoint tensors: packed on first use and again when any of them changes
    (torch's in-place version counter) or is freed."""
    torch = _torch()
    tensors = (qweight, scales, zeros, g_idx, global_scale)
    for name, t in zip(("qweight", "scales", "zeros", "g_idx", "global_scale"), tensors, strict=True):
        if t is not None:
            _check_tensor(torch, name, t)
    return _PACKED.get(
        kernel.op_key, tensors, lambda: pack(kernel, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale)
    )


def matmul(
    kernel: Kernel,
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
    """``kernel.matmul``: y = x @ W (+ bias), W a MatmulWeight or the checkpoint's qweight (with scales ...)."""
    torch: Any = sys.modules.get("torch")
    compiling = torch is not None and torch.compiler.is_compiling()
    if isinstance(w, MatmulWeight):
        if scales is not None or zeros is not None or g_idx is not None or global_scale is not None:
            raise TypeError(
                "matmul: scales, zeros, g_idx and global_scale belong to pack_matmul when w is a MatmulWeight"
            )
        if compiling:  # one custom op in the graph (registered by dqgen.run.matmul_op once torch is loaded)
            return _with_out(torch.ops.dqgen.matmul(kernel.op_key, w.key, x, bias), out)
        return run(kernel, x, w, bias=bias, out=out)
    if scales is None:
        raise TypeError("matmul: pass a MatmulWeight (from pack_matmul), or qweight and scales")
    if compiling:
        y = torch.ops.dqgen.matmul_checkpoint(kernel.op_key, x, w, scales, zeros, g_idx, global_scale, bias)
        return _with_out(y, out)
    mw = packed(kernel, w, scales, zeros, g_idx=g_idx, global_scale=global_scale)
    return run(kernel, x, mw, bias=bias, out=out)


def _with_out(y: Any, out: Any) -> Any:
    """A traced op's new y, or copied into ``out`` (the op itself is functional)."""
    if out is None:
        return y
    out.copy_(y)
    return out
