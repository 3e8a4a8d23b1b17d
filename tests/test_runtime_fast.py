"""The runtime's fast paths on the CPU: group_size 'auto' resolved per call, the per-signature check cache of
torch calls (with a stand-in torch module: no GPU, no torch needed), lazy per-variant compiles through NVRTC
(which runs without a GPU) and the per-step seconds of `dqgen build --json`."""

from __future__ import annotations

import itertools
import json
import sys
import types

import numpy as np
import pytest
from typer.testing import CliRunner

import dqgen.run.runtime as rt
from dqgen.check.reference import dequantize_reference, random_inputs
from dqgen.cli import app
from dqgen.core.spec import SpecError, load_spec, with_group_size
from dqgen.kernels.dequant import kernel_name, variants
from dqgen.run import device as dev
from dqgen.run import loader
from dqgen.run.problem import infer_problem
from dqgen.run.runtime import Kernel, ShapeError
from dqgen.run.tune import default_variant

from .test_runtime import F16, I32, arr

AWQ = load_spec("awq_int4_fp16")
GPTQ = load_spec("gptq_int4_fp16")
GPTQ_ACT = load_spec("gptq_int4_asym_act_order_fp16")


# --------------------------------------------------------------------------- group_size auto


def test_shipped_awq_and_gptq_specs_default_to_auto() -> None:
    for name in ("awq_int4_fp16", "awq_int4_bf16", "gptq_int4_fp16", "gptq_int3_fp16", "gptq_uint2_asym_fp16"):
        assert load_spec(name).scales.group_size == "auto", name


@pytest.mark.parametrize("G", [1, 2, 4, 32, 256])
def test_auto_group_size_is_k_over_scale_rows_packed_along_n(G: int) -> None:
    K, N = 256, 1024
    p = infer_problem(AWQ, arr((K, N // 8), I32), arr((G, N), F16), arr((G, N // 8), I32), arr((K, N), F16))
    assert (p.K, p.N, p.groups, p.group_size) == (K, N, G, K // G)


@pytest.mark.parametrize("G", [1, 4, 32])
def test_auto_group_size_packed_along_k(G: int) -> None:
    K, N = 256, 64
    p = infer_problem(GPTQ, arr((K // 8, N), I32), arr((G, N), F16), None, None)
    assert (p.groups, p.group_size) == (G, K // G)


@pytest.mark.parametrize(
    ("spec", "qshape", "rows", "expect"),
    [
        (AWQ, (256, 128), 3, "rows must divide K = 256"),
        (AWQ, (256, 128), 0, "rows must divide K = 256"),
        (AWQ, (256, 128), 512, "rows must divide K = 256"),
        (GPTQ, (32, 64), 64, "group size K / rows = 256 / 64 = 4, not a multiple of 8"),
    ],
)
def test_auto_group_size_errors_name_scales(spec, qshape: tuple[int, int], rows: int, expect: str) -> None:
    N = qshape[1] * 8 if spec.packing.axis == "N" else qshape[1]
    with pytest.raises(ShapeError) as ei:
        infer_problem(spec, arr(qshape, I32), arr((rows, N), F16), arr((max(rows, 1), N // 8), I32), None)
    msg = str(ei.value)
    assert msg.startswith("scales: ") and expect in msg and "\n" not in msg


def test_auto_zeros_rows_must_match_scales() -> None:
    with pytest.raises(ShapeError, match=r"^zeros: expected shape \(4, 128\)"):
        infer_problem(AWQ, arr((256, 128), I32), arr((4, 1024), F16), arr((2, 128), I32), None)


def test_explicit_group_size_still_checked() -> None:
    fixed = with_group_size(AWQ, 64)
    assert fixed.scales.group_size == 64
    p = infer_problem(fixed, arr((256, 128), I32), arr((4, 1024), F16), arr((4, 128), I32), None)
    assert p.group_size == 64
    with pytest.raises(ShapeError, match=r"^scales: expected shape \(4, 1024\)"):
        infer_problem(fixed, arr((256, 128), I32), arr((2, 1024), F16), arr((2, 128), I32), None)


def test_auto_in_spec_files() -> None:
    data = AWQ.model_dump(mode="json")
    assert data["scales"]["group_size"] == "auto"
    assert load_spec(data).scales.group_size == "auto"
    mx = load_spec("mxfp4_bf16").model_dump(mode="json")
    mx["scales"]["group_size"] = "auto"
    with pytest.raises(SpecError, match=r"scales\.group_size"):
        load_spec(mx)
    data["scales"]["group_size"] = "automatic"
    with pytest.raises(SpecError, match="group_size"):
        load_spec(data)


@pytest.mark.parametrize("name", ["awq_int4_fp16", "gptq_int3_fp16", "gptq_int4_asym_act_order_fp16"])
@pytest.mark.parametrize("group", [32, 64, 256])
def test_reference_auto_equals_explicit(name: str, group: int) -> None:
    auto = load_spec(name)
    fixed = with_group_size(auto, group)
    q, s, z, gi = random_inputs(fixed, 256, 64, seed=group)
    assert s.shape[0] == 256 // group
    got = dequantize_reference(auto, q, s, z, gi)
    want = dequantize_reference(fixed, q, s, z, gi)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_reference_auto_error() -> None:
    q, s, z, _ = random_inputs(with_group_size(AWQ, 64), 256, 64, seed=0)
    with pytest.raises(ValueError, match=r"^scales: 3 rows, but with scales.group_size 'auto'"):
        dequantize_reference(AWQ, q, s[:3], z[:3], None)


# --------------------------------------------------------------------------- a stand-in torch


class _Dtype:
    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size

    def __repr__(self) -> str:
        return f"torch.{self.name}"


_ptr = itertools.count(1)


def _fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    for name, size in [
        ("float16", 2),
        ("bfloat16", 2),
        ("float32", 4),
        ("float64", 8),
        ("int8", 1),
        ("uint8", 1),
        ("int16", 2),
        ("int32", 4),
        ("int64", 8),
    ]:
        setattr(torch, name, _Dtype(name, size))

    class Tensor:
        def __init__(self, shape, dtype, ptr=None, stride=None) -> None:
            self._shape, self.dtype = tuple(shape), dtype
            self._ptr = ptr if ptr is not None else 0x7E00_0000_0000 + next(_ptr) * 0x100_0000
            if stride is None:
                stride, acc = [], 1
                for d in reversed(self._shape):
                    stride.append(acc)
                    acc *= max(d, 1)
                stride = tuple(reversed(stride))
            self._stride = tuple(stride)
            self._version = 0
            self.is_cuda = True
            self.device = types.SimpleNamespace(type="cuda", index=0)

        @property
        def shape(self) -> tuple[int, ...]:
            return self._shape

        def data_ptr(self) -> int:
            return self._ptr

        def stride(self) -> tuple[int, ...]:
            return self._stride

        def is_contiguous(self) -> bool:
            expected = 1
            for dim, step in zip(reversed(self._shape), reversed(self._stride), strict=True):
                if dim != 1 and step != expected:
                    return False
                expected *= dim
            return True

        def element_size(self) -> int:
            return self.dtype.size

        def dim(self) -> int:
            return len(self._shape)

        def numel(self) -> int:
            return int(np.prod(self._shape))

    torch.Tensor = Tensor  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        current_device=lambda: 0,
        current_stream=lambda device=None: types.SimpleNamespace(cuda_stream=0),
        is_available=lambda: False,
    )
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 7)  # type: ignore[attr-defined]
    return torch


class _Recorder:
    """Stands in for loaded entry points: records compiles (names), binds and launches."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.launches: list[tuple[str, int, tuple]] = []

    def function(self, kernel: Kernel, ordinal: int, name: str):
        rec = self
        self.loaded.append(name)

        class Bound:
            """BoundLaunch's interface: ``launch(stream, params, 0) -> (CUresult,)``, ``params``, ``failed``."""

            def __init__(self, args) -> None:
                self.args, self.params = tuple(int(a) for a in args), 0x5EED

            def launch(self, stream: int, params: int, extra: int) -> tuple[int]:
                assert params == self.params and extra == 0
                rec.launches.append((name, stream, self.args))
                return (0,)

            def __call__(self, stream: int) -> None:
                self.launch(stream, self.params, 0)

            def failed(self, err, stream: int) -> None:
                raise AssertionError("no launch fails here")

        class Fn:
            def bind(self, grid, block, args):
                return Bound(args)

        return Fn()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    torch = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(rt, "_hook_torch", lambda: None)
    # what _hook_torch takes from a real torch, from the fake (no custom ops registered)
    monkeypatch.setattr(rt, "_torch_tensor", torch.Tensor)
    monkeypatch.setattr(rt, "_raw_stream", torch._C._cuda_getCurrentRawStream)
    monkeypatch.setattr(rt, "_compiling", rt._never)
    rec = _Recorder()
    monkeypatch.setattr(Kernel, "_function", lambda self, o, n: rec.function(self, o, n))
    monkeypatch.setattr(Kernel, "variant_for", lambda self, o, p: default_variant(self.spec, p.aligned))
    checks: list[int] = []
    real = rt.infer_problem

    def counting(*a, **kw):
        checks.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(rt, "infer_problem", counting)
    return types.SimpleNamespace(torch=torch, rec=rec, checks=checks)


def _awq_tensors(torch, K: int = 256, N: int = 1024, G: int = 2):
    return (
        torch.Tensor((K, N // 8), torch.int32),
        torch.Tensor((G, N), torch.float16),
        torch.Tensor((G, N // 8), torch.int32),
        torch.Tensor((K, N), torch.float16),
    )


# --------------------------------------------------------------------------- the per-signature cache


def test_same_signature_checked_once_launched_every_time(fake) -> None:
    k = Kernel(AWQ)
    q, s, z, w = _awq_tensors(fake.torch)
    for _ in range(5):
        assert k(q, s, z, out=w) is w
    assert len(fake.checks) == 1 and len(fake.rec.launches) == 5
    _, stream, args = fake.rec.launches[-1]
    assert stream == 7  # torch's current raw stream, fetched per call
    assert args[:4] == (q.data_ptr(), s.data_ptr(), z.data_ptr(), 0) and args[4] == w.data_ptr()
    assert args[-1] == 128  # group size K / rows of scales


@pytest.mark.parametrize("change", ["pointer", "stride", "dtype", "shape"])
def test_changed_signature_is_checked_again(fake, change: str) -> None:
    torch = fake.torch
    k = Kernel(AWQ)
    q, s, z, w = _awq_tensors(torch)
    k(q, s, z, out=w)
    if change == "pointer":
        s2 = torch.Tensor(s.shape, torch.float16)
        k(q, s2, z, out=w)
        assert fake.rec.launches[-1][2][1] == s2.data_ptr()
        assert len(fake.checks) == 2
        return
    if change == "stride":  # same memory, a transposed view: not contiguous, so the new check raises
        bad = torch.Tensor((1024, 2), torch.float16, ptr=s.data_ptr(), stride=(1, 1024))
        bad._shape = (2, 1024)
        bad._stride = (1, 2)
    elif change == "dtype":
        bad = torch.Tensor(s.shape, torch.bfloat16, ptr=s.data_ptr())
    else:
        bad = torch.Tensor((4, 512), torch.float16, ptr=s.data_ptr())
    with pytest.raises(ShapeError, match=r"^scales: "):
        k(q, bad, z, out=w)
    assert len(fake.checks) == 2 and len(fake.rec.launches) == 1  # nothing launched for the bad call
    k(q, s, z, out=w)  # the good signature is still cached
    assert len(fake.checks) == 2 and len(fake.rec.launches) == 2


def test_bad_tensor_after_good_one_raises_every_time(fake) -> None:
    torch = fake.torch
    k = Kernel(AWQ)
    q, s, z, w = _awq_tensors(torch)
    k(q, s, z, out=w)
    bad_out = torch.Tensor((256, 1024), torch.float32)
    for _ in range(2):
        with pytest.raises(ShapeError, match=r"^out: expected dtype fp16"):
            k(q, s, z, out=bad_out)
    assert len(fake.rec.launches) == 1


def test_explicit_stream_is_part_of_the_signature(fake) -> None:
    k = Kernel(AWQ)
    q, s, z, w = _awq_tensors(fake.torch)
    k(q, s, z, out=w, stream=11)
    k(q, s, z, out=w, stream=12)
    k(q, s, z, out=w)
    assert [launch[1] for launch in fake.rec.launches] == [11, 12, 7]


def test_act_order_g_idx_checked_once_per_version(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = fake.torch
    k = Kernel(GPTQ_ACT)
    K, N, G = 256, 64, 2
    q = torch.Tensor((K // 8, N), torch.int32)
    s = torch.Tensor((G, N), torch.float16)
    z = torch.Tensor((G, N // 8), torch.int32)
    gi = torch.Tensor((K,), torch.int32)
    w = torch.Tensor((K, N), torch.float16)
    seen: list[int] = []

    def check(a: dev.DeviceArray, groups: int) -> None:
        seen.append(groups)
        if gi._version == 2:
            raise ShapeError(f"g_idx: entry 0 is {groups}, outside [0, {groups})")

    monkeypatch.setattr(rt.checks, "check_g_idx", check)
    k(q, s, z, g_idx=gi, out=w)
    k(q, s, z, g_idx=gi, out=w)
    assert seen == [G] and len(fake.rec.launches) == 2
    gi._version = 1  # written in place: checked again, once
    k(q, s, z, g_idx=gi, out=w)
    k(q, s, z, g_idx=gi, out=w)
    assert seen == [G, G] and len(fake.rec.launches) == 4
    gi2 = torch.Tensor((K,), torch.int32, ptr=gi.data_ptr())  # a new tensor where a freed one was: checked
    gi2._version = 1
    k(q, s, z, g_idx=gi2, out=w)
    assert seen == [G, G, G] and len(fake.rec.launches) == 5
    gi._version = 2  # now holds a bad entry: raises before launching, and again on the next call
    for _ in range(2):
        with pytest.raises(ShapeError, match=r"^g_idx: "):
            k(q, s, z, g_idx=gi, out=w)
    assert len(fake.rec.launches) == 5


def test_non_torch_arrays_take_the_checked_path(fake) -> None:
    k = Kernel(AWQ)
    args = dict(qweight=arr((256, 128), I32), scales=arr((2, 1024), F16), zeros=arr((2, 128), I32))
    out = arr((256, 1024), F16)
    k(args["qweight"], args["scales"], args["zeros"], out=out)
    k(args["qweight"], args["scales"], args["zeros"], out=out)
    assert len(fake.checks) == 2 and len(fake.rec.launches) == 2


@pytest.mark.parametrize("stream", [None, 13])
def test_fast_path_and_checked_path_share_one_entry(fake, stream, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernel.__call__ writes the signature key out inline; the checked path (and the custom ops) build it with
    _signature_key: a signature checked by either is found by the other."""
    torch = fake.torch
    k = Kernel(AWQ)
    slow: list[int] = []
    real_call = Kernel._call
    monkeypatch.setattr(Kernel, "_call", lambda self, *a: slow.append(1) or real_call(self, *a))
    q, s, z, w = _awq_tensors(torch)
    k.torch_call(torch, q, s, z, None, None, w, stream)  # what dqgen::dequantize_out runs
    for _ in range(3):
        k(q, s, z, out=w, stream=stream)
    assert len(fake.checks) == 1 and len(fake.rec.launches) == 4
    assert slow == []  # every __call__ found the entry on its own inline key
    q2, s2, z2, w2 = _awq_tensors(torch)
    k(q2, s2, z2, out=w2, stream=stream)  # checked through __call__ first this time
    k.torch_call(torch, q2, s2, z2, None, None, w2, stream)
    k(q2, s2, z2, out=w2, stream=stream)
    assert len(fake.checks) == 2 and len(fake.rec.launches) == 7 and slow == [1]
    assert {launch[1] for launch in fake.rec.launches} == {7 if stream is None else stream}


def test_tensor_subclass_is_checked_once_too(fake) -> None:
    class Parameter(fake.torch.Tensor):  # e.g. torch.nn.Parameter: not `type(q) is Tensor`, still cached
        pass

    k = Kernel(AWQ)
    _, s, z, w = _awq_tensors(fake.torch)
    q = Parameter((256, 128), fake.torch.int32)
    for _ in range(3):
        k(q, s, z, out=w)
    assert len(fake.checks) == 1 and len(fake.rec.launches) == 3


def test_non_tensor_argument_is_named_on_every_call(fake) -> None:
    k = Kernel(AWQ)
    q, _, z, w = _awq_tensors(fake.torch)
    for _ in range(2):
        with pytest.raises(TypeError, match=r"^scales: unsupported array type list"):
            k(q, [1.0, 2.0], z, out=w)
    assert fake.rec.launches == [] and k._signatures == {}


def test_traced_by_torch_compile_even_when_cached(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    k = Kernel(AWQ)
    q, s, z, w = _awq_tensors(fake.torch)
    k(q, s, z, out=w)
    traced: list[object] = []
    monkeypatch.setattr(rt, "_compiling", lambda: True)
    monkeypatch.setattr(rt, "_traced_call", lambda kernel, *args: traced.append(args) or "traced")
    assert k(q, s, z, out=w) == "traced"
    assert len(traced) == 1 and len(fake.rec.launches) == 1


# --------------------------------------------------------------------------- lazy compile


class _FakeLoaded:
    def __init__(self, image: bytes, name: str, device: int = 0) -> None:
        self.image, self.name = image, name

    def bind(self, grid, block, args):
        return lambda stream: None


@pytest.fixture
def lazy(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dev, "device_arch", lambda ordinal=0: "sm_90")
    monkeypatch.setattr(dev, "LoadedKernel", _FakeLoaded)
    monkeypatch.setattr(loader, "_LOADED", {})
    monkeypatch.setattr(loader, "_MODULES", {})
    compiled: list[str] = []
    real = loader.compile_source

    def counting(source: str, **kw):
        compiled.append(source)
        return real(source, **kw)

    monkeypatch.setattr(loader, "compile_source", counting)
    return compiled


def test_only_the_needed_variant_is_compiled(lazy) -> None:
    k = Kernel(AWQ)
    v = default_variant(AWQ, True)
    name = kernel_name(AWQ, v)
    fn = k._function(0, name)
    assert k.compiled == [name] and len(lazy) == 1
    others = [kernel_name(AWQ, o) for o in variants(AWQ) if o != v]
    assert lazy[0].count('extern "C" __global__') == 1 and name in lazy[0]
    assert name.encode() in fn.image and not any(o.encode() in fn.image for o in others)
    k._function(0, name)
    assert len(lazy) == 1  # the Kernel keeps it
    k2 = Kernel(AWQ)
    assert k2._function(0, name) is fn and len(lazy) == 1  # the process keeps it for other Kernels


def test_variant_taken_from_the_whole_sets_cached_cubin(lazy) -> None:
    k = Kernel(AWQ)
    loader.compile_source(k.source, arch="sm_90", want="cubin", name=f"{AWQ.name}.cu")  # what `dqgen build` leaves
    lazy.clear()
    name = kernel_name(AWQ, default_variant(AWQ, False))
    fn = k._function(0, name)
    assert lazy == [] and name.encode() in fn.image  # no compile: the set's cubin has every entry point


# --------------------------------------------------------------------------- dqgen build --json


def test_build_json_has_seconds_per_step(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(dev, "gpu_available", lambda: False)
    res = CliRunner().invoke(app, ["build", "awq_int4_fp16", "--json", "--words", "1000", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    sec = report["seconds"]
    main_path = ("start", "solve", "proof", "gpu_wait", "write")
    assert set(main_path) | {"compile", "total"} == set(sec)
    assert all(sec[s] >= 0 for s in main_path) and sec["compile"] > 0
    # compile runs in a thread beside the proof: each keeps its own wall time, the main thread's steps (waiting for
    # the compile's rest after the proof among them) add up to the total
    assert list(report["overlapped"]) == ["compile"]
    assert sum(sec[s] for s in main_path) == pytest.approx(sec["total"], abs=0.02)
    assert sec["compile"] <= sec["proof"] + sec["gpu_wait"] + 0.02


def test_build_compiles_once_for_ptx_and_cubin(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dqgen.emit.nvrtc as nv
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    runs: list[str] = []
    real = nv._compile

    def counting(source, arch, want, *a):
        runs.append(want)
        return real(source, arch, want, *a)

    monkeypatch.setattr(nv, "_compile", counting)
    for _ in range(2):
        report = build_spec(AWQ, "sm_90", tmp_path / "out", words=100, gpu=False)
        assert report["steps"]["compile"]["ok"], report["steps"]["compile"]
    # one cubin run per source (the dequantize kernel, the GEMV, the GEMM); the second build takes all from the cache
    assert runs == ["cubin"] * 3
    ptx = (tmp_path / "out" / "awq_int4_fp16.sm_90.ptx").read_text()
    assert ".target sm_90" in ptx and ptx.count(".entry dqgen_awq_int4_fp16_v") == len(variants(AWQ))
