"""Launch the activation-quantization kernel (its configs, rendering and choice: dqgen.kernels.act_quant) through
dqgen.run.device, one config loaded on a device (dqgen.run.loader)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ..kernels.act_quant import ActQuantConfig

if TYPE_CHECKING:
    from ..run import device as dev


class ActQuantKernel:
    """One variant loaded on a device. Pointers are raw device addresses (ints): the torch op passes
    ``data_ptr()``; a call packs its few arguments as typed numpy scalars through dqgen.run.device's launch
    (cuda.core's ParamHolder, then cuda-bindings' cuLaunchKernel in the kernel's primary context)."""

    def __init__(self, v: ActQuantConfig, device: int = 0) -> None:
        from ..run import device as dev
        from ..run.loader import load

        self.variant = v
        self.device = device
        self._kernel = load(v, device)
        # Persistent rows: as many blocks as can be resident at once, each looping over rows.
        per_sm = max(1, self._kernel.max_active_blocks(v.threads, v.shared_bytes))
        self.max_blocks = per_sm * dev.sm_count(device)
        # the argument types, in order: the launch packs typed numpy scalars (dqgen.run.device.pack_args)
        types: list[type] = [np.uint64, np.int64]
        types += [np.uint64, np.float32] if v.prologue == "rmsnorm" else []  # gamma, eps
        types += [np.uint64] if v.smooth else []
        types += [np.float32] if v.static else []
        self._types = [*types, np.uint64, np.uint64, np.int32]

    def __call__(
        self,
        x_ptr: int,
        x_stride: int,
        rows: int,
        smooth_ptr: int | None,
        scale: float | None,
        q_ptr: int,
        scale_ptr: int,
        stream: int,
        *,
        gamma_ptr: int | None = None,
        eps: float = 0.0,
    ) -> None:
        blocks, args = self._args(x_ptr, x_stride, rows, smooth_ptr, scale, q_ptr, scale_ptr, gamma_ptr, eps)
        self._kernel((blocks,), (self.variant.threads,), args, stream=stream, shared_mem=self.variant.shared_bytes)

    def bind(
        self,
        x_ptr: int,
        x_stride: int,
        rows: int,
        smooth_ptr: int | None,
        scale: float | None,
        q_ptr: int,
        scale_ptr: int,
        *,
        gamma_ptr: int | None = None,
        eps: float = 0.0,
    ) -> dev.BoundLaunch:
        """The launch with these arguments packed once: calling it (with a stream) costs one cuLaunchKernel."""
        blocks, args = self._args(x_ptr, x_stride, rows, smooth_ptr, scale, q_ptr, scale_ptr, gamma_ptr, eps)
        return self._kernel.bind((blocks,), (self.variant.threads,), args, shared_mem=self.variant.shared_bytes)

    def _args(
        self,
        x_ptr: int,
        x_stride: int,
        rows: int,
        smooth_ptr: int | None,
        scale: float | None,
        q_ptr: int,
        scale_ptr: int,
        gamma_ptr: int | None,
        eps: float,
    ) -> tuple[int, list[Any]]:
        v = self.variant
        values: list[Any] = [x_ptr, x_stride]
        if v.prologue == "rmsnorm":
            if gamma_ptr is None:
                raise ValueError("gamma: this kernel variant was compiled for an RMSNorm prologue, got None")
            values += [gamma_ptr, eps]
        if v.smooth:
            if smooth_ptr is None:
                raise ValueError("smooth: this kernel variant was compiled for smoothing factors, got None")
            values.append(smooth_ptr)
        if v.static:
            if scale is None:
                raise ValueError("scale: this kernel variant was compiled for a static scale, got None")
            values.append(scale)
        values += [q_ptr, scale_ptr, rows]
        args = [t(val) for t, val in zip(self._types, values, strict=True)]
        return min(rows, self.max_blocks), args


@functools.cache
def loaded(v: ActQuantConfig, device: int) -> ActQuantKernel:
    """The variant compiled (NVRTC's disk cache makes a second process cheap) and loaded once per device, for the
    process: a CUDA graph that captured its launch keeps the function, not this object, so it is never dropped
    (a bounded cache unloaded it once the signature caches let go, under a graph that still replays it)."""
    return ActQuantKernel(v, device)
