"""The W8A8 GEMM's split-K tile counters: one buffer per device that only grows and never frees a buffer it
handed out. A launch bound once (the matmul's signature cache) or captured into a CUDA graph keeps the counters'
address it was given and may run again at any later time; the kernel leaves every counter it used at zero, so an
old buffer stays valid for its launches while new launches take the larger one. Counters are a few KB: keeping
the outgrown ones costs nothing worth freeing. Torch-free (the allocation is a callable), so it is tested on the
CPU with stand-ins."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

#: Counters allocated at least: more than the tiles of any split plan (a plan splits K only while its tiles fill
#: at most half of the GPU's resident blocks, a few hundred on an H100), so matmul never grows the buffer.
MIN_COUNTERS = 4096


class _Sized(Protocol):
    def numel(self) -> int: ...


B = TypeVar("B", bound=_Sized)


class GrowOnlyCounters(Generic[B]):
    """Per device ordinal, the current counters buffer (``zeros(n)``: n zero uint32, ready on return);
    ``capturing()``: whether the calling stream is capturing a CUDA graph, where an allocation would belong to the
    graph and its zero fill would run only on replay, so a buffer is never made there."""

    def __init__(self, zeros: Callable[[int, int], B], capturing: Callable[[], bool]) -> None:
        self._zeros = zeros
        self._capturing = capturing
        self.current: dict[int, B] = {}
        #: Every buffer handed out and outgrown since, kept alive for the bound or captured launches holding it.
        self.outgrown: list[B] = []

    def get(self, ordinal: int, tiles: int) -> B:
        """A buffer of at least ``tiles`` zero counters on device ``ordinal``."""
        buf = self.current.get(ordinal)
        if buf is not None and buf.numel() >= tiles:
            return buf
        if self._capturing():
            raise RuntimeError(
                f"w8a8 matmul: the split-K counters of GPU {ordinal} ({tiles} tiles) are allocated outside CUDA "
                "graphs: call matmul once on this GPU before capturing"
            )
        new = self._zeros(ordinal, max(tiles, MIN_COUNTERS))
        if buf is not None:
            self.outgrown.append(buf)
        self.current[ordinal] = new
        return new
