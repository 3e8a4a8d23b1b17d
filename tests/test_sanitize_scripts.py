"""The compute-sanitizer scripts that allocate through torch turn its caching allocator off before torch allocates
(dqgen.run.gpucheck.exact_allocations): memcheck knows only the allocator's 2 MiB segments otherwise, so a kernel
reading past a tensor's end (the GEMV's padded scale rows, its padding chunks) would pass unseen. CPU: the scripts
are imported, not run."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from dqgen.run.gpucheck import exact_allocations

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
ENV = "PYTORCH_NO_CUDA_MEMORY_CACHING"


def _torch_sanitizer_scripts() -> list[Path]:
    """Scripts meant for compute-sanitizer that import torch."""
    return sorted(
        p for p in SCRIPTS.glob("*.py") if "compute-sanitizer" in (text := p.read_text()) and "import torch" in text
    )


def test_the_torch_sanitizer_scripts_are_found() -> None:
    names = {p.name for p in _torch_sanitizer_scripts()}
    assert {"matmul_sanitize.py", "gemm_sanitize.py", "sanitize_entry_points.py"} <= names


@pytest.mark.parametrize("script", _torch_sanitizer_scripts(), ids=lambda p: p.stem)
def test_script_turns_the_caching_allocator_off_on_import(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    spec = importlib.util.spec_from_file_location(f"_sanitize_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the scripts import torch inside main(): nothing has allocated yet
    assert os.environ.get(ENV) == "1"


def test_exact_allocations_refuses_once_torch_has_initialized_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", fake)
    with pytest.raises(RuntimeError, match=r"^exact_allocations: torch has initialized CUDA already") as info:
        exact_allocations()
    assert "\n" not in str(info.value) and ENV not in os.environ
    fake.cuda.is_initialized = lambda: False  # imported, no CUDA yet: in time
    exact_allocations()
    assert os.environ[ENV] == "1"
