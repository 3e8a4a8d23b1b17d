"""The GRU cell kernel of a model (dqgen.kernels.gru_cell renders it with the model's derived constants, built
here, baked in), loaded through dqgen.run.loader and launched through dqgen.run.device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels.gru_cell import CELL_BLOCK as BLOCK
from ..kernels.gru_cell import GruCellConfig
from .params import GATES, SIGMOID_OUT, SUMMED_PAIRS, TANH_OUT, QuantGRUParams

# C identifiers of the scalar rescales in the template, keyed by the names Derived.scalar uses.
SCALAR_CNAMES = {
    "wx_z->pre_z": "wxz",
    "rh_z->pre_z": "rhz",
    "wx_r->pre_r": "wxr",
    "rh_r->pre_r": "rhr",
    "r*rh_g->rrh": "rrh",
    "wx_g->pre_g": "wxg",
    "rrh->pre_g": "rrhg",
    "z*h->old": "old",
    "(1-z)*g->new": "new",
    "old->h": "oldh",
    "new->h": "newh",
}


def channel_table(p: QuantGRUParams) -> np.ndarray:
    """int32 [3H, 8]: per output channel (wx_m, wx_k, bias_x, 0, rh_m, rh_k, bias_h, 0), read as two int4."""
    d = p.derived()
    cols = [d.wx_mult, d.wx_shift, d.bias_x, 0 * d.bias_x, d.rh_mult, d.rh_shift, d.bias_h, 0 * d.bias_h]
    table = np.stack(cols, axis=1)
    if table.min() < -(2**31) or table.max() >= 2**31:
        raise ValueError("quantized GRU: a per-channel multiplier or folded bias does not fit in int32")
    return table.astype(np.int32)


#: |acc| of an int8 GEMM over K terms: codes in [-128, 127] against weights in [-127, 127] (symmetric_per_channel)
ACC_PER_TERM = 128 * 127
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Rounding:
    """One rounding of the cell: the largest |p| its int64 product (or sum of two) reaches and the largest |value|
    it and its zero point give before the clamp (an int in the template)."""

    name: str
    max_product: int
    shift: int
    max_value: int
    max_int_operand: int = 0  # the largest int32 product formed before the wide multiply (rrh, old, new)

    def violations(self) -> list[str]:
        out = []
        half = 2 ** (self.shift - 1) if self.shift else 0
        if self.max_product + half > INT64_MAX:
            out.append(f"|p| + 2^(k-1) = {self.max_product + half} > 2^63 - 1")
        if self.max_value > INT32_MAX:
            out.append(f"|value| {self.max_value} > 2^31 - 1")
        if self.max_int_operand > INT32_MAX:
            out.append(f"|int32 product| {self.max_int_operand} > 2^31 - 1")
        return out


def cell_roundings(p: QuantGRUParams) -> list[Rounding]:
    """Every rounding of templates/gru_cell_math.cuh.j2 with the bounds of its operands, from their types and clamps
    alone: the accumulators of the int8 GEMMs (|acc| <= 128 * 127 * K, K = input or hidden size) plus their folded
    biases, intermediates clamped to ``rrh.bits`` bits (|q - Z| <= 2^bits - 1), int8 codes (|q - Z| <= 255)."""
    d = p.derived()
    span = 2**p.rrh.bits - 1
    out: list[Rounding] = []
    for label, k_terms, bias, chans, zps in (
        ("Wx", p.input_size, d.bias_x, d.wx_channels, [p.wx[g].zero_point for g in GATES]),
        ("Rh", p.hidden_size, d.bias_h, d.rh_channels, [p.rh[g].zero_point for g in GATES]),
    ):
        for c, r in enumerate(chans):
            v = ACC_PER_TERM * k_terms + abs(int(bias[c]))  # |acc + bias|: an int32 sum in the template
            prod = v * r.multiplier
            out.append(
                Rounding(
                    f"{label}[{c}]",
                    prod,
                    r.shift,
                    prod // 2**r.shift + 1 + abs(zps[c // p.hidden_size]),
                    max_int_operand=v,
                )
            )

    def scalar(name: str, operand: int, zero: int, partner: tuple[str, int] | None = None) -> None:
        r = d.scalar[name]
        prod = operand * r.multiplier
        if partner is not None:
            prod += partner[1] * d.scalar[partner[0]].multiplier
        out.append(Rounding(name, prod, r.shift, prod // 2**r.shift + 1 + abs(zero), max_int_operand=operand))

    scalar("wx_z->pre_z", span, p.pre["z"].zero_point, ("rh_z->pre_z", span))
    scalar("wx_r->pre_r", span, p.pre["r"].zero_point, ("rh_r->pre_r", span))
    scalar("r*rh_g->rrh", 255 * span, p.rrh.zero_point)
    scalar("wx_g->pre_g", span, p.pre["g"].zero_point, ("rrh->pre_g", span))
    scalar("z*h->old", 255 * 255, p.old.zero_point)
    scalar("(1-z)*g->new", 255 * 255, p.new.zero_point)
    scalar("old->h", span, p.h.zero_point, ("new->h", span))
    return out


def check_cell_ranges(p: QuantGRUParams) -> None:
    """A ValueError naming the first rounding whose int64 product or int32 value could overflow for this model
    (the template's widths hold for every GEMM accumulator only where none does)."""
    for r in cell_roundings(p):
        bad = r.violations()
        if bad:
            raise ValueError(
                f"quantized GRU: the cell's rounding {r.name} could overflow ({'; '.join(bad)}): input_size"
                f" {p.input_size}, hidden_size {p.hidden_size}, {p.rrh.bits}-bit intermediates are beyond what the"
                " kernels' integer widths take"
            )


def cell_context(p: QuantGRUParams) -> dict[str, Any]:
    """What templates/gru_cell_math.cuh.j2 (the one rendering of the integer cell) needs: the model's constants."""
    d = p.derived()
    ib = p.rrh.bits
    check_cell_ranges(p)
    for a, b in SUMMED_PAIRS:  # the template rounds each pair's sum once, at one shift
        if d.scalar[a].shift != d.scalar[b].shift:
            raise ValueError(f"quantized GRU: {a} and {b} must share one shift (params.SUMMED_PAIRS)")
    scalars = []
    for key, cname in SCALAR_CNAMES.items():
        r = d.scalar[key]
        why = (
            f"{key}: real {r.real:.9g} ~ {r.multiplier} / 2^{r.shift}"
            f" (|error| {r.abs_error:.3g} <= {r.abs_error_bound:.3g})"
        )
        scalars.append({"cname": cname, "m": r.multiplier, "k": r.shift, "why": why})
    fn = {"z": "sigmoid", "r": "sigmoid", "g": "tanh"}
    out = {"z": SIGMOID_OUT, "r": SIGMOID_OUT, "g": TANH_OUT}
    luts = [
        {
            "name": g,
            "why": (
                f"{g} table: entry i = clamp(rint({fn[g]}({p.pre[g].scale:.9g} * (i - 128 - ({p.pre[g].zero_point})))"
                f" / {out[g][0]:.9g}) + {out[g][1]})"
            ),
            "codes": ", ".join(str(int(v)) for v in d.lut[g]),
        }
        for g in GATES
    ]
    return dict(
        summary=(
            f"input {p.input_size}, hidden {p.hidden_size}, {p.multiplier_bits}-bit multipliers, {ib}-bit intermediates"
        ),
        hidden=p.hidden_size,
        ibits=ib,
        ilo=-(2 ** (ib - 1)),
        ihi=2 ** (ib - 1) - 1,
        luts=luts,
        scalars=scalars,
        zp_wx=", ".join(str(p.wx[g].zero_point) for g in GATES),
        zp_rh=", ".join(str(p.rh[g].zero_point) for g in GATES),
        zwx=[p.wx[g].zero_point for g in GATES],
        zrh=[p.rh[g].zero_point for g in GATES],
        zpre=[p.pre[g].zero_point for g in GATES],
        zsig=SIGMOID_OUT[1],
        ztanh=TANH_OUT[1],
        zrrh=p.rrh.zero_point,
        zold=p.old.zero_point,
        znew=p.new.zero_point,
        zh=p.h.zero_point,
        one_z=d.one_z,
    )


def cell_config(p: QuantGRUParams) -> GruCellConfig:
    return GruCellConfig(cell_context(p))


def render(p: QuantGRUParams) -> str:
    return cell_config(p).source()


def compile_cell(p: QuantGRUParams, arch: str = "sm_90", want: Any = "cubin") -> Any:
    """NVRTC result (PTX or cubin) of the cell for ``arch``, for the tests that read its PTX without a GPU; a
    launch loads through dqgen.run.loader."""
    from ..run.loader import compile_config

    return compile_config(cell_config(p), arch, want)


class CellKernel:
    """The compiled cell on a device; call with device arrays (torch/cupy/DLPack) of the documented dtypes."""

    def __init__(self, p: QuantGRUParams, device: int = 0) -> None:
        from ..run import device as dev
        from ..run.loader import load

        self.params = p
        self.hidden = p.hidden_size
        self._kernel = load(cell_config(p), device)
        self._dev = dev

    def __call__(self, wx_acc: Any, rh_acc: Any, h_old: Any, h_new: Any, chan: Any, stream: Any = 0) -> None:
        dev = self._dev
        wx, rh = dev.as_device_array(wx_acc, "wx_acc"), dev.as_device_array(rh_acc, "rh_acc")
        ho, hn, ch = (dev.as_device_array(a, nm) for a, nm in ((h_old, "h_old"), (h_new, "h_new"), (chan, "chan")))
        rows = wx.shape[0]
        for name, a, dtype, shape in (
            ("wx_acc", wx, np.int32, (rows, 3 * self.hidden)),
            ("rh_acc", rh, np.int32, (rows, 3 * self.hidden)),
            ("h_old", ho, np.int8, (rows, self.hidden)),
            ("h_new", hn, np.int8, (rows, self.hidden)),
            ("chan", ch, np.int32, (3 * self.hidden, 8)),
        ):
            if a.dtype != dtype or tuple(a.shape) != shape or a.strides_bytes[-1] != a.itemsize:
                raise ValueError(
                    f"{name}: expected {np.dtype(dtype)}{list(shape)} with unit inner stride,"
                    f" got {a.dtype}{list(a.shape)}"
                )
        if not (ho.is_c_contiguous and hn.is_c_contiguous and ch.is_c_contiguous):
            raise ValueError("h_old, h_new, chan: expected contiguous arrays")
        grid = ((rows * self.hidden + BLOCK - 1) // BLOCK,)
        args = [
            wx,
            np.int32(wx.strides_bytes[0] // 4),
            rh,
            np.int32(rh.strides_bytes[0] // 4),
            ho,
            hn,
            ch,
            np.int32(rows),
        ]
        self._kernel(grid, (BLOCK,), args, stream=stream)
