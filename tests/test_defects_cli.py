"""Issue 26's small CLI defects: --words out of range or not a number, a folder named like a shipped spec, and
plain `dqgen bench` checking --shapes / --impls only after looking for a GPU. Each is one `error:` line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dqgen.core.spec import SpecError, load_spec

from .conftest import ROOT

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # "no GPU" on every machine: an argument error must come before it


def dqgen(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # PYTHONPATH: this checkout's dqgen from any working directory
    env = os.environ | {"PYTHONPATH": str(ROOT)} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "dqgen", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def one_error_line(r: subprocess.CompletedProcess, *fragments: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr)
    lines = r.stderr.strip("\n").splitlines()
    assert len(lines) == 1, r.stderr  # not typer's box of several lines
    assert lines[0].startswith("error: "), lines[0]
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("value", ["-1", "abc", "1e6", "", "1000000001", "99999999999999999999999", "\u0663"])
@pytest.mark.parametrize("command", ["explain", "build"])
def test_bad_words_is_one_error_line_naming_the_range(tmp_path: Path, command: str, value: str) -> None:
    out = ["--out", str(tmp_path / "out")] if command == "build" else []
    line = one_error_line(dqgen(command, "int8_fp16", "--words", value, *out), "[--words]", repr(value))
    assert "expected a whole number from 0 to 1_000_000_000" in line
    assert not (tmp_path / "out").exists()


def test_words_in_range_still_prove() -> None:
    for value in ("0", "1_000", " 250 "):
        r = dqgen("explain", "int8_fp16", "--words", value)
        assert r.returncode == 0, r.stderr
    assert "PROVEN: 3,560 words" in dqgen("explain", "int8_fp16", "--words", "1_000").stdout


def test_words_help_names_the_bound() -> None:
    r = dqgen("explain", "--help", env={"COLUMNS": "300"})
    assert r.returncode == 0 and "At most 1_000_000_000." in r.stdout


# ---------------------------------------------------------------- a folder named like a shipped spec


def test_a_folder_named_like_a_shipped_spec_does_not_hide_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "awq_int4_fp16").mkdir()  # e.g. what `dqgen build awq_int4_fp16 --out awq_int4_fp16` made
    monkeypatch.chdir(tmp_path)
    assert load_spec("awq_int4_fp16") == load_spec(ROOT / "dqgen/specs/awq_int4_fp16.yaml")
    r = dqgen("explain", "awq_int4_fp16", "--words", "100", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("dqgen explain: awq_int4_fp16 - AutoAWQ")
    assert "Proof: PROVEN" in r.stdout


def test_a_file_named_like_a_shipped_spec_is_that_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "dqgen/specs/int8_fp16.yaml").read_text().replace("name: int8_fp16", "name: mine")
    assert "name: mine" in text
    (tmp_path / "awq_int4_fp16").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert load_spec("awq_int4_fp16").name == "mine"


def test_a_folder_that_names_no_shipped_spec_says_it_is_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_spec").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=r"^my_spec: not a regular file but a folder \(expected a YAML spec file"):
        load_spec("my_spec")


# ---------------------------------------------------------------- bench checks its arguments before the GPU


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--shapes", "4096by4096"], ("[--shapes] got '4096by4096'", "expected KxN or KxN:G")),
        (["--shapes", "0x4096"], ("[--shapes] got '0x4096'",)),
        (["--shapes", "4096x4096:0"], ("[--shapes] got '4096x4096:0'", "G positive or -1")),
        (["--impls", "torch,marlin"], ("[--impls] got 'marlin'", "torch, cuda-naive, triton")),
    ],
)
def test_bench_checks_its_arguments_before_the_gpu(args: list[str], fragments: tuple[str, ...]) -> None:
    one_error_line(dqgen("bench", "awq_int4_fp16", *args, env=NO_GPU), *fragments)


def test_bench_with_good_arguments_then_looks_for_the_gpu() -> None:
    r = dqgen("bench", "awq_int4_fp16", "--shapes", "1024x2048:128", "--impls", "torch,triton", env=NO_GPU)
    one_error_line(r, "dqgen bench needs an NVIDIA GPU (none found)")


def test_words_default_is_a_million() -> None:
    r = dqgen("explain", "int8_fp16")
    assert r.returncode == 0, r.stderr
    assert "PROVEN: 1,002,560 words (2,560 lane-exhaustive)" in r.stdout
