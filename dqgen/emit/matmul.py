"""Render the fused GEMV kernel (templates/matmul.cu.j2) of a spec: the spec's converter inside an mma.sync
matmul over the prepacked weights of dqgen.layout.matmul."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.spec import Spec
from ..ir.plan import Plan
from .pipeline import Artifact
from .render import context, template_env

#: Warps per block (they split a tile's K range; reduced in shared memory).
WARPS = 4


@dataclass(frozen=True)
class MatmulEntry:
    tok16: bool  # 9..16 tokens: two mmas per A fragment
    gather: bool  # x gathered through perm, groups from block_group (act-order, groups that are no whole blocks)


ENTRIES = tuple(MatmulEntry(t, g) for g in (False, True) for t in (False, True))


def unroll(spec: Spec) -> int:
    """Chunks whose weights a warp loads before converting any: 4 x 16 bytes per lane, 2 x 48 for 3-word blocks."""
    return 4 if spec.words == 1 else 2


def entry_name(spec: Spec, e: MatmulEntry) -> str:
    return f"dqgen_mm_{spec.name}_m{16 if e.tok16 else 8}{'_gather' if e.gather else ''}"


_SOURCES: dict[str, str] = {}


def render_matmul(artifact: Artifact) -> str:
    """The matmul kernel source of a compiled spec with every entry point (memoized on the artifact's key)."""
    hit = _SOURCES.get(artifact.key)
    if hit is None:
        hit = _SOURCES[artifact.key] = _render(artifact.spec, artifact.plan)
    return hit


def _render(spec: Spec, plan: Plan) -> str:
    ctx = context(spec, plan, only=[])
    ctx.update(
        warps=WARPS,
        unroll=unroll(spec),
        mma_type="bf16" if spec.target.value == "bf16" else "f16",
        entries=[{"tok16": e.tok16, "gather": e.gather, "entry": entry_name(spec, e)} for e in ENTRIES],
    )
    return template_env().get_template("matmul.cu.j2").render(**ctx)
