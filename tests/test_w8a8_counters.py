"""CPU tests of the W8A8 GEMM's split-K counters (dqgen.run.workspace) with stand-in buffers: one buffer per device
that only grows, every outgrown buffer kept alive (bound launches and captured CUDA graphs hold its address), and
no allocation while a graph is being captured."""

from __future__ import annotations

import gc
import weakref

import pytest

from dqgen.run.workspace import MIN_COUNTERS, GrowOnlyCounters


class Buf:
    """A stand-in device buffer: its size and the device it was made on."""

    def __init__(self, ordinal: int, n: int) -> None:
        self.ordinal, self.n = ordinal, n

    def numel(self) -> int:
        return self.n


class Allocator:
    def __init__(self) -> None:
        self.made: list[tuple[int, int]] = []
        self.capturing = False

    def zeros(self, ordinal: int, n: int) -> Buf:
        self.made.append((ordinal, n))
        return Buf(ordinal, n)


def _counters() -> tuple[GrowOnlyCounters[Buf], Allocator]:
    alloc = Allocator()
    return GrowOnlyCounters(alloc.zeros, lambda: alloc.capturing), alloc


def test_one_buffer_per_device_reused_while_large_enough() -> None:
    c, alloc = _counters()
    first = c.get(0, 0)
    assert first.numel() == MIN_COUNTERS and first.ordinal == 0
    assert c.get(0, 100) is first and c.get(0, MIN_COUNTERS) is first
    other = c.get(1, 5)
    assert other is not first and other.ordinal == 1
    assert alloc.made == [(0, MIN_COUNTERS), (1, MIN_COUNTERS)]


def test_growing_keeps_every_outgrown_buffer_alive() -> None:
    c, alloc = _counters()
    first = c.get(0, 0)
    dead = weakref.ref(first)
    second = c.get(0, MIN_COUNTERS + 1)
    third = c.get(0, 3 * MIN_COUNTERS)
    assert second.numel() == MIN_COUNTERS + 1 and third.numel() == 3 * MIN_COUNTERS
    assert c.get(0, 10) is third  # the largest serves every smaller request from then on
    assert c.outgrown[0] is first and c.outgrown[1] is second and len(c.outgrown) == 2
    del first, second
    gc.collect()
    assert dead() is not None  # never freed: a captured graph may still launch on it
    assert alloc.made == [(0, MIN_COUNTERS), (0, MIN_COUNTERS + 1), (0, 3 * MIN_COUNTERS)]


def test_no_allocation_while_capturing() -> None:
    c, alloc = _counters()
    alloc.capturing = True
    with pytest.raises(RuntimeError, match=r"^w8a8 matmul: the split-K counters of GPU 2 \(7 tiles\)") as info:
        c.get(2, 7)
    assert "\n" not in str(info.value) and alloc.made == [] and c.current == {}
    alloc.capturing = False
    buf = c.get(2, 7)
    alloc.capturing = True
    assert c.get(2, MIN_COUNTERS) is buf  # large enough: capturing needs no allocation
    with pytest.raises(RuntimeError, match="call matmul once on this GPU before capturing"):
        c.get(2, MIN_COUNTERS + 1)  # growing would allocate inside the graph
    assert c.current[2] is buf and c.outgrown == [] and len(alloc.made) == 1
