"""Launch-parameter tuning: time every aligned kernel variant once per GPU and kernel source the way
one call happens in a model (dqgen.run.timing), keep one only where it clearly beats the default launch
rule, and cache the choice next to the compiled kernels, so `dqgen build` on a new GPU tunes once.

Everything here goes through the CUDA driver API (dqgen.run.device memory, driver events): `dqgen build` tunes
without torch or triton, which take seconds to import on a fresh machine."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..core.files import write_whole
from ..core.formats import numpy_dtype
from ..core.spec import Spec
from ..emit.nvrtc import default_cache_dir
from ..emit.pipeline import Artifact
from ..kernels.dequant import DequantVariant, kernel_name, variants, whole_source
from . import device as dev
from .inputs import host_inputs
from .timing import (
    CUT_SLOWER,
    PROBE_CALLS,
    TUNE_REP_MS,
    TUNE_WARMUP_MS,
    EventBackend,
    Timed,
    confirm_tuned,
    do_bench_us,
    driver_backend,
    keep_tuned,
    method,
)


class Prepare(Protocol):
    """``Kernel.prepare``: checks the tensors and binds one variant's launch (``launch(stream)`` runs it)."""

    def __call__(
        self,
        qweight: Any,
        scales: Any,
        zeros: Any = None,
        *,
        g_idx: Any = None,
        global_scale: Any = None,
        out: Any = None,
        variant: DequantVariant | None = None,
        check_g_idx: bool = True,
    ) -> Callable[[Any], None]: ...


#: Problems timed for tuning, one per size class: the best variant differs between a matrix that
#: fills the GPU a few times (launch and tail effects) and one that fills it many times.
TUNE_SHAPES = {"small": (4096, 4096), "large": (8192, 28672)}
#: Outputs up to this many elements use the "small" choice.
SMALL_MAX_ELEMENTS = 1 << 24  # 4096 x 4096


#: Bumped when the timing or the keep rule changes.
TUNE_METHOD = "do-bench-driver-events-rep15ms-keep-2pct-confirmed-x5-cut-10pct-after-10"


def default_variant(spec: Spec, aligned: bool) -> DequantVariant:
    """The launch rule before tuning: 4 rows per thread along N (one zero/scale preparation for
    4 rows, 4 independent loads in flight), 2 word-rows (16 rows of K) along K, one block (32 rows
    of K, 3 word-rows) for multi-word blocks."""
    rows = 4 if spec.packing.axis == "N" else 1 if spec.words > 1 else 2  # multi-word: 1 block = 32 rows of K
    for v in variants(spec):
        if v.rows == rows and v.aligned == aligned and not v.stream and (v.vec == 1 or spec.packing.axis == "K"):
            return v
    raise AssertionError("no default variant")


def size_class(K: int, N: int) -> str:
    return "small" if K * N <= SMALL_MAX_ELEMENTS else "large"


def gpu_name(ordinal: int) -> str:
    from cuda.bindings import driver

    _err, raw = driver.cuDeviceGetName(256, dev._device(ordinal))
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def _path(artifact: Artifact, ordinal: int) -> tuple[Any, str]:
    name = gpu_name(ordinal)
    # TUNE_METHOD in the key: choices made by an older timing method are not reused
    text = f"{TUNE_METHOD}\n{name}\n{dev.device_arch(ordinal)}\n{whole_source(artifact)}"
    key = hashlib.sha256(text.encode()).hexdigest()[:32]
    return default_cache_dir() / "tune" / f"{key}.json", name


#: How many tunings this process saved: a cached load_tuning result older than the last save is stale.
saves = 0


def load_tuning(artifact: Artifact, ordinal: int) -> dict[str, DequantVariant] | None:
    """{size class: variant} from the cache, or None if this GPU has not tuned this kernel."""
    try:
        path, _ = _path(artifact, ordinal)
        data = json.loads(path.read_text())
        best = {cls: DequantVariant(**v) for cls, v in data["best"].items()}
        return (
            best if set(best) == set(TUNE_SHAPES) and all(v in variants(artifact.spec) for v in best.values()) else None
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


class TuningStopped(Exception):
    """The caller's ``stop()`` said so between two timings (`dqgen build`: the proof failed)."""


class _Problem:
    """One TUNE_SHAPES problem on the GPU: the bench's input distributions (dqgen.run.inputs) drawn on the host and
    uploaded once through dqgen.run.device, an output buffer, and one prepared launch per variant (its checks done
    once)."""

    def __init__(self, spec: Spec, prepare: Prepare, K: int, N: int, ordinal: int) -> None:
        self.prepare = prepare
        self._launches: dict[DequantVariant, Callable[[], None]] = {}
        self._keep: list[dev.DeviceBuffer] = []
        host = host_inputs(spec, K, N, seed=0)  # one set: the flush makes every call cold
        q, s, z, gi, gsc = (None if a is None else self._upload(a, ordinal) for a in host)
        tdt = numpy_dtype(spec.target_type)
        out = dev.DeviceBuffer(K * N * tdt.itemsize, ordinal)
        self._keep.append(out)
        self._args = (q, s, z)
        self._kwargs = {"g_idx": gi, "global_scale": gsc, "out": out.as_array((K, N), tdt)}

    def _upload(self, a: np.ndarray, ordinal: int) -> dev.DeviceArray:
        buf = dev.DeviceBuffer.from_host(a, ordinal)
        self._keep.append(buf)
        return buf.as_array(a.shape, a.dtype)

    def launch(self, v: DequantVariant) -> Callable[[], None]:
        if v not in self._launches:
            # act-order: host_inputs' g_idx is one tensor, so the launch's host-side check of it is done once
            launch = self.prepare(*self._args, **self._kwargs, variant=v, check_g_idx=not self._launches)
            self._launches[v] = lambda: launch(0)  # the legacy default stream, where driver_backend records
        return self._launches[v]

    def close(self) -> None:
        for buf in self._keep:
            buf.close()


def _time(problem: _Problem, v: DequantVariant, backend: EventBackend, cut_above_us: float | None = None) -> Timed:
    """Median microseconds of one launch after an L2 flush (the way a call happens in a model); with
    ``cut_above_us``, a launch already slower than that after PROBE_CALLS calls is not timed further."""
    return do_bench_us(problem.launch(v), backend, TUNE_WARMUP_MS, TUNE_REP_MS, cut_above_us)


def screen(default: str, time: Callable[[str, float | None], Timed], names: list[str]) -> dict[str, Timed]:
    """Every variant in ``names`` timed once, the default first and in full; each other one stops early when it is
    CUT_SLOWER slower than the default (the keep rule needs a KEEP_MARGIN win: such a variant cannot be kept)."""
    timed = {default: time(default, None)}
    bound = (1.0 + CUT_SLOWER) * timed[default].us
    for name in names:
        if name != default:
            timed[name] = time(name, bound)
    return timed


def tune(
    artifact: Artifact,
    ordinal: int = 0,
    *,
    prepare: Prepare,
    save: bool = True,
    stop: Callable[[], bool] | None = None,
) -> dict:
    """Time the default and every other aligned variant on each TUNE_SHAPES problem; keep a variant
    only where it beats the default by KEEP_MARGIN, confirmed (so tuning never makes a call slower); return
    the choices with every timing, and cache them unless ``save`` is false (the caller then saves with
    :func:`save_tuning`). ``stop()`` is asked between timings: True raises TuningStopped. ``prepare``: the
    compiled spec's Kernel.prepare, which binds each variant's launch."""

    def check_stop() -> None:
        if stop is not None and stop():
            raise TuningStopped

    best: dict[str, dict] = {}
    timings: dict[str, dict[str, float]] = {}
    cut: dict[str, list[str]] = {}
    spec = artifact.spec
    default = kernel_name(spec, default_variant(spec, True))
    by_name = {kernel_name(spec, v): v for v in variants(spec) if v.aligned}
    backend = driver_backend(ordinal)
    try:
        for cls, (K, N) in TUNE_SHAPES.items():
            check_stop()
            problem = _Problem(spec, prepare, K, N, ordinal)
            try:

                def time_variant(name: str, cut_above_us: float | None, problem: _Problem = problem) -> Timed:
                    check_stop()
                    return _time(problem, by_name[name], backend, cut_above_us)

                t = screen(default, time_variant, list(by_name))
                us = {name: r.us for name, r in t.items()}
                name = keep_tuned(default, us)
                # the screen's winner must win again, timed alternately with the default, or the default stays
                if name != default and not confirm_tuned(default, name, lambda n: time_variant(n, None).us):
                    name = default
            finally:
                problem.close()
            v = by_name[name]
            best[cls] = {"vec": v.vec, "rows": v.rows, "aligned": v.aligned, "stream": v.stream}
            timings[cls] = us
            cut[cls] = sorted(n for n, r in t.items() if r.cut)
    finally:
        backend.close()
    _, gpu = _path(artifact, ordinal)
    how = (
        f"{method('driver')}; warm-up {TUNE_WARMUP_MS:g} ms, timed {TUNE_REP_MS:g} ms per variant; a variant "
        f"{100 * CUT_SLOWER:g}% slower than the default after {PROBE_CALLS} calls is not timed further (listed in cut)"
    )
    data = {
        "gpu": gpu,
        "method": how,
        "shapes": TUNE_SHAPES,
        "default": default,
        "best": best,
        "us": timings,
        "cut": cut,
    }
    if save:
        save_tuning(artifact, ordinal, data)
    return data


def save_tuning(artifact: Artifact, ordinal: int, data: dict) -> None:
    """Cache what :func:`tune` returned, where :func:`load_tuning` and every Kernel (already made or not) find it."""
    global saves
    path, _ = _path(artifact, ordinal)
    write_whole(path, json.dumps(data, indent=1))
    saves += 1  # a Kernel's cached table (load_tuning's earlier answer) is stale from here
