"""Bit-exact CPU reference of the integer GRU: plain int64 arithmetic of the documented formulas (docs/gru.md),
in numba, independent of the CUDA template. Every rescale is round_half_even(v * M / 2**k); the two terms of each
pre-activation and of h share one k and their sum is rounded once, round_half_even((a * Ma + b * Mb) / 2**k)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from .params import GATES, SIGMOID_OUT, SUMMED_PAIRS, TANH_OUT, QuantGRUParams

# Order of the scalar (multiplier, shift) pairs in the packed array the numba code reads.
SCALAR_ORDER = (
    "wx_z->pre_z",
    "rh_z->pre_z",
    "wx_r->pre_r",
    "rh_r->pre_r",
    "r*rh_g->rrh",
    "wx_g->pre_g",
    "rrh->pre_g",
    "z*h->old",
    "(1-z)*g->new",
    "old->h",
    "new->h",
)
# Zero points: wx z r g, rh z r g, pre z r g, rrh, old, new, h, z_out, g_out
# and the intermediate clamp range [lo, hi].


@njit(cache=True, inline="always")
def _round_shift(p: Any, k: Any) -> Any:
    """round_half_even(p / 2**k) of an int64 p."""
    if k == 0:
        return p
    q = p >> k
    rem = p - (q << k)
    half = np.int64(1) << (k - 1)
    if rem > half or (rem == half and (q & 1) == 1):
        q += 1
    return q


@njit(cache=True, inline="always")
def _rq(v: Any, m: Any, k: Any) -> Any:
    return _round_shift(v * m, k)


@njit(cache=True, inline="always")
def _rq_sum(a: Any, ma: Any, b: Any, mb: Any, k: Any) -> Any:
    """round_half_even((a * ma + b * mb) / 2**k): the two terms of a sum at one shift, rounded once."""
    return _round_shift(a * ma + b * mb, k)


@njit(cache=True, inline="always")
def _clamp(v: Any, lo: Any, hi: Any) -> Any:
    return lo if v < lo else (hi if v > hi else v)


@njit(cache=True)
def _cell(
    wx_acc: np.ndarray,  # int64 [N, 3H]: W x without bias
    rh_acc: np.ndarray,  # int64 [N, 3H]: R h without bias
    h_old: np.ndarray,  # int64 [N, H]
    wx_m: np.ndarray,
    wx_k: np.ndarray,
    rh_m: np.ndarray,
    rh_k: np.ndarray,
    bias_x: np.ndarray,
    bias_h: np.ndarray,
    sc: np.ndarray,  # int64 [11, 2]
    zp: np.ndarray,  # int64 [17]
    lut: np.ndarray,  # int64 [3, 256]
    one_z: Any,
    h_new: np.ndarray,  # int64 [N, H], written
) -> None:
    n_rows, hsz = h_old.shape
    ilo, ihi = zp[15], zp[16]
    z_wx_z, z_wx_r, z_wx_g = zp[0], zp[1], zp[2]
    z_rh_z, z_rh_r, z_rh_g = zp[3], zp[4], zp[5]
    z_pre_z, z_pre_r, z_pre_g = zp[6], zp[7], zp[8]
    z_rrh, z_old, z_new, z_h, z_sig, z_tanh = zp[9], zp[10], zp[11], zp[12], zp[13], zp[14]
    for n in range(n_rows):
        for j in range(hsz):
            cz, cr, cg = j, hsz + j, 2 * hsz + j
            # Wx and Rh per gate, biases and zero-point sums folded in, rescaled to each gate's intermediate.
            wxz = _clamp(_rq(wx_acc[n, cz] + bias_x[cz], wx_m[cz], wx_k[cz]) + z_wx_z, ilo, ihi)
            wxr = _clamp(_rq(wx_acc[n, cr] + bias_x[cr], wx_m[cr], wx_k[cr]) + z_wx_r, ilo, ihi)
            wxg = _clamp(_rq(wx_acc[n, cg] + bias_x[cg], wx_m[cg], wx_k[cg]) + z_wx_g, ilo, ihi)
            rhz = _clamp(_rq(rh_acc[n, cz] + bias_h[cz], rh_m[cz], rh_k[cz]) + z_rh_z, ilo, ihi)
            rhr = _clamp(_rq(rh_acc[n, cr] + bias_h[cr], rh_m[cr], rh_k[cr]) + z_rh_r, ilo, ihi)
            rhg = _clamp(_rq(rh_acc[n, cg] + bias_h[cg], rh_m[cg], rh_k[cg]) + z_rh_g, ilo, ihi)
            # z gate (the two terms of a pre-activation share one shift: the sum is rounded once)
            pz = _rq_sum(wxz - z_wx_z, sc[0, 0], rhz - z_rh_z, sc[1, 0], sc[0, 1]) + z_pre_z
            qz = lut[0, _clamp(pz, -128, 127) + 128]
            # r gate
            pr = _rq_sum(wxr - z_wx_r, sc[2, 0], rhr - z_rh_r, sc[3, 0], sc[2, 1]) + z_pre_r
            qr = lut[1, _clamp(pr, -128, 127) + 128]
            # g gate: r * (Rh_g + br_g), then + Wx_g + bx_g
            rrh = _clamp(_rq((qr - z_sig) * (rhg - z_rh_g), sc[4, 0], sc[4, 1]) + z_rrh, ilo, ihi)
            pg = _rq_sum(wxg - z_wx_g, sc[5, 0], rrh - z_rrh, sc[6, 0], sc[5, 1]) + z_pre_g
            qg = lut[2, _clamp(pg, -128, 127) + 128]
            # h = z h_old + (1 - z) g: 1 - z is exact on the sigmoid output grid (one_z - (q_z - Z))
            old = _clamp(_rq((qz - z_sig) * (h_old[n, j] - z_h), sc[7, 0], sc[7, 1]) + z_old, ilo, ihi)
            omu = one_z - (qz - z_sig)
            new = _clamp(_rq(omu * (qg - z_tanh), sc[8, 0], sc[8, 1]) + z_new, ilo, ihi)
            hv = _rq_sum(old - z_old, sc[9, 0], new - z_new, sc[10, 0], sc[9, 1]) + z_h
            h_new[n, j] = _clamp(hv, -128, 127)


@njit(cache=True)
def _matmul_nt(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out[n, c] = sum_k a[n, k] * b[c, k] in int64."""
    for n in range(a.shape[0]):
        for c in range(b.shape[0]):
            s = np.int64(0)
            for k in range(a.shape[1]):
                s += a[n, k] * b[c, k]
            out[n, c] = s


class CellConstants:
    """The derived constants in the flat int64 layout of _cell."""

    def __init__(self, p: QuantGRUParams) -> None:
        d = p.derived()
        self.wx_m, self.wx_k = d.wx_mult, d.wx_shift
        self.rh_m, self.rh_k = d.rh_mult, d.rh_shift
        self.bias_x, self.bias_h = d.bias_x, d.bias_h
        self.sc = np.array([[d.scalar[k].multiplier, d.scalar[k].shift] for k in SCALAR_ORDER], dtype=np.int64)
        for a, b in SUMMED_PAIRS:  # _cell rounds each pair's sum once, at the first one's shift
            if d.scalar[a].shift != d.scalar[b].shift:
                raise ValueError(f"reference: {a} and {b} must share one shift (params.SUMMED_PAIRS)")
        ib = p.rrh.bits
        zps = [p.wx[g].zero_point for g in GATES] + [p.rh[g].zero_point for g in GATES]
        zps += [p.pre[g].zero_point for g in GATES]
        zps += [p.rrh.zero_point, p.old.zero_point, p.new.zero_point, p.h.zero_point, SIGMOID_OUT[1], TANH_OUT[1]]
        zps += [-(2 ** (ib - 1)), 2 ** (ib - 1) - 1]
        self.zp = np.array(zps, dtype=np.int64)
        self.lut = np.stack([d.lut[g].astype(np.int64) for g in GATES])
        self.one_z = np.int64(d.one_z)
        for q in (p.wx[g] for g in GATES):
            if q.bits != ib:
                raise ValueError("reference: all intermediates must share one bit width")


def cell(
    p: QuantGRUParams, wx_acc: np.ndarray, rh_acc: np.ndarray, h_old: np.ndarray, k: CellConstants | None = None
) -> np.ndarray:
    """One step from the raw GEMM accumulators (no bias, no zero-point terms): int8 h_new [N, H]."""
    k = k or CellConstants(p)
    out = np.empty(h_old.shape, dtype=np.int64)
    _cell(
        wx_acc.astype(np.int64),
        rh_acc.astype(np.int64),
        h_old.astype(np.int64),
        k.wx_m,
        k.wx_k,
        k.rh_m,
        k.rh_k,
        k.bias_x,
        k.bias_h,
        k.sc,
        k.zp,
        k.lut,
        k.one_z,
        out,
    )
    return out.astype(np.int8)


def run(p: QuantGRUParams, x_q: np.ndarray, h0_q: np.ndarray) -> np.ndarray:
    """x_q int8 [T, N, C], h0_q int8 [N, H] -> int8 h [T, N, H]."""
    k = CellConstants(p)
    w = p.w_q.astype(np.int64)
    r = p.r_q.astype(np.int64)
    steps, n_rows, _ = x_q.shape
    out = np.empty((steps, n_rows, p.hidden_size), dtype=np.int8)
    h = h0_q.astype(np.int64)
    wx = np.empty((n_rows, 3 * p.hidden_size), dtype=np.int64)
    rh = np.empty_like(wx)
    for t in range(steps):
        _matmul_nt(x_q[t].astype(np.int64), w, wx)
        _matmul_nt(h, r, rh)
        h = cell(p, wx, rh, h, k).astype(np.int64)
        out[t] = h
    return out
