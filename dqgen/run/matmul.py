"""``y = x @ dequant(W)`` for decode: the fused GEMV of dqgen.kernels.gemv on weights prepacked once.

``pack_gemv(artifact, qweight, scales, zeros=None, *, g_idx=None, global_scale=None)`` checks the checkpoint
tensors (the dequantize call's checks, dqgen.run.problem: one line naming the tensor) and prepacks them on the
host, once, into the GEMV layout of dqgen.layout.matmul: a ``MatmulWeight`` of device tensors.
``run_gemv(artifact, x, w, *, bias=None, out=None)`` runs the kernel; ``packed_gemv`` packs checkpoint tensors once
per tensor version (cached). ``Kernel.pack_matmul`` and ``Kernel.matmul`` reach them through dqgen.run.dispatch.

x is ``[..., K]`` in the spec's target dtype with a unit last stride; y is ``[..., N]`` in the same dtype.
Tokens are taken 16 at a time (one launch per 16 rows of x; issue 14 adds a tensor-core GEMM for large M).
A MatmulWeight owns a small split-K workspace and counters: launches that use one weight must be ordered (one
stream, or a graph), not run concurrently on two streams.
Torch only (the ecosystem's tensors); the torch custom ops are in dqgen.run.torch_op.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..core.spec import Spec
from ..emit.pipeline import Artifact
from ..kernels.gemv import (
    DEFAULT_TUNING,
    GROUPED,
    PAD_GROUPS,
    SPLIT_CHUNKS_A_WARP,
    WARPS,
    GemvConfig,
    MatmulEntry,
    Tuning,
    block_warps,
    entry_mode,
    group_chunks,
    group_magic,
    launch_mode,
    unroll,
    wide_warps,
)
from ..layout import torch_pack
from ..layout.matmul import ROWS, MatmulLayout, Prepacked, prepack
from . import device as dev
from .calls import WEIGHT_BOUND_MAX, remember
from .errors import imported_torch as _torch
from .loader import load
from .operands import check_activation, check_torch_tensors, x_aligned
from .packcache import PackCache
from .problem import check_g_idx, checkpoint_problem
from .workspace import torch_workspace

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
    splits: int  # blocks per n-tile along K (choose_gemv_splits: long K ranges over SMs the tiles leave idle)
    device: int
    wq: Any  # int32 words [n_tiles, chunks, words, 32, 4]
    scales: Any  # [G, Np] raw 16-bit (int16) or block-scale codes (uint8); GROUPED: [G + PAD_GROUPS, Np]
    zeros: Any  # [G, Np] zero fields (uint8) / raw 16-bit zeros (int16), or None; GROUPED: [G + PAD_GROUPS, Np]
    global_scale: Any  # fp32 [1] or None
    perm: Any  # int32 [slots]: slot -> row of x (-1 padding); gather mode only
    block_group: Any  # int32 [slots / P + padding]: each block's group
    workspace: Any  # fp32 partials: [n_tiles * splits * 256], or the flat grids' n_tiles * slots * 256 if more
    counters: Any  # int32 [n_tiles], zero between launches
    flat: tuple[FlatGrid | None, FlatGrid | None] = (None, None)  # GROUPED on a flat grid: 1..8, 9..16 tokens
    tuning: Tuning = DEFAULT_TUNING  # the kernel's code shape (part of its config): chosen at pack time
    key: str = ""
    _bound: dict[tuple, list[dev.BoundLaunch]] = field(default_factory=dict, repr=False)

    @property
    def nbytes(self) -> int:
        """Bytes the prepacked weight holds (words, scales, zeros, with their padding chunks and rows)."""
        return sum(int(t.numel() * t.element_size()) for t in (self.wq, self.scales, self.zeros) if t is not None)


def _function(artifact: Artifact, e: MatmulEntry, device: int, tuning: Tuning = DEFAULT_TUNING) -> dev.LoadedKernel:
    return load(GemvConfig(artifact, e, tuning), device)


def choose_gemv_splits(n_tiles: int, chunks: int, resident_blocks: int, warps: int = WARPS) -> int:
    """Blocks per n-tile along K: one, unless a warp would stream more than SPLIT_CHUNKS_A_WARP chunks; then as many
    as bring it to that, within one wave of the GPU's resident blocks (a second, partly filled wave costs more than
    the bytes in flight it adds)."""
    wave = resident_blocks // max(n_tiles, 1)
    return max(1, min(wave, -(-chunks // (warps * SPLIT_CHUNKS_A_WARP))))


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


def flat_grid(n_tiles: int, chunks: int, resident_blocks: int, unroll: int, warps: int = WARPS) -> FlatGrid | None:
    """The flat grid of one wave of ``resident_blocks`` (each warp a whole number of ``unroll``-chunk batches), or
    None where the kernel's magic reciprocals would not be exact for these counts."""
    total = n_tiles * chunks
    per = -(-total // (resident_blocks * warps))
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
    return FlatGrid(-(-used // warps), per, slots, tm, wm)


def _flat_grids(
    artifact: Artifact, mode: int, n_tiles: int, chunks: int, splits: int, resident: int, device: int, tuning: Tuning
) -> tuple:
    """GROUPED weights whose tile grid is more than one wave (Tuning.flat "waves"; "on": every one) run flat."""
    rule = tuning.flat
    if mode != GROUPED or rule == "off" or (rule == "waves" and n_tiles * splits <= resident):
        return (None, None)
    grids = []
    for tok16 in (False, True):
        fn = _function(artifact, MatmulEntry(tok16, GROUPED, True), device, tuning)
        blocks = dev.sm_count(device) * max(1, fn.max_active_blocks(tuning.warps * 32, 0))
        grids.append(flat_grid(n_tiles, chunks, blocks, unroll(artifact.spec, tuning), tuning.warps))
    return (grids[0], grids[1])


def _grids(
    artifact: Artifact, mode: int, n_tiles: int, chunks: int, device: int, tuning: Tuning, splits: int | None = None
) -> tuple[int, tuple, int]:
    """A weight's launch grids under the GEMV of ``tuning``: its split-K blocks a tile (``splits``, else
    choose_gemv_splits for that kernel's resident blocks), its flat grids, and the workspace partials they need
    (the tile grid's or the flat grid's, whichever needs more: one launch layout for every M)."""
    fn = _function(artifact, MatmulEntry(False, launch_mode(mode, False, tuning)), device, tuning)
    resident = dev.sm_count(device) * max(1, fn.max_active_blocks(tuning.warps * 32, 0))
    if splits is None:
        splits = choose_gemv_splits(n_tiles, chunks, resident, tuning.warps)
    flat = _flat_grids(artifact, mode, n_tiles, chunks, splits, resident, device, tuning)
    partials = max([n_tiles * splits] + [n_tiles * f.slots for f in flat if f is not None])
    return splits, flat, partials


def _check_warps(spec: Spec, tuning: Tuning) -> None:
    """A block no wider than the warps an SM holds at the kept shape's registers a thread (wider would spill)."""
    if tuning.warps > WARPS and tuning.warps not in wide_warps(spec):
        raise ValueError(
            f"Tuning.warps: {tuning.warps} warps a block spill at {spec.name}'s registers a thread; "
            f"expected at most {max((WARPS, *wide_warps(spec)))}"
        )


def retuned(artifact: Artifact, w: MatmulWeight, tuning: Tuning, splits: int | None = None) -> MatmulWeight:
    """A copy of ``w`` (the same packed tensors) launched by the GEMV of ``tuning``, ``splits`` blocks a tile along
    K where given (1..chunks), on a workspace of its own: how the tuning scripts time code shapes and splits on
    packed weights (docs/experiments/matmul_variants.py, devtools/linear_graph_bench.py)."""
    if splits is not None and not (isinstance(splits, int) and 1 <= splits <= w.chunks):
        raise ValueError(f"splits: expected an int in 1..{w.chunks} (the weight's chunks), got {splits!r}")
    _check_warps(artifact.spec, tuning)
    torch = _torch()
    s, flat, partials = _grids(artifact, w.mode, w.n_tiles, w.chunks, w.device, tuning, splits)
    workspace, counters = torch_workspace(torch, w.device, f"{w.spec_name} GEMV").get(
        "gemv", partials * PARTIAL, w.n_tiles
    )
    v = replace(w, splits=s, flat=flat, tuning=tuning, workspace=workspace, counters=counters, key="", _bound={})
    v.key = f"{w.spec_name}-{next(_ids)}"
    _WEIGHTS[v.key] = v
    return v


_CHECKPOINT_NAMES = ("qweight", "scales", "zeros", "g_idx", "global_scale")


def pack_gemv(
    artifact: Artifact,
    qweight: Any,
    scales: Any,
    zeros: Any = None,
    *,
    g_idx: Any = None,
    global_scale: Any = None,
    tuning: Tuning | None = None,
    host_pack: bool = False,
) -> MatmulWeight:
    """Check the checkpoint tensors and prepack them (once, on their GPU; ``host_pack``: through the numpy packer
    on the host, the same bytes) into a MatmulWeight, run by the GEMV of ``tuning`` (by default the kept code shape
    with the weight's block_warps; docs/experiments/matmul_variants.py times others)."""
    torch = _torch()
    spec = artifact.spec
    check_torch_tensors(torch, zip(_CHECKPOINT_NAMES, (qweight, scales, zeros, g_idx, global_scale), strict=True))
    prob = checkpoint_problem(spec, qweight, scales, zeros, g_idx, global_scale)
    q = dev.as_device_array(qweight, "qweight")
    s = dev.as_device_array(scales, "scales")
    z = dev.as_device_array(zeros, "zeros") if zeros is not None else None
    gi = dev.as_device_array(g_idx, "g_idx") if g_idx is not None else None
    host_gidx = None
    if gi is not None:
        check_g_idx(gi, prob.groups)
        host_gidx = dev.to_host(gi)
    gs = prob.group_size if prob.group_size > 0 and prob.groups > 1 else -1
    device = q.device
    cuda = torch.device("cuda", device)

    def up(a: np.ndarray | None, dtype: Any) -> Any:
        if a is None:
            return None
        return torch.from_numpy(np.ascontiguousarray(a).view(dtype)).to(cuda)

    if host_pack:  # the numpy packer on host copies (the torch path's reference: tests/test_quantize_model_pack.py)
        pre: Prepacked | torch_pack.TorchPrepacked = prepack(
            spec, dev.to_host(q), dev.to_host(s), dev.to_host(z) if z is not None else None, host_gidx, gs
        )
    else:  # the same bytes, packed where the tensors are (issue 26: no host round trip of the weight)
        pre = torch_pack.torch_prepack(spec, qweight, scales, zeros, host_gidx, gs)
    sl = pre.slots
    mm = MatmulLayout.of(spec)
    chunks = sl.slots // mm.chunk_k
    n_tiles = mm.n_padded(pre.N) // ROWS
    mode = entry_mode(spec, mm.per_block, pre.group_size, sl.gather, chunks)
    magic = group_magic(pre.group_size if pre.groups > 1 else -1, mm.per_block) if mode == GROUPED else 0
    if tuning is None:
        tuning = replace(DEFAULT_TUNING, warps=block_warps(spec, n_tiles, chunks, dev.sm_count(device)))
    _check_warps(spec, tuning)
    splits, flat, partials = _grids(artifact, mode, n_tiles, chunks, device, tuning)

    def group_rows(a: Any) -> Any:
        """GROUPED: PAD_GROUPS rows of zeros after the last group (read ahead by the kernel, unused)."""
        if a is None or mode != GROUPED:
            return a
        if isinstance(a, np.ndarray):
            return np.concatenate([a, np.zeros((PAD_GROUPS, *a.shape[1:]), a.dtype)])
        return torch.cat([a, torch.zeros((PAD_GROUPS, *a.shape[1:]), dtype=a.dtype, device=a.device)])

    def words_up(a: Any) -> Any:
        """The words, PAD_CHUNKS chunks of zeros after them, as int32 on the device."""
        if isinstance(a, np.ndarray):
            return up(np.concatenate([a.reshape(-1), np.zeros(PAD_CHUNKS * a[0, 0].size, np.uint32)]), np.int32)
        pad = torch.zeros(PAD_CHUNKS * a[0, 0].numel(), dtype=torch.int32, device=a.device)
        return torch.cat([a.reshape(-1), pad])

    def raw_up(a: Any) -> Any:
        """Raw scales / zeros: uint8 fields or codes stay uint8, 16-bit values go as int16."""
        if a is None or not isinstance(a, np.ndarray):
            return a
        return up(a, np.uint8 if a.dtype == np.uint8 else np.int16)

    # one launch layout for every M: the partials of the tile grid or of the flat grid, whichever needs more
    workspace, counters = torch_workspace(torch, device, f"{spec.name} GEMV").get("gemv", partials * PARTIAL, n_tiles)
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
        wq=words_up(pre.wq),
        scales=raw_up(group_rows(pre.scales)),
        zeros=raw_up(group_rows(pre.zeros)),
        global_scale=global_scale.detach().clone().reshape(1) if global_scale is not None else None,
        perm=up(sl.perm, np.int32) if sl.gather else None,
        # the kernel's loads run up to PAD_CHUNKS chunks past a warp's last one (unused): pad both tables
        block_group=up(np.concatenate([sl.block_group, np.zeros(PAD_CHUNKS * 8, np.int32)]), np.int32),
        workspace=workspace,
        counters=counters,
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


def run_gemv(artifact: Artifact, x: Any, w: MatmulWeight, *, bias: Any = None, out: Any = None) -> Any:
    """The launch(es) on checked tensors: y = x @ W (+ bias)."""
    torch = _torch()
    spec = artifact.spec
    if w.spec_name != spec.name:
        raise ValueError(f"w: packed for spec {w.spec_name!r}, but this kernel is {spec.name!r}")
    x2, out = check_activation(torch, spec, x, w.K, w.N, w.device, bias, out)
    M = int(x2.shape[0])
    if M == 0 or w.N == 0:
        return out
    x_stride = int(x2.stride(0)) if M > 1 else w.K
    key = (x2.data_ptr(), M, x_stride, out.data_ptr(), 0 if bias is None else bias.data_ptr())
    launches = w._bound.get(key)
    if launches is None:
        launches = remember(w._bound, key, _bind(artifact, w, x2, x_stride, M, bias, out), WEIGHT_BOUND_MAX)
    stream = dev.torch_raw_stream(torch, w.device)
    for launch in launches:
        launch(stream)
    return out


def _bind(artifact: Artifact, w: MatmulWeight, x2: Any, x_stride: int, M: int, bias: Any, out: Any) -> list:
    xvec = int(x_aligned(x2.data_ptr(), x_stride, w.K))
    launches = []
    esize = x2.element_size()
    per_warp = -(-w.chunks // (w.splits * w.tuning.warps))
    chunks_per_group = group_chunks(w.group_size, MatmulLayout.of(artifact.spec).per_block, w.groups)
    for m0 in range(0, M, TOKENS):
        mt = min(TOKENS, M - m0)
        fg = w.flat[mt > 8]
        entry = MatmulEntry(mt > 8, launch_mode(w.mode, mt > 8, w.tuning), fg is not None)
        fn = _function(artifact, entry, w.device, w.tuning)
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
        launches.append(fn.bind(grid, (w.tuning.warps * 32,), args))
    return launches


# -- the checkpoint form: pack once per weight tensor version ---------------------------------------------------


_PACKED: PackCache[MatmulWeight] = PackCache()


def packed_gemv(
    artifact: Artifact,
    owner: str,
    qweight: Any,
    scales: Any,
    zeros: Any = None,
    *,
    g_idx: Any = None,
    global_scale: Any = None,
) -> MatmulWeight:
    """The MatmulWeight of these checkpoint tensors: packed on first use and again when any of them changes
    (torch's in-place version counter) or is freed. ``owner``: the compiled spec's key (Kernel.op_key)."""
    torch = _torch()
    tensors = (qweight, scales, zeros, g_idx, global_scale)
    check_torch_tensors(torch, zip(_CHECKPOINT_NAMES, tensors, strict=True))
    return _PACKED.get(
        owner, tensors, lambda: pack_gemv(artifact, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale)
    )
