"""``y = x @ dequant(W)`` for prefill and batches (M > 16): the tensor-core GEMM of dqgen.kernels.gemm on weights
moved once into TensorRT-LLM's layout (dqgen.layout.gemm).

``pack_gemm(spec, qweight, scales, zeros=None, *, g_idx=None, global_scale=None)`` checks the checkpoint tensors
(the dequantize call's checks, dqgen.run.problem) and packs them on the host into a ``GemmWeight`` of device tensors
(NVFP4's global scale copied into it);
``run_gemm(spec, x, w)`` launches the GEMM (any M; ``Kernel.matmul`` reaches it through dqgen.run.dispatch for
M > 16); ``packed_gemm`` packs checkpoint tensors once per tensor version (cached). x is ``[..., K]`` in the
spec's target dtype with a unit last stride; rows 16-byte aligned take 16-byte cp.async copies, others the gather
entry. A GemmWeight owns its split-K workspaces and counters: launches that use one weight must be ordered (one
stream, or a graph), not run concurrently on two streams. On sm_90 the act-order (gathered) weights of a device also
share one x' buffer (dqgen.run.workspace.gathered_x_buffers): their launches must be ordered among them too. Torch
only.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..core.spec import Spec
from ..kernels.gemm import CONFIGS, GemmConfig, GemmEntry, GemmKernelConfig, has_zeros
from ..kernels.gemm import supports as supports  # re-exported: the sm_80 GEMM's specs (tests, dqgen.tools.build)
from ..kernels.gemm90 import Gemm90Config, hopper_only, refusal90
from ..layout import gemm as gemm_layout
from ..layout import torch_pack
from ..layout.gemm import TILE_K, TILE_N
from . import device as dev
from .bound_x import BoundPerX, markers
from .calls import WEIGHT_BOUND_MAX, remember
from .errors import imported_torch as _torch
from .gemm90 import (
    X_MAP_ARG,
    bind90,
    bind90_gathered,
    check_cluster_splits,
    hopper_ineligible,
    hopper_pays,
)
from .loader import load
from .operands import check_activation, check_torch_tensors, x_aligned
from .packcache import PackCache
from .problem import check_g_idx, checkpoint_problem
from .workspace import GrowOnlyCounters, SplitKWorkspace, gathered_x_buffers, torch_workspace

#: Fewest K tiles a split keeps (its workspace round trip must be paid for by enough main-loop work).
MIN_TILES_PER_SPLIT = 4
MAX_SPLITS = 16

#: The entry points' parameters in order, with the width each is passed at (tests/test_gemm.py holds this equal
#: to the rendered signature): pointers as uint64, int as int32, long long as int64.
PARAMS: tuple[tuple[str, type[np.generic]], ...] = (
    *((name, np.uint64) for name in ("wq", "scales", "zeros", "perm", "tile_group", "x", "bias", "y", "ws")),
    ("counters", np.uint64),
    *((name, np.int32) for name in ("M", "K", "N", "Ns", "n_lines", "k_tiles", "tiles_per_split", "y_pairs")),
    ("x_stride", np.int64),
    ("w_line_bytes", np.int64),
)

_ids = itertools.count()


@dataclass(eq=False)
class GemmWeight:
    """One weight in the GEMM layout, on one device."""

    spec_name: str
    K: int
    N: int
    groups: int
    gather: bool  # rows sorted or padded: x is read through perm
    slots: int
    k_tiles: int
    n_lines: int  # 128-byte-line rows of wq (N / columns interleaved)
    Ns: int  # scales' padded row length
    device: int
    wq: Any  # uint8 [n_lines, slots * 2]
    scales: Any  # int16 [G, Ns] (uint8: block-scale codes)
    zeros: Any  # uint8 / int16 [G, Ns] or None
    perm: Any  # int32 [slots]
    tile_group: Any  # int32 [k_tiles]
    key: str = ""
    #: fp32 [1]: the per-tensor scale of a spec with one (NVFP4; the Hopper GEMM's launch argument), else None
    global_scale: Any = None
    #: split-K partials and counters by (BM, output tiles, splits): configs of one BM share the layout
    workspace: SplitKWorkspace[Any] | None = field(default=None, repr=False)
    #: TMA tensor maps of the Hopper GEMM (dqgen.run.gemm90), made on first use
    tensor_maps: dict[str, Any] = field(default_factory=dict, repr=False)
    _bound: dict[tuple, Any] = field(default_factory=dict, repr=False)

    @property
    def line_bytes(self) -> int:
        """Bytes of one row of wq: its interleaved columns' codes over every K slot (TensorRT-LLM's layout packs
        4 int4 or 2 int8 columns a row: 2 bytes a slot either way)."""
        return int(self.wq.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes a launch reads of the weight (codes, scales, zeros)."""
        return sum(int(t.numel() * t.element_size()) for t in (self.wq, self.scales, self.zeros) if t is not None)


def _function(spec: Spec, e: GemmEntry, device: int) -> dev.LoadedKernel:
    # one entry per module: a launch compiles only what it runs
    return load(GemmKernelConfig.one(spec, e), device)


def choose_config(M: int) -> GemmConfig:
    """The CTA tile for M rows: the smallest of CONFIGS that holds M (16 or 32 rows), else 64 x 128 (timed on the
    H100 against 128 x 128 and 256 x 128 tiles: docs/bench/gemm_speed.json)."""
    for cfg in CONFIGS:
        if cfg.bm >= M:
            return cfg
    return CONFIGS[-1]


def workspace_floats(cfg: GemmConfig, tiles: int, splits: int) -> int:
    """fp32 partial sums of a split-K launch: one BM x TILE_N tile per (split, output tile)."""
    return splits * tiles * cfg.bm * TILE_N


#: The split model's costs in K tiles of one CTA: a CTA's pipeline fill and epilogue, and per split the partial
#: tile it writes and the last CTA reads back (of a 64-row tile; scaled by BM / 64). Fitted to the H100 sweep of
#: split counts 1, 2, 4, 8 (docs/experiments/gemm_sweep.py, docs/bench/gemm_speed.json): with these the model's pick was
#: within 7% of the best measured count at every shape and M, and the best at 28 of 38.
FILL_TILES = 6.0
REDUCE_TILES_PER_64_ROWS = 3.0


def choose_gemm_splits(tiles: int, k_tiles: int, resident: int, bm: int = 64) -> int:
    """CTAs per output tile along K: the count that minimises a wave model of the launch, rounds of resident CTAs
    x (K tiles per split + FILL_TILES) + the split-K reduction (REDUCE_TILES_PER_64_ROWS x bm / 64 per split),
    each split keeping at least MIN_TILES_PER_SPLIT K tiles, at most MAX_SPLITS; ties go to fewer splits."""
    best, best_cost = 1, float("inf")
    for want in range(1, MAX_SPLITS + 1):
        if want > 1 and k_tiles < want * MIN_TILES_PER_SPLIT:
            break
        per = -(-k_tiles // want)
        splits = -(-k_tiles // per)  # no empty split
        rounds = -(-tiles * splits // max(resident, 1))
        cost = rounds * (per + FILL_TILES) + (REDUCE_TILES_PER_64_ROWS * bm / 64 * splits if splits > 1 else 0.0)
        if cost < best_cost - 1e-9:
            best, best_cost = splits, cost
    return best


def pack_gemm(
    spec: Spec,
    qweight: Any,
    scales: Any,
    zeros: Any = None,
    *,
    g_idx: Any = None,
    global_scale: Any = None,
    host_pack: bool = False,
) -> GemmWeight:
    """Check the checkpoint tensors and pack them (once, on their GPU; ``host_pack``: through the numpy packer on
    the host, the same bytes) into a GemmWeight; ``global_scale`` (NVFP4's fp32 [1], required exactly where the
    spec has one) is copied into the weight."""
    torch = _torch()
    refused = refusal90(spec)  # "" for every spec either main loop takes (floats: the Hopper one alone)
    if refused:
        raise ValueError(f"{refused} (spec {spec.name!r})")
    check_torch_tensors(
        torch,
        (("qweight", qweight), ("scales", scales), ("zeros", zeros), ("g_idx", g_idx), ("global_scale", global_scale)),
    )
    prob = checkpoint_problem(spec, qweight, scales, zeros, g_idx, global_scale)
    q = dev.as_device_array(qweight, "qweight")
    s = dev.as_device_array(scales, "scales")
    z = dev.as_device_array(zeros, "zeros") if zeros is not None else None
    host_gidx = None
    if g_idx is not None:
        gi = dev.as_device_array(g_idx, "g_idx")
        check_g_idx(gi, prob.groups)
        host_gidx = dev.to_host(gi)
    group_size = prob.group_size if prob.group_size > 0 and prob.groups > 1 else -1
    device = q.device
    cuda = torch.device("cuda", device)

    def up(a: Any, dtype: Any) -> Any:
        if a is None or not isinstance(a, np.ndarray):
            return a  # None, or a tensor the torch path made on the device
        return torch.from_numpy(np.ascontiguousarray(a).view(dtype)).to(cuda)

    if host_pack:  # the numpy packer on host copies (the torch path's reference: tests/test_quantize_model_pack.py)
        pk: gemm_layout.GemmPacked | torch_pack.TorchGemmPacked = gemm_layout.pack_gemm(
            spec, dev.to_host(q), dev.to_host(s), dev.to_host(z) if z is not None else None, host_gidx, group_size
        )
        zdtype = np.uint8 if pk.zeros is not None and pk.zeros.dtype == np.uint8 else np.int16
    else:  # the same bytes, packed where the tensors are (issue 26: no host round trip of the weight)
        pk = torch_pack.torch_pack_gemm(spec, qweight, scales, zeros, host_gidx, group_size)
        zdtype = None
    w = GemmWeight(
        spec_name=spec.name,
        K=prob.K,
        N=prob.N,
        groups=pk.groups,
        gather=pk.slots.gather,
        slots=pk.slots.slots,
        k_tiles=pk.slots.slots // TILE_K,
        n_lines=int(pk.wq.shape[0]),
        Ns=int(pk.scales.shape[1]),
        device=device,
        wq=up(pk.wq, np.uint8),
        scales=up(pk.scales, np.int16 if pk.scales.dtype.itemsize == 2 else np.uint8),  # uint8: block-scale codes
        zeros=up(pk.zeros, zdtype),
        perm=up(pk.slots.perm, np.int32),
        tile_group=up(pk.slots.tile_group, np.int32),
        workspace=torch_workspace(torch, device, f"{spec.name} GEMM"),
        # a copy, as the GEMV's MatmulWeight keeps: the packed weight does not change with the caller's tensor
        global_scale=None if global_scale is None else global_scale.detach().clone().reshape(1),
    )
    w.key = f"{spec.name}-gemm-{next(_ids)}"
    return w


def _ptr(t: Any) -> np.uint64:
    return np.uint64(0 if t is None else t.data_ptr())


@functools.cache
def _gathered_x() -> GrowOnlyCounters[Any]:
    """The process's gathered-x' buffers (one per device; made on first use: torch is imported lazily here)."""
    return gathered_x_buffers(_torch())


def run_gemm(
    spec: Spec,
    x: Any,
    w: GemmWeight,
    *,
    bias: Any = None,
    out: Any = None,
    config: GemmConfig | Gemm90Config | None = None,
    splits: int | None = None,
    cluster_splits: int | None = None,
) -> Any:
    """The GEMM launch on checked tensors: y = x @ W (+ bias), any M: on an H100 / H200 the Hopper main loop
    (dqgen.run.gemm90; for gathered K slots after the gather of x into slot order) where it takes the launch and
    pays (gemm90.hopper_pays), else the sm_80 one (its gather entry for gathered slots). ``config`` /
    ``splits`` override the choice of main loop and tile and the split (tuning and benchmarks; any tile of either
    template, any split count >= 1); ``cluster_splits`` runs the Hopper GEMM split-K in clusters of that many CTAs
    (dqgen.kernels.gemm90.CLUSTER_SPLITS)."""
    torch = _torch()
    if w.spec_name != spec.name:
        raise ValueError(f"w: packed for spec {w.spec_name!r}, but this kernel is {spec.name!r}")
    x2, out = check_activation(torch, spec, x, w.K, w.N, w.device, bias, out)
    M = int(x2.shape[0])
    if M == 0 or w.N == 0:
        return out
    x_stride = int(x2.stride(0)) if M > 1 else w.K
    if splits is not None and not (isinstance(splits, int) and splits >= 1):
        raise ValueError(f"splits: expected an int >= 1, got {splits!r}")
    if cluster_splits is not None and isinstance(config, GemmConfig):
        raise ValueError(f"cluster_splits: split-K clusters are the Hopper GEMM's; got the sm_80 tile {config}")
    check_cluster_splits(cluster_splits)  # before a gathered x' buffer grows
    key = _bound_key(x2, M, x_stride, out, bias, config, splits, cluster_splits)
    launch = w._bound.get(key)
    if launch is None:
        bound = _bind(spec, w, x2, x_stride, M, bias, out, config, splits, cluster_splits)
        launch = remember(w._bound, key, bound, WEIGHT_BOUND_MAX)
    launch(dev.torch_raw_stream(torch, w.device))
    return out


def _bound_key(
    x2: Any,
    M: int,
    x_stride: int,
    out: Any,
    bias: Any,
    config: GemmConfig | Gemm90Config | None = None,
    splits: int | None = None,
    cluster_splits: int | None = None,
) -> tuple:
    """What run_gemm's bound launches of a weight (GemmWeight._bound) are kept by: every pointer and choice bound."""
    bias_ptr = 0 if bias is None else bias.data_ptr()
    return (x2.data_ptr(), M, x_stride, out.data_ptr(), bias_ptr, config, splits, cluster_splits)


def _takes90(spec: Spec, w: GemmWeight, M: int) -> bool:
    """Whether run_gemm's own choice (no ``config``) for M rows is the Hopper GEMM, where it can take the launch: a
    float / codebook spec (no sm_80 main loop to fall back on), or where it pays (gemm90.hopper_pays)."""
    return hopper_only(spec) or hopper_pays(w.N, w.k_tiles, M, w.device, spec)


class _At(NamedTuple):
    """A tensor standing in for a per-call one, or for a bias kept by its address: bind90 reads nothing of its
    output or its bias but the address."""

    ptr: int

    def data_ptr(self) -> int:
        return self.ptr


def signature_launch(
    spec: Spec, w: GemmWeight, x2: Any, M: int, bias: Any, out: Any
) -> dev.BoundLaunch | BoundPerX | None:
    """For the eager fast path (dqgen.run.fastcall), right after ``run_gemm(spec, x2, w, bias=bias, out=out)`` with
    no overrides on a contiguous x2 [M, K]: where that call ran one bound launch, a launch of it of its own (not
    run_gemm's, whose slots the fast path must not patch) that any x and output of the call's signature (M, x's
    16-byte alignment, the bias) can be patched into. The sm_80 GEMM's bound anew (x and y are pointer slots); for the
    Hopper GEMM, whose x is in a TMA tensor map, launches bound per x address (BoundPerX) with y as a marker slot,
    which hold the weight weakly (the fast path's entries outlive a repacked layer's weight until their table
    clears). None where no single launch ran (a gathered x, or another path took the call)."""
    if not isinstance(w._bound.get(_bound_key(x2, M, w.K, out, bias)), dev.BoundLaunch):
        return None
    if hopper_ineligible(w, x2.data_ptr(), w.K) or not _takes90(spec, w, M):
        return _bind(spec, w, x2, w.K, M, bias, out)
    y_mark = markers((True,))[0]  # above every device address: no other argument equals it
    weight = weakref.ref(w)
    bias_at = None if bias is None else _At(bias.data_ptr())

    def bind(x_ptr: int) -> dev.BoundLaunch:
        gw = weight()
        if gw is None:  # the fast path checks its MatmulWeight first, which keeps this GemmWeight
            raise RuntimeError("matmul: the GEMM weight of this signature is gone")
        return bind90(spec, gw, x_ptr, gw.K, M, bias_at, _At(y_mark), None, None)

    return BoundPerX(bind, (y_mark, 0, 0), "matmul", X_MAP_ARG)


def _bind(
    spec: Spec,
    w: GemmWeight,
    x2: Any,
    x_stride: int,
    M: int,
    bias: Any,
    out: Any,
    config: GemmConfig | Gemm90Config | None = None,
    want_splits: int | None = None,
    cluster_splits: int | None = None,
) -> Any:
    why_not = hopper_ineligible(w, x2.data_ptr(), x_stride)
    if cluster_splits is not None and why_not:
        raise ValueError(f"cluster_splits: the Hopper GEMM cannot take this launch: {why_not}")
    only90 = hopper_only(spec)  # a float / codebook spec: no sm_80 main loop to fall back on
    if isinstance(config, Gemm90Config) and why_not:
        raise ValueError(f"config: the Hopper GEMM cannot take this launch: {why_not}")
    if only90 and why_not:  # Kernel.matmul's dispatch sends such a call to the GEMV instead
        raise ValueError(f"run_gemm: spec {spec.name!r} runs on the Hopper GEMM alone, which cannot take it: {why_not}")
    if only90 and config is not None and not isinstance(config, Gemm90Config):
        raise ValueError(f"config: spec {spec.name!r} runs on the Hopper GEMM alone; got the sm_80 tile {config}")
    if isinstance(config, Gemm90Config) or (
        config is None and not why_not and (cluster_splits is not None or _takes90(spec, w, M))
    ):
        cfg90 = config if isinstance(config, Gemm90Config) else None
        if w.gather:  # x gathered into slot order (x' in the device's buffer), then the GEMM over the slots
            xp = _gathered_x().get(w.device, M * w.slots)
            return bind90_gathered(
                spec, w, x2.data_ptr(), x_stride, M, bias, out, cfg90, want_splits, xp.data_ptr(), cluster_splits
            )
        return bind90(spec, w, x2.data_ptr(), x_stride, M, bias, out, cfg90, want_splits, cluster_splits=cluster_splits)
    cfg = config if config is not None else choose_config(M)
    entry = GemmEntry(cfg, w.gather or not x_aligned(x2.data_ptr(), x_stride, w.K))
    fn = _function(spec, entry, w.device)
    smem = cfg.shared_bytes(spec.source.bits, has_zeros(spec))
    m_tiles, n_tiles = -(-M // cfg.bm), -(-w.N // TILE_N)
    tiles = m_tiles * n_tiles
    resident = dev.sm_count(w.device) * max(1, fn.max_active_blocks(cfg.threads, smem))
    splits = want_splits if want_splits is not None else choose_gemm_splits(tiles, w.k_tiles, resident, cfg.bm)
    splits = max(1, min(splits, w.k_tiles))
    per_split = -(-w.k_tiles // splits)
    splits = -(-w.k_tiles // per_split)  # no empty split
    ws, counters = None, None
    if splits > 1:
        assert w.workspace is not None  # pack_gemm gives every weight its pool
        # by BM: configs of one BM share the workspace layout
        ws, counters = w.workspace.get((cfg.bm, tiles, splits), workspace_floats(cfg, tiles, splits), tiles)
    values = {
        "wq": w.wq.data_ptr(),
        "scales": w.scales.data_ptr(),
        "zeros": _ptr(w.zeros),
        "perm": w.perm.data_ptr(),
        "tile_group": w.tile_group.data_ptr(),
        "x": x2.data_ptr(),
        "bias": _ptr(bias),
        "y": out.data_ptr(),
        "ws": _ptr(ws),
        "counters": _ptr(counters),
        "M": M,
        "K": w.K,
        "N": w.N,
        "Ns": w.Ns,
        "n_lines": w.n_lines,
        "k_tiles": w.k_tiles,
        "tiles_per_split": per_split,
        "y_pairs": int(out.data_ptr() % 4 == 0 and w.N % 2 == 0),
        "x_stride": x_stride,
        "w_line_bytes": w.line_bytes,
    }
    args = [typ(values[name]) for name, typ in PARAMS]
    return fn.bind((m_tiles, n_tiles, splits), (cfg.threads,), args, shared_mem=smem)


# -- the checkpoint form: pack once per weight tensor version ---------------------------------------------------


_PACKED: PackCache[GemmWeight] = PackCache()


def packed_gemm(
    spec: Spec,
    owner: str,
    qweight: Any,
    scales: Any,
    zeros: Any = None,
    *,
    g_idx: Any = None,
    global_scale: Any = None,
) -> GemmWeight:
    """The GemmWeight of these checkpoint tensors: packed on first use and again when any of them changes
    (torch's in-place version counter) or is freed. ``owner``: the compiled spec's key (Kernel.op_key)."""
    return _PACKED.get(
        owner,
        (qweight, scales, zeros, g_idx, global_scale),
        lambda: pack_gemm(spec, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale),
    )
