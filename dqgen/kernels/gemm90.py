"""The Hopper GEMM (templates/gemm90.cu.j2) of a spec: swap-AB wgmma with the weights as the register-sourced A
operand, fed by TMA through an mbarrier ring, one producer warpgroup and one or two consumer warpgroups.

It reads the tensor-core GEMM's weight layout (dqgen.layout.gemm: TensorRT-LLM's layout over K slots, the scales
and zeros padded to 128 columns), so one packed weight serves the sm_80 and the sm_90 main loops, and converts one
word of it with the same proven Plan (``converter_spec(spec)``): the words a thread needs for wgmma's A fragment
(rows g and g + 8 of its warp's 16 features) are the words the sm_80 kernel's B fragments take (column g of two n8
tiles), read by the same ldmatrix rows."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Final

from ..core.spec import CONTAINER_BITS, SourceKind, Spec
from ..emit.pipeline import compile_artifact
from ..emit.render import context
from ..layout.gemm import TILE_K, TILE_N, group_rows
from ..layout.gemm_trt import columns_interleaved, converter_spec
from .family import Mainloop
from .gemm import WeightOnlyGemmConfig, supports, zero_bytes

#: Registers a producer thread keeps (setmaxnreg.dec): it computes addresses and issues copies, nothing else.
PRODUCER_REGS: Final = 40
#: Shared memory one SM gives its blocks (the H100's and H200's 228 KB less 1 KB the system keeps per block is what
#: a block may opt in to: 227 KB).
SM_SHARED_BYTES: Final = 228 * 1024
BLOCK_RESERVED_BYTES: Final = 1024
#: wgmma's n per CTA (tokens): the smallest that holds M is picked (choose_config90; dqgen.run.gemm90.config90_for
#: halves 256 to 128 on narrow grids); 8 is wgmma's least.
TOKEN_TILES: Final = (8, 16, 32, 64, 128, 256)
#: The least token tile of a 2-CTA cluster entry (Gemm90Config.cluster).
CLUSTER_MIN_BN: Final = 64
#: Output features per CTA tile: one or two m64 rows of wgmma's A (TILE_N, the layout's scale padding, is the
#: widest: a 64-feature tile reads half of a 128-column scale row).
FEATURE_TILES: Final = (64, TILE_N)


def launch_regs(threads: int, min_blocks: int) -> int:
    """The registers a thread gets under __launch_bounds__(threads, min_blocks): the SM's 64K shared out, a multiple
    of 8, at most 255 (what ptxas allocates the whole kernel within)."""
    return min(255, 65536 // min_blocks // threads) // 8 * 8


def consumer_regs(consumers: int, min_blocks: int) -> int:
    """setmaxnreg.inc of the consumer warpgroups of a CTA of one producer and ``consumers`` consumer warpgroups,
    ``min_blocks`` CTAs an SM: what the producer gives back (it keeps PRODUCER_REGS), shared out (a multiple of 8,
    <= 240)."""
    threads = 128 * (1 + consumers)
    per = (threads * launch_regs(threads, min_blocks) - 128 * PRODUCER_REGS) // (128 * consumers)
    return min(240, per // 8 * 8)


#: Shared memory of one consumer warp's epilogue staging (the template's kEpilogueWarpBytes, held equal by its
#: static_assert on the launch's shared memory): 16 tokens x 16 features of fp16 / bf16 outputs, transposed there by
#: stmatrix so that y is written in whole 16-byte runs.
EPILOGUE_WARP_BYTES: Final = 16 * 16 * 2

#: Bytes of one stage's scales for one 16-bit scale row (the integer specs'); scale_stage_bytes gives a spec's.
SCALE_ROW_BYTES: Final = TILE_N * 2


def scale_stage_bytes(spec: Spec) -> int:
    """Bytes of one stage's scales: group_rows(spec) rows (groups under a 64-k tile) of TILE_N scales, 2 bytes each
    or 1 (a block-scale code)."""
    return TILE_N * (1 if spec.scales.block else 2) * group_rows(spec)


def stage_bytes(bn: int, bits: int, zero_elem: int, scale_bytes: int = SCALE_ROW_BYTES, features: int = TILE_N) -> int:
    """One pipeline stage (the template's stage_bytes<BN, FN>): W lines, x rows, scales, zeros, to 1024 bytes
    (``scale_bytes``: a 128-feature tile's; a narrower tile stages its share)."""
    w = features // columns_interleaved(bits) * 128
    raw = w + bn * 128 + scale_bytes * features // TILE_N + features * zero_elem
    return -(-raw // 1024) * 1024


@dataclass(frozen=True)
class Gemm90Config:
    """One CTA shape: ``bn`` tokens x ``features`` features (128: each wgmma step is two m64 instructions, of one
    consumer warpgroup or one each of two; 64: one m64 of one warpgroup), ``consumers`` math warpgroups, ``stages``
    TMA stages, ``min_blocks`` CTAs per SM; ``cluster`` 2: 2-CTA clusters on two neighbouring feature tiles of one
    token tile, each CTA copying half of the x tile and multicasting it into both (templates/gemm90.cu.j2; whole
    tiles only)."""

    bn: int
    consumers: int
    stages: int
    min_blocks: int
    cluster: int = 1
    features: int = TILE_N

    def __post_init__(self) -> None:
        if self.bn not in TOKEN_TILES:
            raise ValueError(f"Gemm90Config.bn: expected one of {TOKEN_TILES}, got {self.bn}")
        if self.features not in FEATURE_TILES:
            raise ValueError(f"Gemm90Config.features: expected one of {FEATURE_TILES}, got {self.features}")
        if self.consumers not in (1, 2):
            raise ValueError(f"Gemm90Config.consumers: expected 1 or 2, got {self.consumers}")
        if self.features % (64 * self.consumers):
            raise ValueError(
                f"Gemm90Config: {self.consumers} consumer warpgroups cannot share {self.features} features (whole m64"
                " rows each)"
            )
        if self.cluster not in (1, 2):
            raise ValueError(f"Gemm90Config.cluster: expected 1 or 2, got {self.cluster}")
        if self.features < TILE_N and self.cluster > 1:
            raise ValueError(f"Gemm90Config.cluster: 2-CTA clusters pair 128-feature tiles, got {self.features}")
        if self.cluster > 1 and self.bn < CLUSTER_MIN_BN:
            # half an x tile a CTA: below 64 tokens x is a small part of a stage, not worth a cluster's lockstep
            raise ValueError(f"Gemm90Config.cluster: 2-CTA clusters take bn >= {CLUSTER_MIN_BN}, got bn {self.bn}")
        # a consumer thread holds its accumulators and two A register sets (16 a m64 row each) within what ptxas may
        # allocate under __launch_bounds__(threads, min_blocks): setmaxnreg moves registers at run time, not the cap
        mw = self.features // self.consumers // 64
        held, cap = self.accumulators + 32 * mw, launch_regs(self.threads, self.min_blocks)
        if held > cap:
            raise ValueError(
                f"Gemm90Config: {held} accumulator and A registers a consumer thread exceed the {cap} registers of"
                f" {self.min_blocks} blocks an SM ({self})"
            )
        # the largest stages: 16-bit scales and zeros; four 16-bit scale rows (groups of 16), no zeros
        for bits, zero_elem, scale_bytes in (
            (4, 2, SCALE_ROW_BYTES),
            (8, 2, SCALE_ROW_BYTES),
            (8, 0, 4 * SCALE_ROW_BYTES),
        ):
            if (
                self.shared_bytes(bits, zero_elem, scale_bytes)
                > SM_SHARED_BYTES // self.min_blocks - BLOCK_RESERVED_BYTES
            ):
                raise ValueError(f"Gemm90Config: {self} does not fit {self.min_blocks} blocks an SM ({bits}-bit)")

    @classmethod
    def parse(cls, text: str) -> Gemm90Config:
        """The config of 'bn:consumers:stages:min_blocks[:cluster[:features]]' (the devtools' --try and --config)."""
        try:
            fields = [int(v) for v in text.split(":")]
        except ValueError:
            fields = []
        if not 4 <= len(fields) <= 6:
            raise ValueError(f"config: expected bn:consumers:stages:min_blocks[:cluster[:features]], got {text!r}")
        return cls(*fields)

    @property
    def accumulators(self) -> int:
        """fp32 sums a consumer thread holds (the template's kAcc): 4 per n8 chunk of the tokens per m64 row."""
        return self.features // self.consumers // 64 * (self.bn // 8) * 4

    def tiles(self, M: int, N: int) -> int:
        """Output tiles of M rows of N features: token tiles x feature tiles (a 2-CTA cluster's: feature tile pairs)."""
        return -(-M // self.bn) * -(-N // (self.features * self.cluster))

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def consumer_regs(self) -> int:
        return consumer_regs(self.consumers, self.min_blocks)

    @property
    def mainloop(self) -> Mainloop:
        return Mainloop(
            "wgmma_tma_sm90", (self.bn, self.features, TILE_K), (self.consumers, 4), self.stages, swap_ab=True
        )

    @property
    def tag(self) -> str:
        return (
            f"n{self.bn}c{self.consumers}s{self.stages}b{self.min_blocks}"
            + (f"f{self.features}" if self.features != TILE_N else "")
            + (f"x{self.cluster}" if self.cluster > 1 else "")
        )

    @property
    def x_box_rows(self) -> int:
        """Rows of x's TMA box: the token tile, half of it in a 2-CTA cluster (each CTA copies one half)."""
        return self.bn // self.cluster

    def shared_bytes(self, bits: int, zero_elem: int, scale_bytes: int = SCALE_ROW_BYTES) -> int:
        """The template's smem_bytes<BN, FN, STAGES, CONSUMERS>: alignment slack, the stages, two mbarriers a stage,
        each consumer warp's epilogue staging."""
        stages = self.stages * stage_bytes(self.bn, bits, zero_elem, scale_bytes, self.features)
        return 1024 + stages + self.stages * 16 + self.consumers * 4 * EPILOGUE_WARP_BYTES

    def launch_shared_bytes(self, spec: Spec) -> int:
        """The dynamic shared memory of a launch of ``spec``'s kernel in this shape."""
        return self.shared_bytes(spec.source.bits, zero_bytes(spec), scale_stage_bytes(spec))


#: The CTA shapes, by token tile: up to 64 tokens one consumer warpgroup (two m64 wgmmas a step) and 2 CTAs an SM
#: (humming's recipe for small M: many small CTAs keep enough weight bytes in flight); from 128 tokens two consumer
#: warpgroups and one CTA (the accumulators: 64 or 128 registers a thread).
CONFIGS90: Final = (
    Gemm90Config(8, 1, 8, 2),
    Gemm90Config(16, 1, 8, 2),
    Gemm90Config(32, 1, 8, 2),
    Gemm90Config(64, 1, 6, 2),
    Gemm90Config(128, 2, 8, 1),
    Gemm90Config(256, 2, 5, 1),
)
#: The 2-CTA cluster entries (x multicast; Gemm90Config.cluster): the large-M token tiles, where x is 80-90 % of a
#: stage's bytes (16 / 32 KB against 4 KB of int4 W). dqgen.run.gemm90.bind90 picks one where CLUSTER_RULE says.
CLUSTER_CONFIGS90: Final = (
    Gemm90Config(128, 2, 8, 1, cluster=2),
    Gemm90Config(256, 2, 5, 1, cluster=2),
)


#: 64-feature CTA shapes: twice the CTAs of the 128-feature tiles on one weight, each a consumer warpgroup converting
#: one m64 row (16 features a warp), 3-4 CTAs an SM up to 32 tokens (twice the converting warps a scheduler) and 2 at
#: 64-128 tokens. Selectable (``config=``, devtools/gemm90_bench.py --narrow), not dispatched and not in the default
#: module: on the H100 (docs/bench/gemm90_narrow_h100.json) they ran 1.00-1.10x the 128-feature tiles' time on the
#: four large shapes at M = 1..128 (decode 8192 x 28672: 72.2 against 65.5 µs), and won only on 4096 x 4096 at M = 64
#: (20.5 against 21.6 µs for the sm_80 GEMM the dispatch takes there).
NARROW_CONFIGS90: Final = (
    Gemm90Config(8, 1, 8, 4, features=64),
    Gemm90Config(16, 1, 7, 4, features=64),
    Gemm90Config(32, 1, 5, 4, features=64),
    Gemm90Config(64, 1, 5, 3, features=64),
    Gemm90Config(128, 1, 5, 2, features=64),
)


#: The split-K cluster sizes of a one-CTA entry (dqgen.run.gemm90.bind90's ``cluster_splits``; the template's
#: reduce_cluster has one unrolled branch a size): powers of two up to the portable cluster size, so each CTA of a
#: cluster adds a whole share of a consumer thread's accumulators.
CLUSTER_SPLITS: Final[tuple[int, ...]] = (2, 4, 8)


def cluster_config90(cfg: Gemm90Config) -> Gemm90Config | None:
    """The 2-CTA cluster entry of ``cfg``'s CTA shape (None where there is none)."""
    return next((c for c in CLUSTER_CONFIGS90 if replace(c, cluster=cfg.cluster) == cfg), None)


#: Code kinds the Hopper GEMM takes beyond the sm_80 GEMM's integers: 4- and 8-bit minifloats (fp8 e4m3 / e5m2, fp4
#: e2m1) and 4-bit codebooks (nf4), converted by the spec's own Plan solved for the layout's register order (the
#: converter word gives fp16 / bf16 pairs in natural element order, as for the integers).
FLOAT_KINDS: Final = (SourceKind.float, SourceKind.codebook)


def refusal90(spec: Spec) -> str:
    """Why the Hopper GEMM does not take ``spec`` ("" where it does), one line naming the spec field: the sm_80 GEMM's
    specs (4- and 8-bit integer codes), and 4- and 8-bit float and codebook codes with 16-bit scales in one group,
    groups of whole 64-k tiles or groups of 16 or 32 (group_rows scale rows a stage, one scale a converted pair), or
    one-byte block scales (MX's e8m0, NVFP4's e4m3) in groups that hold whole converted words (one decoded scale a
    word) or groups of 16 (one a k16 step: ``block_split``), with NVFP4's fp32 global scale (a launch argument read
    once a thread, carried by the packed weight). A spec off that shape keeps the GEMV (dqgen.run.dispatch)."""
    if supports(spec):
        return ""
    src, sc = spec.source, spec.scales
    if src.kind not in FLOAT_KINDS:
        return f"[source] {src.bits}-bit {src.kind.value} codes: the GEMM's layout holds 4- and 8-bit codes"
    if src.bits not in (4, 8) or spec.words != 1:
        return f"[source.bits] {src.bits}-bit {src.kind.value} codes: the GEMM's layout holds 4- and 8-bit codes"
    if spec.integer_target:
        return "[target] s8 lanes feed the W4A8 GEMM, not this fp16 / bf16 one"
    gs = sc.group_size
    if sc.global_scale and not sc.block:
        return "[scales.global_scale] a per-tensor fp32 scale without block scales: the Plan has none of that shape"
    word_k = 4 * CONTAINER_BITS // src.bits  # the k one word's codes span (ldsm_row_permutation: 4 x its codes)
    if sc.block and (not isinstance(gs, int) or gs <= 0 or (gs % word_k and not block_split(spec))):
        code = sc.dtype.value if sc.dtype is not None else "block"
        return (
            f"[scales.group_size] {code} block scales in groups of {gs}: the Plan applies one decoded block scale to"
            f" a converted word, which spans {word_k} k (or to one k16 step of it: groups of 16)"
        )
    if isinstance(gs, int) and gs > 0 and gs % TILE_K and (TILE_K % gs or gs < 16):
        return (
            f"[scales.group_size] groups of {gs}: the GEMM stages whole scale rows of a {TILE_K}-k tile (groups of"
            f" 16, 32 or whole tiles, or one group)"
        )
    if spec.act_order:
        return "[act_order] act-order float codes: the Hopper GEMM gathers x for act-order integer specs only"
    return ""


def block_split(spec: Spec) -> bool:
    """Whether ``spec``'s block scales are narrower than a converted word (NVFP4: groups of 16, a 4-bit word spans
    32 k): the GEMM then decodes one scale a k16 step (two a word) and converts the word once a decoded scale, keeping
    that step's pairs of each (the converter's asm is not volatile: the identical convert ops are shared)."""
    sc = spec.scales
    word_k = 4 * CONTAINER_BITS // spec.source.bits
    return bool(sc.block) and sc.group_size == 16 and word_k > 16


def hopper_only(spec: Spec) -> bool:
    """Whether the Hopper GEMM is the only GEMM of ``spec`` (a float or codebook spec it takes, which the sm_80 GEMM
    does not): where it cannot run (another GPU, an x TMA cannot address) the GEMV takes every M."""
    return not supports(spec) and not refusal90(spec)


def choose_config90(M: int) -> Gemm90Config:
    """The smallest token tile that holds M rows (256 past that: several token tiles)."""
    for cfg in CONFIGS90:
        if cfg.bn >= M:
            return cfg
    return CONFIGS90[-1]


def gemm90_entry_name(spec: Spec, cfg: Gemm90Config) -> str:
    return f"dqgen_gemm90_{spec.name}_{cfg.tag}"


@dataclass(frozen=True)
class Gemm90KernelConfig(WeightOnlyGemmConfig):
    """The Hopper GEMM of ``spec`` with ``entries``' CTA shapes (Gemm90Config) as entry points in one source (a
    launch compiles the one it runs). Takes the specs the sm_80 GEMM takes (4- and 8-bit integer codes) and the float
    and codebook specs ``refusal90`` accepts."""

    family: ClassVar[str] = "gemm90"
    pdl: ClassVar[bool] = True
    template: ClassVar[str] = "gemm90.cu.j2"
    what_source: ClassVar[str] = "Hopper GEMM source"
    #: wgmma and setmaxnreg exist only in the architecture-specific target (compiled for sm_90a).
    arch_specific: ClassVar[bool] = True

    entries: tuple[Gemm90Config, ...] = CONFIGS90 + CLUSTER_CONFIGS90

    @classmethod
    def supports(cls, spec: Spec) -> bool:
        return not refusal90(spec)

    @property
    def name(self) -> str:
        return gemm90_entry_name(self.spec, self.entry)

    @property
    def mainloop(self) -> Mainloop:
        return self.entry.mainloop

    @property
    def threads(self) -> int:
        return self.entry.threads

    @property
    def shared_bytes(self) -> int:
        return max(c.launch_shared_bytes(self.spec) for c in self.entries)

    @property
    def min_sm(self) -> int:
        return max(self.spec.sm, 90)

    def context(self) -> dict[str, Any]:
        conv = converter_spec(self.spec)
        ctx = context(conv, compile_artifact(conv).plan)
        rows = group_rows(self.spec)
        ctx.update(
            spec_name=self.spec.name,
            cols=columns_interleaved(conv.source.bits),
            blocks=TILE_K // (4 * conv.per_word),
            zero_bytes=zero_bytes(conv),
            mma_type="bf16" if conv.target.value == "bf16" else "f16",
            ns=sorted({c.bn for c in self.entries}),
            cluster_splits=CLUSTER_SPLITS,
            # groups under a K tile: scale rows a stage, k a group (the consumers pick a pair's row); 1-byte codes
            group_rows=rows,
            group_k=TILE_K // rows,
            scale_elem=1 if self.spec.scales.block else 2,
            # block scales in groups of 16 under a 32-k word (NVFP4): one decoded scale a k16 step
            block_split=block_split(self.spec),
            entries=[
                {
                    "entry": gemm90_entry_name(self.spec, c),
                    "bn": c.bn,
                    "features": c.features,
                    "consumers": c.consumers,
                    "stages": c.stages,
                    "threads": c.threads,
                    "min_blocks": c.min_blocks,
                    "cluster": c.cluster,
                    "regs_producer": PRODUCER_REGS,
                    "regs_consumer": c.consumer_regs,
                    "shared_bytes": c.launch_shared_bytes(self.spec),
                }
                for c in self.entries
            ],
        )
        return ctx
