"""The int8 GRU's kernels: the per-step cell (templates/gru_cell.cu.j2) and the persistent kernel that runs every
step in one cooperative launch (templates/gru_persist.cu.j2), both over the one rendering of the integer cell
(templates/gru_cell_math.cuh.j2). A model's derived constants (multipliers, shifts, zero points, tables: built
by dqgen.gru.kernel.cell_context) are baked into the source, so they are part of the config."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .family import SHARED_OPTIN, KernelConfig

CELL_KERNEL_NAME = "dqgen_gru_cell"
CELL_BLOCK = 256
PERSIST_KERNEL_NAME = "dqgen_gru_persist"
PERSIST_BLOCK = 512  # 16 warps: more h loads in flight while staging and more warps to hide the dot loop's latency
#: More hidden units per thread share each h load among more R rows but hold 3 accumulators each in registers.
MAX_UNITS_PER_THREAD = 4


def padded_hidden(hidden: int) -> int:
    """K of the shared R rows and staged h rows: a multiple of 32 bytes keeps the int4 reads conflict-free."""
    return (hidden + 31) // 32 * 32


def constants_key(constants: Mapping[str, Any]) -> str:
    """A content key of a model's cell constants (numbers, strings and lists of them: their repr is canonical)."""
    return hashlib.sha256(repr(sorted(constants.items())).encode()).hexdigest()


@dataclass(frozen=True)
class _GruConfig(KernelConfig):
    constants: Mapping[str, Any] = field(compare=False, repr=False)
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", constants_key(self.constants))

    @property
    def hidden(self) -> int:
        return int(self.constants["hidden"])

    @property
    def min_sm(self) -> int:
        return 80  # as the GRU tests and the PTX table compile it (dp4a and the 16-byte int4 loads run earlier)


@dataclass(frozen=True)
class GruCellConfig(_GruConfig):
    """The per-step cell of one model (its constants)."""

    family: ClassVar[str] = "gru_cell"
    template: ClassVar[str] = "gru_cell.cu.j2"

    @property
    def name(self) -> str:
        return CELL_KERNEL_NAME

    @property
    def threads(self) -> int:
        return CELL_BLOCK

    def context(self) -> dict[str, Any]:
        return {"name": CELL_KERNEL_NAME, **self.constants}


@dataclass(frozen=True)
class GruPersistConfig(_GruConfig):
    """The persistent kernel of one model with ``jt`` hidden units per thread; a launch sizes its shared memory
    (R's slice and the staged h rows) for its batch, up to the device's opt-in ceiling."""

    family: ClassVar[str] = "gru_persist"
    template: ClassVar[str] = "gru_persist.cu.j2"

    jt: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.jt <= MAX_UNITS_PER_THREAD:
            raise ValueError(f"jt: expected 1..{MAX_UNITS_PER_THREAD} hidden units per thread, got {self.jt}")

    @property
    def name(self) -> str:
        return PERSIST_KERNEL_NAME

    @property
    def threads(self) -> int:
        return PERSIST_BLOCK

    @property
    def shared_bytes(self) -> int:
        return SHARED_OPTIN

    def context(self) -> dict[str, Any]:
        # h rows are staged in the widest words that H divides into (every row stays aligned to its word)
        wide = self.hidden % 16 == 0
        vec = (
            {"vec": 16, "vtype": "int4", "vzero": "make_int4(0, 0, 0, 0)"}
            if wide
            else {"vec": 8, "vtype": "int2", "vzero": "make_int2(0, 0)"}
        )
        return dict(
            name=PERSIST_KERNEL_NAME,
            jt=self.jt,
            hp=padded_hidden(self.hidden),
            block=PERSIST_BLOCK,
            **vec,
            **self.constants,
        )
