"""The one pipeline (dqgen.emit.pipeline): build, the runtime's Kernel, explain, the SASS count and dqgen.compile
solve a spec once per process; a passed proof is stored on disk and not run again; the artifact's sources are
the shipped generated files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dqgen
import dqgen.emit.pipeline as pipeline
from dqgen.check.prove import ProofResult
from dqgen.core.spec import Spec, load_spec
from dqgen.emit.pipeline import Artifact, compile_artifact, spec_key
from dqgen.kernels.dequant import DequantConfig, variants, whole_source
from dqgen.solve import solver

ROOT = Path(__file__).resolve().parent.parent
SPEC_NAME = "awq_int4_fp16"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """An empty in-process memo and proof cache, and a log of every solve() the pipeline makes."""
    monkeypatch.setattr(pipeline, "_SOLVED", {})
    monkeypatch.setattr(pipeline, "_PROOFS", {})
    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))
    solved: list[str] = []
    real = solver.candidates

    def counting(spec: Spec):  # every solve() runs this, whoever calls it and however it was imported
        solved.append(spec.name)
        return real(spec)

    monkeypatch.setattr(solver, "candidates", counting)
    yield solved


def test_build_runtime_explain_sass_and_compile_solve_once(
    fresh: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import dqgen.emit.sass as sass
    from dqgen.cli import app
    from dqgen.run.runtime import Kernel
    from dqgen.tools.build import build_spec

    # nvdisasm is not what is counted here: each probe's cubin (from NVRTC) stands for its instructions
    monkeypatch.setattr(sass, "disassemble", lambda cubin: ["IADD3"] * (len(cubin) % 7))
    spec = load_spec(SPEC_NAME)
    report = build_spec(spec, "sm_80", tmp_path / "out", words=100, gpu=False)
    assert report["steps"]["proof"]["ok"] and report["steps"]["compile"]["ok"], report
    kernel = Kernel(spec)
    r = CliRunner().invoke(app, ["explain", SPEC_NAME, "--words", "100"])
    assert r.exit_code == 0, r.output
    sass.sass_count(spec, "sm_80")
    compiled = dqgen.compile(SPEC_NAME)
    assert fresh == [SPEC_NAME, f"{SPEC_NAME}_trt"]  # one solve for all five (the build's GEMM: its converter spec)
    assert kernel.plan is compiled.plan and kernel.source == (tmp_path / "out" / f"{SPEC_NAME}.cu").read_text()


def test_another_spec_or_strategy_is_solved_again(fresh: list[str]) -> None:
    spec = load_spec(SPEC_NAME)
    compile_artifact(spec)
    other = spec.model_copy(update={"name": "renamed"})
    compile_artifact(other)
    compile_artifact(spec, strategy="lanes")
    compile_artifact(spec)
    assert fresh == [SPEC_NAME, "renamed", SPEC_NAME]
    assert len({spec_key(spec), spec_key(other), spec_key(spec, "lanes")}) == 3


@pytest.mark.parametrize("name", ["awq_int4_fp16", "gptq_int3_fp16", "nvfp4_fp16"])
def test_artifact_sources_are_the_shipped_generated_files(fresh: list[str], name: str) -> None:
    art = compile_artifact(load_spec(name))
    assert whole_source(art) == (ROOT / "generated" / f"{name}.cu").read_text()
    assert art.header == (ROOT / "generated" / f"{name}.cuh").read_text()
    assert art.losers == tuple(art.plan.rejected) and art.proof is None
    v = variants(art.spec)[0]
    one = DequantConfig(art, v).source()
    assert one != whole_source(art) and one is DequantConfig(compile_artifact(load_spec(name)), v).source()


def _no_prove(*args: object, **kwargs: object) -> ProofResult:
    raise AssertionError("proved again")


def test_a_passed_proof_is_stored_and_not_run_again(fresh: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec("int8_fp16")
    first = compile_artifact(spec, proof_words=3000).proof
    assert first is not None and first.ok and not first.cached and first.words > 3000
    real_prove = pipeline.prove
    monkeypatch.setattr(pipeline, "prove", _no_prove)
    assert compile_artifact(spec, proof_words=3000).proof is first  # in-process
    monkeypatch.setattr(pipeline, "_PROOFS", {})  # as a new process: from disk
    again = compile_artifact(spec, proof_words=3000).proof
    assert again is not None and again.cached and again.ok and again.words == first.words
    assert "(cached)" in again.line()
    # more words than were proven: proved again
    monkeypatch.setattr(pipeline, "prove", real_prove)
    more = compile_artifact(spec, proof_words=5000).proof
    assert more is not None and not more.cached and more.words == first.words + 2000


def test_a_damaged_or_foreign_proof_file_is_proved_again(fresh: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec("int8_fp16")
    proof = compile_artifact(spec, proof_words=1000).proof
    assert proof is not None and proof.ok
    (path,) = (Path(pipeline.default_cache_dir()) / "proofs").rglob("*.json")
    proved: list[int] = []
    real_prove = pipeline.prove

    def counting(*args: object, **kwargs: object) -> ProofResult:
        proved.append(1)
        return real_prove(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "prove", counting)
    for text in ("{not json", json.dumps({"ok": False, "words": 10**9, "lane_words": 1, "seconds": 0.1}), "[]"):
        path.write_text(text)
        monkeypatch.setattr(pipeline, "_PROOFS", {})
        assert compile_artifact(spec, proof_words=1000).proof.ok  # type: ignore[union-attr]
    assert len(proved) == 3


def test_a_failed_proof_is_not_stored(fresh: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    real_prove = pipeline.prove

    def failing(plan, spec, n_random=0, **kwargs):  # type: ignore[no-untyped-def]
        return dataclasses.replace(real_prove(plan, spec, n_random=10), ok=False, failures=["word 0x0"])

    monkeypatch.setattr(pipeline, "prove", failing)
    spec = load_spec("int8_fp16")
    assert not compile_artifact(spec, proof_words=10).proof.ok  # type: ignore[union-attr]
    assert not list((Path(pipeline.default_cache_dir()) / "proofs").rglob("*.json"))
    monkeypatch.setattr(pipeline, "prove", real_prove)
    assert compile_artifact(spec, proof_words=10).proof.ok  # type: ignore[union-attr]


def test_the_proof_key_follows_the_plan_and_the_words() -> None:
    spec = load_spec(SPEC_NAME)
    art = compile_artifact(spec)
    other = compile_artifact(spec, strategy="lanes")
    key = pipeline.proof_key(spec, art.plan, 1000)
    assert key == pipeline.proof_key(spec, art.plan, 1000)
    assert key != pipeline.proof_key(spec, art.plan, 1001)
    if other.plan.ops != art.plan.ops:
        assert key != pipeline.proof_key(spec, other.plan, 1000)
    assert isinstance(art, Artifact)


def test_the_proof_key_is_the_same_in_another_process() -> None:
    """The disk cache is only worth anything if a new process computes the same key."""
    import subprocess
    import sys

    spec = load_spec(SPEC_NAME)
    key = pipeline.proof_key(spec, compile_artifact(spec).plan, 1000)
    code = (
        "from dqgen.core.spec import load_spec\nfrom dqgen.emit import pipeline\n"
        f"s = load_spec({SPEC_NAME!r})\nprint(pipeline.proof_key(s, pipeline.compile_artifact(s).plan, 1000))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == key
