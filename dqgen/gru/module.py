"""QuantGRU: the integer GRU as a torch.nn.Module with torch.nn.GRU's call signature (any num_layers,
bidirectional, batch_first, PackedSequence; one QuantGRULayer per layer/direction, composed by compose.run_stack),
and quantize(gru_module, calibration_inputs) to build it by post-training calibration.

W.x for all steps runs through torch._int_mm (cuBLASLt; needs more than 16 rows and K, N multiples of 8, so the
batch rows are padded to 32 and the K axes to a multiple of 8 with zero codes, which add nothing to the sums). The
recurrence runs by default as one kernel for all steps: on sm_90 the cluster-resident kernel (dqgen.gru.cluster: R in
the shared memory of a thread-block cluster, h through distributed shared memory, R.h on int8 tensor cores) where R
fits a cluster, else the cooperative persistent kernel (dqgen.gru.persist) where its R slices fit in shared memory;
otherwise per step as R.h through torch._int_mm and the generated cell kernel.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from .calibrate import Observer
from .calibrate_stack import CalibrationInput, calibrate_stack
from .cluster import ClusterKernel, ClusterPlan
from .compose import reference_runner, run_stack
from .kernel import CellKernel, channel_table
from .params import QuantGRUParams
from .persist import PersistentKernel, PersistPlan
from .requant import MultiplierBits
from .stack import QuantGRUStack


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


class QuantGRULayer(nn.Module):
    """One layer, one direction: the integer cell over a whole sequence (``forward_int``, int8 in and out).

    ``persistent``: None runs the persistent kernel where it fits and the per-step loop elsewhere; True insists
    on the persistent kernel, False always runs per step. ``cluster``: None runs the cluster kernel (sm_90) where
    it fits, ahead of the cooperative persistent kernel, while ``persistent`` is None (the default: a choice made
    there is kept); True insists on it; False never runs it. ``last_path`` says which one the last call ran
    ("cluster", "persistent" or "per-step")."""

    # the buffers' types (nn.Module's __getattr__ would type them Tensor | Module)
    w_t: torch.Tensor
    r_t: torch.Tensor
    chan: torch.Tensor

    def __init__(self, params: QuantGRUParams, persistent: bool | None = None, cluster: bool | None = None) -> None:
        super().__init__()
        if params.hidden_size % 8:
            raise ValueError(f"hidden_size: expected a multiple of 8 (torch._int_mm's N), got {params.hidden_size}")
        self.params = params
        self.input_size, self.hidden_size = params.input_size, params.hidden_size
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
        self.cluster = cluster
        self._cluster: dict[int, ClusterKernel] = {}
        self._cluster_plans: dict[tuple[int, int], ClusterPlan | None] = {}

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

    def _cluster_plan(self, device: torch.device, rows: int) -> tuple[ClusterKernel, ClusterPlan] | None:
        if self.cluster is False or (self.cluster is None and self.persistent is not None):
            return None
        ordinal = device.index if device.index is not None else torch.cuda.current_device()
        if ordinal not in self._cluster:
            self._cluster[ordinal] = ClusterKernel(self.params, ordinal)
        kern = self._cluster[ordinal]
        if (ordinal, rows) not in self._cluster_plans:
            self._cluster_plans[ordinal, rows] = kern.plan(rows)
        pl = self._cluster_plans[ordinal, rows]
        if pl is None:
            if self.cluster:
                raise ValueError(
                    f"cluster=True: hidden {self.params.hidden_size} at batch {rows} does not run on the cluster kernel"
                    " (it needs sm_90, hidden a multiple of 128 and R's slice over 16 CTAs within one CTA's shared"
                    " memory)"
                )
            return None
        return kern, pl

    def forward(self, x_q: torch.Tensor, h0_q: torch.Tensor) -> torch.Tensor:
        return self.forward_int(x_q, h0_q)

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
        clustered = self._cluster_plan(x_q.device, rows)
        if clustered is not None:
            ckern, cpl = clustered
            hbuf = torch.empty((steps + 1, rows, p.hidden_size), dtype=torch.int8, device=x_q.device)
            hbuf[0] = h0_q
            ckern(cpl, wx_all, self.r_t.t(), hbuf, self.chan, stream=stream)
            self.last_path = "cluster"
            return hbuf[1:]
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


class QuantGRU(nn.Module):
    """The quantized nn.GRU: ``forward(input, hx=None)`` as nn.GRU's (any num_layers, bidirectional, batch_first,
    unbatched [T, C] input, PackedSequence), composed of one QuantGRULayer per layer/direction (``cells``, in
    h_n's order). ``params`` is a QuantGRUStack, or one QuantGRUParams for a single-layer unidirectional GRU.
    ``batch_first`` None takes the stack's (the layout of the nn.GRU it was quantized from)."""

    def __init__(
        self,
        params: QuantGRUParams | QuantGRUStack,
        batch_first: bool | None = None,
        persistent: bool | None = None,
        cluster: bool | None = None,
    ) -> None:
        super().__init__()
        stack = params if isinstance(params, QuantGRUStack) else QuantGRUStack.single(params, bool(batch_first))
        self.stack = stack
        self.batch_first = stack.batch_first if batch_first is None else batch_first
        self.num_layers, self.bidirectional = stack.num_layers, stack.bidirectional
        self.input_size, self.hidden_size = stack.input_size, stack.hidden_size
        self.cells = nn.ModuleList(QuantGRULayer(p, persistent, cluster) for p in stack.cells)

    def _layers(self) -> list[QuantGRULayer]:
        return [c for c in self.cells if isinstance(c, QuantGRULayer)]

    @property
    def params(self) -> QuantGRUParams:
        """The one cell's parameters (single-layer unidirectional); a stack has one per cell: ``stack.cells``."""
        if len(self.stack.cells) != 1:
            raise ValueError(f"params: this QuantGRU has {len(self.stack.cells)} cells; read stack.cells[i]")
        return self.stack.cells[0]

    @property
    def persistent(self) -> bool | None:
        return self._layers()[0].persistent

    @persistent.setter
    def persistent(self, value: bool | None) -> None:
        for c in self._layers():
            c.persistent = value

    @property
    def cluster(self) -> bool | None:
        return self._layers()[0].cluster

    @cluster.setter
    def cluster(self, value: bool | None) -> None:
        for c in self._layers():
            c.cluster = value

    @property
    def last_path(self) -> str:
        """The path the last call ran ("cluster" / "persistent" / "per-step"); per cell, comma-separated, where they
        differ."""
        paths = [c.last_path for c in self._layers()]
        return paths[0] if len(set(paths)) == 1 else ", ".join(paths)

    @classmethod
    def load(
        cls,
        path: str | Path,
        batch_first: bool | None = None,
        persistent: bool | None = None,
        cluster: bool | None = None,
    ) -> QuantGRU:
        return cls(QuantGRUStack.load(path), batch_first, persistent, cluster)

    def save(self, path: str | Path) -> None:
        """One .npz of every cell (QuantGRUStack.save), with this module's batch_first."""
        self.stack.model_copy(update={"batch_first": self.batch_first}).save(path)

    def forward_int(self, x_q: torch.Tensor, h0_q: torch.Tensor) -> torch.Tensor:
        """int8 x [T, N, C] and h0 [N, H] -> int8 h [T, N, H] of the single cell (see QuantGRULayer.forward_int)."""
        if len(self.stack.cells) != 1:
            raise ValueError(
                f"forward_int: runs one layer/direction; this QuantGRU has {len(self.stack.cells)}: call"
                " cells[i].forward_int"
            )
        return self._layers()[0].forward_int(x_q, h0_q)

    def forward(
        self, input: torch.Tensor | PackedSequence, hx: torch.Tensor | None = None
    ) -> tuple[torch.Tensor | PackedSequence, torch.Tensor]:
        # before any arithmetic: the kernels run on the GPU only
        data = input.data if isinstance(input, PackedSequence) else input
        _on_gpu("input", data)
        if hx is not None:
            _on_gpu("hx", hx, data.device)
        cells = self._layers()
        return run_stack(self.stack, input, hx, lambda i, x_q, h0_q: cells[i].forward_int(x_q, h0_q), self.batch_first)

    def forward_reference(
        self, input: torch.Tensor | PackedSequence, hx: torch.Tensor | None = None
    ) -> tuple[torch.Tensor | PackedSequence, torch.Tensor]:
        """forward() through the numba reference cell (reference.run) instead of the kernels, on any device: the
        same codes, slowly (for checking; the kernels are bit-exact with it)."""
        return run_stack(self.stack, input, hx, reference_runner(self.stack), self.batch_first)


def quantize(
    gru_module: nn.GRU,
    calibration_inputs: Iterable[CalibrationInput],
    *,
    observer: Observer = "minmax",
    multiplier_bits: MultiplierBits = 31,
) -> QuantGRU:
    """Calibrate on sample inputs and return a QuantGRU of the same shape (layers, directions, batch_first).

    Each item is what the module takes: x in its layout ([T, C] unbatched), a PackedSequence, or a tuple
    (x, h0) with h0 [D*num_layers, N, H]. The float GRU runs once over each item on the module's device (float64);
    every layer/direction gets its own QuantGRUParams, layer l + 1 calibrated on the float outputs of layer l
    (dqgen/gru/calibrate_stack.py says why).
    """
    return QuantGRU(calibrate_stack(gru_module, calibration_inputs, observer=observer, multiplier_bits=multiplier_bits))
