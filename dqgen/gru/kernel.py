"""The GRU cell kernel of a model (dqgen.kernels.gru_cell renders it with the model's derived constants, built
here, baked in), loaded through dqgen.run.loader and launched through dqgen.run.device."""

from __future__ import annotations

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


def cell_context(p: QuantGRUParams) -> dict[str, Any]:
    """What templates/gru_cell_math.cuh.j2 (the one rendering of the integer cell) needs: the model's constants."""
    d = p.derived()
    ib = p.rrh.bits
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
