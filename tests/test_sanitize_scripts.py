"""The compute-sanitizer scripts that allocate through torch turn its caching allocator off before torch allocates
(dqgen.run.gpucheck.exact_allocations): memcheck knows only the allocator's 2 MiB segments otherwise, so a kernel
reading past a tensor's end (the GEMV's padded scale rows, its padding chunks) would pass unseen. CPU: each script
is run as ``__main__`` with a stand-in torch, and imported."""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import types
from pathlib import Path

import pytest

from dqgen.run.gpucheck import exact_allocations

SCRIPTS = Path(__file__).resolve().parent.parent / "devtools"
ENV = "PYTORCH_NO_CUDA_MEMORY_CACHING"


def _torch_sanitizer_scripts() -> list[Path]:
    """Scripts meant for compute-sanitizer that import torch."""
    return sorted(
        p for p in SCRIPTS.glob("*.py") if "compute-sanitizer" in (text := p.read_text()) and "import torch" in text
    )


def test_the_torch_sanitizer_scripts_are_found() -> None:
    names = {p.name for p in _torch_sanitizer_scripts()}
    assert {"matmul_sanitize.py", "gemm_sanitize.py", "sanitize_entry_points.py"} <= names


class _MainReached(Exception):
    """Raised by the stand-in torch when the script's main() first touches it."""


@pytest.mark.parametrize("script", _torch_sanitizer_scripts(), ids=lambda p: p.stem)
def test_script_run_turns_the_caching_allocator_off_before_torch_allocates(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as compute-sanitizer runs it (``__main__``) with a stand-in torch that stops main() at its first use of
    torch: the variable is set by then."""
    monkeypatch.delenv(ENV, raising=False)
    seen: dict[str, str | None] = {}

    def first_use(*_: object, **__: object) -> None:
        seen["env"] = os.environ.get(ENV)
        raise _MainReached

    cuda = types.SimpleNamespace(is_initialized=lambda: False, synchronize=first_use)
    fake = types.ModuleType("torch")
    fake.cuda = cuda  # type: ignore[attr-defined]
    fake.__getattr__ = lambda name: first_use()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(sys, "argv", [str(script)])
    with pytest.raises((_MainReached, AttributeError, TypeError, SystemExit)):
        runpy.run_path(str(script), run_name="__main__")
    assert os.environ.get(ENV) == "1"
    assert seen.get("env", "1") == "1"


@pytest.mark.parametrize("script", _torch_sanitizer_scripts(), ids=lambda p: p.stem)
def test_script_imported_leaves_the_allocator_alone(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imported (the quick tier's tests import sanitize_entry_points after torch has started CUDA), a script
    neither sets the variable nor refuses."""
    monkeypatch.delenv(ENV, raising=False)
    spec = importlib.util.spec_from_file_location(f"_sanitize_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert ENV not in os.environ


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
