"""Tensor views of CAI / DLPack producers through cuda.core's StridedMemoryView, on the CPU.

The views are real: a DLPack producer here hands out numpy's own capsule with the DLTensor's dtype code and
device rewritten (what a CUDA producer of that dtype exports), and cuda.core parses it. A CAI view asks the driver
for the pointer's device, so those tests answer that one driver call (``fake_driver``). What cuda-core 1.2.0 (the
GPU machine's) and 1.2.2 (this venv's) answer was read from both wheels: the same facts, pinned in
``test_installed_cuda_core_answers_as_recorded``.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from dqgen.core.formats import BF16, E4M3, E8M0, FP16, FP32, numpy_dtype
from dqgen.core.spec import SHIPPED_SPECS, load_spec, with_group_size
from dqgen.run import device
from dqgen.run.problem import infer_problem
from dqgen.run.runtime import Kernel, ShapeError

# --------------------------------------------------------------------------- a CUDA DLPack producer, faked


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
# DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter, flags (u64), then the DLTensor
_VERSIONED_TENSOR_AT = 32

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
INT, UINT, FLOAT, BFLOAT = 0, 1, 2, 4
#: DLPack 1.x's float8 type codes (dlpack.h): e3m4, e4m3, e4m3b11fnuz, e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu
FLOAT8_CODES = {"float8_e4m3fn": 10, "float8_e5m2": 12, "float8_e8m0fnu": 14}


class CudaDLPack:
    """Exports ``arr``'s bytes as a CUDA tensor of DLPack dtype (code, bits) on ``device``."""

    def __init__(
        self, arr: np.ndarray, code: int, bits: int, device: tuple[int, int] = (KDL_CUDA, 3), offset: int = 0
    ) -> None:
        self.arr, self.code, self.bits, self.device, self.offset = arr, code, bits, device, offset
        self.streams: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, stream: Any = None, max_version: tuple[int, int] | None = None, **_: Any) -> Any:
        self.streams.append(stream)
        if max_version is not None and not self.arr.flags.writeable:  # read-only needs DLPack 1.x's flag
            capsule = self.arr.__dlpack__(max_version=(1, 0))
            t = _DLTensor.from_address(_get_pointer(capsule, b"dltensor_versioned") + _VERSIONED_TENSOR_AT)
        else:
            capsule = self.arr.__dlpack__()
            t = _DLTensor.from_address(_get_pointer(capsule, b"dltensor"))
        t.dtype.code, t.dtype.bits = self.code, self.bits
        t.device.device_type, t.device.device_id = self.device
        t.data, t.byte_offset = t.data - self.offset, self.offset  # the same address, part of it as an offset
        return capsule


def dlpack_of(arr: np.ndarray, dtype: np.dtype, **kw: Any) -> CudaDLPack:
    """``arr`` (any dtype of the right width) exported as a CUDA tensor of ``dtype``."""
    code = BFLOAT if dtype == numpy_dtype(BF16) else {"i": INT, "u": UINT, "f": FLOAT}[dtype.kind]
    return CudaDLPack(arr, code, dtype.itemsize * 8, **kw)


def words(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Host bytes standing in for device memory: distinct values, a 16-byte aligned start."""
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + 16, np.uint8)
    start = -raw.ctypes.data % 16
    out = raw[start : start + n].view(f"u{dtype.itemsize}").reshape(shape)
    out[...] = np.arange(out.size, dtype=out.dtype).reshape(shape)
    return out


# --------------------------------------------------------------------------- a CAI producer, and the driver call


class Cai:
    def __init__(self, **fields: Any) -> None:
        cai = {"shape": (4, 2), "typestr": "<u4", "data": (0x7F00_0000_1000, False), "version": 3, "strides": None}
        self.__cuda_array_interface__ = cai | fields


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """StridedMemoryView asks the driver which device a CAI pointer is on (cuCtxGetDevice for a null pointer):
    answered here as device 5 (6), the rest of the driver untouched."""
    smv_module = sys.modules[device.strided_memory_view_type().__module__]
    real = smv_module.driver
    ok = real.CUresult.CUDA_SUCCESS

    class _Driver:
        def cuPointerGetAttribute(self, attr: Any, ptr: int) -> tuple[Any, int]:
            assert attr == real.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
            return ok, 5

        def cuCtxGetDevice(self) -> tuple[Any, int]:
            return ok, 6

        def __getattr__(self, attr: str) -> Any:
            return getattr(real, attr)

    monkeypatch.setattr(smv_module, "driver", _Driver())
    yield


# --------------------------------------------------------------------------- what cuda.core answers


def test_installed_cuda_core_answers_as_recorded(fake_driver: None) -> None:
    """The facts device._view_dtype is written against, read from cuda-core 1.2.0's and 1.2.2's wheels alike: a
    new cuda-core that answers otherwise fails here first."""
    smv = device.strided_memory_view_type()
    bf = smv.from_dlpack(CudaDLPack(words((2,), np.dtype(np.uint16)), BFLOAT, 16), stream_ptr=0)
    assert bf.dtype == np.dtype(ml_dtypes.bfloat16)
    for code in range(7, 15):  # every float8 code of DLPack 1.x
        view = smv.from_dlpack(CudaDLPack(words((2,), np.dtype(np.uint8)), code, 8), stream_ptr=0)
        with pytest.raises(TypeError, match=f"dtype code: {code}"):
            _ = view.dtype
    for typestr, itemsize in (("<V2", 2), ("|V1", 1)):  # ml_dtypes' bfloat16 / float8 typestrs
        dt = smv.from_cuda_array_interface(Cai(typestr=typestr), stream_ptr=-1).dtype
        assert dt.type is np.void and dt.itemsize == itemsize


# --------------------------------------------------------------------------- every dtype dqgen accepts

#: Every dtype a tensor of dqgen's may have: packed words and g_idx (int32 / uint32), the targets' values and
#: their scales / zeros (float16, bfloat16), block-scale bytes (uint8), the global scale (float32) and the GRU's
#: int8, plus the other plain integer / float widths the reader passes on for the runtime to name.
ACCEPTED = [np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)]
ACCEPTED += [numpy_dtype(FP16), numpy_dtype(BF16), numpy_dtype(FP32), np.dtype(np.float64)]


@pytest.mark.parametrize("dtype", ACCEPTED, ids=str)
def test_every_accepted_dtype_through_dlpack(dtype: np.dtype) -> None:
    host = words((3, 8), dtype)
    producer = dlpack_of(host, dtype, offset=16)
    a = device.as_device_array(producer, "scales")
    assert a.dtype == dtype and a.dtype.byteorder in "=|"
    assert a.ptr == host.ctypes.data  # the DLTensor's byte_offset counted in
    assert (a.shape, a.strides_bytes, a.device, a.kind) == ((3, 8), host.strides, 3, "dlpack")
    assert a.is_c_contiguous and not a.readonly
    assert isinstance(a.keepalive, device.strided_memory_view_type())  # it owns the consumed capsule
    assert producer.streams == [None]  # __dlpack__(stream=None), as dqgen always asked: the legacy default stream


@pytest.mark.parametrize("dtype", [d for d in ACCEPTED if d != numpy_dtype(BF16)], ids=str)
def test_every_accepted_dtype_through_cai(dtype: np.dtype, fake_driver: None) -> None:
    """(bfloat16 has no CAI typestr: test_cai_void_dtypes_refused)"""
    a = device.as_device_array(Cai(typestr=dtype.str, strides=(8 * dtype.itemsize, dtype.itemsize)), "zeros")
    assert a.dtype == dtype and (a.shape, a.device, a.kind, a.ptr) == ((4, 2), 5, "cai", 0x7F00_0000_1000)
    assert a.strides_bytes == (8 * dtype.itemsize, dtype.itemsize) and not a.is_c_contiguous


def test_whole_calls_of_every_tensor_role_through_dlpack() -> None:
    """Each dtype in the role a spec gives it, read through DLPack and accepted by the runtime's checks."""
    i32, u8, f32 = np.dtype(np.int32), np.dtype(np.uint8), numpy_dtype(FP32)

    def view(shape: tuple[int, ...], dt: np.dtype, name: str) -> device.DeviceArray:
        return device.as_device_array(dlpack_of(words(shape, dt), dt), name)

    K, N = 256, 64
    for name in ("awq_int4_fp16", "awq_int4_bf16"):
        s = with_group_size(load_spec(SHIPPED_SPECS / f"{name}.yaml"), 128)
        t = numpy_dtype(BF16) if name.endswith("bf16") else numpy_dtype(FP16)
        q, sc, z = view((K, N // 8), i32, "qweight"), view((2, N), t, "scales"), view((2, N // 8), i32, "zeros")
        out = view((K, N), t, "out")
        assert infer_problem(s, q, sc, z, out).K == K
    gptq = with_group_size(load_spec(SHIPPED_SPECS / "gptq_int4_asym_act_order_fp16.yaml"), 128)
    q, sc = view((K // 8, N), i32, "qweight"), view((2, N), numpy_dtype(FP16), "scales")
    prob = infer_problem(gptq, q, sc, view((2, N // 8), i32, "zeros"), None, view((K,), i32, "g_idx"))
    assert prob.groups == 2
    nvfp4 = load_spec(SHIPPED_SPECS / "nvfp4_fp16.yaml")
    G = K // nvfp4.scales.group_size
    prob = infer_problem(
        nvfp4,
        view((K // 8, N), i32, "qweight"),
        view((G, N), u8, "scales"),  # e4m3 block scales as their bytes
        None,
        view((K, N), numpy_dtype(FP16), "out"),
        None,
        view((1,), f32, "global_scale"),
    )
    assert prob.groups == G


# --------------------------------------------------------------------------- dtypes refused, per version's answer


@pytest.mark.parametrize("fmt", sorted(FLOAT8_CODES))
def test_dlpack_float8_refused_naming_the_tensor(fmt: str) -> None:
    """cuda-core 1.2.x cannot read DLPack's float8 codes (TypeError from .dtype): a one-line error that says the
    bytes are taken as uint8, never a guess at the format."""
    producer = CudaDLPack(words((2, 4), np.dtype(np.uint8)), FLOAT8_CODES[fmt], 8)
    with pytest.raises(TypeError) as ei:
        device.as_device_array(producer, "scales")
    msg = str(ei.value)
    assert msg.startswith("scales: cuda.core cannot read this DLPack dtype (") and "uint8" in msg
    assert "\n" not in msg
    # the same bytes as uint8 codes are read
    assert device.as_device_array(dlpack_of(producer.arr, np.dtype(np.uint8)), "scales").dtype == np.uint8


def _fake_smv(monkeypatch: pytest.MonkeyPatch, dtype: Any) -> None:
    def dtype_of(_: Any) -> Any:
        if isinstance(dtype, Exception):
            raise dtype
        return dtype

    view_type = type("FakeView", (), {"dtype": property(dtype_of)})

    def make(obj: Any, stream_ptr: int) -> Any:
        v = view_type()
        v.ptr, v.device_id, v.readonly, v.shape, v.strides = 0x7F00_0000_2000, 0, False, (2, 4), None
        return v

    fake = SimpleNamespace(from_dlpack=make, from_cuda_array_interface=make)
    monkeypatch.setattr(device, "strided_memory_view_type", lambda: fake)


# The answers of each cuda-core for each narrow dtype dqgen's tensors hold: 1.2.0 and 1.2.2 (read from their
# wheels) give bfloat16 as ml_dtypes', float8 as TypeError (DLPack) or numpy void (CAI); a later version may give
# ml_dtypes' float8 dtypes, which the formats registry maps.
ANSWERS = [
    ("1.2.x dlpack bfloat16", np.dtype(ml_dtypes.bfloat16), numpy_dtype(BF16)),
    ("1.2.x dlpack e4m3", TypeError("Unsupported dtype. dtype code: 10"), "cuda.core cannot read this"),
    ("1.2.x dlpack e8m0", TypeError("Unsupported dtype. dtype code: 14"), "cuda.core cannot read this"),
    ("1.2.x cai bfloat16", np.dtype("V2"), "is opaque 2-byte values"),
    ("1.2.x cai float8", np.dtype("V1"), "is opaque 1-byte values"),
    ("no ml_dtypes", NotImplementedError("bfloat16 requires ml_dtypes"), "cuda.core cannot read this"),
    ("later e4m3", np.dtype(ml_dtypes.float8_e4m3fn), numpy_dtype(E4M3)),
    ("later e8m0", np.dtype(ml_dtypes.float8_e8m0fnu), numpy_dtype(E8M0)),
    ("later e5m2 (no tensor role)", np.dtype(ml_dtypes.float8_e5m2), "unsupported"),
    ("float4 (no tensor role)", np.dtype(ml_dtypes.float4_e2m1fn), "unsupported"),
    ("big-endian", np.dtype(">u4"), "unsupported"),
    ("bool", np.dtype(np.bool_), "unsupported"),
    ("complex", np.dtype(np.complex64), "unsupported"),
]


@pytest.mark.parametrize(("answer", "expect"), [a[1:] for a in ANSWERS], ids=[a[0] for a in ANSWERS])
@pytest.mark.parametrize("protocol", ["dlpack", "cai"])
def test_each_versions_dtype_answer(monkeypatch: pytest.MonkeyPatch, answer: Any, expect: Any, protocol: str) -> None:
    _fake_smv(monkeypatch, answer)
    producer = CudaDLPack(words((2, 4), np.dtype(np.uint8)), UINT, 8) if protocol == "dlpack" else Cai()
    if isinstance(expect, np.dtype):
        a = device.as_device_array(producer, "scales")
        assert a.dtype == expect and a.strides_bytes == (4 * expect.itemsize, expect.itemsize)
        return
    with pytest.raises(TypeError, match=r"^scales: ") as ei:
        device.as_device_array(producer, "scales")
    assert expect in str(ei.value) and "\n" not in str(ei.value)


def test_cai_void_dtypes_refused(fake_driver: None) -> None:
    for typestr in ("<V2", "|V1"):
        with pytest.raises(TypeError, match=rf"^scales: __cuda_array_interface__ dtype \|{typestr[1:]} is opaque"):
            device.as_device_array(Cai(typestr=typestr), "scales")
    with pytest.raises(TypeError, match=r"^qweight: unsupported __cuda_array_interface__ dtype >u4"):
        device.as_device_array(Cai(typestr=">u4"), "qweight")


# --------------------------------------------------------------------------- layouts, flags, bad producers


def test_non_contiguous_view_refused_with_its_name() -> None:
    host = words((2, 128), np.dtype(np.float16))
    scales = dlpack_of(host[:, ::2], np.dtype(np.float16))  # every other column: element strides (128, 2)
    a = device.as_device_array(scales, "scales")
    assert a.strides_bytes == (256, 4) and not a.is_c_contiguous
    k = Kernel(with_group_size(load_spec(SHIPPED_SPECS / "awq_int4_fp16.yaml"), 128))
    i32 = np.dtype(np.int32)
    q = dlpack_of(words((256, 8), i32), i32)
    z = dlpack_of(words((2, 8), i32), i32)
    out = dlpack_of(words((256, 64), np.dtype(np.float16)), np.dtype(np.float16))
    with pytest.raises(ShapeError, match=r"^scales: expected a contiguous \(row-major\) tensor, got shape \(2, 64\)"):
        k(q, scales, z, out=out)


def test_cai_layout_flags_and_device(fake_driver: None) -> None:
    a = device.as_device_array(Cai(strides=(4, 16), data=(0x7F00_0000_2000, True)), "out")
    assert (a.ptr, a.shape, a.strides_bytes, a.device, a.readonly) == (0x7F00_0000_2000, (4, 2), (4, 16), 5, True)
    assert not a.is_c_contiguous
    c = device.as_device_array(Cai(), "g_idx")
    assert c.strides_bytes == (8, 4) and c.is_c_contiguous and not c.readonly
    null = device.as_device_array(Cai(data=(0, False), shape=(0, 2)), "g_idx")  # an empty array: no pointer
    assert null.ptr == 0 and null.size == 0 and null.device == 6


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"strides": (4,)}, "same length as shape"),
        ({"strides": (6, 3)}, "divisible by itemsize"),
        ({"mask": object()}, "mask"),
        ({"version": 2}, "v3"),
    ],
)
def test_bad_cai_is_one_line_naming_the_tensor(fake_driver: None, fields: dict[str, Any], why: str) -> None:
    with pytest.raises(TypeError, match=r"^g_idx: cannot view this .*Cai through __cuda_array_interface__ \(") as ei:
        device.as_device_array(Cai(**fields), "g_idx")
    assert why in str(ei.value) and "\n" not in str(ei.value)


def test_read_only_producer_refused_as_out() -> None:
    f16 = np.dtype(np.float16)
    host = words((256, 64), f16)
    host.flags.writeable = False
    ro = device.as_device_array(dlpack_of(host, f16), "out")  # DLPack 1.x's read-only flag
    assert ro.readonly and ro.ptr == host.ctypes.data
    spec = with_group_size(load_spec(SHIPPED_SPECS / "awq_int4_fp16.yaml"), 128)
    i32 = np.dtype(np.int32)

    def view(shape: tuple[int, ...], dt: np.dtype, name: str) -> device.DeviceArray:
        return device.as_device_array(dlpack_of(words(shape, dt), dt), name)

    q, s, z = view((256, 8), i32, "qweight"), view((2, 64), f16, "scales"), view((2, 8), i32, "zeros")
    assert infer_problem(spec, q, s, z, view((256, 64), f16, "out")).N == 64
    with pytest.raises(ShapeError, match=r"^out: expected a writable tensor"):
        infer_problem(spec, q, s, z, ro)


@pytest.mark.parametrize(
    ("dev", "where"),
    [
        ((KDL_CPU, 0), "a CPU"),
        ((KDL_CUDA_HOST, 0), r"a CUDA-host \(pinned\)"),
        ((8, 0), r"a non-CUDA \(DLPack device type 8\)"),
    ],
)
def test_host_dlpack_producers_refused(dev: tuple[int, int], where: str) -> None:
    producer = CudaDLPack(words((4,), np.dtype(np.float32)), FLOAT, 32, device=dev)
    with pytest.raises(ValueError, match=rf"^qzeros: expected a CUDA tensor, got {where} .*CudaDLPack$"):
        device.as_device_array(producer, "qzeros")
    assert producer.streams == []  # refused before any capsule was taken


def test_managed_memory_is_read() -> None:
    a = device.as_device_array(CudaDLPack(words((4,), np.dtype(np.int32)), INT, 32, device=(KDL_CUDA_MANAGED, 1)), "x")
    assert a.device == 1 and a.dtype == np.int32


def test_host_arrays_and_other_objects_refused() -> None:
    with pytest.raises(ValueError, match=r"^scales: expected a CUDA tensor, got a CPU numpy\.ndarray$"):
        device.as_device_array(np.zeros(3, np.float16), "scales")
    with pytest.raises(TypeError, match=r"^zeros: unsupported array type list; expected a CUDA torch\.Tensor"):
        device.as_device_array([1, 2, 3], "zeros")
    host_only = SimpleNamespace(__array_interface__=np.zeros(3).__array_interface__)
    with pytest.raises(TypeError, match=r"^g_idx: unsupported array type types\.SimpleNamespace"):
        device.as_device_array(host_only, "g_idx")


# --------------------------------------------------------------------------- GPU: real producers, whole calls


class OnlyDLPack:
    """A torch tensor seen only through DLPack (as a JAX or other array library's would be)."""

    def __init__(self, t: Any) -> None:
        self.t = t

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kw: Any) -> Any:
        return self.t.__dlpack__(**kw)


class OnlyCai:
    """A cupy array seen only through its ``__cuda_array_interface__`` (as numba's would be)."""

    def __init__(self, a: Any) -> None:
        self.__cuda_array_interface__ = a.__cuda_array_interface__
        self.a = a


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["awq_int4_fp16", "awq_int4_bf16", "nvfp4_fp16"])
def test_gpu_whole_call_through_dlpack(name: str) -> None:
    """Every tensor of a call read by cuda.core from a DLPack export (bfloat16, uint8 block scales, the fp32
    global scale among them): bit-exact against the reference; torch's float8 scales are refused by name."""
    import torch

    from dqgen.check.reference import dequantize_reference, random_global_scale, random_inputs
    from dqgen.run.gpucheck import nan_equal_mismatches, to_torch

    spec = load_spec(SHIPPED_SPECS / f"{name}.yaml")
    spec = with_group_size(spec, 128) if spec.scales.group_size == "auto" else spec
    k = Kernel(spec)
    q, s, z, _ = random_inputs(spec, 256, 512, 11)
    gsc = random_global_scale(spec, 11)
    want = dequantize_reference(spec, q, s, z, global_scale=gsc)
    tdt = torch.bfloat16 if spec.target.value == "bf16" else torch.float16
    out = torch.empty(want.shape, dtype=tdt, device="cuda")
    views = {n: OnlyDLPack(to_torch(a)) for n, a in (("q", q), ("s", s), ("z", z), ("g", gsc)) if a is not None}
    assert device.as_device_array(OnlyDLPack(out), "out").dtype == numpy_dtype(BF16 if tdt == torch.bfloat16 else FP16)
    k(views["q"], views["s"], views.get("z"), global_scale=views.get("g"), out=OnlyDLPack(out))
    torch.cuda.synchronize()
    got = out.view(torch.int16).cpu().numpy().view(np.uint16)
    bad = nan_equal_mismatches(got, want.view(np.uint16), spec.target.value)  # any NaN matches any NaN
    assert bad.size == 0, f"{name} through DLPack: {len(bad)} mismatches, first at {bad[0].tolist()}"
    if spec.scales.block:
        f8 = torch.float8_e4m3fn if spec.scales.dtype.value == "e4m3" else torch.float8_e8m0fnu
        with pytest.raises(TypeError, match=r"^scales: ") as ei:
            k(views["q"], OnlyDLPack(to_torch(s).view(f8)), global_scale=views.get("g"), out=OnlyDLPack(out))
        assert "\n" not in str(ei.value)


@pytest.mark.gpu
def test_gpu_cai_and_dlpack_facts_of_real_arrays() -> None:
    """Pointer, shape, strides, dtype and device of cupy / torch arrays read through each protocol equal the
    library's own answers; a non-contiguous slice keeps its strides."""
    cupy = pytest.importorskip("cupy")
    import torch

    c = cupy.arange(64 * 32, dtype=cupy.float16).reshape(64, 32)[:, 8:24]
    a = device.as_device_array(OnlyCai(c), "scales")
    assert (a.ptr, a.shape, a.strides_bytes, a.dtype, a.device) == (c.data.ptr, c.shape, c.strides, c.dtype, 0)
    assert a.kind == "cai" and not a.is_c_contiguous
    t = torch.zeros((64, 32), dtype=torch.bfloat16, device="cuda")[1:, ::2]
    b = device.as_device_array(OnlyDLPack(t), "out")
    assert (b.ptr, b.shape, b.dtype, b.device) == (t.data_ptr(), tuple(t.shape), numpy_dtype(BF16), 0)
    assert b.strides_bytes == tuple(2 * s for s in t.stride()) and b.kind == "dlpack"
    cpu = torch.zeros(4)
    with pytest.raises(ValueError, match=r"^g_idx: expected a CUDA tensor, got a CPU "):
        device.as_device_array(OnlyDLPack(cpu), "g_idx")
