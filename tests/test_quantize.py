"""dqgen.quantize: round-to-nearest into every shipped spec's checkpoint tensors (CPU, numpy).

The error bound is computed here from the returned tensors and the formats' definitions (grids taken from ml_dtypes
and the spec's codebook, not from dqgen.nn.quantize): each dequantized element lies within half a step of the code
grid around it, times its scale, plus the target's own rounding. Dequantization is the independent reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dqgen
from dqgen.check.reference import dequantize_reference
from dqgen.core.spec import Spec, load_spec, shipped_specs
from dqgen.layout.packing import unpack, unpack_zeros

SPECS = sorted(shipped_specs())
_ML = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e2m1": ml_dtypes.float4_e2m1fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e3m2": ml_dtypes.float6_e3m2fn,
}
_MANT = {"fp16": 10, "bf16": 7}


def _target_np(spec: Spec) -> np.dtype:
    return np.dtype(np.float16) if spec.target.value == "fp16" else np.dtype(ml_dtypes.bfloat16)


def _grid(spec: Spec) -> np.ndarray:
    """Every finite value a code can take (before the scale), sorted."""
    kind = spec.source.kind.value
    if kind == "float":
        dt = np.dtype(_ML[spec.source.format])
        bits = np.arange(1 << spec.source.bits, dtype=np.uint8).view(dt)
        v = bits.astype(np.float64)
        return np.unique(v[np.isfinite(v)])
    if kind == "codebook":
        return np.unique(np.asarray(spec.source.codebook_values).astype(_target_np(spec)).astype(np.float64))
    b = spec.source.bits
    if kind == "signed":
        return np.arange(-(1 << (b - 1)), 1 << (b - 1), dtype=np.float64)
    return np.arange(1 << b, dtype=np.float64) - spec.source.offset


def _row_scale(spec: Spec, ck: dict, K: int) -> np.ndarray:
    """Each element's effective scale [K, N] (float64), from the returned scales as the format defines them."""
    s = np.asarray(ck["scales"])
    if spec.scales.block and spec.scales.dtype.value == "e8m0":
        s = np.ldexp(1.0, s.astype(np.int64) - 127)
    elif spec.scales.block:
        s = s.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * float(ck["global_scale"][0])
    else:
        s = s.astype(np.float64)
    rows = ck["g_idx"] if "g_idx" in ck else np.arange(K) * s.shape[0] // K
    return s[rows]


def _bound(spec: Spec, ck: dict, W: np.ndarray, deq: np.ndarray) -> np.ndarray:
    """Half a step of the grid at each element (times its scale) + half an ulp of the target at the result
    (+ fp32's for NVFP4's product, + the additive zero's rounding)."""
    K = W.shape[0]
    s = _row_scale(spec, ck, K)
    grid = _grid(spec)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(s != 0, W / s, 0.0)
    if spec.zeros.packed or spec.zeros.mode == "float":
        if spec.zeros.packed:
            z = unpack_zeros(ck["zeros"], spec).astype(np.float64) + spec.zeros.stored_offset
        else:
            z = np.asarray(ck["zeros"]).astype(np.float64)
        x = x + z[np.arange(K) * z.shape[0] // K if "g_idx" not in ck else ck["g_idx"]]
    idx = np.clip(np.searchsorted(grid, x), 1, len(grid) - 1)
    half_step = (grid[idx] - grid[idx - 1]) / 2 * np.abs(s)
    ulp = np.ldexp(np.abs(deq), -_MANT[spec.target.value]) + 2.0**-24  # one ulp of the target (and its subnormals)
    extra = np.ldexp(np.abs(deq), -23) if spec.scales.global_scale else 0.0
    return half_step + ulp / 2 + extra + 1e-12


def _dequantize(spec: Spec, ck: dict) -> np.ndarray:
    args = {k: ck[k] for k in ("zeros", "g_idx", "global_scale") if k in ck}
    return dequantize_reference(spec, ck["qweight"], ck["scales"], **args).astype(np.float64)


def _weights(K: int, N: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((K, N)) * 0.02
    W[rng.random((K, N)) < 0.01] *= 30  # outliers stretch some groups' ranges
    W[:, 3] = 0.0  # an all-zero column: every group of it has range 0
    W[:, 5] = 0.125  # a constant positive column
    W[:, 6] = -0.07  # a constant negative column
    return W


@pytest.mark.parametrize("name", SPECS)
def test_error_within_half_a_step(name: str) -> None:
    spec = load_spec(name)
    K, N = 256, 64
    W = _weights(K, N, 1)
    ck = dqgen.quantize(spec, W)
    deq = _dequantize(spec, ck)
    err = np.abs(deq - W)
    bound = _bound(spec, ck, W, deq)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), f"{name}: |error| {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"
    # and the quantization is not trivially loose: most elements are well inside one step of their group
    assert np.median(err) < np.median(bound)


@pytest.mark.parametrize("name", SPECS)
def test_codes_and_scales_in_range(name: str) -> None:
    spec = load_spec(name)
    K, N = 128, 64
    ck = dqgen.quantize(spec, _weights(K, N, 2))
    codes = unpack(ck["qweight"], spec).astype(np.int64)
    kind = spec.source.kind.value
    if kind == "float":
        v = codes.astype(np.uint8).view(np.dtype(_ML[spec.source.format])).astype(np.float64)
        assert np.isfinite(v).all(), f"{name}: a NaN or inf code"
    elif kind == "codebook":
        assert codes.max() < len(spec.source.codebook_values)
    s = np.asarray(ck["scales"])
    if spec.scales.block and spec.scales.dtype.value == "e8m0":
        assert s.dtype == np.uint8 and s.max() < 0xFF  # 0xFF is e8m0's NaN
    elif spec.scales.block:
        v = s.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
        assert s.dtype == np.uint8 and np.isfinite(v).all() and (v >= 0).all()
        assert ck["global_scale"].dtype == np.float32 and ck["global_scale"].shape == (1,)
    else:
        assert s.dtype == _target_np(spec) and np.isfinite(s.astype(np.float64)).all()
    if spec.zeros.packed:
        z = unpack_zeros(ck["zeros"], spec).astype(np.int64) + spec.zeros.stored_offset
        lo = 1 if spec.zeros.mode == "gptq_v1" else 0
        assert lo <= z.min() and z.max() <= (1 << spec.source.bits) - 1 + lo
    expected = {"qweight", "scales"} | ({"zeros"} if spec.zeros.mode != "none" else set())
    expected |= {"g_idx"} if spec.act_order else set()
    expected |= {"global_scale"} if spec.scales.global_scale else set()
    assert set(ck) == expected


def _on_grid(spec: Spec, K: int, N: int, gs: int, seed: int) -> np.ndarray:
    """A weight exactly on a grid quantize picks: power-of-two scales, random codes, and in every group both
    ends of the code range (so round-to-nearest's range rule recovers the same scale)."""
    rng = np.random.default_rng(seed)
    grid = _grid(spec)
    G = K // gs
    if spec.zeros.mode != "none":  # (q - z) * s, integer z in the mode's range
        q = rng.integers(0, 1 << spec.source.bits, (K, N))
        lo_z = 1 if spec.zeros.mode == "gptq_v1" else 0
        z = np.repeat(rng.integers(lo_z, (1 << spec.source.bits) - 1, (G, N)), gs, axis=0)
        q[0::gs], q[1::gs] = 0, (1 << spec.source.bits) - 1
        v = (q - z).astype(np.float64)
    else:
        v = grid[rng.integers(0, len(grid), (K, N))]
        v[0::gs], v[1::gs] = grid[0], grid[-1]
    if spec.scales.block and spec.scales.dtype.value == "e4m3":
        return v * 448.0 * 2.0**-12  # every block at e4m3's largest scale, global scale 2^-12
    return v * 2.0 ** -rng.integers(2, 6, (G, N)).repeat(gs, axis=0)


@pytest.mark.parametrize("name", SPECS)
def test_round_trip_exact_on_grid(name: str) -> None:
    spec = load_spec(name)
    K, N = 256, 64
    g = spec.scales.group_size
    gs = 128 if g == "auto" else K if g == -1 else g  # -1: one group over all K rows
    W = _on_grid(spec, K, N, gs, 3)
    assert (W.astype(_target_np(spec)).astype(np.float64) == W).all()  # the fixture is in the target
    ck = dqgen.quantize(spec, W, group_size=None if spec.scales.group_size != "auto" else gs)
    deq = _dequantize(spec, ck)
    assert np.array_equal(deq, W), f"{name}: {np.count_nonzero(deq != W)} elements moved"


def test_float_zeros_are_integers_and_additive_zero_mode() -> None:
    spec = load_spec("uint3_float_zeros_bf16")
    ck = dqgen.quantize(spec, _weights(128, 64, 4))
    z = np.asarray(ck["zeros"]).astype(np.float64)
    assert (z == np.rint(z)).all() and z.min() >= 0 and z.max() <= 7
    additive = load_spec(
        {
            "name": "u4_additive",
            "source": {"bits": 4, "kind": "unsigned"},
            "target": "fp16",
            "packing": {"axis": "N", "order": "sequential"},
            "scales": {"group_size": 64},
            "zeros": {"mode": "additive"},
        }
    )
    W = _weights(128, 64, 5)
    ck = dqgen.quantize(additive, W)
    deq = _dequantize(additive, ck)
    s = _row_scale(additive, ck, 128)
    b = np.asarray(ck["zeros"]).astype(np.float64)[np.arange(128) // 64]
    # half a step, the rounding of the stored b (half its ulp), the one rounding of q * s + b
    bound = np.abs(s) / 2 + np.ldexp(np.abs(b), -11) + np.ldexp(np.abs(deq), -11) + 2.0**-25
    assert (np.abs(deq - W) <= bound).all()


def test_act_order_groups_rows_by_norm_and_takes_a_given_g_idx() -> None:
    spec = load_spec("gptq_int4_asym_act_order_fp16")
    K, N = 512, 64
    W = _weights(K, N, 6)
    W[7] *= 50  # the largest row: first in desc_act order, so in group 0
    ck = dqgen.quantize(spec, W, act_order=True)
    gi = ck["g_idx"]
    assert gi.dtype == np.int32 and gi.shape == (K,)
    assert np.bincount(gi).tolist() == [128] * 4  # every group holds group_size rows
    assert gi[7] == 0 and not np.array_equal(gi, np.arange(K) // 128)
    deq = _dequantize(spec, ck)
    assert (np.abs(deq - W) <= _bound(spec, ck, W, deq)).all()
    mine = np.random.default_rng(0).permutation(np.arange(K) // 128)
    ck2 = dqgen.quantize(spec, W, g_idx=mine)
    assert np.array_equal(ck2["g_idx"], mine)
    deq2 = _dequantize(spec, ck2)
    assert (np.abs(deq2 - W) <= _bound(spec, ck2, W, deq2)).all()
    plain = dqgen.quantize(spec, W)  # an act-order spec without act_order: the sequential map
    assert np.array_equal(plain["g_idx"], np.arange(K) // 128)


def test_group_size_choice() -> None:
    W = _weights(256, 64, 7)
    assert dqgen.quantize("awq_int4_fp16", W)["scales"].shape == (2, 64)  # auto: 128
    assert dqgen.quantize("awq_int4_fp16", W, group_size=64)["scales"].shape == (4, 64)
    assert dqgen.quantize("awq_int4_fp16", W, group_size=-1)["scales"].shape == (1, 64)
    assert dqgen.quantize("nf4_bf16", W)["scales"].shape == (4, 64)  # the spec's fixed 64


@pytest.mark.parametrize(
    ("spec", "weight", "kwargs", "message"),
    [
        ("awq_int4_fp16", np.zeros((4, 8, 8)), {}, "weight: expected a non-empty 2-D array"),
        ("awq_int4_fp16", np.zeros((128, 8), dtype=np.int32), {}, "weight: expected a float array"),
        ("awq_int4_fp16", np.full((128, 8), np.nan), {}, "weight: every value must be finite"),
        ("awq_int4_fp16", np.zeros((128, 12)), {}, "weight: N = 12 (weight.shape[1]) is not a multiple of 8"),
        ("gptq_int4_fp16", np.zeros((132, 8)), {"group_size": 4}, "group_size: 4 is not a multiple of 8"),
        ("awq_int4_fp16", np.zeros((192, 8)), {}, "group_size: expected -1 or a positive divisor of K = 192, got 128"),
        ("nf4_bf16", np.zeros((128, 8)), {"group_size": 128}, "group_size: spec nf4_bf16 fixes scales.group_size 64"),
        ("awq_int4_fp16", np.zeros((128, 8)), {"act_order": True}, "act_order: spec awq_int4_fp16 has no act-order"),
        ("awq_int4_fp16", np.zeros((128, 8)), {"g_idx": np.zeros(128, int)}, "g_idx: spec awq_int4_fp16 has no"),
        (
            "gptq_int4_asym_act_order_fp16",
            np.zeros((256, 8)),
            {"g_idx": np.full(256, 2)},
            "g_idx: values must be in [0, 2)",
        ),
        (
            "gptq_int4_asym_act_order_fp16",
            np.zeros((256, 8)),
            {"g_idx": np.zeros(255, int)},
            "g_idx: expected an integer array of shape (256,)",
        ),
        ("fp8_e4m3_fp16", np.full((128, 8), 1e9), {}, "weight: group 0 of column 0 needs a scale of"),
    ],
)
def test_bad_input_one_line_error(spec: str, weight: np.ndarray, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as e:
        dqgen.quantize(spec, weight, **kwargs)
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_one_signed_codes_refuse_mixed_signs() -> None:
    unsigned = {
        "name": "u4_nozero",
        "source": {"bits": 4, "kind": "unsigned"},
        "target": "fp16",
        "packing": {"axis": "N", "order": "sequential"},
        "scales": {"group_size": 64},
    }
    neg = -np.abs(_weights(64, 8, 8)) - 0.01  # all negative: a negative scale covers it
    ck = dqgen.quantize(unsigned, neg)
    assert (np.asarray(ck["scales"]).astype(np.float64) < 0).all()
    spec = load_spec(unsigned)
    deq = _dequantize(spec, ck)
    assert (np.abs(deq - neg) <= _bound(spec, ck, neg, deq)).all()
    with pytest.raises(ValueError, match=r"^weight: group 0 of column 0 holds weights of both signs"):
        dqgen.quantize(unsigned, np.linspace(-1, 1, 64 * 8).reshape(64, 8))


def test_import_stays_torch_free() -> None:
    """dqgen.quantize and dqgen.nn import without torch; QuantLinear loads it only when asked for."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, dqgen, dqgen.nn; assert dqgen.quantize is dqgen.nn.quantize; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'dqgen.nn.linear' not in sys.modules; print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
