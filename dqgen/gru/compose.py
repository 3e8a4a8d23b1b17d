"""nn.GRU's call from single-direction integer cells: the layer/direction loop, the time reversal of the reverse
direction, the concatenation that feeds the next layer, batch_first, unbatched input and PackedSequence.

The composition is torch code that never looks inside a cell: ``run_cell(i, x_q, h0_q)`` maps cell i's int8
inputs x_q [T, N, C] and h0_q [N, H] to its int8 outputs [T, N, H]. QuantGRU passes its CUDA kernels; the CPU
tests pass the numba reference (``reference_runner``), so everything here is checked without a GPU.

Between cells the codes go through float: cell i's outputs are dequantized at its S_h, the directions are
concatenated, and layer l + 1 quantizes them at its own S_x (each cell has its own calibrated scales, so the two
directions' codes are not on one grid). Quantization is ``round(v * (1 / S)) + Z``: multiplying by the reciprocal
is what torch's CUDA division by a scalar does anyway, so written out it gives the same codes on CPU and GPU.

Variable lengths: each row's reverse direction reads its own valid prefix reversed (x[len - 1 - t] at step t),
so padding never reaches a valid output; the forward direction runs the padded steps after a row's end, whose
outputs are dropped. h_n of row n is its state after its own last valid step, as in nn.GRU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from . import reference
from .params import QParam
from .stack import QuantGRUStack

CellRun = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]


def quantize_codes(v: torch.Tensor, q: QParam) -> torch.Tensor:
    return torch.clamp(torch.round(v.float() * (1.0 / q.scale)) + q.zero_point, -128, 127).to(torch.int8)


def dequantize_codes(codes: torch.Tensor, q: QParam) -> torch.Tensor:
    return (codes.float() - q.zero_point) * q.scale


@dataclass
class PackedIndex:
    """Where each row of a PackedSequence's data sits in the padded [T, B] layout (B in the caller's order)."""

    time: torch.Tensor  # [total] step of each packed row
    row: torch.Tensor  # [total] batch row (original order) of each packed row
    lengths: torch.Tensor  # [B] valid steps per row, original order
    steps: int

    @classmethod
    def of(cls, packed: PackedSequence) -> PackedIndex:
        device = packed.data.device
        sizes = packed.batch_sizes.to(torch.int64).cpu()  # batch_sizes always live on the CPU
        steps, batch = len(sizes), int(sizes[0])
        time = torch.repeat_interleave(torch.arange(steps), sizes)
        starts = torch.cumsum(sizes, 0) - sizes
        rank = torch.arange(int(sizes.sum())) - starts[time]  # place in the length-sorted order
        order = torch.arange(batch) if packed.sorted_indices is None else packed.sorted_indices.cpu()
        lengths = torch.empty(batch, dtype=torch.int64)
        lengths[order] = (sizes[None, :] > torch.arange(batch)[:, None]).sum(1)
        return cls(time.to(device), order[rank].to(device), lengths.to(device), steps)

    def unpack(self, data: torch.Tensor) -> torch.Tensor:
        out = data.new_zeros((self.steps, len(self.lengths), data.shape[1]))
        out[self.time, self.row] = data
        return out

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        return padded[self.time, self.row]


def reverse_rows(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """x [T, B, F] with row b's steps 0 .. len_b - 1 reversed (the steps after len_b stay in place); its own
    inverse. lengths None: every row is T long."""
    if lengths is None:
        return x.flip(0)
    t = torch.arange(x.shape[0], device=x.device)[:, None]
    idx = torch.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)
    return x.gather(0, idx[:, :, None].expand(-1, -1, x.shape[2]))


def last_valid(out: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """out [T, B, H] -> [B, H]: each row at its last valid step."""
    if lengths is None:
        return out[-1]
    return out[lengths - 1, torch.arange(out.shape[1], device=out.device)]


def run_stack(
    stack: QuantGRUStack,
    input: torch.Tensor | PackedSequence,
    hx: torch.Tensor | None,
    run_cell: CellRun,
    batch_first: bool,
) -> tuple[torch.Tensor | PackedSequence, torch.Tensor]:
    """nn.GRU.forward(input, hx) of the quantized stack: output [T, B, D*H] ([B, T, D*H] with batch_first, a
    PackedSequence for a PackedSequence, [T, D*H] unbatched) and h_n [D*num_layers, B, H] ([D*num_layers, H])."""
    d, hsz, n_cells = stack.directions, stack.hidden_size, len(stack.cells)
    packed = input if isinstance(input, PackedSequence) else None
    index = PackedIndex.of(packed) if packed is not None else None
    if index is not None:
        x, lengths, unbatched = index.unpack(packed.data), index.lengths, False  # type: ignore[union-attr]
        shape_text = f"PackedSequence data {list(packed.data.shape)}"  # type: ignore[union-attr]
    else:
        assert isinstance(input, torch.Tensor)
        shape_text = str(list(input.shape))
        unbatched = input.dim() == 2
        x = input[:, None] if unbatched else (input.transpose(0, 1) if batch_first else input)
        lengths = None
    if x.dim() != 3 or x.shape[2] != stack.input_size:
        layout = "[B, T, C]" if batch_first else "[T, B, C]"
        raise ValueError(
            f"input: expected {layout}, [T, C] or a PackedSequence with C = {stack.input_size}, got {shape_text}"
        )
    rows = x.shape[1]
    if hx is not None:
        want = (n_cells, hsz) if unbatched else (n_cells, rows, hsz)
        if tuple(hx.shape) != want:
            raise ValueError(f"hx: expected {list(want)} ([D*num_layers, batch, hidden]), got {list(hx.shape)}")
        h0_all = hx[:, None] if unbatched else hx
    else:
        h0_all = torch.zeros((n_cells, rows, hsz), device=x.device)
    h_n = []
    layer_in = x
    for layer in range(stack.num_layers):
        outs = []
        for direction in range(d):
            i = layer * d + direction
            p = stack.cells[i]
            seq = layer_in if direction == 0 else reverse_rows(layer_in, lengths)
            h_q = run_cell(i, quantize_codes(seq, p.x), quantize_codes(h0_all[i], p.h))
            out = dequantize_codes(h_q, p.h)
            h_n.append(last_valid(out, lengths))
            outs.append(out if direction == 0 else reverse_rows(out, lengths))
        layer_in = torch.cat(outs, dim=2) if d > 1 else outs[0]
    dtype = packed.data.dtype if packed is not None else cast(torch.Tensor, input).dtype
    h_last = torch.stack(h_n).to(dtype)
    if packed is not None:
        assert index is not None
        data = index.pack(layer_in).to(dtype)
        return PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices), h_last
    output = layer_in.to(dtype)
    if unbatched:
        return output[:, 0], h_last[:, 0]
    return (output.transpose(0, 1) if batch_first else output), h_last


def reference_runner(stack: QuantGRUStack) -> CellRun:
    """The numba reference (reference.run, bit-exact with the kernels) as a cell runner, on any device's tensors."""

    def run(i: int, x_q: torch.Tensor, h0_q: torch.Tensor) -> torch.Tensor:
        h = reference.run(stack.cells[i], x_q.cpu().numpy(), h0_q.cpu().numpy())
        return torch.from_numpy(np.ascontiguousarray(h)).to(x_q.device)

    return run
