"""Run a compiled kernel on the GPU and compare it bit for bit with the numba reference."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ..check.reference import dequantize_reference, random_global_scale, random_inputs
from ..core.spec import Spec
from ..layout.layout import Layout
from . import device as dev
from .runtime import Kernel, target_dtype


#: Shapes (K, N) that `dqgen build` checks on a GPU: a square one and the smallest legal one.
def build_shapes(spec: Spec) -> list[tuple[int, int]]:
    # group_size auto: inputs are made with groups of 128 (reference.example_group_size), so whole groups of 128
    g = 128 if spec.scales.group_size == "auto" else spec.scales.group_size
    # K is whole groups and whole packing blocks (32 rows for 3-bit codes along K)
    lay = Layout.of(spec)
    k_unit = max(g, 1) if g > 0 else lay.per_block if lay.axis == "K" else 1
    n_unit = lay.per_block if (lay.axis == "N" or lay.zeros == "packed") else 1
    # 1024 x 4096 fills an H100 several times over (hundreds of blocks) at a quarter of 4096^2's reference time
    return [(1024, 4096), (k_unit, n_unit), (2 * max(k_unit, 64), 1440 if 1440 % n_unit == 0 else 8 * n_unit)]


def to_torch(a: np.ndarray | None, device: int = 0) -> Any:
    import torch

    if a is None:
        return None
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(f"cuda:{device}")
    return torch.from_numpy(np.ascontiguousarray(a)).to(f"cuda:{device}")


def to_numpy(t: Any) -> np.ndarray:
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def nan_equal_mismatches(got: np.ndarray, want: np.ndarray, target: str) -> np.ndarray:
    """Indices where two 16-bit bit patterns differ, any NaN matching any NaN (PTX writes the
    canonical NaN 0x7FFF, the reference its quiet NaN)."""
    g, w = got.view(np.uint16), want.view(np.uint16)
    exp, man = (0x7C00, 0x03FF) if target == "fp16" else (0x7F80, 0x007F)

    def nan(b: np.ndarray) -> np.ndarray:
        return ((b & exp) == exp) & ((b & man) != 0)

    return np.argwhere((g != w) & ~(nan(g) & nan(w)))


@dataclass
class CheckResult:
    K: int
    N: int
    ok: bool
    mismatches: int
    seconds: float
    detail: str = ""


def _on_device(a: np.ndarray | None, keep: list[dev.DeviceBuffer], device: int) -> dev.DeviceArray | None:
    if a is None:
        return None
    buf = dev.DeviceBuffer.from_host(a, device)
    keep.append(buf)
    return buf.as_array(a.shape, a.dtype)


def check_shape(kernel: Kernel, K: int, N: int, seed: int = 0, device: int = 0) -> CheckResult:
    """One random problem on GPU ``device`` vs the reference. Memory comes from the driver API (cuMemAlloc), so
    `dqgen build` checks a kernel without torch or cupy installed."""
    t0 = time.perf_counter()
    q, s, z, gi = random_inputs(kernel.spec, K, N, seed)
    gsc = random_global_scale(kernel.spec, seed)
    keep: list[dev.DeviceBuffer] = []
    tdt = target_dtype(kernel.spec)
    out_buf = dev.DeviceBuffer(K * N * tdt.itemsize, device)
    out = out_buf.as_array((K, N), tdt)
    args = [_on_device(a, keep, device) for a in (q, s, z, gi, gsc)]
    kernel(args[0], args[1], args[2], g_idx=args[3], global_scale=args[4], out=out)
    dev.synchronize(device)
    want = dequantize_reference(kernel.spec, q, s, z, gi, global_scale=gsc)
    g = dev.to_host(out).view(np.uint16)
    w = want.view(np.uint16)
    bad = nan_equal_mismatches(g, w, kernel.spec.target.value)
    detail = ""
    if bad.size:
        r, c = bad[0]
        detail = f"first mismatch at [{r}, {c}]: got 0x{int(g[r, c]):04X}, reference 0x{int(w[r, c]):04X}"
    return CheckResult(K, N, not bad.size, len(bad), time.perf_counter() - t0, detail)
