"""The fused GEMV kernel (templates/matmul.cu.j2) of a spec: the spec's converter inside an mma.sync matmul over
the prepacked weights of dqgen.layout.matmul, one source holding every entry point (modes x token counts)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..core.spec import Spec
from ..emit.pipeline import Artifact
from ..emit.render import context
from ..ir.plan import Plan
from ..layout.layout import Layout
from .family import KernelConfig, SplitK, refuse_integer_target

#: Warps per block of the kept code shape (Tuning.warps): they split a tile's K range, reduced in shared memory.
WARPS = 4
#: Wider blocks a weight of few tiles takes (block_warps): the same tile's K range over 16 or 8 warps, reduced in
#: shared memory, instead of 4 warps and a split-K round trip through the workspace.
WIDE_WARPS = (16, 8)
#: GROUPED: rows of zeros after the last group's scales (and zero fields): the lean entry's loads of the next
#: ``Tuning.ahead`` groups run past the last group (unused).
PAD_GROUPS = 4


@dataclass(frozen=True)
class Tuning:
    """Code-shape choices of the kernel that docs/experiments/matmul_variants.py times side by side; the defaults are
    the ones kept (docs/performance.md, "Fused GEMV speed work", rounds 2 and 3, has the H100 figures).

    ``wload``: how the streamed weights are read: "na" ld.global.nc.L1::no_allocate (x and the scales stay in L1),
    "na256" the same with an L2 256-byte prefetch, "cs" __ldcs (allocates in L1); the three timed within 2%.
    ``xhoist``: 1..8 tokens load x of a whole batch of chunks before converting any (one wait per batch, not one
    per chunk: 8-25% faster at M = 1). ``sums8``: GROUPED weights run 1..8 tokens through the batched GROUPED
    entry (each group's fp32 sum times its scale, the group from the magic reciprocal) instead of PAIRED (a
    scale per weight): 7-13% faster at M = 1. ``scale_once``: that entry loads a group's scales once per batch.
    ``stages``: batches of weights in flight per warp through shared memory by cp.async (0: registers, double
    buffered); measured within 3% either way for the GROUPED entry and 4-20% slower for PAIRED, so not kept.
    ``unroll`` / ``min_blocks``: 0 for the spec's default.
    Round 3, the GROUPED entry ``run_lean`` (the same sums with ~40% fewer SASS instructions per batch: whole
    batches without guards, a group switch as one compare, scales ``ahead`` groups in flight, ``accs`` partial
    sums): ``lean16`` runs 9..16 tokens through it (1.3-1.7x faster than run_grouped), ``xu16`` chunks' x at once
    there; ``lean8`` runs 1..8 tokens through it too (not kept: up to 8% slower than run<_, 3> at M = 1, the issue
    rate is not what limits that case); ``prefetch``: batches of weights fetched into L2 ahead (slower at any depth).
    Round 4: ``flat`` puts GROUPED weights on the flat grid of run_flat (each warp a range of the tiles' chunks laid
    end to end, one wave of blocks): "waves" where the tile grid is more than one wave (8192x28672 and 4096x28672:
    5-6% faster at 8..16 tokens, equal at 1), "on" everywhere (slower at the one-wave shapes), "off". ``mb16``: blocks
    an SM for the 16-token lean entries (0: min_blocks; 3 gives them 168 registers and no spill, but was 8-47% slower
    on the tile grid, fewer resident blocks, and 4% slower on the flat grid).
    Round 5 (CUDA graphs of back-to-back calls, devtools/linear_graph_bench.py): ``warps`` a block, 4 kept; pack_gemv
    gives a weight of few tiles 16 or 8 (block_warps: a tile's K range over more warps, reduced in shared memory,
    in place of a split-K round trip: 9-26% faster on Llama-3-8B's q / k / v / o / down); 2 was slower everywhere.
    """

    wload: str = "na"
    xhoist: bool = True
    sums8: bool = True
    scale_once: bool = True
    stages: int = 0
    unroll: int = 0
    min_blocks: int = 0
    lean8: bool = False
    lean16: bool = True
    accs: int = 2
    ahead: int = 2
    xu16: int = 1
    prefetch: int = 0
    mb16: int = 0
    flat: str = "waves"
    warps: int = WARPS

    def __post_init__(self) -> None:
        if not 1 <= self.ahead <= PAD_GROUPS:  # run_lean reads scale and zero rows up to G - 1 + ahead
            raise ValueError(f"Tuning.ahead: expected 1..{PAD_GROUPS} (the pack's padded group rows), got {self.ahead}")
        if self.flat not in ("waves", "on", "off"):
            raise ValueError(f"Tuning.flat: expected 'waves', 'on' or 'off', got {self.flat!r}")
        if self.warps not in (2, 4, 8, 16):
            raise ValueError(f"Tuning.warps: expected 2, 4, 8 or 16 warps a block, got {self.warps!r}")


#: The kept code shape (a value: a config names its tuning; nothing reads a module-wide one).
DEFAULT_TUNING = Tuning()


#: How an entry point finds x and a block's group: PAIRED (slot = k, a lane's two blocks of a chunk in one group:
#: group_size -1 or a multiple of 2P), DIRECT (slot = k, a group per block), GATHER (x through perm, groups from
#: block_group: act-order, or groups that are no whole blocks), GROUPED (slot = k, whole chunks per group, and a
#: 16-bit scale per (group, channel) with integer or no zero points: the scale multiplies a group's fp32 partial sum).
PAIRED, DIRECT, GATHER, GROUPED = 0, 1, 2, 3
#: GROUPED finds a chunk's group with a 32-bit magic reciprocal, exact while chunks**2 < 2**32.
MAX_GROUPED_CHUNKS = 1 << 16


@dataclass(frozen=True)
class MatmulEntry:
    tok16: bool  # 9..16 tokens: two mmas per A fragment
    mode: int  # PAIRED, DIRECT, GATHER or GROUPED
    flat: bool = False  # GROUPED on a flat grid: each warp a range of the tiles' chunks laid end to end (run_flat)

    @property
    def gather(self) -> bool:
        return self.mode == GATHER


GEMV_ENTRIES = tuple(MatmulEntry(t, m) for m in (PAIRED, DIRECT, GATHER) for t in (False, True))


def grouped_spec(spec: Spec) -> bool:
    """Whether weights of the spec may run GROUPED: its scale stage is one multiplication by a 16-bit
    per-(group, channel) scale after the convert stage (no block-scale decoding, no dense zeros added after it), so
    it can move after a group's sum; and its blocks are one word of 8 codes, the only kind measured faster so (the
    H100, AWQ int4 g128, 9..16 tokens: 3-9% under PAIRED at the five bench shapes; int8 / fp8, 4 codes a word, ran
    18% slower GROUPED at M = 1 than PAIRED in the run before)."""
    lay = Layout.of(spec)
    return (
        not spec.scales.block
        and not spec.zeros.dense
        and not spec.scales.global_scale
        and lay.words == 1
        and lay.per_block == 8
    )


def entries(spec: Spec) -> tuple[MatmulEntry, ...]:
    """The entry points the spec's matmul source has (GROUPED for 1..8 and for 9..16 tokens: see launch_mode)."""
    if not grouped_spec(spec):
        return GEMV_ENTRIES
    return GEMV_ENTRIES + tuple(MatmulEntry(t, GROUPED, f) for f in (False, True) for t in (False, True))


def entry_mode(spec: Spec, per_block: int, group_size: int, gather: bool, chunks: int) -> int:
    """The entry point's mode for a weight (group_size -1: one group) of ``chunks`` chunks of 8 blocks of P."""
    if gather:
        return GATHER
    chunk_k = 8 * per_block
    if grouped_spec(spec) and (group_size <= 0 or group_size % chunk_k == 0) and chunks < MAX_GROUPED_CHUNKS:
        return GROUPED
    return PAIRED if group_size <= 0 or group_size % (2 * per_block) == 0 else DIRECT


def launch_mode(mode: int, tok16: bool, tuning: Tuning = DEFAULT_TUNING) -> int:
    """The entry a launch of a weight of ``mode`` uses: a GROUPED weight (its groups are whole chunks, so PAIRED
    runs it too) takes the GROUPED entries for 9..16 tokens (run_lean with ``Tuning.lean16``, the default, else
    run_grouped) and, with ``Tuning.sums8``, the batched GROUPED entry for 1..8
    (otherwise PAIRED; the ring of run_grouped at 1..8 tokens measured up to 12% slower than PAIRED,
    docs/bench/gemv_speed.json, where the batched entry is 7-13% faster, docs/bench/gemv_speed2.json)."""
    return PAIRED if mode == GROUPED and not tok16 and not tuning.sums8 else mode


#: GROUPED, one group (group size -1, or K within one group): chunks per group past any chunk count, so that no
#: chunk starts another group.
ONE_GROUP_CHUNKS = 1 << 30


def group_chunks(group_size: int, per_block: int, groups: int) -> int:
    """GROUPED: chunks (8 blocks of ``per_block`` codes) per group, the kernel's ``group_chunks`` argument."""
    if group_size <= 0 or groups <= 1:
        return ONE_GROUP_CHUNKS
    return group_size // (8 * per_block)


def group_magic(group_size: int, per_block: int) -> int:
    """GROUPED: ceil(2**32 / chunks per group), so that the kernel's group of chunk c is (c * magic) >> 32 (group
    size -1: one group, magic 0)."""
    if group_size <= 0:
        return 0
    return -(-(1 << 32) // group_chunks(group_size, per_block, 2))


def ring(spec: Spec) -> int:
    """GROUPED: chunks whose loads a warp keeps in flight (16 bytes per lane each); 6 fit 128 registers with
    16 tokens (a ring of 3 measured the same: bytes in flight are not what limits it)."""
    return 6


def unroll(spec: Spec, tuning: Tuning = DEFAULT_TUNING) -> int:
    """Chunks whose weights a warp loads before converting any: 4 x 16 bytes per lane, 2 x 48 for 3-word blocks."""
    if tuning.unroll:
        return tuning.unroll
    return 4 if spec.words == 1 else 2


def stages(spec: Spec, tuning: Tuning = DEFAULT_TUNING) -> int:
    """Batches of weights a warp keeps in flight through shared memory (cp.async; 0: in registers, double
    buffered), at most 32 KB a block (4 warps: 4 batches of one-word chunks, 2 of three-word ones) and at most what
    the 48 KB of static shared memory leave beside the warps' reduction (1 KB a warp) and the staged scales."""
    budget = min(32 << 10, (44 << 10) - tuning.warps * 1024)
    most = budget // (tuning.warps * unroll(spec, tuning) * spec.words * 512)
    return min(tuning.stages, most) if tuning.stages > 1 and most > 1 else 0


def min_blocks(spec: Spec, tuning: Tuning = DEFAULT_TUNING) -> int:
    """Blocks an SM the register allocation must allow: 4 x 128 threads (at most 128 registers) with 4 warps a
    block, as many threads an SM with other warp counts (at least one block: a width past min_blocks x WARPS warps,
    which wide_warps never gives, gets fewer registers a thread and spills); 2-bit (16 codes a block) and 3-word
    blocks hold more per chunk and would spill at that, so half. ``Tuning.mb16`` counts blocks of ``Tuning.warps``."""
    if tuning.min_blocks:
        return tuning.min_blocks
    return max(1, (4 if spec.words == 1 and spec.per_word <= 8 else 2) * WARPS // tuning.warps)


#: Chunks a warp of a wide block streams at most where the tiles leave SMs idle, and the most a warp streams before
#: choose_gemv_splits splits its tile along K: past it the partials' round trip through the workspace (about 1.5 µs
#: on the H100) costs less than the idle SMs or the longer warps (8192 x 1024, 64 tiles, CUDA graphs: on 16 warps, 8
#: chunks a warp, 5.73 µs unsplit, 6.32 in 2 splits; on 8 warps, 16 chunks a warp, 6.88 unsplit, 5.93 in 4 splits;
#: docs/bench/gemv_warps_h100.json).
SPLIT_CHUNKS_A_WARP = 8


def block_warps(spec: Spec, n_tiles: int, chunks: int, sms: int) -> int:
    """Warps a block of the GEMV for a weight of ``n_tiles`` 16-row tiles of ``chunks`` chunks on a GPU of ``sms``
    SMs: the widest of wide_warps(spec) whose blocks, one tile each, fit one wave at the kept shape's registers a
    thread (an SM holds min_blocks x WARPS warps of them) and need no split (every SM busy, or at most
    SPLIT_CHUNKS_A_WARP chunks a warp), else WARPS (its blocks split long K ranges across idle SMs). On the H100 in
    CUDA graphs of back-to-back calls (µs a call, AWQ int4 g128, M = 1; docs/bench/gemv_warps_h100.json): 4096 x 1024
    (64 tiles) 5.19 on 4 warps in 8 splits, 3.83 on 16 warps unsplit; 4096 x 2048 5.89 / 4.43; 8192 x 1024 5.94 /
    5.73; 4096 x 4096 (256 tiles) 8.53 in 2 splits, 6.83 on 8 warps unsplit; 14336 x 4096 17.64 / 15.96. Past one
    wave of 8-warp blocks (4096 x 6144's 384 tiles: 9.14 on 4 warps, 10.64-12.20 on 8) the 4-warp blocks stay."""
    for warps in wide_warps(spec):
        fits = n_tiles <= sms * (warps_an_sm(spec) // warps)
        if fits and (n_tiles >= sms or chunks <= warps * SPLIT_CHUNKS_A_WARP):
            return warps
    return WARPS


def warps_an_sm(spec: Spec) -> int:
    """Warps an SM holds at the kept shape's registers a thread (min_blocks x WARPS: 16 for most specs, 8 for 2-bit
    and 3-word blocks)."""
    return min_blocks(spec) * WARPS


def wide_warps(spec: Spec) -> tuple[int, ...]:
    """The WIDE_WARPS a block of this spec's GEMV may have: those within warps_an_sm(spec)."""
    return tuple(w for w in WIDE_WARPS if w <= warps_an_sm(spec))


def entry_min_blocks(spec: Spec, e: MatmulEntry, tuning: Tuning = DEFAULT_TUNING) -> int:
    """The register cap of an entry point: ``Tuning.mb16`` for run_lean at 9..16 tokens (and its flat grid), whose
    16-token sums spill at 128 registers, min_blocks(spec) elsewhere."""
    lean16 = e.mode == GROUPED and e.tok16 and (tuning.lean16 or e.flat)
    return tuning.mb16 if lean16 and tuning.mb16 else min_blocks(spec, tuning)


def gemv_entry_name(spec: Spec, e: MatmulEntry) -> str:
    mode = ("paired", "direct", "gather", "grouped")[e.mode]
    return f"dqgen_mm_{spec.name}_m{16 if e.tok16 else 8}_{mode}{'_flat' if e.flat else ''}"


def _check_grouped(plan: Plan, diffs: list[str]) -> None:
    """GROUPED runs the convert stage alone and multiplies the sums by the scale: that is the spec's value only
    where output pair i of the scale stage is diffs[i] (convert's d[i]) times scale register i."""
    by_dst = {op.dst: op for op in plan.ops if op.stage == "scale"}
    for i, out in enumerate(plan.outputs):
        op = by_dst.get(out)
        if op is None or [str(r) for r in op.reads[:2]] != [diffs[i], str(plan.scale_regs[i])]:
            raise ValueError(f"plan {plan.strategy}: output {out} is not d[{i}] * s[{i}]: GROUPED cannot scale sums")


@dataclass(frozen=True)
class GemvConfig(KernelConfig):
    """The fused GEMV of a compiled spec under one code-shape ``tuning``: ``entry``'s entry point (None: the source
    alone, every entry point in it). Entries of one (artifact, tuning) share one source and module. Equal on (the
    artifact's key, entry, tuning)."""

    family: ClassVar[str] = "gemv"
    pdl: ClassVar[bool] = True
    template: ClassVar[str] = "matmul.cu.j2"

    artifact: Artifact = field(compare=False, repr=False)
    entry: MatmulEntry | None = None
    tuning: Tuning = DEFAULT_TUNING
    key: str = field(init=False)

    def __post_init__(self) -> None:
        refuse_integer_target(self.artifact.spec, "GEMV")
        object.__setattr__(self, "key", self.artifact.key)
        if self.entry is not None and self.entry not in entries(self.artifact.spec):
            raise ValueError(f"entry {self.entry}: not an entry point of {self.artifact.spec.name}'s GEMV")

    @property
    def spec(self) -> Spec:
        return self.artifact.spec

    @property
    def name(self) -> str:
        if self.entry is None:
            raise ValueError(f"{self.spec.name}: the GEMV source has several entry points; name one")
        return gemv_entry_name(self.spec, self.entry)

    @property
    def threads(self) -> int:
        return self.tuning.warps * 32

    @property
    def min_sm(self) -> int:
        return self.spec.sm

    @property
    def split_k(self) -> SplitK:
        """Blocks of one n-tile sum their partials through the workspace, the last to arrive adding them in order."""
        return "flat" if self.entry is not None and self.entry.flat else "last_arriver"

    @classmethod
    def supports(cls, spec: Spec) -> bool:
        # every spec the pipeline solves to fp16 / bf16 (the converter runs on the weights the mma consumes)
        return not spec.integer_target

    @property
    def render_key(self) -> GemvConfig:
        return self if self.entry is None else replace(self, entry=None)

    def context(self) -> dict[str, Any]:
        return _context(self.spec, self.artifact.plan, self.tuning)

    @property
    def source_name(self) -> str:
        return f"{self.spec.name}_matmul.cu"

    @property
    def what(self) -> str:
        entry = "(every entry point)" if self.entry is None else self.name
        return f"{self.spec.name} (spec targets {self.spec.arch}), {self.family} kernel {entry}"


def render_matmul(artifact: Artifact, tuning: Tuning = DEFAULT_TUNING) -> str:
    """The GEMV source of a compiled spec with every entry point (memoized on the config)."""
    return GemvConfig(artifact, None, tuning).source()


def _context(spec: Spec, plan: Plan, tuning: Tuning) -> dict[str, Any]:
    ctx = context(spec, plan)
    if grouped_spec(spec):
        _check_grouped(plan, [str(d) for d in ctx["diffs"]])
    ctx.update(
        warps=tuning.warps,
        unroll=unroll(spec, tuning),
        min_blocks=min_blocks(spec, tuning),
        mma_type="bf16" if spec.target.value == "bf16" else "f16",
        entries=[
            {
                "tok16": e.tok16,
                "mode": e.mode,
                "flat": e.flat,
                "entry": gemv_entry_name(spec, e),
                "min_blocks": entry_min_blocks(spec, e, tuning),
            }
            for e in entries(spec)
        ],
        grouped=grouped_spec(spec),
        ring=ring(spec),
        wload=tuning.wload,
        xhoist=tuning.xhoist,
        scale_once=tuning.scale_once,
        stages=stages(spec, tuning),
        lean8=tuning.lean8,
        lean16=tuning.lean16,
        lean_accs=tuning.accs,
        lean_ahead=tuning.ahead,
        lean_xu16=tuning.xu16,
        lean_prefetch=tuning.prefetch,
    )
    return ctx
