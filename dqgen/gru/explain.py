"""`dqgen explain` of a saved quantized GRU: every derived constant with its formula, its fixed-point value and
the error of that value against the real factor it replaces; for a multi-layer or bidirectional GRU, that for
every layer/direction (each is its own calibrated cell) after a summary of the stack."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .params import GATES, SIGMOID_OUT, SUMMED_PAIRS, TANH_OUT, QuantGRUParams
from .requant import Rescale
from .stack import QuantGRUStack

# What each scalar rescale stands for, in the names of docs/gru.md.
FORMULAS = {
    "wx_z->pre_z": "S_Wx_z / S_pre_z",
    "rh_z->pre_z": "S_Rh_z / S_pre_z",
    "wx_r->pre_r": "S_Wx_r / S_pre_r",
    "rh_r->pre_r": "S_Rh_r / S_pre_r",
    "r*rh_g->rrh": "S_r_out * S_Rh_g / S_rRh",
    "wx_g->pre_g": "S_Wx_g / S_pre_g",
    "rrh->pre_g": "S_rRh / S_pre_g",
    "z*h->old": "S_z_out * S_h / S_old",
    "(1-z)*g->new": "S_z_out * S_g_out / S_new   (1 - z shares z's scale)",
    "old->h": "S_old / S_h",
    "new->h": "S_new / S_h",
}


def _input_bounds(p: QuantGRUParams) -> dict[str, int]:
    """Largest |input| each scalar rescale can see: its operands' code spans (q - Z) multiplied."""
    span_i = 2**p.rrh.bits - 1
    return {
        "wx_z->pre_z": span_i,
        "rh_z->pre_z": span_i,
        "wx_r->pre_r": span_i,
        "rh_r->pre_r": span_i,
        "r*rh_g->rrh": 255 * span_i,
        "wx_g->pre_g": span_i,
        "rrh->pre_g": span_i,
        "z*h->old": 255 * 255,
        "(1-z)*g->new": 255 * 127,
        "old->h": span_i,
        "new->h": span_i,
    }


def _line(name: str, formula: str, r: Rescale, max_in: int, partner: str | None) -> str:
    """One scalar rescale; ``partner``: the other term of its summed pair, whose line carries the pair's one final
    rounding (this line then states the multiplier error alone)."""
    rel = r.abs_error / r.real
    mult_error = max_in * r.abs_error  # the multiplier's error at the largest input
    how = (
        f"output error <= {0.5 + mult_error:.6f} LSB for |input| <= {max_in}"
        if partner is None
        else f"multiplier error <= {mult_error:.6f} LSB for |input| <= {max_in} (its pair's one rounding: {partner})"
    )
    return (
        f"  {name:14s} = {formula}\n"
        f"      real {r.real:.10g} ~ {r.multiplier} / 2^{r.shift} = {r.approx:.10g};"
        f" |error| {r.abs_error:.3g} (bound 2^-{r.shift + 1} = {r.abs_error_bound:.3g}, relative {rel:.2g}); {how}"
    )


def explain_text(p: QuantGRUParams) -> str:
    d = p.derived()
    bits = p.multiplier_bits
    out = [
        f"quantized GRU (haste structure, gates z, r, g): input {p.input_size}, hidden {p.hidden_size}",
        f"rescale scheme: y = round_half_even(v * M / 2^k), M < 2^{bits} ({bits}-bit multiplier; M >= 2^{bits - 1}"
        f" except for the smaller term of a pair below), one rounding on the int64 product; |M / 2^k - real| <="
        " 2^-(k+1)",
        "the two terms of each pre-activation and of h (pairs: "
        + ", ".join(f"{a} + {b}" for a, b in SUMMED_PAIRS)
        + ") share one k, the larger factor's: y = round_half_even((a * Ma + b * Mb) / 2^k), one rounding of the"
        " exact sum (the smaller factor's M has fewer bits)",
        "",
        "tensors (real = S * (q - Z)):",
    ]

    def q(name: str, qp: object) -> str:
        return f"  {name:10s} S = {qp.scale:.6g}  Z = {qp.zero_point:6d}  {qp.bits} bits"  # type: ignore[attr-defined]

    out.append(q("x", p.x))
    out.append(q("h", p.h))
    for g in GATES:
        out += [q(f"Wx_{g}", p.wx[g]), q(f"Rh_{g}", p.rh[g]), q(f"pre_{g}", p.pre[g])]
    out += [q("rRh", p.rrh), q("old", p.old), q("new", p.new)]
    out.append(f"  z_out, r_out S = 1/255 Z = {SIGMOID_OUT[1]} (fixed: 0 and 1 exact codes)")
    out.append(f"  g_out      S = 1/127 Z = {TANH_OUT[1]} (fixed, symmetric)")
    out += ["", "scalar rescales:"]
    bounds = _input_bounds(p)
    seconds = {b: a for a, b in SUMMED_PAIRS}  # the second term of a pair: its rounding is stated on the first
    for key, r in d.scalar.items():
        out.append(_line(key, FORMULAS[key], r, bounds[key], seconds.get(key)))
    out += ["", "per-channel rescales of the int32 GEMM accumulators (3H channels each):"]
    acc_bound = 2**31 - 1
    for label, formula, chans in (
        ("Wx", "S_W[c] * S_x / S_Wx_gate", d.wx_channels),
        ("Rh", "S_R[c] * S_h / S_Rh_gate", d.rh_channels),
    ):
        worst = max(chans, key=lambda r: r.abs_error / r.real)
        out.append(
            f"  {label}[c] = {formula}: max relative error {worst.abs_error / worst.real:.3g} (channel"
            f" {chans.index(worst)}: {worst.real:.10g} ~ {worst.multiplier} / 2^{worst.shift}); output error <="
            f" {0.5 + max(r.abs_error * acc_bound for r in chans):.4g} LSB even for |acc| = 2^31"
        )
        for c in (0, p.hidden_size, 2 * p.hidden_size):
            r = chans[c]
            out.append(f"      c={c:5d}: real {r.real:.10g} ~ {r.multiplier} / 2^{r.shift}, |error| {r.abs_error:.3g}")
    out += [
        "",
        "folded biases (exact integers, added to the accumulators before the rescale):",
        f"  bias_x[c] = q_bx[c] - Z_x * sum_k W[c,k]  (Z_x = {p.x.zero_point}): range"
        f" [{int(d.bias_x.min())}, {int(d.bias_x.max())}]",
        f"  bias_h[c] = q_br[c] - Z_h * sum_k R[c,k]  (Z_h = {p.h.zero_point}): range"
        f" [{int(d.bias_h.min())}, {int(d.bias_h.max())}]",
        f"  q_bx at S_W[c]*S_x, q_br at S_R[c]*S_h: bias rounding <= 0.5 accumulator LSB"
        f" (max |bx error| {float(np.max(0.5 * p.w_scale * p.x.scale)):.3g})",
        "",
        f"one_z = round(1 / S_z_out) = {d.one_z}: exact (S_z_out = 1/255),"
        f" so 1 - z = {d.one_z} - (q_z - Z_z) has no error",
        "",
        "activation tables (256 int8 entries, index q_pre + 128):",
    ]
    funcs = {"z": ("sigmoid", SIGMOID_OUT), "r": ("sigmoid", SIGMOID_OUT), "g": ("tanh", TANH_OUT)}
    for g in GATES:
        fname, (s_out, z_out) = funcs[g]
        codes = np.arange(-128, 128)
        real_in = p.pre[g].scale * (codes - p.pre[g].zero_point)
        exact = 1 / (1 + np.exp(-real_in)) if fname == "sigmoid" else np.tanh(real_in)
        table = d.lut[g]
        err = np.abs(s_out * (table.astype(np.float64) - z_out) - exact) / s_out
        out.append(
            f"  {g}: {fname}(S_pre_{g} * (i - 128 - Z_pre_{g})) / S_out + Z_out, rounded half to even and clamped;"
            f" pre range [{real_in[0]:.4f}, {real_in[-1]:.4f}]; max table error {err.max():.3f} output LSB"
        )
    return "\n".join(out)


def explain_stack_text(stack: QuantGRUStack) -> str:
    """The stack's shape and how its cells connect, then every cell's constants under a 'layer l, direction'
    heading (a single cell prints as explain_text alone)."""
    if len(stack.cells) == 1:
        return explain_text(stack.cells[0])
    d = stack.directions
    how = "each cell has its own scales; between layers the codes are dequantized at the cell's S_h"
    if d > 1:
        how += ", the two directions concatenated (forward first),"
    how += " and requantized at the next layer's S_x"
    if d > 1:
        how += "; the reverse direction runs its cell over the time-reversed sequence"
    out = [
        f"quantized nn.GRU: {stack.num_layers} layers, {'bidirectional' if stack.bidirectional else 'unidirectional'},"
        f" batch_first={stack.batch_first}, input {stack.input_size}, hidden {stack.hidden_size};"
        f" {len(stack.cells)} integer cells (h_n index = layer * {d} + direction)",
        how,
    ]
    for i, p in enumerate(stack.cells):
        out.append(
            f"  cell {i} ({stack.label(i)}): input {p.input_size}, S_x = {p.x.scale:.6g} Z_x = {p.x.zero_point},"
            f" S_h = {p.h.scale:.6g} Z_h = {p.h.zero_point}"
        )
    for i, p in enumerate(stack.cells):
        out += ["", f"=== cell {i}: {stack.label(i)} ===", explain_text(p)]
    return "\n".join(out)


def explain_file(path: str | Path) -> str:
    """`dqgen explain FILE.npz`: a QuantGRU file, single-cell or stack (ValueError naming the file otherwise)."""
    return explain_stack_text(QuantGRUStack.load(path))
