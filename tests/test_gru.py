"""CPU tests of the int8 GRU core: requantization constants, the numba reference and accuracy against float."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dqgen.gru import QuantGRUParams, calibrate, derive, reference
from dqgen.gru.floatref import gru_float, haste_to_torch, torch_to_haste
from dqgen.gru.params import SIGMOID_OUT, SUMMED_PAIRS, saturation_bound
from dqgen.gru.requant import apply, derive_shared


def _weights(rng: np.random.Generator, c: int, h: int) -> tuple[np.ndarray, ...]:
    k = 1.0 / np.sqrt(h)  # torch.nn.GRU's default init range
    return (
        rng.uniform(-k, k, (3 * h, c)),
        rng.uniform(-k, k, (3 * h, h)),
        rng.uniform(-k, k, 3 * h),
        rng.uniform(-k, k, 3 * h),
    )


def _sine(rng: np.random.Generator, t: int, n: int, c: int) -> np.ndarray:
    steps = np.arange(t)[:, None, None]
    freq, phase = rng.uniform(0.05, 0.3, (1, n, c)), rng.uniform(0, 2 * np.pi, (1, n, c))
    return np.sin(freq * steps + phase) + 0.1 * rng.standard_normal((t, n, c))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("bits", [15, 31])
def test_derive_error_bound_and_range(bits: int) -> None:
    rng = np.random.default_rng(1)
    for real in np.exp(rng.uniform(np.log(1e-7), np.log(1e3), 500)):
        r = derive(float(real), bits)  # type: ignore[arg-type]
        assert 2 ** (bits - 1) <= r.multiplier < 2**bits
        exact = Fraction(r.multiplier, 2**r.shift) - Fraction(float(real))
        assert abs(exact) <= Fraction(1, 2 ** (r.shift + 1))
        assert abs(float(exact)) / real <= 2.0**-bits


@pytest.mark.parametrize("bits", [15, 31])
def test_derive_shared_one_shift_and_each_within_its_bound(bits: int) -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        reals = [float(v) for v in np.exp(rng.uniform(np.log(1e-4), np.log(10.0), 2))]
        pair = derive_shared(reals, bits)  # type: ignore[arg-type]
        own = [derive(v, bits) for v in reals]  # type: ignore[arg-type]
        assert pair[0].shift == pair[1].shift == min(r.shift for r in own)
        big = int(np.argmax(reals))
        assert pair[big].multiplier == own[big].multiplier  # the larger factor keeps its own b-bit multiplier
        for real, r in zip(reals, pair, strict=True):
            assert 0 <= r.multiplier < 2**bits
            assert abs(Fraction(r.multiplier, 2**r.shift) - Fraction(real)) <= Fraction(1, 2 ** (r.shift + 1))
    # a factor below what any shift <= 62 resolves contributes nothing, and does not pull the shift with it
    tiny = derive_shared([0.5, 1e-30], 31)
    assert tiny[0] == derive(0.5, 31) and tiny[1].multiplier == 0


def test_derive_rejects_non_positive() -> None:
    with pytest.raises(ValueError, match="positive finite"):
        derive(0.0)
    with pytest.raises(ValueError, match="positive finite"):
        derive(float("nan"))


def test_apply_rounds_half_to_even_exactly() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(-(2**31), 2**31, 2000, dtype=np.int64)
    x[:8] = [1, 3, 5, -1, -3, -5, 0, 2**31 - 1]
    for m, k in ((1, 1), (3, 2), (2**30 + 12345, 37), (2**31 - 1, 62), (5, 0)):
        got = apply(x, m, k)
        want = [round(Fraction(int(v) * m, 2**k)) for v in x]  # Python rounds Fractions half to even
        assert got.tolist() == want


def test_torch_gate_order_round_trip() -> None:
    a = np.arange(12).reshape(6, 2)
    h = torch_to_haste(a, 2)
    assert h[:2].tolist() == a[2:4].tolist()  # torch's z block is second
    assert haste_to_torch(h, 2).tolist() == a.tolist()


def test_saturation_bound_is_where_the_table_stops_changing() -> None:
    s = SIGMOID_OUT[0]
    v = saturation_bound("sigmoid", s)
    assert 1 / (1 + np.exp(-v)) == pytest.approx(1 - s / 2)
    assert np.tanh(saturation_bound("tanh", 1 / 127)) == pytest.approx(1 - 1 / 254)


def _python_cell_element(p: QuantGRUParams, wx: list[int], rh: list[int], h_old: int) -> int:
    """One output element with Python ints and Fraction rounding: an independent statement of docs/gru.md."""
    d = p.derived()
    ib = p.rrh.bits
    lo, hi = -(2 ** (ib - 1)), 2 ** (ib - 1) - 1

    def rq(v: int, name: str) -> int:
        r = d.scalar[name]
        return round(Fraction(v * r.multiplier, 2**r.shift))

    def rq_sum(a: int, name_a: str, b: int, name_b: str) -> int:
        """The two terms of a pre-activation or of h: one exact sum, rounded once (docs/gru.md)."""
        ra, rb = d.scalar[name_a], d.scalar[name_b]
        return round(Fraction(a * ra.multiplier, 2**ra.shift) + Fraction(b * rb.multiplier, 2**rb.shift))

    def clamp(v: int, a: int, b: int) -> int:
        return max(a, min(b, v))

    j = 0
    hsz = p.hidden_size
    q_wx, q_rh = {}, {}
    for gi, g in enumerate("zrg"):
        c = gi * hsz + j
        cw, cr = d.wx_channels[c], d.rh_channels[c]
        q_wx[g] = clamp(
            round(Fraction((wx[gi] + int(d.bias_x[c])) * cw.multiplier, 2**cw.shift)) + p.wx[g].zero_point, lo, hi
        )
        q_rh[g] = clamp(
            round(Fraction((rh[gi] + int(d.bias_h[c])) * cr.multiplier, 2**cr.shift)) + p.rh[g].zero_point, lo, hi
        )
    zs = SIGMOID_OUT[1]

    def lut(g: str, v: int) -> int:
        return int(d.lut[g][clamp(v, -128, 127) + 128])

    qz = lut(
        "z",
        rq_sum(q_wx["z"] - p.wx["z"].zero_point, "wx_z->pre_z", q_rh["z"] - p.rh["z"].zero_point, "rh_z->pre_z")
        + p.pre["z"].zero_point,
    )
    qr = lut(
        "r",
        rq_sum(q_wx["r"] - p.wx["r"].zero_point, "wx_r->pre_r", q_rh["r"] - p.rh["r"].zero_point, "rh_r->pre_r")
        + p.pre["r"].zero_point,
    )
    rrh = clamp(rq((qr - zs) * (q_rh["g"] - p.rh["g"].zero_point), "r*rh_g->rrh") + p.rrh.zero_point, lo, hi)
    qg = lut(
        "g",
        rq_sum(q_wx["g"] - p.wx["g"].zero_point, "wx_g->pre_g", rrh - p.rrh.zero_point, "rrh->pre_g")
        + p.pre["g"].zero_point,
    )
    old = clamp(rq((qz - zs) * (h_old - p.h.zero_point), "z*h->old") + p.old.zero_point, lo, hi)
    new = clamp(rq((255 - (qz - zs)) * qg, "(1-z)*g->new") + p.new.zero_point, lo, hi)
    return clamp(rq_sum(old - p.old.zero_point, "old->h", new - p.new.zero_point, "new->h") + p.h.zero_point, -128, 127)


@pytest.fixture(scope="module")
def small() -> QuantGRUParams:
    rng = np.random.default_rng(3)
    w, r, bx, br = _weights(rng, 16, 8)
    return calibrate(w, r, bx, br, [(rng.standard_normal((20, 4, 16)), np.zeros((4, 8)))])


@pytest.mark.parametrize("bits", [31, 15])
def test_reference_cell_matches_python_integers_including_saturation(bits: int) -> None:
    rng = np.random.default_rng(4)
    w, r, bx, br = _weights(rng, 16, 8)
    calib = [(rng.standard_normal((20, 4, 16)), np.zeros((4, 8)))]
    p = calibrate(w, r, bx, br, calib, multiplier_bits=bits)  # type: ignore[arg-type]
    scalar = p.derived().scalar
    paired = {name for pair in SUMMED_PAIRS for name in pair}
    assert all(2 ** (bits - 1) <= v.multiplier < 2**bits for k, v in scalar.items() if k not in paired)
    for a, b in SUMMED_PAIRS:  # one shift a pair; the larger factor keeps a full-width multiplier
        assert scalar[a].shift == scalar[b].shift
        assert 2 ** (bits - 1) <= max(scalar[a].multiplier, scalar[b].multiplier) < 2**bits
        assert min(scalar[a].multiplier, scalar[b].multiplier) > 0
    # Accumulators far outside the calibrated ranges saturate every clamp (intermediates, pre-activations, h).
    for scale in (10, 1000, 2**20, 2**24):
        wx = rng.integers(-scale, scale, (16, 24))
        rh = rng.integers(-scale, scale, (16, 24))
        h_old = rng.integers(-128, 128, (16, 8))
        got = reference.cell(p, wx, rh, h_old.astype(np.int8))
        for n in range(16):
            want = _python_cell_element(
                p,
                [int(wx[n, 0]), int(wx[n, 8]), int(wx[n, 16])],
                [int(rh[n, 0]), int(rh[n, 8]), int(rh[n, 16])],
                int(h_old[n, 0]),
            )
            assert int(got[n, 0]) == want
    big = reference.cell(p, np.full((1, 24), 2**24), np.full((1, 24), 2**24), np.full((1, 8), 127, np.int8))
    assert (big != 0).any()


@pytest.mark.parametrize(("kind", "bits"), [("random", 31), ("sine", 31), ("random", 15)])
def test_accuracy_vs_float_hidden256(kind: str, bits: int) -> None:
    rng = np.random.default_rng(5)
    c, h, t, n = 128, 256, 50, 64
    w, r, bx, br = _weights(rng, c, h)
    h0 = np.zeros((n, h))
    calib = [(rng.standard_normal((t, n, c)), h0), (_sine(rng, t, n, c), h0)]
    p = calibrate(w, r, bx, br, calib, multiplier_bits=bits)  # type: ignore[arg-type]
    x = rng.standard_normal((t, n, c)) if kind == "random" else _sine(rng, t, n, c)  # not a calibration batch
    want = gru_float(x, h0, w, r, bx, br)
    got = p.h.dequantize(reference.run(p, p.x.quantize(x).astype(np.int8), p.h.quantize(h0).astype(np.int8)))
    assert _cosine(got, want) >= 0.9995
    assert float(((got - want) ** 2).mean()) < 1e-3
    assert float(np.abs(got - want).mean()) < 0.05


def test_no_drift_over_1000_steps() -> None:
    rng = np.random.default_rng(6)
    c, h, n = 32, 64, 4
    w, r, bx, br = _weights(rng, c, h)
    h0 = np.zeros((n, h))
    p = calibrate(w, r, bx, br, [(_sine(rng, 50, n, c), h0)])
    x = _sine(rng, 1000, n, c)
    want = gru_float(x, h0, w, r, bx, br)
    got = p.h.dequantize(reference.run(p, p.x.quantize(x).astype(np.int8), p.h.quantize(h0).astype(np.int8)))
    first, last = _cosine(got[:100], want[:100]), _cosine(got[-100:], want[-100:])
    assert last >= 0.999
    assert last >= first - 5e-4


def test_save_load_round_trip(small: QuantGRUParams, tmp_path) -> None:
    path = tmp_path / "g.npz"
    small.save(path)
    back = QuantGRUParams.load(path)
    x = np.random.default_rng(7).integers(-128, 128, (5, 4, 16)).astype(np.int8)
    h0 = np.zeros((4, 8), np.int8)
    assert (reference.run(back, x, h0) == reference.run(small, x, h0)).all()
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"bad\.npz: not a dqgen quantized GRU file"):
        QuantGRUParams.load(bad)


def test_a_model_outside_the_proven_ranges_is_refused(small: QuantGRUParams) -> None:
    """The cell's integer widths are proven for weight codes in [-127, 127] and zero points that are codes
    (dqgen.gru.kernel.cell_roundings): a file that breaks either is refused when it is read, not run."""
    from dqgen.gru.params import QParam

    meta, arrays = small.parts()
    r_q = arrays["r_q"].copy()
    r_q[0, 0] = -128
    with pytest.raises(ValueError, match=r"r_q: expected codes in \[-127, 127\]"):
        QuantGRUParams.from_parts(meta, {**arrays, "r_q": r_q})
    with pytest.raises(ValueError, match=r"zero_point: expected a 8-bit code in \[-128, 127\], got 300"):
        QParam(scale=0.1, zero_point=300, bits=8)
    bad = {**meta, "rrh": {**meta["rrh"], "zero_point": 2 ** meta["rrh"]["bits"]}}
    with pytest.raises(ValueError, match="zero_point"):
        QuantGRUParams.from_parts(bad, arrays)


def test_bad_weight_shapes_are_named() -> None:
    with pytest.raises(ValueError, match=r"weights: expected W \[3H, C\]"):
        calibrate(np.zeros((9, 4)), np.zeros((9, 2)), np.zeros(9), np.zeros(9), [])


def test_explain_prints_every_constant_with_its_bound(small: QuantGRUParams, tmp_path) -> None:
    from typer.testing import CliRunner

    from dqgen.cli import app

    path = tmp_path / "g.npz"
    small.save(path)
    res = CliRunner().invoke(app, ["explain", str(path)])
    assert res.exit_code == 0, res.output
    d = small.derived()
    for key, r in d.scalar.items():
        assert f"{key}" in res.output
        assert f"{r.multiplier} / 2^{r.shift}" in res.output
        # The printed error is the true distance of the fixed-point value from the real factor.
        err = abs(Fraction(r.multiplier, 2**r.shift) - Fraction(r.real))
        assert f"|error| {float(err):.3g}" in res.output
        assert err <= Fraction(1, 2 ** (r.shift + 1))
    assert "one_z = round(1 / S_z_out) = 255" in res.output
    bad = tmp_path / "bad.npz"
    bad.write_text("x")
    res = CliRunner().invoke(app, ["explain", str(bad)])
    assert res.exit_code == 2
    assert "bad.npz: not a dqgen quantized GRU file" in res.output
