"""Render the tensor-core GEMM (templates/gemm.cu.j2) of a spec: ldmatrix + mma.sync.m16n8k16 over a multistage
cp.async pipeline, the weights in TensorRT-LLM's layout (dqgen.layout.gemm), converted by the proven Plan of
``converter_spec(spec)`` (one word of that layout) between the shared-memory load and the mma."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.spec import Spec
from ..layout.gemm import TILE_K, TILE_N
from ..layout.gemm_trt import columns_interleaved, converter_spec
from .pipeline import compile_artifact
from .render import context, template_env

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

    @property
    def threads(self) -> int:
        return self.wm * self.wn * 32

    @property
    def tag(self) -> str:
        """The config in an entry point's name (several configs of one BM may be rendered side by side)."""
        return f"m{self.bm}w{self.wm}x{self.wn}s{self.stages}b{self.min_blocks}"

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


ENTRIES = tuple(GemmEntry(c, g) for c in CONFIGS for g in (False, True))


def entry_name(spec: Spec, e: GemmEntry) -> str:
    return f"dqgen_gemm_{spec.name}_{e.config.tag}{'_gather' if e.gather else ''}"


def has_zeros(spec: Spec) -> bool:
    """Whether a launch stages zeros (packed integer zero fields or 16-bit float zeros)."""
    return bool(spec.zeros.packed or spec.zeros.dense)


_SOURCES: dict[tuple[str, tuple[GemmEntry, ...]], str] = {}


def render_gemm(spec: Spec, entries: tuple[GemmEntry, ...] = ENTRIES) -> str:
    """The GEMM source of ``spec`` with the given entry points (all by default; a launch compiles only the one it
    runs), memoized on the converter artifact's key. ValueError (from converter_spec) naming the spec field for
    specs that are not 4- or 8-bit integer codes."""
    conv = converter_spec(spec)
    art = compile_artifact(conv)
    key = (f"{spec.name}:{art.key}", tuple(entries))
    hit = _SOURCES.get(key)
    if hit is None:
        hit = _SOURCES[key] = _render(spec, conv, art.plan, tuple(entries))
    return hit


def _render(spec: Spec, conv: Spec, plan: object, entries: tuple[GemmEntry, ...]) -> str:
    ctx = context(conv, plan, only=[])  # type: ignore[arg-type]
    bits = conv.source.bits
    per_word = conv.per_word
    ctx.update(
        spec_name=spec.name,
        cols=columns_interleaved(bits),
        blocks=TILE_K // (4 * per_word),
        zero_bytes=1 if conv.zeros.packed else 2 if conv.zeros.dense else 0,
        mma_type="bf16" if conv.target.value == "bf16" else "f16",
        entries=[
            {
                "entry": entry_name(spec, e),
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
    return template_env().get_template("gemm.cu.j2").render(**ctx)
