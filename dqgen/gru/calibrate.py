"""Post-training calibration: run the float haste GRU on sample inputs, track min/max of every tensor the
integer cell quantizes (plain or EMA), and build QuantGRUParams from numpy weights.

The ranges of one batch come from ``observe.float_direction`` (one BLAS matmul for W·x, running minima and
maxima, numpy or torch on the module's device). ``traced_ranges`` is the earlier path (``floatref.gru_float``
with a per-step ``Trace``, W·x through ``np.einsum``), kept as the independent statement the fast path is tested
against: both give the same QuantGRUParams (tests/test_gru_calibrate_speed.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .floatref import Trace, gru_float
from .observe import Ranges, float_direction
from .params import GATES, SIGMOID_OUT, TANH_OUT, QParam, QuantGRUParams, saturation_bound
from .requant import MultiplierBits

Observer = Literal["minmax", "ema"]
EMA_DECAY = 0.9  # the seed's option: range = 0.9 * old + 0.1 * new per calibration batch


@dataclass
class RangeTracker:
    observer: Observer = "minmax"
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    def update(self, name: str, values: list[np.ndarray] | np.ndarray) -> None:
        arr = np.concatenate([np.ravel(v) for v in values]) if isinstance(values, list) else np.ravel(values)
        self.update_range(name, float(arr.min()), float(arr.max()))

    def update_range(self, name: str, lo: float, hi: float) -> None:
        """Fold one batch's [lo, hi] of ``name`` in (min/max over batches, or the EMA of the batch ranges)."""
        if name not in self.ranges:
            self.ranges[name] = (lo, hi)
        elif self.observer == "ema":
            old_lo, old_hi = self.ranges[name]
            self.ranges[name] = (EMA_DECAY * old_lo + (1 - EMA_DECAY) * lo, EMA_DECAY * old_hi + (1 - EMA_DECAY) * hi)
        else:
            old_lo, old_hi = self.ranges[name]
            self.ranges[name] = (min(old_lo, lo), max(old_hi, hi))


def symmetric_per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes in [-127, 127] and one scale per row (max |w| / 127; an all-zero row gets scale 1)."""
    amax = np.abs(w).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float64)


def traced_ranges(
    x: np.ndarray, h0: np.ndarray, w: np.ndarray, r: np.ndarray, bx: np.ndarray, br: np.ndarray
) -> Ranges:
    """One batch's ranges the earlier way: the float reference with a trace of every step, then min/max of each
    tensor's concatenation. Slow at large hidden sizes (np.einsum for W·x); kept to test the fast path against."""
    trace = Trace()
    out = gru_float(x, h0, w, r, bx, br, trace)
    tracker = RangeTracker()
    tracker.update("x", x)
    tracker.update("h", [h0, out])
    for name, values in trace.tensors.items():
        if name != "h":
            tracker.update(name, values)
    return tracker.ranges


# (x [T, N, C], h0 [N, H]) of one batch -> its ranges
RangesOf = Callable[[Any, Any], Ranges]


def calibrate(
    w: np.ndarray,
    r: np.ndarray,
    bx: np.ndarray,
    br: np.ndarray,
    batches: Iterable[tuple[Any, Any]],
    *,
    observer: Observer = "minmax",
    intermediate_bits: int = 16,
    multiplier_bits: MultiplierBits = 31,
    ranges_of: RangesOf | None = None,
) -> QuantGRUParams:
    """Weights in haste order (W [3H, C], R [3H, H], bx/br [3H]) and calibration batches of (x [T, N, C], h0 [N, H]).

    Intermediates that only feed rescales (Wx, Rh, r*Rh, the two h terms) are kept at ``intermediate_bits``
    (16: their rounding then costs < 1/256 of an int8 LSB); the pre-activations are int8 because they index the
    256-entry tables, and x and h are int8 because they feed the int8 GEMMs.

    ``ranges_of`` observes one batch; by default ``observe.float_direction`` on these numpy weights (the batches
    then are numpy arrays). ``quantize`` passes one bound to torch copies of the weights on the module's device.
    """
    w, r = np.asarray(w, dtype=np.float64), np.asarray(r, dtype=np.float64)
    bx, br = np.asarray(bx, dtype=np.float64), np.asarray(br, dtype=np.float64)
    h3, c = w.shape
    hsz = h3 // 3
    if h3 != 3 * hsz or r.shape != (h3, hsz) or bx.shape != (h3,) or br.shape != (h3,):
        raise ValueError(
            f"weights: expected W [3H, C], R [3H, H], bx/br [3H], got {w.shape}, {r.shape}, {bx.shape}, {br.shape}"
        )
    if ranges_of is None:

        def ranges_of(x: Any, h0: Any) -> Ranges:
            x64, h064 = np.asarray(x, dtype=np.float64), np.asarray(h0, dtype=np.float64)
            return float_direction(x64, h064, w, r, bx, br)[1]

    tracker = RangeTracker(observer)
    for x, h0 in batches:
        if x.ndim != 3 or x.shape[2] != c or tuple(h0.shape) != (x.shape[1], hsz):
            got = f"{tuple(x.shape)}, {tuple(h0.shape)}"
            raise ValueError(f"calibration batch: expected x [T, N, {c}] and h0 [N, {hsz}], got {got}")
        for name, (lo, hi) in ranges_of(x, h0).items():
            tracker.update_range(name, lo, hi)
    if not tracker.ranges:
        raise ValueError("calibration_inputs: expected at least one batch")
    return params_from_ranges(
        w, r, bx, br, tracker.ranges, intermediate_bits=intermediate_bits, multiplier_bits=multiplier_bits
    )


def params_from_ranges(
    w: np.ndarray,
    r: np.ndarray,
    bx: np.ndarray,
    br: np.ndarray,
    rng: Ranges,
    *,
    intermediate_bits: int = 16,
    multiplier_bits: MultiplierBits = 31,
) -> QuantGRUParams:
    """QuantGRUParams from float64 haste-order weights and the calibrated range of every tensor."""
    c = w.shape[1]
    hsz = w.shape[0] // 3
    x_q = QParam.from_range(*rng["x"], 8)
    h_q = QParam.from_range(*rng["h"], 8)
    w_q, w_scale = symmetric_per_channel(w)
    r_q, r_scale = symmetric_per_channel(r)
    # Biases at the accumulator's scale, so they add into the int32 GEMM result exactly (TFLite's choice).
    bx_q = np.rint(bx / (w_scale * x_q.scale)).astype(np.int32)
    br_q = np.rint(br / (r_scale * h_q.scale)).astype(np.int32)
    caps = {
        "z": saturation_bound("sigmoid", SIGMOID_OUT[0]),
        "r": saturation_bound("sigmoid", SIGMOID_OUT[0]),
        "g": saturation_bound("tanh", TANH_OUT[0]),
    }
    pre = {}
    for g in GATES:
        lo, hi = rng[f"pre_{g}"]
        pre[g] = QParam.from_range(max(lo, -caps[g]), min(hi, caps[g]), 8)
    ib = intermediate_bits
    return QuantGRUParams(
        input_size=c,
        hidden_size=hsz,
        multiplier_bits=multiplier_bits,
        w_q=w_q,
        r_q=r_q,
        w_scale=w_scale,
        r_scale=r_scale,
        bx_q=bx_q,
        br_q=br_q,
        x=x_q,
        h=h_q,
        wx={g: QParam.from_range(*rng[f"wx_{g}"], ib) for g in GATES},
        rh={g: QParam.from_range(*rng[f"rh_{g}"], ib) for g in GATES},
        pre=pre,
        rrh=QParam.from_range(*rng["rrh"], ib),
        old=QParam.from_range(*rng["old"], ib),
        new=QParam.from_range(*rng["new"], ib),
    )
