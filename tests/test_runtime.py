"""dqgen.run.runtime on the CPU: every tensor is checked against the spec before launch (with fake
DeviceArrays: no GPU needed), the kernel variant is picked from shape and alignment, and
dqgen.compile works without a GPU."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import dqgen
from dqgen.core.spec import SHIPPED_SPECS, SpecError, load_spec, with_group_size
from dqgen.kernels.dequant import VARIANTS_N, kernel_name, variants
from dqgen.run.device import DeviceArray, as_device_array
from dqgen.run.problem import Problem, infer_problem
from dqgen.run.runtime import Kernel, ShapeError
from dqgen.run.tune import default_variant

from .conftest import ROOT

I32, U32, F16, F32 = np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.float16), np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)

_ptrs = itertools.count(1)


def arr(shape, dtype, *, aligned=True, device=0, strides=None) -> DeviceArray:
    """A fake CUDA tensor: a distinct 256-byte aligned address (+4 bytes when not ``aligned``)."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if strides is None:
        strides, acc = [], dtype.itemsize
        for d in reversed(shape):
            strides.append(acc)
            acc *= max(d, 1)
        strides = tuple(reversed(strides))
    ptr = 0x7F00_0000_0000 + next(_ptrs) * 0x10_0000 + (0 if aligned else 4)
    return DeviceArray(
        ptr=ptr, shape=shape, strides_bytes=tuple(strides), dtype=dtype, device=device, kind="torch", obj=None
    )


def spec(name):
    """A shipped spec; those with group_size 'auto' fixed at 128 (the explicit-size path these tests check)."""
    s = load_spec(SHIPPED_SPECS / f"{name}.yaml")
    return with_group_size(s, 128) if s.scales.group_size == "auto" else s


AWQ, GPTQ, INT8, AWQ_BF16, INT8_BF16 = (
    spec(n) for n in ("awq_int4_fp16", "gptq_int4_fp16", "int8_fp16", "awq_int4_bf16", "int8_bf16")
)


def awq_inputs(K=256, N=4096, G=None, sdt=F16, **kw):
    """qweight [K, N/8], scales [K/128, N], zeros [K/128, N/8], out [K, N] for AWQ (group 128)."""
    G = K // 128 if G is None else G
    return (
        dict(qweight=arr((K, N // 8), I32), scales=arr((G, N), sdt), zeros=arr((G, N // 8), I32), out=arr((K, N), sdt))
        | kw
    )


def gptq_inputs(K=256, N=4096, **kw):
    """qweight [K/8, N], scales [K/128, N], no zeros, out [K, N] for GPTQ (group 128, along K)."""
    return dict(qweight=arr((K // 8, N), I32), scales=arr((K // 128, N), F16), zeros=None, out=arr((K, N), F16)) | kw


def int8_inputs(K=64, N=128, sdt=F16, **kw):
    """qweight [K, N/4], scales [1, N] (per-channel), no zeros, out [K, N] for int8."""
    return dict(qweight=arr((K, N // 4), I32), scales=arr((1, N), sdt), zeros=None, out=arr((K, N), sdt)) | kw


def infer(s, d):
    return infer_problem(s, d["qweight"], d["scales"], d["zeros"], d["out"], None, d.get("global_scale"))


def raises(s, d, tensor, *fragments):
    with pytest.raises(ShapeError) as ei:
        infer(s, d)
    msg = str(ei.value)
    assert msg.startswith(f"{tensor}: "), msg
    for f in fragments:
        assert f in msg, msg
    return msg


# kernel sources, rendered once per spec, to check that the chosen variant is instantiated
_SOURCES: dict = {}


def kernel_source(s):
    if s.name not in _SOURCES:
        _SOURCES[s.name] = Kernel(s).source
    return _SOURCES[s.name]


def check_variant(s, p: Problem):
    """The launch rule picks an instantiated entry point that matches the tensors' alignment."""
    v = default_variant(s, p.aligned)
    assert v in variants(s) and v.aligned == p.aligned
    assert f" {kernel_name(s, v)}(" in kernel_source(s)


# --------------------------------------------------------------------------- inference: AWQ (axis N, zeros)


def test_awq_shapes_and_vector_variant():
    p = infer(AWQ, awq_inputs(K=256, N=4096))
    assert p == Problem(K=256, N=4096, groups=2, aligned=True)
    check_variant(AWQ, p)
    assert default_variant(AWQ, True).rows == 4


def test_awq_without_out_and_uint32_words():
    d = awq_inputs(K=4096, N=11008, out=None)
    d["qweight"] = arr((4096, 11008 // 8), U32)
    d["zeros"] = arr((32, 11008 // 8), U32)
    assert infer(AWQ, d) == Problem(4096, 11008, 32, True)


@pytest.mark.parametrize("N", [24, 1424, 1440, 1408])
def test_awq_any_word_count_keeps_vector_accesses(N):
    """Along N each word's outputs are one 16-byte store whatever N is: no divisibility condition."""
    p = infer(AWQ, awq_inputs(K=128, N=N))
    assert p == Problem(128, N, 1, True)
    check_variant(AWQ, p)


@pytest.mark.parametrize("tensor", ["qweight", "scales", "zeros", "out"])
def test_awq_unaligned_pointer_uses_scalar_variant(tensor):
    d = awq_inputs(K=256, N=4096)
    a = d[tensor]
    d[tensor] = arr(a.shape, a.dtype, aligned=False)
    assert d[tensor].ptr % 16 == 4
    p = infer(AWQ, d)
    assert p == Problem(256, 4096, 2, False)
    check_variant(AWQ, p)


def test_awq_bf16():
    assert infer(AWQ_BF16, awq_inputs(K=128, N=256, sdt=BF16)) == Problem(128, 256, 1, True)


# --------------------------------------------------------------------------- inference: GPTQ (axis K)


def test_gptq_shapes_and_vector_variant():
    p = infer(GPTQ, gptq_inputs(K=256, N=4096))
    assert p == Problem(K=256, N=4096, groups=2, aligned=True)
    check_variant(GPTQ, p)
    assert default_variant(GPTQ, True).vec == 8
    assert infer(GPTQ, gptq_inputs(K=4096, N=11008, out=None)) == Problem(4096, 11008, 32, True)


@pytest.mark.parametrize("N", [12, 40 + 4, 4100, 13])
def test_gptq_columns_not_multiple_of_eight_use_scalar_variant(N):
    p = infer(GPTQ, gptq_inputs(K=128, N=N))
    assert p == Problem(128, N, 1, False)
    check_variant(GPTQ, p)


@pytest.mark.parametrize("tensor", ["qweight", "scales", "out"])
def test_gptq_unaligned_pointer_uses_scalar_variant(tensor):
    d = gptq_inputs(K=256, N=4096)
    a = d[tensor]
    d[tensor] = arr(a.shape, a.dtype, aligned=False)
    assert infer(GPTQ, d) == Problem(256, 4096, 2, False)


def test_gptq_per_channel_variant_of_spec():
    data = GPTQ.model_dump(mode="json")
    data["scales"]["group_size"] = -1
    s = load_spec(data)
    d = dict(qweight=arr((3, 16), I32), scales=arr((1, 16), F16), zeros=None, out=None)
    assert infer(s, d) == Problem(24, 16, 1, True)


# --------------------------------------------------------------------------- inference: int8 (per-channel)


def test_int8_per_channel():
    p = infer(INT8, int8_inputs(K=64, N=128))
    assert p == Problem(K=64, N=128, groups=1, aligned=True)
    check_variant(INT8, p)
    # per-channel: any K works (no group to divide it)
    assert infer(INT8, int8_inputs(K=5, N=128)) == Problem(5, 128, 1, True)


@pytest.mark.parametrize("N", [20, 24, 12])  # 5, 6, 3 words per row
def test_int8_any_word_count(N):
    assert infer(INT8, int8_inputs(K=8, N=N)) == Problem(8, N, 1, True)


def test_int8_unaligned_scales():
    d = int8_inputs(K=64, N=128)
    d["scales"] = arr((1, 128), F16, aligned=False)
    assert infer(INT8, d).aligned is False


def test_int8_bf16_needs_bf16_scales():
    assert infer(INT8_BF16, int8_inputs(K=16, N=64, sdt=BF16)) == Problem(16, 64, 1, True)
    raises(INT8_BF16, int8_inputs(K=16, N=64, sdt=F16), "scales", "bf16", "float16")


def test_size_one_dimension_with_any_stride_is_contiguous():
    # e.g. a per-channel scale row sliced out of a bigger tensor: the stride of a size-1 dim is irrelevant
    d = int8_inputs(K=16, N=64)
    d["scales"] = arr((1, 64), F16, strides=(12345, 2))
    assert infer(INT8, d).aligned is True


# --------------------------------------------------------------------------- error paths


@pytest.mark.parametrize("dtype", [F16, F32, np.int64, np.int8, BF16])
def test_qweight_wrong_dtype(dtype):
    d = awq_inputs()
    d["qweight"] = arr(d["qweight"].shape, dtype)
    raises(AWQ, d, "qweight", "int32")


@pytest.mark.parametrize("shape", [(4096,), (2, 256, 512), ()])
def test_qweight_not_2d(shape):
    d = awq_inputs()
    d["qweight"] = arr(shape, I32)
    raises(AWQ, d, "qweight", "2-D", f"{len(shape)}-D")


def test_k_not_multiple_of_group():
    d = awq_inputs(K=100, G=1)
    raises(AWQ, d, "qweight", "K = 100", "group_size = 128")
    d = gptq_inputs(K=256)
    d["qweight"] = arr((12, 4096), I32)  # K = 96
    raises(GPTQ, d, "qweight", "K = 96", "group_size = 128")


@pytest.mark.parametrize("dtype", [F32, BF16, I32, np.float64])
def test_scales_wrong_dtype(dtype):
    d = awq_inputs()
    d["scales"] = arr(d["scales"].shape, dtype)
    raises(AWQ, d, "scales", "fp16")


def test_fp16_scales_for_bf16_spec():
    raises(AWQ_BF16, awq_inputs(K=128, N=256, sdt=F16), "scales", "bf16", "float16")
    d = awq_inputs(K=128, N=256, sdt=F16)
    d["out"] = arr((128, 256), BF16)
    raises(AWQ_BF16, d, "scales", "bf16")


@pytest.mark.parametrize("shape", [(3, 4096), (2, 4104), (4096, 2), (2,), (256, 4096)])
def test_scales_wrong_shape(shape):
    d = awq_inputs(K=256, N=4096)
    d["scales"] = arr(shape, F16)
    raises(AWQ, d, "scales", "(2, 4096)")


def test_gptq_scales_wrong_shape():
    d = gptq_inputs(K=256, N=4096)
    d["scales"] = arr((256, 4096), F16)  # per-row, not per-group
    raises(GPTQ, d, "scales", "(2, 4096)")


def test_zeros_missing_for_awq():
    raises(AWQ, awq_inputs(zeros=None), "zeros", "(2, 512)")


@pytest.mark.parametrize("shape", [(2, 4096), (1, 512), (512,), (2, 513)])
def test_zeros_wrong_shape(shape):
    d = awq_inputs(K=256, N=4096)
    d["zeros"] = arr(shape, I32)
    raises(AWQ, d, "zeros", "(2, 512)")


@pytest.mark.parametrize("dtype", [F16, np.int64, np.uint8])
def test_zeros_wrong_dtype(dtype):
    d = awq_inputs()
    d["zeros"] = arr(d["zeros"].shape, dtype)
    raises(AWQ, d, "zeros", "int32")


def test_zeros_given_for_spec_without_zero_points():
    raises(GPTQ, gptq_inputs(zeros=arr((2, 512), I32)), "zeros", "no zero points")
    raises(INT8, int8_inputs(zeros=arr((1, 32), I32)), "zeros", "no zero points")


@pytest.mark.parametrize("dtype", [F32, BF16, I32])
def test_out_wrong_dtype(dtype):
    d = awq_inputs()
    d["out"] = arr((256, 4096), dtype)
    raises(AWQ, d, "out", "fp16")


@pytest.mark.parametrize("shape", [(4096, 256), (256, 512), (256, 4096, 1), (256 * 4096,)])
def test_out_wrong_shape(shape):
    d = awq_inputs()
    d["out"] = arr(shape, F16)
    raises(AWQ, d, "out", "(256, 4096)")
    d = gptq_inputs()
    d["out"] = arr(shape, F16)
    raises(GPTQ, d, "out", "(256, 4096)")


def test_non_contiguous_qweight():
    d = awq_inputs(K=256, N=4096)
    d["qweight"] = arr((256, 512), I32, strides=(4, 256 * 4))  # a transposed view
    raises(AWQ, d, "qweight", "contiguous", "(4, 1024)")
    d = awq_inputs(K=256, N=4096)
    d["qweight"] = arr((256, 512), I32, strides=(1024 * 4, 4))  # every other row of a wider tensor
    raises(AWQ, d, "qweight", "contiguous")
    d = gptq_inputs()
    d["qweight"] = arr((32, 4096), I32, strides=(4096 * 4, 8))
    raises(GPTQ, d, "qweight", "contiguous")


@pytest.mark.parametrize("tensor", ["scales", "zeros", "out"])
def test_non_contiguous_other_tensors(tensor):
    d = awq_inputs(K=256, N=4096)
    a = d[tensor]
    rows, _ = a.shape
    d[tensor] = arr(a.shape, a.dtype, strides=(a.itemsize, rows * a.itemsize))
    raises(AWQ, d, tensor, "contiguous")


def test_tensors_on_different_devices_rejected():
    d = awq_inputs()
    d["scales"] = arr(d["scales"].shape, F16, device=1)
    with pytest.raises(ShapeError) as ei:
        infer(AWQ, d)
    msg = str(ei.value)
    assert "device" in msg and "scales" in msg and "qweight" in msg
    d = awq_inputs()
    d["out"] = arr((256, 4096), F16, device=3)
    with pytest.raises(ShapeError, match="device"):
        infer(AWQ, d)


def test_device_mismatch_message_starts_with_tensor_name():
    d = awq_inputs()
    d["scales"] = arr(d["scales"].shape, F16, device=1)
    raises(AWQ, d, "scales", "device")


def test_shape_error_is_a_value_error():
    assert issubclass(ShapeError, ValueError)


# --------------------------------------------------------------------------- device / compile on the CPU


def test_as_device_array_rejects_numpy_naming_the_tensor():
    with pytest.raises(ValueError, match=r"^scales: .*CPU numpy"):
        as_device_array(np.zeros(3), "scales")
    with pytest.raises(TypeError, match=r"^zeros: unsupported array type"):
        as_device_array([1, 2, 3], "zeros")
    a = arr((2, 2), I32)
    assert as_device_array(a, "qweight") is a


def test_compile_on_cpu(monkeypatch):
    monkeypatch.chdir(ROOT)
    k = dqgen.compile("awq_int4_fp16")  # a shipped spec by name
    assert isinstance(k, Kernel) and isinstance(k, dqgen.Kernel)
    assert k.spec.name == "awq_int4_fp16"
    assert k.plan.per8("convert") == 9
    assert k.source == (ROOT / "generated" / "awq_int4_fp16.cu").read_text()
    for v in VARIANTS_N:
        assert f" {kernel_name(k.spec, v)}(" in k.source
    # a Spec and a dict compile to the same kernel
    assert dqgen.compile(k.spec).source == k.source
    assert dqgen.compile(k.spec.model_dump(mode="json")).source == k.source


def test_kernel_checks_inputs_before_touching_a_gpu():
    k = dqgen.compile(SHIPPED_SPECS / "awq_int4_fp16.yaml")
    with pytest.raises(ValueError, match=r"^qweight: "):
        k(np.zeros((4, 1), np.int32), np.zeros((1, 8), np.float16), np.zeros((1, 1), np.int32))
    d = awq_inputs()
    with pytest.raises(ShapeError, match=r"^zeros: "):
        k(d["qweight"], d["scales"], None, out=d["out"])
    with pytest.raises(ShapeError, match=r"^scales: "):
        k(d["qweight"], arr((3, 4096), F16), d["zeros"], out=d["out"])


@pytest.mark.parametrize("bad", ["specs/does_not_exist.yaml", "nope.yml"])
def test_compile_invalid_path_raises_spec_error(monkeypatch, bad):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SpecError, match="no such spec file"):
        dqgen.compile(bad)


def test_compile_invalid_spec_raises_spec_error():
    data = AWQ.model_dump(mode="json")
    data["scales"]["group_size"] = 0
    with pytest.raises(SpecError, match=r"scales\.group_size"):
        dqgen.compile(data)


# ---------------------------------------------------------------- issue #5: 3-bit blocks, block scales, global scale

U8 = np.dtype(np.uint8)
E8M0, E4M3 = np.dtype(ml_dtypes.float8_e8m0fnu), np.dtype(ml_dtypes.float8_e4m3fn)
INT3, MXFP4, NVFP4 = (spec(n) for n in ("gptq_int3_fp16", "mxfp4_bf16", "nvfp4_fp16"))


def int3_inputs(K=256, N=64, **kw):
    """qweight [3K/32, N] (32 3-bit codes per 3 words along K), scales [K/128, N] fp16."""
    return (
        dict(qweight=arr((3 * K // 32, N), I32), scales=arr((K // 128, N), F16), zeros=None, out=arr((K, N), F16)) | kw
    )


def fp4_inputs(s, K=256, N=64, sdt=U8, **kw):
    """qweight [K/8, N], uint8 block-scale codes [K/group, N], out [K, N]; a global scale for NVFP4."""
    tdt = BF16 if s.target.value == "bf16" else F16
    d = dict(
        qweight=arr((K // 8, N), I32), scales=arr((K // s.scales.group_size, N), sdt), zeros=None, out=arr((K, N), tdt)
    )
    d["global_scale"] = arr((1,), F32) if s.scales.global_scale else None
    return d | kw


def test_int3_shapes_and_variant():
    assert INT3.words == 3 and INT3.per_word == 32
    p = infer(INT3, int3_inputs(K=256, N=64))
    assert p == Problem(K=256, N=64, groups=2, aligned=True)
    check_variant(INT3, p)
    v = default_variant(INT3, True)
    assert (v.vec, v.rows) == (4, 1)
    assert infer(INT3, int3_inputs(K=4096, N=11008, out=None)) == Problem(4096, 11008, 32, True)
    # 4 columns per thread: N % 4 == 0 keeps the vector accesses, other N take the scalar variant
    assert infer(INT3, int3_inputs(K=128, N=12)).aligned is True
    p = infer(INT3, int3_inputs(K=128, N=13))
    assert p == Problem(128, 13, 1, False)
    check_variant(INT3, p)


@pytest.mark.parametrize("rows", [1, 2, 4, 13, 25])
def test_int3_rows_not_multiple_of_three(rows):
    d = int3_inputs()
    d["qweight"] = arr((rows, 64), I32)
    raises(INT3, d, "qweight", "[3K/32, N]", f"{rows} rows is not a multiple of 3")


def test_int3_other_errors():
    d = int3_inputs(K=256)
    d["qweight"] = arr((9, 64), I32)  # K = 96: not whole groups of 128
    raises(INT3, d, "qweight", "K = 96", "group_size = 128", "[3K/32, N]")
    raises(INT3, int3_inputs(K=256, scales=arr((8, 64), F16)), "scales", "(2, 64)")
    raises(INT3, int3_inputs(K=256, out=arr((24, 64), F16)), "out", "(256, 64)")
    raises(INT3, int3_inputs(K=256, scales=arr((2, 64), U8)), "scales", "fp16")


@pytest.mark.parametrize("sdt", [U8, E8M0])
def test_mxfp4_scale_codes(sdt):
    p = infer(MXFP4, fp4_inputs(MXFP4, K=256, N=64, sdt=sdt))
    assert p == Problem(K=256, N=64, groups=8, aligned=True)
    check_variant(MXFP4, p)


@pytest.mark.parametrize("sdt", [E4M3, BF16, F16, np.int8, I32])
def test_mxfp4_wrong_scale_dtype(sdt):
    raises(MXFP4, fp4_inputs(MXFP4, sdt=sdt), "scales", "uint8", "e8m0", "torch.float8_e8m0fnu")


@pytest.mark.parametrize("shape", [(4, 64), (256, 64), (8, 32), (8,)])
def test_block_scales_wrong_shape(shape):
    raises(MXFP4, fp4_inputs(MXFP4, K=256, N=64, scales=arr(shape, U8)), "scales", "(8, 64)")
    raises(NVFP4, fp4_inputs(NVFP4, K=256, N=64, scales=arr(shape, U8)), "scales", "(16, 64)")


@pytest.mark.parametrize("sdt", [U8, E4M3])
def test_nvfp4_shapes(sdt):
    p = infer(NVFP4, fp4_inputs(NVFP4, K=256, N=64, sdt=sdt))
    assert p == Problem(K=256, N=64, groups=16, aligned=True)
    check_variant(NVFP4, p)
    # the global scale takes no part in the alignment rule (it is read as one float)
    d = fp4_inputs(NVFP4, global_scale=arr((1,), F32, aligned=False))
    assert infer(NVFP4, d).aligned is True


@pytest.mark.parametrize("sdt", [E8M0, F16])
def test_nvfp4_wrong_scale_dtype(sdt):
    raises(NVFP4, fp4_inputs(NVFP4, sdt=sdt), "scales", "uint8", "e4m3", "torch.float8_e4m3fn")


def test_global_scale_required_and_checked():
    raises(NVFP4, fp4_inputs(NVFP4, global_scale=None), "global_scale", "global_scale=", "float32")
    for bad in (arr((1,), F16), arr((1,), BF16), arr((2,), F32), arr((1, 2), F32), arr((0,), F32), arr((1,), I32)):
        raises(NVFP4, fp4_inputs(NVFP4, global_scale=bad), "global_scale", "one-element float32")
    raises(NVFP4, fp4_inputs(NVFP4, global_scale=arr((1,), F32, device=2)), "global_scale", "device 2", "qweight")
    raises(MXFP4, fp4_inputs(MXFP4, global_scale=arr((1,), F32)), "global_scale", "no global scale")
    d = gptq_inputs()
    with pytest.raises(ShapeError, match=r"^global_scale: .*no global scale"):
        infer_problem(GPTQ, d["qweight"], d["scales"], d["zeros"], d["out"], None, arr((1,), F32))
    # the global scale is checked after every other tensor, so earlier messages stay as they were
    raises(NVFP4, fp4_inputs(NVFP4, global_scale=None, scales=arr((3, 64), U8)), "scales")


def test_new_format_kernels_check_inputs_before_touching_a_gpu():
    k = dqgen.compile(NVFP4)
    d = fp4_inputs(NVFP4)
    with pytest.raises(ShapeError, match=r"^global_scale: this spec has a global scale"):
        k(d["qweight"], d["scales"], out=d["out"])
    with pytest.raises(ValueError, match=r"^global_scale: expected a CUDA tensor"):
        k(d["qweight"], d["scales"], global_scale=np.ones(1, np.float32), out=d["out"])
    with pytest.raises(ShapeError, match=r"^scales: expected uint8"):
        k(d["qweight"], arr(d["scales"].shape, F16), global_scale=d["global_scale"], out=d["out"])
    with pytest.raises(ShapeError, match=r"^global_scale: "):
        dqgen.compile(MXFP4)(d["qweight"], arr((8, 64), U8), global_scale=d["global_scale"], out=arr((256, 64), BF16))
    k3 = dqgen.compile(INT3)
    with pytest.raises(ShapeError, match=r"^qweight: expected shape \[3K/32, N\]"):
        k3(arr((20, 64), I32), arr((1, 64), F16))
    assert " dqgen_nvfp4_fp16_v8_r2(" in k.source and "const float* __restrict__ global_scale" in k.source
    assert "global_scale" not in k3.source
