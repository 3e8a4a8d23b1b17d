"""Launch-parameter tuning: time every aligned kernel variant once per GPU and kernel source, and
cache the winner next to the compiled kernels, so `dqgen build` on a new GPU tunes once."""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from typing import TYPE_CHECKING

from . import device as dev
from .nvrtc import default_cache_dir
from .render import Variant, kernel_name, variants

if TYPE_CHECKING:
    from .runtime import Kernel

#: Problems timed for tuning, one per size class: the best variant differs between a matrix that
#: fills the GPU a few times (launch and tail effects) and one that fills it many times.
TUNE_SHAPES = {"small": (4096, 4096), "large": (8192, 28672)}
#: Outputs up to this many elements use the "small" choice.
SMALL_MAX_ELEMENTS = 1 << 24  # 4096 x 4096


def size_class(K: int, N: int) -> str:
    return "small" if K * N <= SMALL_MAX_ELEMENTS else "large"


def _path(kernel: Kernel, ordinal: int):
    from cuda.bindings import driver

    err, raw = driver.cuDeviceGetName(256, dev._device(ordinal))
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    key = hashlib.sha256(f"{name}\n{dev.device_arch(ordinal)}\n{kernel.source}".encode()).hexdigest()[:32]
    return default_cache_dir() / "tune" / f"{key}.json", name


def load_tuning(kernel: Kernel, ordinal: int) -> dict[str, Variant] | None:
    """{size class: variant} from the cache, or None if this GPU has not tuned this kernel."""
    try:
        path, _ = _path(kernel, ordinal)
        data = json.loads(path.read_text())
        best = {cls: Variant(**v) for cls, v in data["best"].items()}
        return (
            best if set(best) == set(TUNE_SHAPES) and all(v in variants(kernel.spec) for v in best.values()) else None
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _time(kernel: Kernel, v: Variant, sets: list, outs: list, reps: int) -> float:
    """Microseconds per launch, from CUDA-graph replays rotating over input sets larger than L2
    together (host launch overhead and cache hits excluded, as in bench)."""
    import torch

    from .bench import time_us

    launches = [kernel.prepare(*st[:3], g_idx=st[3], global_scale=st[4], out=o, variant=v) for st, o in zip(sets, outs)]
    return time_us(lambda i: launches[i](torch.cuda.current_stream()), len(sets), reps=reps, calls=20)


def tune(kernel: Kernel, ordinal: int = 0, reps: int = 10) -> dict:
    """Time each aligned variant on each TUNE_SHAPES problem; cache and return the winners and timings."""
    import torch

    from .bench import bytes_moved, l2_bytes, make_g_idx, make_global_scale, make_inputs

    best: dict[str, dict] = {}
    timings: dict[str, dict[str, float]] = {}
    spec = kernel.spec
    tdt = torch.float16 if spec.target.value == "fp16" else torch.bfloat16
    for cls, (K, N) in TUNE_SHAPES.items():
        # (qweight, scales, zeros, g_idx, global_scale) per input set
        first = (*make_inputs(spec, K, N, 0), make_g_idx(spec, K, 0), make_global_scale(spec, 0))
        nsets = max(1, min(8, math.ceil(2 * l2_bytes() / bytes_moved(spec, *first[:3], K, N))))
        sets = [first] + [
            (*make_inputs(spec, K, N, i), make_g_idx(spec, K, i), make_global_scale(spec, i)) for i in range(1, nsets)
        ]
        outs = [torch.empty((K, N), dtype=tdt, device=f"cuda:{ordinal}") for _ in sets]
        t = {
            kernel_name(kernel.spec, v): _time(kernel, v, sets, outs, reps) for v in variants(kernel.spec) if v.aligned
        }
        name = min(t, key=t.get)
        v = next(v for v in variants(kernel.spec) if kernel_name(kernel.spec, v) == name)
        best[cls] = {"vec": v.vec, "rows": v.rows, "aligned": v.aligned, "stream": v.stream}
        timings[cls] = t
        del first, sets, outs
    path, gpu = _path(kernel, ordinal)
    data = {"gpu": gpu, "shapes": TUNE_SHAPES, "best": best, "us": timings}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
    kernel._tuned.pop(ordinal, None)
    return data
