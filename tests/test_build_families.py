"""`dqgen build` builds every matmul family that takes a spec (issue 22, deliverable 5): the dequantize kernel, the
fused GEMV (every spec: the spec's own proven converter) and the tensor-core GEMM (4- and 8-bit integer specs: the
converter of a derived spec, proven as a step of its own). Each family's source and PTX are written beside the
dequantize kernel's, all or none; --json lists each family with its steps; a family's GPU check is skipped, saying
why, without a GPU (or torch). CPU tests, but for the GPU tests at the end (marked gpu)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from dqgen.core.spec import load_spec, shipped_specs

SPEC = "awq_int4_fp16"  # the GEMV and the GEMM take it
GEMV_ONLY = "fp4_e2m1_bf16"  # 4-bit float codes: no GEMM
WORDS = 1000
_ENTRY = re.compile(r"^\.(?:visible\s+)?\.entry\s+(\w+)\(", re.M)
_GLOBAL = re.compile(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?(?:void\s+)?(\w+)\s*\(")


def ptx_entries(path: Path) -> set[str]:
    return set(_ENTRY.findall(path.read_text()))


def by_family(report: dict) -> dict[str, dict]:
    return {f["family"]: f for f in report["families"]}


@pytest.fixture(scope="module")
def awq_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    from dqgen.tools.build import build_spec

    out = tmp_path_factory.mktemp("awq") / "out"
    return build_spec(load_spec(SPEC), "sm_80", out, words=WORDS, gpu=False), out


def test_a_gemm_capable_spec_builds_the_dequant_kernel_the_gemv_and_the_gemm(awq_build: tuple[dict, Path]) -> None:
    report, out = awq_build
    assert report["ok"], json.dumps(report["families"], indent=1)[:3000]
    fams = by_family(report)
    assert list(fams) == ["dequant", "gemv", "gemm"]
    names = {"dequant": [f"{SPEC}.cu", f"{SPEC}.cuh", f"{SPEC}.sm_80.ptx"]} | {
        f: [f"{SPEC}_{f}.cu", f"{SPEC}_{f}.sm_80.ptx"] for f in ("gemv", "gemm")
    }
    for family, files in names.items():
        assert fams[family]["files"] == [str(out / n) for n in files]
    assert sorted(p.name for p in out.iterdir()) == sorted(n for files in names.values() for n in files)
    assert sorted(report["files"]) == sorted(str(out / n) for files in names.values() for n in files)
    # the kernels the runtime launches: AWQ int4 is a GROUPED spec (one word of 8 codes, 16-bit scales), so the
    # GEMV has the 8- and 16-token entries of every mode, GROUPED's also on the flat grid; the GEMM a plain and a
    # gather entry per tile config (16, 32 and 64 rows, 4 warps, 4 stages)
    modes = ("paired", "direct", "gather", "grouped", "grouped_flat")
    want = {
        "gemv": {f"dqgen_mm_{SPEC}_m{t}_{m}" for t in (8, 16) for m in modes},
        "gemm": {
            f"dqgen_gemm_{SPEC}_m{bm}w1x4s4b{b}{g}" for bm, b in ((16, 5), (32, 4), (64, 3)) for g in ("", "_gather")
        },
    }
    for family, entries in want.items():
        assert set(fams[family]["entry_points"]) == entries
        ptx = out / f"{SPEC}_{family}.sm_80.ptx"
        assert ".target sm_80" in ptx.read_text() and ptx_entries(ptx) == entries
        assert set(_GLOBAL.findall((out / f"{SPEC}_{family}.cu").read_text())) == entries
    assert ptx_entries(out / f"{SPEC}.sm_80.ptx") == set(fams["dequant"]["entry_points"])


def test_the_written_sources_are_what_the_runtime_compiles(awq_build: tuple[dict, Path]) -> None:
    from dqgen.emit.pipeline import compile_artifact
    from dqgen.kernels.gemm import GemmKernelConfig
    from dqgen.kernels.gemv import GemvConfig, entries

    _, out = awq_build
    spec = load_spec(SPEC)
    art = compile_artifact(spec)
    gemv = (out / f"{SPEC}_gemv.cu").read_text()
    # the loader compiles each GEMV entry point from its (artifact, tuning)'s one source: the written one
    assert all(GemvConfig(art, e).source() == gemv for e in entries(spec))
    assert (out / f"{SPEC}_gemm.cu").read_text() == GemmKernelConfig(spec).source()


def test_json_lists_each_family_with_its_steps(awq_build: tuple[dict, Path]) -> None:
    report, _ = awq_build
    fams = by_family(report)
    for fam in fams.values():
        assert set(fam["steps"]) == {"proof", "compile", "gpu"} and fam["ok"]
        compile_step = fam["steps"]["compile"]
        assert compile_step["ok"] and compile_step["problems"] == [] and "sm_80" in compile_step["line"]
        assert compile_step["seconds"] >= 0 and isinstance(compile_step["cached"], bool)
        gpu = fam["steps"]["gpu"]
        assert gpu["ok"] and gpu["skipped"], gpu
    assert fams["dequant"]["steps"]["gpu"]["line"] == "no GPU: skipped"  # as before (CI greps it)
    for family in ("gemv", "gemm"):
        assert fams[family]["steps"]["gpu"]["reason"] == "no GPU"
        assert fams[family]["steps"]["gpu"]["line"] == "skipped: no GPU"
    # the GEMM's converter is a Plan of its own (the converter spec), proven as its own step with the build's words;
    # the GEMV renders the spec's own converter, whose proof is the dequantize kernel's
    gemm_proof, gemv_proof = fams["gemm"]["steps"]["proof"], fams["gemv"]["steps"]["proof"]
    assert gemm_proof["ok"] and gemm_proof["plan"] == f"{SPEC}_trt" and gemm_proof["words"] >= WORDS
    assert gemm_proof["line"].startswith(f"{SPEC}_trt: PROVEN")
    assert gemv_proof["shared_with"] == "dequant" and gemv_proof["plan"] == SPEC
    assert gemv_proof["words"] == fams["dequant"]["steps"]["proof"]["words"] >= WORDS
    assert report["steps"]["proof"]["ok"] and report["steps"]["compile"] is fams["dequant"]["steps"]["compile"]


def test_a_second_build_takes_every_compile_from_the_cache(awq_build: tuple[dict, Path]) -> None:
    from dqgen.tools.build import build_spec

    _, out = awq_build
    again = build_spec(load_spec(SPEC), "sm_80", out, words=WORDS, gpu=False)
    assert again["ok"] and all(f["steps"]["compile"]["cached"] for f in again["families"])
    assert all("(cache hit)" in f["steps"]["compile"]["line"] for f in again["families"])


def test_a_gemv_only_spec_builds_no_gemm(tmp_path: Path) -> None:
    from dqgen.run.gemm import supports
    from dqgen.tools.build import build_spec

    spec = load_spec(GEMV_ONLY)
    assert not supports(spec)
    out = tmp_path / "out"
    report = build_spec(spec, spec.arch, out, words=WORDS, gpu=False)
    assert report["ok"]
    fams = by_family(report)
    assert list(fams) == ["dequant", "gemv"]
    ptx = out / f"{GEMV_ONLY}_gemv.{spec.arch}.ptx"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{GEMV_ONLY}.cu", f"{GEMV_ONLY}.cuh", f"{GEMV_ONLY}.{spec.arch}.ptx", f"{GEMV_ONLY}_gemv.cu", ptx.name]
    )
    entries = ptx_entries(ptx)
    assert entries == set(fams["gemv"]["entry_points"])
    # the 8- and 16-token entries of the paired, direct and gather modes at least
    for tokens in (8, 16):
        for mode in ("paired", "direct", "gather"):
            assert f"dqgen_mm_{GEMV_ONLY}_m{tokens}_{mode}" in entries


def _compile_fails_for(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """NVRTC fails for the program whose name ends with ``suffix`` (the others compile as ever)."""
    import dqgen.emit.nvrtc as nv

    real = nv.compile_source

    def failing(source: str, **kwargs: Any) -> Any:
        if kwargs.get("name", "").endswith(suffix):
            raise nv.CompileError("NVRTC compilation failed for sm_80 (stand-in)\nerror: boom", log="error: boom")
        return real(source, **kwargs)

    monkeypatch.setattr(nv, "compile_source", failing)


def test_a_failing_family_compile_fails_the_build_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dqgen.run.device as dev
    from dqgen.cli import app

    _compile_fails_for(monkeypatch, "_gemm.cu")
    monkeypatch.setattr(dev, "gpu_available", lambda: False)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["build", SPEC, "--words", str(WORDS), "--out", str(out), "--json"])
    assert r.exit_code == 3, r.output
    report = json.loads(r.output)
    fams = by_family(report)
    assert not report["ok"] and not fams["gemm"]["ok"]
    gemm_compile = fams["gemm"]["steps"]["compile"]
    assert gemm_compile["ok"] is False and gemm_compile["line"] == "NVRTC failed"
    assert "error: boom" in gemm_compile["problems"][0]
    assert fams["dequant"]["steps"]["compile"]["ok"] and fams["gemv"]["steps"]["compile"]["ok"]
    # none of the families' files, the ones that compiled included
    assert report["files"] == [] and all(f["files"] == [] for f in fams.values()) and not out.exists()


def test_a_failing_converter_proof_of_the_gemm_fails_the_build_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    import dqgen.emit.pipeline as pipeline
    from dqgen.tools.build import build_spec

    real = pipeline.prove

    def failing_for_the_converter_spec(plan: Any, spec: Any, n_random: int = 0, **kwargs: Any) -> Any:
        result = real(plan, spec, n_random=n_random, **kwargs)
        if spec.name == f"{SPEC}_trt":
            return dataclasses.replace(result, ok=False, failures=["word 0x1: got 2, want 3"])
        return result

    monkeypatch.setattr(pipeline, "prove", failing_for_the_converter_spec)
    monkeypatch.setattr(pipeline, "_PROOFS", {})
    monkeypatch.setattr(pipeline, "_load_proof", lambda path, words: None)  # prove again, whatever is stored
    monkeypatch.setattr(pipeline, "_store_proof", lambda path, proof: None)
    out = tmp_path / "out"
    report = build_spec(load_spec(SPEC), "sm_80", out, words=WORDS, gpu=False)
    fams = by_family(report)
    assert not report["ok"] and report["steps"]["proof"]["ok"]
    gemm_proof = fams["gemm"]["steps"]["proof"]
    assert gemm_proof["ok"] is False and gemm_proof["failures"] == ["word 0x1: got 2, want 3"]
    assert gemm_proof["line"].startswith(f"{SPEC}_trt: FAILED")
    for family in ("gemv", "gemm"):
        assert fams[family]["steps"]["gpu"]["line"] == "not run: a proof failed"
    assert report["files"] == [] and not out.exists()


def test_the_human_summary_has_a_line_per_family(awq_build: tuple[dict, Path]) -> None:
    from dqgen.tools.build import family_line

    report, _ = awq_build
    fams = by_family(report)
    line = family_line(fams["gemm"])
    assert "\n" not in line and line.startswith("6 entry points; proof: awq_int4_fp16_trt: PROVEN")
    assert line.endswith("GPU: skipped: no GPU") and "NVRTC" in line


# --------------------------------------------------------------------------- the GPU check's reporting (faked)


def test_a_family_whose_gpu_check_fails_fails_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the fake GPU (tests/test_build_cold.py), each family's check stands in: the GEMV's raises (as a launch
    that failed would), the GEMM's is out of its bound at M = 64. The build fails and says which; the files are
    written (every proof and compile passed), so that what failed can be read, as for the dequantize kernel."""
    import dqgen.run.gpucheck as gpucheck
    from dqgen.tools.build import build_spec

    from .test_build_cold import install_fake_gpu

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_gpu(monkeypatch.setattr)
    monkeypatch.setattr(gpucheck, "matmul_torch_problem", lambda: None)
    ran: list[str] = []

    def stand_in(kernel: Any, family: str, device: int = 0) -> list[gpucheck.MatmulCheck]:
        ran.append(family)
        if family == "gemv":
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS\nat launch")
        return [
            gpucheck.MatmulCheck(family, 17, 1152, 1448, 1e-4, 2e-3),
            gpucheck.MatmulCheck(family, 64, 1152, 1448, 0.5, 2e-3),
        ]

    monkeypatch.setattr(gpucheck, "check_matmul", stand_in)
    out = tmp_path / "out"
    report = build_spec(load_spec(SPEC), "sm_90", out, words=WORDS, gpu=True)
    assert ran == ["gemv", "gemm"] and not report["ok"]
    fams = by_family(report)
    assert fams["dequant"]["ok"] and report["steps"]["gpu"]["line"].count("bit-exact") == 3
    gemv = fams["gemv"]["steps"]["gpu"]
    assert gemv["ok"] is False and gemv["line"] == "failed: RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS at launch"
    gemm = fams["gemm"]["steps"]["gpu"]
    assert gemm["ok"] is False and not gemm["skipped"]
    assert "M=17 1152x1448: error 1.00e-04 <= 0.002" in gemm["line"]
    assert "M=64 1152x1448: error 5.00e-01 > the bound 0.002" in gemm["line"]
    assert [c["ok"] for c in gemm["checks"]] == [True, False]
    assert len(list(out.iterdir())) == 7


def test_a_passed_family_check_is_remembered_for_its_source_on_this_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family's check that passed on this GPU is not run again for the same source (a cached build then needs
    neither torch nor a launch for it, as the dequant check reuses its reference's outputs); a failed check, another
    GPU or a new check version checks again."""
    import dqgen.run.gpucheck as gpucheck
    import dqgen.run.tune as tune
    import dqgen.tools.build as build

    from .test_build_cold import install_fake_gpu

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_gpu(monkeypatch.setattr)
    monkeypatch.setattr(gpucheck, "matmul_torch_problem", lambda: None)
    ran: list[str] = []
    error = {"gemv": 1e-4, "gemm": 1e-4}

    def stand_in(artifact: Any, family: str, device: int = 0) -> list[gpucheck.MatmulCheck]:
        ran.append(family)
        return [gpucheck.MatmulCheck(family, m, 1152, 1448, error[family], 2e-3) for m in (1, 17)]

    monkeypatch.setattr(gpucheck, "check_matmul", stand_in)

    def families(out: str) -> dict[str, dict]:
        report = build.build_spec(load_spec(SPEC), "sm_90", tmp_path / out, words=WORDS, gpu=True)
        return {f: by_family(report)[f]["steps"]["gpu"] for f in ("gemv", "gemm")}

    error["gemm"] = 0.5  # the GEMM fails its bound once: its verdict is not kept
    first = families("a")
    assert ran == ["gemv", "gemm"] and first["gemv"]["ok"] and not first["gemm"]["ok"]
    error["gemm"] = 1e-4
    second = families("b")
    assert ran == ["gemv", "gemm", "gemm"]  # the GEMV's pass was remembered, the GEMM checked again
    assert (
        second["gemv"]["ok"]
        and second["gemv"]["cached"]
        and second["gemv"]["line"].endswith("(checked earlier on this GPU: cached)")
    )
    assert second["gemm"]["ok"] and "cached" not in second["gemm"]
    monkeypatch.setattr(gpucheck, "matmul_torch_problem", lambda: pytest.fail("torch probed for a cached check"))
    assert families("c")["gemm"]["cached"] and ran == ["gemv", "gemm", "gemm"]
    monkeypatch.setattr(gpucheck, "matmul_torch_problem", lambda: None)
    monkeypatch.setattr(tune, "gpu_name", lambda ordinal=0: "Another GPU")
    families("d")
    monkeypatch.setattr(build, "CHECK_VERSION", build.CHECK_VERSION + 1)
    families("e")
    assert ran == ["gemv", "gemm", "gemm"] + ["gemv", "gemm"] * 2


def test_without_torch_the_families_checks_are_skipped_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dqgen.run.gpucheck as gpucheck
    from dqgen.tools.build import build_spec

    from .test_build_cold import install_fake_gpu

    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_gpu(monkeypatch.setattr)
    monkeypatch.setattr(
        gpucheck, "matmul_torch_problem", lambda: "torch is not installed (the matmul host code needs it)"
    )
    monkeypatch.setattr(gpucheck, "check_matmul", lambda *a, **k: pytest.fail("checked without torch"))
    report = build_spec(load_spec(SPEC), "sm_90", tmp_path / "out", words=WORDS, gpu=True)
    assert report["ok"]
    for family in ("gemv", "gemm"):
        gpu = by_family(report)[family]["steps"]["gpu"]
        assert gpu == {
            "ok": True,
            "skipped": True,
            "reason": "torch is not installed (the matmul host code needs it)",
            "line": "skipped: torch is not installed (the matmul host code needs it)",
        }


# --------------------------------------------------------------------------- the checked shapes


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_the_checked_weight_packs_for_every_family_that_takes_the_spec(name: str) -> None:
    """The build's matmul check weight (gpucheck.matmul_shape, drawn by matmul_inputs) is one the GEMV's prepack
    and, where the GEMM takes the spec, its pack accept, with a K tail past whole chunks and a partial N tile."""
    from dqgen.check.matmul_reference import matmul_inputs
    from dqgen.layout.gemm import pack_gemm
    from dqgen.layout.matmul import prepack
    from dqgen.run.gemm import supports
    from dqgen.run.gpucheck import matmul_shape

    spec = load_spec(name)
    K, N, group = matmul_shape(spec)
    assert K > 1024 and N in (1448, 1440)
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=K + N, group_size=group)
    assert W.shape == (K, N) and np.isfinite(W.astype(np.float64)).all()
    rows = s.shape[0]
    group_size = K // rows if rows > 1 else -1
    pre = prepack(spec, q, s, z, gi, group_size)
    assert pre.N == N
    if supports(spec):
        pk = pack_gemm(spec, q, s, z, gi, group_size)
        assert pk.wq.shape[0] > 0


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", [SPEC, "gptq_int4_asym_act_order_fp16", "int8_bf16", "nvfp4_fp16", "gptq_int3_fp16"])
def test_build_checks_every_family_on_the_gpu(name: str, tmp_path: Path) -> None:
    """`dqgen build` on the GPU: every family that takes the spec runs and is within its tolerance of
    x @ dequant_ref(W) (AWQ: GROUPED GEMV; act-order: the gather entries; int8 bf16; NVFP4: block scales and a
    global scale, GEMV only; 3-bit: three-word blocks, GEMV only)."""
    from dqgen.check.matmul_reference import TOLERANCE
    from dqgen.run.gemm import supports
    from dqgen.run.gpucheck import BUILD_MATMUL_M
    from dqgen.tools.build import build_spec

    spec = load_spec(name)
    report = build_spec(spec, spec.arch, tmp_path / "out", words=WORDS, gpu=True)
    fams = by_family(report)
    assert list(fams) == ["dequant", "gemv", *(["gemm"] if supports(spec) else [])]
    assert report["ok"], json.dumps(report["families"], indent=1)[:4000]
    for family in list(fams)[1:]:
        gpu = fams[family]["steps"]["gpu"]
        assert gpu["ok"] and not gpu["skipped"], gpu
        assert [c["M"] for c in gpu["checks"]] == list(BUILD_MATMUL_M[family])
        assert all(0 <= c["error"] <= TOLERANCE[spec.target.value] for c in gpu["checks"]), gpu


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_the_builds_matmul_check_passes_for_every_spec(name: str) -> None:
    """gpucheck.check_matmul, the build's check of each family, on every shipped spec (both families where the
    GEMM takes it)."""
    from dqgen.run.gemm import supports
    from dqgen.run.gpucheck import check_matmul
    from dqgen.run.runtime import Kernel

    spec = load_spec(name)
    kernel = Kernel(spec)
    for family in ("gemv", *(["gemm"] if supports(spec) else [])):
        checks = check_matmul(kernel.artifact, family)
        assert checks and all(c.ok for c in checks), [c.line() for c in checks]


@pytest.mark.gpu
def test_the_builds_matmul_check_fails_against_another_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: against a reference 5% off (past the fp16 bound, 2e-3) every shape fails."""
    import dqgen.check.matmul_reference as mref
    from dqgen.run.gpucheck import check_matmul
    from dqgen.run.runtime import Kernel

    real = mref.matmul_reference
    monkeypatch.setattr(mref, "matmul_reference", lambda x, w, bias=None: 1.05 * real(x, w, bias))
    kernel = Kernel(load_spec(SPEC))
    for family in ("gemv", "gemm"):
        checks = check_matmul(kernel.artifact, family)
        assert checks and not any(c.ok for c in checks) and all(c.error > 0.02 for c in checks)
