"""QuantGRU: the integer GRU as a torch.nn.Module with torch.nn.GRU's call signature (single layer,
unidirectional), and quantize(gru_module, calibration_inputs) to build it by post-training calibration.

W.x for all steps runs through torch._int_mm (cuBLASLt; needs more than 16 rows and K, N multiples of 8, so the
batch rows are padded to 32 and the K axes to a multiple of 8 with zero codes, which add nothing to the sums). The
recurrence runs by default as one persistent kernel for all steps (dqgen.gru.persist) where its R slices fit in
shared memory; otherwise per step as R.h through torch._int_mm and the generated cell kernel.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .calibrate import Observer, calibrate
from .floatref import torch_to_haste
from .kernel import CellKernel, channel_table
from .params import QuantGRUParams
from .persist import PersistentKernel, PersistPlan
from .requant import MultiplierBits


def _round8(v: int) -> int:
    return (v + 7) // 8 * 8


def _on_gpu(name: str, t: object, device: torch.device | None = None) -> None:
    """A ValueError naming ``name`` unless ``t`` is a tensor on a CUDA device (``device``, where given): the GRU's
    kernels are generated CUDA, and a CPU tensor would otherwise fail deep inside torch.cuda."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor on a CUDA device, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ValueError(
            f"{name}: expected a tensor on a CUDA device (QuantGRU runs generated GPU kernels), got one on {t.device}; "
            "move the input and the module with .cuda()"
        )
    if device is not None and t.device != device:
        raise ValueError(f"{name}: expected the input's device {device}, got {t.device}")


class QuantGRU(nn.Module):
    """``persistent``: None runs the persistent kernel where it fits and the per-step loop elsewhere; True insists
    on the persistent kernel, False always runs per step. ``last_path`` says which one the last call ran."""

    # the buffers' types (nn.Module's __getattr__ would type them Tensor | Module)
    w_t: torch.Tensor
    r_t: torch.Tensor
    chan: torch.Tensor

    def __init__(self, params: QuantGRUParams, batch_first: bool = False, persistent: bool | None = None) -> None:
        super().__init__()
        if params.hidden_size % 8:
            raise ValueError(f"hidden_size: expected a multiple of 8 (torch._int_mm's N), got {params.hidden_size}")
        self.params = params
        self.input_size, self.hidden_size = params.input_size, params.hidden_size
        self.batch_first = batch_first
        c_pad, h_pad = _round8(params.input_size), _round8(params.hidden_size)
        w = np.zeros((3 * params.hidden_size, c_pad), np.int8)
        w[:, : params.input_size] = params.w_q
        # _int_mm(A [M, K], B [K, N]); B as the transpose of a row-major [N, K] is the column-major layout it wants.
        self.register_buffer("w_t", torch.from_numpy(w).t(), persistent=False)
        self.register_buffer("r_t", torch.from_numpy(np.ascontiguousarray(params.r_q)).t(), persistent=False)
        self.register_buffer("chan", torch.from_numpy(channel_table(params)), persistent=False)
        self._c_pad, self._h_pad = c_pad, h_pad
        self._cells: dict[int, CellKernel] = {}
        self.persistent = persistent
        self.last_path = ""
        self._persist: dict[int, PersistentKernel] = {}
        self._plans: dict[tuple[int, int], PersistPlan | None] = {}

    @classmethod
    def load(cls, path: str | Path, batch_first: bool = False) -> QuantGRU:
        return cls(QuantGRUParams.load(path), batch_first)

    def save(self, path: str | Path) -> None:
        self.params.save(path)

    def _cell(self, device: torch.device) -> CellKernel:
        ordinal = device.index if device.index is not None else torch.cuda.current_device()
        if ordinal not in self._cells:
            self._cells[ordinal] = CellKernel(self.params, ordinal)
        return self._cells[ordinal]

    def _persist_plan(self, device: torch.device, rows: int) -> tuple[PersistentKernel, PersistPlan] | None:
        if self.persistent is False:
            return None
        ordinal = device.index if device.index is not None else torch.cuda.current_device()
        if ordinal not in self._persist:
            self._persist[ordinal] = PersistentKernel(self.params, ordinal)
        kern = self._persist[ordinal]
        if (ordinal, rows) not in self._plans:
            self._plans[ordinal, rows] = kern.plan(rows)
        pl = self._plans[ordinal, rows]
        if pl is None:
            if self.persistent:
                raise ValueError(
                    f"persistent=True: hidden {self.params.hidden_size} at batch {rows} does not fit the persistent"
                    " kernel (R slice + 32 staged h rows over the shared memory of one CTA per SM)"
                )
            return None
        return kern, pl

    def forward_int(self, x_q: torch.Tensor, h0_q: torch.Tensor) -> torch.Tensor:
        """int8 x [T, N, C] and h0 [N, H] on the GPU -> int8 h [T, N, H] (bit-exact with reference.run)."""
        _on_gpu("x_q", x_q)
        _on_gpu("h0_q", h0_q, x_q.device)
        steps, rows, c = x_q.shape
        p = self.params
        if x_q.dtype != torch.int8 or c != p.input_size or tuple(h0_q.shape) != (rows, p.hidden_size):
            raise ValueError(f"x_q/h0_q: expected int8 [T, N, {p.input_size}] and [N, {p.hidden_size}]")
        if self.w_t.device != x_q.device:  # a loaded or freshly quantized module follows its first input
            self.to(x_q.device)
        cell = self._cell(x_q.device)
        m_pad = max(32, _round8(rows))
        xp = torch.zeros((steps, m_pad, self._c_pad), dtype=torch.int8, device=x_q.device)
        xp[:, :rows, :c] = x_q
        wx_all = torch._int_mm(xp.view(steps * m_pad, self._c_pad), self.w_t).view(steps, m_pad, -1)
        stream = torch.cuda.current_stream(x_q.device)
        persist = self._persist_plan(x_q.device, rows)
        if persist is not None:
            kern, pl = persist
            hbuf = torch.empty((steps + 1, rows, p.hidden_size), dtype=torch.int8, device=x_q.device)
            hbuf[0] = h0_q
            barrier = torch.zeros(2, dtype=torch.int32, device=x_q.device)
            kern(pl, wx_all, self.r_t.t(), hbuf, self.chan, barrier, stream=stream)
            self.last_path = "persistent"
            return hbuf[1:]
        self.last_path = "per-step"
        out = torch.empty((steps + 1, m_pad, p.hidden_size), dtype=torch.int8, device=x_q.device)
        out[0].zero_()
        out[0, :rows] = h0_q
        for t in range(steps):
            rh = torch._int_mm(out[t], self.r_t)
            cell(wx_all[t], rh, out[t], out[t + 1], self.chan, stream=stream)
        return out[1:, :rows]

    def forward(self, input: torch.Tensor, hx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.params
        _on_gpu("input", input)  # before any arithmetic: the kernels below run on the GPU only
        if hx is not None:
            _on_gpu("hx", hx, input.device)
        x = input.transpose(0, 1) if self.batch_first else input
        if x.dim() != 3 or x.shape[2] != p.input_size:
            raise ValueError(f"input: expected [T, N, {p.input_size}] (or batch_first), got {list(input.shape)}")
        rows = x.shape[1]
        if hx is None:
            h0 = torch.zeros((rows, p.hidden_size), device=x.device)
        else:
            if tuple(hx.shape) != (1, rows, p.hidden_size):
                raise ValueError(f"hx: expected [1, {rows}, {p.hidden_size}], got {list(hx.shape)}")
            h0 = hx[0]
        x_q = torch.clamp(torch.round(x.float() / p.x.scale) + p.x.zero_point, -128, 127).to(torch.int8)
        h0_q = torch.clamp(torch.round(h0.float() / p.h.scale) + p.h.zero_point, -128, 127).to(torch.int8)
        h_q = self.forward_int(x_q, h0_q)
        out = ((h_q.float() - p.h.zero_point) * p.h.scale).to(input.dtype)
        h_n = out[-1:].clone()
        return (out.transpose(0, 1) if self.batch_first else out), h_n


def gru_weights(gru: nn.GRU) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(W, R, bx, br) of a single-layer unidirectional nn.GRU in haste order, float64 numpy."""
    if gru.num_layers != 1 or gru.bidirectional or not gru.bias or int(getattr(gru, "proj_size", 0)):
        raise ValueError("gru_module: only single-layer, unidirectional nn.GRU with biases is supported")
    h = gru.hidden_size

    def get(name: str) -> np.ndarray:
        return torch_to_haste(getattr(gru, name).detach().double().cpu().numpy(), h)

    return get("weight_ih_l0"), get("weight_hh_l0"), get("bias_ih_l0"), get("bias_hh_l0")


def quantize(
    gru_module: nn.GRU,
    calibration_inputs: Iterable[torch.Tensor | tuple[torch.Tensor, torch.Tensor]],
    *,
    observer: Observer = "minmax",
    multiplier_bits: MultiplierBits = 31,
) -> QuantGRU:
    """Calibrate on sample inputs (x, or (x, h0) with h0 [1, N, H]) in the module's layout and return a QuantGRU."""
    w, r, bx, br = gru_weights(gru_module)
    batches: list[tuple[np.ndarray, np.ndarray]] = []
    for item in calibration_inputs:
        x, h0 = item if isinstance(item, tuple) else (item, None)
        xs: Any = x.detach().double().cpu().numpy()
        if gru_module.batch_first:
            xs = xs.transpose(1, 0, 2)
        h0n = np.zeros((xs.shape[1], gru_module.hidden_size)) if h0 is None else h0.detach().double().cpu().numpy()[0]
        batches.append((xs, h0n))
    params = calibrate(w, r, bx, br, batches, observer=observer, multiplier_bits=multiplier_bits)
    return QuantGRU(params, gru_module.batch_first)
