"""GPU tests: every spec x the shapes users hit, bit-exact against the numba reference.
Skipped without a GPU; `scripts/gpu_all.sh` runs them (and the benchmarks) in one device call."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.gpucheck import to_numpy, to_torch
from dqgen.reference import dequantize_reference, random_inputs
from dqgen.runtime import Kernel, ShapeError
from dqgen.spec import load_spec

from .conftest import SPECS

pytestmark = pytest.mark.gpu


def _spec(path, group_size=None):
    s = load_spec(path)
    if group_size is not None:
        data = s.model_dump(mode="json")
        data["scales"]["group_size"] = group_size
        s = load_spec(data)
    return s


def _shapes(spec):
    """(K, N, group) cases from the issue, restricted to what the packing format allows."""
    P = spec.per_word
    cases = [(4096, 4096, 128), (4096, 11008, 128), (192, 8 * P if spec.packing.axis == "N" else 40, 64), (4096, 4096, -1)]
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


def _check(kernel, K, N, seed=0, **kw):
    import torch

    q, s, z, gi = random_inputs(kernel.spec, K, N, seed)
    got = kernel(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), **kw)
    torch.cuda.synchronize()
    want = dequantize_reference(kernel.spec, q, s, z, gi)
    g, w = to_numpy(got).view(np.uint16), want.view(np.uint16)
    bad = np.argwhere(g != w)
    assert not bad.size, f"{kernel.spec.name} {K}x{N}: {len(bad)} mismatches, first at {bad[0]}"
    return got


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_bit_exact_all_shapes(path):
    base = load_spec(path)
    for K, N, G in _shapes(base):
        if G > 0 and (K % G or (base.packing.axis == "K" and G % base.per_word)):
            continue
        if base.act_order and G < 0 or base.zeros.packed and N % base.per_word:
            continue  # act-order needs groups; packed zeros need whole words along N
        _check(_kernel(_spec(path, G)), K, N, seed=K + N)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_unaligned_fallback_path(path):
    """Shapes whose rows are not a multiple of 16 bytes take the scalar variant; still exact."""
    spec = _spec(path, None if load_spec(path).act_order else -1)
    N = 3 * spec.per_word if (spec.packing.axis == "N" or spec.zeros.packed) else 13
    K = (256 if spec.act_order else 24) if spec.packing.axis == "K" else 5
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

    from dqgen.render import kernel_name, variants

    spec = _spec(path, None if load_spec(path).act_order else -1)
    k = _kernel(spec)
    P = spec.per_word
    K, N = (37, P * 333) if spec.packing.axis == "N" else (P * 32, 1000)
    q, s, z, gi = random_inputs(spec, K, N, 11)
    want = dequantize_reference(spec, q, s, z, gi).view(np.uint16)
    tq, ts, tz, tg = to_torch(q), to_torch(s), to_torch(z), to_torch(gi)
    for v in variants(spec):
        launch = k.prepare(tq, ts, tz, g_idx=tg, variant=v)
        launch()
        torch.cuda.synchronize()
        got = to_numpy(launch.out).view(np.uint16)
        assert np.array_equal(got, want), f"{kernel_name(spec, v)}: {(got != want).sum()} mismatches"


ZERO_MODE_CASES = [
    # (name, base spec overrides): every zero mode on both packings, fp16 and bf16, and act-order
    (f"{axis}-{bits}b-{mode}-{target}{'-act' if act else ''}",
     dict(name="zm", source=dict(bits=bits, kind="unsigned"), target=target,
          packing=dict(axis=axis, order="awq" if (axis == "N" and bits == 4) else "sequential"),
          scales=dict(group_size=64), zeros=dict(mode=mode), act_order=act))
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
    q, s, z, gi = random_inputs(spec, 256, 64, 8)
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
