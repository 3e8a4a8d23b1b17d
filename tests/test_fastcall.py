"""The per-call fast path on the CPU (dqgen.run.fastcall and BoundLaunch's patchable slots), with stand-ins for
torch tensors and the driver: what cuLaunchKernel would read after a slot is patched, which signatures hit and
which miss (shape, dtype, device, contiguity, alignment, bias, thread, a freed weight, a checkpoint tensor written
in place, an inference tensor), and which checked calls are remembered (the GEMV's decode case, and a packed
weight's GEMM launch: the sm_80 kernel's by its pointer slots, the Hopper kernel's bound per x address)."""

from __future__ import annotations

import copy
import ctypes
import gc
import itertools
import pickle
import threading
import types
from typing import Any

import numpy as np
import pytest

import dqgen.run.dispatch as dispatch
import dqgen.run.gemm as gemm
import dqgen.run.matmul as mm
from dqgen.run import device as dev
from dqgen.run import fastcall
from dqgen.run.bound_x import BoundPerX, markers

from .test_launch import ARG_CASES

# --------------------------------------------------------------------------- the slots a launch reads


@pytest.mark.parametrize(("arg", "ctype"), ARG_CASES)
def test_slot_bytes_are_the_c_types_bytes(arg: Any, ctype: Any) -> None:
    value = arg.value if isinstance(arg, ctypes._SimpleCData) else arg.item()
    slots, addresses = dev.pack_slots([np.uint64(1), arg, np.int32(2)])
    want = bytes(ctype(value))
    assert ctypes.string_at(addresses[1], len(want)) == want
    assert ctypes.string_at(addresses[0], 8) == bytes(ctypes.c_uint64(1))
    assert ctypes.string_at(addresses[2], 4) == bytes(ctypes.c_int32(2))
    assert [addresses[i] - addresses[0] for i in range(3)] == [0, 8, 16]  # one 8-byte slot each
    assert addresses[0] == slots.buffer_info()[0] and slots[0] == 1  # the slots array is what is read


@pytest.mark.parametrize("before", [0, 1, 3])
def test_tensor_maps_take_128_bytes_from_a_64_byte_boundary(before: int) -> None:
    """The Hopper GEMM's tensor maps (dev.TensorMapArg) among scalars: each map's 128 bytes at a 64-byte aligned
    address, every argument readable at its address, none overlapping, all inside the slots array (however the
    scalars and maps interleave)."""
    maps = [dev.TensorMapArg(bytes([i + 1]) * 128) for i in range(3)]
    args: list[Any] = [np.int32(7)] * before
    for i, m in enumerate(maps):
        args += [m, np.int32(100 + i)]
    slots, addresses = dev.pack_slots(args)
    base, end = slots.buffer_info()[0], slots.buffer_info()[0] + 8 * len(slots)
    spans = []
    for arg, at in zip(args, addresses, strict=True):
        size = 128 if isinstance(arg, dev.TensorMapArg) else 4
        want = arg.raw if isinstance(arg, dev.TensorMapArg) else bytes(ctypes.c_int32(int(arg)))
        assert base <= at and at + size <= end and ctypes.string_at(at, size) == want
        assert not isinstance(arg, dev.TensorMapArg) or at % 64 == 0
        spans.append((at, at + size))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


@pytest.mark.parametrize("bad", [12345, 1.5, ctypes.c_void_p(16), None, np.complex128(1)])
def test_slots_refuse_what_has_no_width_or_is_too_wide(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"^kernel argument 1: "):
        dev.pack_slots([np.uint64(0), bad])


class _Driver:
    """cuLaunchKernel's stand-in: records the argument values it reads through the void** array at the call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[int]]] = []

    def cuLaunchKernel(self, fn: Any, gx, gy, gz, bx, by, bz, smem, stream, params: int, extra: int) -> tuple[int]:
        n = 4
        pointers = (ctypes.c_void_p * n).from_address(params)
        self.calls.append((stream, [ctypes.c_uint64.from_address(int(p or 0)).value for p in pointers]))
        return (0,)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> _Driver:
    drv = _Driver()
    monkeypatch.setattr(dev, "driver", types.SimpleNamespace(cuLaunchKernel=drv.cuLaunchKernel))
    return drv


def _bound(values: list[int]) -> dev.BoundLaunch:
    kernel = object.__new__(dev.LoadedKernel)
    kernel.name, kernel.device, kernel._module, kernel._function = "k", 0, object(), "FUNCTION"
    return dev.BoundLaunch(kernel, (1,), (32,), [np.uint64(v) for v in values], 0)


def test_a_patched_slot_is_what_the_next_launch_reads(driver: _Driver) -> None:
    bound = _bound([0x7000_0000, 0x7100_0000, 5, 0x7200_0000])
    bound(3)
    params = bound.params
    bound.slots[1] = 0x7AAA_0000
    bound(4)
    assert bound.params == params  # the same array: patching moves nothing
    assert driver.calls == [
        (3, [0x7000_0000, 0x7100_0000, 5, 0x7200_0000]),
        (4, [0x7000_0000, 0x7AAA_0000, 5, 0x7200_0000]),
    ]


def test_slot_of_finds_one_slot_or_none() -> None:
    bound = _bound([0x7000_0000, 0x7100_0000, 0x7100_0000, 16])
    assert bound.slot_of(0x7000_0000) == 0
    assert bound.slot_of(0x7100_0000) is None  # two slots hold it: a patch could not tell them apart
    assert bound.slot_of(0x7300_0000) is None


# --------------------------------------------------------------------------- the table


def test_table_is_bounded_and_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastcall, "TABLE_MAX", 3)
    t = fastcall.FastTable()
    for i in range(3):
        t.put(i, i)
    assert len(t) == 3
    t.put(3, 3)
    assert dict(t) == {3: 3}  # full: started over
    assert copy.deepcopy(t) == {} and copy.copy(t) == {} and pickle.loads(pickle.dumps(t)) == {}
    assert type(copy.deepcopy(t)) is fastcall.FastTable


# --------------------------------------------------------------------------- Kernel.matmul's hits and misses

_ptrs = itertools.count(1)


class _Dtype:
    def __init__(self, name: str) -> None:
        self.name = name


F16, BF16 = _Dtype("float16"), _Dtype("bfloat16")


class Tensor:
    """torch.Tensor's accessors the fast path reads."""

    def __init__(self, shape, dtype=F16, ptr=None, device=0, contiguous=True, inference=False) -> None:
        self.shape, self.dtype = tuple(shape), dtype
        self._ptr = ptr if ptr is not None else 0x7E00_0000_0000 + next(_ptrs) * 0x10_0000
        self._device, self._contiguous, self._inference = device, contiguous, inference
        self.version = 0
        self.device = types.SimpleNamespace(type="cuda", index=device)

    @property
    def _version(self) -> int:
        if self._inference:
            raise RuntimeError("Inference tensors do not track version counter.")
        return self.version

    def data_ptr(self) -> int:
        return self._ptr

    def get_device(self) -> int:
        return self._device

    def is_contiguous(self) -> bool:
        return self._contiguous

    def dim(self) -> int:
        return len(self.shape)

    def reshape(self, *shape: int) -> Tensor:
        rows = int(np.prod(self.shape[:-1]))
        return Tensor((rows, self.shape[-1]), self.dtype, self._ptr, self._device, self._contiguous)


def _empty(*sizes, dtype, device) -> Tensor:
    # the hits pass the sizes as ints (torch parses them faster than a tuple)
    assert sizes and all(type(n) is int for n in sizes), sizes
    return Tensor(sizes, dtype, device=device.index)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, driver: _Driver):
    torch = types.SimpleNamespace(Tensor=Tensor, empty=_empty)
    monkeypatch.setitem(__import__("sys").modules, "torch", torch)
    monkeypatch.setattr(fastcall, "_Tensor", Tensor)
    monkeypatch.setattr(fastcall, "_empty", _empty)
    monkeypatch.setattr(fastcall, "_raw_stream", lambda ordinal: 70 + ordinal)
    binds: list[tuple] = []

    def bind(artifact, w, x2, x_stride, M, bias, out):
        binds.append((w, x2.shape, x_stride, M))
        # the GEMV's argument order around the per-call pointers: weight, x, bias, out, then sizes
        return [_bound([w.wq, x2.data_ptr(), 0 if bias is None else bias.data_ptr(), out.data_ptr()])]

    monkeypatch.setattr(mm, "_bind", bind)
    # a rule without measured shapes, in a holder (DispatchRule is frozen: a test puts another in its place)
    rules = [dispatch.DispatchRule(gemm_min_m=17)]
    monkeypatch.setattr(dispatch, "rule_for", lambda device: rules[0])
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: False)  # the GPU's measured rule alone decides
    monkeypatch.setattr(dispatch, "beside", lambda w: None)
    packs: dict[tuple, Any] = {}

    def packed(artifact, owner, q, s, z=None, **kw):
        key = (id(q), q.version, id(s), s.version)
        if key not in packs:
            packs[key] = _weight()
        return packs[key]

    monkeypatch.setattr(mm, "packed_gemv", packed)
    # the GEMM launch a checked call ran (gemm.signature_launch): none unless a test says
    gemm_launch: list[Any] = [lambda spec, gw, x2, M, bias, out: None]
    monkeypatch.setattr(gemm, "signature_launch", lambda *a: gemm_launch[0](*a))
    return types.SimpleNamespace(driver=driver, binds=binds, rules=rules, packs=packs, gemm_launch=gemm_launch)


def _weight(K: int = 256, N: int = 512) -> mm.MatmulWeight:
    w = object.__new__(mm.MatmulWeight)
    w.K, w.N, w.device, w.wq = K, N, 0, 0x7D00_0000_0000 + next(_ptrs) * 0x10_0000
    return w


#: What fastcall reads of dqgen.run.dispatch.MatmulTarget.
TARGET = types.SimpleNamespace(gemm_ok=False, hopper_only=False, artifact=None, key="spec-key")


def _run(table, x, w, scales=None, zeros=None, bias=None, out=None) -> Any:
    """Kernel.matmul's order: the table, else a checked call (a stand-in output) that is then remembered."""
    y = fastcall.matmul_hit(table, x, w, scales, zeros, bias, out)
    if y is not None:
        return y
    y = out if out is not None else Tensor((*x.shape[:-1], w.N if scales is None else 512), x.dtype)
    fastcall.matmul_remember(TARGET, table, x, w, scales, zeros, bias, out, y)
    return None


def test_a_new_x_of_a_checked_signature_launches_with_its_pointers(fake) -> None:
    table, w = fastcall.FastTable(), _weight()
    bias = Tensor((512,))
    assert _run(table, Tensor((1, 256)), w, bias=bias) is None  # checked, then remembered
    assert len(table) == 1 and len(fake.binds) == 1
    for _ in range(3):
        x = Tensor((1, 256))  # a new tensor every call, as in a model
        y = _run(table, x, w, bias=bias)
        assert y is not None and y.shape == (1, 512) and y.dtype is F16
        stream, args = fake.driver.calls[-1]
        assert stream == 70 and args == [w.wq, x.data_ptr(), bias.data_ptr(), y.data_ptr()]
    assert len(fake.binds) == 1 and len(fake.driver.calls) == 3
    given = Tensor((1, 512))
    assert _run(table, Tensor((1, 256)), w, bias=bias, out=given) is None  # a given out: its own signature
    x = Tensor((1, 256))
    assert _run(table, x, w, bias=bias, out=given) is given
    assert fake.driver.calls[-1][1][1:] == [x.data_ptr(), bias.data_ptr(), given.data_ptr()]


def test_leading_dimensions_keep_their_shape(fake) -> None:
    table, w = fastcall.FastTable(), _weight()
    _run(table, Tensor((2, 4, 256)), w)
    y = _run(table, Tensor((2, 4, 256)), w)
    assert y.shape == (2, 4, 512) and fake.binds[-1][1:] == ((8, 256), 256, 8)


@pytest.mark.parametrize(
    "other",
    [
        lambda x, b: (Tensor((2, 256)), b),  # another M
        lambda x, b: (Tensor((1, 256), BF16), b),  # another dtype
        lambda x, b: (Tensor((1, 256), device=1), b),  # another device
        lambda x, b: (Tensor((1, 256), contiguous=False), b),  # strided
        lambda x, b: (Tensor((1, 256), ptr=0x7F00_0000_0008), b),  # 8-byte aligned only: no vector loads of x
        lambda x, b: (x, Tensor((512,))),  # another bias
        lambda x, b: (x, None),  # no bias
    ],
)
def test_anything_the_checks_read_is_in_the_key(fake, other) -> None:
    table, w, x, bias = fastcall.FastTable(), _weight(), Tensor((1, 256)), Tensor((512,))
    _run(table, x, w, bias=bias)
    x2, b2 = other(x, bias)
    assert fastcall.matmul_hit(table, x2, w, None, None, b2, None) is None
    assert fastcall.matmul_hit(table, Tensor((1, 256)), w, None, None, bias, None) is not None


def test_another_thread_has_its_own_entries(fake) -> None:
    table, w = fastcall.FastTable(), _weight()
    _run(table, Tensor((1, 256)), w)
    seen: list[Any] = []
    t = threading.Thread(target=lambda: seen.append(fastcall.matmul_hit(table, Tensor((1, 256)), w, None, None,
                                                                        None, None)))  # fmt: skip
    t.start()
    t.join()
    assert seen == [None]


def test_an_entry_of_a_freed_weight_is_a_miss(fake) -> None:
    """A new weight can take a freed one's id: the entry's weak reference tells them apart."""
    table, w = fastcall.FastTable(), _weight()
    _run(table, Tensor((1, 256)), w)
    (key, entry), = table.items()  # fmt: skip
    w2 = _weight()
    dead = _weight()
    entry.refs = (__import__("weakref").ref(dead),)
    del dead
    gc.collect()
    reused = (id(w2), *key[1:])  # the key of w2 when it took the freed weight's id
    table[reused] = entry
    assert fastcall.matmul_hit(table, Tensor((1, 256)), w2, None, None, None, None) is None


def test_checkpoint_tensors_written_in_place_are_repacked(fake) -> None:
    table = fastcall.FastTable()
    q, s, z = Tensor((256, 64)), Tensor((2, 512)), Tensor((2, 64))
    _run(table, Tensor((1, 256)), q, s, z)
    first = fake.binds[-1][0]
    assert fastcall.matmul_hit(table, Tensor((1, 256)), q, None, None, None, None) is None  # packed form: other key
    assert fastcall.matmul_hit(table, Tensor((1, 256)), q, s, z, None, None) is not None
    s.version += 1  # written in place: a miss, the checked path repacks (the PackCache's new weight)
    assert fastcall.matmul_hit(table, Tensor((1, 256)), q, s, z, None, None) is None
    _run(table, Tensor((1, 256)), q, s, z)
    assert fake.binds[-1][0] is not first
    y = fastcall.matmul_hit(table, Tensor((1, 256)), q, s, z, None, None)
    assert y is not None and fake.driver.calls[-1][1][0] == fake.binds[-1][0].wq


@pytest.mark.parametrize("moved", [0, 1, 2])
def test_checkpoint_tensors_over_new_memory_are_a_miss(fake, moved: int) -> None:
    """``t.data = other`` (or set_) keeps a tensor's id and its version counter but not its memory: a miss."""
    table = fastcall.FastTable()
    q, s, z = Tensor((256, 64)), Tensor((2, 512)), Tensor((2, 64))
    _run(table, Tensor((1, 256)), q, s, z)
    assert fastcall.matmul_hit(table, Tensor((1, 256)), q, s, z, None, None) is not None
    (q, s, z)[moved]._ptr += 0x10_0000
    assert fastcall.matmul_hit(table, Tensor((1, 256)), q, s, z, None, None) is None


def test_inference_tensors_take_the_checked_path(fake) -> None:
    table = fastcall.FastTable()
    q, s = Tensor((256, 64), inference=True), Tensor((2, 512))
    _run(table, Tensor((1, 256)), q, s)
    assert len(table) == 0 and fastcall.matmul_hit(table, Tensor((1, 256)), q, s, None, None, None) is None


def test_the_gemv_is_remembered_where_the_dispatch_gives_it_one_launch(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    table, w = fastcall.FastTable(), _weight()
    _run(table, Tensor((17, 256)), w)  # more rows than one GEMV launch takes
    _run(table, Tensor((0, 256)), w)  # nothing to launch
    assert len(table) == 0 and fake.binds == []
    monkeypatch.setattr(dispatch, "beside", lambda w: "a GemmWeight")
    monkeypatch.setattr(TARGET, "gemm_ok", True)
    monkeypatch.setattr(TARGET, "artifact", types.SimpleNamespace(spec="SPEC"))
    fake.rules[0] = dispatch.DispatchRule(gemm_min_m=16)
    _run(table, Tensor((16, 256)), w)  # this GPU's rule gives 16 rows to the GEMM (which ran no launch to keep here)
    assert len(table) == 0 and fake.binds == []
    _run(table, Tensor((15, 256)), w)  # the GEMV below it
    assert len(table) == 1
    monkeypatch.setattr(dispatch, "beside", lambda w: None)  # packed without the GEMM's layout: GEMV at 16 rows
    _run(table, Tensor((16, 256)), w)
    assert len(table) == 2


def test_slots_that_cannot_be_told_apart_are_not_remembered(fake) -> None:
    table, w = fastcall.FastTable(), _weight()
    x = Tensor((1, 256))
    _run(table, x, w, out=Tensor((1, 512), ptr=x.data_ptr()))  # out over x's memory: one value in two slots
    assert len(table) == 0


def test_non_tensors_miss(fake) -> None:
    table, w = fastcall.FastTable(), _weight()
    _run(table, Tensor((1, 256)), w)
    assert fastcall.matmul_hit(table, np.zeros((1, 256), np.float16), w, None, None, None, None) is None
    assert fastcall.matmul_hit(table, Tensor((1, 256)), w, None, None, [1.0], None) is None


def _gemm_taken(monkeypatch: pytest.MonkeyPatch, fake) -> types.SimpleNamespace:
    """The GEMM takes every M from 16 (a packed weight with its GEMM layout beside it)."""
    gw = types.SimpleNamespace(device=0)
    monkeypatch.setattr(dispatch, "beside", lambda w: gw)
    monkeypatch.setattr(TARGET, "gemm_ok", True)
    monkeypatch.setattr(TARGET, "artifact", types.SimpleNamespace(spec="SPEC"))
    fake.rules[0] = dispatch.DispatchRule(gemm_min_m=16)
    return gw


def test_the_sm80_gemms_launch_is_remembered_with_its_pointer_slots(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    table, w, bias = fastcall.FastTable(), _weight(), Tensor((512,))
    gw = _gemm_taken(monkeypatch, fake)
    asked: list[tuple] = []

    def ran(spec, gw_, x2, M, bias_, out):
        asked.append((spec, gw_, x2.shape, M, bias_, out.shape))
        return _bound([w.wq, x2.data_ptr(), bias_.data_ptr(), out.data_ptr()])

    fake.gemm_launch[0] = ran
    assert _run(table, Tensor((40, 256)), w, bias=bias) is None  # checked, then remembered
    assert asked == [("SPEC", gw, (40, 256), 40, bias, (40, 512))] and len(table) == 1
    for _ in range(3):
        x = Tensor((40, 256))
        y = _run(table, x, w, bias=bias)
        assert y is not None and y.shape == (40, 512)
        assert fake.driver.calls[-1] == (70, [w.wq, x.data_ptr(), bias.data_ptr(), y.data_ptr()])
    assert len(asked) == 1 and fake.binds == []  # no GEMV bound, the GEMM asked once


def test_the_hopper_gemms_launch_is_bound_once_per_x_address(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    """x is in a tensor map: one launch per x address (the map bound with it), y patched into its marker's slot."""
    table, w = fastcall.FastTable(), _weight()
    _gemm_taken(monkeypatch, fake)
    y_mark = markers((True,))[0]
    bound_at: list[int] = []

    def bind(x_ptr: int) -> dev.BoundLaunch:
        bound_at.append(x_ptr)
        return _bound([w.wq, x_ptr, y_mark, 5])  # x's "map" in slot 1 (re-addressed only past X_BOUND_MAX)

    fake.gemm_launch[0] = lambda spec, gw, x2, M, bias, out: BoundPerX(bind, (y_mark, 0, 0), "matmul", 1)
    first = Tensor((64, 256))
    assert _run(table, first, w) is None and bound_at == [first.data_ptr()]
    xs = [Tensor((64, 256)) for _ in range(3)]
    for x in (*xs, xs[0], first):
        y = _run(table, x, w)
        assert y is not None and fake.driver.calls[-1] == (70, [w.wq, x.data_ptr(), y.data_ptr(), 5])
    assert bound_at == [first.data_ptr(), *(x.data_ptr() for x in xs)]  # a seen address binds nothing new


def test_no_gemm_launch_or_the_checkpoint_forms_gemm_is_not_remembered(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    table, w = fastcall.FastTable(), _weight()
    _gemm_taken(monkeypatch, fake)
    _run(table, Tensor((40, 256)), w)  # another path ran (dequantize + cuBLAS, a gathered x): no launch to keep
    assert len(table) == 0
    fake.gemm_launch[0] = lambda *a: pytest.fail("the checkpoint form's GEMM weight is not this table's")
    q, s = Tensor((256, 64)), Tensor((2, 512))
    _run(table, Tensor((40, 256)), q, s)
    assert len(table) == 0 and fake.packs == {}  # nor is a GEMV weight packed for it


class _Weight:
    """A GemmWeight's stand-in (weakly referable): K and run_gemm's bound launches."""

    def __init__(self) -> None:
        self.K, self._bound = 256, {}


def test_signature_launch_binds_launches_of_its_own(monkeypatch: pytest.MonkeyPatch, driver: _Driver) -> None:
    """gemm.signature_launch: None unless run_gemm bound this very call; for the sm_80 GEMM a launch bound anew (the
    fast path patches its slots: run_gemm's own must keep the pointers it was bound with); for the Hopper GEMM
    launches bound per x address with y's marker, the bias by its address, the weight held weakly."""
    import weakref

    w = _Weight()
    x2, y, bias = Tensor((40, 256)), Tensor((40, 512)), Tensor((512,))
    assert gemm.signature_launch("SPEC", w, x2, 40, bias, y) is None  # run_gemm bound nothing for it
    cached = _bound([1, x2.data_ptr(), y.data_ptr()])
    w._bound[gemm._bound_key(x2, 40, 256, y, bias)] = cached
    monkeypatch.setattr(gemm, "hopper_ineligible", lambda w, x_ptr, x_stride: "the GPU is not sm_90")
    binds: list[tuple] = []
    monkeypatch.setattr(gemm, "_bind", lambda *a: binds.append(a) or _bound([2, x2.data_ptr(), y.data_ptr()]))
    got = gemm.signature_launch("SPEC", w, x2, 40, bias, y)
    assert isinstance(got, dev.BoundLaunch) and got is not cached and binds == [("SPEC", w, x2, 256, 40, bias, y)]
    monkeypatch.setattr(gemm, "hopper_ineligible", lambda w, x_ptr, x_stride: "")
    monkeypatch.setattr(gemm, "_takes90", lambda spec, w, M: True)
    bound90: list[tuple] = []

    def bind90(spec, gw, x_ptr, x_stride, M, bias_, out, cfg, want_splits):
        bound90.append((gw, x_ptr, x_stride, M, bias_.data_ptr(), cfg, want_splits))
        return _bound([x_ptr, bias_.data_ptr(), out.data_ptr()])

    monkeypatch.setattr(gemm, "bind90", bind90)
    per_x = gemm.signature_launch("SPEC", w, x2, 40, bias, y)
    assert isinstance(per_x, BoundPerX) and bound90 == []  # bound on first use of an address
    fn, y_slot, b, c = per_x(0x7E77_0000_0000)
    assert (y_slot, b, c) == (2, -1, -1) and fn.slots[y_slot] == markers((True,))[0]
    assert bound90 == [(w, 0x7E77_0000_0000, 256, 40, bias.data_ptr(), None, None)]
    gone = weakref.ref(w)
    binds.clear()  # this test's own records of it
    bound90.clear()
    del w
    gc.collect()
    assert gone() is None  # the per-x launches do not keep the weight
    with pytest.raises(RuntimeError, match=r"^matmul: the GEMM weight of this signature is gone$"):
        per_x(0x7E78_0000_0000)
