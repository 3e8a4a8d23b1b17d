"""Launch-parameter tuning: time every aligned kernel variant once per GPU and kernel source, and
cache the winner next to the compiled kernels, so `dqgen build` on a new GPU tunes once."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
from typing import TYPE_CHECKING

from . import device as dev
from .nvrtc import default_cache_dir
from .render import Variant, kernel_name, variants

if TYPE_CHECKING:
    from .runtime import Kernel

#: The problem timed for tuning: large enough to fill an H100 many times over, past its L2.
TUNE_SHAPE = (8192, 8192)


def _path(kernel: "Kernel", ordinal: int):
    from cuda.bindings import driver

    err, raw = driver.cuDeviceGetName(256, dev._device(ordinal))
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    key = hashlib.sha256(f"{name}\n{dev.device_arch(ordinal)}\n{kernel.source}".encode()).hexdigest()[:32]
    return default_cache_dir() / "tune" / f"{key}.json", name


def load_tuning(kernel: "Kernel", ordinal: int) -> Variant | None:
    try:
        path, _ = _path(kernel, ordinal)
        data = json.loads(path.read_text())
        best = Variant(**data["best"])
        return best if best in variants(kernel.spec) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def tune(kernel: "Kernel", ordinal: int = 0, reps: int = 10) -> dict:
    """Time each aligned variant on TUNE_SHAPE; cache and return {"best": ..., "us": {...}}."""
    import torch

    from .bench import make_inputs

    K, N = TUNE_SHAPE
    q, s, z = make_inputs(kernel.spec, K, N, 0)
    out = torch.empty((K, N), dtype=s.dtype, device=f"cuda:{ordinal}")
    timings: dict[str, float] = {}
    for v in variants(kernel.spec):
        if not v.aligned:
            continue
        launch = kernel.prepare(q, s, z, out=out, variant=v)
        for _ in range(5):
            launch()
        times = []
        for _ in range(reps):  # batches of 10 back-to-back launches: host launch latency stays hidden
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(10):
                launch()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 100)
        timings[kernel_name(kernel.spec, v)] = statistics.median(times)
    best_name = min(timings, key=timings.get)
    best = next(v for v in variants(kernel.spec) if kernel_name(kernel.spec, v) == best_name)
    path, gpu = _path(kernel, ordinal)
    data = {"gpu": gpu, "shape": [K, N], "best": {"vec": best.vec, "rows": best.rows, "aligned": best.aligned, "stream": best.stream}, "us": timings}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)
    kernel._tuned.pop(ordinal, None)
    return data
