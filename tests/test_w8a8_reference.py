"""CPU tests of the activation-quantization reference (its arithmetic on hand-computed cases and its properties)
and of the generated kernel's source (NVRTC compiles every variant; registers, no spills)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from dqgen.emit.nvrtc import compile_source
from dqgen.kernels.act_quant import (
    MAX_CACHED,
    MAX_SMOOTH_SMEM,
    SMEM_MIN_ROWS,
    ActQuantConfig,
    choose_act_quant,
    render_act_quant,
)
from dqgen.w8a8 import reference

F16 = np.float16
BF16 = ml_dtypes.bfloat16


def test_hand_case_ties_round_to_even() -> None:
    # amax 127 -> inv = 127 / 127 = 1 exactly, so q = rint(x): .5 ties go to the even neighbour
    x = np.array([[127, 2.5, -3.5, 0.5, -0.5, 1.5, -126.5]], F16)
    q, s = reference.quantize(x)
    assert q.tolist() == [[127, 2, -4, 0, 0, 2, -126]]
    assert s.tolist() == [1.0]


def test_zero_row_gives_scale_zero_and_codes_zero_without_nan() -> None:
    x = np.zeros((2, 5), F16)
    x[1, 3] = -2.0
    with np.errstate(all="raise"):  # no division by zero or invalid operation anywhere
        q, s = reference.quantize(x)
    assert s[0] == 0 and (q[0] == 0).all()
    assert q[1].tolist() == [0, 0, 0, -127, 0] and s[1] == np.float32(2) / np.float32(127)


def test_static_scale_saturates_both_ends() -> None:
    x = np.array([[100, -100, 1.25, -64.25, 63.75]], F16)
    q, s = reference.quantize(x, scale=0.5)
    # 1 / 0.5 = 2 exactly: 200 -> 127, -200 -> -128, 2.5 -> 2 (even), -128.5 -> -128, 127.5 -> 127
    assert q.tolist() == [[127, -128, 2, -128, 127]]
    assert s.tolist() == [0.5]


def test_smoothing_multiplies_by_the_rounded_reciprocal() -> None:
    # 1/7 in float32 is 0.142857149..., times 3 rounds to 0.42857146 while 3/7 rounds to 0.42857143: the
    # reference (and the kernel) take the first, as documented
    xf = reference.smoothed(np.array([[3.0]], F16), np.array([7.0], np.float32))
    assert xf[0, 0] == np.float32(0.42857146)
    assert xf[0, 0] != np.float32(3) / np.float32(7)
    q, s = reference.quantize(np.array([[8, 3]], F16), np.array([2, 0.5], np.float32))
    # x / s = [4, 6]; inv = 127 / 6; 4 * 21.1666... = 84.67 -> 85
    assert q.tolist() == [[85, 127]] and s[0] == np.float32(6) / np.float32(127)


def test_smoothing_factors_in_x_dtype_are_widened_exactly() -> None:
    s16 = np.array([0.1, 3.0], F16)  # 0.1 is not 0.1 in fp16: the fp16 value is what counts
    xf = reference.smoothed(np.array([[1.0, 1.0]], F16), s16)
    assert xf[0].tolist() == [np.float32(1) / np.float32(float(s16[0])), np.float32(1) / np.float32(3)]


def test_nan_is_passed_over_by_the_max_and_coded_zero() -> None:
    x = np.array([[np.nan, 2.0, -4.0], [np.inf, 1.0, 0.0]], F16)
    q, s = reference.quantize(x)
    assert s[0] == np.float32(4) / np.float32(127) and q[0].tolist() == [0, 64, -127]
    # an infinite element: scale inf, inv = 127 / inf = 0, every code 0 (inf * 0 is NaN -> 0)
    assert s[1] == np.inf and q[1].tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_dequantized_error_is_at_most_half_a_step(dtype: type) -> None:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 300)) * rng.uniform(0.01, 100, (64, 1))).astype(dtype)
    smooth = rng.uniform(0.25, 4, 300).astype(np.float32)
    for s in (None, smooth):
        xf = reference.smoothed(x, s).astype(np.float64)
        q, scale = reference.quantize(x, s)
        err = np.abs(q * scale.astype(np.float64)[:, None] - xf)
        # half a step, plus the float32 roundings of inv and the product (a few ulps of 127)
        assert (err <= scale[:, None] * (0.5 + 1e-5)).all()
        assert (np.abs(q).max(axis=1) == 127).all()  # the largest element maps to the end of the range


def test_bf16_input_is_widened_exactly() -> None:
    x = np.array([[1 + 2.0**-7, -3 * 2.0**-100, 2.0**100]], BF16)
    assert reference.smoothed(x, None)[0].tolist() == [1 + 2.0**-7, -3 * 2.0**-100, 2.0**100]


# --------------------------------------------------------------------------- the kernel's source


@pytest.mark.parametrize("k", [1, 7, 8, 4096, 4099, 14336, 40000])
def test_every_column_has_an_owner(k: int) -> None:
    for aligned in (True, False) if k % 8 == 0 else (False,):
        v = ActQuantConfig("fp16", k, None, False, aligned)
        assert v.threads % 32 == 0 and 32 <= v.threads <= 512
        assert v.threads * v.chunks * 8 >= k - k % 8  # the vectors
        assert v.threads >= 14  # the scalar head and tail (at most 7 + 7 elements) of the general variant
        assert v.cache == min(v.chunks, MAX_CACHED)


VARIANTS = [
    ActQuantConfig("fp16", 4096, None, False, True, "raw"),
    ActQuantConfig("fp16", 4096, None, False, True, "f32"),
    ActQuantConfig("bf16", 14336, "fp32", False, True, "raw", "smem"),
    ActQuantConfig("bf16", 14336, "fp32", False, True, "f32", "regs"),
    ActQuantConfig("fp16", 8192, "fp16", True, True, "raw", "regs"),
    ActQuantConfig("bf16", 4099, "bf16", False, False, "raw", "rcp"),
    ActQuantConfig("fp16", 7, "fp32", True, False, "raw", "rcp"),
    ActQuantConfig("fp16", 40000, "fp32", False, False, "f32", "rcp"),
]


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.name)
def test_variant_compiles_without_spills(v: ActQuantConfig) -> None:
    res = compile_source(
        render_act_quant(v),
        arch="sm_90",
        want="cubin",
        name="act_quant.cu",
        options=["--ptxas-options=-v"],
        use_cache=False,
    )
    assert "0 bytes spill stores" in res.log and "0 bytes stack frame" in res.log, res.log
    assert res.cubin.startswith(b"\x7fELF")


def test_render_refuses_an_aligned_variant_with_a_tail() -> None:
    with pytest.raises(ValueError, match="K must be a multiple of 8"):
        render_act_quant(ActQuantConfig("fp16", 4100, None, False, True))


def test_choose_places_the_smoothing_reciprocals_by_rows_and_falls_back() -> None:
    # by default registers for few rows, shared memory from SMEM_MIN_ROWS rows on (the bench's figures)
    assert choose_act_quant("fp16", 4096, "fp32", False, True, 16).smooth_in == "regs"
    assert choose_act_quant("fp16", 4096, "fp32", False, True, SMEM_MIN_ROWS).smooth_in == "smem"
    assert choose_act_quant("fp16", 4096, None, False, True, 16).hold == "raw"
    # registers only for <= 4 vectors a thread, shared memory only for aligned rows that fit; else per element
    assert choose_act_quant("fp16", 20000, "fp32", False, True, 16).smooth_in == "rcp"
    assert choose_act_quant("fp16", 20000, "fp32", False, True, 4096, smooth_in="regs").smooth_in == "smem"
    big = MAX_SMOOTH_SMEM // 4 + 8
    assert choose_act_quant("fp16", big, "fp32", False, True, 4096).smooth_in == "rcp"
    assert choose_act_quant("fp16", 4099, "fp32", False, False, 4096, smooth_in="smem").smooth_in == "rcp"
    with pytest.raises(ValueError, match="needs the aligned variant"):
        render_act_quant(ActQuantConfig("fp16", 4099, "fp32", False, False, "raw", "smem"))
    with pytest.raises(ValueError, match="at most 4 vectors"):
        render_act_quant(ActQuantConfig("fp16", 40000, "fp32", False, True, "raw", "regs"))
