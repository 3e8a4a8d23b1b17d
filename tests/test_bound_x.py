"""CPU: launches bound per x address (dqgen.run.bound_x): each launch's per-call pointer slots are its own, the most
recent X_BOUND_MAX addresses stay bound, a new address past them re-addresses the oldest launch's x map (no new
bind), and a marker bound twice is an error, not a wrong patch."""

from __future__ import annotations

from typing import Any

import pytest

from dqgen.run.bound_x import MARKER, X_BOUND_MAX, BoundPerX, markers


class _Launch:
    """A bound launch's argument slots (BoundLaunch.slot_of's rule: the one slot holding a value)."""

    def __init__(self, slots: list[int]) -> None:
        self.slots = slots
        self.readdressed: list[tuple[int, int]] = []

    def readdress_map(self, arg: int, ptr: int) -> None:  # BoundLaunch's: the map of argument ``arg`` now at ptr
        self.readdressed.append((arg, ptr))
        self.slots[arg] = ptr

    def slot_of(self, value: int) -> int | None:
        found = [i for i, v in enumerate(self.slots) if v == value]
        return found[0] if len(found) == 1 else None


def test_markers_are_above_device_addresses_and_null_where_absent() -> None:
    a, b, c = markers((True, True, False))
    assert a != b and min(a, b) > (1 << 48) and a >= MARKER and c == 0


def test_each_address_gets_its_own_launch_and_slots_and_the_oldest_goes() -> None:
    marks: Any = markers((True, True, True))
    bound: list[int] = []

    def bind(x_ptr: int) -> Any:
        bound.append(x_ptr)
        pad = [0] * (x_ptr % 3)  # a tensor map's padding moves the slots after it
        return _Launch([x_ptr, *pad, marks[0], 7, marks[1], marks[2]])

    per_x = BoundPerX(bind, marks, "test op", 0)
    fn, s0, s1, s2 = per_x(1000)
    assert (fn.slots[s0], fn.slots[s1], fn.slots[s2]) == marks
    fn2, t0, _, _ = per_x(1001)
    assert fn2 is not fn and t0 == s0 + 1
    assert per_x(1000)[0] is fn and bound == [1000, 1001]  # a second call at an address binds nothing
    for x in range(2000, 2000 + X_BOUND_MAX - 2):
        per_x(x)
    assert len(per_x.by_x) == X_BOUND_MAX and len(bound) == X_BOUND_MAX  # every one bound
    fresh = per_x(3000)  # a new address past X_BOUND_MAX: the oldest launch (1000's), its map re-addressed
    assert fresh[0] is fn and fn.readdressed == [(0, 3000)] and fresh[1:] == (s0, s1, s2)
    assert len(bound) == X_BOUND_MAX and 1000 not in per_x.by_x and per_x(3000)[0] is fn
    per_x(1000)  # back: it takes the next oldest launch (1001's) in turn
    assert fn2.readdressed == [(0, 1000)] and len(bound) == X_BOUND_MAX


def test_absent_pointer_has_slot_minus_one_and_a_marker_bound_twice_is_an_error() -> None:
    marks: Any = markers((True, True, False))
    once: Any = lambda x: _Launch([x, marks[0], marks[1]])  # noqa: E731
    assert BoundPerX(once, marks, "op", 0)(5)[3] == -1
    twice: Any = lambda x: _Launch([x, marks[0], marks[0], marks[1]])  # noqa: E731
    with pytest.raises(RuntimeError, match="w4a8 matmul: a launch bound for x at 0x9 holds a per-call pointer twice"):
        BoundPerX(twice, marks, "w4a8 matmul", 0)(9)
