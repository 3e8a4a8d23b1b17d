"""The tensor-core GEMM (templates/gemm.cu.j2) of a spec: ldmatrix + mma.sync.m16n8k16 over a multistage
cp.async pipeline, the weights in TensorRT-LLM's layout (dqgen.layout.gemm), converted by the proven Plan of
``converter_spec(spec)`` (one word of that layout) between the shared-memory load and the mma."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.spec import Spec
from ..emit.pipeline import compile_artifact
from ..emit.render import context
from ..layout.gemm import TILE_K, TILE_N
from ..layout.gemm_trt import WEIGHT_BITS, columns_interleaved, converter_spec
from .family import Epilogue, Mainloop, MainloopKind, SpecEntriesConfig, SplitK

#: Bytes of one pipeline stage's scales: TILE_N 16-bit values; zeros take 256 bytes more when present.
SCALE_BYTES = TILE_N * 2
ZERO_BYTES = 256


@dataclass(frozen=True)
class GemmConfig:
    """One CTA tile: ``bm`` rows of x x TILE_N columns, ``wm`` x ``wn`` warps, ``stages`` cp.async stages."""

    bm: int
    wm: int
    wn: int
    stages: int
    min_blocks: int  # CTAs per SM the register allocation must allow (__launch_bounds__)
    kind: MainloopKind = "mma_sync_sm80"  # the template has this main loop alone

    @property
    def threads(self) -> int:
        return self.wm * self.wn * 32

    @property
    def mainloop(self) -> Mainloop:
        return Mainloop(self.kind, (self.bm, TILE_N, TILE_K), (self.wm, self.wn), self.stages)

    @property
    def tag(self) -> str:
        """The config in an entry point's name (several configs of one BM may be rendered side by side)."""
        kind = "" if self.kind == "mma_sync_sm80" else f"_{self.kind}"
        return f"m{self.bm}w{self.wm}x{self.wn}s{self.stages}b{self.min_blocks}{kind}"

    def shared_bytes(self, bits: int, has_zeros: bool) -> int:
        """Dynamic shared memory of a launch: per stage the A tile, the B lines, the scales (and zeros)."""
        b_lines = TILE_N // columns_interleaved(bits)
        per_stage = self.bm * 128 + b_lines * 128 + SCALE_BYTES + (ZERO_BYTES if has_zeros else 0)
        return self.stages * per_stage


#: The tile configs, smallest M first; each warp covers its own 32 of the CTA's 128 columns for all BM rows, so it
#: converts only its own B fragments and issues BM / 16 m16 mmas per converted fragment. 16 x 128 and 32 x 128
#: hold M <= 16 / <= 32 with no mma on rows past M (a 64-row tile spends 3/4 of its mmas on zero rows at M = 16)
#: and are light, 4-5 CTAs per SM keeping enough cp.async stages in flight; 64 x 128 (3 per SM) serves every
#: larger M: on the H100 it beat 128 x 128 with 8 warps (2 x 4, each fragment converted twice) by 4-36% at
#: M = 512..4096 and 256 x 128 in all but one case, and two 64-row tiles beat one 128-row tile at M = 128
#: (docs/bench/gemm_speed.json, docs/performance.md's notes).
CONFIGS = (
    GemmConfig(16, 1, 4, 4, 5),
    GemmConfig(32, 1, 4, 4, 4),
    GemmConfig(64, 1, 4, 4, 3),
)


@dataclass(frozen=True)
class GemmEntry:
    config: GemmConfig
    gather: bool  # x through perm with plain loads (act-order, padded groups, unaligned x)


GEMM_ENTRIES = tuple(GemmEntry(c, g) for c in CONFIGS for g in (False, True))


def supports(spec: Spec) -> bool:
    """Whether the GEMM takes this spec: 4- or 8-bit integer codes without block scales (TensorRT-LLM's layout)."""
    return (
        spec.source.bits in WEIGHT_BITS
        and spec.source.kind.integer
        and not spec.scales.block
        and spec.words == 1
        and not spec.integer_target  # s8 lanes feed the W4A8 GEMM, not this fp16 / bf16 one
    )


def gemm_entry_name(spec: Spec, e: GemmEntry) -> str:
    return f"dqgen_gemm_{spec.name}_{e.config.tag}{'_gather' if e.gather else ''}"


def zero_bytes(spec: Spec) -> int:
    """Bytes of one staged zero: 1 (a packed integer zero field), 2 (a 16-bit float zero) or 0 (no zeros)."""
    return 1 if spec.zeros.packed else 2 if spec.zeros.dense else 0


def has_zeros(spec: Spec) -> bool:
    """Whether a launch stages zeros (packed integer zero fields or 16-bit float zeros)."""
    return bool(spec.zeros.packed or spec.zeros.dense)


@dataclass(frozen=True)
class WeightOnlyGemmConfig(SpecEntriesConfig):
    """What the weight-only GEMMs' configs share, whichever main loop: the specs they take, the deterministic
    split-K reduction, and an epilogue that adds a bias (the group scales and zeros act in the main loop, on the
    converted weights)."""

    @property
    def split_k(self) -> SplitK:
        return "last_arriver"

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(self.spec.target.value, bias=True, row_scale=False, col_scale=False)

    @classmethod
    def supports(cls, spec: Spec) -> bool:
        return supports(spec)


@dataclass(frozen=True)
class GemmKernelConfig(WeightOnlyGemmConfig):
    """The tensor-core GEMM of ``spec`` with ``entries``' entry points in one source (a launch compiles only the
    one it runs; all of GEMM_ENTRIES by default). ValueError naming the spec field for specs that are not 4- or 8-bit
    integer codes."""

    family: ClassVar[str] = "gemm"
    template: ClassVar[str] = "gemm.cu.j2"
    what_source: ClassVar[str] = "GEMM source"

    entries: tuple[GemmEntry, ...] = GEMM_ENTRIES

    @property
    def name(self) -> str:
        return gemm_entry_name(self.spec, self.entry)

    @property
    def mainloop(self) -> Mainloop:
        return self.entry.config.mainloop

    @property
    def threads(self) -> int:
        return self.entry.config.threads

    @property
    def shared_bytes(self) -> int:
        return max(e.config.shared_bytes(self.spec.source.bits, has_zeros(self.spec)) for e in self.entries)

    @property
    def min_sm(self) -> int:
        return max(self.spec.sm, *(e.config.mainloop.min_sm for e in self.entries))

    def context(self) -> dict[str, Any]:
        kind = self.spec.source.kind
        if not kind.integer:  # the layout holds any 4/8 bits
            raise ValueError(
                f"[source.kind] the sm_80 GEMM takes integer codes (unsigned, signed, biased), got {kind.value!r}"
                " (the Hopper GEMM takes 4- and 8-bit float and codebook codes: dqgen.kernels.gemm90)"
            )
        conv = converter_spec(self.spec)
        return _context(self.spec, conv, compile_artifact(conv).plan, self.entries)


def render_gemm(spec: Spec, entries: tuple[GemmEntry, ...] = GEMM_ENTRIES) -> str:
    """The GEMM source of ``spec`` with the given entry points (all by default), memoized on the config."""
    return GemmKernelConfig(spec, tuple(entries)).source()


def _context(spec: Spec, conv: Spec, plan: object, entries: tuple[GemmEntry, ...]) -> dict[str, Any]:
    for e in entries:
        if e.config.kind != "mma_sync_sm80":
            raise ValueError(
                f"GemmConfig.kind: gemm.cu.j2 has the mma_sync_sm80 main loop alone, got {e.config.kind!r}"
            )
    ctx = context(conv, plan)  # type: ignore[arg-type]
    bits = conv.source.bits
    per_word = conv.per_word
    ctx.update(
        spec_name=spec.name,
        cols=columns_interleaved(bits),
        blocks=TILE_K // (4 * per_word),
        zero_bytes=zero_bytes(conv),
        mma_type="bf16" if conv.target.value == "bf16" else "f16",
        entries=[
            {
                "entry": gemm_entry_name(spec, e),
                "bm": e.config.bm,
                "wm": e.config.wm,
                "wn": e.config.wn,
                "stages": e.config.stages,
                "threads": e.config.threads,
                "min_blocks": e.config.min_blocks,
                "gather": e.gather,
                "shared_bytes": e.config.shared_bytes(bits, has_zeros(spec)),
            }
            for e in entries
        ],
    )
    return ctx
