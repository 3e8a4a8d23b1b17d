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


#: How an entry point finds x and a block's group: PAIRED (slot = k, a lane's two blocks of a chunk in one group:
#: group_size -1 or a multiple of 2P), DIRECT (slot = k, a group per block), GATHER (x through perm, groups from
#: block_group: act-order, or groups that are no whole blocks).
PAIRED, DIRECT, GATHER = 0, 1, 2


@dataclass(frozen=True)
class MatmulEntry:
    tok16: bool  # 9..16 tokens: two mmas per A fragment
    mode: int  # PAIRED, DIRECT or GATHER

    @property
    def gather(self) -> bool:
        return self.mode == GATHER


ENTRIES = tuple(MatmulEntry(t, m) for m in (PAIRED, DIRECT, GATHER) for t in (False, True))


def entry_mode(per_block: int, group_size: int, gather: bool) -> int:
    """The entry point's mode for a weight (group_size -1: one group)."""
    if gather:
        return GATHER
    return PAIRED if group_size <= 0 or group_size % (2 * per_block) == 0 else DIRECT


def unroll(spec: Spec) -> int:
    """Chunks whose weights a warp loads before converting any: 4 x 16 bytes per lane, 2 x 48 for 3-word blocks."""
    return 4 if spec.words == 1 else 2


def min_blocks(spec: Spec) -> int:
    return 4 if spec.words == 1 and spec.per_word <= 8 else 2


def entry_name(spec: Spec, e: MatmulEntry) -> str:
    return f"dqgen_mm_{spec.name}_m{16 if e.tok16 else 8}_{('paired', 'direct', 'gather')[e.mode]}"


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
        # resident blocks per SM the register allocation must allow (4 x 128 threads: at most 128 registers);
        # 2-bit (16 codes a block) and 3-word blocks hold more per chunk and would spill at 4
        min_blocks=min_blocks(spec),
        mma_type="bf16" if spec.target.value == "bf16" else "f16",
        entries=[{"tok16": e.tok16, "mode": e.mode, "entry": entry_name(spec, e)} for e in ENTRIES],
    )
    return template_env().get_template("matmul.cu.j2").render(**ctx)
