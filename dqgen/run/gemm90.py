"""The Hopper GEMM's launch (dqgen.kernels.gemm90) on a GemmWeight: the same packed weight as the sm_80 GEMM,
read by TMA through a tensor map made once per weight and device; x through a tensor map made per (address,
rows, stride) of x (a bound launch is cached on those, so a repeated call makes none).

A weight whose K slots are gathered (act-order / desc_act, groups of no whole 64-k tiles: dqgen.layout.gemm) is
taken the way Marlin and Machete take act-order: the gather kernel (dqgen.kernels.gather_x) writes x' [M, slots] =
x[:, perm] (0 where perm is -1) once per call into a device buffer (dqgen.run.workspace.gathered_x_buffers), and the
GEMM reads x' by TMA over the slot-ordered K with the weight's tile_group as it is: every 64-k tile of the gathered
slots lies in one group (layout.slots.sorted_by_group pads each group to whole tiles), so the kernel's one group
lookup per K tile holds unchanged (``bind90_gathered``).

``hopper_ineligible`` says why it cannot take a launch (an sm_90 GPU; for in-order slots an x whose rows TMA can
address: a gathered x' always is), ``hopper_pays`` whether it beats the sm_80 kernel for a weight's N and K tiles at
M rows, ``config90_for`` its CTA shape (M's token tile, the 256-token one halved where its stream-K pieces would be
short), ``stream_k_ctas`` how many CTAs share the work, ``shares_for`` where the CTAs holding a tile's pieces add
them together (else the last to arrive adds them all), ``ksplit_for`` where a tile runs split-K in a cluster of
CTAs instead (the pieces added through distributed shared memory). The entry points' parameters: PARAMS90
(``params90``: with NVFP4's global scale last), GATHER_PARAMS."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from ..core.spec import Spec
from ..kernels.gather_x import GATHER_X
from ..kernels.gemm90 import CLUSTER_SPLITS, Gemm90Config, Gemm90KernelConfig, choose_config90, cluster_config90
from ..layout.gemm import TILE_N, group_rows
from ..layout.gemm_trt import columns_interleaved
from . import device as dev
from .loader import load

#: The entry points' parameters in order with their widths (tests/test_gemm90.py holds this equal to the rendered
#: signature): the four tensor maps by value, pointers as uint64, int as int32, long long as int64.
PARAMS90: tuple[tuple[str, Any], ...] = (
    *((name, dev.TensorMapArg) for name in ("wmap", "xmap", "smap", "zmap")),
    *((name, np.uint64) for name in ("tile_group", "bias", "y", "ws", "counters")),
    *((name, np.int32) for name in ("M", "N", "k_tiles", "m_tiles")),
    ("units", np.int64),
    ("whole", np.int64),
    ("split_ctas", np.int32),
    ("ksplit", np.int32),
    ("shares", np.int32),
)
#: The argument index of x's tensor map (dqgen.run.fastcall re-addresses it for a new x).
X_MAP_ARG = [name for name, _ in PARAMS90].index("xmap")
#: What the entry points of a spec with a global scale (NVFP4) take after PARAMS90: its fp32 [1] tensor.
GLOBAL_SCALE_PARAM: tuple[str, Any] = ("global_scale", np.uint64)


def params90(spec: Spec) -> tuple[tuple[str, Any], ...]:
    """The entry points' parameters of ``spec``'s Hopper GEMM: PARAMS90, then the global scale where it has one."""
    return (*PARAMS90, GLOBAL_SCALE_PARAM) if spec.scales.global_scale else PARAMS90


#: The gather kernel's parameters (templates/gather_x.cu.j2), held equal to its signature the same way.
GATHER_PARAMS: tuple[tuple[str, Any], ...] = (
    *((name, np.uint64) for name in ("x", "perm", "xp")),
    *((name, np.int32) for name in ("M", "slots")),
    ("x_stride", np.int64),
)


class Plan90(NamedTuple):
    """A Hopper GEMM launch's schedule (the W4A16 and W8A8 kernels', templates/blocks/splitk.cuh.j2): ``ctas`` CTAs;
    the first ``whole`` of the ``tiles`` output tiles run whole (tile t by CTA t mod ctas), the rest are stream-K:
    the first ``split_ctas`` CTAs take equal contiguous ranges of their units (``k_tiles`` a tile, K fastest). In a
    cluster launch ``ctas`` counts clusters (a 2-CTA entry's pair tiles; a split-K cluster launch: one whole tile a
    cluster, ``ctas`` = ``whole`` = ``tiles``)."""

    tiles: int
    ctas: int
    k_tiles: int
    whole: int
    split_ctas: int

    @classmethod
    def of(cls, tiles: int, ctas: int, k_tiles: int, whole: int | None = None, split_ctas: int | None = None) -> Plan90:
        """Default ``whole``: every tile where there are no more CTAs than tiles, else none (plain stream-K); default
        ``split_ctas``: every CTA."""
        whole = (tiles if ctas <= tiles else 0) if whole is None else whole
        return cls(tiles, ctas, k_tiles, whole, ctas if split_ctas is None else split_ctas)

    @property
    def split(self) -> bool:
        """Whether some tiles run in pieces (the launch needs the partials' workspace and the tiles' counters)."""
        return self.whole < self.tiles

    def check(self) -> None:
        """A one-line ValueError naming the field where the kernels' schedule would skip or lose work: a unit of work
        runs once, and every split tile's pieces come from CTAs whose ranges are not empty (an empty range between
        a tile's owners would leave the tile unstored and its counter set for the next launch)."""
        if not 1 <= self.ctas <= self.tiles * self.k_tiles:
            raise ValueError(f"plan: ctas {self.ctas} outside 1..{self.tiles * self.k_tiles} (the units) ({self})")
        if not 0 <= self.whole <= self.tiles:
            raise ValueError(f"plan: whole {self.whole} outside 0..{self.tiles} tiles ({self})")
        if not 1 <= self.split_ctas <= self.ctas:
            raise ValueError(f"plan: split_ctas {self.split_ctas} outside 1..{self.ctas} CTAs ({self})")
        if self.split and (self.tiles - self.whole) * self.k_tiles < self.split_ctas:
            raise ValueError(
                f"plan: split_ctas {self.split_ctas} exceed the {(self.tiles - self.whole) * self.k_tiles} stream-K K"
                f" tiles: a CTA would get none ({self})"
            )


#: The longest pieces (K tiles) for which stream_k_ctas takes fewer pieces a tile, added by their CTAs together, over
#: more that the last arriver adds. On the H200, CUDA graphs, µs a call (docs/bench/shared_fixup_h200.json): 4096 x
#: 1024 at M = 128 on the 64-token tile, 8 shared pieces of 8 K tiles against 16 of 4: 8.3 against 19.2; 4096 x
#: 4096 at M = 32, 4 of 16 against 8 of 8: 10.4 against 12.6; 4096 x 6144 at M = 32, 4 of 16 against 5: 12.4
#: against 13.1; but 14336 x 4096 at M = 32, 4 of 56 against 8 of 28: 27.0 against 22.0 (the longer main loop costs
#: more than the fixup saves).
SHARED_PIECE_MAX_K_TILES = 16


def stream_k_ctas(tiles: int, k_tiles: int, resident: int, splits: int | None = None, most_shares: int = 1) -> int:
    """The CTAs of a W4A16 launch (with Plan90.of's defaults: fewer CTAs than tiles run persistent on whole tiles P
    apart; more share the tiles x K tiles units in equal contiguous ranges, stream-K): ``splits`` pieces a tile where
    given (split-K); else, where the tiles do not fill the resident CTAs, as many equal pieces a tile as fill them
    (one wave), rounded down to a count of CLUSTER_SPLITS up to ``most_shares`` (the tile's, ``most_shares90``) where
    one fits and its pieces stay short (SHARED_PIECE_MAX_K_TILES): those pieces its CTAs add together (shares_for),
    which costs less than the last arriver adding more of them; up to two waves' worth of tiles, one tile a CTA (on
    the H100 a partial second wave cost less than the stream-K pieces' workspace round trips:
    docs/bench/gemm90_h100.json); from two waves on, the resident CTAs, persistent (their next tile loads under the
    last one's epilogue; docs/experiments/issue23.md, addendum)."""
    units = tiles * k_tiles
    if splits is not None:
        return max(1, min(units, tiles * splits))
    if tiles < resident:
        pieces = max(1, resident // tiles)
        shared = [s for s in CLUSTER_SPLITS if s <= min(pieces, most_shares, k_tiles)]
        if shared and (max(shared) == pieces or k_tiles <= max(shared) * SHARED_PIECE_MAX_K_TILES):
            pieces = max(shared)
        return min(units, tiles * pieces)
    if tiles < 2 * resident or tiles % resident == 0:
        return tiles
    return min(units, resident)


#: K tiles up to which a stream-K piece of the largest token tile is short enough that halving the token tile (twice
#: the tiles on the same resident CTAs, half the pieces a tile, each twice as long) runs faster. On the H100, CUDA
#: graphs of back-to-back calls, µs a call (devtools/linear_graph_bench.py; docs/bench/linear_graph_h100.json and
#: linear_graph_tiles_h100.json): pieces of 16 K tiles, 4096 x 4096 at M = 192 / 256: n256 28.1 / 29.2, n128 25.3 /
#: 25.4; 4096 x 2048 at 192 / 256: 26.8 / 27.3 against 19.6 / 19.0; pieces of 32, 4096 x 6144 at 192 / 256: 35.9 /
#: 35.3 against 33.7 / 32.7, 4096 x 4096 at 512: 38.4 against 35.4; pieces of 56, 14336 x 4096 at 192 / 256: 54.2 /
#: 56.9 against 60.4 / 65.0 (n256 kept). Halving n128 to n64 doubles the resident CTAs too: no longer pieces.
SHORT_PIECE_K_TILES = 32


def config90_for(M: int, N: int, k_tiles: int, sms: int, spec: Spec | None = None) -> Gemm90Config:
    """The CTA shape bind90 launches for M rows of a weight of N features and ``k_tiles`` K tiles on a GPU of ``sms``
    SMs: the token tile that holds M (choose_config90), except the 256-token tile where its tiles would run in stream-K
    pieces of at most SHORT_PIECE_K_TILES: then the 128-token tile, over twice the token tiles (where its pieces are
    longer). Measured on 4-bit integer weights (AWQ int4), so only for those (``spec`` None: the shape alone): 8-bit
    and float codes, whose W is a larger part of a stage that the halved tile reads twice, were not measured."""
    cfg = choose_config90(M)
    if cfg.bn != 256 or (spec is not None and not measured_codes(spec)):
        return cfg
    half = choose_config90(128)
    piece = _piece_k_tiles(cfg, M, N, k_tiles, sms)
    if piece <= SHORT_PIECE_K_TILES and _piece_k_tiles(half, M, N, k_tiles, sms) > piece:
        return half
    return cfg


def _piece_k_tiles(cfg: Gemm90Config, M: int, N: int, k_tiles: int, sms: int) -> float:
    """K tiles a CTA's piece of a tile gets under stream_k_ctas' schedule (k_tiles where tiles run whole)."""
    tiles = cfg.tiles(M, N)
    ctas = stream_k_ctas(tiles, k_tiles, sms * cfg.min_blocks)
    return k_tiles if ctas <= tiles else tiles * k_tiles / ctas


@functools.cache
def is_hopper(device: int) -> bool:
    """Whether the GPU runs the sm_90a kernels (an H100 / H200: compute capability 9.0); False without a driver (the
    dispatch asks on every call, torch stand-ins included)."""
    try:
        return dev.device_arch(device) == "sm_90"
    except RuntimeError:
        return False


#: Fewest K tiles a resident CTA must get for the Hopper GEMM to beat the sm_80 one: below it, its deeper pipeline
#: and split pieces cost more than they save (on the H100, docs/bench/gemm90_h100.json: 4096 x 1024 and 4096 x 4096
#: up to 64 tokens, 4096 x 6144 up to 16, have fewer and run faster on the sm_80 kernel; every shape with 12 or
#: more ran faster on this one).
MIN_K_TILES_PER_CTA = 12


def hopper_ineligible(w: Any, x_ptr: int, x_stride: int) -> str:
    """Why the Hopper GEMM cannot take this launch ("" where it can): it needs an sm_90 GPU and, where the weight's
    K slots are in order, x rows TMA can address (16-byte aligned address and stride, K a multiple of 8, rows
    apart); gathered slots read x through the gather kernel, whose x' TMA always addresses."""
    if not is_hopper(w.device):
        return "the GPU is not sm_90"
    if w.gather:
        return ""
    return x_ineligible(x_ptr, x_stride, w.K)


def x_ineligible(x_ptr: int, x_stride: int, K: int) -> str:
    """Why TMA cannot address x's rows ("" where it can): a 16-byte aligned address and row stride (K a multiple of
    8), rows at least K apart (a broadcast row has stride 0)."""
    if x_ptr % 16 or (x_stride * 2) % 16 or K % 8 or x_stride < K:
        return "x's rows are not 16-byte aligned, K a multiple of 8 and rows apart"
    return ""


def hopper_pays(N: int, k_tiles: int, M: int, device: int, spec: Spec | None = None) -> bool:
    """Whether the Hopper GEMM is the faster GEMM for M rows of this weight on this GPU: the resident CTAs of the
    tile bind90 would launch (config90_for, for ``spec``'s codes) get at least MIN_K_TILES_PER_CTA K tiles each, or
    its tiles run split-K in clusters (ksplit_for) that this GPU holds at once (ksplit_resident; asked of the
    kernel where ``spec`` is given)."""
    if not is_hopper(device):
        return False
    resident = None if spec is None else functools.partial(ksplit_clusters_resident, spec, device)
    return pays90(N, k_tiles, M, dev.sm_count(device), spec, resident)


def ksplit_clusters_resident(spec: Spec, device: int, cfg: Gemm90Config, cluster_splits: int, tiles: int) -> int:
    """How many clusters of ``cluster_splits`` CTAs of ``cfg``'s entry (a split-K cluster launch of ``tiles``
    clusters) this GPU holds at once: cuOccupancyMaxActiveClusters (the entry is loaded: it is the one that runs)."""
    fn = load(Gemm90KernelConfig.one(spec, cfg), device)
    return fn.max_active_clusters(cluster_splits * tiles, cfg.threads, cluster_splits, cfg.launch_shared_bytes(spec))


def pays90(
    N: int,
    k_tiles: int,
    M: int,
    sms: int,
    spec: Spec | None = None,
    resident_clusters: Callable[[Gemm90Config, int, int], int] | None = None,
) -> bool:
    """hopper_pays on a GPU of ``sms`` SMs (a pure function: the dispatch rule's sweep models the dispatch with it):
    enough K tiles a resident CTA, or split-K clusters (ksplit_for) where ``resident_clusters`` (cfg, cluster size,
    clusters -> how many the GPU holds at once; None: as KSPLIT_FILL assumes) says bind90 runs them
    (ksplit_resident; else it runs the stream-K schedule, judged by its K tiles a CTA). It judges the tile that
    would run: where config90_for halves the 256-token tile, the halved tile's twice as many tiles (on the H100,
    CUDA graphs, µs a call, docs/bench/linear_graph_pays_h100.json: 4096 x 2048 at M = 192 / 256, 7.8 K tiles a CTA
    on n256, 15.5 on n128: the sm_80 GEMM 21.8 / 22.4, n128 19.0 / 19.0; 8192 x 1024 there: 26.4 / 27.8 against
    21.6 / 21.7)."""
    cfg = config90_for(M, N, k_tiles, sms, spec)
    tiles = cfg.tiles(M, N)
    resident = sms * cfg.min_blocks
    per_cta = k_tiles if tiles >= resident else tiles * k_tiles / resident
    if per_cta >= MIN_K_TILES_PER_CTA:
        return True
    ks = ksplit_for(cfg, M, N, k_tiles, sms, spec)
    if ks is not None and (
        resident_clusters is None or ksplit_resident(ks, tiles, resident_clusters(cfg, ks, tiles), False, cfg.tag)
    ):
        return True
    # the stream-K schedule (bind90's where its split-K clusters would not all be resident) whose CTAs add their
    # pieces together (shares_for), from the M of the split-K clusters on: on the H200 it runs ahead of the sm_80
    # GEMM with 8-16 K tiles a CTA (docs/bench/shared_fixup_h200.json: 4096 x 4096 at M = 32 / 64, 10.4 / 11.4
    # against 13.7 / 17.4; 4096 x 1024 at M = 256, 12.4 against 17.2)
    if M < KSPLIT_MIN_M or (spec is not None and not measured_codes(spec)):
        return False
    return stream_k_shares(cfg, tiles, k_tiles, resident) > 1


def weight_maps(
    spec: Spec, w: Any, features: int = TILE_N
) -> tuple[dev.TensorMapArg, dev.TensorMapArg, dev.TensorMapArg]:
    """The weight's tensor maps for ``features``-feature CTA tiles, made once: wq (rows are its 128-byte-line rows;
    a box is one K tile of a CTA's features, 128-byte swizzled), the scales and the zeros ([G, Ns]; a box is one
    group's columns of a tile; without zeros the scales' map stands in, never read)."""
    hit = w.tensor_maps.get(f"w{features}")
    if hit is None:
        line_bytes = w.line_bytes
        lines_per_tile = features // columns_interleaved(spec.source.bits)
        wmap = dev.encode_tensor_map_2d(w.wq.data_ptr(), 1, line_bytes, w.n_lines, line_bytes, (128, lines_per_tile))
        groups = int(w.scales.shape[0])
        # a box is the tile's group_rows scale rows (groups under a 64-k tile: one row a group), 2 or 1 bytes each
        se, rows = int(w.scales.element_size()), group_rows(spec)
        smap = dev.encode_tensor_map_2d(
            w.scales.data_ptr(), se, w.Ns, groups, w.Ns * se, (features, rows), swizzle=False
        )
        zmap = smap
        if w.zeros is not None:
            ze = int(w.zeros.element_size())
            zmap = dev.encode_tensor_map_2d(
                w.zeros.data_ptr(), ze, w.Ns, groups, w.Ns * ze, (features, 1), swizzle=False
            )
        hit = w.tensor_maps[f"w{features}"] = (wmap, smap, zmap)
    return hit


def x_map(x_ptr: int, M: int, K: int, x_stride: int, bn: int) -> dev.TensorMapArg:
    """x's tensor map: M rows of K halves, ``x_stride`` halves apart; a box is 64 k of ``bn`` tokens (a 2-CTA
    cluster entry's CTA copies half its token tile: Gemm90Config.x_box_rows)."""
    return dev.encode_tensor_map_2d(x_ptr, 2, K, M, x_stride * 2, (64, bn))


def cluster_ctas(pair_tiles: int, resident_clusters: int) -> int:
    """The clusters of a 2-CTA cluster launch (whole pair tiles only, no stream-K pieces): one pair tile a cluster
    up to two waves or a whole number of waves, else the resident clusters, persistent (stream_k_ctas' rule for
    whole tiles)."""
    if pair_tiles < 2 * resident_clusters or pair_tiles % resident_clusters == 0:
        return pair_tiles
    return resident_clusters


#: Where bind90 runs a 2-CTA cluster entry by itself (cfg None): (the least M, the least N); None: never (the entries
#: stay selectable through ``cfg``). On the H100 (docs/bench/gemm90_cluster_h100.json, one run) the cluster ran
#: 0.93-0.98x the one-CTA launch at M = 1024 and 4096 on the three shapes with N >= 8192, and 1.00-1.04x at M = 128
#: to 512 (where the one-CTA launch splits tiles over an under-filled grid: up to 2.5x); at N = 4096 (14336 x 4096)
#: 1.02x at M = 1024 and 4096.
CLUSTER_RULE: tuple[int, int] | None = (1024, 8192)


def measured_codes(spec: Spec) -> bool:
    """Whether ``spec``'s codes are those the H100 launch rules (CLUSTER_RULE, SHORT_PIECE_K_TILES) were measured on:
    4-bit integers."""
    return spec.source.bits == 4 and spec.source.kind.integer


def use_cluster90(M: int, N: int, spec: Spec | None = None) -> bool:
    """Whether bind90 picks the 2-CTA cluster entry of M's token tile for this call (CLUSTER_RULE): measured on
    4-bit integer weights (AWQ int4), so only for those (``spec`` None: the shape alone); 8-bit and float codes,
    whose W takes more of a stage, were not measured."""
    if CLUSTER_RULE is None:
        return False
    if spec is not None and not measured_codes(spec):
        return False
    least_m, least_n = CLUSTER_RULE
    return least_m <= M and least_n <= N and cluster_config90(choose_config90(M)) is not None


def cluster_plan(cfg: Gemm90Config, M: int, N: int, k_tiles: int, resident_clusters: int) -> Plan90:
    """The schedule of a 2-CTA cluster launch: its tiles are pair tiles (two neighbouring feature tiles of one token
    tile; an odd last feature tile's pair has a spare CTA that loads zeros and stores nothing), its CTAs clusters,
    every tile whole."""
    pair_tiles = cfg.tiles(M, N)
    return Plan90.of(pair_tiles, cluster_ctas(pair_tiles, max(1, resident_clusters)), k_tiles)


#: Where bind90 runs a tile split-K in a cluster by itself (``ksplit_for``): KSPLIT_MIN_M to KSPLIT_MAX_M tokens (below,
#: the GEMV runs these shapes: 4.7 against 6.1 µs at 4096 x 1024, M = 16), the clusters' CTAs at most KSPLIT_FILL[size]
#: of the resident CTAs (the largest cluster size that fits), each CTA at most KSPLIT_MAX_K_TILES K tiles unless the
#: launch is of clusters of 2 and holds at least KSPLIT_MIN_FILL of the resident CTAs.
#:
#: On the H200, CUDA graphs of back-to-back calls, µs a call (devtools/linear_graph_bench.py --ksplits;
#: docs/bench/ksplit_h200.json, its second run unless marked), the dispatch before / split-K clusters: 4096 x 1024 at
#: M = 32, 64, 128: 11.0 / 6.8 (n32, 64 CTAs), 12.3 / 8.4 (n64, 64), 12.9 / 10.1 (n128, 64); 4096 x 6144 at 32, 64:
#: 16.8 / 13.4 (192 CTAs), 22.2 / 16.9; 4096 x 4096 at 32, 64: 13.7 / 12.6 (128), 17.4 / 16.3. Slower: every launch in
#: clusters of 4 or 8 of 256 CTAs of the 2-an-SM tiles and 128 of the 1-an-SM ones (4096 x 4096 at M = 128, 128 CTAs:
#: 29.9 against 18.0; two waves of resident clusters, see ksplit_resident), and every M = 256. Session 39's faster adds
#: (docs/bench/ksplit_reduce_h200.json) took 7-10% off the split launches.
#:
#: KSPLIT_FILL: clusters of 4 and 8 leave 8-12 SMs out of every wave (ksplit_resident), so 0.75; clusters of 2 fill
#: every SM (the H200 holds 132 / 66 pairs), so all of them: 4096 x 14336 (gate / up) at M = 32 and 64, 224 of 264
#: CTAs, ran 21.4 / 25.2 against stream-K's 22.1 / 26.8 (session 40, docs/bench/ksplit_fill_h200.json).
#: KSPLIT_MIN_FILL (clusters of 2, the size measured): a CTA's K tiles in such a launch are at most 1 / 0.7 = 1.4x its
#: share under the stream-K schedule, and there is no stream-K fixup (the same record: 4096 x 6144 at M = 128, 96 of
#: 132 CTAs, 32 K tiles each: 22.6 against 24.2; 4096 x 14336 above). At half the CTAs it loses: 4096 x 4096 at M =
#: 128, 64 of 132 with 32 K tiles each, 21.8 against 18.3; 14336 x 4096 at M = 32, 128 of 264 with 56 (clusters of
#: 4), 32.9 against 23.0. Below KSPLIT_MAX_K_TILES a CTA's K tiles are few enough that the fixup saved outweighs them
#: (4096 x 4096 at M = 32, 128 of 264 CTAs with 16 each: 12.6 against stream-K's 13.7, above).
KSPLIT_MIN_M = 17
KSPLIT_MAX_M = 128
KSPLIT_FILL: dict[int, float] = {2: 1.0, 4: 0.75, 8: 0.75}
KSPLIT_MAX_K_TILES = 16
KSPLIT_MIN_FILL = 0.7
#: The largest split-K cluster that gives way to the stream-K schedule where that schedule's CTAs add as many pieces a
#: tile or more themselves (shares_for). On the H200 (docs/bench/shared_fixup_h200.json, CUDA graphs, µs a call):
#: clusters of 4 against 4 shared pieces, 4096 x 4096 at M = 32: 11.7 against 10.4, at 64 (8 shared pieces there, 4
#: timed the same): 14.7 against 11.4 (4096 x 6144 at 32: 12.3 against 12.4); clusters of 8 against 8 shared pieces
#: a tie, so they stay: 4096 x 1024 at M = 64: 7.0 against 7.5, at 128: 9.2 against 8.9.
KSPLIT_OVER_SHARES = 4


def check_cluster_splits(cluster_splits: int | None) -> None:
    """A one-line ValueError unless ``cluster_splits`` is None or one of CLUSTER_SPLITS (run_gemm asks before a
    gathered x' buffer grows, bind90 for its direct callers)."""
    if cluster_splits is not None and cluster_splits not in CLUSTER_SPLITS:
        raise ValueError(f"cluster_splits: expected one of {CLUSTER_SPLITS}, got {cluster_splits!r}")


def ksplit_for(cfg: Gemm90Config, M: int, N: int, k_tiles: int, sms: int, spec: Spec | None = None) -> int | None:
    """The split-K cluster size bind90 runs ``cfg``'s tiles in by itself, or None (the stream-K schedule): see
    KSPLIT_MIN_M. Measured on 4-bit integer weights (AWQ int4), so only for those (``spec`` None: the shape alone)."""
    if cfg.cluster > 1 or not KSPLIT_MIN_M <= M <= KSPLIT_MAX_M or (spec is not None and not measured_codes(spec)):
        return None
    tiles, resident = cfg.tiles(M, N), sms * cfg.min_blocks
    fits = [ks for ks in CLUSTER_SPLITS if tiles * ks <= KSPLIT_FILL[ks] * resident and ks <= k_tiles]
    ks = max((k for k in fits if cfg.accumulators % k == 0), default=None)
    if ks is None:
        return None
    if ks <= KSPLIT_OVER_SHARES and stream_k_shares(cfg, tiles, k_tiles, resident) >= ks:
        return None
    pairs_fill = ks == 2 and tiles * ks >= KSPLIT_MIN_FILL * resident
    return ks if k_tiles <= ks * KSPLIT_MAX_K_TILES or pairs_fill else None


def ksplit_resident(cluster_splits: int, tiles: int, resident_clusters: int, asked: bool, tag: str) -> bool:
    """Whether a split-K cluster launch of ``tiles`` clusters runs, given how many of its clusters can be resident at
    once (cuOccupancyMaxActiveClusters): an explicit request (``asked``) wherever one can (else a one-line ValueError),
    the rule's choice (ksplit_for) only where every cluster is resident at once. A cluster's CTAs share a GPC, so
    fewer clusters fit than the resident CTAs suggest: on the H200 (132 SMs), 62 clusters of 4 of the 2-an-SM tiles
    (248 CTAs) and 30 of the 1-an-SM ones (120), 30 / 15 of 8; the launches of 256 and 128 CTAs ran in two waves
    (4096 x 4096 at M = 128 in clusters of 4: 27.3 against the stream-K schedule's 18.4 µs; docs/bench/
    ksplit_reduce_h200.json). KSPLIT_FILL keeps the rule below that on the H200; this holds it on a GPU of fewer or
    smaller GPCs too (hopper_pays asks the same, so it judges the stream-K schedule that runs instead)."""
    if resident_clusters < 1 and asked:
        raise ValueError(f"cluster_splits: no cluster of {cluster_splits} {tag} CTAs can be resident here")
    return resident_clusters >= (1 if asked else tiles)


#: The environment switch of the shared fixup: "0" has the last arriver add every piece (no CTA waits for another:
#: for a GPU partition of a few SMs running several GEMMs at once, where the waits' forward-progress argument in
#: templates/gemm90.cu.j2 finish_shared needs more free SM slots than such a partition has).
SHARED_FIXUP_ENV = "DQGEN_SHARED_FIXUP"
#: Whether bind90 lets the CTAs of a tile's pieces add them together (``shares_for``), where the plan allows. False:
#: the last arriver alone adds every piece (the schedule before session 42; devtools/gemm90_loop_rate.py
#: --serial-fixup times the two against each other).
SHARED_FIXUP = os.environ.get(SHARED_FIXUP_ENV, "1") != "0"


def most_shares90(cfg: Gemm90Config) -> int:
    """The most pieces a tile of ``cfg`` can be added in by their CTAs (shares_for: whole chunk pairs a share, so a
    count of CLUSTER_SPLITS, powers of two, whose 8 S divides the accumulators; every smaller one does too), 1 where
    none."""
    return max((s for s in CLUSTER_SPLITS if cfg.accumulators % (8 * s) == 0), default=1)


def shares_for(plan: Plan90, cfg: Gemm90Config, resident: int) -> int:
    """The kernel's ``shares`` for ``plan``: S > 1 where each of S CTAs that hold a tile's pieces adds its share of
    them once all are stored (the template's finish_shared), 1 where the last to arrive adds them all. S needs no
    whole tile and one piece of one tile a CTA (ctas = tiles x S, every CTA splitting: CTA c holds piece c % S of
    tile c / S), S in CLUSTER_SPLITS (the template's unrolled counts) and at most the K tiles (no empty piece), a
    thread's n8 chunks in S shares of whole chunk pairs (the staged epilogue's unit: accumulators % 8 S), and every
    CTA of the launch resident at once (``resident``: the GPU's resident CTAs of this shape), since each waits for
    the others' pieces."""
    if not SHARED_FIXUP or cfg.cluster > 1 or plan.whole or plan.split_ctas != plan.ctas or plan.ctas % plan.tiles:
        return 1
    S = plan.ctas // plan.tiles
    if S not in CLUSTER_SPLITS or plan.k_tiles < S or most_shares90(cfg) < S or plan.ctas > resident:
        return 1
    return S


def stream_k_shares(cfg: Gemm90Config, tiles: int, k_tiles: int, resident: int) -> int:
    """shares_for of the stream-K schedule bind90 builds by itself for ``tiles`` tiles of ``cfg`` (its piece count
    rounded to one the tile's CTAs share): what ksplit_for and pays90 weigh the split-K clusters and the sm_80 GEMM
    against."""
    plan = Plan90.of(tiles, stream_k_ctas(tiles, k_tiles, resident, None, most_shares90(cfg)), k_tiles)
    return shares_for(plan, cfg, resident)


#: The most tokens a Hopper GEMM launch runs as a programmatic dependent (dqgen.run.device.programmatic_launches):
#: on the H200, the 7 Llama-3-8B linears x 4 layers in one CUDA graph (docs/bench/e2e_pdl_h200.json: machine B, the
#: committed kernels launched programmatically against the kernels before) ran 2.1-3.4% faster at M = 32 and 128
#: (1.0% at 64) and 2.7% slower at M = 256, where every dqgen kernel of the graph is this GEMM; the early launch
#: itself costs there (two more runs with a weight prefetch: 1.4% and 1.8%), not understood.
PDL_MAX_M = 128


def bind90(
    spec: Spec,
    w: Any,
    x_ptr: int,
    x_stride: int,
    M: int,
    bias: Any,
    out: Any,
    cfg: Gemm90Config | None,
    want_splits: int | None,
    plan: Plan90 | None = None,
    x_cols: int | None = None,
    cluster_splits: int | None = None,
) -> Any:
    """The bound launch of the Hopper GEMM for this call (``want_splits``: split-K in that many pieces a tile,
    else stream-K over the resident CTAs; ``plan``: that schedule instead, for the tuning scripts; ``x_cols``: the
    columns of x its tensor map spans, w.K by default, w.slots for a gathered x'; ``cluster_splits``: split-K in
    clusters of that many CTAs (CLUSTER_SPLITS), one tile a cluster, the pieces added through distributed shared
    memory). A 2-CTA cluster entry (``cfg.cluster`` 2, or cfg None where use_cluster90 says) runs whole pair tiles:
    ``plan`` counts pair tiles and clusters, and split-K is refused."""
    chosen, asked_ks = cfg is None, cluster_splits is not None  # what the caller chose, not the rules
    check_cluster_splits(cluster_splits)
    if cluster_splits is not None:
        if want_splits is not None or plan is not None:
            raise ValueError("cluster_splits: a split-K cluster launch takes no want_splits or plan (a tile a cluster)")
        if cluster_splits > w.k_tiles:
            raise ValueError(f"cluster_splits: {cluster_splits} pieces of {w.k_tiles} K tiles leave a CTA none")
    if cfg is None:
        cfg = config90_for(M, w.N, w.k_tiles, dev.sm_count(w.device), spec)
        if want_splits is None and plan is None and cluster_splits is None:
            if use_cluster90(M, w.N, spec):
                cfg = cluster_config90(cfg) or cfg
            else:
                cluster_splits = ksplit_for(cfg, M, w.N, w.k_tiles, dev.sm_count(w.device), spec)
    if cluster_splits is not None and cfg.cluster > 1:
        raise ValueError(f"cluster_splits: the 2-CTA cluster entry {cfg.tag} runs whole pair tiles")
    if cluster_splits is not None and cfg.accumulators % cluster_splits:
        raise ValueError(
            f"cluster_splits: {cluster_splits} CTAs cannot share {cfg.tag}'s {cfg.accumulators} accumulators a thread"
        )
    kc = Gemm90KernelConfig.one(spec, cfg)
    fn = load(kc, w.device)
    smem = cfg.launch_shared_bytes(spec)
    m_tiles = -(-M // cfg.bn)
    tiles = cfg.tiles(M, w.N)  # a cluster's: feature pairs
    if cfg.cluster > 1 and plan is None:
        clusters = fn.max_active_clusters(cfg.cluster * tiles, cfg.threads, cfg.cluster, smem)
        if clusters < 1:  # no cluster can be resident here (an SM partition, MPS limits)
            if not chosen:
                raise ValueError(f"config: no 2-CTA cluster of {cfg.tag} can be resident on this GPU")
            return bind90(spec, w, x_ptr, x_stride, M, bias, out, replace(cfg, cluster=1), want_splits, None, x_cols)
    if cfg.cluster > 1:
        if want_splits is not None:
            raise ValueError(f"want_splits: a 2-CTA cluster entry ({cfg.tag}) runs whole tiles, got {want_splits}")
        if plan is None:
            plan = cluster_plan(cfg, M, w.N, w.k_tiles, clusters)
        if plan.split:
            raise ValueError(f"plan: a 2-CTA cluster entry ({cfg.tag}) runs whole pair tiles, got {plan}")
    elif cluster_splits is not None:
        resident_clusters = ksplit_clusters_resident(spec, w.device, cfg, cluster_splits, tiles)
        if not ksplit_resident(cluster_splits, tiles, resident_clusters, asked_ks, cfg.tag):
            return bind90(spec, w, x_ptr, x_stride, M, bias, out, cfg, None, None, x_cols)  # the stream-K schedule
        plan = Plan90.of(tiles, tiles, w.k_tiles)  # every tile whole: one a cluster (the kernel's reduce_cluster
        # writes the pieces into the drained stage memory: a second tile's copies would land on them)
        assert plan.ctas == plan.whole == plan.tiles, plan
    resident = dev.sm_count(w.device) * max(1, fn.max_active_blocks(cfg.threads, smem))
    if cfg.cluster == 1 and cluster_splits is None and plan is None:
        # the piece count rounded to one the CTAs add together: measured on 4-bit integer weights (AWQ int4)
        most = most_shares90(cfg) if SHARED_FIXUP and measured_codes(spec) else 1
        ctas = stream_k_ctas(tiles, w.k_tiles, resident, want_splits, most)
        plan = Plan90.of(tiles, ctas, w.k_tiles)
    assert plan is not None
    if plan.tiles != tiles or plan.k_tiles != w.k_tiles:
        raise ValueError(f"plan: expected {tiles} tiles of {w.k_tiles} K tiles, got {plan}")
    plan.check()
    ksplit = cluster_splits or 1  # the kernel's argument and the launch's cluster size
    shares = 1 if ksplit > 1 else shares_for(plan, cfg, resident)
    ws, counters = None, None
    if plan.split:  # stream-K pieces (CTAs on whole tiles store them at once)
        assert w.workspace is not None
        # two partial slots a splitting CTA (its first and its last segment), one counter a tile
        key = (("sm90", cfg.bn, cfg.features), tiles, plan.ctas, plan.whole, plan.split_ctas)
        ws, counters = w.workspace.get(key, 2 * plan.split_ctas * cfg.bn * cfg.features, tiles)
    wmap, smap, zmap = weight_maps(spec, w, cfg.features)
    values = {
        "wmap": wmap,
        "xmap": x_map(x_ptr, M, w.K if x_cols is None else x_cols, x_stride, cfg.x_box_rows),
        "smap": smap,
        "zmap": zmap,
        "tile_group": w.tile_group.data_ptr(),
        "bias": 0 if bias is None else bias.data_ptr(),
        "y": out.data_ptr(),
        "ws": 0 if ws is None else ws.data_ptr(),
        "counters": 0 if counters is None else counters.data_ptr(),
        "M": M,
        "N": w.N,
        "k_tiles": w.k_tiles,
        "m_tiles": m_tiles,
        "units": tiles * w.k_tiles,
        "whole": plan.whole,
        "split_ctas": plan.split_ctas,
        "ksplit": ksplit,
        "shares": shares,
        # NVFP4's fp32 [1] global scale (pack_gemm checked it and keeps it with the weight); no argument elsewhere
        "global_scale": 0 if w.global_scale is None else w.global_scale.data_ptr(),
    }
    args = [values[name] if typ is dev.TensorMapArg else typ(values[name]) for name, typ in params90(spec)]
    # a cluster entry's grid: plan.ctas clusters of cfg.cluster CTAs (its __cluster_dims__: no cluster launch
    # attribute); a split-K cluster launch's: plan.ctas clusters of ksplit CTAs (the launch attribute)
    grid = (plan.ctas * cfg.cluster * ksplit,)
    return fn.bind(grid, (cfg.threads,), args, shared_mem=smem, programmatic=M <= PDL_MAX_M, cluster=ksplit)


def bind_gather(w: Any, x_ptr: int, x_stride: int, M: int, xp_ptr: int) -> dev.BoundLaunch:
    """The gather kernel's launch: x' at ``xp_ptr`` ([M, w.slots], contiguous) = x[:, w.perm], 0 at padding."""
    fn = load(GATHER_X, w.device)
    values = {"x": x_ptr, "perm": w.perm.data_ptr(), "xp": xp_ptr, "M": M, "slots": w.slots, "x_stride": x_stride}
    args = [typ(values[name]) for name, typ in GATHER_PARAMS]
    return fn.bind((GATHER_X.grid(M, w.slots),), (GATHER_X.threads,), args)


class GatheredLaunch(NamedTuple):
    """The Hopper GEMM of a gathered weight as one callable launch: the gather into x' (a device buffer that keeps
    its address, dqgen.run.workspace.gathered_x_buffers), then the GEMM reading it, both on the one stream (a CUDA
    graph captures them together)."""

    gather: dev.BoundLaunch
    gemm: Any

    def __call__(self, stream: int = 0) -> None:
        self.gather(stream)
        self.gemm(stream)


def bind90_gathered(
    spec: Spec,
    w: Any,
    x_ptr: int,
    x_stride: int,
    M: int,
    bias: Any,
    out: Any,
    cfg: Gemm90Config | None,
    want_splits: int | None,
    xp_ptr: int,
    cluster_splits: int | None = None,
) -> GatheredLaunch:
    """The Hopper GEMM of a weight with gathered K slots: the gather of x into x' at ``xp_ptr`` ([M, w.slots]
    16-bit, 16-byte aligned, kept alive by its owner as long as the launch), then the GEMM over x''s w.slots
    columns."""
    if not w.gather:
        raise ValueError(f"w: its K slots are in order ({w.spec_name}): bind90 reads x as it is")
    gemm = bind90(
        spec, w, xp_ptr, w.slots, M, bias, out, cfg, want_splits, x_cols=w.slots, cluster_splits=cluster_splits
    )
    return GatheredLaunch(bind_gather(w, x_ptr, x_stride, M, xp_ptr), gemm)
