"""Launch the W8A8 GEMM (its configurations, rendering and choice: dqgen.kernels.w8a8_gemm) on raw device
pointers: the launch's arguments checked, one configuration loaded on a device (dqgen.run.loader)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ..kernels.w8a8_gemm import W8A8GemmConfig, choose_splits, ktiles

if TYPE_CHECKING:
    from ..run import device as dev


def compile_config(cfg: W8A8GemmConfig, arch: str = "sm_90", want: Any = "cubin") -> Any:
    """NVRTC result (PTX or cubin) of one configuration for ``arch`` (e4m3 needs sm_89 or newer), for the tests
    that read its PTX or SASS without a GPU; a launch loads through dqgen.run.loader."""
    from ..run.device import arch_sm
    from ..run.loader import compile_config as compile_any

    if arch_sm(arch) < cfg.min_sm:
        what = "fp8 (e4m3) mma" if cfg.elem == "e4m3" else cfg.name
        raise ValueError(f"arch: {what} needs sm_{cfg.min_sm} or newer, got {arch}")
    return compile_any(cfg, arch, want)


#: gridDim.y's limit (the splits of a launch).
MAX_SPLITS = 65535


def launch_args(
    cfg: W8A8GemmConfig,
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
    plan: tuple[int, int, int],
) -> list[Any]:
    """The kernel's arguments in its signature's order and widths, after checking what the kernel assumes and
    cannot check itself (a one-line ValueError before anything launches): cp.async copies 16 bytes from x and w
    at row * ld + 16 c, so both pointers and both row strides must be multiples of 16 (a misaligned address
    faults the context), K a positive multiple of 16 (a chunk is all in or all out of K), and the plan's splits
    must cover K within gridDim.y's limit (a split plan needs its workspace and counters)."""
    tiles, splits, per = plan
    if k <= 0 or k % 16:
        raise ValueError(f"k: expected a positive multiple of 16 (the caller pads K with zeros), got {k}")
    for name, value in (("x_ptr", x_ptr), ("w_ptr", w_ptr), ("x_ld", x_ld), ("w_ld", w_ld)):
        if value % 16:
            raise ValueError(f"{name}: expected a multiple of 16 (cp.async copies 16-byte chunks), got {value}")
    rows, cols = (n, m) if cfg.swap else (m, n)
    want_tiles = -(-rows // cfg.bm) * -(-cols // cfg.bn)
    if tiles != want_tiles or not 1 <= splits <= MAX_SPLITS or per < 1 or splits * per < ktiles(k, cfg.bk):
        raise ValueError(
            f"plan: expected ({want_tiles} tiles, 1..{MAX_SPLITS} splits, k-tiles a split) covering "
            f"{ktiles(k, cfg.bk)} k-tiles, got {plan}"
        )
    if splits > 1 and not (ws_ptr and counters_ptr):
        raise ValueError(f"ws_ptr, counters_ptr: a plan of {splits} splits needs both buffers, got null")
    if cfg.swap:  # the weight is the mma's A operand (P), the tokens its B (Q)
        p, q, ldp, ldq = w_ptr, x_ptr, w_ld, x_ld
    else:
        p, q, ldp, ldq = x_ptr, w_ptr, x_ld, w_ld
    return [
        np.uint64(p),
        np.uint64(q),
        np.int64(rows),
        np.int64(cols),
        np.int64(k),
        np.int64(ldp),
        np.int64(ldq),
        np.uint64(x_scale_ptr),
        np.uint64(w_scale_ptr),
        np.uint64(bias_ptr),
        np.uint64(y_ptr),
        np.int64(n),
        np.uint64(ws_ptr),
        np.uint64(counters_ptr),
        np.int32(per),
    ]


class GemmKernel:
    """One configuration loaded on a device. Pointers are raw device addresses (ints)."""

    def __init__(self, cfg: W8A8GemmConfig, device: int = 0) -> None:
        from ..run import device as dev
        from ..run.loader import load

        self.cfg = cfg
        self.device = device
        self._kernel = load(cfg, device)
        self.resident = max(1, self._kernel.max_active_blocks(cfg.threads, cfg.shared_bytes)) * dev.sm_count(device)

    def plan(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """(tiles, splits, k-tiles a split) of a call."""
        rows, cols = (n, m) if self.cfg.swap else (m, n)
        tiles = -(-rows // self.cfg.bm) * -(-cols // self.cfg.bn)
        splits, per = choose_splits(tiles, k, self.resident, self.cfg.bk)
        return tiles, splits, per

    def workspace_elems(self, plan: tuple[int, int, int]) -> int:
        """4-byte elements of the split-K partials (0 without a split)."""
        tiles, splits, _ = plan
        return 0 if splits == 1 else tiles * splits * self.cfg.accs * self.cfg.threads

    def counters_needed(self, plan: tuple[int, int, int]) -> int:
        """Zero uint32 counters a launch of ``plan`` needs (one a tile where K is split)."""
        return plan[0] if plan[1] > 1 else 0

    def launch_args(self, *call: Any) -> list[Any]:
        """launch_args (the module's function) of this configuration."""
        return launch_args(self.cfg, *call)

    def __call__(
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
        plan: tuple[int, int, int],
        *,
        stream: int,
    ) -> None:
        """y [m, n] (row stride n) from x [m, k] (row stride x_ld bytes) and w [n, k] (row stride w_ld); k, x_ld,
        w_ld multiples of 16 and the pointers 16-byte aligned (the caller pads). ``counters``: at least ``tiles``
        zero uint32 (left zero); ``ws``: workspace_elems(plan) elements."""
        tiles, splits, _ = plan
        args = launch_args(
            self.cfg,
            m,
            n,
            k,
            x_ptr,
            x_ld,
            w_ptr,
            w_ld,
            x_scale_ptr,
            w_scale_ptr,
            bias_ptr,
            y_ptr,
            ws_ptr,
            counters_ptr,
            plan,
        )
        self._kernel((tiles, splits), (self.cfg.threads,), args, stream=stream, shared_mem=self.cfg.shared_bytes)

    def bind(self, plan: tuple[int, int, int], args: list[Any]) -> dev.BoundLaunch:
        """The launch of ``plan`` with ``args`` (from launch_args) packed once: calling it costs one cuLaunchKernel."""
        tiles, splits, _ = plan
        return self._kernel.bind((tiles, splits), (self.cfg.threads,), args, shared_mem=self.cfg.shared_bytes)


@functools.cache
def loaded(cfg: W8A8GemmConfig, device: int) -> GemmKernel:
    """The configuration compiled (NVRTC's disk cache makes a second process cheap) and loaded once per device, for the
    process: a CUDA graph that captured its launch keeps the function, not this object, so it is never dropped
    (a bounded cache unloaded it once the signature caches let go, under a graph that still replays it)."""
    return GemmKernel(cfg, device)
