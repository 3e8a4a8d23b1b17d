"""GPU tests: every spec x the shapes users hit, bit-exact against the numba reference.
Skipped without a GPU; `devtools/gpu_all.sh` runs them (and the benchmarks) in one device call."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dqgen.check.reference import dequantize_reference, random_global_scale, random_inputs
from dqgen.core.spec import load_spec
from dqgen.run.gpucheck import nan_equal_mismatches, to_numpy, to_torch
from dqgen.run.runtime import Kernel, ShapeError

from .conftest import SPECS

pytestmark = pytest.mark.gpu


def _spec(path, group_size=None):
    s = load_spec(path)
    if group_size is not None and not s.scales.block:  # a block-scale format keeps its block size
        data = s.model_dump(mode="json")
        data["scales"]["group_size"] = group_size
        s = load_spec(data)
    return s


def _shapes(spec):
    """(K, N, group) cases from the issue, restricted to what the packing format allows."""
    P = spec.per_word
    cases = [
        (4096, 4096, 128),
        (4096, 11008, 128),
        (192, 8 * P if spec.packing.axis == "N" else 40, 64),
        (4096, 4096, -1),
    ]
    small_k = P if spec.packing.axis == "K" else 1
    small_n = P if spec.packing.axis == "N" else 1
    cases.append((small_k, small_n, -1))
    if spec.packing.axis == "N":
        cases.append((256, 1440, 128))
    return cases


_KERNELS: dict = {}


def _kernel(spec):
    key = spec.model_dump_json()
    if key not in _KERNELS:
        _KERNELS[key] = Kernel(spec)
    return _KERNELS[key]


def _k_unit(spec):
    """The smallest K the spec allows: whole packing blocks along K and whole block-scale groups."""
    unit = spec.per_word if spec.packing.axis == "K" else 1
    return math.lcm(unit, spec.scales.group_size) if spec.scales.block else unit


def _assert_equal(spec, got, want, what):
    """Bit-exact, any NaN matching any NaN (PTX writes the canonical NaN 0x7FFF)."""
    bad = nan_equal_mismatches(np.asarray(got).view(np.uint16), want.view(np.uint16), spec.target.value)
    if bad.size:
        r, c = bad[0]
        raise AssertionError(
            f"{what}: {len(bad)} mismatches, first at [{r}, {c}]: "
            f"got 0x{int(got.view(np.uint16)[r, c]):04X}, reference 0x{int(want.view(np.uint16)[r, c]):04X}"
        )


def _check(kernel, K, N, seed=0, **kw):
    import torch

    q, s, z, gi = random_inputs(kernel.spec, K, N, seed)
    gsc = random_global_scale(kernel.spec, seed)
    got = kernel(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gsc), **kw)
    torch.cuda.synchronize()
    want = dequantize_reference(kernel.spec, q, s, z, gi, global_scale=gsc)
    _assert_equal(kernel.spec, to_numpy(got), want, f"{kernel.spec.name} {K}x{N}")
    return got


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_bit_exact_all_shapes(path):
    base = load_spec(path)
    for K, N, G in _shapes(base):
        if base.scales.block:
            G = base.scales.group_size
        if (G > 0 and (K % G or (base.packing.axis == "K" and G % base.per_word))) or K % _k_unit(base):
            continue
        if (base.act_order and G < 0) or (base.zeros.packed and N % base.per_word):
            continue  # act-order needs groups; packed zeros need whole words along N
        _check(_kernel(_spec(path, G)), K, N, seed=K + N)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_unaligned_fallback_path(path):
    """Shapes whose rows are not a multiple of 16 bytes take the scalar variant; still exact."""
    spec = _spec(path, None if load_spec(path).act_order else -1)
    N = 3 * spec.per_word if (spec.packing.axis == "N" or spec.zeros.packed) else 13
    K = (256 if spec.act_order else 3 * _k_unit(spec)) if spec.packing.axis == "K" else 5
    _check(_kernel(spec), K, N, seed=7)


def test_out_given_and_non_default_stream():
    import torch

    spec = load_spec(SPECS[0])
    k = _kernel(spec)
    K, N = 512, 1024
    q, s, z, _ = random_inputs(spec, K, N, 3)
    out = torch.empty((K, N), dtype=torch.bfloat16 if spec.target.value == "bf16" else torch.float16, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        res = k(to_torch(q), to_torch(s), to_torch(z), out=out, stream=stream)
    stream.synchronize()
    assert res is out
    want = dequantize_reference(spec, q, s, z)
    assert np.array_equal(to_numpy(out).view(np.uint16), want.view(np.uint16))


def test_current_torch_stream_is_used():
    import torch

    spec = load_spec(SPECS[0])
    k = _kernel(spec)
    q, s, z, _ = random_inputs(spec, 1024, 2048, 4)
    stream = torch.cuda.Stream()
    tq, ts, tz = to_torch(q), to_torch(s), to_torch(z)
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        out = k(tq, ts, tz)
    stream.synchronize()
    assert np.array_equal(to_numpy(out).view(np.uint16), dequantize_reference(spec, q, s, z).view(np.uint16))


def test_cupy_inputs_return_cupy():
    cupy = pytest.importorskip("cupy")
    spec = next(load_spec(p) for p in SPECS if load_spec(p).target.value == "fp16")
    k = _kernel(spec)
    q, s, z, _ = random_inputs(spec, 256, 512, 5)
    out = k(cupy.asarray(q), cupy.asarray(s), None if z is None else cupy.asarray(z))
    assert isinstance(out, cupy.ndarray)
    assert np.array_equal(cupy.asnumpy(out).view(np.uint16), dequantize_reference(spec, q, s, z).view(np.uint16))


def test_bad_inputs_rejected_before_launch():
    import torch

    spec = load_spec(SPECS[0])
    k = _kernel(spec)
    q, s, z, _ = random_inputs(spec, 256, 512, 6)
    tq, ts, tz = to_torch(q), to_torch(s), to_torch(z)
    wide = torch.zeros((256, 128), dtype=torch.int32, device="cuda")
    with pytest.raises(ShapeError, match="qweight: expected a contiguous"):
        k(wide[:, ::2], ts, tz)
    with pytest.raises(ShapeError, match="scales: expected dtype"):
        k(tq, ts.float(), tz)
    with pytest.raises(ShapeError, match="qweight: expected a 2-D int32"):
        k(tq.float(), ts, tz)
    with pytest.raises(ValueError, match="qweight: expected a CUDA tensor"):
        k(tq.cpu(), ts, tz)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_kernel_variant_bit_exact_with_tails(path):
    """Every instantiated entry point (rows/words per thread, aligned or not, streaming stores) on a
    shape whose rows and columns leave partial tiles."""
    import torch

    from dqgen.kernels.dequant import kernel_name, variants

    spec = _spec(path, None if load_spec(path).act_order else -1)
    k = _kernel(spec)
    P = spec.per_word
    zp = 32 // spec.source.bits if spec.zeros.packed else 1  # packed zeros along N need whole zero words
    K, N = (37, P * 333) if spec.packing.axis == "N" else (P * 32, -(-1000 // zp) * zp)
    q, s, z, gi = random_inputs(spec, K, N, 11)
    gsc = random_global_scale(spec, 11)
    want = dequantize_reference(spec, q, s, z, gi, global_scale=gsc)
    tq, ts, tz, tg, tgs = to_torch(q), to_torch(s), to_torch(z), to_torch(gi), to_torch(gsc)
    for v in variants(spec):
        launch = k.prepare(tq, ts, tz, g_idx=tg, global_scale=tgs, variant=v)
        launch()
        torch.cuda.synchronize()
        _assert_equal(spec, to_numpy(launch.out), want, kernel_name(spec, v))


ZERO_MODE_CASES = [
    # (name, base spec overrides): every zero mode on both packings, fp16 and bf16, and act-order
    (
        f"{axis}-{bits}b-{mode}-{target}{'-act' if act else ''}",
        dict(
            name="zm",
            source=dict(bits=bits, kind="unsigned"),
            target=target,
            packing=dict(axis=axis, order="awq" if (axis == "N" and bits == 4) else "sequential"),
            scales=dict(group_size=64),
            zeros=dict(mode=mode),
            act_order=act,
        ),
    )
    for axis in ("N", "K")
    for bits in (4, 8)
    for mode in ("none", "integer", "gptq_v1", "gptq_v2", "float", "additive")
    for target in ("fp16", "bf16")
    for act in ((False, True) if axis == "K" else (False,))
]


@pytest.mark.parametrize("case", ZERO_MODE_CASES, ids=lambda c: c[0])
def test_zero_modes_and_act_order_bit_exact(case):
    """Every zero mode and act-order against the numba reference, on shapes with partial tiles."""
    spec = load_spec(case[1])
    k = _kernel(spec)
    P = spec.per_word
    K, N = (192, P * 40) if spec.packing.axis == "N" else (192, 328)
    _check(k, K, N, seed=sum(map(ord, case[0])))
    if spec.source.bits == 4 and spec.target.value == "fp16":
        _check(k, 4096, 4096, seed=1)


def test_bad_g_idx_rejected_before_launch():
    import torch

    spec = load_spec(ZERO_MODE_CASES[0][1] | {"packing": {"axis": "K", "order": "sequential"}, "act_order": True})
    k = _kernel(spec)
    q, s, _, gi = random_inputs(spec, 256, 64, 8)
    tq, ts = to_torch(q), to_torch(s)
    bad = gi.copy()
    bad[17] = 4  # G = 256 / 64 = 4 groups: 4 is out of range
    with pytest.raises(ShapeError, match="g_idx: entry 17 is 4"):
        k(tq, ts, g_idx=to_torch(bad))
    with pytest.raises(ShapeError, match="g_idx: expected an int32 tensor of shape"):
        k(tq, ts, g_idx=to_torch(gi[:100]))
    with pytest.raises(ShapeError, match="g_idx: this spec has act_order"):
        k(tq, ts)
    torch.cuda.synchronize()


# --------------------------------------------------------------------------- issue #5: 3-bit blocks, MXFP4, NVFP4

_E2M1 = dict(bits=4, kind="float", format="e2m1")
NEW_FORMAT_CASES = [
    (
        f"{name}-{target}",
        dict(dict(name="nf", source=source, target=target, packing=dict(axis="K"), scales=scales), **extra),
    )
    for target in ("fp16", "bf16")
    for name, source, scales, extra in (
        ("u3b4-g128", dict(bits=3, kind="biased", bias=4), dict(group_size=128), {}),
        ("s3-g32", dict(bits=3, kind="signed"), dict(group_size=32), {}),
        ("u3-perchannel", dict(bits=3, kind="unsigned"), dict(group_size=-1), {}),
        ("u3-float-zeros", dict(bits=3, kind="unsigned"), dict(group_size=64), dict(zeros=dict(mode="float"))),
        ("u3-act-order", dict(bits=3, kind="biased", bias=4), dict(group_size=64), dict(act_order=True)),
        ("mxfp4", _E2M1, dict(group_size=32, dtype="e8m0"), {}),
        ("nvfp4", _E2M1, dict(group_size=16, dtype="e4m3", global_scale=True), {}),
        ("nvfp4-sm90", _E2M1, dict(group_size=16, dtype="e4m3", global_scale=True), dict(arch="sm_90")),
        # minifloats with target scales: bit placement / lookup on sm_80, the hardware cvt on sm_90
        *(
            (
                f"{fmt}-{arch}",
                dict(bits=8 if fmt != "e2m1" else 4, kind="float", format=fmt),
                dict(group_size=128),
                dict(arch=arch),
            )
            for fmt in ("e4m3", "e5m2", "e2m1")
            for arch in ("sm_80", "sm_90")
        ),
        ("nf4", dict(bits=4, kind="codebook", codebook="nf4"), dict(group_size=64), {}),
        ("codebook-5", dict(bits=4, kind="codebook", codebook=[-0.0, -1.5, 0.25, 3.0, 1e-3]), dict(group_size=128), {}),
    )
]


def _new_format_shapes(spec):
    """(K, N): several groups, partial column tiles (N not a multiple of 4 / 8, N below one thread's
    columns, N beyond one block's columns), one block-row, many block-rows."""
    u = _k_unit(spec) if spec.scales.group_size < 0 else math.lcm(_k_unit(spec), spec.scales.group_size)
    return [(u, 1), (u, 13), (2 * u, 8), (4 * u, 328), (3 * u, 1000), (8 * u, 2052), (max(4096 // u, 1) * u, 4104)]


@pytest.mark.parametrize("case", NEW_FORMAT_CASES, ids=lambda c: c[0])
def test_new_formats_bit_exact(case):
    import torch

    spec = load_spec(case[1])
    major, minor = torch.cuda.get_device_capability()
    if 10 * major + minor < spec.sm:
        pytest.skip(f"needs {spec.arch}")
    k = _kernel(spec)
    for i, (K, N) in enumerate(_new_format_shapes(spec)):
        _check(k, K, N, seed=sum(map(ord, case[0])) + i)


@pytest.mark.parametrize("case", [c for c in NEW_FORMAT_CASES if "act" not in c[0]], ids=lambda c: c[0])
def test_new_formats_every_variant_with_tails(case):
    """Every entry point on a shape with partial tiles along K (rows of blocks) and N."""
    import torch

    from dqgen.kernels.dequant import kernel_name, variants

    spec = load_spec(case[1])
    k = _kernel(spec)
    u = math.lcm(_k_unit(spec), max(spec.scales.group_size, 1))
    for N in (1000, 1003):  # 16-byte aligned rows, then not: the vectorized entry points must refuse
        K = 7 * u
        q, s, z, gi = random_inputs(spec, K, N, 5)
        gsc = random_global_scale(spec, 5)
        want = dequantize_reference(spec, q, s, z, gi, global_scale=gsc)
        tq, ts, tz, tgs = to_torch(q), to_torch(s), to_torch(z), to_torch(gsc)
        ran = 0
        for v in variants(spec):
            if v.aligned and N % 4:
                with pytest.raises(ShapeError, match="needs 16-byte aligned"):
                    k.prepare(tq, ts, tz, global_scale=tgs, variant=v)
                continue
            launch = k.prepare(tq, ts, tz, global_scale=tgs, variant=v)
            launch()
            torch.cuda.synchronize()
            _assert_equal(spec, to_numpy(launch.out), want, f"{kernel_name(spec, v)} N={N}")
            ran += 1
        assert ran == len(variants(spec)) or (N % 4 and ran > 0)


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_nvfp4_every_global_scale(target):
    """The global-scale seeds cycle through tiny (2^-20, 2^-24) and ordinary scales."""
    spec = load_spec(
        dict(
            NEW_FORMAT_CASES[0][1],
            source=_E2M1,
            target=target,
            scales=dict(group_size=16, dtype="e4m3", global_scale=True),
        )
    )
    k = _kernel(spec)
    for seed in range(7):
        _check(k, 256, 264, seed=seed)


def test_block_scales_as_float8_tensors_and_cupy():
    """torch float8_e4m3fn / float8_e8m0fnu scale tensors are read as their bytes; cupy uint8 works."""
    import torch

    for case in (c for c in NEW_FORMAT_CASES if c[0] in ("mxfp4-bf16", "nvfp4-fp16")):
        spec = load_spec(case[1])
        k = _kernel(spec)
        q, s, _, _ = random_inputs(spec, 512, 256, 3)
        gsc = random_global_scale(spec, 3)
        want = dequantize_reference(spec, q, s, global_scale=gsc)
        f8 = getattr(torch, "float8_e4m3fn" if spec.scales.dtype.value == "e4m3" else "float8_e8m0fnu", None)
        if f8 is not None:
            out = k(to_torch(q), to_torch(s).view(f8), global_scale=to_torch(gsc))
            torch.cuda.synchronize()
            _assert_equal(spec, to_numpy(out), want, f"{case[0]} {f8}")
        cupy = pytest.importorskip("cupy") if spec.target.value == "fp16" else None
        if cupy is not None:
            out = k(cupy.asarray(q), cupy.asarray(s), global_scale=cupy.asarray(gsc))
            assert isinstance(out, cupy.ndarray)
            _assert_equal(spec, cupy.asnumpy(out), want, f"{case[0]} cupy")


def test_new_format_bad_inputs_rejected_before_launch():
    import torch

    spec = load_spec(next(c for c in NEW_FORMAT_CASES if c[0] == "nvfp4-bf16")[1])
    k = _kernel(spec)
    q, s, _, _ = random_inputs(spec, 256, 64, 6)
    tq, ts = to_torch(q), to_torch(s)
    with pytest.raises(ShapeError, match=r"^global_scale: this spec has a global scale"):
        k(tq, ts)
    with pytest.raises(ShapeError, match=r"^global_scale: expected a one-element float32"):
        k(tq, ts, global_scale=torch.ones(2, device="cuda"))
    with pytest.raises(ValueError, match=r"^global_scale: expected a CUDA tensor"):
        k(tq, ts, global_scale=torch.ones(1))
    with pytest.raises(ShapeError, match=r"^scales: expected uint8 e4m3"):
        k(tq, ts.to(torch.float16), global_scale=torch.ones(1, device="cuda"))
    spec3 = load_spec(NEW_FORMAT_CASES[0][1])
    q3, s3, _, _ = random_inputs(spec3, 256, 64, 6)
    with pytest.raises(ShapeError, match=r"^qweight: expected shape \[3K/32, N\]"):
        _kernel(spec3)(to_torch(q3[:-1]), to_torch(s3))
    torch.cuda.synchronize()
