"""docs/experiments/w8a8_host_gpu.sh (the W8A8 call path's GPU checks and host-time figures in one call) exits non-zero
when a check fails, as the other GPU runners do. CPU: python, compute-sanitizer and nvidia-smi are stand-ins on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "docs" / "experiments" / "w8a8_host_gpu.sh"


def _run(tmp_path: Path, python_rc: int, sanitizer_rc: int) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, rc in (("python", python_rc), ("compute-sanitizer", sanitizer_rc), ("nvidia-smi", 0)):
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\nexit {rc}\n")
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash, timeout")
@pytest.mark.parametrize(
    "python_rc, sanitizer_rc, want",
    [(0, 0, 0), (1, 0, 1), (0, 99, 1)],
    ids=["all-pass", "tests-fail", "memcheck-fails"],
)
def test_exit_status_reports_a_failed_check(tmp_path: Path, python_rc: int, sanitizer_rc: int, want: int) -> None:
    r = _run(tmp_path, python_rc, sanitizer_rc)
    assert r.returncode == want, r.stdout + r.stderr
    assert (tmp_path / "out" / "logs.tar.gz").is_file()  # the logs come back either way
