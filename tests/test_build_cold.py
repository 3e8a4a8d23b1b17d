"""CPU tests of `dqgen build`'s GPU path with the driver-level pieces faked (memory, module loads, events): the
dequantize kernel's check and tuner import neither torch nor triton (the matmul families' checks, whose host code
needs torch, are then skipped, saying so), the proof runs beside the GPU thread, and a failed proof stops the tuner
and writes nothing. The real GPU side runs in the GPU tiers (test_refworker's GPU test, the GPU test below and
tests/test_build_families.py's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dqgen.core.formats import numpy_dtype
from dqgen.core.spec import load_spec, shipped_specs

ROOT = Path(__file__).resolve().parent.parent
SPEC = "awq_int4_fp16"
#: Small stand-ins for the tuner's problems: the check's inputs of 8192 x 28672 take a while to draw on a CPU.
SMALL_SHAPES = {"small": (256, 512), "large": (512, 1024)}
#: What a build of SPEC for sm_90 writes: the dequantize kernel's source, header and PTX, the GEMV's and the GEMM's
#: source and PTX.
OUTPUTS = sorted(
    [f"{SPEC}.cu", f"{SPEC}.cuh", f"{SPEC}.sm_90.ptx"]
    + [f"{SPEC}_{f}.{x}" for f in ("gemv", "gemm") for x in ("cu", "sm_90.ptx")]
)
#: The fake launches' milliseconds: the default and one 10% faster variant; every other variant is twice as slow.
FAST_MS, DEFAULT_MS, SLOW_MS = 0.090, 0.100, 0.200


class FakeClock:
    """The fake GPU's time in ms: a flush costs 1 ms (plus ``flush_sleep_s`` of real time, to make the tuner slow),
    a launch its variant's cost."""

    def __init__(self, costs_ms: dict[str, float], flush_sleep_s: float = 0.0) -> None:
        self.costs_ms = costs_ms
        self.flush_sleep_s = flush_sleep_s
        self.now = 0.0
        self.launches: dict[str, int] = {}

    def launch(self, name: str) -> None:
        self.now += self.costs_ms[name]
        self.launches[name] = self.launches.get(name, 0) + 1

    def flush(self) -> None:
        self.now += 1.0
        if self.flush_sleep_s:
            time.sleep(self.flush_sleep_s)


def variant_costs() -> dict[str, float]:
    from dqgen.kernels.dequant import DequantVariant, kernel_name, variants
    from dqgen.run.tune import default_variant

    spec = load_spec(SPEC)
    default = default_variant(spec, True)
    fast = DequantVariant(vec=default.vec, rows=2 * default.rows, aligned=True, stream=False)
    assert fast in variants(spec)
    return {
        kernel_name(spec, v): DEFAULT_MS if v == default else FAST_MS if v == fast else SLOW_MS for v in variants(spec)
    }


#: Why the fake GPU skips the matmul families' checks (their host code launches on torch tensors, on a real GPU).
FAKE_NO_MATMUL = "the fake GPU runs no matmul"


def install_fake_gpu(
    setattr: Callable[[Any, str, Any], None], flush_sleep_s: float = 0.0, torch_probe: bool = False
) -> FakeClock:
    """Replace what talks to a GPU (device memory, module loads, events, the device's name) with host stand-ins; the
    Kernel, its checks, the build and the tuner are the real ones. The check's "GPU output" is the in-process
    reference. The matmul families' checks are skipped (FAKE_NO_MATMUL), unless ``torch_probe``: then the build's
    own probe for torch decides."""
    import dqgen.run.device as dev
    import dqgen.run.gpucheck as gpucheck
    import dqgen.run.tune as tune
    from dqgen.check.reference import dequantize_reference
    from dqgen.run.timing import EventBackend

    clock = FakeClock(variant_costs(), flush_sleep_s)
    next_ptr = [1 << 30]

    class FakeBuffer:
        def __init__(self, nbytes: int, device: int = 0) -> None:
            self.device, self.nbytes, self.ptr = device, nbytes, next_ptr[0]
            next_ptr[0] += (nbytes // 256 + 2) * 256  # 256-byte aligned, as cuMemAlloc's

        @classmethod
        def from_host(cls, host: np.ndarray, device: int = 0) -> FakeBuffer:
            return cls(host.nbytes, device)

        def as_array(self, shape: Any, dtype: Any) -> Any:
            dt, shape = np.dtype(dtype), tuple(int(s) for s in shape)
            return dev.DeviceArray(self.ptr, shape, dev._c_strides(shape, dt.itemsize), dt, self.device, "cai", self)

        def close(self) -> None:
            self.ptr = 0

    class FakeModule:
        def __init__(self, image: bytes, name: str, device: int = 0) -> None:
            self.name = name

        def sibling(self, name: str) -> FakeModule:
            return FakeModule(b"", name)

        def bind(self, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> Callable[[int], None]:
            return lambda stream=0: clock.launch(self.name)

    def backend(ordinal: int = 0) -> EventBackend:
        return EventBackend(clock.flush, lambda: clock.now, lambda a, b: b - a, lambda: None)

    def cpu_run(kernel: Any, K: int, N: int, seed: int = 0, device: int = 0) -> gpucheck.GpuRun:
        inputs = gpucheck.check_inputs(kernel.spec, K, N, seed)
        q, s, z, gi, gsc = inputs
        return gpucheck.GpuRun(K, N, seed, inputs, dequantize_reference(kernel.spec, q, s, z, gi, global_scale=gsc), 0)

    setattr(dev, "gpu_available", lambda: True)
    setattr(dev, "primary_context", lambda ordinal=0: None)
    setattr(dev, "device_arch", lambda ordinal=0: "sm_90")
    setattr(dev, "DeviceBuffer", FakeBuffer)
    setattr(dev, "LoadedKernel", FakeModule)
    setattr(tune, "driver_backend", backend)
    setattr(tune, "gpu_name", lambda ordinal=0: "Fake GPU")
    setattr(tune, "TUNE_SHAPES", SMALL_SHAPES)
    setattr(gpucheck, "run_shape", cpu_run)
    if not torch_probe:
        setattr(gpucheck, "matmul_torch_problem", lambda: FAKE_NO_MATMUL)
    return clock


#: Run in a fresh interpreter: a finder first on sys.meta_path records (and refuses) every import of torch or
#: triton, importlib.util.find_spec's included; then `dqgen build --json` through the CLI, on the fake GPU when
#: the second argument is "fake" (whose matmul families are checked only if torch can be imported: it cannot).
NO_TORCH_SCRIPT = """
import json, sys
attempts = []

class RefuseTorch:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "triton"):
            attempts.append(name)
            raise ImportError(f"{name}: refused by the test")
        return None

sys.meta_path.insert(0, RefuseTorch())
from dqgen.cli import main

folder, fake = sys.argv[1], sys.argv[2] == "fake"
launches = {}
if fake:
    from tests.test_build_cold import install_fake_gpu

    launches = install_fake_gpu(setattr, torch_probe=True).launches
sys.argv = ["dqgen", "build", "awq_int4_fp16", "--json", "--words", "1000", "--out", folder + "/out"]
try:
    main()
except SystemExit as e:
    code = e.code
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "triton"))
with open(folder + "/imports.json", "w") as f:
    json.dump({"code": code, "attempts": attempts, "loaded": loaded, "launches": launches}, f)
"""


def _build_refusing_torch(tmp_path: Path, fake: bool) -> tuple[dict, dict]:
    """The build's --json report and what the refusing finder saw."""
    env = dict(
        os.environ, DQGEN_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(p for p in sys.path if p)
    )
    script = tmp_path / "no_torch.py"
    script.write_text(NO_TORCH_SCRIPT)
    argv = [sys.executable, str(script), str(tmp_path), "fake" if fake else "real"]
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert (tmp_path / "imports.json").exists(), res.stderr[-3000:]
    seen = json.loads((tmp_path / "imports.json").read_text())
    # one attempt: the matmul families' probe for torch (after the dequantize kernel's check and tuner)
    assert seen["attempts"] == ["torch"] and seen["loaded"] == [], seen
    assert seen["code"] in (0, None), res.stderr
    report = json.loads(res.stdout)
    line = report["steps"]["gpu"]["line"]
    assert report["ok"] and line.count("bit-exact") == 3, line
    families = {f["family"]: f for f in report["families"]}
    assert set(families) == {"dequant", "gemv", "gemm"}
    for name in ("gemv", "gemm"):
        gpu = families[name]["steps"]["gpu"]
        assert gpu["skipped"] and gpu["ok"] and gpu["reason"].startswith("torch is not installed"), gpu
    return report, seen


@pytest.mark.gpu
def test_build_on_the_gpu_checks_and_tunes_without_torch_or_triton(tmp_path: Path) -> None:
    report, _ = _build_refusing_torch(tmp_path, fake=False)
    assert report["steps"]["gpu"]["line"].count("tuned launch (") == 2, report["steps"]["gpu"]
    (saved,) = (tmp_path / "cache" / "tune").glob("*.json")
    assert "driver-API CUDA events" in json.loads(saved.read_text())["method"]


def test_build_with_a_gpu_imports_neither_torch_nor_triton(tmp_path: Path) -> None:
    report, seen = _build_refusing_torch(tmp_path, fake=True)
    line = report["steps"]["gpu"]["line"]
    # the tuner ran (every aligned variant launched: the unaligned ones serve unaligned tensors only) and kept the
    # variant that is 10% faster than the default
    from dqgen.kernels.dequant import kernel_name, variants

    spec = load_spec(SPEC)
    assert set(seen["launches"]) == {kernel_name(spec, v) for v in variants(spec) if v.aligned}
    (saved,) = (tmp_path / "cache" / "tune").glob("*.json")
    tuning = json.loads(saved.read_text())
    assert "driver-API CUDA events" in tuning["method"]
    costs = variant_costs()
    fast = next(n for n, ms in costs.items() if ms == FAST_MS)
    assert all(tuning["us"][cls][fast] == pytest.approx(1000 * FAST_MS) for cls in SMALL_SHAPES)
    assert line.count(f"({1000 * FAST_MS:.0f} us at") == 2
    # the aligned variants twice as slow as the default were cut after the probe; the others were timed in full
    slow_aligned = {n for n in tuning["us"]["small"] if costs[n] == SLOW_MS}
    assert slow_aligned and all(set(tuning["cut"][cls]) == slow_aligned for cls in SMALL_SHAPES)


def _proof_meets_tuner(monkeypatch: pytest.MonkeyPatch, proof_ok: bool) -> dict[str, Any]:
    """prove() waits until the tuner has started, the tuner until the proof has: a build that ran them one after
    the other would time out here. ``proof_ok`` False: the proof then fails (as for a wrong plan)."""
    import dataclasses

    import dqgen.emit.pipeline as pipeline
    import dqgen.run.tune as tune

    seen: dict[str, Any] = {"proof": threading.Event(), "tune": threading.Event(), "stopped": False}
    real_prove, real_tune = pipeline.prove, tune.tune

    def prove(plan: Any, spec: Any, n_random: int = 0, **kwargs: Any) -> Any:
        seen["proof"].set()
        assert seen["tune"].wait(120), "the tuner did not start while the proof ran"
        result = real_prove(plan, spec, n_random=n_random, **kwargs)
        return result if proof_ok else dataclasses.replace(result, ok=False, failures=["word 0x0: got 1, want 2"])

    def tune_beside(artifact: Any, ordinal: int = 0, **options: Any) -> dict:
        seen["tune"].set()
        assert seen["proof"].wait(120), "the proof did not start while the tuner ran"
        try:
            return real_tune(artifact, ordinal, **options)
        except tune.TuningStopped:
            seen["stopped"] = True
            raise

    monkeypatch.setattr(pipeline, "prove", prove)
    monkeypatch.setattr(pipeline, "_PROOFS", {})
    monkeypatch.setattr(tune, "tune", tune_beside)
    return seen


def test_the_proof_runs_beside_the_gpu_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_gpu(monkeypatch.setattr)
    seen = _proof_meets_tuner(monkeypatch, proof_ok=True)
    report = build_spec(load_spec(SPEC), "sm_90", tmp_path / "out", words=1000, gpu=True)
    assert report["ok"] and seen["proof"].is_set() and seen["tune"].is_set() and not seen["stopped"]
    assert len(list((tmp_path / "cache" / "tune").glob("*.json"))) == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == OUTPUTS
    sec = report["seconds"]
    assert set(report["overlapped"]) == {"compile", "gpu_check", "tune", "reference"}
    main_path = ("start", "solve", "proof", "gpu_wait", "reference_wait", "compare", "write")
    assert sum(sec[s] for s in main_path) == pytest.approx(sec["total"], abs=0.01)


def test_a_failed_proof_stops_the_tuner_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_gpu(monkeypatch.setattr, flush_sleep_s=0.005)  # a full tuning would take seconds
    seen = _proof_meets_tuner(monkeypatch, proof_ok=False)
    report = build_spec(load_spec(SPEC), "sm_90", tmp_path / "out", words=1000, gpu=True)
    assert not report["ok"] and report["steps"]["proof"]["failures"] == ["word 0x0: got 1, want 2"]
    assert report["steps"]["gpu"] == {"ok": True, "skipped": True, "line": "not run: the proof failed"}
    assert seen["stopped"], "the tuner went on after the proof failed"
    assert report["files"] == [] and not (tmp_path / "out").exists()
    cache = tmp_path / "cache"
    assert not (cache / "tune").exists() and not (cache / "reference").exists() and not (cache / "proofs").exists()


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_the_tuners_host_inputs_pass_the_kernels_checks(name: str) -> None:
    """host_inputs (the tuner's, uploaded once) are what a call accepts for every shipped spec, drawn from the
    bench's distributions: full-range words, scales within +-0.05 (block scales: ordinary codes)."""
    import dqgen.run.device as dev
    from dqgen.run.inputs import host_inputs
    from dqgen.run.problem import infer_problem

    spec = load_spec(name)
    K, N = 1024, 1024
    host = host_inputs(spec, K, N, seed=0)
    ptr = [1 << 30]

    def on_device(a: np.ndarray | None) -> dev.DeviceArray | None:
        if a is None:
            return None
        ptr[0] += (a.nbytes // 256 + 1) * 256
        return dev.DeviceArray(ptr[0], a.shape, dev._c_strides(a.shape, a.itemsize), a.dtype, 0, "cai", a)

    q, s, z, gi, gsc = (on_device(a) for a in host)
    out = on_device(np.empty((K, N), dtype=numpy_dtype(spec.target_type)))
    assert q is not None and s is not None
    prob = infer_problem(spec, q, s, z, out, gi, gsc)
    assert (prob.K, prob.N, prob.aligned) == (K, N, True)
    words = host[0]
    assert words.min() < -(2**30) and words.max() > 2**30
    if not spec.scales.block:
        scales = host[1].astype(np.float32)
        bound = np.float32(np.array([0.05], np.float32).astype(host[1].dtype)[0])  # 0.05 in the target's rounding
        assert np.abs(scales).max() <= bound and (scales < 0).any() and (scales > 0).any()
    if gi is not None:
        assert np.array_equal(np.bincount(host[3]), np.full(prob.groups, K // prob.groups))


def test_an_out_folder_that_cannot_be_written_fails_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are written after the proof; a bad --out is still refused first: nothing proved, compiled or run."""
    import dqgen.emit.pipeline as pipeline
    import dqgen.run.refworker as refworker
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    clock = install_fake_gpu(monkeypatch.setattr)

    def must_not_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the build ran before refusing its --out")

    monkeypatch.setattr(pipeline, "prove", must_not_run)
    monkeypatch.setattr(refworker.ReferenceJob, "__init__", must_not_run)
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(NotADirectoryError) as err:
        build_spec(load_spec(SPEC), "sm_90", afile / "out", words=1000, gpu=True)
    assert err.value.filename == str(afile) and err.value.strerror
    assert clock.launches == {} and not (tmp_path / "cache").exists()


def test_a_failed_gpu_check_saves_no_tuning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuner ran beside the proof, but its choice is for a kernel that gave a wrong answer: not cached."""
    import dqgen.run.gpucheck as gpucheck
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_gpu(monkeypatch.setattr)
    faithful = gpucheck.run_shape

    def one_bit_off(kernel: Any, K: int, N: int, seed: int = 0, device: int = 0) -> gpucheck.GpuRun:
        run = faithful(kernel, K, N, seed, device)
        run.got.view(np.uint16)[0, 1] ^= 1
        return run

    monkeypatch.setattr(gpucheck, "run_shape", one_bit_off)
    report = build_spec(load_spec(SPEC), "sm_90", tmp_path / "out", words=1000, gpu=True)
    line = report["steps"]["gpu"]["line"]
    assert not report["ok"] and "1024x4096: 1 mismatches, first mismatch at [0, 1]" in line
    assert "tuned launch (small)" in line and not (tmp_path / "cache" / "tune").exists()
    # the sources are written (the proof passed): what failed on the GPU can be read
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == OUTPUTS
