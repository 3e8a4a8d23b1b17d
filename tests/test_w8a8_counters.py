"""CPU tests of the split-K buffers (dqgen.run.workspace) with stand-in buffers: the W8A8 GEMM's counters, one
buffer per device that only grows, every outgrown buffer kept alive (bound launches and captured CUDA graphs hold
its address); a packed weight's workspace, one pair of buffers per launch layout; neither allocates while a graph
is being captured."""

from __future__ import annotations

import gc
import weakref

import pytest

from dqgen.run.workspace import MIN_COUNTERS, GrowOnlyCounters, SplitKWorkspace


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
    # each growth at least doubles (a creeping request keeps about twice the largest alive, not their sum)
    assert second.numel() == 2 * MIN_COUNTERS and third.numel() == 4 * MIN_COUNTERS
    assert c.get(0, 10) is third  # the largest serves every smaller request from then on
    assert c.outgrown[0] is first and c.outgrown[1] is second and len(c.outgrown) == 2
    del first, second
    gc.collect()
    assert dead() is not None  # never freed: a captured graph may still launch on it
    assert alloc.made == [(0, MIN_COUNTERS), (0, 2 * MIN_COUNTERS), (0, 4 * MIN_COUNTERS)]


def test_no_allocation_while_capturing() -> None:
    c, alloc = _counters()
    alloc.capturing = True
    with pytest.raises(RuntimeError, match=r"^w8a8 / w4a8 matmul: the split-K counters of GPU 2 \(7 tiles\)") as info:
        c.get(2, 7)
    assert "\n" not in str(info.value) and alloc.made == [] and c.current == {}
    alloc.capturing = False
    buf = c.get(2, 7)
    alloc.capturing = True
    assert c.get(2, MIN_COUNTERS) is buf  # large enough: capturing needs no allocation
    with pytest.raises(RuntimeError, match=r"call the op once on this GPU \(with this shape\) before capturing"):
        c.get(2, MIN_COUNTERS + 1)  # growing would allocate inside the graph
    assert c.current[2] is buf and c.outgrown == [] and len(alloc.made) == 1


# -- a packed weight's split-K workspace (dqgen.run.workspace.SplitKWorkspace: the GEMV's and the GEMM's) --------


def _workspace() -> tuple[SplitKWorkspace[Buf], list[tuple[str, int]], dict[str, bool]]:
    made: list[tuple[str, int]] = []
    state = {"capturing": False}

    def empty(n: int) -> Buf:
        made.append(("partials", n))
        return Buf(0, n)

    def zeros(n: int) -> Buf:
        made.append(("counters", n))
        return Buf(0, n)

    return SplitKWorkspace(empty, zeros, lambda: state["capturing"], "awq GEMM"), made, state


def test_a_weight_keeps_one_pair_of_buffers_per_launch_layout() -> None:
    ws, made, _ = _workspace()
    a = ws.get((64, 10, 2), 1000, 10)
    assert a[0].numel() == 1000 and a[1].numel() == 10
    assert ws.get((64, 10, 2), 1000, 10) is a  # the same addresses for every later launch of that layout
    b = ws.get((16, 10, 4), 500, 10)
    assert b[0] is not a[0] and b[1] is not a[1]
    assert sorted(ws) == [(16, 10, 4), (64, 10, 2)] and len(ws) == 2
    assert made == [("partials", 1000), ("counters", 10), ("partials", 500), ("counters", 10)]


def test_a_weight_allocates_no_workspace_while_capturing() -> None:
    ws, made, state = _workspace()
    first = ws.get("gemv", 256, 4)
    state["capturing"] = True
    assert ws.get("gemv", 256, 4) is first  # allocated before: a captured launch reuses it
    with pytest.raises(RuntimeError, match=r"^awq GEMM: the split-K workspace of launch layout \(64, 3, 2\)") as info:
        ws.get((64, 3, 2), 10, 3)
    assert "\n" not in str(info.value) and "before capturing" in str(info.value)
    assert len(made) == 2 and list(ws) == ["gemv"]


def test_gathered_x_buffers_grow_only_keep_outgrown_ones_and_refuse_a_capture() -> None:
    """The gathered x' of the Hopper GEMM (dqgen.run.workspace.gathered_x_buffers): per device one uninitialised
    int16 buffer, handed out again while it is large enough (a bound launch keeps its address), outgrown ones kept
    alive; never made while the stream captures a graph."""
    from types import SimpleNamespace

    from dqgen.run.workspace import gathered_x_buffers

    made: list[tuple[int, object, tuple[str, int]]] = []
    state = {"capturing": False}
    fake = SimpleNamespace(
        int16="int16",
        device=lambda kind, index: (kind, index),
        empty=lambda n, dtype, device: made.append((n, dtype, device)) or Buf(device[1], n),
        cuda=SimpleNamespace(is_current_stream_capturing=lambda: state["capturing"]),
    )
    bufs = gathered_x_buffers(fake)
    first = bufs.get(3, 7 * 4096)
    assert bufs.get(3, 4096) is first and made == [(7 * 4096, "int16", ("cuda", 3))]  # no minimum padding
    bigger = bufs.get(3, 8 * 4096)
    assert bigger is not first and bufs.outgrown == [first]
    assert made[-1] == (14 * 4096, "int16", ("cuda", 3))  # twice the outgrown one: a creeping M keeps ~2x alive
    state["capturing"] = True
    assert bufs.get(3, 14 * 4096) is bigger  # no new buffer while capturing: the doubled one serves
    with pytest.raises(RuntimeError, match=r"^gemm of an act-order weight: the gathered x' of GPU 3") as info:
        bufs.get(3, 15 * 4096)
    assert "\n" not in str(info.value) and "before capturing" in str(info.value)
