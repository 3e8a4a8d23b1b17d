"""Issue 26: `dqgen build --out` writes its files whole or not at all (a write that fails, as on a full disk, leaves
an earlier build's files as they were and no new file, folder or temporary file), and `build --json` gives the op
counts per 8 outputs as numbers, as `explain --json` does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

#: 3-bit codes: 13.5 conversion ops per 8 outputs (a fraction: the case the strings "27/2" were about); only the
#: GEMV takes it, so the build compiles two sources.
SPEC = "gptq_int3_fp16"
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # the CPU path on every machine


def _run(*args: str, code: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "dqgen", *args]
    return subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=os.environ | NO_GPU | (env or {})
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("build") / "gen"
    r = _run("build", SPEC, "--out", str(out), "--words", "1000", "--json")
    assert r.returncode == 0, r.stderr
    return out, json.loads(r.stdout)


def test_build_json_op_counts_are_numbers_like_explains(built: tuple[Path, dict]) -> None:
    _, report = built
    r = _run("explain", SPEC, "--json", "--words", "100")
    assert r.returncode == 0, r.stderr
    explained = json.loads(r.stdout)["ops_per_8"]
    for stage in ("convert", "scale"):
        value = report["ops_per_8"][stage]
        assert type(value) is float, (stage, value)
        assert value == explained[stage]
    assert report["ops_per_8"]["convert"] == 13.5  # 3-bit GPTQ: 54 ops per 3-word block of 32 codes, times 8 / 32


#: Runs `dqgen build` with a file-size limit (RLIMIT_FSIZE, the limit `ulimit -f` sets): a write past it fails with
#: EFBIG as one on a full disk fails with ENOSPC, part way through the build's files.
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.argv = ["dqgen", *sys.argv[2:]]
from dqgen.cli import main
main()
"""


def _limited_build(limit: int, out: Path) -> subprocess.CompletedProcess:
    return _run(str(limit), "build", SPEC, "--out", str(out), "--words", "1000", code=LIMITED)


def test_a_failed_write_keeps_the_earlier_build(built: tuple[Path, dict], tmp_path: Path) -> None:
    src, report = built
    names = sorted(Path(f).name for f in report["files"])
    sizes = {n: (src / n).stat().st_size for n in names}
    assert len(names) == 5 and min(sizes.values()) > 0, sizes
    out = tmp_path / "gen"
    out.mkdir()
    for n in names:  # an earlier build's files, distinguishable from this one's
        (out / n).write_text(f"earlier build of {n}\n")
    limit = max(sizes.values()) - 1  # every file but the largest fits: the write fails part way
    r = _limited_build(limit, out)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: [--out] cannot write"), r.stderr
    assert "File too large" in lines[0]
    assert sorted(p.name for p in out.iterdir()) == names  # no temporary file, no new file
    for n in names:
        assert (out / n).read_text() == f"earlier build of {n}\n", n


def test_a_failed_write_leaves_no_file_or_folder(built: tuple[Path, dict], tmp_path: Path) -> None:
    src, report = built
    largest = max((src / Path(f).name).stat().st_size for f in report["files"])
    out = tmp_path / "new" / "gen"  # made by the build: removed again when its files cannot be written
    r = _limited_build(largest - 1, out)
    assert r.returncode == 2, r.stderr
    assert not (tmp_path / "new").exists()
    r = _limited_build(largest + 4096, out)  # room for every file: the same build writes them all
    assert r.returncode == 0, r.stderr
    for f in report["files"]:
        assert (out / Path(f).name).read_bytes() == (src / Path(f).name).read_bytes()
