"""``dqgen build``: solve, prove, render, compile and (with a GPU) check one spec."""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.spec import Spec
from ..emit.nvrtc import CompileError, compile_source, nvrtc_version
from ..emit.pipeline import Artifact, compile_artifact
from ..ir.magic import fmt_num
from ..ir.plan import Plan
from ..run import device as dev
from ..solve.solver import NoPlanError

if TYPE_CHECKING:
    from ..run.refworker import ReferenceJob

#: An integer -> float conversion (cvt.rn.f16.s32, cvt.rn.f32.u32, ...): the slow path the magic numbers avoid.
INT_TO_FLOAT_CVT = re.compile(r"\bcvt(?:\.\w+)*\.(?:f16|bf16|f32|f64)(?:x2)?\.[su](?:8|16|32|64)\b")


def ptx_problems(plan: Plan, ptx: str) -> list[str]:
    """The PTX must carry every instruction of the Plan and no integer -> float cvt."""
    problems = [f"PTX lacks {m}" for m in sorted({op.opcode.ptx for op in plan.ops}) if m not in ptx]
    cvts = sorted({m.group(0) for m in INT_TO_FLOAT_CVT.finditer(ptx)})
    return problems + [f"PTX has an integer->float conversion: {c}" for c in cvts]


def write_sources(artifact: Artifact, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    name = artifact.spec.name
    cu, cuh = out_dir / f"{name}.cu", out_dir / f"{name}.cuh"
    cu.write_text(artifact.source)
    cuh.write_text(artifact.header)
    return cu, cuh


#: Random words of the build's proof, besides every code at every lane (and every zero): the 10^6 that the
#: generated header promises. The pipeline stores a passed proof on disk, so a cached build does not prove again.
BUILD_WORDS = 1_000_000


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
    report: dict = {"spec": spec.name, "arch": arch, "ok": True, "steps": {}, "seconds": {}}
    steps, seconds = report["steps"], report["seconds"]
    t_start = time.perf_counter()
    use_gpu = dev.gpu_available() if gpu is None else gpu
    reference, digests = None, None
    report["overlapped"] = dict(OVERLAPPED)
    if use_gpu:
        from ..run.gpucheck import build_shapes
        from ..run.refworker import ReferenceJob, remembered_digests

        problems = [(K, N, i) for i, (K, N) in enumerate(build_shapes(spec))]
        digests = remembered_digests(spec, problems)  # an earlier build's reference outputs, as SHA-256
        if digests is None:
            # first of all: a fresh machine's numba compile of the reference runs beside every step until the check
            reference = ReferenceJob(spec, problems)
            report["overlapped"]["reference"] = REFERENCE_OVERLAP
    seconds["start"] = round(time.perf_counter() - t_start, 4)  # GPU detection (cuInit), the worker's launch
    try:
        _build_steps(spec, arch, out_dir, words, progress, report, use_gpu, reference, digests)
    finally:
        if reference is not None:
            reference.close()
    seconds["total"] = round(time.perf_counter() - t_start, 4)
    report["ok"] = all(s["ok"] for s in steps.values())
    return report


#: Steps that run beside others, and with what: `seconds` holds each step's own wall time, so the steps' sum exceeds
#: `seconds.total` (the build's wall time).
OVERLAPPED = {"compile": "a thread beside proof (NVRTC releases the GIL)"}
REFERENCE_OVERLAP = (
    "a worker process from the build's start until its arrays were ready; gpu_check includes reference_wait"
)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    return fn(), round(time.perf_counter() - t0, 4)


def _compile_step(plan: Plan, spec: Spec, source: str, cu: Path, arch: str, out_dir: Path) -> tuple[dict, Path | None]:
    """One NVRTC run: the cubin (loaded by the GPU check and the tuner) and the PTX it was made from."""
    try:
        t0 = time.perf_counter()
        ptx = cubin = compile_source(source, arch=arch, want="cubin", name=cu.name, source_path=str(cu), with_ptx=True)
        ptx_path = out_dir / f"{spec.name}.{arch}.ptx"
        assert ptx.ptx is not None
        ptx_path.write_text(ptx.ptx)
        problems = ptx_problems(plan, ptx.ptx)
        version = ".".join(map(str, nvrtc_version()))
        return {
            "ok": not problems,
            "line": f"NVRTC {version}: PTX + cubin for {arch} in {time.perf_counter() - t0:.2f} s"
            + (" (cache hit)" if ptx.cache_hit and cubin.cache_hit else ""),
            "problems": problems,
        }, ptx_path
    except CompileError as e:
        return {"ok": False, "line": "NVRTC failed", "problems": [str(e)]}, None


def _make_context() -> None:
    """The GPU's primary context, made while the proof runs; a later primary_context() waits for it (its lock).
    cuInit first, outside that lock: primary_context() would otherwise take the lock twice."""
    if dev.gpu_available():
        dev.primary_context(0)


def _build_steps(
    spec: Spec,
    arch: str,
    out_dir: Path,
    words: int,
    progress: Callable[[int, int], None] | None,
    report: dict,
    use_gpu: bool,
    reference: ReferenceJob | None,
    digests: list[str] | None = None,
) -> None:
    steps, seconds = report["steps"], report["seconds"]
    try:
        # solved and rendered once per process (dqgen.emit.pipeline); the proof comes below, beside NVRTC
        artifact, seconds["solve"] = _timed(lambda: compile_artifact(spec))
    except NoPlanError as e:
        raise ValueError(str(e)) from None
    plan, source = artifact.plan, artifact.source
    report["strategy"] = plan.strategy
    report["ops_per_8"] = {s: fmt_num(plan.per8(s)) for s in ("convert", "scale")}
    report["zero_ops_per_word"] = plan.count("zero")
    report["scale_prep_ops"] = plan.count("scale_prep")  # once per block scale (MXFP4 / NVFP4)
    report["constants"] = [{"hex": c.hex, "why": c.why} for c in plan.constants()]
    (cu, cuh), seconds["render"] = _timed(lambda: write_sources(artifact, out_dir))
    report["files"] = [str(cu), str(cuh)]
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        # NVRTC (and, with a GPU, the context's creation) release the GIL: they run while the proof holds it
        compiled = pool.submit(_timed, lambda: _compile_step(plan, spec, source, cu, arch, out_dir))
        if use_gpu:
            pool.submit(_make_context)
        # memoized on disk by the pipeline: a cached build does not prove again
        proof, seconds["proof"] = _timed(lambda: compile_artifact(spec, proof_words=words, progress=progress).proof)
        assert proof is not None
        steps["proof"] = {"ok": proof.ok, "line": proof.line(), "failures": proof.failures}
        (steps["compile"], ptx_path), seconds["compile"] = compiled.result()
    finally:
        pool.shutdown(wait=False)  # the context, if still being made, is waited for where the GPU step needs it
    if ptx_path is not None:
        report["files"].append(str(ptx_path))
    t0 = time.perf_counter()
    if not use_gpu:
        steps["gpu"] = {"ok": True, "skipped": True, "line": "no GPU: skipped"}
    else:
        steps["gpu"] = gpu_step(artifact, seconds, reference, digests)
    seconds["gpu"] = round(time.perf_counter() - t0, 4)


def gpu_step(
    artifact: Artifact,
    seconds: dict | None = None,
    reference: ReferenceJob | None = None,
    digests: list[str] | None = None,
) -> dict:
    """Bit-exact checks against the reference on GPU 0 (driver-API memory: no torch needed), then tuning where
    this GPU has not tuned this kernel. ``reference`` (the build's worker) supplies the reference outputs, else
    ``digests`` (an earlier build's SHA-256 of them) stand in, else they are computed here. ``seconds`` gets the
    check's and the tuner's times."""
    from ..emit.render import Variant, kernel_name
    from ..run.gpucheck import CheckResult, build_shapes, compare, run_shape
    from ..run.refworker import ReferenceWorkerError, canonical_digest, remember_digests
    from ..run.runtime import Kernel
    from ..run.tune import load_tuning, tune

    t0 = time.perf_counter()
    spec = artifact.spec
    kernel = Kernel(artifact)
    kernel.load_all(0)  # the whole set's cubin, just compiled for the compile step: the tuner times every variant
    problems = [(K, N, i) for i, (K, N) in enumerate(build_shapes(spec))]
    assert reference is None or reference.problems == problems, "the reference worker was given other problems"
    runs = [run_shape(kernel, K, N, seed=i) for K, N, i in problems]
    t1 = time.perf_counter()
    arch = dev.device_arch(0)
    # tuning first: the reference worker gets the tuner's time to finish its arrays
    tune_lines = []
    if load_tuning(kernel, 0) is not None:
        tune_lines.append("launch parameters: tuned earlier (cached)")
    elif "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        tune_lines.append("launch parameters: default rule (tuning times with torch, which is not installed)")
    else:
        t = tune(kernel, 0)
        for cls, b in t["best"].items():
            K, N = t["shapes"][cls]
            unit = "words" if spec.packing.axis == "N" else "columns"
            # the kept variant's time: the screen's fastest may be one that lost its confirmation to the default
            kept_us = t["us"][cls][kernel_name(spec, Variant(**b))]
            tune_lines.append(
                f"tuned launch ({cls}): {b['rows']} rows x {b['vec']} {unit} per thread"
                f"{', streaming stores' if b['stream'] else ''} ({kept_us:.0f} us at {K}x{N})"
            )
    t2 = time.perf_counter()
    wants: list[Any] = [None] * len(runs)
    if reference is not None:
        try:
            wants = reference.result()
        except ReferenceWorkerError as e:
            return {"ok": False, "skipped": False, "line": f"{arch}: {e}"}
        finally:
            if seconds is not None and reference.seconds is not None:
                seconds["reference"] = round(reference.seconds, 4)
    t3 = time.perf_counter()
    if reference is not None:
        remember_digests(spec, problems, wants)
    results = []
    remembered: list[str | None] = list(digests) if digests else [None] * len(runs)
    for r, w, d in zip(runs, wants, remembered, strict=True):
        if d is not None and canonical_digest(spec, r.got) == d:
            results.append(CheckResult(r.K, r.N, True, 0, r.seconds))
        else:  # no remembered digest, or a differing one: the reference itself names the first mismatch
            results.append(compare(kernel, r, w))
    lines = [f"{r.K}x{r.N}: {'bit-exact' if r.ok else f'{r.mismatches} mismatches, {r.detail}'}" for r in results]
    if seconds is not None:
        seconds["gpu_check"] = round(time.perf_counter() - t2 + t1 - t0, 4)
        seconds["reference_wait"] = round(t3 - t2, 4)
        seconds["tune"] = round(t2 - t1, 4)
    return {
        "ok": all(r.ok for r in results),
        "skipped": False,
        "line": f"{arch}, vs numba reference{' (its remembered output digests)' if digests else ''}: "
        + "; ".join(lines + tune_lines),
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
