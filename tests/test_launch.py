"""The launch path without a GPU: argument packing (cuda.core's ParamHolder) against the C layout ctypes gives each
type, the refusal of width-less arguments, BoundLaunch's bound cuLaunchKernel and its retry after a failed launch,
and the per-call signature key of Kernel.__call__ against the checked path's (one table for both)."""

from __future__ import annotations

import ctypes
import types
from typing import Any

import numpy as np
import pytest

from dqgen.run import device as dev


def _slots(holder: Any, n: int) -> list[int]:
    return list((ctypes.c_void_p * n).from_address(holder.ptr))


#: Every kind of kernel argument with a width, and the C type whose bytes it must pack to (the ParamHolder packing
#: here and the patchable slots of tests/test_fastcall.py read the same table).
ARG_CASES = [
    (np.uint64(0xDEAD_BEEF_0123_4567), ctypes.c_uint64),
    (np.int64(-(2**40) - 3), ctypes.c_int64),
    (np.int32(-7), ctypes.c_int32),
    (np.uint32(0xFFFF_FFFE), ctypes.c_uint32),
    (np.float32(1.5), ctypes.c_float),
    (np.uint8(200), ctypes.c_uint8),
    (ctypes.c_int16(-300), ctypes.c_int16),
    (ctypes.c_uint64(2**63 + 5), ctypes.c_uint64),
    (np.array(9, dtype=np.int64), ctypes.c_int64),
]


@pytest.mark.parametrize(("arg", "ctype"), ARG_CASES)
def test_packed_bytes_are_the_c_types_bytes(arg: Any, ctype: Any) -> None:
    value = arg.value if isinstance(arg, ctypes._SimpleCData) else arg.item()
    holder = dev.pack_args([np.uint64(1), arg, np.int32(2)])
    first, slot, last = _slots(holder, 3)
    want = bytes(ctype(value))
    assert ctypes.string_at(slot, len(want)) == want
    assert ctypes.string_at(first, 8) == bytes(ctypes.c_uint64(1))
    assert ctypes.string_at(last, 4) == bytes(ctypes.c_int32(2))


def test_device_array_and_zero_d_array_pack_as_their_values() -> None:
    a = dev.DeviceArray(0x7F00_1234_5600, (4,), (4,), np.dtype(np.int32), 0, "cai", None)
    holder = dev.pack_args([a, np.array(9, dtype=np.int64)])
    p, n = _slots(holder, 2)
    assert ctypes.c_uint64.from_address(p).value == 0x7F00_1234_5600
    assert ctypes.c_int64.from_address(n).value == 9


@pytest.mark.parametrize("bad", [12345, 1.5, ctypes.c_void_p(16), "x", None])
def test_arguments_without_a_width_are_refused_naming_the_index(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"^kernel argument 1: expected a numpy scalar .* got "):
        dev.pack_args([np.uint64(0), bad])


class _FakeDriver:
    """Stands in for cuda-bindings' driver module: records launches, fails the ones it is told to."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[tuple] = []

    def cuLaunchKernel(self, *args: Any) -> tuple[int]:
        self.calls.append(args)
        if self.failures:
            self.failures -= 1
            return (201,)  # CUDA_ERROR_INVALID_CONTEXT
        return (0,)


def _bound(monkeypatch: pytest.MonkeyPatch, failures: int) -> tuple[dev.BoundLaunch, _FakeDriver, list[int]]:
    drv = _FakeDriver(failures)
    monkeypatch.setattr(dev, "driver", types.SimpleNamespace(cuLaunchKernel=drv.cuLaunchKernel))
    monkeypatch.setattr(dev, "_err_name", lambda err: f"CUDA_ERROR_{int(err)}")
    made_current: list[int] = []
    monkeypatch.setattr(dev, "primary_context", lambda ordinal=0: made_current.append(ordinal))
    kernel = object.__new__(dev.LoadedKernel)
    kernel.name, kernel.device, kernel._module, kernel._function = "k", 3, object(), "FUNCTION"
    bound = dev.BoundLaunch(kernel, (7,), (256,), [np.uint64(11), np.int64(12)], 0)
    return bound, drv, made_current


def test_bound_launch_is_one_driver_call_with_packed_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    bound, drv, made_current = _bound(monkeypatch, failures=0)
    bound(99)
    bound(100)
    assert made_current == []  # no context call on the way: the function carries its context
    assert drv.calls == [("FUNCTION", 7, 1, 1, 256, 1, 1, 0, h, bound.params, 0) for h in (99, 100)]
    p, n = list((ctypes.c_void_p * 2).from_address(bound.params))  # the void** array cuLaunchKernel reads
    assert (ctypes.c_uint64.from_address(p).value, ctypes.c_int64.from_address(n).value) == (11, 12)


def test_failed_launch_is_retried_in_the_primary_context(monkeypatch: pytest.MonkeyPatch) -> None:
    bound, drv, made_current = _bound(monkeypatch, failures=1)
    bound(5)
    assert made_current == [3] and len(drv.calls) == 2 and drv.calls[1][8] == 5


def test_launch_failing_twice_raises_naming_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    bound, drv, made_current = _bound(monkeypatch, failures=2)
    with pytest.raises(RuntimeError, match=r"^cuLaunchKernel\('k'\) failed: CUDA_ERROR_201$"):
        bound(5)
    assert made_current == [3] and len(drv.calls) == 2


@pytest.mark.parametrize("failures", [0, 1])
def test_unloaded_module_is_an_error_not_a_launch(monkeypatch: pytest.MonkeyPatch, failures: int) -> None:
    bound, drv, _ = _bound(monkeypatch, failures=failures)
    bound.kernel._module = None
    with pytest.raises(RuntimeError, match=r"^kernel 'k': module already unloaded$"):
        bound(5)
    assert drv.calls == []
    with pytest.raises(RuntimeError, match=r"^kernel 'k': module already unloaded$"):
        bound.failed(201, 5)  # a launch that failed because its module went away is not retried
    assert drv.calls == []
