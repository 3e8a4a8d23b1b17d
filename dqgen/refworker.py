"""The GPU check's reference outputs, computed in a worker process that `dqgen build` starts first.

On a fresh machine numba compiles dqgen/reference.py's functions the first time they run: seconds that the GPU
check used to wait for. The check's inputs are fixed by their seeds (``gpucheck.check_inputs``), so a worker can
make the same inputs and their reference outputs while the parent proves, compiles and tunes. numba's compile holds
the GIL for most of its work, so a thread would take that time from the main thread: a process it is. It is spawned
(never forked: the parent may already hold a CUDA context or NVRTC state, which a fork would copy half-alive).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from .spec import Spec

#: (K, N, seed) of one checked problem.
Problem = tuple[int, int, int]
#: Seconds the parent waits for the worker at check time before it gives up (a cold numba compile takes a few).
DEFAULT_TIMEOUT_S = 600.0


class ReferenceWorkerError(RuntimeError):
    """The worker failed, died or timed out; the message is one line."""


def reference_outputs(spec: Spec, problems: Sequence[Problem]) -> list[np.ndarray]:
    """The reference output of each problem, made from the same seeded inputs as the GPU check."""
    from .gpucheck import check_inputs
    from .reference import dequantize_reference

    outs = []
    for K, N, seed in problems:
        q, s, z, gi, gsc = check_inputs(spec, K, N, seed)
        outs.append(dequantize_reference(spec, q, s, z, gi, global_scale=gsc))
    return outs


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _serve(conn: Connection, work: Callable[[Spec, Sequence[Problem]], Any], spec: Spec, problems: list) -> None:
    try:
        result = work(spec, problems)
    except BaseException as e:  # every failure goes back as a line: the parent must never wait for a dead child
        conn.send(("error", _one_line(e), time.time()))
    else:
        conn.send(("ok", result, time.time()))
    conn.close()


class ReferenceJob:
    """``work(spec, problems)`` running in a spawned process from construction; :meth:`result` collects it."""

    def __init__(
        self,
        spec: Spec,
        problems: Sequence[Problem],
        work: Callable[[Spec, Sequence[Problem]], Any] = reference_outputs,
    ) -> None:
        self._started_at = time.time()  # wall clock: the child's finishing time is compared with it
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=False)
        # daemon: a parent that stops early (an error, Ctrl-C) does not wait for the child at exit
        self._proc = ctx.Process(target=_serve, args=(child, work, spec, list(problems)), daemon=True)
        self._proc.start()
        child.close()  # the parent's copy: once the child exits, reading sees EOF instead of blocking
        #: wall seconds from the start until the worker's result was ready (set by result()): the step's own time,
        #: which overlaps the parent's steps
        self.seconds: float | None = None

    def result(self, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
        """The worker's return value; a ReferenceWorkerError (one line) if it raised, died or took ``timeout`` s."""
        try:
            if not self._conn.poll(timeout):
                raise ReferenceWorkerError(f"reference worker: no result after {timeout:g} s (stopped it)")
            try:
                status, value, finished_at = self._conn.recv()
            except (EOFError, OSError):
                self._proc.join(5)
                raise ReferenceWorkerError(
                    f"reference worker: the process ended (exit code {self._proc.exitcode}) without a result"
                ) from None
            self.seconds = max(0.0, finished_at - self._started_at)
            if status != "ok":
                raise ReferenceWorkerError(f"reference worker: {value}")
            return value
        finally:
            self.close()

    def close(self) -> None:
        """Stop the worker if it still runs (an early stop of the build, or a timeout) and release the pipe."""
        if self._proc.is_alive():
            self._proc.join(0.5)  # a child that has just sent its result exits by itself
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)
        self._conn.close()
