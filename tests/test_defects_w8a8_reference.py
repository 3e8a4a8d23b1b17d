"""Issue 26's small defects in the W8A8 numpy references: a wrong output name and a static scale that cannot be
one are refused with a one-line ValueError naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.w8a8 import gemm_reference, reference


def _one_line(exc: pytest.ExceptionInfo[ValueError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("out", ["fp32", "fp16", "F16", "", None])
def test_epilogue_refuses_an_unknown_output_dtype(out: object) -> None:
    acc = np.ones((2, 3), np.int32)
    with pytest.raises(ValueError) as exc:
        gemm_reference.epilogue(acc, np.ones(2, np.float32), np.ones(3, np.float32), None, out)  # type: ignore[arg-type]
    msg = _one_line(exc)
    assert msg.startswith("out: ")
    assert "'f16'" in msg and "'bf16'" in msg and repr(out) in msg


def test_epilogue_known_outputs_still_work() -> None:
    acc = np.array([[3, -5]], np.int32)
    y = gemm_reference.epilogue(acc, np.array([0.5], np.float32), np.array([1.0, 2.0], np.float32), None, "f16")
    assert y.dtype == np.float16 and y.tolist() == [[1.5, -5.0]]
    assert gemm_reference.epilogue(acc, [1.0], [1.0, 1.0], None, "bf16").astype(np.float32).tolist() == [[3, -5]]


@pytest.mark.parametrize("scale", [0, 0.0, -1, -1.0, float("nan"), float("inf"), -float("inf"), 1e-50, 1e39, 10**400])
def test_quantize_refuses_a_scale_that_is_not_positive_and_finite(scale: float) -> None:
    x = np.ones((2, 4), np.float16)
    with pytest.raises(ValueError) as exc:
        reference.quantize(x, scale=scale)
    msg = _one_line(exc)
    assert msg.startswith("scale: expected a positive finite float32")


@pytest.mark.parametrize("scale", [True, "0.5", [0.5]])
def test_quantize_refuses_a_scale_that_is_not_a_number(scale: object) -> None:
    with pytest.raises(ValueError) as exc:
        reference.quantize(np.ones((1, 4), np.float16), scale=scale)  # type: ignore[arg-type]
    assert _one_line(exc).startswith("scale: expected a real number")


def test_quantize_static_scale_still_quantizes() -> None:
    x = np.array([[1.0, -2.0, 100.0, 0.26]], np.float16)
    q, s = reference.quantize(x, scale=0.5)
    # x / 0.5 rounded half-to-even and clamped to [-128, 127]; 0.26 / 0.5 = 0.52 -> 1 (float16 0.26 is 0.26001)
    assert q.tolist() == [[2, -4, 127, 1]] and s.tolist() == [0.5]
    q, s = reference.quantize(x, scale=np.float32(2))
    assert q.tolist() == [[0, -1, 50, 0]] and s.tolist() == [2.0]
