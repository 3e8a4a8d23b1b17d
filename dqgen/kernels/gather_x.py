"""The activation gather of the Hopper GEMM's gathered weights (templates/gather_x.cu.j2): x' [M, slots] =
x[:, perm], 0 where perm is -1, so that the GEMM reads x' by TMA in the weight's slot order (act-order /
desc_act layers, groups that are no whole 64-k tiles: dqgen.layout.gemm's "gather" slots).

One source for fp16 and bf16 (a 16-bit copy: the bits are moved, never converted). A thread writes VEC consecutive
slots of one row (one 16-byte store of x', two 16-byte loads of perm) from VEC 2-byte loads of x's row: the slot
count is a whole number of 64-k tiles, so a row of x' is whole vectors and stays 16-byte aligned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from .family import KernelConfig

#: Slots a thread writes: one 16-byte vector of 16-bit elements.
VEC: Final = 8
#: Blocks a launch takes at most; a block runs vectors blockIdx.x, + gridDim.x, ... (a grid-stride loop).
MAX_BLOCKS: Final = 65535


@dataclass(frozen=True)
class GatherXConfig(KernelConfig):
    """The gather's one entry point, ``block`` threads a block (the only thing it is specialised on)."""

    family: ClassVar[str] = "gather_x"
    template: ClassVar[str] = "gather_x.cu.j2"

    block: int = 256

    def __post_init__(self) -> None:
        if self.block % 32 or not 32 <= self.block <= 1024:
            raise ValueError(f"GatherXConfig.block: expected a multiple of 32 in 32..1024, got {self.block}")

    @property
    def name(self) -> str:
        return f"dqgen_gather_x_b{self.block}"

    @property
    def threads(self) -> int:
        return self.block

    @property
    def min_sm(self) -> int:
        return 80  # the GEMMs it feeds: nothing in it needs more

    def context(self) -> dict[str, Any]:
        return {"entry": self.name, "threads": self.block, "vec": VEC}

    def grid(self, M: int, slots: int) -> int:
        """Blocks of a launch over M rows of ``slots`` slots (a multiple of VEC): one vector a thread, at most
        MAX_BLOCKS blocks (the rest by the grid-stride loop)."""
        if slots % VEC or M < 1:
            raise ValueError(f"gather: expected M >= 1 rows of a multiple of {VEC} slots, got M={M}, slots={slots}")
        return max(1, min(MAX_BLOCKS, -(-M * (slots // VEC) // self.block)))


GATHER_X: Final = GatherXConfig()
