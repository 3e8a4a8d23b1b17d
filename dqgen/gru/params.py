"""The quantized GRU: weights, scales and zero points (a pydantic model saved as .npz) and the integer constants
derived from them at load time (multipliers, shifts, folded biases, activation tables).

Layout follows haste: gate order z, r, g in every [3H] axis; W is [3H, C] and R is [3H, H] (rows = output
channels, as torch.nn.GRU stores them, only reordered from torch's r, z, n).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .requant import MultiplierBits, Rescale, derive, derive_shared

GATES = ("z", "r", "g")
FORMAT = "dqgen-quant-gru-1"
# Sigmoid outputs live in [0, 1]: scale 1/255 with zero point -128 makes both 0 and 1.0 exact codes, so
# 1 - z is the exact integer 255 - (q_z - Z_z) and needs no rescale. tanh outputs in [-1, 1]: symmetric 1/127.
SIGMOID_OUT = (1.0 / 255.0, -128)
TANH_OUT = (1.0 / 127.0, 0)


# The scalar rescales whose terms are added and rounded once (the two terms of each gate's pre-activation and of h):
# each pair shares one shift (requant.derive_shared).
SUMMED_PAIRS = (
    ("wx_z->pre_z", "rh_z->pre_z"),
    ("wx_r->pre_r", "rh_r->pre_r"),
    ("wx_g->pre_g", "rrh->pre_g"),
    ("old->h", "new->h"),
)

ARRAYS = ("w_q", "r_q", "w_scale", "r_scale", "bx_q", "br_q")


class QParam(BaseModel):
    """Affine quantization real = scale * (q - zero_point) on ``bits``-bit signed integers."""

    model_config = ConfigDict(frozen=True)

    scale: float = Field(gt=0.0)
    zero_point: int
    bits: int = Field(ge=2, le=31)

    @property
    def qmin(self) -> int:
        return -(2 ** (self.bits - 1))

    @property
    def qmax(self) -> int:
        return 2 ** (self.bits - 1) - 1

    @model_validator(mode="after")
    def _zero_point_is_a_code(self) -> QParam:
        # the cell's integer widths are proven for |q - Z| <= 2^bits - 1 (dqgen.gru.kernel.cell_roundings)
        if not self.qmin <= self.zero_point <= self.qmax:
            raise ValueError(
                f"zero_point: expected a {self.bits}-bit code in [{self.qmin}, {self.qmax}], got {self.zero_point}"
            )
        return self

    @classmethod
    def from_range(cls, lo: float, hi: float, bits: int) -> QParam:
        """Asymmetric parameters covering [lo, hi] widened to contain 0 (so 0.0 is an exact code, as padding needs)."""
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        if hi - lo < 1e-12:
            hi = lo + 1e-6
        levels = 2**bits - 1
        scale = (hi - lo) / levels
        zp = round(-(2 ** (bits - 1)) - lo / scale)
        zp = min(max(zp, -(2 ** (bits - 1))), 2 ** (bits - 1) - 1)
        return cls(scale=scale, zero_point=zp, bits=bits)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        q = np.rint(np.asarray(x, dtype=np.float64) / self.scale) + self.zero_point
        return np.clip(q, self.qmin, self.qmax).astype(np.int64)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return self.scale * (np.asarray(q, dtype=np.float64) - self.zero_point)


class QuantGRUParams(BaseModel):
    """Everything that defines the integer GRU. Arrays are numpy; save()/load() write one .npz file."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    input_size: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    multiplier_bits: MultiplierBits = 31
    w_q: np.ndarray  # int8 [3H, C], symmetric per output channel
    r_q: np.ndarray  # int8 [3H, H]
    w_scale: np.ndarray  # float64 [3H]
    r_scale: np.ndarray  # float64 [3H]
    bx_q: np.ndarray  # int32 [3H] at scale w_scale * x.scale (the GEMM accumulator's scale)
    br_q: np.ndarray  # int32 [3H] at scale r_scale * h.scale
    x: QParam
    h: QParam
    wx: dict[str, QParam]  # per gate: W x + bx
    rh: dict[str, QParam]  # per gate: R h + br (for g this is the seed's Rh_add_br)
    pre: dict[str, QParam]  # per gate pre-activation, int8 (the table index)
    rrh: QParam  # r * (Rh_g + br_g)
    old: QParam  # z * h_old
    new: QParam  # (1 - z) * g

    @field_validator("wx", "rh", "pre")
    @classmethod
    def _all_gates(cls, v: dict[str, QParam]) -> dict[str, QParam]:
        if set(v) != set(GATES):
            raise ValueError(f"needs exactly the gates {GATES}, got {sorted(v)}")
        return v

    def model_post_init(self, __context: Any) -> None:
        h3, c, h = 3 * self.hidden_size, self.input_size, self.hidden_size
        expected = {
            "w_q": ((h3, c), np.int8),
            "r_q": ((h3, h), np.int8),
            "w_scale": ((h3,), np.float64),
            "r_scale": ((h3,), np.float64),
            "bx_q": ((h3,), np.int32),
            "br_q": ((h3,), np.int32),
        }
        for name, (shape, dtype) in expected.items():
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.shape != shape or arr.dtype != dtype:
                got = f"{arr.dtype}{list(arr.shape)}" if isinstance(arr, np.ndarray) else type(arr).__name__
                raise ValueError(f"{name}: expected {np.dtype(dtype)}{list(shape)}, got {got}")
        for name in ("w_q", "r_q"):  # symmetric per channel; the cell's widths are proven for |code| <= 127
            if (getattr(self, name) == -128).any():
                raise ValueError(f"{name}: expected codes in [-127, 127] (symmetric per channel), found -128")
        for name in ("x", "h"):
            if getattr(self, name).bits != 8:
                raise ValueError(f"{name}: expected 8-bit activations, got {getattr(self, name).bits} bits")
        for g in GATES:
            if self.pre[g].bits != 8:
                raise ValueError(f"pre[{g}]: the activation table needs an 8-bit pre-activation")

    def parts(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able metadata, arrays): what a file stores (a stack file stores one pair per layer/direction)."""
        return self.model_dump(exclude=set(ARRAYS)), {name: getattr(self, name) for name in ARRAYS}

    @classmethod
    def from_parts(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> QuantGRUParams:
        return cls(**meta, **arrays)

    def save(self, path: str | Path) -> None:
        meta, arrays = self.parts()
        meta["format"] = FORMAT
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        contents: dict[str, Any] = {"meta": np.array(json.dumps(meta)), **arrays}
        np.savez(tmp, **contents)
        tmp.replace(path)  # never a partial file under the real name

    @classmethod
    def load(cls, path: str | Path) -> QuantGRUParams:
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as f:
                meta = json.loads(str(f["meta"]))
                arrays = {name: f[name] for name in ARRAYS}
        except (OSError, KeyError, ValueError) as e:
            raise ValueError(f"{path}: not a dqgen quantized GRU file ({e})") from None
        if meta.pop("format", None) != FORMAT:
            raise ValueError(f"{path}: expected format {FORMAT!r}")
        return cls.from_parts(meta, arrays)

    def derived(self) -> Derived:
        return Derived.from_params(self)


class Derived(BaseModel):
    """Integer constants of the cell, each with the real factor it stands for."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    wx_mult: np.ndarray  # int64 [3H]: S_W[c] S_x / S_Wx[gate]
    wx_shift: np.ndarray
    rh_mult: np.ndarray  # int64 [3H]: S_R[c] S_h / S_Rh[gate]
    rh_shift: np.ndarray
    bias_x: np.ndarray  # int64 [3H]: q_bx - Z_x * sum_k W[c, k]
    bias_h: np.ndarray  # int64 [3H]: q_br - Z_h * sum_k R[c, k]
    scalar: dict[str, Rescale]
    one_z: int  # round(1 / S_z_out): the code of 1.0 relative to the zero point
    lut: dict[str, np.ndarray]  # int8 [256] per gate, index q_pre + 128
    wx_channels: list[Rescale]
    rh_channels: list[Rescale]

    @classmethod
    def from_params(cls, p: QuantGRUParams) -> Derived:
        bits = p.multiplier_bits
        hsz = p.hidden_size
        gate_of = [GATES[c // hsz] for c in range(3 * hsz)]
        wx_ch = [derive(float(p.w_scale[c]) * p.x.scale / p.wx[gate_of[c]].scale, bits) for c in range(3 * hsz)]
        rh_ch = [derive(float(p.r_scale[c]) * p.h.scale / p.rh[gate_of[c]].scale, bits) for c in range(3 * hsz)]
        s_z, s_r, s_g = SIGMOID_OUT[0], SIGMOID_OUT[0], TANH_OUT[0]
        reals = {
            "wx_z->pre_z": p.wx["z"].scale / p.pre["z"].scale,
            "rh_z->pre_z": p.rh["z"].scale / p.pre["z"].scale,
            "wx_r->pre_r": p.wx["r"].scale / p.pre["r"].scale,
            "rh_r->pre_r": p.rh["r"].scale / p.pre["r"].scale,
            "r*rh_g->rrh": s_r * p.rh["g"].scale / p.rrh.scale,
            "wx_g->pre_g": p.wx["g"].scale / p.pre["g"].scale,
            "rrh->pre_g": p.rrh.scale / p.pre["g"].scale,
            "z*h->old": s_z * p.h.scale / p.old.scale,
            "(1-z)*g->new": s_z * s_g / p.new.scale,
            "old->h": p.old.scale / p.h.scale,
            "new->h": p.new.scale / p.h.scale,
        }
        scalar = {name: derive(real, bits) for name, real in reals.items()}
        for pair in SUMMED_PAIRS:
            scalar.update(zip(pair, derive_shared([reals[name] for name in pair], bits), strict=True))
        rowsum_w = p.w_q.astype(np.int64).sum(axis=1)
        rowsum_r = p.r_q.astype(np.int64).sum(axis=1)
        return cls(
            wx_mult=np.array([r.multiplier for r in wx_ch], dtype=np.int64),
            wx_shift=np.array([r.shift for r in wx_ch], dtype=np.int64),
            rh_mult=np.array([r.multiplier for r in rh_ch], dtype=np.int64),
            rh_shift=np.array([r.shift for r in rh_ch], dtype=np.int64),
            bias_x=p.bx_q.astype(np.int64) - p.x.zero_point * rowsum_w,
            bias_h=p.br_q.astype(np.int64) - p.h.zero_point * rowsum_r,
            scalar=scalar,
            one_z=round(1.0 / s_z),
            lut={
                "z": activation_table(p.pre["z"], SIGMOID_OUT, _sigmoid),
                "r": activation_table(p.pre["r"], SIGMOID_OUT, _sigmoid),
                "g": activation_table(p.pre["g"], TANH_OUT, np.tanh),
            },
            wx_channels=wx_ch,
            rh_channels=rh_ch,
        )


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def activation_table(pre: QParam, out: tuple[float, int], fn: Any) -> np.ndarray:
    """int8[256]: entry i is the output code of fn at the real value of pre-activation code i - 128."""
    codes = np.arange(-128, 128, dtype=np.float64)
    real = fn(pre.scale * (codes - pre.zero_point))
    q = np.rint(real / out[0]) + out[1]
    return np.clip(q, -128, 127).astype(np.int8)


def saturation_bound(fn: str, out_scale: float) -> float:
    """|v| beyond which the activation's output is within half an output LSB of its limit: a wider
    pre-activation range would spend int8 codes on inputs that all map to the same table entry."""
    if fn == "sigmoid":  # sigmoid(v) = 1 - s/2
        return math.log(2.0 / out_scale - 1.0)
    if fn == "tanh":  # tanh(v) = 1 - s/2
        return math.atanh(1.0 - out_scale / 2.0)
    raise ValueError(f"unknown activation {fn!r}")
