"""Launch the Hopper W8A8 GEMM (its configurations and choice: dqgen.kernels.w8a8_gemm90) on raw device pointers:
both operands through tensor maps (TMA), on the Hopper GEMMs' schedule (dqgen.run.gemm90.Plan90: whole tiles, then
stream-K pieces; plan_for chooses). The same call interface as the sm_80 kernel's (dqgen.w8a8.gemm.GemmKernel), so the
torch op picks either by the GPU."""

from __future__ import annotations

import functools
from typing import Any, Final

import numpy as np

from ..kernels.w8a8_gemm90 import BK90, W8A8Gemm90Config
from ..run import device as dev
from ..run.gemm90 import Plan90, stream_k_ctas
from ..run.loader import load

#: The entry point's parameters in order with their widths (tests/test_w8a8_gemm90.py holds this equal to the
#: rendered signature).
PARAMS: tuple[tuple[str, Any], ...] = (
    ("pmap", dev.TensorMapArg),
    ("qmap", dev.TensorMapArg),
    *((name, np.uint64) for name in ("s_tok", "s_ch", "bias", "y", "ws", "counters")),
    *((name, np.int32) for name in ("R", "C", "N", "k_tiles", "x_tiles")),
    ("units", np.int64),
    ("whole", np.int64),
    ("split_ctas", np.int32),
)


def plan_for(tiles: int, k_tiles: int, resident: int, persistent: bool = False) -> Plan90:
    """The schedule of a launch. Tiles that fill the resident CTAs run whole, one a CTA, or (``persistent``) on the
    resident CTAs each taking tiles ``resident`` apart; either way the CTAs running together work on neighbouring
    tiles, sharing x's and the weight's through L2 (on the H100 stream-K over the resident CTAs, each a contiguous
    range of tiles, streamed every weight tile at once and ran 1.4-2.3x slower from M = 1024). Where at most
    MAX_WAVES_SPLIT_TAIL whole waves leave a last wave at most half full, the whole waves run persistent and each tile
    of that tail splits into s >= 2 equal pieces of at least MIN_K_TILES_PER_PIECE K tiles (tail x s <= resident
    CTAs): a partial wave otherwise leaves SMs idle for a whole tile's time. The pieces are equal and tile-major, so
    the CTAs on tiles that share an operand read the same K at the same time (one range over all resident CTAs starts
    its pieces at unrelated K: on the H100 that lost L2 reuse and ran up to 1.8x slower; docs/experiments/issue24.md).
    Fewer tiles than resident CTAs: equal pieces of each for the resident CTAs (stream-K: dqgen.run.gemm90)."""
    if tiles >= resident:
        waves, tail = divmod(tiles, resident)
        pieces = min(resident // tail, k_tiles // MIN_K_TILES_PER_PIECE) if tail else 0
        if pieces >= 2 and waves <= MAX_WAVES_SPLIT_TAIL:
            return Plan90(tiles, resident, k_tiles, waves * resident, tail * pieces)
        return Plan90.of(tiles, resident if persistent and tiles > resident else tiles, k_tiles)
    pieces = max(1, min(resident // tiles, k_tiles // MIN_K_TILES_PER_PIECE))
    return Plan90.of(tiles, stream_k_ctas(tiles, k_tiles, resident, pieces), k_tiles)


def ctas_for(tiles: int, k_tiles: int, resident: int, persistent: bool = False) -> int:
    """The CTAs of plan_for's schedule."""
    return plan_for(tiles, k_tiles, resident, persistent).ctas


#: Most whole waves before a split tail (plan_for): the split saves at most a tile's time of (waves + 1), and the
#: persistent CTAs the whole waves then run on cost up to 4% against one tile a CTA (H100, docs/experiments/issue24.md:
#: e4m3 at 8192 x 28672, M = 1024, 9 waves and 12 tiles: 489 µs one tile a CTA, 501-508 split; 1-2 waves gained
#: 6-24%).
MAX_WAVES_SPLIT_TAIL: Final = 2

#: Fewest K tiles (128 k each) a stream-K piece gets: below it the pieces' pipeline fill and fix-up cost more than the
#: SMs they add (H100, docs/experiments/issue24.md: 4096 x 6144 at M = 1 ran 18.8 µs in 48 whole tiles and 20.9 in
#: 240 pieces of 6.4 K tiles, while 14336 x 4096 ran 36.9 in pieces of 14 against 42.8 whole).
MIN_K_TILES_PER_PIECE: Final = 12


def operand_map(ptr: int, rows: int, k: int, ld: int, box_rows: int) -> dev.TensorMapArg:
    """The tensor map of an operand [rows, k] of 1-byte elements, rows ``ld`` bytes apart: a box is 128 bytes of K
    (the 128-byte swizzle) of ``box_rows`` rows; rows past ``rows`` and bytes past ``k`` read as zeros."""
    return dev.encode_tensor_map_2d(ptr, 1, k, max(rows, 1), ld, (BK90, box_rows))


def check_operands(k: int, x_ptr: int, x_ld: int, w_ptr: int, w_ld: int) -> None:
    """A one-line ValueError where TMA cannot address an operand: K a positive multiple of 16, pointers and row
    strides multiples of 16 bytes (cuTensorMapEncodeTiled's rules; the caller pads)."""
    if k <= 0 or k % 16:
        raise ValueError(f"k: expected a positive multiple of 16 (the caller pads K with zeros), got {k}")
    for name, value in (("x_ptr", x_ptr), ("w_ptr", w_ptr), ("x_ld", x_ld), ("w_ld", w_ld)):
        if value % 16:
            raise ValueError(f"{name}: expected a multiple of 16 (a tensor map's address and row stride), got {value}")


class Gemm90Kernel:
    """One configuration loaded on a device. Pointers are raw device addresses (ints)."""

    def __init__(self, cfg: W8A8Gemm90Config, device: int = 0) -> None:
        self.cfg = cfg
        self.device = device
        self._kernel = load(cfg, device)
        per_sm = max(1, self._kernel.max_active_blocks(cfg.threads, cfg.shared_bytes))
        self.resident = per_sm * dev.sm_count(device)

    def _grid(self, m: int, n: int) -> tuple[int, int]:
        """(x's tiles, the weight's tiles) of an m x n output."""
        if self.cfg.swap:
            return -(-m // self.cfg.bn), -(-n // self.cfg.bm)
        return -(-m // self.cfg.bm), -(-n // self.cfg.bn)

    def plan(self, m: int, n: int, k: int) -> Plan90:
        x_tiles, w_tiles = self._grid(m, n)
        tiles, k_tiles = x_tiles * w_tiles, -(-k // BK90)
        return plan_for(tiles, k_tiles, self.resident)

    def workspace_elems(self, plan: Plan90) -> int:
        """4-byte elements of the stream-K partials: two slots a splitting CTA (its first and last segment); 0 where
        every tile runs whole (one a CTA, or persistent)."""
        return 2 * plan.split_ctas * self.cfg.accs * self.cfg.consumer_threads if plan.split else 0

    def counters_needed(self, plan: Plan90) -> int:
        return plan.tiles if plan.split else 0

    def launch_args(
        self,
        m: int,
        n: int,
        k: int,
        x_ptr: int,
        x_ld: int,
        w_ptr: int,
        w_ld: int,
        x_scale_ptr: int,
        w_scale_ptr: int,
        bias_ptr: int,
        y_ptr: int,
        ws_ptr: int,
        counters_ptr: int,
        plan: Plan90,
    ) -> list[Any]:
        """The kernel's arguments (PARAMS' order and widths), both operands' tensor maps made here, after the checks
        of check_operands and of the plan (a one-line ValueError before anything launches)."""
        check_operands(k, x_ptr, x_ld, w_ptr, w_ld)
        tiles, ctas, k_tiles, whole, split_ctas = plan
        x_tiles, w_tiles = self._grid(m, n)
        if tiles != x_tiles * w_tiles or k_tiles != -(-k // BK90):
            raise ValueError(f"plan: expected ({x_tiles * w_tiles} tiles, CTAs, {-(-k // BK90)} K tiles), got {plan}")
        plan.check()
        if plan.split and not (ws_ptr and counters_ptr):
            raise ValueError(f"ws_ptr, counters_ptr: a stream-K plan of {ctas} CTAs needs both buffers, got null")
        cfg = self.cfg
        x_box, w_box = (cfg.bn, cfg.bm) if cfg.swap else (cfg.bm, cfg.bn)
        xmap = operand_map(x_ptr, m, k, x_ld, x_box)
        wmap = operand_map(w_ptr, n, k, w_ld, w_box)
        values = {
            "pmap": wmap if cfg.swap else xmap,
            "qmap": xmap if cfg.swap else wmap,
            "s_tok": x_scale_ptr,
            "s_ch": w_scale_ptr,
            "bias": bias_ptr,
            "y": y_ptr,
            "ws": ws_ptr,
            "counters": counters_ptr,
            "R": n if cfg.swap else m,
            "C": m if cfg.swap else n,
            "N": n,
            "k_tiles": k_tiles,
            "x_tiles": x_tiles,
            "units": tiles * k_tiles,
            "whole": whole,
            "split_ctas": split_ctas,
        }
        return [values[name] if typ is dev.TensorMapArg else typ(values[name]) for name, typ in PARAMS]

    def bind(self, plan: Plan90, args: list[Any]) -> dev.BoundLaunch:
        """The launch of ``plan`` with ``args`` (from launch_args) packed once: calling it costs one cuLaunchKernel."""
        return self._kernel.bind((plan.ctas,), (self.cfg.threads,), args, shared_mem=self.cfg.shared_bytes)

    def __call__(self, *call: Any, stream: int) -> None:
        """launch_args' arguments, then the stream: one launch."""
        plan: Plan90 = call[-1]
        self.bind(plan, self.launch_args(*call))(stream)


@functools.cache
def loaded90(cfg: W8A8Gemm90Config, device: int) -> Gemm90Kernel:
    """The configuration compiled and loaded once per device, for the process (as dqgen.w8a8.gemm.loaded: a CUDA
    graph that captured a launch keeps the function)."""
    return Gemm90Kernel(cfg, device)
