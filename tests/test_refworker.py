"""`dqgen build`'s reference worker: its arrays are bit for bit the in-process reference's, and a worker that
raises, dies or stalls gives a one-line error within its timeout instead of a hang. `dqgen build`'s GPU step
compares with the worker's arrays and reports a dead worker as its one line (GPU pieces stood in on the CPU); the
GPU test runs the whole build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from dqgen.check.reference import dequantize_reference
from dqgen.core.spec import Spec, load_spec
from dqgen.run.gpucheck import build_shapes, check_inputs
from dqgen.run.refworker import CheckShape, ReferenceJob, ReferenceWorkerError


def _problems(spec: Spec) -> list[CheckShape]:
    return [(K, N, seed) for seed, (K, N) in enumerate(build_shapes(spec))]


# an int4 fp16 spec with packed zeros, a bf16 one with float zeros, and NVFP4 (e4m3 block scales, global scale)
@pytest.mark.parametrize("name", ["awq_int4_fp16", "uint3_float_zeros_bf16", "nvfp4_fp16"])
def test_worker_arrays_are_bitwise_the_in_process_reference(name: str) -> None:
    spec = load_spec(name)
    problems = _problems(spec)
    job = ReferenceJob(spec, problems)
    got = job.result(timeout=300)
    assert job.seconds is not None and job.seconds > 0
    assert len(got) == len(problems)
    for (K, N, seed), g in zip(problems, got, strict=True):
        q, s, z, gi, gsc = check_inputs(spec, K, N, seed)
        want = dequantize_reference(spec, q, s, z, gi, global_scale=gsc)
        assert g.dtype == want.dtype and g.shape == (K, N)
        assert np.array_equal(g.view(np.uint16), want.view(np.uint16)), (name, K, N)


def test_worker_error_from_the_reference_is_one_line() -> None:
    job = ReferenceJob(load_spec("awq_int4_fp16"), [(-8, 8, 0)])  # a negative K: numpy refuses the shape
    with pytest.raises(ReferenceWorkerError) as e:
        job.result(timeout=300)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("reference worker: ValueError: ") and "negative" in msg


def _raise_multiline(spec: Spec, problems: Sequence[CheckShape]) -> None:
    raise RuntimeError(f"first line for {spec.name}\nsecond line")


def _exit_hard(spec: Spec, problems: Sequence[CheckShape]) -> None:
    os._exit(3)  # like a crash: no exception, no result


def _stall(spec: Spec, problems: Sequence[CheckShape]) -> None:
    time.sleep(120)


def test_worker_exception_is_folded_into_one_line() -> None:
    job = ReferenceJob(load_spec("awq_int4_fp16"), [], work=_raise_multiline)
    with pytest.raises(ReferenceWorkerError, match=r"^reference worker: RuntimeError: first line for awq_int4_fp16 "):
        job.result(timeout=300)


def test_worker_that_dies_is_an_error_not_a_hang() -> None:
    job = ReferenceJob(load_spec("awq_int4_fp16"), [], work=_exit_hard)
    t0 = time.perf_counter()
    with pytest.raises(ReferenceWorkerError, match=r"process ended \(exit code 3\) without a result"):
        job.result(timeout=300)
    assert time.perf_counter() - t0 < 60  # EOF on the pipe, not the timeout


def test_stalled_worker_times_out_and_is_stopped() -> None:
    job = ReferenceJob(load_spec("awq_int4_fp16"), [], work=_stall)
    t0 = time.perf_counter()
    with pytest.raises(ReferenceWorkerError, match=r"no result after 2 s"):
        job.result(timeout=2)
    assert time.perf_counter() - t0 < 30
    assert job._proc.poll() is not None  # stopped


def test_worker_that_cannot_start_is_a_one_line_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    job = ReferenceJob(load_spec("awq_int4_fp16"), [(128, 8, 0)])
    with pytest.raises(ReferenceWorkerError, match=r"^reference worker: cannot start .*no-python: FileNotFoundError"):
        job.result(timeout=300)


def _module_file(spec: Spec, problems: Sequence[CheckShape]) -> str:
    import dqgen.check.reference

    return dqgen.check.reference.__file__


def test_worker_imports_the_same_dqgen_as_the_parent() -> None:
    import dqgen.check.reference

    assert ReferenceJob(load_spec("awq_int4_fp16"), [], work=_module_file).result(300) == dqgen.check.reference.__file__


def test_worker_starts_from_a_script_without_a_main_guard(tmp_path) -> None:
    # multiprocessing's spawn would re-run this script in the child and fail; a user's script may well look like it
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from dqgen.run.refworker import ReferenceJob\n"
        "from dqgen.core.spec import load_spec\n"
        "out = ReferenceJob(load_spec('awq_int4_fp16'), [(128, 8, 1)]).result(timeout=300)\n"
        "print(out[0].shape, out[0].dtype)\n"
    )
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "(128, 8) float16"


@pytest.mark.gpu
def test_gpu_build_json_times_every_step(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from dqgen.cli import app

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    res = CliRunner().invoke(app, ["build", "awq_int4_fp16", "--json", "--words", "1000", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["steps"]["gpu"]["ok"] and "bit-exact" in report["steps"]["gpu"]["line"]
    sec = report["seconds"]
    main_path = ("start", "solve", "proof", "gpu_wait", "reference_wait", "compare", "write")
    gpu_thread = ("compile", "gpu_check", "tune")
    assert set(main_path) | set(gpu_thread) | {"reference", "total"} == set(sec)
    assert set(report["overlapped"]) == {"compile", "gpu_check", "tune", "reference"}
    # the main thread's steps add up to the total; the GPU thread's (from the end of solve) end before the wait does
    assert sum(sec[s] for s in main_path) == pytest.approx(sec["total"], abs=0.05)
    assert sum(sec[s] for s in gpu_thread) <= sec["proof"] + sec["gpu_wait"] + 0.05
    assert sec["reference"] <= sec["total"]


def _gpu_standins(monkeypatch: pytest.MonkeyPatch, corrupt: bool = False) -> None:
    """The GPU-only pieces of `dqgen build`'s GPU step replaced by CPU stand-ins: the "GPU output" is the in-process
    reference (one element flipped with ``corrupt``), the tuning is cached. The reference worker is the real one."""
    import dqgen.run.gpucheck as gpucheck
    import dqgen.run.runtime as runtime
    import dqgen.run.tune as tune
    from dqgen.run import device as dev

    class CpuKernel:
        def __init__(self, artifact: Any) -> None:  # dqgen.emit.pipeline.Artifact, as the build passes it
            self.artifact = artifact  # the tuning cache's key (its source)
            self.spec = artifact.spec

        def prepare(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the stand-in's tuning is cached: nothing is timed")

        def load_all(self, ordinal: int) -> None:
            pass

    def cpu_run(kernel: CpuKernel, K: int, N: int, seed: int = 0, device: int = 0) -> gpucheck.GpuRun:
        inputs = check_inputs(kernel.spec, K, N, seed)
        q, s, z, gi, gsc = inputs
        got = dequantize_reference(kernel.spec, q, s, z, gi, global_scale=gsc).copy()
        if corrupt and seed == 0:
            got.view(np.uint16)[3, 5] ^= 1
        return gpucheck.GpuRun(K, N, seed, inputs, got, 0.0)

    monkeypatch.setattr(runtime, "Kernel", CpuKernel)
    monkeypatch.setattr(gpucheck, "run_shape", cpu_run)
    # the matmul families' checks launch real kernels on torch tensors: not on the stand-in Kernel
    monkeypatch.setattr(gpucheck, "matmul_torch_problem", lambda: "CPU stand-ins")
    monkeypatch.setattr(tune, "load_tuning", lambda artifact, ordinal: {"small": None, "large": None})
    monkeypatch.setattr(dev, "device_arch", lambda ordinal=0: "sm_90")
    monkeypatch.setattr(dev, "primary_context", lambda ordinal=0: None)
    monkeypatch.setattr(tune, "gpu_name", lambda ordinal=0: "CPU stand-in")


@pytest.mark.parametrize("corrupt", [False, True])
def test_build_gpu_step_compares_with_the_worker(tmp_path, monkeypatch: pytest.MonkeyPatch, corrupt: bool) -> None:
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    _gpu_standins(monkeypatch, corrupt)
    report = build_spec(load_spec("awq_int4_fp16"), "sm_90", tmp_path / "out", words=100, gpu=True)
    line = report["steps"]["gpu"]["line"]
    assert report["ok"] is (not corrupt) and report["steps"]["gpu"]["ok"] is (not corrupt)
    if corrupt:
        assert "1024x4096: 1 mismatches, first mismatch at [3, 5]" in line
    else:
        assert line.count("bit-exact") == len(build_shapes(load_spec("awq_int4_fp16")))
    sec = report["seconds"]
    assert {"start", "solve", "proof", "gpu_wait", "reference_wait", "compare", "write"} < set(sec)
    assert {"compile", "gpu_check", "tune", "reference"} < set(sec)
    assert set(report["overlapped"]) == {"compile", "gpu_check", "tune", "reference"}
    assert 0 < sec["reference"] <= sec["total"]


def test_build_reports_a_failed_worker_as_the_gpu_steps_one_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dqgen.run.refworker as refworker
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    _gpu_standins(monkeypatch)
    real_init = refworker.ReferenceJob.__init__
    monkeypatch.setattr(
        refworker.ReferenceJob, "__init__", lambda self, spec, problems: real_init(self, spec, problems, _exit_hard)
    )
    t0 = time.perf_counter()
    report = build_spec(load_spec("awq_int4_fp16"), "sm_90", tmp_path / "out", words=100, gpu=True)
    assert time.perf_counter() - t0 < 120
    assert not report["ok"]
    line = report["steps"]["gpu"]["line"]
    assert "\n" not in line and line == "sm_90: reference worker: the process ended (exit code 3) without a result"


def test_canonical_digest_equates_nans_and_nothing_else() -> None:
    from dqgen.run.refworker import canonical_digest

    for name, nans in (("awq_int4_fp16", (0x7E00, 0xFC01, 0x7FFF)), ("awq_int4_bf16", (0x7FC0, 0xFF81, 0x7FFF))):
        spec = load_spec(name)
        a = np.arange(4096, dtype=np.uint16).reshape(64, 64)
        a[1, 1] = nans[0]
        b = a.copy()
        b[1, 1] = nans[1]  # another NaN (sign and payload differ): the check counts it equal
        assert canonical_digest(spec, a.view(np.float16)) == canonical_digest(spec, b.view(np.float16))
        for bit in (0, 9, 15):
            c = a.copy()
            c[7, 3] ^= 1 << bit  # any other single-bit change is a different output
            assert canonical_digest(spec, a.view(np.float16)) != canonical_digest(spec, c.view(np.float16))
        inf = a.copy()
        inf[1, 1] = 0x7C00 if name.endswith("fp16") else 0x7F80  # infinity is no NaN
        assert canonical_digest(spec, inf.view(np.float16)) != canonical_digest(spec, a.view(np.float16))


@pytest.mark.parametrize("corrupt", [False, True])
def test_second_build_uses_remembered_digests_without_a_worker(
    tmp_path, monkeypatch: pytest.MonkeyPatch, corrupt: bool
) -> None:
    import dqgen.run.refworker as refworker
    from dqgen.tools.build import build_spec

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    _gpu_standins(monkeypatch)
    spec = load_spec("awq_int4_fp16")
    first = build_spec(spec, "sm_90", tmp_path / "out", words=100, gpu=True)
    assert first["ok"] and "reference" in first["overlapped"]
    assert len(list((tmp_path / "cache" / "reference").glob("*.sha256"))) == len(build_shapes(spec))

    def no_worker(self: object, spec: Spec, problems: object) -> None:
        raise AssertionError("a build with remembered digests started the reference worker")

    monkeypatch.setattr(refworker.ReferenceJob, "__init__", no_worker)
    _gpu_standins(monkeypatch, corrupt)
    second = build_spec(spec, "sm_90", tmp_path / "out", words=100, gpu=True)
    line = second["steps"]["gpu"]["line"]
    assert "remembered output digests" in line and "reference" not in second["overlapped"]
    assert second["ok"] is (not corrupt)
    if corrupt:  # the digest differs: the reference is recomputed in process and names the element
        assert "1024x4096: 1 mismatches, first mismatch at [3, 5]" in line
    else:
        assert line.count("bit-exact") == len(build_shapes(spec))


def test_a_damaged_digest_is_not_trusted(tmp_path) -> None:
    from dqgen.run.refworker import remember_digests, remembered_digests

    spec = load_spec("int8_fp16")
    problems = [(8, 16, 0), (16, 16, 1)]
    outs = [np.zeros((8, 16), np.float16), np.ones((16, 16), np.float16)]
    assert remembered_digests(spec, problems, tmp_path) is None
    remember_digests(spec, problems, outs, tmp_path)
    got = remembered_digests(spec, problems, tmp_path)
    assert got is not None and len(got) == 2 and got[0] != got[1]
    victim = sorted((tmp_path / "reference").glob("*.sha256"))[0]
    victim.write_text("not a digest\n")
    assert remembered_digests(spec, problems, tmp_path) is None


def test_build_tune_line_shows_the_kept_variants_time(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the tuner keeps the default (the screen's winner lost its confirmation), the build's line gives the
    default's time, not the faster screened time of the variant it did not keep."""

    import dqgen.run.tune as tune
    from dqgen.kernels.dequant import DequantVariant, kernel_name
    from dqgen.tools.build import build_spec

    spec = load_spec("awq_int4_fp16")
    default = tune.default_variant(spec, True)
    other = next(v for v in tune.variants(spec) if v.aligned and v != default)
    us = {kernel_name(spec, default): 50.0, kernel_name(spec, other): 40.0}
    kept = {"vec": default.vec, "rows": default.rows, "aligned": default.aligned, "stream": default.stream}
    fake = {
        "shapes": tune.TUNE_SHAPES,
        "best": dict.fromkeys(tune.TUNE_SHAPES, kept),
        "us": dict.fromkeys(tune.TUNE_SHAPES, us),
    }
    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    _gpu_standins(monkeypatch)
    monkeypatch.setattr(tune, "load_tuning", lambda artifact, ordinal: None)
    monkeypatch.setattr(tune, "tune", lambda artifact, ordinal=0, **options: fake)
    report = build_spec(spec, "sm_90", tmp_path / "out", words=100, gpu=True)
    line = report["steps"]["gpu"]["line"]
    assert DequantVariant(**kept) == default
    assert line.count("(50 us at") == len(tune.TUNE_SHAPES) and "(40 us at" not in line
    # the build saved the tuner's result (after the proof and the check passed)
    (saved,) = (tmp_path / "cache" / "tune").glob("*.json")
    assert json.loads(saved.read_text())["best"] == fake["best"]


@pytest.mark.parametrize("library", ["numpy", "numba", "ml_dtypes"])
def test_a_digest_is_not_reused_under_another_library_version(tmp_path, monkeypatch, library: str) -> None:
    """The reference's output depends on numpy (its seeded inputs), numba and ml_dtypes (its conversions) as much
    as on dqgen's own code: after an upgrade the reference is recomputed rather than an old digest trusted."""
    import importlib.metadata

    from dqgen.run.refworker import remember_digests, remembered_digests

    spec = load_spec("int8_fp16")
    problems = [(8, 16, 0)]
    remember_digests(spec, problems, [np.zeros((8, 16), np.float16)], tmp_path)
    assert remembered_digests(spec, problems, tmp_path) is not None
    installed = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.0.0-another" if name == library else installed(name)
    )
    assert remembered_digests(spec, problems, tmp_path) is None
