"""The Hopper W4A8 GEMM (templates/w4a8_gemm90.cu.j2) of a W4A8 spec (an int4 source with the ``s8`` target,
dqgen/specs/w4a8/): int8 per-token activations times 4-bit weights in the prepacked W4A8 layout (dqgen.layout.w4a8),
converted in registers by the spec's proven s8 Plan into wgmma's register A operand, int32 sums per 128-k tile
rescaled in fp32 (the order of dqgen.check.w4a8_model). Swap-AB: the weights are wgmma's m side (64 features a
warpgroup block), the tokens its n."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from ..core.spec import Spec
from ..emit.pipeline import compile_artifact
from ..emit.render import context
from ..layout.w4a8 import w4a8_converter_spec
from .family import Mainloop, SpecEntriesConfig
from .gemm90 import BLOCK_RESERVED_BYTES, PRODUCER_REGS, SM_SHARED_BYTES, consumer_regs

W4A8Out = Literal["f16", "bf16"]
#: wgmma's n (tokens a CTA) of each configuration.
W4A8_TOKEN_TILES: Final = (8, 16, 32, 64, 128)


def w4a8_stage_bytes(bn: int, blocks: int, zeros: bool) -> int:
    """One stage (the template's stage_bytes<BN, NB>): x's rows, the blocks' words, scales and zero words."""
    raw = bn * 128 + blocks * (2 * 2048 + 256 * (2 if zeros else 1))
    return -(-raw // 1024) * 1024


@dataclass(frozen=True)
class W4A8Tile:
    """One CTA shape: ``bn`` tokens, ``consumers`` warpgroups of ``mw`` 64-feature blocks, ``stages`` stages,
    ``min_blocks`` CTAs an SM. A consumer thread keeps int32 sums and fp32 totals (mw x bn registers) and two A
    register sets (2 x 16 mw: the next tile converts under this one's wgmmas)."""

    bn: int
    consumers: int
    mw: int
    stages: int
    min_blocks: int

    def __post_init__(self) -> None:
        if self.bn not in W4A8_TOKEN_TILES:
            raise ValueError(f"W4A8Tile.bn: expected one of {W4A8_TOKEN_TILES}, got {self.bn}")
        if self.consumers not in (1, 2) or self.mw not in (1, 2) or self.mw * self.bn > 128:
            raise ValueError(f"W4A8Tile: consumers, mw in 1..2 and mw x bn <= 128, got {self}")
        if self.stages < 2:  # the consumers wait for tile i + 1's stage before they release tile i's
            raise ValueError(f"W4A8Tile.stages: the look-ahead needs at least 2 stages, got {self.stages}")
        if self.shared_bytes(True) > SM_SHARED_BYTES // self.min_blocks - BLOCK_RESERVED_BYTES:
            raise ValueError(f"W4A8Tile: {self} does not fit {self.min_blocks} CTAs an SM")

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def features(self) -> int:
        return 64 * self.consumers * self.mw

    @property
    def tag(self) -> str:
        return f"n{self.bn}c{self.consumers}m{self.mw}s{self.stages}b{self.min_blocks}"

    def shared_bytes(self, zeros: bool) -> int:
        return 1024 + self.stages * w4a8_stage_bytes(self.bn, self.consumers * self.mw, zeros) + self.stages * 16


#: Up to 32 tokens one consumer warpgroup of two 64-feature blocks and two CTAs an SM; 64 and 128 tokens two
#: warpgroups of one block, one CTA an SM (n64 as one warpgroup of two blocks spills with the second A register set;
#: devtools/w4a8_tune.py on H100: n64c2m1 fastest at M = 64, n128c2m1 at M = 128 / 256).
W4A8_TILES: Final = (
    W4A8Tile(8, 1, 2, 8, 2),
    W4A8Tile(16, 1, 2, 8, 2),
    W4A8Tile(32, 1, 2, 6, 2),
    W4A8Tile(64, 2, 1, 8, 1),
    W4A8Tile(128, 2, 1, 8, 1),
)


def choose_w4a8_tile(m: int) -> W4A8Tile:
    """The fewest tokens that hold M (128 past that: several token tiles)."""
    return next((t for t in W4A8_TILES if t.bn >= m), W4A8_TILES[-1])


@dataclass(frozen=True)
class W4A8Gemm90Config(SpecEntriesConfig):
    """The W4A8 GEMM of ``spec`` (a W4A8 spec: int4 source, s8 target) writing ``out`` (fp16 / bf16), with
    ``entries``' CTA shapes as entry points of one source."""

    family: ClassVar[str] = "w4a8_gemm90"
    template: ClassVar[str] = "w4a8_gemm90.cu.j2"
    what_source: ClassVar[str] = "W4A8 GEMM source"
    arch_specific: ClassVar[bool] = True

    entries: tuple[W4A8Tile, ...] = W4A8_TILES
    out: W4A8Out = "f16"

    @classmethod
    def supports(cls, spec: Spec) -> bool:
        try:
            w4a8_converter_spec(spec)
        except ValueError:
            return False
        return True

    @classmethod
    def one(cls, spec: Spec, entry: Any, out: W4A8Out = "f16") -> Any:
        return cls(spec, (entry,), out)

    @property
    def name(self) -> str:
        return self.entry_name(self.entry)

    def entry_name(self, tile: W4A8Tile) -> str:
        return f"dqgen_w4a8_{self.spec.name}_{self.out}_{tile.tag}"

    @property
    def mainloop(self) -> Mainloop:
        t = self.entry
        return Mainloop("wgmma_tma_sm90", (t.bn, t.features, 128), (t.consumers, 4), t.stages, swap_ab=True)

    @property
    def threads(self) -> int:
        return int(self.entry.threads)

    @property
    def shared_bytes(self) -> int:
        return max(t.shared_bytes(self.spec.zeros.packed) for t in self.entries)

    @property
    def min_sm(self) -> int:
        return 90

    @property
    def source_name(self) -> str:
        return f"{self.spec.name}_{self.out}_{self.family}.cu"

    def context(self) -> dict[str, Any]:
        conv = w4a8_converter_spec(self.spec)
        ctx = context(conv, compile_artifact(conv).plan)
        zeros = self.spec.zeros.packed
        ctx.update(
            spec_name=self.spec.name,
            out=self.out,
            ns=sorted({t.bn for t in self.entries}),
            entries=[
                {
                    "entry": self.entry_name(t),
                    "bn": t.bn,
                    "consumers": t.consumers,
                    "mw": t.mw,
                    "stages": t.stages,
                    "threads": t.threads,
                    "min_blocks": t.min_blocks,
                    "regs_producer": PRODUCER_REGS,
                    "regs_consumer": consumer_regs(t.consumers, t.min_blocks),
                    "shared_bytes": t.shared_bytes(zeros),
                }
                for t in self.entries
            ],
        )
        return ctx
