"""CPU tests of SmoothQuant's smoothing factors and the linear-layer conversion."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.w8a8 import smooth_factors, smooth_linear


def test_formula_on_a_hand_computed_case() -> None:
    act = np.array([4.0, 1.0, 16.0, 0.0, 9.0])
    # column max|W|: 1, 4, 16, 5, 0
    w = np.array([[1.0, -4.0, 2.0, 5.0, 0.0], [-0.5, 1.0, -16.0, 0.0, 0.0]])
    s = smooth_factors(act, w, alpha=0.5)
    # sqrt(4)/sqrt(1) = 2, sqrt(1)/sqrt(4) = 0.5, sqrt(16)/sqrt(16) = 1, dead channels (act 0, W 0) -> 1
    assert s.dtype == np.float32 and s.tolist() == [2.0, 0.5, 1.0, 1.0, 1.0]
    s75 = smooth_factors(act, w, alpha=0.75)
    # 4^.75 / 1^.25 = 2.828..., 1 / 4^.25 = 0.7071..., 16^.75 / 16^.25 = 8 / 2 = 4
    np.testing.assert_allclose(s75[:3], [2 * np.sqrt(2), 1 / np.sqrt(2), 4.0], rtol=1e-7)


def test_alpha_ends_move_all_or_nothing() -> None:
    rng = np.random.default_rng(0)
    act, w = rng.uniform(0.1, 10, 6), rng.standard_normal((4, 6))
    np.testing.assert_allclose(smooth_factors(act, w, 1.0), act.astype(np.float32), rtol=1e-7)
    np.testing.assert_allclose(smooth_factors(act, w, 0.0), (1 / np.abs(w).max(0)).astype(np.float32), rtol=1e-7)


def test_smoothed_layer_computes_the_same_product_in_float64() -> None:
    rng = np.random.default_rng(1)
    n, k = 24, 40
    x = rng.standard_normal((7, k)) * rng.uniform(0.1, 50, k)  # outlier channels
    w, b = rng.standard_normal((n, k)), rng.standard_normal(n)
    act = np.abs(x).max(axis=0)
    out = smooth_linear(w, b, act, alpha=0.5)
    assert out.bias is b and out.weight.shape == (n, k) and out.weight.dtype == w.dtype
    s = out.smooth.astype(np.float64)
    np.testing.assert_array_equal(out.weight, w * s[None, :])
    y_ref = x @ w.T + b
    y = (x / s) @ out.weight.T + out.bias
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12 * np.abs(y_ref).max())
    # smoothing evens the channels out: the activations' max over channels shrinks by the migration
    assert np.abs(x / s).max(axis=0).max() / np.abs(x / s).max(axis=0).min() < act.max() / act.min()


def test_identity_is_exact_with_power_of_two_factors() -> None:
    rng = np.random.default_rng(2)
    k = 16
    act = 4.0 ** rng.integers(-3, 4, k)  # alpha 0.5 and |W| max 1 -> s = 2^e exactly
    w = rng.choice([-1.0, 1.0], (8, k)) * rng.integers(1, 5, (8, k)) / 4
    w[:, :] /= np.abs(w).max(axis=0)  # column max 1
    out = smooth_linear(w, None, act, alpha=0.5)
    s = out.smooth.astype(np.float64)
    assert set(np.log2(s)) <= set(range(-3, 4))
    x = rng.integers(-100, 100, (5, k)).astype(np.float64)
    assert ((x / s) @ out.weight.T == x @ w.T).all()


@pytest.mark.parametrize(
    ("act", "w", "alpha", "match"),
    [
        (np.ones((2, 3)), np.ones((4, 3)), 0.5, "act_absmax: expected a vector"),
        (np.ones(3), np.ones((3, 4)), 0.5, r"weight: expected \[N, K=3\]"),
        (np.ones(3), np.ones(3), 0.5, "weight: expected"),
        (-np.ones(3), np.ones((2, 3)), 0.5, "act_absmax: .*negative"),
        (np.array([1.0, np.nan, 1.0]), np.ones((2, 3)), 0.5, "act_absmax: expected finite"),
        (np.ones(3), np.ones((2, 3)), 1.5, "alpha: expected"),
        (np.array([1e300, 1, 1]), np.ones((2, 3)), 1.0, "channel 0"),
    ],
)
def test_bad_input_names_the_argument(act: np.ndarray, w: np.ndarray, alpha: float, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        smooth_factors(act, w, alpha)
    assert "\n" not in str(info.value)


def test_bias_shape_is_checked() -> None:
    with pytest.raises(ValueError, match=r"bias: expected \[N=2\]"):
        smooth_linear(np.ones((2, 3)), np.ones(3), np.ones(3))
