"""``dqgen build``: solve, prove, render, compile and (with a GPU) check and tune one spec, and build every matmul
kernel family that takes it (the fused GEMV for every spec, the tensor-core GEMM where it supports the spec).

Three things run at once, as their data allow:
- the main thread solves and renders, then proves (numpy array work, which releases the GIL): the spec's Plan,
  then each family's own converter Plan (the GEMM's ``converter_spec``; the GEMV renders the spec's own);
- a GPU thread compiles the dequantize kernel with NVRTC (which releases the GIL), then runs the checked problems
  on the GPU and tunes the launch (driver API only: no torch, no triton), then runs each matmul family on a few
  shapes against y = x @ dequant_ref(W) (its host code needs torch: without it the families' checks are skipped);
  one thread per matmul family compiles that family's source beside it;
- a worker process (dqgen.run.refworker), started first, computes the reference outputs (numba's cold compile
  holds its own interpreter's GIL).
Nothing is written before every proof has passed and every source has compiled: a failed proof or compile (of any
family) leaves no sources, PTX or tuning behind (a failed proof of the spec's own Plan no digests either).

The heavier modules (NVRTC and driver bindings, the solver, the templates) are imported after the worker started.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.files import write_all_whole
from ..core.spec import Spec
from ..kernels.dequant import whole_source

if TYPE_CHECKING:
    from ..check.prove import ProofResult
    from ..emit.pipeline import Artifact
    from ..ir.plan import Plan
    from ..run import gpucheck
    from ..run.gpucheck import GpuRun
    from ..run.refworker import CheckShape, ReferenceJob
    from ..run.runtime import Kernel

#: An integer -> float conversion (cvt.rn.f16.s32, cvt.rn.f32.u32, ...): the slow path the magic numbers avoid.
INT_TO_FLOAT_CVT = re.compile(r"\bcvt(?:\.\w+)*\.(?:f16|bf16|f32|f64)(?:x2)?\.[su](?:8|16|32|64)\b")


def compile_artifact(spec: Spec, **kwargs: Any) -> Artifact:
    """dqgen.emit.pipeline.compile_artifact, imported on first use (after the reference worker has started)."""
    from ..emit.pipeline import compile_artifact as pipeline_compile_artifact

    return pipeline_compile_artifact(spec, **kwargs)


@dataclass(frozen=True)
class FamilySource:
    """One matmul kernel family's source for a spec, as `dqgen build` proves, compiles, writes and checks it."""

    family: str  # "gemv" | "gemm": its name in the report and in its files' names (<spec>_<family>.cu)
    source: str
    entry_points: tuple[str, ...]  # every kernel the source defines (each must be in the PTX)
    converter: Artifact  # whose proven Plan the source's converter renders (the spec's own, or a derived spec's)
    nvrtc_name: str  # NVRTC's program name: the runtime's for the same source, so that both share a cache entry


def _family_sources(artifact: Artifact) -> list[FamilySource]:
    """The matmul families that take ``artifact``'s spec: the fused GEMV (every spec; the spec's own converter)
    and the tensor-core GEMM where dqgen.run.gemm.supports the spec (the converter of ``converter_spec(spec)``, a
    Plan of its own). The one place the build names the families' renderers and entry points."""
    from ..kernels.gemm import GEMM_ENTRIES, GemmKernelConfig, gemm_entry_name
    from ..kernels.gemm import supports as gemm_supports
    from ..kernels.gemv import GemvConfig, entries, gemv_entry_name
    from ..layout.gemm_trt import converter_spec

    spec = artifact.spec
    gemv = GemvConfig(artifact)  # ValueError naming the target for an s8 spec (no fp16 / bf16 weights to write)
    families = [
        FamilySource(
            "gemv",
            gemv.source(),
            tuple(gemv_entry_name(spec, e) for e in entries(spec)),
            artifact,
            gemv.source_name,  # the loader compiles the same source under this name: the build warms its cache
        )
    ]
    if gemm_supports(spec):
        gemm = GemmKernelConfig(spec)
        families.append(
            FamilySource(
                "gemm",
                gemm.source(),
                tuple(gemm_entry_name(spec, e) for e in GEMM_ENTRIES),
                compile_artifact(converter_spec(spec)),
                gemm.source_name,
            )
        )
    return families


def ptx_problems(plan: Plan, ptx: str, entry_points: tuple[str, ...] = ()) -> list[str]:
    """The PTX must carry every instruction of the Plan, every entry point of its source and no integer -> float
    cvt."""
    problems = [f"PTX lacks {m}" for m in sorted({op.opcode.ptx for op in plan.ops}) if m not in ptx]
    problems += [
        f"PTX lacks entry point {e}" for e in entry_points if not re.search(rf"\.entry\s+{re.escape(e)}\s*\(", ptx)
    ]
    cvts = sorted({m.group(0) for m in INT_TO_FLOAT_CVT.finditer(ptx)})
    return problems + [f"PTX has an integer->float conversion: {c}" for c in cvts]


def source_paths(spec: Spec, out_dir: Path) -> tuple[Path, Path]:
    return out_dir / f"{spec.name}.cu", out_dir / f"{spec.name}.cuh"


def family_paths(spec: Spec, family: str, arch: str, out_dir: Path) -> tuple[Path, Path]:
    """A matmul family's source and PTX beside the dequantize kernel's: <spec>_<family>.cu, .<arch>.ptx."""
    return out_dir / f"{spec.name}_{family}.cu", out_dir / f"{spec.name}_{family}.{arch}.ptx"


def write_all(outputs: list[tuple[Path, str]]) -> list[Path]:
    """Write every file whole, or none (core.files.write_all_whole: all staged beside their paths, then renamed; a
    write that fails, as on a full disk, leaves no new file and an earlier build's files as they were), each with
    the umask's permissions."""
    write_all_whole([(path, text.encode("utf-8")) for path, text in outputs])
    return [path for path, _ in outputs]


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
    report["ok"] = all(s["ok"] for s in report["steps"].values()) and all(f["ok"] for f in report.get("families", []))
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


def _compile_step(
    plan: Plan, source: str, path: Path, arch: str, name: str | None = None, entry_points: tuple[str, ...] = ()
) -> tuple[dict, str | None]:
    """One NVRTC run of a source (written to ``path``; compiled as ``name``, default the path's): the cubin (the
    dequantize kernel's is loaded by the GPU check and the tuner) and the PTX it was made from (written by the main
    thread once every proof has passed and every source compiled)."""
    from ..emit.nvrtc import CompileError, compile_source, nvrtc_version

    t0 = time.perf_counter()
    try:
        res = compile_source(
            source, arch=arch, want="cubin", name=name or path.name, source_path=str(path), with_ptx=True
        )
    except CompileError as e:
        seconds = round(time.perf_counter() - t0, 4)
        return {"ok": False, "line": "NVRTC failed", "problems": [str(e)], "seconds": seconds, "cached": False}, None
    seconds = round(time.perf_counter() - t0, 4)
    assert res.ptx is not None
    problems = ptx_problems(plan, res.ptx, entry_points)
    version = ".".join(map(str, nvrtc_version()))
    return {
        "ok": not problems,
        "line": f"NVRTC {version}: PTX + cubin for {arch} in {seconds:.2f} s{' (cache hit)' if res.cache_hit else ''}",
        "problems": problems,
        "seconds": seconds,
        "cached": res.cache_hit,
    }, res.ptx


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
    matmul: dict[str, dict] = field(default_factory=dict)  # family -> its GPU check's step (where it ran or skipped)


#: A matmul family's source and its compile: (the compile step, the PTX or None).
FamilyJob = tuple[FamilySource, "Future[tuple[dict, str | None]]"]


def _gpu_thread(
    artifact: Artifact,
    arch: str,
    cu: Path,
    problems: list[CheckShape],
    context: Future[None] | None,
    stop: threading.Event,
    families: tuple[FamilyJob, ...] = (),
) -> _GpuThread:
    """Compile, then with a GPU (``context`` given) run the checked problems and tune where this GPU has not
    tuned this kernel, then check each matmul family whose source compiled. Stops before the GPU work, between
    two timings of the tuner, or before a family's check, once ``stop`` is set."""
    done = _GpuThread()
    entry_points = tuple(_dequant_entry_points(artifact))
    (done.compile_step, done.ptx), done.seconds["compile"] = _timed(
        lambda: _compile_step(artifact.plan, whole_source(artifact), cu, arch, entry_points=entry_points)
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
    _check_families(kernel, families, stop, done)
    return done


def _dequant_entry_points(artifact: Artifact) -> list[str]:
    from ..kernels.dequant import kernel_name, variants

    return [kernel_name(artifact.spec, v) for v in variants(artifact.spec)]


def _check_families(kernel: Kernel, families: tuple[FamilyJob, ...], stop: threading.Event, done: _GpuThread) -> None:
    """Each matmul family whose source compiled, on the GPU after the tuner (whose timings it would disturb):
    a few shapes against y = x @ dequant_ref(W) within the target's tolerance (dqgen.run.gpucheck.check_matmul).
    Its host code needs torch: without it every family's check is skipped, saying why."""
    from ..run import gpucheck

    missing: str | None = None
    for fam, job in families:
        if stop.is_set():
            return
        if job.result()[1] is None:  # NVRTC failed: the main thread reports it
            continue
        remembered = _checked_before(kernel.spec, fam)
        if remembered is not None:  # this source passed on this GPU before: no torch import, no launch
            done.matmul[fam.family] = remembered
            continue
        if missing is None:
            missing = gpucheck.matmul_torch_problem() or ""
        if missing:
            done.matmul[fam.family] = {"ok": True, "skipped": True, "reason": missing, "line": f"skipped: {missing}"}
            continue
        t0 = time.perf_counter()
        try:
            checks = gpucheck.check_matmul(kernel.artifact, fam.family)
        except Exception as e:  # a launch or pack that raised is this family's failed check, not the build's crash
            what = " ".join(str(e).split())[:300]
            done.matmul[fam.family] = {
                "ok": False,
                "skipped": False,
                "line": f"failed: {type(e).__name__}: {what}",
                "seconds": round(time.perf_counter() - t0, 4),
            }
            continue
        done.matmul[fam.family] = step = _matmul_step(checks, round(time.perf_counter() - t0, 4))
        if step["ok"]:
            _remember_check(kernel.spec, fam, step)


#: Bumped when the families' GPU check (its shapes, inputs or tolerance) changes: older verdicts are not reused.
CHECK_VERSION = 1


@functools.cache
def _host_code_digest() -> str:
    """The check's outcome depends on host code as much as on the kernel's source (the packing of the weights, the
    choice of entry point and splits, the reference): any change to dqgen's Python checks again."""
    import hashlib

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _check_path(spec: Spec, fam: FamilySource) -> Path:
    """Where a family's passed GPU check is kept: keyed by what decides its outcome (the check's version and shapes,
    dqgen's host code, NVRTC's version, the GPU's name and arch, the family's source; the loader compiles that
    source for the check)."""
    import hashlib
    import json

    from ..emit.nvrtc import default_cache_dir, nvrtc_version
    from ..run import device as dev
    from ..run import gpucheck
    from ..run.tune import gpu_name

    what = [CHECK_VERSION, gpu_name(0), dev.device_arch(0), fam.family, gpucheck.BUILD_MATMUL_M[fam.family]]
    what += [list(gpucheck.matmul_shape(spec)), _host_code_digest(), list(nvrtc_version()), fam.source]
    key = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]
    return default_cache_dir() / "checks" / f"{key}.json"


def _checked_before(spec: Spec, fam: FamilySource) -> dict | None:
    """The step of a check this GPU passed on this very source before (as the dequant check remembers its reference's
    outputs and the tuner its choice), marked cached; None where there is none or it cannot be read."""
    import json

    try:
        step = json.loads(_check_path(spec, fam).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(step, dict) or step.get("ok") is not True or not isinstance(step.get("line"), str):
        return None
    return step | {"line": step["line"] + " (checked earlier on this GPU: cached)", "cached": True, "seconds": 0.0}


def _remember_check(spec: Spec, fam: FamilySource, step: dict) -> None:
    from ..core.files import write_json

    try:
        path = _check_path(spec, fam)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, step)
    except OSError:  # an unwritable cache checks again next time
        pass


def _matmul_step(checks: list[gpucheck.MatmulCheck], seconds: float) -> dict:
    """A family's GPU step from its checked shapes: one line, each shape's relative error against the bound."""
    from ..run import device as dev

    ok = bool(checks) and all(c.ok for c in checks)
    parts = [c.line() for c in checks]
    return {
        "ok": ok,
        "skipped": False,
        "line": f"{dev.device_arch(0)}, vs x @ numba reference (float64): " + "; ".join(parts),
        "checks": [c.as_json() for c in checks],
        "seconds": seconds,
    }


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
    from ..solve.solver import NoPlanError

    steps, seconds = report["steps"], report["seconds"]
    try:
        # solved and rendered once per process (dqgen.emit.pipeline); the proof comes below, beside the GPU thread
        artifact = compile_artifact(spec)
        families = _family_sources(artifact)  # rendered here: the GEMM's converter spec is solved on the way
    except NoPlanError as e:
        raise ValueError(str(e)) from None
    plan = artifact.plan
    report["strategy"] = plan.strategy
    # numbers, as `dqgen explain --json` gives them (Plan.to_json): ops * 8 / codes per block (4 to 32) is a
    # multiple of 1/4, exact as a float (the strings "17/2" needed parsing)
    report["ops_per_8"] = {s: float(plan.per8(s)) for s in ("convert", "scale")}
    report["zero_ops_per_word"] = plan.count("zero")
    report["scale_prep_ops"] = plan.count("scale_prep")  # once per block scale (MXFP4 / NVFP4)
    report["constants"] = [{"hex": c.hex, "why": c.why} for c in plan.constants()]
    report["files"] = []
    cu, cuh = source_paths(spec, out_dir)
    laps.lap("solve")
    stop = threading.Event()
    # every task at once: the GPU thread waits for the families' compiles, so none may queue behind it
    pool = ThreadPoolExecutor(max_workers=2 + len(families))
    try:
        context = pool.submit(_make_context) if use_gpu else None
        jobs: tuple[FamilyJob, ...] = tuple(
            (
                fam,
                pool.submit(
                    _compile_step,
                    fam.converter.plan,
                    fam.source,
                    family_paths(spec, fam.family, arch, out_dir)[0],
                    arch,
                    fam.nvrtc_name,
                    fam.entry_points,
                ),
            )
            for fam in families
        )
        gpu_job = pool.submit(_gpu_thread, artifact, arch, cu, problems, context, stop, jobs)
        # memoized on disk by the pipeline: a cached build does not prove again
        proof = compile_artifact(spec, proof_words=words, progress=progress).proof
        assert proof is not None
        steps["proof"] = {"ok": proof.ok, "line": proof.line(), "failures": proof.failures}
        if not proof.ok:
            stop.set()  # the tuner stops at its next timing; nothing below is written
        family_proofs = {fam.family: _family_proof(fam, artifact, proof, words, progress) for fam in families}
        if not all(p["ok"] for p in family_proofs.values()):
            stop.set()
        laps.lap("proof")  # the spec's proof and the families' own (the GEMM's converter spec)
        done = gpu_job.result()
        compiled = [job.result() for _, job in jobs]
        laps.lap("gpu_wait")  # the GPU thread's rest and the families' compiles
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)  # all done, unless something raised: then do not wait
    steps["compile"] = done.compile_step
    seconds.update(done.seconds)
    proven = proof.ok and all(p["ok"] for p in family_proofs.values())
    # every compile step passed (NVRTC ran, and its PTX carries the Plan's instructions and every entry point)
    built = done.compile_step["ok"] and all(step["ok"] for step, _ in compiled)
    if not proof.ok:
        steps["gpu"] = {"ok": True, "skipped": True, "line": "not run: the proof failed"}
    elif not use_gpu:
        steps["gpu"] = {"ok": True, "skipped": True, "line": "no GPU: skipped"}
    elif done.kernel is None:
        steps["gpu"] = {"ok": True, "skipped": True, "line": "not run: NVRTC failed"}
    else:
        steps["gpu"] = _check_step(done, seconds, laps, reference, digests, problems)
        if steps["gpu"]["ok"] and done.tuning is not None and proven and built:
            from ..run.tune import save_tuning

            save_tuning(done.kernel.artifact, 0, done.tuning)
    report["families"] = [
        {
            "family": "dequant",
            "ok": all(steps[s]["ok"] for s in ("proof", "compile", "gpu")),
            "source": cu.stem,
            "entry_points": _dequant_entry_points(artifact),
            "files": [],
            "steps": {
                "proof": {"ok": proof.ok, "words": proof.words, "plan": spec.name, "line": proof.line()},
                "compile": steps["compile"],
                "gpu": steps["gpu"],
            },
        }
    ]
    outputs = [
        [(cu, whole_source(artifact)), (cuh, artifact.header), (out_dir / f"{spec.name}.{arch}.ptx", done.ptx or "")]
    ]
    for fam, (compile_step, ptx) in zip(families, compiled, strict=True):
        source_path, ptx_path = family_paths(spec, fam.family, arch, out_dir)
        gpu_step = _family_gpu_step(fam, done, proven, use_gpu, ptx is not None)
        fam_steps = {"proof": family_proofs[fam.family], "compile": compile_step, "gpu": gpu_step}
        report["families"].append(
            {
                "family": fam.family,
                "ok": all(s["ok"] for s in fam_steps.values()),
                "source": source_path.stem,
                "entry_points": list(fam.entry_points),
                "files": [],
                "steps": fam_steps,
            }
        )
        outputs.append([(source_path, fam.source), (ptx_path, ptx or "")])
    if not (proven and built):
        return  # a failed proof or compile of any family: nothing is written
    write_all([o for family_outputs in outputs for o in family_outputs])
    for entry, family_outputs in zip(report["families"], outputs, strict=True):
        entry["files"] = [str(path) for path, _ in family_outputs]
        report["files"] += entry["files"]
    laps.lap("write")  # the tuning's cache file included


def _family_proof(
    fam: FamilySource,
    artifact: Artifact,
    shared: ProofResult,
    words: int,
    progress: Callable[[int, int], None] | None,
) -> dict:
    """A family's proof step: a converter Plan of its own (the GEMM's converter spec) is proven here with the
    build's words; the spec's own converter (the GEMV's) is the dequantize kernel's Plan, whose proof is
    ``shared``."""
    if fam.converter.key != artifact.key and not shared.ok:  # the build has failed: no more proving, or storing
        return {
            "ok": True,
            "skipped": True,
            "plan": fam.converter.spec.name,
            "line": "not run: the spec's proof failed",
        }
    if fam.converter.key == artifact.key:
        return {
            "ok": shared.ok,
            "words": shared.words,
            "plan": artifact.spec.name,
            "shared_with": "dequant",
            "line": "the spec's own converter (the dequantize kernel's Plan: its proof above)",
        }
    proof = compile_artifact(fam.converter.spec, proof_words=words, progress=progress).proof
    assert proof is not None
    return {
        "ok": proof.ok,
        "words": proof.words,
        "plan": fam.converter.spec.name,
        "line": f"{fam.converter.spec.name}: {proof.line()}",
        "failures": proof.failures,
    }


def _family_gpu_step(fam: FamilySource, done: _GpuThread, proven: bool, use_gpu: bool, compiled: bool) -> dict:
    if not proven:
        return {"ok": True, "skipped": True, "reason": "a proof failed", "line": "not run: a proof failed"}
    if not use_gpu:
        return {"ok": True, "skipped": True, "reason": "no GPU", "line": "skipped: no GPU"}
    if not compiled or done.kernel is None:
        return {"ok": True, "skipped": True, "reason": "NVRTC failed", "line": "not run: NVRTC failed"}
    step = done.matmul.get(fam.family)
    if step is None:  # the GPU thread stopped before it (a proof failed meanwhile)
        return {"ok": True, "skipped": True, "reason": "the build stopped", "line": "not run: the build stopped"}
    return step


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


def _mark(ok: bool) -> str:
    return f"[{'green' if ok else 'red'}]{'OK' if ok else 'FAILED'}[/] "


def family_line(fam: dict) -> str:
    """A matmul family in one line (its failures' texts on the lines after it): entry points, proof, compile,
    GPU check."""
    steps = fam["steps"]
    proof, compile_step, gpu = steps["proof"], steps["compile"], steps["gpu"]
    line = (
        f"{len(fam['entry_points'])} entry points; proof: {proof['line']}; {compile_step['line']}; GPU: {gpu['line']}"
    )
    extra = compile_step.get("problems", []) + proof.get("failures", [])
    return line + ("\n" + "\n".join(extra) if extra else "")


def print_summary(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    t = Table(title=f"dqgen build {report['spec']} ({report['arch']})", show_header=False)
    t.add_row(
        "plan",
        f"{report['strategy']}: {report['ops_per_8']['convert']:g} conversion ops per 8 outputs "
        f"(+{report['ops_per_8']['scale']:g} scale)"
        + (f", {report['zero_ops_per_word']} zero-point ops per zero word" if report["zero_ops_per_word"] else "")
        + (f", {report['scale_prep_ops']} ops per block scale" if report.get("scale_prep_ops") else ""),
    )
    t.add_row("constants", "\n".join(f"{c['hex']}  {c['why']}" for c in report["constants"]))
    for name, step in report["steps"].items():
        extra = "\n".join(step.get("problems", []) + step.get("failures", []))
        # a skipped step's line says so itself ("no GPU: skipped")
        mark = "" if step.get("skipped") else _mark(step["ok"])
        # the line and problems are plain text (NVRTC messages hold [brackets]), only the mark is markup
        t.add_row(name, Text.from_markup(mark) + Text(step["line"] + (f"\n{extra}" if extra else "")))
    for fam in report.get("families", [])[1:]:  # the dequantize kernel's steps are the rows above
        t.add_row(fam["family"], Text.from_markup(_mark(fam["ok"])) + Text(family_line(fam)))
    t.add_row("files", "\n".join(report["files"]))
    console.print(t)
