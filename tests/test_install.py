"""The tests run against the installed package, as the README says: pytest puts no folder on sys.path
(``--import-mode=importlib``), so with dqgen installed from a wheel or ``pip install .``, ``import dqgen`` finds the
installed copy, not the checkout beside the tests."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dqgen

from .conftest import ROOT, installed_as


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def test_the_tests_import_the_installed_package():
    kind, dist = installed_as()
    if kind.startswith("editable"):
        pytest.skip(f"dqgen is installed {kind} (pip install -e): that checkout is the package")
    if dist is None:
        pytest.skip("dqgen is not installed: imported from PYTHONPATH or the current folder")
    imported = Path(dqgen.__file__).resolve()
    # An installed dqgen exists, so the one imported must be it: not the checkout, through sys.path.
    assert kind == "installed", (
        f"dqgen imported from {imported}, not the installed {dist.locate_file('dqgen')} (`python -m pytest` puts the "
        "current folder first on sys.path, as PYTHONPATH does: run `pytest`)"
    )
    # the checkout's own package folder (a venv inside the checkout, as CI's .venv, is not the checkout's code)
    assert not imported.is_relative_to((ROOT / "dqgen").resolve()), f"dqgen imported from the checkout: {imported}"
    # ... and it is this checkout's code: a stale install would pass or fail tests of code it does not hold.
    files = {f.as_posix(): f for f in dist.files or () if f.parts[0] == "dqgen" and f.suffix != ".pyc"}
    assert "dqgen/py.typed" in files
    differ = [name for name, f in files.items() if _digest(Path(str(dist.locate_file(f)))) != _digest(ROOT / name)]
    missing = [p.relative_to(ROOT).as_posix() for p in (ROOT / "dqgen").rglob("*.py")]
    missing = [name for name in missing if name not in files]
    assert not differ and not missing, (
        f"the installed dqgen is not this checkout's (reinstall it): differ {differ[:5]}, not installed {missing[:5]}"
    )


def test_the_wheel_holds_every_file_of_the_package(tmp_path):
    """The wheel built from this checkout holds py.typed (PEP 561: a user's mypy reads dqgen's hints), LICENSE
    and every file of dqgen/ (each spec, template, rule table: package-data must name them all)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "dqgen", src / "dqgen", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("dqgen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "dqgen/py.typed" in names
    package = {p.relative_to(src).as_posix() for p in (src / "dqgen").rglob("*") if p.is_file()}
    assert package - names == set(), "files of dqgen/ the wheel lacks (add them to package-data)"
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)


def test_the_readme_installs_extras_that_pyproject_declares():
    """README's command 1 installs the torch extra (what the Python examples need) and the test extra, and the test
    extra holds what the tests import beyond dqgen: torch and transformers (the model-level tests), tomli on 3.10."""
    from packaging.requirements import Requirement

    from .test_package import pyproject

    readme = (ROOT / "README.md").read_text()
    command = re.findall(r"^```bash\n(.*?)^```", readme, flags=re.M | re.S)[0]
    (extras,) = re.findall(r"pip install '\.\[([a-z,]+)\]'", command)
    declared = pyproject()["project"]["optional-dependencies"]
    assert "torch" in extras.split(",") and set(extras.split(",")) <= set(declared)
    assert {Requirement(r).name for r in declared["torch"]} == {"torch"}
    test = {Requirement(r).name: Requirement(r) for r in declared["test"]}
    assert {"pytest", "torch", "transformers", "tomli"} <= set(test)
    assert not test["tomli"].marker.evaluate({"python_version": "3.11"})
    assert test["tomli"].marker.evaluate({"python_version": "3.10"})


def test_the_changelog_has_a_section_for_this_version():
    """CHANGELOG.md (Keep a Changelog): [Unreleased] on top, then one dated section per version, newest first,
    the package's version among them (a version bump without its section fails here)."""
    heads = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert heads[0] == ("Unreleased", "")
    versions = [tuple(int(v) for v in name.split(".")) for name, _ in heads[1:]]
    dates = [date for _, date in heads[1:]]
    assert all(dates) and versions == sorted(versions, reverse=True) and dates == sorted(dates, reverse=True)
    assert tuple(int(v) for v in dqgen.__version__.split(".")) in versions
