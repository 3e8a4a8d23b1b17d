"""Calibration of a whole nn.GRU (layers x directions) in torch on the module's device.

Each calibration item runs once through the float GRU in float64 (observe.float_direction per layer/direction);
every cell folds its own tensors' ranges into its own RangeTracker, and params_from_ranges turns each into that
cell's QuantGRUParams, exactly as calibrate() does for one cell.

Layer l + 1 is calibrated on the **float** outputs of layer l, not on what the quantized layer l produces. Why:
(1) its input scale needs no observation at all: the directions of a layer share one h range and layer l + 1's
x range is that range (chained_ranges), so S_x, Z_x of layer l + 1 are S_h, Z_h of layer l and the codes pass
from layer to layer without a second rounding; that range holds the float outputs and, by the clamp, every code
the quantized layer l can produce; (2) its intermediates (W·x, R·h, pre-activations, ...) would move by the
quantization error of layers 0..l only (cosine >= 0.9995 per layer), a relative change of their ranges of ~1e-3,
which moves their scales by as much; (3) calibration stays one float forward pass that needs no kernels: it runs
where the module is (CPU or GPU), gives the same parameters on either, and is as fast as issue 25 (4) asks. It is
also what post-training calibration in torch.ao does: observers watch the float model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias, cast

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from .calibrate import Observer, RangeTracker, params_from_ranges
from .compose import PackedIndex, reverse_rows
from .floatref import torch_to_haste
from .observe import Ranges, float_direction
from .requant import MultiplierBits
from .stack import QuantGRUStack

# what quantize() takes per calibration item: x in the module's layout, a PackedSequence, or either with h0
CalibrationInput: TypeAlias = torch.Tensor | PackedSequence | tuple[torch.Tensor | PackedSequence, torch.Tensor]


@dataclass
class CalibBatch:
    x: torch.Tensor  # float64 [T, N, C], rows sorted by length (longest first)
    h0: torch.Tensor  # float64 [D * num_layers, N, H], the same row order
    lengths: torch.Tensor | None  # [N] valid steps per row (None: all T)
    active: list[int] | None  # per step, the leading rows still running (None: all)


def gru_cells(gru: nn.GRU) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(W, R, bx, br) of every layer/direction (h_n's order) in haste order, float64 numpy (zero biases for
    bias=False)."""
    if int(getattr(gru, "proj_size", 0)):
        raise ValueError("gru_module: nn.GRU with proj_size is not supported")
    h = gru.hidden_size
    zeros = np.zeros(3 * h)
    cells = []
    for layer in range(gru.num_layers):
        for direction in range(2 if gru.bidirectional else 1):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")

            def get(name: str, suffix: str = suffix) -> np.ndarray:
                return torch_to_haste(getattr(gru, name + suffix).detach().double().cpu().numpy(), h)

            bx, br = (get("bias_ih"), get("bias_hh")) if gru.bias else (zeros, zeros)
            cells.append((get("weight_ih"), get("weight_hh"), bx, br))
    return cells


def calibration_batch(item: object, gru: nn.GRU, device: torch.device) -> CalibBatch:
    """One calibration item as float64 on ``device``, its rows sorted by length (longest first)."""
    n_cells = gru.num_layers * (2 if gru.bidirectional else 1)
    c, hsz = gru.input_size, gru.hidden_size
    # a PackedSequence is a tuple too: recognise it before (x, h0)
    if isinstance(item, tuple) and not isinstance(item, PackedSequence):
        if len(item) != 2:
            raise ValueError(f"calibration_inputs: expected x or (x, h0), got a tuple of {len(item)}")
        x_in, h0_in = item
    else:
        x_in, h0_in = item, None
    lengths = None
    if isinstance(x_in, PackedSequence):
        index = PackedIndex.of(x_in)
        x, lengths, unbatched = index.unpack(x_in.data).to(device, torch.float64), index.lengths.to(device), False
    elif isinstance(x_in, torch.Tensor):
        unbatched = x_in.dim() == 2
        x = x_in[:, None] if unbatched else (x_in.transpose(0, 1) if gru.batch_first else x_in)
        x = x.to(device, torch.float64)
    else:
        raise ValueError(f"calibration_inputs: expected a tensor or a PackedSequence, got {type(x_in).__name__}")
    if x.dim() != 3 or x.shape[2] != c:
        raise ValueError(f"calibration_inputs: expected x with {c} features, [T, N, {c}] in the module's layout")
    rows = x.shape[1]
    if h0_in is None:
        h0 = torch.zeros((n_cells, rows, hsz), dtype=torch.float64, device=device)
    else:
        want = (n_cells, hsz) if unbatched else (n_cells, rows, hsz)
        if not isinstance(h0_in, torch.Tensor) or tuple(h0_in.shape) != want:
            got = list(h0_in.shape) if isinstance(h0_in, torch.Tensor) else type(h0_in).__name__
            raise ValueError(f"calibration_inputs: h0 expected {list(want)}, got {got}")
        h0 = (h0_in[:, None] if unbatched else h0_in).to(device, torch.float64)
    if lengths is None:
        return CalibBatch(x, h0, None, None)
    order = torch.sort(lengths, descending=True, stable=True).indices
    lengths = lengths[order]
    active = [int(v) for v in (lengths[None, :] > torch.arange(x.shape[0], device=device)[:, None]).sum(1).tolist()]
    return CalibBatch(x[:, order], h0[:, order], lengths, active)


def chained_ranges(cell_ranges: list[Ranges], directions: int) -> list[Ranges]:
    """The cells' ranges with h shared by the directions of a layer (the union of theirs) and x of layer l + 1
    set to that h range of layer l: both then quantize from one (lo, hi), so layer l + 1's S_x, Z_x are layer l's
    S_h, Z_h and its output codes reach layer l + 1 unchanged (dequantized and requantized exactly) instead of
    being rounded a second time onto another grid. The union covers the float outputs layer l + 1 was observed
    on (those are among the h values of layer l) and every code the quantized layer l can produce."""
    out = [dict(r) for r in cell_ranges]
    layers = len(out) // directions
    for layer in range(layers):
        group = out[layer * directions : (layer + 1) * directions]
        h = (min(r["h"][0] for r in group), max(r["h"][1] for r in group))
        for r in group:
            r["h"] = h
        if layer + 1 < layers:
            for r in out[(layer + 1) * directions : (layer + 2) * directions]:
                r["x"] = h
    return out


def calibrate_stack(
    gru: nn.GRU,
    calibration_inputs: Iterable[object],
    *,
    observer: Observer = "minmax",
    intermediate_bits: int = 16,
    multiplier_bits: MultiplierBits = 31,
) -> QuantGRUStack:
    device = cast(torch.Tensor, gru.weight_ih_l0).device  # nn.Module's __getattr__ types it Tensor | Module
    d = 2 if gru.bidirectional else 1
    cells = gru_cells(gru)
    on_device = [tuple(torch.from_numpy(a).to(device) for a in cell) for cell in cells]
    trackers = [RangeTracker(observer) for _ in cells]
    seen = 0
    with torch.no_grad():
        for item in calibration_inputs:
            batch = calibration_batch(item, gru, device)
            layer_in = batch.x
            for layer in range(gru.num_layers):
                outs = []
                for direction in range(d):
                    i = layer * d + direction
                    w, r, bx, br = on_device[i]
                    seq = layer_in if direction == 0 else reverse_rows(layer_in, batch.lengths)
                    out, seen_ranges = float_direction(seq, batch.h0[i], w, r, bx, br, batch.active)
                    for name, (lo, hi) in seen_ranges.items():
                        trackers[i].update_range(name, lo, hi)
                    outs.append(out if direction == 0 else reverse_rows(out, batch.lengths))
                layer_in = torch.cat(outs, dim=2) if d > 1 else outs[0]
            seen += 1
    if seen == 0:
        raise ValueError("calibration_inputs: expected at least one batch")
    cell_ranges = chained_ranges([t.ranges for t in trackers], d)
    params = [
        params_from_ranges(*cell, rng, intermediate_bits=intermediate_bits, multiplier_bits=multiplier_bits)
        for cell, rng in zip(cells, cell_ranges, strict=True)
    ]
    return QuantGRUStack(
        num_layers=gru.num_layers, bidirectional=gru.bidirectional, batch_first=gru.batch_first, cells=params
    )
