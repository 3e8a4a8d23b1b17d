"""Run a compiled kernel on the GPU and compare it bit for bit with the numba reference."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .reference import dequantize_reference, random_global_scale, random_inputs
from .runtime import Kernel
from .spec import Spec


#: Shapes (K, N) that `dqgen build` checks on a GPU: a square one and the smallest legal one.
def build_shapes(spec: Spec) -> list[tuple[int, int]]:
    g = spec.scales.group_size
    # K is whole groups and whole packing blocks (32 rows for 3-bit codes along K)
    k_unit = max(g, 1) if g > 0 else spec.per_word if spec.packing.axis == "K" else 1
    n_unit = spec.per_word if (spec.packing.axis == "N" or spec.zeros.packed) else 1
    return [(4096, 4096), (k_unit, n_unit), (2 * max(k_unit, 64), 1440 if 1440 % n_unit == 0 else 8 * n_unit)]


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


def check_shape(kernel: Kernel, K: int, N: int, seed: int = 0) -> CheckResult:
    import torch

    t0 = time.perf_counter()
    q, s, z, gi = random_inputs(kernel.spec, K, N, seed)
    gsc = random_global_scale(kernel.spec, seed)
    got = kernel(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gsc))
    torch.cuda.synchronize()
    want = dequantize_reference(kernel.spec, q, s, z, gi, global_scale=gsc)
    g = to_numpy(got).view(np.uint16)
    w = want.view(np.uint16)
    bad = nan_equal_mismatches(g, w, kernel.spec.target.value)
    detail = ""
    if bad.size:
        r, c = bad[0]
        detail = f"first mismatch at [{r}, {c}]: got 0x{int(g[r, c]):04X}, reference 0x{int(w[r, c]):04X}"
    return CheckResult(K, N, not bad.size, len(bad), time.perf_counter() - t0, detail)
