"""Where the quantized GRU stack's error against float nn.GRU comes from (issue 25, accuracy on white noise).

A float64 numpy model of the integer cell ("fake quantization": every tensor the cell quantizes is rounded onto
its grid, value = S * (clamp(round(v / S) + Z) - Z)) with each source of error switchable to float:

    x     the input's int8 grid (layer 0; layer l + 1 reads layer l's codes on the same grid)
    w     W and R int8 per channel, the biases at the accumulator's scale
    wide  the 16-bit intermediates (W·x, R·h, r·(R·h), z·h, (1 - z)·g)
    pre   the int8 pre-activations (the 256-entry tables' index), z r g
    act   the table outputs (z, r on 1/255, g on 1/127)
    h     h's int8 grid (the state fed back and the output)

With nothing switched off it follows the integer reference (``reference.run`` through ``forward_reference``,
bit-exact with the kernels) to the sixth digit of the cosine; the cosine against float nn.GRU with one source
switched to float and with only that source left quantized gives each source's share of 1 - cosine.
``two_roundings`` models the cell before issue 25's fix (each pre-activation and h the sum of two terms rounded
one by one onto the output grid). Needs torch (CPU):

    PYTHONPATH=. python devtools/gru_accuracy_budget.py [--layers 1 2] [--seeds 0 1 2] [--kind noise|sine]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import numpy as np
import torch

from dqgen.gru.calibrate_stack import gru_cells
from dqgen.gru.module import quantize
from dqgen.gru.params import SIGMOID_OUT, TANH_OUT, QParam, QuantGRUParams

SOURCES = ("x", "w", "wide", "pre", "act", "h")


def _fq(v: np.ndarray, q: QParam) -> np.ndarray:
    return q.dequantize(q.quantize(v))


def _fq_fixed(v: np.ndarray, scale: float, zero: int) -> np.ndarray:
    return scale * (np.clip(np.rint(v / scale) + zero, -128, 127) - zero)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def fake_cell_run(
    p: QuantGRUParams,
    cell: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    x: np.ndarray,
    h0: np.ndarray,
    floats: frozenset[str],
    two_roundings: bool = False,
) -> np.ndarray:
    """One direction over x [T, N, C] (float) from h0 [N, H]: float h [T, N, H], the sources in ``floats`` float."""
    w, r, bx, br = cell
    hsz = p.hidden_size

    def q(name: str, v: np.ndarray, grid: QParam) -> np.ndarray:
        return v if name in floats else _fq(v, grid)

    def q2(name: str, a: np.ndarray, b: np.ndarray, grid: QParam) -> np.ndarray:
        """a + b onto ``grid``: one rounding of the sum (the cell's), or each term rounded on its own and the codes
        added (the cell before issue 25's fix) where ``two_roundings``."""
        if name in floats:
            return a + b
        if not two_roundings:
            return _fq(a + b, grid)
        code = np.rint(a / grid.scale) + np.rint(b / grid.scale) + grid.zero_point
        return grid.scale * (np.clip(code, grid.qmin, grid.qmax) - grid.zero_point)

    if "w" not in floats:
        w = p.w_q.astype(np.float64) * p.w_scale[:, None]
        r = p.r_q.astype(np.float64) * p.r_scale[:, None]
        bx = p.bx_q * p.w_scale * p.x.scale
        br = p.br_q * p.r_scale * p.h.scale
    xs = q("x", x, p.x)
    h = q("h", h0, p.h)
    out = np.empty((x.shape[0], *h.shape))
    wx_all = xs @ w.T + bx
    gates = {"z": slice(0, hsz), "r": slice(hsz, 2 * hsz), "g": slice(2 * hsz, 3 * hsz)}
    for t in range(x.shape[0]):
        wx = {k: q("wide", wx_all[t][:, s], p.wx[k]) for k, s in gates.items()}
        rh_all = h @ r.T + br
        rh = {k: q("wide", rh_all[:, s], p.rh[k]) for k, s in gates.items()}
        pre_z = q2("pre", wx["z"], rh["z"], p.pre["z"])
        pre_r = q2("pre", wx["r"], rh["r"], p.pre["r"])
        z, rg = _sigmoid(pre_z), _sigmoid(pre_r)
        if "act" not in floats:
            z, rg = _fq_fixed(z, *SIGMOID_OUT), _fq_fixed(rg, *SIGMOID_OUT)
        rrh = q("wide", rg * rh["g"], p.rrh)
        g = np.tanh(q2("pre", wx["g"], rrh, p.pre["g"]))
        if "act" not in floats:
            g = _fq_fixed(g, *TANH_OUT)
        old = q("wide", z * h, p.old)
        new = q("wide", (1.0 - z) * g, p.new)
        h = q2("h", old, new, p.h)
        out[t] = h
    return out


def run_stack_np(
    gru: torch.nn.GRU, x: np.ndarray, step: Callable[[int, np.ndarray, np.ndarray], np.ndarray]
) -> np.ndarray:
    """The stack's output [T, N, D*H] (no h0, sequence-first) with ``step(cell_index, x, h0)`` per cell."""
    d = 2 if gru.bidirectional else 1
    layer_in = x
    for layer in range(gru.num_layers):
        outs = []
        for direction in range(d):
            i = layer * d + direction
            seq = layer_in if direction == 0 else layer_in[::-1]
            out = step(i, seq, np.zeros((x.shape[1], gru.hidden_size)))
            outs.append(out if direction == 0 else out[::-1])
        layer_in = np.concatenate(outs, axis=2)
    return layer_in


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel(), b.ravel()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def budget(layers: int, bidirectional: bool, hidden: int, seed: int, kind: str, inputs: int = 128) -> None:
    """Calibrate nn.GRU(inputs, hidden) on 3 batches of ``kind`` (T 50, N 16), run a fourth; print the cosines."""
    steps, rows = 50, 16
    torch.manual_seed(seed)
    gru = torch.nn.GRU(inputs, hidden, num_layers=layers, bidirectional=bidirectional).double()
    g = torch.Generator().manual_seed(1000 + seed)

    def sample() -> torch.Tensor:
        if kind == "noise":
            return torch.randn(steps, rows, inputs, generator=g, dtype=torch.float64)
        t = torch.arange(steps, dtype=torch.float64)[:, None, None]
        freq = 0.05 + 0.25 * torch.rand(1, rows, inputs, generator=g, dtype=torch.float64)
        phase = 2 * torch.pi * torch.rand(1, rows, inputs, generator=g, dtype=torch.float64)
        return torch.sin(freq * t + phase) + 0.1 * torch.randn(steps, rows, inputs, generator=g, dtype=torch.float64)

    calib = [sample() for _ in range(3)]
    q = quantize(gru, calib)
    x = sample()
    with torch.no_grad():
        want = gru(x)[0].numpy()
    xn = x.numpy()
    cells = gru_cells(gru)
    got_int = q.forward_reference(x.float())[0].double().numpy()

    def fake(floats: Sequence[str], two_roundings: bool = False) -> float:
        fs = frozenset(floats)
        out = run_stack_np(
            gru, xn, lambda i, s, h0: fake_cell_run(q.stack.cells[i], cells[i], s, h0, fs, two_roundings)
        )
        return cosine(out, want)

    base, old = fake(()), fake((), True)
    print(f"layers {layers} bidirectional {bidirectional} H {hidden} seed {seed} {kind}:")
    print(f"  integer reference {cosine(got_int, want):.6f}   fake-quant model {base:.6f}   (1 - cos {1 - base:.2e})")
    print(f"  the model with two roundings a sum (the cell before the fix): {old:.6f} (1 - cos {1 - old:.2e})")
    for s in SOURCES:
        only_float = fake([s])
        only_quant = fake([o for o in SOURCES if o != s])
        print(
            f"  {s:5s} float: {only_float:.6f} (removes {only_float - base:+.2e} of 1 - cos)"
            f"   only {s} quantized: 1 - cos {1 - only_quant:.2e}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--kind", choices=("noise", "sine"), default="noise")
    ap.add_argument("--layers", type=int, nargs="+", default=[2])
    ap.add_argument("--bidirectional", action="store_true")
    args = ap.parse_args()
    for seed in args.seeds:
        for layers in args.layers:
            budget(layers, args.bidirectional, args.hidden, seed, args.kind)


if __name__ == "__main__":
    main()
