"""How dqgen times a kernel, shared by ``dqgen bench`` and the launch tuner.

The primary figure is one call as it happens in a model: the L2 cache flushed first (a buffer larger
than L2 written), CUDA events around the one call, the median of many such calls. This is what
``triton.testing.do_bench`` does, and the bench uses it where triton is importable; :func:`do_bench_us` runs the
same procedure (its estimate, warm-up and time budgets) on any :class:`EventBackend`: torch's events, or the driver
API's (:func:`driver_backend`), which the tuner uses so that `dqgen build` imports neither torch nor triton.

Back-to-back CUDA-graph replay (:func:`graph_us`) overlaps one call's tail with the next call's start,
which a dequantize-then-matmul never has; it is only reported as a labelled second column.
"""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Bytes written to evict L2 before each timed call: larger than any current GPU's L2 (H100: 50 MB), and the size
#: of do_bench's own flush buffer.
FLUSH_BYTES = 256 << 20
#: do_bench's budgets in milliseconds: warm-up, then timed calls (each after a flush).
WARMUP_MS = 10.0
REP_MS = 40.0
#: The tuner's budgets: ten-odd variants at two shapes inside a cold `dqgen build`. 15 ms is still 50+ flushed
#: calls at 8192 x 28672 (about 0.3 ms each with the flush), enough for a median against a 2% keep margin.
TUNE_WARMUP_MS = 3.0
TUNE_REP_MS = 15.0
#: Flushed calls of do_bench's runtime estimate (the number do_bench uses).
ESTIMATE_CALLS = 5
#: A tuner candidate is timed this many flushed calls first; if their median is CUT_SLOWER slower than the
#: default's, the rest of its budget is not spent: it cannot come within the 2% keep margin of a win.
PROBE_CALLS = 10
CUT_SLOWER = 0.10
#: A tuned variant must beat the default by this fraction of the default's time to be kept.
KEEP_MARGIN = 0.02


@dataclass(frozen=True)
class EventBackend:
    """What the by-hand method needs from a GPU runtime: evict L2, record an event on the current
    stream, read the milliseconds between two recorded events, wait for the device; ``close`` frees
    what the backend allocated (the flush buffer)."""

    flush: Callable[[], None]
    record: Callable[[], Any]
    elapsed_ms: Callable[[Any, Any], float]
    synchronize: Callable[[], None]
    close: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Timed:
    """One :func:`do_bench_us` measurement."""

    us: float  # median microseconds of the timed calls
    calls: int  # flushed calls timed (the estimate's and the warm-up's not counted)
    cut: bool = False  # stopped after PROBE_CALLS: already slower than ``cut_above_us``


def _flushed_calls(fn: Callable[[], Any], backend: EventBackend, n: int) -> list[float]:
    """``n`` calls, each alone after an L2 flush with events around the call only: their milliseconds."""
    pairs = []
    for _ in range(n):
        backend.flush()
        start = backend.record()
        fn()
        pairs.append((start, backend.record()))
    backend.synchronize()
    return [backend.elapsed_ms(a, b) for a, b in pairs]


def do_bench_us(
    fn: Callable[[], Any],
    backend: EventBackend,
    warmup_ms: float = WARMUP_MS,
    rep_ms: float = REP_MS,
    cut_above_us: float | None = None,
    probe_calls: int = PROBE_CALLS,
) -> Timed:
    """triton.testing.do_bench's procedure on ``backend``'s events: one call, then ESTIMATE_CALLS flushed calls
    estimate a call's time; calls fitting ``warmup_ms`` run unflushed and untimed; calls fitting ``rep_ms`` are
    timed one by one after an L2 flush; the median. With ``cut_above_us``, the first ``probe_calls`` timed calls
    decide whether the rest are worth it: if their median is above it, the result is theirs, marked ``cut``."""
    fn()  # module loads, first-touch of the buffers: out of the estimate
    backend.synchronize()
    start = backend.record()
    for _ in range(ESTIMATE_CALLS):
        backend.flush()
        fn()
    end = backend.record()
    backend.synchronize()
    estimate_ms = max(backend.elapsed_ms(start, end) / ESTIMATE_CALLS, 1e-6)
    n_warmup = max(1, int(warmup_ms / estimate_ms))
    n_repeat = max(1, int(rep_ms / estimate_ms))
    for _ in range(n_warmup):
        fn()
    first = n_repeat if cut_above_us is None else min(max(probe_calls, 1), n_repeat)
    times = _flushed_calls(fn, backend, first)
    if cut_above_us is not None and first < n_repeat:
        probe_us = 1000.0 * statistics.median(times)
        if probe_us > cut_above_us:
            return Timed(probe_us, len(times), cut=True)
        times += _flushed_calls(fn, backend, n_repeat - first)
    return Timed(1000.0 * statistics.median(times), len(times))


def torch_backend() -> EventBackend:
    import torch

    flush_buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def record() -> Any:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def flush() -> None:
        flush_buf.zero_()

    return EventBackend(
        flush=flush,
        record=record,
        elapsed_ms=lambda a, b: float(a.elapsed_time(b)),
        synchronize=torch.cuda.synchronize,
    )


def driver_backend(ordinal: int = 0, stream: int = 0) -> EventBackend:
    """The same method through the CUDA driver API (no torch): the flush buffer from dqgen.run.device, flushed
    with cuMemsetD32Async, events recorded on ``stream``. ``close()`` frees the buffer."""
    from cuda.bindings import driver

    from . import device as dev

    flush_buf = dev.DeviceBuffer(FLUSH_BYTES, ordinal)

    def flush() -> None:
        dev._check(driver.cuMemsetD32Async(flush_buf.ptr, 0, FLUSH_BYTES // 4, stream), "cuMemsetD32Async")

    def record() -> Any:
        e = dev._check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")
        dev._check(driver.cuEventRecord(e, stream), "cuEventRecord")
        return e

    def elapsed(a: Any, b: Any) -> float:
        ms = float(dev._check(driver.cuEventElapsedTime(a, b), "cuEventElapsedTime"))
        driver.cuEventDestroy(a)
        driver.cuEventDestroy(b)
        return ms

    return EventBackend(
        flush=flush,
        record=record,
        elapsed_ms=elapsed,
        synchronize=lambda: dev._check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize"),
        close=flush_buf.close,
    )


_FLUSHED = "one call after an L2 flush (256 MB written), CUDA events around it, median"


def events_here() -> str:
    """What :func:`single_call_us` times with on this machine: "triton" (do_bench itself) where triton is
    installed, else "torch" (its events), else "driver" (the driver API's). Looks, without importing either."""
    for name in ("triton", "torch"):
        if importlib.util.find_spec(name) is not None:
            return name
    return "driver"


def method(events: str | None = None) -> str:
    """The timing method in words (for reports): that of :func:`single_call_us` on this machine when ``events`` is
    None, else that of :func:`do_bench_us` on "torch" or "driver" events (the tuner: "driver")."""
    events = events or events_here()
    if events == "triton":
        return f"triton.testing.do_bench: {_FLUSHED}"
    if events == "torch":
        return f"do_bench's procedure with torch CUDA events: {_FLUSHED}"
    if events == "driver":
        return f"do_bench's procedure with driver-API CUDA events (cuMemsetD32Async flush): {_FLUSHED}"
    raise ValueError(f"events: expected 'triton', 'torch' or 'driver', got {events!r}")


def single_call_us(fn: Callable[[], Any], warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS) -> float:
    """Median microseconds of one call of ``fn`` after an L2 flush, on the current stream (``warmup_ms`` /
    ``rep_ms``: do_bench's time budgets)."""
    events = events_here()
    if events == "triton":
        from triton.testing import do_bench

        return 1000.0 * float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    backend = torch_backend() if events == "torch" else driver_backend()
    try:
        return do_bench_us(fn, backend, warmup_ms, rep_ms).us
    finally:
        backend.close()


def graph_us(fn: Callable[[int], Any], nsets: int, reps: int = 20, calls: int = 20) -> float:
    """Back-to-back figure (second column only): ``calls`` calls rotating over ``nsets`` input sets
    captured in one CUDA graph, each replay timed with events; median replay / ``calls``."""
    import torch

    for i in range(max(nsets, 3)):
        fn(i % nsets)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(0)  # a warm-up on the capture stream, as torch recommends
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fn(i % nsets)
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del graph
    return 1000.0 * statistics.median(times) / calls


#: Weight copies a graph of back-to-back calls rotates over (graph_copies): at least this many, at most MAX_COPIES.
MIN_COPIES = 4
MAX_COPIES = 64


def graph_copies(weight_bytes: int, l2_bytes: int) -> int:
    """Copies of a weight whose bytes pass three times the L2, so that each call of a graph rotating over them reads
    its weight from memory, as the next layer's linear does in a model (MIN_COPIES..MAX_COPIES)."""
    return max(MIN_COPIES, min(MAX_COPIES, -(-3 * l2_bytes // max(weight_bytes, 1))))


def keep_tuned(default: str, us: dict[str, float], margin: float = KEEP_MARGIN) -> str:
    """The variant to launch: the fastest candidate if it beats ``default`` by at least ``margin``
    of the default's time, else the default (a tie or a small win is noise, and never worth a loss)."""
    if default not in us:
        raise ValueError(f"default variant {default!r} was not timed (timed: {sorted(us)})")
    best = min(us, key=lambda name: us[name])
    return best if us[best] <= (1.0 - margin) * us[default] else default


#: Rounds of the tuner's confirmation: the screen's winner and the default timed alternately, so a drift of the
#: GPU's clocks or a noisy neighbour hits both alike.
CONFIRM_ROUNDS = 5


def confirm_tuned(
    default: str,
    candidate: str,
    time_us: Callable[[str], float],
    rounds: int = CONFIRM_ROUNDS,
    margin: float = KEEP_MARGIN,
) -> bool:
    """Whether ``candidate`` (the screen's winner) really beats ``default``: timed alternately ``rounds`` times, its
    median ratio to the default must be at most 1 - ``margin``. One screen per variant is not enough at small
    shapes, where one flushed call's spread is a few percent: a winner by noise would be kept and lose later."""
    if rounds < 1:
        raise ValueError(f"rounds: expected at least 1, got {rounds}")
    if candidate == default:
        return False
    ratios = []
    for i in range(rounds):
        order = (default, candidate) if i % 2 == 0 else (candidate, default)
        t = {name: time_us(name) for name in order}
        ratios.append(t[candidate] / t[default])
    return statistics.median(ratios) <= 1.0 - margin
