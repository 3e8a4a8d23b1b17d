"""What every kernel family's config is: a frozen, hashable value that names its entry point, says what it needs
of the GPU (threads, dynamic shared memory, architecture) and renders its source once (the config is the cache
key). And the value types that describe the parts kernels vary in: the main loop, the split-K reduction and the
epilogue, so that a new architecture's main loop is one new ``Mainloop.kind``."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

from ..core.spec import Spec
from ..emit.pipeline import spec_key
from ..emit.render import template_env

MainloopKind = Literal["simt", "mma_sync_sm80", "wgmma_tma_sm90"]

#: The oldest architecture each main loop runs on (its instructions: mma.sync from sm_80, wgmma / TMA from sm_90;
#: a SIMT loop asks nothing of the tensor cores, the config's other parts set its architecture).
MAINLOOP_MIN_SM: Final[dict[str, int]] = {"simt": 0, "mma_sync_sm80": 80, "wgmma_tma_sm90": 90}

#: How a K range split over blocks is reduced: "none" (one block a tile), "last_arriver" (partials stored, added by
#: the last block of a tile in a fixed order: deterministic), "flat" (each warp a range of the tiles' chunks laid
#: end to end, partials added by the last arriver of each tile).
SplitK = Literal["none", "last_arriver", "flat"]
SPLIT_K: Final[tuple[str, ...]] = ("none", "last_arriver", "flat")

#: ``shared_bytes`` of a config whose launches size their dynamic shared memory at run time (the persistent GRU):
#: the loader opts the function in to the most the device allows a block.
SHARED_OPTIN: Final = -1
#: Dynamic shared memory a block gets without opting in (cuFuncSetAttribute).
SHARED_DEFAULT_MAX: Final = 48 * 1024


@dataclass(frozen=True)
class Mainloop:
    """A main loop: its ``kind`` (the instructions it multiplies with, hence the oldest architecture it runs on),
    a block's ``tile`` (M, N, K), its ``warps`` (along M, along N), cp.async ``stages`` in flight and whether the
    operands are swapped (swap-AB: the weight is the mma's A operand, so a small M fills the n side)."""

    kind: MainloopKind
    tile: tuple[int, int, int]
    warps: tuple[int, int]
    stages: int
    swap_ab: bool = False

    def __post_init__(self) -> None:
        if self.kind not in MAINLOOP_MIN_SM:
            raise ValueError(f"Mainloop.kind: expected one of {sorted(MAINLOOP_MIN_SM)}, got {self.kind!r}")
        if self.stages < 0 or min(self.warps) < 1 or min(self.tile) < 1:
            raise ValueError(f"Mainloop: tile, warps must be positive and stages >= 0, got {self}")

    @property
    def min_sm(self) -> int:
        return MAINLOOP_MIN_SM[self.kind]

    @property
    def threads(self) -> int:
        return 32 * self.warps[0] * self.warps[1]


@dataclass(frozen=True)
class Epilogue:
    """What a GEMM does with its accumulators: the ``out`` type ("acc": the raw accumulators), a bias, per-row and
    per-column scales; ``activation`` and ``residual`` have room for fused activations and residual adds (none of
    today's templates has one)."""

    out: str
    bias: bool
    row_scale: bool
    col_scale: bool
    activation: Literal["none"] = "none"
    residual: bool = False


@functools.cache
def _render(config: KernelConfig) -> str:
    """One render per distinct config for the process (the config is the key; it is frozen and hashable)."""
    return template_env().get_template(config.template).render(**config.context())


def refuse_integer_target(spec: Spec, what: str) -> None:
    """ValueError (one line, naming the spec's target) for a family that writes fp16 / bf16 given an s8 spec: s8
    lanes are the W4A8 GEMM's int8 operand, not a dequantized weight."""
    if spec.integer_target:
        raise ValueError(
            f"[target] {spec.name}: got 's8'; the {what} writes fp16 or bf16 weights (s8 lanes are the int8 operand "
            "of the W4A8 GEMM; use the spec with target fp16 or bf16 here)"
        )


class KernelConfig(ABC):
    """The protocol of a kernel family's config; subclasses are frozen dataclasses (equal configs are one kernel).

    ``family`` and ``template`` are the family's; ``name`` is the entry point's (derived from the config here and
    nowhere else); ``threads`` a block's; ``shared_bytes`` the most dynamic shared memory a launch takes
    (SHARED_OPTIN: sized at launch time); ``min_sm`` the oldest architecture it runs on; ``context()`` the
    template's values; ``source()`` the rendered source, memoized per config; ``source_name`` the NVRTC program
    name (part of NVRTC's cache key)."""

    family: ClassVar[str]
    template: ClassVar[str]
    #: Whether the source uses instructions of the architecture-specific target only (wgmma, setmaxnreg: sm_90a),
    #: so that it is compiled for "sm_90a" rather than "sm_90" (such a cubin runs on that architecture alone).
    arch_specific: ClassVar[bool] = False
    #: Whether the kernel waits for the previous kernel in the stream (griddepcontrol.wait, blocks/pdl.cuh.j2)
    #: before it reads another kernel's output or stores, so that it may be launched as a programmatic dependent.
    pdl: ClassVar[bool] = False

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def threads(self) -> int: ...

    @property
    def shared_bytes(self) -> int:
        return 0

    @property
    @abstractmethod
    def min_sm(self) -> int: ...

    @classmethod
    def supports(cls, spec: Spec) -> bool:
        """Whether the family renders a kernel for this quantization spec (families not built from a spec, the
        W8A8 kernels and the GRU's, take none)."""
        return False

    @abstractmethod
    def context(self) -> dict[str, Any]: ...

    @property
    def render_key(self) -> KernelConfig:
        """The part of the config the source depends on (entry points that share one source share this)."""
        return self

    def source(self) -> str:
        return _render(self.render_key)

    @property
    def source_name(self) -> str:
        return f"{self.family}.cu"

    def fallbacks(self) -> tuple[KernelConfig, ...]:
        """Configs whose sources' modules also hold this entry point (compiled under this ``source_name``): the
        loader takes one of theirs from NVRTC's disk cache, where it is, instead of compiling ``source()``."""
        return ()

    @property
    def what(self) -> str:
        """The config in an error message (the spec it was built from, where there is one)."""
        return f"{self.family} kernel {self.name}"


@dataclass(frozen=True)
class SpecEntriesConfig(KernelConfig):
    """A family rendered from a quantization spec with several entry points in one source (the GEMMs: one entry per
    tile config): ``entries`` (a launch compiles the config of its one entry, ``one(spec, entry)``), the spec's
    content ``key`` (a Spec is not hashable; the key makes equal specs one config). Subclasses give ``entries`` its
    default and say what an entry is."""

    what_source: ClassVar[str] = "source"  # names the family's source in the "name one" error

    spec: Spec = field(compare=False, repr=False)
    entries: tuple[Any, ...] = ()
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(self.entries))
        object.__setattr__(self, "key", spec_key(self.spec))
        if not self.entries:
            raise ValueError(f"entries: expected at least one entry point of the {self.family} family")

    @classmethod
    def one(cls, spec: Spec, entry: Any) -> Any:
        """The config of ``entry`` alone (what a launch compiles)."""
        return cls(spec, (entry,))

    @property
    def entry(self) -> Any:
        if len(self.entries) != 1:
            raise ValueError(f"{self.spec.name}: the {self.what_source} has {len(self.entries)} entry points; name one")
        return self.entries[0]

    @property
    def source_name(self) -> str:
        return f"{self.spec.name}_{self.family}.cu"

    @property
    def what(self) -> str:
        entry = self.name if len(self.entries) == 1 else f"({len(self.entries)} entry points)"
        return f"{self.spec.name} (spec targets {self.spec.arch}), {self.family} kernel {entry}"
