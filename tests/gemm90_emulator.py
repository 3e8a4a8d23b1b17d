"""A numpy model of one launch of templates/gemm90.cu.j2 (CPU): every CTA of the grid with its producer (the TMA
copies into the stage ring, gated by the mbarriers) and its consumer warpgroups (ldmatrix, the converter as the
solved Plan of converter_spec(spec), the register-sourced wgmma, the stream-K segments, the workspace partials and
the last arriver's K-order sum, the split-K clusters' pieces added through the peers' shared memory between two
cluster barriers, the epilogue). The kernel's index math is restated here expression by expression
(named after the template's variables); the hardware is modelled by the PTX ISA (8.x, cited by section title):

- ``cp.async.bulk.tensor.2d`` (Data Movement: cp.async.bulk.tensor; tensor maps of cuTensorMapEncodeTiled as
  dqgen.run.gemm90 encodes them): a box of {inner, rows} elements at coordinates {c0, c1} (innermost first) lands
  row after row; elements outside the tensor land as zeros and count as bytes; with CU_TENSOR_MAP_SWIZZLE_128B the
  box rows are 128 bytes and 16-byte chunk c of box row r lands at chunk c ^ (r % 8) of that row (the pattern of
  the shared address bits [4:6] ^= [7:9], so the destination is 1024-byte aligned). Completes its bytes on the
  mbarrier (``complete_tx``).
- ``mbarrier`` (Parallel Synchronization: mbarrier): a phase completes when its pending arrivals and its
  transaction count both reach zero; ``try_wait.parity p`` succeeds once the phase of parity p has completed, i.e.
  while the current (incomplete) phase's parity is not p.
- ``ldmatrix .x4`` (Warp-level matrix load instruction: ldmatrix): lanes 8i..8i+7 give the rows of matrix i;
  register i of lane 4g + t is the 32-bit word t of row g of matrix i.
- ``wgmma.mma_async.m64nNk16`` with A in registers (Asynchronous Warpgroup Level Matrix Multiply-Accumulate; the
  register fragment of A and the accumulator D, the shared-memory matrix descriptor with 128-byte swizzling):
  warp w of the warpgroup holds rows 16w..16w+15 of A, register r of lane (g, t) holds A[16w + g + 8 (r & 1)]
  [2t + 8 (r >> 1) + 0/1]; B (k16 x N, K-major) at byte (n // 8) SBO + (n % 8) 128 + 2k from the descriptor's
  start address, the 128-byte swizzle applied to the address bits; D of lane (g, t), n8 chunk j: d[4j + 0..3] =
  D[16w+g][8j+2t], D[16w+g][8j+2t+1], D[16w+g+8][8j+2t], D[16w+g+8][8j+2t+1]; scale-d 0 means D = A B. The wgmmas
  of a committed group run asynchronously: the model executes a group (reading shared memory and the A registers
  then) at the ``wgmma.wait_group`` that retires it, and the producer copies as far ahead as the barriers allow,
  so a stage or register set reused too early gives a wrong y.

A weight whose K slots are gathered (act-order, groups of no whole 64-k tiles) runs as the host launches it
(dqgen.run.gemm90.bind90_gathered): the gather kernel (templates/gather_x.cu.j2, modelled by ``gather_x`` thread by
thread) writes x' [M, slots] = x[:, perm] (0 at padding), and the GEMM reads x' through an [M, slots] tensor map.

Products and sums are float64 (as in tests/gemm_emulator.py): if the index math is right, y equals x @ W to
float64 rounding. The CTAs run one after another in a given order (any order is a legal schedule of the
counters); every workspace slot read must have been written exactly once, and every y element stored once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from dqgen.core.spec import Spec
from dqgen.emit.pipeline import compile_artifact
from dqgen.kernels.gather_x import GATHER_X, GatherXConfig
from dqgen.kernels.gemm90 import Gemm90Config, Gemm90KernelConfig
from dqgen.layout.gemm import TILE_K, TILE_N, GemmPacked
from dqgen.layout.gemm_trt import columns_interleaved, converter_spec
from dqgen.run.gemm90 import Plan90

LINE = 128
#: The cluster producers' tail (the template's waits for every stage's last release before the producer returns);
#: tests turn it off to show the model refuses a CTA that exits while its peer can still reach its shared memory.
PRODUCER_TAIL = True
#: The cluster consumers' release of a stage on the peer's empty barrier too (counted there: CLUSTER x CONSUMERS x 4
#: arrivals); tests turn it off (the one-CTA kernel's count and arrival) to show the model catches the race.
PEER_RELEASE = True
#: The split-K cluster's second barrier (the template's reduce_cluster: no CTA exits before every peer has read its
#: piece); tests turn it off to show the model refuses a read of a CTA that has exited.
KSPLIT_EXIT_BARRIER = True
#: Where a CTA arrives at that barrier: after its reads of the peers' pieces, before its y stores (the template);
#: tests move it before the reads to show the model refuses a read of a CTA that has exited.
KSPLIT_ARRIVE_BEFORE_READS = False
#: Where the dynamic shared memory starts (not 1024-aligned: the kernel aligns its stages itself; the static
#: ``__shared__ bool last`` sits before it).
RAW0 = 16


def swz(r: int | np.ndarray, c: int | np.ndarray) -> int | np.ndarray:
    """The template's swz(r, c) (blocks/memory swizzle("128"))."""
    return r * LINE + ((c ^ (r & 7)) << 4)


def owner(u: int, units: int, P: int) -> int:
    """The template's owner(): the CTA whose range [c units / P, (c + 1) units / P) holds unit u."""
    return ((u + 1) * P - 1) // units


# -- the hardware ------------------------------------------------------------------------------------------------


class Barrier:
    """One mbarrier: ``count`` arrivals and the announced transaction bytes complete a phase. The transaction count
    may go below zero before the phase's expect_tx arrival (a peer's multicast completing its bytes first: the PTX
    ISA's tx-count range is signed); ``events`` counts every operation (the cluster scheduler's progress)."""

    events = 0

    def __init__(self, count: int) -> None:
        self.count, self.pending, self.tx, self.phases = count, count, 0, 0

    def _check(self) -> None:
        Barrier.events += 1
        assert self.pending >= 0, "more arrivals on an mbarrier than its count"
        assert self.tx >= 0 or self.pending > 0, "a copy completed more bytes on an mbarrier than were announced"
        if self.pending == 0 and self.tx == 0:
            self.phases += 1
            self.pending = self.count

    def arrive(self, n: int = 1) -> None:
        self.pending -= n
        self._check()

    @staticmethod
    def step() -> None:
        """An operation on no barrier (a load from a peer's shared memory): progress all the same."""
        Barrier.events += 1

    def expect_tx(self, nbytes: int) -> None:  # mbarrier.arrive.expect_tx: the bytes first, then the arrival
        self.tx += nbytes
        self.pending -= 1
        self._check()

    def complete_tx(self, nbytes: int, phase: int | None = None) -> None:
        """``phase``: the phase the copy was issued for (asserted current: bytes of a later phase landing in this
        one would complete it with its own data missing)."""
        assert phase is None or phase == self.phases, f"a copy for phase {phase} completed on phase {self.phases}"
        self.tx -= nbytes
        self._check()

    def ready(self, parity: int) -> bool:
        return (self.phases & 1) != parity


def tma_load_2d(
    smem: np.ndarray, dst: int, tensor: np.ndarray, box: tuple[int, int], coords: tuple[int, int], swizzle: bool
) -> int:
    """cp.async.bulk.tensor.2d of a {box[0] inner, box[1] rows} box of ``tensor`` [rows, inner] at coords {c0
    (inner), c1 (row)}: returns the bytes it completes (the whole box, out-of-bounds zeros included)."""
    inner, rows = box
    c0, c1 = coords
    data = np.zeros((rows, inner), dtype=tensor.dtype)
    r_lo, r_hi = max(c1, 0), min(c1 + rows, tensor.shape[0])
    i_lo, i_hi = max(c0, 0), min(c0 + inner, tensor.shape[1])
    if r_lo < r_hi and i_lo < i_hi:
        data[r_lo - c1 : r_hi - c1, i_lo - c0 : i_hi - c0] = tensor[r_lo:r_hi, i_lo:i_hi]
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(rows, -1)
    row_bytes = raw.shape[1]
    assert dst % 128 == 0, f"TMA destination {dst} not 128-byte aligned"
    if swizzle:
        assert row_bytes == 128, "the 128-byte swizzle takes box rows of 128 bytes"
        assert dst % 1024 == 0, f"a 128-byte-swizzled TMA destination ({dst}) not 1024-byte aligned"
        chunks = raw.reshape(rows, 8, 16)
        r = np.arange(rows)[:, None]
        c = np.arange(8)[None, :]
        out = np.empty_like(chunks)
        out[r, c ^ (r % 8)] = chunks
        raw = out.reshape(rows, 128)
    assert dst + raw.size <= smem.size, "a TMA box past the shared memory"
    smem[dst : dst + raw.size] = raw.reshape(-1)
    return raw.size


def ldsm_x4(smem: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """[..., 32 lanes] byte addresses -> [..., 32 lanes, 4] uint32 registers (ldmatrix .x4, non-transposed)."""
    addr = np.asarray(addr)
    assert (addr % 16 == 0).all(), "ldmatrix row address not 16-byte aligned"
    words = smem.view("<u4")
    lane = np.arange(32)
    g, t = lane >> 2, lane & 3
    i = np.arange(4)
    rows = addr[..., 8 * i[None, :] + g[:, None]]  # [..., 32, 4]: the row address lane (g, t) reads for matrix i
    return words[rows // 4 + t[:, None]]


def to_f64(h: np.ndarray, bf16: bool) -> np.ndarray:
    h = np.asarray(h, dtype=np.uint32)
    if bf16:
        return (h << np.uint32(16)).view(np.float32).astype(np.float64)
    return h.astype(np.uint16).view(np.float16).astype(np.float64)


_L = np.arange(32)
_G, _T = _L >> 2, _L & 3
#: A from registers [4 warps, 32 lanes, 4 regs, 2 halves] -> (row, column) of the m64 x k16 A.
_A_ROW = 16 * np.arange(4)[:, None, None, None] + _G[None, :, None, None] + 8 * (np.arange(4)[None, None, :, None] & 1)
_A_COL = 2 * _T[None, :, None, None] + 8 * (np.arange(4)[None, None, :, None] >> 1) + np.arange(2)[None, None, None, :]


def wgmma_rs(d: np.ndarray, a: np.ndarray, desc: int, accumulate: bool, smem: np.ndarray, n: int, bf16: bool) -> None:
    """wgmma.mma_async.sync.aligned.m64n{n}k16.f32 with A = a [4 warps, 32 lanes, 4] registers, B through the
    descriptor; d [4 warps, 32 lanes, n / 8, 4] (the thread's d[4j + r])."""
    start = (desc & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    assert (desc >> 62) & 3 == 1, "descriptor: expected the 128-byte swizzle mode"
    assert (desc >> 49) & 7 == 0, "descriptor: base offset 0 expects the swizzle atom's 1024-byte alignment"
    assert start % 1024 < 128 and start % 128 + 32 <= 128, "a k16 step's B rows must lie in one 128-byte row"
    k = np.arange(16)[:, None]
    nn = np.arange(n)[None, :]
    addr = start + (nn // 8) * sbo + (nn % 8) * 128 + 2 * k
    addr = addr ^ (((addr >> 7) & 7) << 4)  # the 128-byte swizzle on the address bits
    assert addr.max() + 2 <= smem.size
    B = to_f64(smem.view("<u2")[addr // 2], bf16)  # [16, n]
    A = np.zeros((64, 16))
    lo = a & np.uint32(0xFFFF)
    hi = a >> np.uint32(16)
    A[_A_ROW, _A_COL] = to_f64(np.stack([lo, hi], axis=-1), bf16)
    D = A @ B
    j = np.arange(n // 8)[None, None, :, None]
    r = np.arange(4)[None, None, None, :]
    w = np.arange(4)[:, None, None, None]
    row = 16 * w + _G[None, :, None, None] + 8 * (r >> 1)
    col = 8 * j + 2 * _T[None, :, None, None] + (r & 1)
    d[...] = D[row, col] + (d if accumulate else 0.0)


def wgmma_desc_sw128(addr: int) -> int:
    """The template's wgmma_desc_sw128 (blocks/mma): start address, SBO 1024, 128-byte swizzle."""
    return ((addr & 0x3FFFF) >> 4) | (1 << 16) | ((1024 >> 4) << 32) | (1 << 62)


def gather_x(x16: np.ndarray, perm: np.ndarray, M: int, x_stride: int, cfg: GatherXConfig = GATHER_X) -> np.ndarray:
    """One launch of templates/gather_x.cu.j2 on x16 (uint16, M rows ``x_stride`` elements apart, flat): xp
    [M, slots] as its threads write it, each vector's 16-byte store once; a slot no thread wrote stays poisoned."""
    flat = np.ascontiguousarray(x16).reshape(-1)
    slots = int(perm.size)
    vec = int(cfg.context()["vec"])
    vecs = slots // vec
    total = M * vecs
    grid, threads = cfg.grid(M, slots), cfg.threads
    xp = np.full(M * slots, 0xFFFF, dtype=np.uint16)  # a NaN pattern: a slot never written shows
    writes = np.zeros(M * vecs, dtype=np.int64)
    perm_vecs = np.asarray(perm, dtype=np.int32).reshape(-1, 4)  # the int4 loads of perm
    i = np.arange(grid * threads, dtype=np.int64)  # blockIdx.x * blockDim.x + threadIdx.x
    while i.size:
        i = i[i < total]
        m, v = i // vecs, i % vecs
        p = np.concatenate([perm_vecs[2 * v], perm_vecs[2 * v + 1]], axis=1)  # {p0.x .. p0.w, p1.x .. p1.w}
        src = m[:, None] * x_stride + np.maximum(p, 0)
        e = np.where(p >= 0, flat[np.minimum(src, flat.size - 1)], 0).astype(np.uint16)
        assert np.all(src[p >= 0] < flat.size), "the gather read past x"
        xp.reshape(-1, vec)[m * vecs + v] = e
        np.add.at(writes, m * vecs + v, 1)
        i = i + grid * threads
    assert np.all(writes == 1), "a vector of x' written twice or never"
    return xp.reshape(M, slots)


# -- the launch --------------------------------------------------------------------------------------------------


def emulate90(
    spec: Spec,
    packed: GemmPacked,
    x: np.ndarray,
    cfg: Gemm90Config,
    ctas: int,
    *,
    bias: np.ndarray | None = None,
    order: Sequence[int] | None = None,
    whole: int | None = None,
    split_ctas: int | None = None,
    global_scale: np.ndarray | None = None,
    ksplit: int = 1,
    y_misaligned: bool = False,
    shares: int = 1,
) -> np.ndarray:
    """y [M, N] (float64, before the output rounding) of one launch on ``ctas`` CTAs, run in ``order``; ``whole``
    and ``split_ctas`` as in dqgen.run.gemm90.Plan90 (by default its defaults). A 2-CTA cluster config
    (``cfg.cluster`` 2): ``ctas`` and ``order`` count clusters, the schedule's tiles are pair tiles
    (dqgen.run.gemm90.cluster_plan), and the CTAs of a cluster run together, each producer copying its half of the
    x tile into both CTAs (multicast), each consumer warp releasing a stage on both CTAs' empty barriers.
    ``global_scale``: the fp32 [1] launch argument of a spec with one (NVFP4), whose bits every consumer thread
    reads. ``ksplit`` > 1: split-K clusters (dqgen.run.gemm90.bind90's ``cluster_splits``): ``ctas`` and ``order``
    count clusters of ``ksplit`` CTAs, one whole tile each; CTA r runs K tiles [r K / ksplit, (r + 1) K / ksplit),
    stores its sums over its (drained) stage memory, and after a cluster barrier adds its share of every CTA's sums
    in rank order and stores it; a second barrier keeps every CTA until the others have read its piece.
    ``y_misaligned``: y's address is not 16-byte aligned (an ``out`` view 2 bytes into its buffer), so the epilogue
    stores 2 bytes at a time instead of staging 16-byte runs through shared memory. ``shares`` > 1: the shared fixup
    (dqgen.run.gemm90.shares_for; the template's finish_shared): each CTA stores its piece 16 bytes a chunk and
    arrives; once every CTA has run (every piece stored: what the kernel's wait on the tile's counter ensures), each
    adds its share of the tile's pieces in K order and stores it, after a second round of arrivals whose last resets
    the counter."""
    conv = converter_spec(spec)
    plan = compile_artifact(conv).plan
    ctx = Gemm90KernelConfig.one(spec, cfg).context()
    bf16 = spec.target.value == "bf16"
    # the template's constants (its render context)
    kCols, kBlk, kPerWord = int(ctx["cols"]), int(ctx["blocks"]), int(ctx["per_word"])
    assert kCols == columns_interleaved(conv.source.bits)
    kZElem = int(ctx["zero_bytes"])
    kGroupRows, kGroupK, kSElem = int(ctx["group_rows"]), int(ctx["group_k"]), int(ctx["scale_elem"])
    block_scales = bool(ctx["block_scales"])
    block_split = bool(ctx["block_split"])  # groups of 16 under a 32-k word: one decoded scale a k16 step
    assert bool(ctx["global_scale"]) == (global_scale is not None), "a global scale exactly where the spec has one"
    # the template's gsc: the global scale's fp32 bits, read once a thread
    gsc = None if global_scale is None else np.asarray(global_scale, dtype=np.float32).reshape(1).view(np.uint32)[0]
    assert kGroupRows * kGroupK == 64
    has_zeros, float_zeros = bool(ctx["has_zeros"]), bool(ctx["float_zeros"])
    pair_rep, zero_rep = int(str(ctx["broadcast_pair"]), 16), int(str(ctx["zero_rep"]), 16)
    BN, CONSUMERS, STAGES = cfg.bn, cfg.consumers, cfg.stages
    kTileK, kTileN = 64, cfg.features  # the template's FN
    assert kTileK == TILE_K and kTileN in (64, TILE_N)
    kSteps = kPerWord // 4
    kK16 = kTileK // 16
    kBLines = kTileN // kCols
    kWBytes = kBLines * 128
    kSBytes = kTileN * kSElem * kGroupRows
    kZBytes = kZElem * kTileN
    kStage = (kWBytes + BN * 128 + kSBytes + kZBytes + 1023) // 1024 * 1024
    kEpilogueWarpBytes = 512  # a consumer warp's epilogue staging: 16 tokens x 16 features of 2 bytes
    smem_size = 1024 + STAGES * kStage + STAGES * 16 + CONSUMERS * 4 * kEpilogueWarpBytes
    assert smem_size == cfg.launch_shared_bytes(spec), "host and kernel shared bytes differ"
    kWgRows = kTileN // CONSUMERS
    MW = kWgRows // 64
    NI = BN // 8
    kAcc = MW * NI * 4
    kConsumerThreads = CONSUMERS * 128
    kStageTx = kWBytes + BN * 128 + kSBytes + kZBytes
    pairs = len(plan.outputs)

    # the host side (dqgen.run.gemm90.bind90): tensors as the tensor maps see them, the launch's arguments
    M = x.shape[0]
    N = packed.N
    wq, scales, zeros = packed.wq, packed.scales, packed.zeros
    line_bytes = wq.shape[1]
    tile_group = np.asarray(packed.slots.tile_group)
    k_tiles = packed.slots.slots // TILE_K
    assert line_bytes == packed.slots.slots * 2
    x16 = np.ascontiguousarray(x).view(np.uint16)
    if packed.slots.gather:  # bind90_gathered: the gather kernel first, the GEMM's tensor map over x' [M, slots]
        x16 = gather_x(x16, packed.slots.perm, M, x16.shape[1])
        assert x16.shape == (M, packed.slots.slots)
    CLUSTER = cfg.cluster
    m_tiles = -(-M // BN)
    tiles = m_tiles * -(-N // (kTileN * CLUSTER))  # pair tiles in a cluster
    units = tiles * k_tiles
    P = ctas  # clusters in a cluster launch (the grid: P CLUSTER CTAs)
    assert 1 <= P <= units
    sched = Plan90.of(tiles, P, k_tiles, whole, split_ctas)
    sched.check()  # what bind90 launches
    assert CLUSTER == 1 or not sched.split, "bind90 refuses a cluster launch with split tiles"
    # the x tensor map's box (bind90: Gemm90Config.x_box_rows) and where a rank's rows land in the stage's x tile
    x_rows = cfg.x_box_rows
    assert x_rows * CLUSTER == BN
    W, Q = sched.whole, sched.split_ctas
    if ksplit > 1:  # what bind90 builds for split-K clusters
        assert CLUSTER == 1 and P == W == tiles and ksplit <= k_tiles and kAcc % ksplit == 0, "not a bind90 plan"
    R = CLUSTER if CLUSTER > 1 else ksplit  # the CTAs a cluster
    kbeg = [r * k_tiles // ksplit if ksplit > 1 else 0 for r in range(R)]
    kend = [(r + 1) * k_tiles // ksplit if ksplit > 1 else k_tiles for r in range(R)]
    sk_units = units - W * k_tiles
    if shares > 1:  # what shares_for allows: one piece of one tile a CTA, whole chunk pairs a share
        assert CLUSTER == 1 and ksplit == 1 and W == 0 and Q == P == tiles * shares, "not a shares_for plan"
        assert shares <= k_tiles and kAcc % (8 * shares) == 0, "not a shares_for plan"
    shared_adds: list[Callable[[], None]] = []  # each CTA's share, run once every piece is stored
    ws = np.full(2 * Q * BN * kTileN, np.nan)
    ws_writes = np.zeros(ws.size, dtype=np.int64)
    counters = np.zeros(tiles, dtype=np.int64)
    y = np.full((M, N), np.nan)
    y_writes = np.zeros((M, N), dtype=np.int64)

    # the consumer threads, vectorised: [CONSUMERS warpgroups, 4 warps, 32 lanes]
    wg = np.arange(CONSUMERS)[:, None, None]
    warp = np.arange(4)[None, :, None]
    lane = np.arange(32)[None, None, :]
    ctid = wg * 128 + warp * 32 + lane
    g, t = lane >> 2, lane & 3
    row0 = wg * kWgRows + 16 * warp

    # ld_off[mw][q]: [C, 4, 32]
    ld_off = np.zeros((MW, kBlk // 2, CONSUMERS, 4, 32), dtype=np.int64)
    for mw in range(MW):
        for q in range(kBlk // 2):
            i = lane >> 3
            f = row0 + 64 * mw + 8 * (i & 1) + (lane & 7)
            ld_off[mw, q] = np.broadcast_to(swz(f // kCols, (f % kCols) * kBlk + 2 * q + (i >> 1)), (CONSUMERS, 4, 32))

    def run_cluster(cta: int) -> None:
        """Cluster ``cta`` (one CTA where CLUSTER is 1): its CTAs' producers and consumers as coroutines, stepped
        until each finishes (a full round without progress is a deadlock)."""
        # the shared window of each CTA from address 0: the dynamic allocation is [RAW0, RAW0 + smem_size)
        smems = [np.full(RAW0 + smem_size, 0xA5, dtype=np.uint8) for _ in range(R)]  # garbage where no copy lands
        base = (RAW0 + 1023) & ~1023
        bars = base + STAGES * kStage
        assert bars + 16 * STAGES <= RAW0 + smem_size, "the stages and barriers overrun the dynamic shared memory"
        # each consumer warp's epilogue staging, after the barriers
        stage_area = bars + 16 * STAGES + (ctid // 32) * kEpilogueWarpBytes  # [C, 4, 32]
        assert stage_area.max() + kEpilogueWarpBytes <= RAW0 + smem_size, "the staging overruns the shared memory"
        barriers = [
            {
                **{bars + 8 * s: Barrier(1) for s in range(STAGES)},
                **{
                    bars + 8 * (STAGES + s): Barrier((CLUSTER if PEER_RELEASE else 1) * CONSUMERS * 4)
                    for s in range(STAGES)
                },
            }
            for _ in range(R)
        ]
        exited = [False] * R  # every thread of the CTA has returned: its shared memory is gone
        cluster_bar = Barrier(R)  # split-K clusters: barrier.cluster, one arrival a CTA (all its threads take it)
        pieces: list[np.ndarray | None] = [None] * R  # a split-K CTA's sums, [e, ctid] (float64: the model's sums)
        issued = [0] * R  # copies a producer has issued
        # the template's schedule (blocks/splitk.cuh.j2 cta_work): whole tiles cta, cta + P, ... below W, then the
        # CTA's range of the stream-K units (CTA c < Q: [c U / Q, (c + 1) U / Q) of the U after tile W's first)
        whole_mine = (W - cta + P - 1) // P if cta < W else 0
        sk_begin = cta * sk_units // Q if cta < Q else 0
        sk_end = (cta + 1) * sk_units // Q if cta < Q else 0
        nts = [whole_mine * (kend[r] - kbeg[r]) + sk_end - sk_begin for r in range(R)]

        def first_segment(rank: int) -> tuple[int, int]:
            return (cta, kbeg[rank]) if whole_mine > 0 else (W + sk_begin // k_tiles, sk_begin % k_tiles)

        def next_segment(tile: int, rank: int) -> tuple[int, int]:
            if tile < W and tile + P < W:
                return tile + P, kbeg[rank]
            if tile < W:
                return W + sk_begin // k_tiles, sk_begin % k_tiles
            return tile + 1, 0

        def origin(tile: int, rank: int) -> tuple[int, int]:
            """(m0, f0) of this CTA's tile: feature tile CLUSTER fp + rank of pair tile (m, fp) (a split-K cluster's
            CTAs all compute the cluster's tile)."""
            return tile % m_tiles * BN, (tile // m_tiles * CLUSTER + (rank if CLUSTER > 1 else 0)) * kTileN

        def wait(barrier: dict[int, Barrier], bar: int, parity: int) -> Iterator[None]:
            while not barrier[bar].ready(parity):
                yield
            Barrier.events += 1

        def producer(rank: int) -> Iterator[None]:
            smem, barrier, nt = smems[rank], barriers[rank], nts[rank]
            tile, kt = first_segment(rank)
            m0, f0 = origin(tile, rank)
            grp = int(tile_group[kt]) if nt > 0 else 0
            for i in range(nt):
                s = i % STAGES
                tile_next, kt_next = (tile, kt + 1) if kt + 1 < kend[rank] else next_segment(tile, rank)
                grp_next = int(tile_group[kt_next]) if i + 1 < nt else 0
                if i >= STAGES:
                    yield from wait(barrier, bars + 8 * (STAGES + s), ((i // STAGES) + 1) & 1)
                st = base + s * kStage
                bar = barrier[bars + 8 * s]
                phase = i // STAGES
                bar.expect_tx(kStageTx)
                # the tensor maps of dqgen.run.gemm90: wq rows of line_bytes (box 128 x lines, swizzled), x [M, K]
                # (box 64 x x_rows, swizzled), scales / zeros [G, Ns] (box kTileN x rows)
                wbox = (128, kTileN // kCols)
                bar.complete_tx(tma_load_2d(smem, st, wq, wbox, (kt * 128, f0 // kCols), True), phase)
                # x: rows [rank x_rows, (rank + 1) x_rows) of the tile into every CTA of a 2-CTA cluster (multicast)
                xr = rank if CLUSTER > 1 else 0
                xdst = st + kWBytes + xr * x_rows * 128
                for peer in range(CLUSTER) if CLUSTER > 1 else (rank,):
                    assert not exited[peer], "a multicast into a CTA that has exited"
                    nbytes = tma_load_2d(smems[peer], xdst, x16, (64, x_rows), (kt * kTileK, m0 + xr * x_rows), True)
                    barriers[peer][bars + 8 * s].complete_tx(nbytes, phase)
                # scales: the tile's kGroupRows rows from its first group (rows past G land as zeros)
                sbox = (kTileN, kGroupRows)
                bar.complete_tx(tma_load_2d(smem, st + kWBytes + BN * 128, scales, sbox, (f0, grp), False), phase)
                if kZBytes > 0:
                    assert zeros is not None
                    zdst = st + kWBytes + BN * 128 + kSBytes
                    bar.complete_tx(tma_load_2d(smem, zdst, zeros, (kTileN, 1), (f0, grp), False), phase)
                issued[rank] += 1
                grp = grp_next
                kt = kt_next
                if tile_next != tile:
                    tile = tile_next
                    m0, f0 = origin(tile, rank)
            if CLUSTER > 1 and PRODUCER_TAIL:  # the producer tail: every stage's last release by both CTAs' warps
                for i in range(max(nt, STAGES), nt + STAGES):
                    yield from wait(barrier, bars + 8 * (STAGES + i % STAGES), ((i // STAGES) + 1) & 1)

        def consumer(rank: int) -> Iterator[None]:
            smem, barrier, nt = smems[rank], barriers[rank], nts[rank]
            acc = np.zeros((CONSUMERS, MW, 4, 32, NI, 4))
            areg = np.zeros((2, CONSUMERS, MW, kK16, 4, 32, 4), dtype=np.uint32)
            pending: list[list[Callable[[], None]]] = []  # committed wgmma groups, not yet retired

            def load_convert(s: int, buf: int) -> None:
                st = base + s * kStage
                sp = st + kWBytes + BN * 128
                u16 = smem.view("<u2")
                if kGroupRows > 1 or block_scales:
                    return load_convert_rows(st, sp, buf)
                for mw in range(MW):
                    sreg, zr, fz = [], [], []
                    for h in range(2):
                        f = row0 + 64 * mw + 8 * h + g
                        sreg.append(u16[(sp + 2 * f) // 2].astype(np.uint32) * np.uint32(pair_rep))
                        if has_zeros:
                            zr.append(smem[sp + kSBytes + f].astype(np.uint32) * np.uint32(zero_rep))
                        elif float_zeros:
                            fz.append(u16[(sp + kSBytes + 2 * f) // 2].astype(np.uint32) * np.uint32(pair_rep))
                    for q in range(kBlk // 2):
                        w = ldsm_x4(smem, st + ld_off[mw, q])  # [C, 4, 32, 4]
                        for bb in range(2):
                            out = []
                            for h in range(2):  # lo: rows g (w[2 bb]), hi: rows g + 8 (w[2 bb + 1])
                                env = {"w": w[..., 2 * bb + h]}
                                for name in plan.scale_regs:
                                    env[name] = sreg[h]
                                if has_zeros:
                                    env["z"] = zr[h]
                                elif float_zeros:
                                    for p in range(pairs):
                                        env[f"f{p}"] = fz[h]
                                regs = plan.run(env)
                                out.append([regs[o] for o in plan.outputs])
                            lo, hi = out
                            for hs in range(kSteps):
                                ks = (2 * q + bb) * kSteps + hs
                                areg[buf, :, mw, ks, :, :, 0] = lo[2 * hs]
                                areg[buf, :, mw, ks, :, :, 1] = hi[2 * hs]
                                areg[buf, :, mw, ks, :, :, 2] = lo[2 * hs + 1]
                                areg[buf, :, mw, ks, :, :, 3] = hi[2 * hs + 1]

            def load_convert_rows(st: int, sp: int, buf: int) -> None:
                """The template's path for groups under the K tile: pair p of block b's word takes scale row
                16 (b kSteps + p / 2) / kGroupK (block scales: the code of the word's row, through the Plan's prep)."""
                u16 = smem.view("<u2")
                code_reg = next((i.name for i in plan.inputs if i.role == "scale_code"), "")
                gs_reg = next((i.name for i in plan.inputs if i.role == "global_scale"), "")
                for mw in range(MW):
                    for q in range(kBlk // 2):
                        w = ldsm_x4(smem, st + ld_off[mw, q])
                        for bb in range(2):
                            b = 2 * q + bb
                            if block_split:
                                split_word(sp, w, mw, bb, b, code_reg, gs_reg, buf)
                                continue
                            out = []
                            for h in range(2):
                                f = row0 + 64 * mw + 8 * h + g
                                env = {"w": w[..., 2 * bb + h]}
                                if block_scales:
                                    env[code_reg] = smem[sp + (16 * b * kSteps // kGroupK) * kTileN + f].astype(
                                        np.uint32
                                    )
                                    if gsc is not None:
                                        env[gs_reg] = np.uint32(gsc)
                                else:
                                    for p, name in enumerate(plan.scale_regs):
                                        r = 16 * (b * kSteps + p // 2) // kGroupK
                                        env[name] = u16[(sp + 2 * (r * kTileN + f)) // 2].astype(np.uint32) * np.uint32(
                                            pair_rep
                                        )
                                regs = plan.run(env)
                                out.append([regs[o] for o in plan.outputs])
                            lo, hi = out
                            for hs in range(kSteps):
                                ks = b * kSteps + hs
                                areg[buf, :, mw, ks, :, :, 0] = lo[2 * hs]
                                areg[buf, :, mw, ks, :, :, 1] = hi[2 * hs]
                                areg[buf, :, mw, ks, :, :, 2] = lo[2 * hs + 1]
                                areg[buf, :, mw, ks, :, :, 3] = hi[2 * hs + 1]

            def split_word(
                sp: int, w: np.ndarray, mw: int, bb: int, b: int, code_reg: str, gs_reg: str, buf: int
            ) -> None:
                """The template's groups of 16 under a word (block_split): k16 step hs of block b's word takes scale
                row 16 (b kSteps + hs) / kGroupK; the whole Plan runs once a decoded scale and step hs keeps its
                pairs."""
                for hs in range(kSteps):
                    out = []
                    for h in range(2):
                        f = row0 + 64 * mw + 8 * h + g
                        row = 16 * (b * kSteps + hs) // kGroupK
                        env = {"w": w[..., 2 * bb + h], code_reg: smem[sp + row * kTileN + f].astype(np.uint32)}
                        if gsc is not None:
                            env[gs_reg] = np.uint32(gsc)
                        regs = plan.run(env)
                        out.append([regs[o] for o in plan.outputs])
                    lo, hi = out
                    ks = b * kSteps + hs
                    areg[buf, :, mw, ks, :, :, 0] = lo[2 * hs]
                    areg[buf, :, mw, ks, :, :, 1] = hi[2 * hs]
                    areg[buf, :, mw, ks, :, :, 2] = lo[2 * hs + 1]
                    areg[buf, :, mw, ks, :, :, 3] = hi[2 * hs + 1]

            def mma_stage(s: int, buf: int, first: bool) -> None:
                xs = base + s * kStage + kWBytes
                group: list[Callable[[], None]] = []
                for ks in range(kK16):
                    for mw in range(MW):
                        for c in range(CONSUMERS):

                            def op(c: int = c, mw: int = mw, ks: int = ks, acc_on: bool = ks > 0 or not first) -> None:
                                desc = wgmma_desc_sw128(xs + 32 * ks)
                                wgmma_rs(acc[c, mw], areg[buf, c, mw, ks], desc, acc_on, smem, BN, bf16)

                            group.append(op)
                pending.append(group)  # wgmma_commit

            def wgmma_wait(n: int) -> None:
                while len(pending) > n:
                    for op in pending.pop(0):
                        op()

            def store_tile(tile: int, v: np.ndarray, chunks: range | None = None) -> None:
                """The template's store_tile; with ``chunks``, its store_chunks of those chunks u = mw NI + j."""
                chunks = range(MW * NI) if chunks is None else chunks
                m0, n0 = origin(tile, rank)
                b = np.zeros((MW, 2, CONSUMERS, 4, 32))  # the bias of feature row0 + 64 mw + g + 8 h (0 past N)
                for mw in range(MW):
                    for h in range(2):
                        n = np.broadcast_to(n0 + row0 + 64 * mw + g + 8 * h, (CONSUMERS, 4, 32))
                        if bias is not None:
                            b[mw, h] = np.where(n < N, np.asarray(bias, np.float64)[np.minimum(n, N - 1)], 0.0)
                if NI % 2 == 0 and N % 8 == 0 and not y_misaligned:
                    store_staged(m0, n0, v, b, chunks)
                    return
                # the 2-byte stores: a pointer into y from row m0 + 2t stepping 8 rows a chunk, + N for e = 1
                rows_left = M - m0 - 2 * t  # [1, 1, 32]
                for mw in range(MW):
                    for h in range(2):
                        n = n0 + row0 + 64 * mw + g + 8 * h  # [C, 4, 32]
                        ptr = (m0 + 2 * t) * N + n
                        for j in range(NI):
                            if mw * NI + j not in chunks:
                                continue
                            for e in range(2):
                                ok = (n < N) & (8 * j + e < rows_left)
                                flat, live = np.broadcast_arrays(ptr + j * 8 * N + e * N, ok)
                                mb, nb = flat[live] // N, flat[live] % N
                                y[mb, nb] = (v[:, mw, :, :, j, 2 * h + e] + b[mw, h])[live]
                                np.add.at(y_writes, (mb, nb), 1)

            def store_staged(m0: int, n0: int, v: np.ndarray, b: np.ndarray, chunks: range) -> None:
                """The template's staged epilogue: chunks j, j + 1 of each m64 row through the warp's staging area
                by stmatrix.x4.trans (Warp-level matrix store instruction: stmatrix; register i of lane 4r + c
                holds row r, columns 2c, 2c + 1 of matrix i, and the 16 bytes at lane 8i + k's address receive
                column k of matrix i with .trans), read back 16 bytes a lane and stored as 8 features of one token.
                The values go to float64 2-byte slots (the values before the output rounding), NaN until written,
                so a read of a slot the stmatrix did not write fails; their fp16 bits go to the CTA's shared memory
                too, so staging that overlapped the stage ring would overwrite copies the next K tiles read."""
                staged = np.full((RAW0 + smem_size) // 2, np.nan)
                C4 = (CONSUMERS, 4)
                wi = lane >> 3
                wrow = 8 * (wi >> 1) + (lane & 7)
                waddr = np.broadcast_to(stage_area + wrow * 32 + (((wi & 1) ^ ((wrow >> 2) & 1)) << 4), (*C4, 32))
                rrow, half = lane >> 1, lane & 1
                raddr = np.broadcast_to(stage_area + rrow * 32 + ((half ^ ((rrow >> 2) & 1)) << 4), (*C4, 32))
                assert (waddr % 16 == 0).all() and (raddr % 16 == 0).all(), "a staging row off 16 bytes"
                # stmatrix, every (matrix i, stored row k, element r) at once: element r of row k is the fragment's
                # (row r, column k), held by lane 4r + k // 2 in half k % 2 of register i
                i_, k_, r_ = np.meshgrid(np.arange(4), np.arange(8), np.arange(8), indexing="ij")  # [4, 8, 8]
                w_at = waddr[..., 8 * i_ + k_] + 2 * r_  # [C, 4, 4, 8, 8] byte addresses
                q = np.arange(8)
                r_at = raddr[..., None] + 2 * q  # [C, 4, 32, 8]: a lane's 8 features
                area = slice(int(stage_area.min()) // 2, (int(stage_area.max()) + kEpilogueWarpBytes) // 2)
                m_lane = 8 * np.arange(0, NI, 2)[:, None] + rrow[0, 0]  # [chunk pairs, 32]: token row of a lane
                for mw in range(MW):
                    n = np.broadcast_to(n0 + row0 + 64 * mw + 8 * half, (*C4, 32))
                    for jp, j in enumerate(range(0, NI, 2)):
                        if mw * NI + j not in chunks:
                            continue
                        assert mw * NI + j + 1 in chunks, "a share splits a chunk pair"
                        staged[area] = np.nan
                        # register 2c + h of lane (g, t): tokens 2t, 2t + 1 of feature g + 8 h, chunk j + c
                        regs = np.stack(
                            [
                                np.stack([v[:, mw, :, :, j + c, 2 * h + e] + b[mw, h] for e in range(2)], axis=-1)
                                for c in range(2)
                                for h in range(2)
                            ]
                        )  # [4 registers, C, 4, 32 lanes, 2 halves]
                        vals = np.moveaxis(regs[i_, :, :, 4 * r_ + k_ // 2, k_ % 2], (0, 1, 2), (2, 3, 4))
                        staged[w_at // 2] = vals
                        bits = vals.astype(np.float16).view(np.uint16)
                        smem[w_at], smem[w_at + 1] = bits & 0xFF, bits >> 8
                        got = staged[r_at // 2]  # [C, 4, 32, 8]
                        assert not np.isnan(got).any(), "the epilogue read a staging slot no stmatrix wrote"
                        raw = smem[raddr[..., None] + np.arange(16)]  # [C, 4, 32, 16] bytes
                        assert (raw.view(np.uint16) == got.astype(np.float16).view(np.uint16)).all()
                        mm, nn = np.broadcast_arrays(m0 + m_lane[jp], n)  # [C, 4, 32]
                        ok = (mm < M) & (nn < N)
                        rows = np.repeat(mm[ok], 8)
                        cols = (nn[ok][:, None] + q).ravel()
                        y[rows, cols] = got[ok].ravel()
                        np.add.at(y_writes, (rows, cols), 1)

            def ws_index(c: int, slot: int) -> np.ndarray:
                """[C, MW, 4, 32, NI, 4] indices: ws + (c * 2 + slot) (kAcc kConsumerThreads) + ctid, element
                [i][j][r] at ((i NI + j) 4 + r) kConsumerThreads."""
                i = np.arange(MW)[None, :, None, None, None, None]
                j = np.arange(NI)[None, None, None, None, :, None]
                r = np.arange(4)[None, None, None, None, None, :]
                th = ctid[:, None, :, :, None, None]
                idx = (c * 2 + slot) * (kAcc * kConsumerThreads) + th + ((i * NI + j) * 4 + r) * kConsumerThreads
                assert idx.min() >= 0 and idx.max() < ws.size, "a partial past the workspace run.gemm90 allocates"
                return idx

            def ws_index4(c: int) -> np.ndarray:
                """[C, MW, 4, 32, NI, 4] indices of finish_shared's 16-byte layout: float4 ws + c kPieceF4 + u
                kConsumerThreads + ctid (u = i NI + j), element r of it."""
                i = np.arange(MW)[None, :, None, None, None, None]
                j = np.arange(NI)[None, None, None, None, :, None]
                r = np.arange(4)[None, None, None, None, None, :]
                th = ctid[:, None, :, :, None, None]
                idx = (c * 2 * (kAcc // 4) * kConsumerThreads + (i * NI + j) * kConsumerThreads + th) * 4 + r
                assert idx.min() >= 0 and idx.max() < ws.size, "a piece past the workspace run.gemm90 allocates"
                return idx

            def finish_shared(tile: int) -> None:
                """The piece stored and arrived at; the share's adds deferred until every CTA has run."""
                assert tile == cta // shares, "CTA c holds a piece of tile c / shares"
                idx = ws_index4(cta)
                assert (ws_writes[idx] == 0).all(), "two pieces share a workspace slot"
                ws[idx] = acc
                ws_writes[idx] += 1
                counters[tile] += 1
                me = cta

                def add_share() -> None:
                    assert counters[tile] >= shares, "a share read before every piece of its tile arrived"
                    counters[tile] += 1  # the second round: its last arrival resets the counter
                    if counters[tile] == 2 * shares:
                        counters[tile] = 0
                    share, kus = me % shares, MW * NI // shares
                    chunks = range(share * kus, (share + 1) * kus)
                    total = np.zeros_like(acc)
                    for c in range(shares):  # K order, from 0 (the stream-K sum)
                        part = ws_index4(me - share + c)
                        assert (ws_writes[part] == 1).all(), "a share reads a piece not written once"
                        total = total + ws[part]
                    store_tile(tile, total, chunks)

                shared_adds.append(add_share)

            def finish_segment(tile: int, kb: int, ke: int) -> None:
                if CLUSTER > 1 or (kb == 0 and ke == k_tiles):
                    assert kb == 0 and ke == k_tiles, "a cluster CTA ran a piece of a tile"
                    store_tile(tile, acc)
                    return
                if shares > 1:
                    finish_shared(tile)
                    return
                first_unit = (tile - W) * k_tiles  # counted from the first stream-K unit
                c0, c1 = owner(first_unit, sk_units, Q), owner(first_unit + k_tiles - 1, sk_units, Q)

                def slot(c: int) -> int:
                    return 0 if c * sk_units // Q >= first_unit else 1

                idx = ws_index(cta, slot(cta))
                assert (ws_writes[idx] == 0).all(), "two partial sums share a workspace slot"
                ws[idx] = acc
                ws_writes[idx] += 1
                last = counters[tile] == c1 - c0
                counters[tile] += 1
                if last:
                    for c in range(c0, c1 + 1):
                        part = ws_index(c, slot(c))
                        assert (ws_writes[part] == 1).all(), "the last arriver reads a workspace slot not written once"
                        v = ws[part]
                        acc[...] = (0.0 if c == c0 else acc) + v
                    store_tile(tile, acc)
                    counters[tile] = 0

            def reduce_cluster(tile: int) -> Iterator[None]:
                """The template's reduce_cluster: the sums over the stage memory (no copy in flight: the producer
                issued its last and every one has landed), the cluster barrier, this CTA's share [rank per, (rank +
                1) per) of every CTA's sums read and added in rank order, the second barrier's arrival (the reads
                done), the share stored, and the wait before the CTA may exit."""
                nbytes = kAcc * kConsumerThreads * 4
                assert issued[rank] == nt and base + nbytes <= bars, "the pieces overwrite a live stage or the barriers"
                smem[base : base + nbytes] = 0xEE  # the stages' bytes are gone
                e = ((np.arange(MW)[:, None, None] * NI + np.arange(NI)[None, :, None]) * 4 + np.arange(4)).ravel()
                piece = np.full((kAcc, kConsumerThreads), np.nan)
                # acc [C, MW, warp, lane, NI, 4] -> piece[(i NI + j) 4 + r, ctid]
                piece[e[:, None], ctid.ravel()[None, :]] = acc.transpose(1, 4, 5, 0, 2, 3).reshape(kAcc, -1)
                pieces[rank] = piece
                cluster_bar.arrive()
                while cluster_bar.phases < 1:
                    yield

                def arrive_at_exit() -> Iterator[None]:
                    if KSPLIT_EXIT_BARRIER:
                        cluster_bar.arrive()
                    Barrier.step()
                    yield  # the peers run on: one that may exit now does

                if KSPLIT_ARRIVE_BEFORE_READS:
                    yield from arrive_at_exit()
                per = kAcc // R
                sums = []
                for q in range(per):  # every read before the first store (the template's loads, then adds)
                    el = rank * per + q
                    v = np.zeros(kConsumerThreads)
                    for c in range(R):  # rank order: the bits of every run
                        assert not exited[c], "a read of a CTA that has exited"
                        other = pieces[c]
                        assert other is not None and not np.isnan(other[el]).any(), "a piece read before it was stored"
                        v = v + other[el]
                        Barrier.step()
                        yield  # a load in flight: the peers run on meanwhile
                    sums.append((el, v))
                if not KSPLIT_ARRIVE_BEFORE_READS:
                    yield from arrive_at_exit()
                m0, n0 = origin(tile, rank)
                for el, v in sums:
                    i, j, r = el // (NI * 4), el // 4 % NI, el % 4
                    n = (n0 + row0 + 64 * i + g + 8 * (r >> 1)).ravel()
                    m = np.broadcast_to(m0 + 8 * j + 2 * t + (r & 1), (CONSUMERS, 4, 32)).ravel()
                    ok = (n < N) & (m < M)
                    b = 0.0 if bias is None else np.asarray(bias, np.float64)[np.minimum(n, N - 1)]
                    y[m[ok], n[ok]] = (v + b)[ok]
                    np.add.at(y_writes, (m[ok], n[ok]), 1)
                if KSPLIT_EXIT_BARRIER:
                    while cluster_bar.phases < 2:
                        yield

            def release(s: int) -> None:
                """lane 0 of every warp: its own CTA's empty barrier of stage s and, in a cluster, the peer's."""
                for peer in range(CLUSTER) if PEER_RELEASE and CLUSTER > 1 else (rank,):
                    assert not exited[peer], "a remote arrival on a CTA that has exited"
                    barriers[peer][bars + 8 * (STAGES + s)].arrive(CONSUMERS * 4)

            def step(done: int, i: int, buf: int) -> Iterator[None]:
                ii = done + i + buf
                mma_stage(ii % STAGES, buf, i + buf == 0)
                wgmma_wait(1)
                if ii >= 1:
                    release((ii - 1) % STAGES)
                    yield  # the producers refill the stage as soon as they may
                if ii + 1 < nt:
                    sn = (ii + 1) % STAGES
                    yield from wait(barrier, bars + 8 * sn, ((ii + 1) // STAGES) & 1)
                    load_convert(sn, 1 - buf)

            if nt > 0:
                yield from wait(barrier, bars, 0)
                load_convert(0, 0)
            tile, kb = first_segment(rank)
            done = 0
            while done < nt:
                seg = min(kend[rank] - kb, nt - done)
                for i in range(0, seg, 2):
                    yield from step(done, i, 0)
                    if i + 1 < seg:
                        yield from step(done, i, 1)
                wgmma_wait(0)
                if ksplit > 1:
                    yield from reduce_cluster(tile)
                else:
                    finish_segment(tile, kb, kb + seg)
                done += seg
                if seg % 2 != 0:
                    areg[0] = areg[1]
                tile, kb = next_segment(tile, rank)
            if CLUSTER > 1 and nt > 0:  # the last K tile's stage, for the producers' tails
                release((nt - 1) % STAGES)

        # the most adversarial schedule the barriers allow: the producers copy as far ahead as they may after every
        # move, and one consumer leads (the last rank, the first in odd clusters): it runs until it blocks before
        # the other moves, so a stage the leader released is refilled while the other CTA may still read it
        producers = [producer(rank) for rank in range(R)]
        ranks = list(range(R))[:: 1 if cta % 2 else -1]
        consumers = [(rank, consumer(rank)) for rank in ranks]
        prod_live, cons_live = [True] * R, [True] * R

        def advance(co: Iterator[None]) -> bool:
            """One move of a thread; False once it has returned."""
            try:
                next(co)
            except StopIteration:
                return False
            return True

        def exit_check(rank: int) -> None:  # a CTA exits once its producer and its consumers have returned
            exited[rank] = not prod_live[rank] and not cons_live[ranks.index(rank)]

        while any(prod_live) or any(cons_live):
            before, finished = Barrier.events, False
            for rank in range(R):
                if prod_live[rank] and not advance(producers[rank]):
                    prod_live[rank], finished = False, True
                    exit_check(rank)
            for k, (rank, co) in enumerate(consumers):
                if not cons_live[k]:
                    continue
                moved = Barrier.events
                if not advance(co):
                    cons_live[k], finished = False, True
                    exit_check(rank)
                    break
                if Barrier.events != moved:
                    break  # the leader moved: the producers go again before anyone else
            assert finished or Barrier.events != before, "deadlock: every thread of the cluster waits"

    for cta in order if order is not None else range(P):
        run_cluster(cta)
    for add_share in shared_adds:  # in the order the CTAs arrived: any order the waits allow
        add_share()

    assert not counters.any(), "a tile counter not reset for the next launch"
    assert (y_writes == 1).all(), "a y element stored other than once"
    return y
