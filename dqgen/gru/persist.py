"""The persistent int8 GRU: one cooperative kernel for all T steps (templates/gru_persist.cu.j2), R resident in
shared memory, a grid-wide barrier between steps. W.x for all steps stays one int8 GEMM before it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels.gru_cell import MAX_UNITS_PER_THREAD, GruPersistConfig, padded_hidden
from ..kernels.gru_cell import PERSIST_BLOCK as BLOCK
from .kernel import cell_context
from .params import QuantGRUParams

WARPS = BLOCK // 32


def _round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


@dataclass(frozen=True)
class PersistPlan:
    """How the sequence is spread over the GPU: ``grid`` CTAs of ``units`` hidden units each."""

    units: int  # hidden units (of all three gates) per CTA
    grid: int
    jt: int  # hidden units per thread
    upad: int  # units rounded up to a multiple of jt
    nbc: int  # batch rows staged in shared memory at a time
    shared_bytes: int


def plan(hidden: int, rows: int, sm_count: int, shared_optin: int) -> PersistPlan | None:
    """Spread ``hidden`` units over at most one CTA per SM (fewest units per CTA, so the R slices are smallest);
    None when the R slice and 32 staged h rows do not fit in one CTA's shared memory (the per-step path then runs)."""
    if rows < 1 or hidden < 1 or hidden % 8:
        return None
    units = -(-hidden // sm_count)
    grid = -(-hidden // units)
    row_groups = -(-min(rows, 64) // 32)
    # enough (unit group, 32 batch rows) items for every warp, but no more units per thread than needed
    jt = max(1, min(MAX_UNITS_PER_THREAD, units * row_groups // WARPS))
    upad = _round_up(units, jt)
    hp = padded_hidden(hidden)
    r_bytes = 3 * upad * hp
    h_row = hp + 16
    fit_rows = (shared_optin - r_bytes) // h_row // 32 * 32
    if fit_rows < 32:
        return None
    nbc = min(_round_up(rows, 32), fit_rows)
    return PersistPlan(units, grid, jt, upad, nbc, r_bytes + nbc * h_row)


def persist_config(p: QuantGRUParams, jt: int) -> GruPersistConfig:
    return GruPersistConfig(cell_context(p), jt)


def render(p: QuantGRUParams, jt: int) -> str:
    return persist_config(p, jt).source()


def compile_persist(p: QuantGRUParams, jt: int, arch: str = "sm_90", want: Any = "cubin") -> Any:
    """NVRTC result of the persistent kernel for ``arch``, for the tests that read its PTX without a GPU."""
    from ..run.loader import compile_config

    return compile_config(persist_config(p, jt), arch, want)


class PersistentKernel:
    """The persistent kernel of one model on one device (one compiled variant per units-per-thread)."""

    def __init__(self, p: QuantGRUParams, device: int = 0) -> None:
        from ..run import device as dev

        self.params = p
        self.device = device
        self._dev = dev
        self._sms = dev.sm_count(device)
        self._optin = dev.max_shared_optin(device)
        self._kernels: dict[int, Any] = {}

    def plan(self, rows: int) -> PersistPlan | None:
        """The launch for ``rows`` batch rows, or None where it does not fit (shared memory or co-residency)."""
        pl = plan(self.params.hidden_size, rows, self._sms, self._optin)
        if pl is None:
            return None
        kernel = self._kernel(pl.jt)
        if kernel.max_active_blocks(BLOCK, pl.shared_bytes) * self._sms < pl.grid:
            return None
        return pl

    def _kernel(self, jt: int) -> Any:
        if jt not in self._kernels:
            from ..run.loader import load

            # (its shared_bytes is SHARED_OPTIN: the loader opts it in to the device's ceiling once, so a plan for
            # any batch size may launch with the shared bytes it needs)
            self._kernels[jt] = load(persist_config(self.params, jt), self.device)
        return self._kernels[jt]

    def __call__(
        self, pl: PersistPlan, wx_all: Any, r_q: Any, hbuf: Any, chan: Any, barrier: Any, stream: Any = 0
    ) -> None:
        """wx_all int32 [T, >= rows, 3H] (unit inner stride), r_q int8 [3H, H], hbuf int8 [T + 1, rows, H] with
        h_0 in slice 0 (h_t is written into slice t), chan int32 [3H, 8], barrier int32 [2] of zeros."""
        dev = self._dev
        hsz = self.params.hidden_size
        wx, rq_, hb, ch, bar = (
            dev.as_device_array(a, nm)
            for a, nm in ((wx_all, "wx_all"), (r_q, "r_q"), (hbuf, "hbuf"), (chan, "chan"), (barrier, "barrier"))
        )
        steps, rows = hb.shape[0] - 1, hb.shape[1]
        checks = (
            ("wx_all", wx, np.int32, len(wx.shape) == 3 and wx.shape[0] == steps and wx.shape[1] >= rows),
            ("wx_all", wx, np.int32, wx.shape[-1] == 3 * hsz and wx.strides_bytes[-1] == 4),
            ("r_q", rq_, np.int8, tuple(rq_.shape) == (3 * hsz, hsz) and rq_.is_c_contiguous),
            ("hbuf", hb, np.int8, len(hb.shape) == 3 and hb.shape[2] == hsz and hb.is_c_contiguous),
            ("chan", ch, np.int32, tuple(ch.shape) == (3 * hsz, 8) and ch.is_c_contiguous),
            ("barrier", bar, np.int32, tuple(bar.shape) == (2,) and bar.is_c_contiguous),
        )
        for name, a, dtype, ok in checks:
            if a.dtype != dtype or not ok:
                raise ValueError(f"{name}: wrong dtype/shape/layout {a.dtype}{list(a.shape)} (see the docstring)")
        if steps < 1:
            return
        args = [
            wx,
            np.int64(wx.strides_bytes[0] // 4),
            np.int32(wx.strides_bytes[1] // 4),
            rq_,
            hb,
            ch,
            bar,
            np.int32(steps),
            np.int32(rows),
            np.int32(pl.units),
            np.int32(pl.upad),
            np.int32(pl.nbc),
        ]
        self._kernel(pl.jt)((pl.grid,), (BLOCK,), args, stream=stream, shared_mem=pl.shared_bytes, cooperative=True)
