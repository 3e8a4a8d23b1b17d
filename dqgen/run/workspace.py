"""The workspaces of the matmul kernels: the split-K pool of every family (fp32 or int32 partial sums and the tile
counters a last-arriving block reads to know it sums the tile), and the gathered x' of act-order weights.
Three owners:

- ``SplitKWorkspace``: one packed weight's buffers (the GEMV's and the GEMM's), by launch layout, allocated on a
  layout's first launch and kept for the weight's life;
- ``GrowOnlyCounters``: the W8A8 GEMM's counters, one buffer per device that only grows (its partial sums come
  per call from torch's caching allocator);
- ``gathered_x_buffers``: the Hopper GEMM's gathered x' (dqgen.run.gemm90), a GrowOnlyCounters of uninitialised
  int16 per device.

All three are CUDA-graph safe the same way: a launch bound once (a signature table) or captured into a graph keeps the
addresses it was given and may run again at any later time, so no buffer handed out is ever freed or replaced
while its owner lives; the kernels leave every counter they used at zero; and nothing is allocated while the
calling stream captures a graph (the allocation would belong to the graph and its zero fill run only on replay):
a one-line RuntimeError says to call once before capturing. Torch-free (allocation is a callable), so it is tested
on the CPU with stand-ins."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, Protocol, TypeVar

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

    def __init__(
        self,
        zeros: Callable[[int, int], B],
        capturing: Callable[[], bool],
        what: str = "w8a8 / w4a8 matmul: the split-K counters",
        minimum: int = MIN_COUNTERS,
        unit: str = "tiles",
    ) -> None:
        self._zeros = zeros
        self._capturing = capturing
        self._what, self._unit = what, unit  # the capture error's subject and what its size counts
        self._minimum = minimum  # the smallest buffer made
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
                f"{self._what} of GPU {ordinal} ({tiles} {self._unit}) are allocated outside CUDA graphs: call the op "
                "once on this GPU (with this shape) before capturing"
            )
        # twice the outgrown size at least: a creeping size (prefill lengths) keeps about twice the largest alive
        new = self._zeros(ordinal, max(tiles, self._minimum, 2 * buf.numel() if buf is not None else 0))
        if buf is not None:
            self.outgrown.append(buf)
        self.current[ordinal] = new
        return new


class SplitKWorkspace(Generic[B]):
    """One packed weight's split-K buffers by launch layout (``key``: what fixes the partials' layout, e.g. the
    GEMM's (BM, output tiles, splits)): ``(partials, counters)`` made by ``empty(floats)`` and ``zeros(tiles)`` on
    the layout's first use and kept for the weight's life. Launches that use one weight must be ordered (one stream,
    or a graph): they share these buffers."""

    def __init__(
        self, empty: Callable[[int], B], zeros: Callable[[int], B], capturing: Callable[[], bool], owner: str
    ) -> None:
        self._empty, self._zeros, self._capturing = empty, zeros, capturing
        self._owner = owner  # names the weight in the capture error
        self._buffers: dict[Hashable, tuple[B, B]] = {}

    def get(self, key: Hashable, floats: int, tiles: int) -> tuple[B, B]:
        """The buffers of layout ``key``: at least ``floats`` partials and ``tiles`` zero counters."""
        hit = self._buffers.get(key)
        if hit is not None:
            return hit
        if self._capturing():
            raise RuntimeError(
                f"{self._owner}: the split-K workspace of launch layout {key} is allocated outside CUDA graphs: "
                "run this shape once before capturing"
            )
        hit = self._buffers[key] = (self._empty(floats), self._zeros(tiles))
        return hit

    def __iter__(self) -> Iterator[Hashable]:
        """The layouts allocated so far."""
        return iter(self._buffers)

    def __len__(self) -> int:
        return len(self._buffers)


def torch_workspace(torch: Any, device: int, owner: str) -> SplitKWorkspace[Any]:
    """A weight's SplitKWorkspace of torch tensors on CUDA device ``device``: fp32 partials, int32 counters (torch
    is the caller's, passed in: this module never imports it)."""
    cuda = torch.device("cuda", device)
    return SplitKWorkspace(
        lambda n: torch.empty(n, dtype=torch.float32, device=cuda),
        lambda n: torch.zeros(n, dtype=torch.int32, device=cuda),
        torch.cuda.is_current_stream_capturing,
        owner,
    )


def gathered_x_buffers(torch: Any) -> GrowOnlyCounters[Any]:
    """The gathered x' of the Hopper GEMM (dqgen.run.gemm90.bind90_gathered): per device one int16 buffer that only
    grows (uninitialised: the gather writes it whole before the GEMM reads it), so a bound launch keeps its address
    and a signature is bound once. One per device, not per weight: a model's act-order layers would each keep one
    of their largest x (gigabytes at a long prefill). So every act-order launch on a device shares it: they must be
    ordered (one stream at a time, or one graph), as the W8A8 split-K counters; two act-order layers running on two
    streams at once would overwrite each other's x'."""
    return GrowOnlyCounters(
        lambda ordinal, n: torch.empty(n, dtype=torch.int16, device=torch.device("cuda", ordinal)),
        torch.cuda.is_current_stream_capturing,
        "gemm of an act-order weight: the gathered x'",
        0,
        "elements",
    )
