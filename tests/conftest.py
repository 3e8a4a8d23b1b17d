from __future__ import annotations

import atexit
import json
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pytest

from dqgen.core.spec import SHIPPED_SPECS

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted(SHIPPED_SPECS.glob("*.yaml"))


def _tests_importable_by_name() -> None:
    """Let a subprocess import ``tests.x`` (a function a test hands to dqgen's reference worker is pickled by that
    name) without putting the checkout, and so its dqgen, on sys.path: --import-mode=importlib imports the test
    modules from their files, so no folder on sys.path holds ``tests``. A folder holding only a link named tests is
    appended instead (after site-packages); the worker takes this process's sys.path."""
    if any(
        (Path(p or ".") / "tests" / "__init__.py").resolve() == Path(__file__).resolve().with_name("__init__.py")
        for p in sys.path
    ):
        return  # the checkout is on sys.path already (PYTHONPATH, `python -m pytest` from it)
    folder = Path(tempfile.mkdtemp(prefix="dqgen-tests-"))
    link = folder / "tests"
    link.symlink_to(ROOT / "tests", target_is_directory=True)
    sys.path.append(str(folder))
    atexit.register(lambda: (link.unlink(), folder.rmdir()))


_tests_importable_by_name()


def installed_as() -> tuple[str, metadata.Distribution | None]:
    """How dqgen is installed here: "installed" (a wheel or `pip install .`, and the dqgen imported is that copy),
    "editable from <folder>" (`pip install -e`: that folder is the package), or "not installed" (no install, or an
    installed copy that another dqgen on sys.path, PYTHONPATH or the current folder, hides)."""
    import dqgen

    # Installed by an installer (pip writes INSTALLER): not the dqgen.egg-info a build leaves in the checkout, which
    # `metadata.distribution` would find first when the checkout is on sys.path.
    installed = [d for d in metadata.distributions(name="dqgen") if d.read_text("INSTALLER") is not None]
    if not installed:
        return "not installed", None
    dist = installed[0]
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable"):
        return f"editable from {direct.get('url', '?').removeprefix('file://')}", dist
    if Path(str(dist.locate_file("dqgen/__init__.py"))).resolve() != Path(dqgen.__file__).resolve():
        return "not installed", dist
    return "installed", dist


def pytest_report_header(config: pytest.Config) -> str:
    # The first lines of every run (and so of CI's log) say which dqgen the tests import.
    import dqgen

    return f"dqgen {dqgen.__version__}: {installed_as()[0]}; imported from {Path(dqgen.__file__).parent}"


def _gpu() -> bool:
    from dqgen.run.device import gpu_available

    return gpu_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _gpu():
        skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
