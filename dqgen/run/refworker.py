"""The GPU check's reference outputs, computed in a worker process that `dqgen build` starts first.

On a fresh machine numba compiles dqgen/reference.py's functions the first time they run: seconds that the GPU
check used to wait for. The check's inputs are fixed by their seeds (``gpucheck.check_inputs``), so a worker can
make the same inputs and their reference outputs while the parent proves, compiles and tunes. numba's compile holds
the GIL for most of its work, so a thread would take that time from the main thread: a process it is, a fresh
interpreter (fork + exec, never a bare fork: the parent may already hold a CUDA context or NVRTC state).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.spec import Spec

#: (K, N, seed) of one checked problem.
CheckShape = tuple[int, int, int]
#: Seconds the parent waits for the worker at check time before it gives up (a cold numba compile takes a few).
DEFAULT_TIMEOUT_S = 300.0


class ReferenceWorkerError(RuntimeError):
    """The worker failed, died or timed out; the message is one line."""


def reference_outputs(spec: Spec, problems: Sequence[CheckShape]) -> list[np.ndarray]:
    """The reference output of each problem, made from the same seeded inputs as the GPU check."""
    from ..check.reference import dequantize_reference
    from .gpucheck import check_inputs

    outs = []
    for K, N, seed in problems:
        q, s, z, gi, gsc = check_inputs(spec, K, N, seed)
        outs.append(dequantize_reference(spec, q, s, z, gi, global_scale=gsc))
    return outs


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def serve() -> None:
    """The worker's side: ``(work, spec, problems)`` pickled on stdin; ``(status, result or error line, finish
    time)`` pickled on stdout."""
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a print in the work must not corrupt the answer
    try:
        work, spec, problems = pickle.load(sys.stdin.buffer)
        answer = ("ok", work(spec, problems), time.time())
    except BaseException as e:  # every failure goes back as a line: the parent must never wait for a dead child
        answer = ("error", _one_line(e), time.time())
    pickle.dump(answer, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()
    # EOF for the parent now, not after this interpreter's teardown (numba's LLVM takes a few tenths of a second)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


#: The environment variable that carries the parent's sys.path to the worker (JSON).
PATH_VAR = "DQGEN_REFWORKER_SYS_PATH"
#: The worker's program: its sys.path becomes the parent's dqgen's folder, then the parent's sys.path in its order
#: (PYTHONPATH would put every entry before the child's own site-packages; `-c` adds "" first).
_SERVE = (
    "import json, os, sys\nsys.path[:] = json.loads(os.environ['" + PATH_VAR + "'])\n"
    "from dqgen.run.refworker import serve\nserve()"
)


class ReferenceJob:
    """``work(spec, problems)`` running in a fresh Python process from construction; :meth:`result` collects it.

    A plain subprocess (fork + exec at once) rather than multiprocessing's spawn: spawn re-imports the parent's main
    script in the child, which fails for a user's script that calls the build without a ``__main__`` guard."""

    def __init__(
        self,
        spec: Spec,
        problems: Sequence[CheckShape],
        work: Callable[[Spec, Sequence[CheckShape]], Any] = reference_outputs,
    ) -> None:
        self._started_at = time.time()  # wall clock: the child's finishing time is compared with it
        self.problems = list(problems)
        env = dict(os.environ)
        # the child imports dqgen from the folder this process's dqgen came from (first: this sys.path may list a
        # checkout before the installed package, entered after dqgen was imported, as pytest does), then ``work``'s
        # module from this sys.path in its order (its "" is the current folder)
        package_parent = str(Path(__file__).resolve().parents[2])
        env[PATH_VAR] = json.dumps([package_parent, *(p or os.getcwd() for p in sys.path)])
        self._proc: subprocess.Popen[bytes] | None = None
        self._start_error = ""
        with tempfile.TemporaryFile() as job:  # the child reads its job from a file: nothing to close or flush here
            pickle.dump((work, spec, self.problems), job, protocol=pickle.HIGHEST_PROTOCOL)
            job.seek(0)
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", _SERVE],
                    stdin=job,
                    stdout=subprocess.PIPE,
                    env=env,
                )
            except OSError as e:  # reported by result(), where the check would use the arrays
                self._start_error = f"reference worker: cannot start {sys.executable or 'Python'}: {_one_line(e)}"
        #: wall seconds from the start until the worker's result was ready (set by result()): the step's own time,
        #: which overlaps the parent's steps
        self.seconds: float | None = None

    def result(self, timeout: float = DEFAULT_TIMEOUT_S) -> Any:
        """The worker's return value; a ReferenceWorkerError (one line) if it raised, died or took ``timeout`` s."""
        if self._proc is None:
            raise ReferenceWorkerError(self._start_error)
        try:
            data = self._read_answer(timeout)
            try:
                status, value, finished_at = pickle.loads(data)
            except Exception:
                self._proc.wait(5)
                raise ReferenceWorkerError(
                    f"reference worker: the process ended (exit code {self._proc.returncode}) without a result"
                ) from None
            self.seconds = max(0.0, finished_at - self._started_at)
            if status != "ok":
                raise ReferenceWorkerError(f"reference worker: {value}")
            return value
        finally:
            self.close()

    def _read_answer(self, timeout: float) -> bytes:
        """Everything the child writes until it closes its stdout, or a ReferenceWorkerError after ``timeout`` s."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise ReferenceWorkerError(f"reference worker: no result after {timeout:g} s (stopped it)")
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)

    def close(self) -> None:
        """Stop the worker if it still runs (an early stop of the build, or a timeout)."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


# --------------------------------------------------------------------------- remembered reference outputs
# The check's inputs are fixed by their seeds, so the reference output of a (spec, problem) never changes while
# the code that makes it does not. A build stores the SHA-256 of each output; a later build of the same spec
# compares the GPU's output with that digest and starts no worker (a mismatch recomputes the reference in
# process, to name the first differing element). NaNs are hashed as one pattern: the check counts any NaN equal
# to any NaN (the GPU writes PTX's canonical NaN, the reference numpy's).

#: The files whose code decides a reference output: the number formats, the layout, the reference itself and the
#: seeded input generators.
_REFERENCE_CODE = ("core/*.py", "layout/*.py", "check/reference.py", "run/inputs.py", "run/gpucheck.py")


@functools.cache
def _reference_code_digest() -> str:
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(p for pattern in _REFERENCE_CODE for p in root.glob(pattern)):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _library_versions() -> dict[str, str]:
    """The installed versions of what else decides a reference output: numpy makes the seeded inputs, numba and
    ml_dtypes compute and convert (read from the package metadata: importing numba would cost a cached build)."""
    import importlib.metadata

    versions = {}
    for name in ("numpy", "numba", "ml_dtypes"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # installed without metadata: still a stable key
            versions[name] = "unknown"
    return versions


def canonical_digest(spec: Spec, out: np.ndarray) -> str:
    """SHA-256 of an fp16/bf16 output with every NaN replaced by one pattern (0x7FFF)."""
    t = spec.target_type
    exp_mask = ((1 << t.ebits) - 1) << t.mbits
    man_mask = (1 << t.mbits) - 1
    bits = np.ascontiguousarray(out).view(np.uint16).copy()
    bits[((bits & exp_mask) == exp_mask) & ((bits & man_mask) != 0)] = 0x7FFF
    return hashlib.sha256(bits.tobytes()).hexdigest()


def _digest_path(spec: Spec, problem: CheckShape, cache_dir: Path | None) -> Path:
    from ..emit.nvrtc import default_cache_dir

    what = [_reference_code_digest(), _library_versions(), spec.model_dump(mode="json"), list(problem)]
    key = hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return (cache_dir or default_cache_dir()) / "reference" / f"{key[:40]}.sha256"


def remembered_digests(spec: Spec, problems: Sequence[CheckShape], cache_dir: Path | None = None) -> list[str] | None:
    """The stored digest of every problem's reference output, or None if any is missing or unreadable."""
    digests = []
    for problem in problems:
        try:
            text = _digest_path(spec, problem, cache_dir).read_text().strip()
        except OSError:
            return None
        if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
            return None  # a damaged file: recompute rather than trust it
        digests.append(text)
    return digests


def remember_digests(
    spec: Spec, problems: Sequence[CheckShape], outs: Sequence[np.ndarray], cache_dir: Path | None = None
) -> None:
    """Store each reference output's digest (whole files or none; an unwritable cache only costs the next build)."""
    from ..core.files import write_whole

    for problem, out in zip(problems, outs, strict=True):
        with contextlib.suppress(OSError):
            write_whole(_digest_path(spec, problem, cache_dir), canonical_digest(spec, out) + "\n")
