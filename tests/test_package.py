"""What travels with the package: shipped specs by name, templates, version; usable from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import dqgen
from dqgen.core.spec import SHIPPED_SPECS, SpecError, load_spec, shipped_specs
from dqgen.emit.render import TEMPLATES

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict:
    """pyproject.toml, parsed: tomllib from Python 3.11, tomli (the test extra's, on 3.10) before it."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # -c instead of -m: from a foreign folder `-m dqgen` would not find a checkout on sys.path by accident.
    env = os.environ | {"PYTHONPATH": str(Path(dqgen.__file__).parent.parent)}
    code = "import sys; from dqgen.cli import main; sys.argv[0] = 'dqgen'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def test_specs_and_templates_live_inside_the_package():
    pkg = Path(dqgen.__file__).resolve().parent
    assert SHIPPED_SPECS.parent == pkg and TEMPLATES.parent == pkg / "emit"
    assert {"kernel.cu.j2", "converter.cuh.j2"} <= {p.name for p in TEMPLATES.glob("*.j2")}
    # The wheel's package data must name both folders (and the shipped dispatch rules), or an installed dqgen has
    # none of them.
    data = pyproject()["tool"]["setuptools"]["package-data"]["dqgen"]
    assert {"py.typed", "specs/*.yaml", "emit/templates/*.j2", "run/dispatch_rules.json"} <= set(data)
    assert (pkg / "run/dispatch_rules.json").is_file()


def test_every_shipped_spec_loads_by_name_and_by_path():
    names = shipped_specs()
    assert len(names) >= 22 and "awq_int4_fp16" in names
    for name, path in names.items():
        by_name, by_path = load_spec(name), load_spec(path)
        assert by_name == by_path and by_name.name == name


def test_a_file_in_the_current_folder_wins_over_a_shipped_name(tmp_path, monkeypatch):
    # A user's own file named like a shipped spec is what they mean: no silent substitution.
    (tmp_path / "awq_int4_fp16").write_text((SHIPPED_SPECS / "int8_fp16.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert load_spec("awq_int4_fp16").name == "int8_fp16"


def test_unknown_name_is_one_line_pointing_at_dqgen_list():
    with pytest.raises(SpecError, match=r"^awq_int4_fp17: no such spec file \(nor a shipped spec: `dqgen list`"):
        load_spec("awq_int4_fp17")


def test_load_spec_passes_a_spec_through():
    s = load_spec("int8_bf16")
    assert load_spec(s) is s


def test_version_matches_the_package(tmp_path):
    r = _run("--version", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"dqgen {dqgen.__version__}"
    assert dqgen.__version__.count(".") == 2


def test_list_and_explain_by_name_work_from_a_foreign_folder(tmp_path):
    r = _run("list", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for name in shipped_specs():
        assert name in r.stdout
    r = _run("explain", "gptq_int4_fp16", "--words", "1000", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "PROVEN" in r.stdout


def test_build_by_name_writes_into_the_given_folder(tmp_path):
    r = _run("build", "awq_int4_fp16", "--words", "1000", "--out", str(tmp_path / "gen"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "gen" / "awq_int4_fp16.cu").read_text().startswith("//")
