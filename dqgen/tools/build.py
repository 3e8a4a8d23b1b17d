"""``dqgen build``: solve, prove, render, compile and (with a GPU) check and tune one spec.

Three things run at once, as their data allow:
- the main thread solves, then proves (numpy array work, which releases the GIL);
- a GPU thread compiles with NVRTC (which releases the GIL), then runs the checked problems on the GPU and tunes
  the launch (driver API only: no torch, no triton);
- a worker process (dqgen.run.refworker), started first, computes the reference outputs (numba's cold compile
  holds its own interpreter's GIL).
Nothing is written before the proof has passed: a failed proof leaves no sources, PTX, tuning or digests behind.

The heavier modules (NVRTC and driver bindings, the solver, the templates) are imported after the worker started.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.spec import Spec
from ..kernels.dequant import whole_source

if TYPE_CHECKING:
    from ..emit.pipeline import Artifact
    from ..ir.plan import Plan
    from ..run.gpucheck import GpuRun
    from ..run.refworker import CheckShape, ReferenceJob
    from ..run.runtime import Kernel

#: An integer -> float conversion (cvt.rn.f16.s32, cvt.rn.f32.u32, ...): the slow path the magic numbers avoid.
INT_TO_FLOAT_CVT = re.compile(r"\bcvt(?:\.\w+)*\.(?:f16|bf16|f32|f64)(?:x2)?\.[su](?:8|16|32|64)\b")


def compile_artifact(spec: Spec, **kwargs: Any) -> Artifact:
    """dqgen.emit.pipeline.compile_artifact, imported on first use (after the reference worker has started)."""
    from ..emit.pipeline import compile_artifact as pipeline_compile_artifact

    return pipeline_compile_artifact(spec, **kwargs)


def ptx_problems(plan: Plan, ptx: str) -> list[str]:
    """The PTX must carry every instruction of the Plan and no integer -> float cvt."""
    problems = [f"PTX lacks {m}" for m in sorted({op.opcode.ptx for op in plan.ops}) if m not in ptx]
    cvts = sorted({m.group(0) for m in INT_TO_FLOAT_CVT.finditer(ptx)})
    return problems + [f"PTX has an integer->float conversion: {c}" for c in cvts]


def write_sources(artifact: Artifact, out_dir: Path) -> tuple[Path, Path]:
    cu, cuh = source_paths(artifact.spec, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cu.write_text(whole_source(artifact))
    cuh.write_text(artifact.header)
    return cu, cuh


def source_paths(spec: Spec, out_dir: Path) -> tuple[Path, Path]:
    return out_dir / f"{spec.name}.cu", out_dir / f"{spec.name}.cuh"


#: Random words of the build's proof, besides every code at every lane (and every zero): the 10^6 that the
#: generated header promises. The pipeline stores a passed proof on disk, so a cached build does not prove again.
BUILD_WORDS = 1_000_000

#: Steps that run beside others, and with what: `seconds` holds each step's own wall time. The main thread's steps
#: (start, solve, proof, gpu_wait, reference_wait, compare, write) are laps of one clock that add up to
#: `seconds.total`; these do not.
OVERLAPPED = {"compile": "the GPU thread from the end of solve, beside the proof (NVRTC releases the GIL)"}
GPU_OVERLAP = {
    "gpu_check": "the GPU thread after compile, beside the proof: the checked problems run on the GPU "
    "(their outputs are compared with the reference on the main thread: compare)",
    "tune": "the GPU thread after gpu_check, beside the proof; the main thread waits for the GPU thread's rest "
    "after the proof: gpu_wait",
}
REFERENCE_OVERLAP = (
    "a worker process from the build's start until its arrays were ready; the main thread waits for its rest: "
    "reference_wait"
)


def _gpu_device_node() -> bool:
    """Whether an NVIDIA driver's device node exists (and CUDA_VISIBLE_DEVICES does not hide every GPU): the chance
    of a GPU, on which the reference worker starts before cuInit (a few tenths of a second) answers; the worker is
    stopped if cuInit then finds none."""
    return os.path.exists("/dev/nvidiactl") and os.environ.get("CUDA_VISIBLE_DEVICES") != ""


def check_out_dir(out_dir: Path) -> None:
    """Raise the OSError that writing into ``out_dir`` would raise, before anything runs: the files are written
    only after the proof has passed, and a bad --out must not cost a build first."""
    probe = out_dir
    while not probe.exists() and probe != probe.parent:  # made at the end, under its nearest existing ancestor
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(probe))
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(probe))


def _start_reference(spec: Spec) -> tuple[ReferenceJob | None, list[str] | None, list[CheckShape]]:
    """The checked problems, an earlier build's digests of their reference outputs if stored, else the worker that
    computes those outputs beside every step until the check."""
    from ..run.gpucheck import build_shapes
    from ..run.refworker import ReferenceJob, remembered_digests

    problems = [(K, N, i) for i, (K, N) in enumerate(build_shapes(spec))]
    digests = remembered_digests(spec, problems)  # an earlier build's reference outputs, as SHA-256
    return (ReferenceJob(spec, problems) if digests is None else None), digests, problems


def build_spec(
    spec: Spec,
    arch: str,
    out_dir: Path,
    words: int = BUILD_WORDS,
    gpu: bool | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    from ..core.spec import ARCH_RE, arch_problem, shown

    # the same check as the spec's arch field, before anything is written
    problem = arch_problem(arch)
    m = ARCH_RE.fullmatch(arch)
    if problem or not m:
        raise ValueError(f"[--arch] got {shown(arch)}; {problem}")
    if int(m.group(1)) < spec.sm:
        raise ValueError(f"[--arch] got {arch}; expected {spec.arch} or newer (the spec's arch field)")
    check_out_dir(out_dir)
    report: dict = {"spec": spec.name, "arch": arch, "ok": True, "steps": {}, "seconds": {}}
    seconds = report["seconds"]
    t_start = time.perf_counter()
    reference: ReferenceJob | None = None
    digests: list[str] | None = None
    problems: list[CheckShape] = []
    started = False
    if gpu or (gpu is None and _gpu_device_node()):
        # first of all: a fresh machine's numba compile of the reference is the build's longest step
        reference, digests, problems = _start_reference(spec)
        started = True
    try:
        if gpu is None:
            from ..run import device as dev

            use_gpu = dev.gpu_available()
        else:
            use_gpu = gpu
        if use_gpu and not started:
            reference, digests, problems = _start_reference(spec)
        elif not use_gpu and reference is not None:
            reference.close()
            reference = None
        report["overlapped"] = dict(OVERLAPPED) | (GPU_OVERLAP if use_gpu else {})
        if reference is not None:
            report["overlapped"]["reference"] = REFERENCE_OVERLAP
        laps = _Laps(seconds, t_start)
        laps.lap("start")  # GPU detection (cuInit), the worker's launch
        _build_steps(spec, arch, out_dir, words, progress, report, laps, use_gpu, reference, digests, problems)
    finally:
        if reference is not None:
            reference.close()
    seconds["total"] = round(time.perf_counter() - t_start, 4)
    report["ok"] = all(s["ok"] for s in report["steps"].values())
    return report


class _Laps:
    """The main thread's steps as consecutive laps of one clock, so that they add up to the build's wall time."""

    def __init__(self, seconds: dict, start: float) -> None:
        self.seconds, self.mark = seconds, start

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self.mark, 4)
        self.mark = now


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    return fn(), round(time.perf_counter() - t0, 4)


def _compile_step(plan: Plan, spec: Spec, source: str, cu: Path, arch: str) -> tuple[dict, str | None]:
    """One NVRTC run: the cubin (loaded by the GPU check and the tuner) and the PTX it was made from (written by
    the main thread once the proof has passed)."""
    from ..emit.nvrtc import CompileError, compile_source, nvrtc_version

    try:
        t0 = time.perf_counter()
        ptx = cubin = compile_source(source, arch=arch, want="cubin", name=cu.name, source_path=str(cu), with_ptx=True)
        assert ptx.ptx is not None
        problems = ptx_problems(plan, ptx.ptx)
        version = ".".join(map(str, nvrtc_version()))
        return {
            "ok": not problems,
            "line": f"NVRTC {version}: PTX + cubin for {arch} in {time.perf_counter() - t0:.2f} s"
            + (" (cache hit)" if ptx.cache_hit and cubin.cache_hit else ""),
            "problems": problems,
        }, ptx.ptx
    except CompileError as e:
        return {"ok": False, "line": "NVRTC failed", "problems": [str(e)]}, None


def _make_context() -> None:
    """The GPU's primary context, made while NVRTC runs; a later primary_context() waits for it (its lock)."""
    from ..run import device as dev

    if dev.gpu_available():
        dev.primary_context(0)


@dataclass
class _GpuThread:
    """What the GPU thread did: the compile step, then (with a GPU and a cubin) the checked problems' outputs and
    the tuner's result, which the main thread saves only once the proof and the check have passed."""

    compile_step: dict = field(default_factory=dict)
    ptx: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    kernel: Kernel | None = None
    runs: list[GpuRun] = field(default_factory=list)
    tuning: dict | None = None  # tune()'s result, not yet saved
    tune_lines: list[str] = field(default_factory=list)


def _gpu_thread(
    artifact: Artifact,
    arch: str,
    cu: Path,
    problems: list[CheckShape],
    context: Future[None] | None,
    stop: threading.Event,
) -> _GpuThread:
    """Compile, then with a GPU (``context`` given) run the checked problems and tune where this GPU has not
    tuned this kernel. Stops before the GPU work, or between two timings of the tuner, once ``stop`` is set."""
    done = _GpuThread()
    (done.compile_step, done.ptx), done.seconds["compile"] = _timed(
        lambda: _compile_step(artifact.plan, artifact.spec, whole_source(artifact), cu, arch)
    )
    if context is None or done.ptx is None or stop.is_set():
        return done
    from ..run import runtime
    from ..run.gpucheck import run_shape

    t0 = time.perf_counter()
    context.result()
    kernel = done.kernel = runtime.Kernel(artifact)
    kernel.load_all(0)  # the whole set's cubin, just compiled for the compile step: the tuner times every variant
    done.runs = [run_shape(kernel, K, N, seed=i) for K, N, i in problems]
    done.seconds["gpu_check"] = round(time.perf_counter() - t0, 4)
    done.tuning, done.tune_lines, done.seconds["tune"] = _tune(kernel, artifact.spec, stop)
    return done


def _tune(kernel: Kernel, spec: Spec, stop: threading.Event) -> tuple[dict | None, list[str], float]:
    """The tuner's result (unsaved), the build's lines about it, and its seconds."""
    from ..kernels.dequant import DequantVariant, kernel_name
    from ..run import tune as tuner

    t0 = time.perf_counter()
    if tuner.load_tuning(kernel.artifact, 0) is not None:
        return None, ["launch parameters: tuned earlier (cached)"], round(time.perf_counter() - t0, 4)
    try:
        t = tuner.tune(kernel.artifact, 0, prepare=kernel.prepare, save=False, stop=stop.is_set)
    except tuner.TuningStopped:
        return None, ["launch parameters: not tuned (the build stopped)"], round(time.perf_counter() - t0, 4)
    lines = []
    for cls, b in t["best"].items():
        K, N = t["shapes"][cls]
        unit = "words" if spec.packing.axis == "N" else "columns"
        # the kept variant's time: the screen's fastest may be one that lost its confirmation to the default
        kept_us = t["us"][cls][kernel_name(spec, DequantVariant(**b))]
        lines.append(
            f"tuned launch ({cls}): {b['rows']} rows x {b['vec']} {unit} per thread"
            f"{', streaming stores' if b['stream'] else ''} ({kept_us:.0f} us at {K}x{N})"
        )
    return t, lines, round(time.perf_counter() - t0, 4)


def _build_steps(
    spec: Spec,
    arch: str,
    out_dir: Path,
    words: int,
    progress: Callable[[int, int], None] | None,
    report: dict,
    laps: _Laps,
    use_gpu: bool,
    reference: ReferenceJob | None,
    digests: list[str] | None,
    problems: list[CheckShape],
) -> None:
    from ..ir.magic import fmt_num
    from ..solve.solver import NoPlanError

    steps, seconds = report["steps"], report["seconds"]
    try:
        # solved and rendered once per process (dqgen.emit.pipeline); the proof comes below, beside the GPU thread
        artifact = compile_artifact(spec)
    except NoPlanError as e:
        raise ValueError(str(e)) from None
    plan = artifact.plan
    report["strategy"] = plan.strategy
    report["ops_per_8"] = {s: fmt_num(plan.per8(s)) for s in ("convert", "scale")}
    report["zero_ops_per_word"] = plan.count("zero")
    report["scale_prep_ops"] = plan.count("scale_prep")  # once per block scale (MXFP4 / NVFP4)
    report["constants"] = [{"hex": c.hex, "why": c.why} for c in plan.constants()]
    report["files"] = []
    cu, _ = source_paths(spec, out_dir)
    laps.lap("solve")
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        context = pool.submit(_make_context) if use_gpu else None
        gpu_job = pool.submit(_gpu_thread, artifact, arch, cu, problems, context, stop)
        # memoized on disk by the pipeline: a cached build does not prove again
        proof = compile_artifact(spec, proof_words=words, progress=progress).proof
        laps.lap("proof")
        assert proof is not None
        steps["proof"] = {"ok": proof.ok, "line": proof.line(), "failures": proof.failures}
        if not proof.ok:
            stop.set()  # the tuner stops at its next timing; nothing below is written
        done = gpu_job.result()
        laps.lap("gpu_wait")
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)  # all done, unless something raised: then do not wait
    steps["compile"] = done.compile_step
    seconds.update(done.seconds)
    if not proof.ok:
        steps["gpu"] = {"ok": True, "skipped": True, "line": "not run: the proof failed"}
        return
    if not use_gpu:
        steps["gpu"] = {"ok": True, "skipped": True, "line": "no GPU: skipped"}
    elif done.kernel is None:
        steps["gpu"] = {"ok": True, "skipped": True, "line": "not run: NVRTC failed"}
    else:
        steps["gpu"] = _check_step(done, seconds, laps, reference, digests, problems)
        if steps["gpu"]["ok"] and done.tuning is not None:
            from ..run.tune import save_tuning

            save_tuning(done.kernel.artifact, 0, done.tuning)
    report["files"] = [str(p) for p in write_sources(artifact, out_dir)]
    if done.ptx is not None:
        ptx_path = out_dir / f"{spec.name}.{arch}.ptx"
        ptx_path.write_text(done.ptx)
        report["files"].append(str(ptx_path))
    laps.lap("write")  # the tuning's cache file included


def _check_step(
    done: _GpuThread,
    seconds: dict,
    laps: _Laps,
    reference: ReferenceJob | None,
    digests: list[str] | None,
    problems: list[CheckShape],
) -> dict:
    """The GPU outputs vs the reference, bit for bit: the worker's outputs, else an earlier build's digests of them
    (a differing digest recomputes the reference here, to name the first mismatch)."""
    from ..run import device as dev
    from ..run.gpucheck import CheckResult, compare
    from ..run.refworker import ReferenceWorkerError, canonical_digest, remember_digests

    assert done.kernel is not None
    spec = done.kernel.spec
    arch = dev.device_arch(0)
    assert reference is None or reference.problems == problems, "the reference worker was given other problems"
    wants: list[Any] = [None] * len(done.runs)
    if reference is not None:
        try:
            wants = reference.result()
        except ReferenceWorkerError as e:
            return {"ok": False, "skipped": False, "line": f"{arch}: {e}"}
        finally:
            laps.lap("reference_wait")
            if reference.seconds is not None:
                seconds["reference"] = round(reference.seconds, 4)
        remember_digests(spec, problems, wants)
    results = []
    remembered: list[str | None] = list(digests) if digests else [None] * len(done.runs)
    for r, w, d in zip(done.runs, wants, remembered, strict=True):
        if d is not None and canonical_digest(spec, r.got) == d:
            results.append(CheckResult(r.K, r.N, True, 0, r.seconds))
        else:  # no remembered digest, or a differing one: the reference itself names the first mismatch
            results.append(compare(done.kernel, r, w))
    laps.lap("compare")  # storing the reference's digests included
    lines = [f"{r.K}x{r.N}: {'bit-exact' if r.ok else f'{r.mismatches} mismatches, {r.detail}'}" for r in results]
    return {
        "ok": all(r.ok for r in results),
        "skipped": False,
        "line": f"{arch}, vs numba reference{' (its remembered output digests)' if digests else ''}: "
        + "; ".join(lines + done.tune_lines),
    }


def print_summary(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    t = Table(title=f"dqgen build {report['spec']} ({report['arch']})", show_header=False)
    t.add_row(
        "plan",
        f"{report['strategy']}: {report['ops_per_8']['convert']} conversion ops per 8 outputs "
        f"(+{report['ops_per_8']['scale']} scale)"
        + (f", {report['zero_ops_per_word']} zero-point ops per zero word" if report["zero_ops_per_word"] else "")
        + (f", {report['scale_prep_ops']} ops per block scale" if report.get("scale_prep_ops") else ""),
    )
    t.add_row("constants", "\n".join(f"{c['hex']}  {c['why']}" for c in report["constants"]))
    for name, step in report["steps"].items():
        extra = "\n".join(step.get("problems", []) + step.get("failures", []))
        # a skipped step's line says so itself ("no GPU: skipped")
        mark = (
            "" if step.get("skipped") else f"[{'green' if step['ok'] else 'red'}]{'OK' if step['ok'] else 'FAILED'}[/] "
        )
        # the line and problems are plain text (NVRTC messages hold [brackets]), only the mark is markup
        t.add_row(name, Text.from_markup(mark) + Text(step["line"] + (f"\n{extra}" if extra else "")))
    t.add_row("files", "\n".join(report["files"]))
    console.print(t)
