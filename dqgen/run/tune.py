"""Launch-parameter tuning: time every aligned kernel variant once per GPU and kernel source the way
one call happens in a model (dqgen.run.timing), keep one only where it clearly beats the default launch
rule, and cache the choice next to the compiled kernels, so `dqgen build` on a new GPU tunes once."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from ..core.files import write_whole
from ..core.formats import torch_dtype
from ..core.spec import Spec
from ..emit.nvrtc import default_cache_dir
from ..emit.render import Variant, kernel_name, variants
from . import device as dev
from .inputs import make_g_idx, make_global_scale, make_inputs
from .timing import TUNE_REP_MS, TUNE_WARMUP_MS, confirm_tuned, keep_tuned, method, single_call_us

if TYPE_CHECKING:
    from .runtime import Kernel

#: Problems timed for tuning, one per size class: the best variant differs between a matrix that
#: fills the GPU a few times (launch and tail effects) and one that fills it many times.
TUNE_SHAPES = {"small": (4096, 4096), "large": (8192, 28672)}
#: Outputs up to this many elements use the "small" choice.
SMALL_MAX_ELEMENTS = 1 << 24  # 4096 x 4096


#: Bumped when the timing or the keep rule changes.
TUNE_METHOD = "single-call-l2-flushed-rep15ms-keep-2pct-confirmed-x5"


def default_variant(spec: Spec, aligned: bool) -> Variant:
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


def _path(kernel: Kernel, ordinal: int):
    from cuda.bindings import driver

    _err, raw = driver.cuDeviceGetName(256, dev._device(ordinal))
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    # TUNE_METHOD in the key: choices made by an older timing method are not reused
    text = f"{TUNE_METHOD}\n{name}\n{dev.device_arch(ordinal)}\n{kernel.source}"
    key = hashlib.sha256(text.encode()).hexdigest()[:32]
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


def _time(kernel: Kernel, v: Variant, inputs: tuple, out: Any) -> float:
    """Median microseconds of one launch after an L2 flush (the way a call happens in a model)."""
    import torch

    launch = kernel.prepare(*inputs[:3], g_idx=inputs[3], global_scale=inputs[4], out=out, variant=v)
    return single_call_us(lambda: launch(torch.cuda.current_stream()), TUNE_WARMUP_MS, TUNE_REP_MS)


def tune(kernel: Kernel, ordinal: int = 0) -> dict:
    """Time the default and every other aligned variant on each TUNE_SHAPES problem; keep a variant
    only where it beats the default by KEEP_MARGIN (so tuning never makes a call slower); cache and
    return the choices with every timing."""
    import torch

    best: dict[str, dict] = {}
    timings: dict[str, dict[str, float]] = {}
    spec = kernel.spec
    tdt = torch_dtype(spec.target_type, torch)
    default = kernel_name(spec, default_variant(spec, True))
    for cls, (K, N) in TUNE_SHAPES.items():
        # (qweight, scales, zeros, g_idx, global_scale); one set: the flush makes every call cold
        inputs = (*make_inputs(spec, K, N, 0), make_g_idx(spec, K, 0), make_global_scale(spec, 0))
        out = torch.empty((K, N), dtype=tdt, device=f"cuda:{ordinal}")
        by_name = {kernel_name(spec, v): v for v in variants(spec) if v.aligned}
        t = {name: _time(kernel, v, inputs, out) for name, v in by_name.items()}
        name = keep_tuned(default, t)

        # the screen's winner must win again, timed alternately with the default, or the default stays
        def time_us(n: str, by_name: dict[str, Variant] = by_name, inputs: tuple = inputs, out: Any = out) -> float:
            return _time(kernel, by_name[n], inputs, out)

        if name != default and not confirm_tuned(default, name, time_us):
            name = default
        v = by_name[name]
        best[cls] = {"vec": v.vec, "rows": v.rows, "aligned": v.aligned, "stream": v.stream}
        timings[cls] = t
        del inputs, out
    path, gpu = _path(kernel, ordinal)
    data = {"gpu": gpu, "method": method(), "shapes": TUNE_SHAPES, "default": default, "best": best, "us": timings}
    write_whole(path, json.dumps(data, indent=1))
    kernel._tuned.pop(ordinal, None)
    return data
