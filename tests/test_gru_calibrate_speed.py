"""Issue 25 (4): calibration through one float pass with running ranges (observe.float_direction) gives the same
quantization constants as the earlier traced path (floatref.gru_float + Trace, W.x through np.einsum), on numpy,
on torch (CPU here; the GPU in test_gru_modules_gpu.py) and for PackedSequence calibration."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.gru import QuantGRUParams, calibrate
from dqgen.gru.calibrate import RangesOf, traced_ranges
from dqgen.gru.observe import float_direction

REL = 1e-12  # float64 summation order (BLAS vs einsum) moves a range by a few ulp, never more


def _weights(rng: np.random.Generator, c: int, h: int) -> tuple[np.ndarray, ...]:
    k = 1.0 / np.sqrt(h)
    return tuple(rng.uniform(-k, k, shape) for shape in ((3 * h, c), (3 * h, h), (3 * h,), (3 * h,)))


def assert_same_constants(a: QuantGRUParams, b: QuantGRUParams) -> None:
    """Every integer the kernel uses is equal (codes, biases, zero points, multipliers, shifts, tables); the float
    scales they were derived from agree to REL."""
    for name, arr in a.parts()[1].items():
        other = getattr(b, name)
        if arr.dtype.kind == "f":
            assert np.allclose(arr, other, rtol=REL, atol=0), name
        else:
            assert np.array_equal(arr, other), name
    for name in ("x", "h", "rrh", "old", "new"):
        qa, qb = getattr(a, name), getattr(b, name)
        assert (qa.zero_point, qa.bits) == (qb.zero_point, qb.bits), name
        assert abs(qa.scale / qb.scale - 1) < REL, name
    for name in ("wx", "rh", "pre"):
        for g, qa in getattr(a, name).items():
            qb = getattr(b, name)[g]
            assert (qa.zero_point, qa.bits) == (qb.zero_point, qb.bits), f"{name}[{g}]"
            assert abs(qa.scale / qb.scale - 1) < REL, f"{name}[{g}]"
    da, db = a.derived(), b.derived()
    for name in ("wx_mult", "wx_shift", "rh_mult", "rh_shift", "bias_x", "bias_h"):
        assert np.array_equal(getattr(da, name), getattr(db, name)), name
    assert {k: (r.multiplier, r.shift) for k, r in da.scalar.items()} == {
        k: (r.multiplier, r.shift) for k, r in db.scalar.items()
    }
    assert all(np.array_equal(da.lut[g], db.lut[g]) for g in da.lut)


def _traced(w: np.ndarray, r: np.ndarray, bx: np.ndarray, br: np.ndarray) -> RangesOf:
    return lambda x, h0: traced_ranges(x, h0, w, r, bx, br)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_running_ranges_equal_the_traced_ranges(seed: int) -> None:
    rng = np.random.default_rng(seed)
    w, r, bx, br = _weights(rng, 24, 40)
    x, h0 = rng.standard_normal((25, 6, 24)), 0.5 * rng.standard_normal((6, 40))
    _, fast = float_direction(x, h0, w, r, bx, br)
    slow = traced_ranges(x, h0, w, r, bx, br)
    assert (
        set(fast)
        == set(slow)
        == {"x", "h", "rrh", "old", "new"} | {f"{k}_{g}" for k in ("wx", "rh", "pre") for g in "zrg"}
    )
    for name, (lo, hi) in slow.items():
        assert np.allclose(fast[name], (lo, hi), rtol=REL, atol=0), name
    assert fast["x"] == slow["x"]  # no arithmetic on x: exactly equal


@pytest.mark.parametrize(("observer", "bits", "seed"), [("minmax", 31, 0), ("ema", 31, 1), ("minmax", 15, 2)])
def test_fast_calibration_gives_the_traced_constants(observer: str, bits: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w, r, bx, br = _weights(rng, 32, 48)
    batches = [(rng.standard_normal((20, 8, 32)), 0.3 * rng.standard_normal((8, 48))) for _ in range(3)]
    fast = calibrate(w, r, bx, br, batches, observer=observer, multiplier_bits=bits)  # type: ignore[arg-type]
    slow = calibrate(
        w,
        r,
        bx,
        br,
        batches,
        observer=observer,  # type: ignore[arg-type]
        multiplier_bits=bits,  # type: ignore[arg-type]
        ranges_of=_traced(w, r, bx, br),
    )
    assert_same_constants(fast, slow)


def test_quantize_on_torch_gives_the_traced_constants() -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.calibrate_stack import gru_cells
    from dqgen.gru.module import quantize

    torch.manual_seed(0)
    for gru in (torch.nn.GRU(16, 32), torch.nn.GRU(16, 32, num_layers=2, batch_first=True)):
        xs = [torch.randn(12, 5, 16) for _ in range(2)]
        h0s = [0.2 * torch.randn(gru.num_layers, 5, 32) for _ in range(2)]
        items = [(x.transpose(0, 1) if gru.batch_first else x, h) for x, h in zip(xs, h0s, strict=True)]
        q = quantize(gru, items)
        w, r, bx, br = gru_cells(gru)[0]
        slow = calibrate(
            w,
            r,
            bx,
            br,
            [(x.double().numpy(), h[0].double().numpy()) for x, h in zip(xs, h0s, strict=True)],
            ranges_of=_traced(w, r, bx, br),
        )
        assert_same_constants(q.stack.cells[0], slow)  # layer 0 of either: the single-cell calibration


def test_packed_calibration_sees_each_sequence_alone() -> None:
    """minmax over a PackedSequence batch = minmax over its sequences calibrated one by one: no padding step
    (forward or reverse) reaches any range, and the reverse direction starts at each sequence's own end."""
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence

    from dqgen.gru.module import quantize

    torch.manual_seed(1)
    gru = torch.nn.GRU(16, 32, num_layers=2, bidirectional=True)
    lengths = torch.tensor([9, 3, 14, 1, 6])
    padded = torch.randn(14, 5, 16) + 3.0  # far off zero: steps run on (zero) padding would show in the ranges
    h0 = 0.5 * torch.randn(4, 5, 32)
    packed = pack_padded_sequence(padded, lengths, enforce_sorted=False)
    together = quantize(gru, [(packed, h0)])
    alone = quantize(gru, [(padded[: lengths[n], n : n + 1], h0[:, n : n + 1]) for n in range(5)])
    for a, b in zip(together.stack.cells, alone.stack.cells, strict=True):
        assert_same_constants(a, b)
    # the same rows with their padding steps run: the ranges move (so the equality above is not vacuous)
    padded_run = quantize(gru, [(padded, h0)])

    def scales(p: QuantGRUParams) -> list[float]:
        return [q.scale for q in (p.x, p.h, p.rrh, p.old, p.new, *p.wx.values(), *p.rh.values(), *p.pre.values())]

    cells = zip(padded_run.stack.cells, together.stack.cells, strict=True)
    assert all(scales(a) != scales(b) for a, b in cells)
