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


CLUSTER_KERNEL_NAME = "dqgen_gru_cluster"
#: The most CTAs of a cluster: 16 is the H100's non-portable ceiling (8 is portable; the launch opts in).
MAX_CLUSTER = 16
#: The most warps of a CTA of the cluster kernel (one per (m tile, n tile, K part)): at 16 warps ptxas caps a
#: thread at 128 registers and spills a few words; 8 warps keep everything in registers.
CLUSTER_MAX_WARPS = 8
#: Static shared bytes of the cluster kernel (its three tables' copies and two mbarriers) and an SM's shared memory
#: (228 KiB on the H100; each resident CTA also reserves 1 KiB).
CLUSTER_STATIC_SHARED = 3 * 256 + 2 * 8
SM_SHARED = 228 * 1024


@dataclass(frozen=True)
class GruClusterConfig(_GruConfig):
    """The cluster-resident kernel of one model (sm_90): ``cluster`` CTAs share the hidden units (``units`` each,
    a multiple of 16), a cluster runs ``nb`` batch rows, each m16 x n8 tile's K range is split over ``ksplit``
    warps. ``shared_bytes`` is what a launch takes: the R slice, two h buffers of the cluster's rows, two stages
    of the CTA's slice of h_t and the partial sums of a split K."""

    family: ClassVar[str] = "gru_cluster"
    template: ClassVar[str] = "gru_cluster.cu.j2"

    cluster: int = 16
    nb: int = 8
    ksplit: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        hsz = self.hidden
        if not 1 <= self.cluster <= MAX_CLUSTER or hsz % self.cluster or (hsz // self.cluster) % 16:
            raise ValueError(
                f"cluster: expected 1..{MAX_CLUSTER} CTAs sharing hidden {hsz} in multiples of 16 units,"
                f" got {self.cluster}"
            )
        if hsz % 128:
            raise ValueError(f"hidden: the cluster kernel needs a multiple of 128 (its shared rows), got {hsz}")
        if self.nb < 8 or self.nb % 8:
            raise ValueError(f"nb: expected a positive multiple of 8 batch rows per cluster, got {self.nb}")
        if self.ksplit not in (1, 2, 4) or (hsz // 64) % self.ksplit:
            raise ValueError(f"ksplit: expected 1, 2 or 4 dividing the {hsz // 64} K chunks, got {self.ksplit}")
        if self.warps > CLUSTER_MAX_WARPS:
            raise ValueError(f"nb, ksplit: {self.warps} warps a CTA, expected at most {CLUSTER_MAX_WARPS}")

    @property
    def units(self) -> int:
        return self.hidden // self.cluster

    @property
    def items(self) -> int:
        return (self.units // 16) * (self.nb // 8)

    @property
    def warps(self) -> int:
        return self.items * self.ksplit

    @property
    def name(self) -> str:
        return CLUSTER_KERNEL_NAME

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def min_sm(self) -> int:
        return 90  # clusters, mapa / st.shared::cluster, barrier.cluster

    @property
    def shared_bytes(self) -> int:
        hsz = self.hidden
        red = self.ksplit * self.items * 12 * 32 * 4 if self.ksplit > 1 else 0
        return 3 * self.units * hsz + 2 * self.nb * hsz + 2 * self.nb * self.units + red

    @property
    def min_blocks(self) -> int:
        """CTAs a launch bound asks room for on one SM: 2 for a CTA of at most 128 threads where two fit its shared
        memory (ptxas keeps a thread within 65536 / (2 x threads) = 256 registers, no cap), so that clusters of 16
        may pair CTAs on an SM and more clusters are resident at once; else 1 (256 threads under a 128-register cap
        spill: tests/test_gru_cluster.py compiles every candidate and finds no local memory)."""
        fits_two = 2 * (self.shared_bytes + CLUSTER_STATIC_SHARED + 1024) <= SM_SHARED
        return 2 if fits_two and self.threads <= 128 else 1

    def context(self) -> dict[str, Any]:
        return dict(
            name=CLUSTER_KERNEL_NAME,
            cluster=self.cluster,
            lut_ref="s_lut_",  # the cell reads the kernel's shared copies of its tables
            min_blocks=self.min_blocks,
            units=self.units,
            nb=self.nb,
            ksplit=self.ksplit,
            warps=self.warps,
            **self.constants,
        )
