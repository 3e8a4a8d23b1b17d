"""How dqgen times a kernel, shared by ``dqgen bench`` and the launch tuner.

The primary figure is one call as it happens in a model: the L2 cache flushed first (a buffer larger
than L2 written), CUDA events around the one call, the median of many such calls. This is what
``triton.testing.do_bench`` does, and it is used when triton is importable; otherwise the same method
runs by hand, with torch's events when torch is present and the driver API's events when it is not.

Back-to-back CUDA-graph replay (:func:`graph_us`) overlaps one call's tail with the next call's start,
which a dequantize-then-matmul never has; it is only reported as a labelled second column.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Bytes written to evict L2 before each timed call: larger than any current GPU's L2 (H100: 50 MB).
FLUSH_BYTES = 256 << 20
#: do_bench's budgets in milliseconds: warm-up, then timed calls (each after a flush).
WARMUP_MS = 10.0
REP_MS = 40.0
#: The tuner's budgets: ten-odd variants at two shapes inside a cold `dqgen build`. 15 ms is still 50+ flushed
#: calls at 8192 x 28672 (about 0.3 ms each with the flush), enough for a median against a 2% keep margin.
TUNE_WARMUP_MS = 3.0
TUNE_REP_MS = 15.0
#: The by-hand method's call counts (it cannot size itself by time before the first measurement).
WARMUP_CALLS = 5
TIMED_CALLS = 100
#: A tuned variant must beat the default by this fraction of the default's time to be kept.
KEEP_MARGIN = 0.02


@dataclass(frozen=True)
class EventBackend:
    """What the by-hand method needs from a GPU runtime: evict L2, record an event on the current
    stream, read the milliseconds between two recorded events, wait for the device."""

    flush: Callable[[], None]
    record: Callable[[], Any]
    elapsed_ms: Callable[[Any, Any], float]
    synchronize: Callable[[], None]


def median_single_call_us(
    fn: Callable[[], Any], backend: EventBackend, warmup: int = WARMUP_CALLS, calls: int = TIMED_CALLS
) -> float:
    """Median microseconds of ``fn``, each call alone after an L2 flush, events around the call only."""
    if calls < 1:
        raise ValueError(f"calls: expected at least 1 timed call, got {calls}")
    for _ in range(warmup):  # module loads, JIT, allocator: out of the numbers
        fn()
    backend.synchronize()
    pairs = []
    for _ in range(calls):
        backend.flush()
        start = backend.record()
        fn()
        pairs.append((start, backend.record()))
    backend.synchronize()
    return 1000.0 * statistics.median(backend.elapsed_ms(a, b) for a, b in pairs)


def torch_backend() -> EventBackend:
    import torch

    flush_buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def record() -> Any:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    return EventBackend(
        flush=flush_buf.zero_,
        record=record,
        elapsed_ms=lambda a, b: float(a.elapsed_time(b)),
        synchronize=torch.cuda.synchronize,
    )


def driver_backend(ordinal: int = 0, stream: int = 0) -> EventBackend:
    """The same method through the CUDA driver API, for machines without torch."""
    from cuda.bindings import driver

    from . import device as dev

    dev.primary_context(ordinal)
    flush_ptr = dev._check(driver.cuMemAlloc(FLUSH_BYTES), "cuMemAlloc(L2 flush buffer)")

    def flush() -> None:
        dev._check(driver.cuMemsetD32Async(flush_ptr, 0, FLUSH_BYTES // 4, stream), "cuMemsetD32Async")

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
    )


def method() -> str:
    """The method :func:`single_call_us` uses on this machine, in words (for reports)."""
    try:
        import triton  # noqa: F401

        return "triton.testing.do_bench: one call after an L2 flush (256 MB written), CUDA events, median"
    except ImportError:
        pass
    try:
        import torch  # noqa: F401

        return "one call after an L2 flush (256 MB written), torch CUDA events, median of 100"
    except ImportError:
        return "one call after an L2 flush (256 MB written), driver-API CUDA events, median of 100"


def single_call_us(fn: Callable[[], Any], warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS) -> float:
    """Median microseconds of one call of ``fn`` after an L2 flush, on the current stream (``warmup_ms`` /
    ``rep_ms``: do_bench's time budgets)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return 1000.0 * float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    try:
        backend = torch_backend()
    except ImportError:
        backend = driver_backend()
    return median_single_call_us(fn, backend)


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
