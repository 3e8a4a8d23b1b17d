"""Launches of a kernel that reads x through a TMA tensor map (the Hopper W8A8 and W4A8 GEMMs): the map holds x's
address as opaque bytes no slot can patch, so a call signature keeps one launch bound per x address. Its other
per-call pointers (scales, y, workspace) are bound as markers and patched per call; their slots are looked up in
each bound launch, because a tensor map's padding follows the argument array's address and moves them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .device import BoundLaunch

#: The per-call pointers' stand-ins: above every 48-bit device address, so no other argument (a freed buffer's
#: address in a tensor map included) equals one.
MARKER = 0x7A5E << 48

#: Bound launches a call signature keeps, one per x address seen (a model's activations come back to a few
#: addresses from torch's caching allocator).
X_BOUND_MAX = 16

#: A launch bound for one x address and the slots of its per-call pointers, in the order they were given (-1 for
#: a pointer the launch does not take).
BoundForX = tuple[BoundLaunch, int, int, int]


def markers(present: Sequence[bool]) -> tuple[int, ...]:
    """A distinct marker for each per-call pointer a launch takes, 0 for one it does not (bound as a null)."""
    return tuple(MARKER + 16 * (i + 1) if p else 0 for i, p in enumerate(present))


class BoundPerX:
    """x's address -> the launch bound with x's tensor map at it and the slots of its per-call pointers (bound as
    ``marks``, from markers()); the X_BOUND_MAX most recently seen are kept (a cycle of addresses keeps its recent
    ones). ``bind(x_ptr)`` binds a launch with the marks in its arguments; ``x_arg``: the index of x's tensor map
    among its arguments; ``what`` names the op in errors.

    Once X_BOUND_MAX are kept, a new address re-addresses the oldest launch's map in place
    (BoundLaunch.readdress_map, a few µs) instead of binding another (argument packing, the plan, the map's encoding:
    0.2-0.3 ms): in eager decode the activations' addresses drift with the growing KV cache's allocations."""

    __slots__ = ("_bind", "_marks", "_what", "_x_arg", "by_x")

    def __init__(self, bind: Callable[[int], BoundLaunch], marks: tuple[int, int, int], what: str, x_arg: int) -> None:
        self._bind, self._marks, self._what, self._x_arg = bind, marks, what, x_arg
        self.by_x: dict[int, BoundForX] = {}

    def __call__(self, x_ptr: int) -> BoundForX:
        hit = self.by_x.get(x_ptr)
        if hit is None:
            if len(self.by_x) >= X_BOUND_MAX:
                hit = self.by_x.pop(next(iter(self.by_x)))  # the oldest address's launch, for this one
                hit[0].readdress_map(self._x_arg, x_ptr)
            else:
                hit = self._bound(x_ptr)
            self.by_x[x_ptr] = hit
        return hit

    def _bound(self, x_ptr: int) -> BoundForX:
        fn = self._bind(x_ptr)
        found = [fn.slot_of(m) if m else -1 for m in self._marks]
        if None in found:  # markers are above every device address: only a marker bound twice matches twice
            raise RuntimeError(f"{self._what}: a launch bound for x at {x_ptr:#x} holds a per-call pointer twice")
        a, b, c = (int(s) for s in found if s is not None)
        return fn, a, b, c


def launch_patched(bound: BoundForX, per_call: tuple[int, int, int], stream: int) -> None:
    """Patch a bound launch's per-call pointers (the first always; the second and third skipped where their slot is
    -1) and launch it: one cuLaunchKernel, the one-line error of BoundLaunch.failed on a launch error."""
    fn, a, b, c = bound
    slots = fn.slots
    slots[a] = per_call[0]
    if b >= 0:
        slots[b] = per_call[1]
    if c >= 0:
        slots[c] = per_call[2]
    err = fn.launch(stream, fn.params, 0)[0]
    if err:
        fn.failed(err, stream)
