"""Run a compiled kernel on the GPU and compare it bit for bit with the numba reference.

The reference (numba), the runtime and the driver bindings are imported where they are used: `dqgen build` reads
``build_shapes`` before it starts the reference worker, and the worker reads ``check_inputs``; neither needs them.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ..core.spec import Spec
from ..layout.layout import Layout

if TYPE_CHECKING:
    from ..emit.pipeline import Artifact
    from . import device as dev
    from .problem import Dequantizer


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


def exact_allocations() -> None:
    """torch's caching allocator off for this process (PYTORCH_NO_CUDA_MEMORY_CACHING=1): each tensor is then a
    cudaMalloc of its own size, so compute-sanitizer memcheck reports a read or write past a tensor's end; inside the
    caching allocator's 2 MiB segments such an access lands on another tensor's valid address and passes unseen.
    For the sanitizer scripts that allocate through torch; torch reads the variable once, at its first allocation."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("exact_allocations: torch has initialized CUDA already; call it before any CUDA tensor")
    os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"


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
    from . import device as dev

    if a is None:
        return None
    buf = dev.DeviceBuffer.from_host(a, device)
    keep.append(buf)
    return buf.as_array(a.shape, a.dtype)


def check_inputs(
    spec: Spec, K: int, N: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """The seeded inputs ``(qweight, scales, zeros, g_idx, global_scale)`` of one checked problem: the GPU check
    and the reference worker (dqgen.refworker) each make them from the seed alone."""
    from ..check.reference import random_global_scale, random_inputs

    return (*random_inputs(spec, K, N, seed), random_global_scale(spec, seed))


@dataclass
class GpuRun:
    """One problem's GPU output, copied to the host, waiting for its reference."""

    K: int
    N: int
    seed: int
    inputs: tuple[np.ndarray | None, ...]
    got: np.ndarray
    seconds: float


def run_shape(kernel: Dequantizer, K: int, N: int, seed: int = 0, device: int = 0) -> GpuRun:
    """Run one seeded problem on GPU ``device``. Memory comes from the driver API (cuMemAlloc), so `dqgen build`
    checks a kernel without torch or cupy installed."""
    from . import device as dev
    from .problem import target_dtype

    t0 = time.perf_counter()
    inputs = check_inputs(kernel.spec, K, N, seed)
    keep: list[dev.DeviceBuffer] = []
    tdt = target_dtype(kernel.spec)
    out_buf = dev.DeviceBuffer(K * N * tdt.itemsize, device)
    out = out_buf.as_array((K, N), tdt)
    args = [_on_device(a, keep, device) for a in inputs]
    kernel(args[0], args[1], args[2], g_idx=args[3], global_scale=args[4], out=out)
    dev.synchronize(device)
    return GpuRun(K, N, seed, inputs, dev.to_host(out), time.perf_counter() - t0)


def compare(kernel: Dequantizer, run: GpuRun, want: np.ndarray | None = None) -> CheckResult:
    """``run``'s output vs the reference, bit for bit (any NaN matching any NaN); ``want`` is the reference output
    when it was computed elsewhere (the build's worker), else it is computed here from the run's inputs."""
    t0 = time.perf_counter()
    if want is None:
        from ..check.reference import dequantize_reference

        q, s, z, gi, gsc = run.inputs
        assert q is not None and s is not None
        want = dequantize_reference(kernel.spec, q, s, z, gi, global_scale=gsc)
    g = run.got.view(np.uint16)
    w = want.view(np.uint16)
    if w.shape != g.shape:
        return CheckResult(run.K, run.N, False, g.size, run.seconds, f"reference has shape {w.shape}, GPU {g.shape}")
    bad = nan_equal_mismatches(g, w, kernel.spec.target.value)
    detail = ""
    if bad.size:
        r, c = bad[0]
        detail = f"first mismatch at [{r}, {c}]: got 0x{int(g[r, c]):04X}, reference 0x{int(w[r, c]):04X}"
    return CheckResult(run.K, run.N, not bad.size, len(bad), run.seconds + time.perf_counter() - t0, detail)


def check_shape(kernel: Dequantizer, K: int, N: int, seed: int = 0, device: int = 0) -> CheckResult:
    """One random problem on GPU ``device`` vs the reference computed in this process."""
    return compare(kernel, run_shape(kernel, K, N, seed, device))


# -- the matmul families (`dqgen build`): y = x @ dequant_ref(W) within the target's tolerance -----------------

#: Rows of x that `dqgen build` checks each matmul family at: the GEMV's 8- and 16-token entries (M = 1, 16), the
#: GEMM's 32- and 64-row tiles (M = 17, 64; it takes any M, the dispatch sends it M > 16).
BUILD_MATMUL_M: dict[str, tuple[int, ...]] = {"gemv": (1, 16), "gemm": (17, 64)}


def matmul_shape(spec: Spec) -> tuple[int, int, int | None]:
    """(K, N, group size override) of the build's matmul checks: K = 1024 + one group (or, per channel, the
    smallest K tail every packing allows: 8 rows, or a whole block along K), so that the last group or block is a
    tail of the GEMV's 64-row chunks; N = 1448, a partial 16-column GEMV tile and 128-column GEMM tile (1440 where N
    must be whole 16-code words). ``auto`` specs take groups of 128 (a checkpoint's usual size)."""
    lay = Layout.of(spec)
    g = spec.scales.group_size
    n_unit = lay.per_block if lay.axis == "N" or lay.zeros == "packed" else 1
    N = 1448 if 1448 % n_unit == 0 else 1440
    if g == "auto":
        return 1024 + 128, N, 128
    k_block = lay.per_block if lay.axis == "K" else 1
    tail = g if g > 0 else k_block * -(-8 // k_block)  # a multiple of 8 rows and of a block along K
    return 1024 + tail, N, None


@dataclass
class MatmulCheck:
    """One checked matmul launch: its relative error against the float64 reference and the bound."""

    family: str
    M: int
    K: int
    N: int
    error: float  # ||y - ref|| / ||ref||; inf where an output was not finite
    tolerance: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error <= self.tolerance and not self.detail

    def line(self) -> str:
        shape = f"M={self.M} {self.K}x{self.N}"
        if self.detail:
            return f"{shape}: FAILED, {self.detail}"
        return f"{shape}: error {self.error:.2e} {'<=' if self.ok else '> the bound'} {self.tolerance:g}"

    def as_json(self) -> dict[str, Any]:
        error = self.error if np.isfinite(self.error) else None  # JSON has no inf
        return {"M": self.M, "K": self.K, "N": self.N, "error": error, "tolerance": self.tolerance, "ok": self.ok}


def matmul_torch_problem() -> str | None:
    """Why the matmul families cannot be checked here (their host code packs and launches on torch tensors), or
    None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (the matmul host code needs it)"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


def check_matmul(artifact: Artifact, family: str, device: int = 0) -> list[MatmulCheck]:
    """Run ``family`` ("gemv": dqgen.run.matmul, "gemm": dqgen.run.gemm) of ``artifact``'s spec on GPU ``device``
    at every M of BUILD_MATMUL_M on the weight of ``matmul_shape``, and compare each output with the float64
    reference x @ W, W from the independent dequantization (dqgen.check.matmul_reference). Torch tensors."""
    import torch

    from ..check.matmul_reference import TOLERANCE, matmul_inputs, matmul_reference, random_x, relative_error

    spec = artifact.spec
    K, N, group = matmul_shape(spec)
    (q, s, z, gi, gsc), W = matmul_inputs(spec, K, N, seed=K + N, group_size=group)
    tensors = [to_torch(a, device) for a in (q, s, z, gi)]
    run: Any
    if family == "gemv":
        from ..kernels.gemv import DEFAULT_TUNING
        from . import matmul as gemv

        # the kept 4-warp shape: the source the build wrote and checked (pack_gemv gives a weight of this few tiles
        # the wide blocks of block_warps, other sources, compiled where a weight first takes them)
        weight = gemv.pack_gemv(
            artifact, *tensors[:3], g_idx=tensors[3], global_scale=to_torch(gsc, device), tuning=DEFAULT_TUNING
        )

        def run(x: Any) -> Any:
            return gemv.run_gemv(artifact, x, weight)

    elif family == "gemm":
        from . import gemm

        gemm_weight = gemm.pack_gemm(spec, *tensors[:3], g_idx=tensors[3])

        def run(x: Any) -> Any:
            return gemm.run_gemm(spec, x, gemm_weight)

    else:
        raise ValueError(f"family: expected one of {sorted(BUILD_MATMUL_M)}, got {family!r}")
    checks = []
    for M in BUILD_MATMUL_M[family]:
        x = random_x(spec, M, K, seed=M)
        y = run(to_torch(x, device))
        torch.cuda.synchronize(device)
        got = to_numpy(y).astype(np.float64)
        bound = TOLERANCE[spec.target.value]
        bad = int((~np.isfinite(got)).sum())
        if got.shape != (M, N):
            checks.append(MatmulCheck(family, M, K, N, float("inf"), bound, f"output shape {got.shape}"))
        elif bad:
            checks.append(MatmulCheck(family, M, K, N, float("inf"), bound, f"{bad} non-finite outputs"))
        else:
            checks.append(MatmulCheck(family, M, K, N, relative_error(got, matmul_reference(x, W)), bound))
    return checks
