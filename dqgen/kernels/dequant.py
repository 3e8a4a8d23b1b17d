"""The standalone dequantize kernel (templates/kernel.cu.j2): a spec's proven converter inside a grid of tiles,
one entry point per launch variant (how many words / columns and rows a thread takes, aligned or not, streaming
stores or not)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.spec import Spec
from ..emit.pipeline import Artifact
from ..emit.render import BLOCK, context, template_env
from ..ir.plan import Plan
from .family import KernelConfig, refuse_integer_target


@dataclass(frozen=True)
class DequantVariant:
    """One instantiated entry point: VEC words (N-axis: strided by the block) or columns (K-axis)
    per thread, ROWS rows (K-axis: word-rows) per thread, 16/8-byte accesses when aligned."""

    vec: int
    rows: int
    aligned: bool = True
    stream: bool = False  # output stores with the evict-first (.cs) cache hint


VARIANTS_N = [DequantVariant(v, r, a) for a in (True, False) for v, r in ((1, 1), (1, 2), (1, 4), (1, 8), (2, 4))] + [
    DequantVariant(v, r, True, True) for v, r in ((1, 4), (1, 8), (1, 16), (2, 4), (2, 8))
]
VARIANTS_K = [DequantVariant(8, r, a) for a in (True, False) for r in (1, 2, 4)] + [
    DequantVariant(8, r, True, True) for r in (2, 4)
]
# Multi-word blocks (3-bit: 32 rows, 16 output pairs per column and block): 4 columns per thread keep a
# block's outputs in registers; ROWS counts blocks.
VARIANTS_KB = [DequantVariant(4, r, a) for a in (True, False) for r in (1, 2)] + [
    DequantVariant(4, r, True, True) for r in (1, 2)
]


def variants(spec: Spec) -> list[DequantVariant]:
    if spec.packing.axis == "N":
        return VARIANTS_N
    return VARIANTS_KB if spec.words > 1 else VARIANTS_K


def kernel_name(spec: Spec, v: DequantVariant) -> str:
    return f"dqgen_{spec.name}_v{v.vec}_r{v.rows}{'' if v.aligned else '_u'}{'_cs' if v.stream else ''}"


@dataclass(frozen=True)
class DequantConfig(KernelConfig):
    """The dequantize kernel of a compiled spec: ``variant``'s entry point alone (what a call compiles: NVRTC's time
    grows with the entry points), or with ``variant`` None every variant's in one source (what ``dqgen build``
    writes and compiles). Equal on (the artifact's key, the variant)."""

    family: ClassVar[str] = "dequant"
    template: ClassVar[str] = "kernel.cu.j2"

    artifact: Artifact = field(compare=False, repr=False)
    variant: DequantVariant | None = None
    key: str = field(init=False)

    def __post_init__(self) -> None:
        refuse_integer_target(self.artifact.spec, "dequantize kernel")
        object.__setattr__(self, "key", self.artifact.key)
        if self.variant is not None and self.variant not in variants(self.artifact.spec):
            raise ValueError(
                f"variant {self.variant} is not instantiated for {self.artifact.spec.name}; "
                "choose one of dqgen.kernels.dequant.variants(spec)"
            )

    @property
    def spec(self) -> Spec:
        return self.artifact.spec

    @property
    def variants(self) -> list[DequantVariant]:
        """The entry points of the source: the one variant, or every variant of the spec."""
        return variants(self.spec) if self.variant is None else [self.variant]

    @property
    def name(self) -> str:
        if self.variant is None:
            raise ValueError(f"{self.spec.name}: the whole variant set has no single entry point; name a variant")
        return kernel_name(self.spec, self.variant)

    @property
    def threads(self) -> int:
        return BLOCK

    @property
    def min_sm(self) -> int:
        return self.spec.sm

    @classmethod
    def supports(cls, spec: Spec) -> bool:
        return not spec.integer_target  # every spec the pipeline solves to fp16 / bf16

    def context(self) -> dict[str, Any]:
        return dequant_context(self.spec, self.artifact.plan, self.variants)

    @property
    def source_name(self) -> str:
        return f"{self.spec.name}.cu"

    def fallbacks(self) -> tuple[KernelConfig, ...]:
        """A variant's entry point is also in the whole set's module, which ``dqgen build`` leaves in the cache."""
        return () if self.variant is None else (DequantConfig(self.artifact),)

    @property
    def what(self) -> str:
        entry = "(every variant)" if self.variant is None else self.name
        return f"{self.spec.name} (spec targets {self.spec.arch}), {self.family} kernel {entry}"


def dequant_context(spec: Spec, plan: Plan, only: Sequence[DequantVariant] | None = None) -> dict[str, Any]:
    """The template's values: the converter's, and the entry points of ``only`` (every variant by default)."""
    rows = [
        {"vec": v.vec, "rows": v.rows, "aligned": v.aligned, "stream": v.stream, "entry": kernel_name(spec, v)}
        for v in (variants(spec) if only is None else only)
    ]
    return context(spec, plan, rows)


def render_kernel(spec: Spec, plan: Plan, only: Sequence[DequantVariant] | None = None) -> str:
    """The kernel source of a solved plan (not memoized: DequantConfig.source() is, for a compiled artifact)."""
    return template_env().get_template(DequantConfig.template).render(**dequant_context(spec, plan, only))


def whole_source(artifact: Artifact) -> str:
    """Every variant's entry point in one source: what ``dqgen build`` writes and compiles."""
    return DequantConfig(artifact).source()
