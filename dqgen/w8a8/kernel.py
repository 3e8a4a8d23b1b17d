"""Render the activation-quantization kernel from templates/act_quant.cu.j2 for one (dtype, K, smoothing, mode,
alignment), compile it with NVRTC and launch it through dqgen.run.device.

K is baked in: the loop over a thread's vectors unrolls to straight-line code with the row held in registers
between the row's max and its codes, so x is read from memory once."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..emit.nvrtc import compile_source
from ..emit.render import template_env

XDtype = Literal["fp16", "bf16"]
SmoothDtype = Literal["fp32", "fp16", "bf16"] | None

#: A thread's vectors (8 elements each) per row that the block size aims for: enough loads in flight per thread.
VECS_PER_THREAD = 4
MAX_THREADS = 512
#: Vectors per thread held in registers between the max and the codes (8 fp32 each); a longer row reads the rest
#: again (from L2). 8 x 8 fp32 at 512 threads stays inside the 128 registers a thread may have there.
MAX_CACHED = 8
#: Per-thread reciprocals of the smoothing factors are kept across rows up to this many vectors.
MAX_CACHED_SMOOTH = 4


@dataclass(frozen=True)
class Variant:
    """What one compiled entry point is specialized on."""

    dtype: XDtype
    k: int
    smooth: SmoothDtype
    static: bool
    aligned: bool

    @property
    def name(self) -> str:
        sm = f"_s{self.smooth}" if self.smooth else ""
        mode = "static" if self.static else "dyn"
        return f"dqgen_act_quant_{self.dtype}_k{self.k}{sm}_{mode}_{'a' if self.aligned else 'u'}"

    @property
    def threads(self) -> int:
        nvec = max(1, self.k // 8)
        want = -(-nvec // VECS_PER_THREAD)
        return min(MAX_THREADS, max(32, -(-want // 32) * 32))

    @property
    def chunks(self) -> int:
        return -(-(self.k // 8) // self.threads)

    @property
    def cache(self) -> int:
        return 0 if self.static else min(self.chunks, MAX_CACHED)

    @property
    def cache_smooth(self) -> bool:
        return bool(self.smooth) and self.aligned and self.chunks <= MAX_CACHED_SMOOTH


def render(v: Variant) -> str:
    if v.k < 1:
        raise ValueError(f"K: expected at least 1 column, got {v.k}")
    if v.aligned and v.k % 8:
        raise ValueError(f"aligned variant: K must be a multiple of 8, got {v.k}")
    if v.cache == v.chunks:
        cache_doc = "held in registers from the max to the codes" if not v.static else "converted as it streams"
    else:
        cache_doc = f"{v.cache} of {v.chunks} vectors held in registers, the rest read again"
    mode = "static scale" if v.static else "dynamic per-row scale"
    smooth = f", smoothing factors {v.smooth}" if v.smooth else ""
    return (
        template_env()
        .get_template("act_quant.cu.j2")
        .render(
            name=v.name,
            summary=f"{v.dtype}, K = {v.k}, {mode}{smooth}",
            dtype=v.dtype,
            k=v.k,
            smooth=v.smooth or "",
            static=v.static,
            aligned=v.aligned,
            threads=v.threads,
            chunks=v.chunks,
            cache=v.cache,
            cache_smooth=v.cache_smooth,
            cache_doc=cache_doc,
        )
    )


def compile_variant(v: Variant, arch: str = "sm_90", want: Any = "cubin") -> Any:
    """NVRTC result (PTX or cubin) of one variant for ``arch``."""
    return compile_source(render(v), arch=arch, want=want, name="act_quant.cu")


class ActQuantKernel:
    """One variant loaded on a device. Pointers are raw device addresses (ints): the torch op passes
    ``data_ptr()``, so a call costs the launch and no array wrapping."""

    def __init__(self, v: Variant, device: int = 0) -> None:
        from ..run import device as dev

        self.variant = v
        self._kernel = dev.LoadedKernel(compile_variant(v, dev.device_arch(device)).cubin, v.name, device)
        # Persistent rows: as many blocks as can be resident at once, each looping over rows.
        per_sm = max(1, self._kernel.max_active_blocks(v.threads, 0))
        self.max_blocks = per_sm * dev.sm_count(device)

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
    ) -> None:
        v = self.variant
        args: list[Any] = [np.uint64(x_ptr), np.int64(x_stride)]
        if v.smooth:
            if smooth_ptr is None:
                raise ValueError("smooth: this kernel variant was compiled for smoothing factors, got None")
            args.append(np.uint64(smooth_ptr))
        if v.static:
            if scale is None:
                raise ValueError("scale: this kernel variant was compiled for a static scale, got None")
            args.append(np.float32(scale))
        args += [np.uint64(q_ptr), np.uint64(scale_ptr), np.int32(rows)]
        grid = (min(rows, self.max_blocks),)
        self._kernel(grid, (v.threads,), args, stream=stream)


@functools.lru_cache(maxsize=256)
def loaded(v: Variant, device: int) -> ActQuantKernel:
    """The variant compiled (NVRTC's disk cache makes a second process cheap) and loaded once per device."""
    return ActQuantKernel(v, device)
