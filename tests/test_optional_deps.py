"""torch is an extra (``dqgen[torch]``): every public torch-only name, reached without torch, fails with one line
naming itself and the extra; everything else imports and runs without torch. Without torch is simulated in a
subprocess (``sys.modules['torch'] = None``, so it holds on a machine that has torch too)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dqgen

#: Where the package under test lives: the subprocess imports this dqgen, not whatever else is on its path.
PACKAGE_PARENT = str(Path(dqgen.__file__).resolve().parent.parent)
#: The public packages whose __all__ is swept.
PACKAGES = ("dqgen", "dqgen.nn", "dqgen.w8a8", "dqgen.gru")
#: The names that need torch (the README's "What needs torch" section lists these); any other public name must
#: work without it.
TORCH_ONLY = {
    "dqgen.nn.QuantLinear",
    "dqgen.nn.QuantizedActivation",
    "dqgen.nn.W4A8Linear",
    "dqgen.nn.W8A8Linear",
    "dqgen.nn.W8A8MLP",
    "dqgen.nn.W8A8RMSNorm",
    "dqgen.nn.from_pretrained",
    "dqgen.nn.replace_linears",
    "dqgen.nn.quantize_model",
    "dqgen.nn.save_quantized",
    "dqgen.nn.quantize_model_w8a8",
    "dqgen.w8a8.matmul",
    "dqgen.w8a8.quantize_activations",
    "dqgen.w8a8.rmsnorm_quantize",
    "dqgen.w8a8.silu_mul_quantize",
    "dqgen.gru.quantize",
    "dqgen.gru.QuantGRU",
}


def _python(code: str, extra_path: str | None = None) -> subprocess.CompletedProcess:
    path = [p for p in (extra_path, PACKAGE_PARENT) if p]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )


SWEEP = """
    import importlib, json, sys
    sys.modules["torch"] = None  # `import torch` now fails as it does where torch is not installed
    out = {}
    for package in %r:
        mod = importlib.import_module(package)
        for name in mod.__all__:
            try:
                getattr(mod, name)
                out[f"{package}.{name}"] = None
            except ImportError as e:
                out[f"{package}.{name}"] = [type(e).__name__, str(e), isinstance(e, ModuleNotFoundError)]
    print(json.dumps(out))
"""


def test_every_public_name_without_torch_works_or_names_the_extra():
    r = _python(SWEEP % (PACKAGES,))
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    failed = {name for name, err in seen.items() if err is not None}
    assert failed == TORCH_ONLY, f"torch-only by the sweep: {sorted(failed)}"
    for name in TORCH_ONLY:
        kind, message, is_module_not_found = seen[name]
        assert kind == "MissingDependency"
        assert message == f"{name} needs torch: pip install 'dqgen[torch]'"
        assert is_module_not_found  # an ImportError and a ModuleNotFoundError: existing `except` clauses still catch it


@pytest.mark.parametrize(
    "statement",
    [
        "from dqgen.nn import QuantLinear",
        "import dqgen.nn; dqgen.nn.W8A8Linear",
        "from dqgen.w8a8 import matmul",
        "from dqgen.gru import quantize",
    ],
)
def test_the_error_a_user_sees_is_one_line(statement):
    """What a user gets from the interpreter: the traceback ends in the one line, and no chained
    "No module named 'torch'" traceback comes before it."""
    r = _python(f"import sys; sys.modules['torch'] = None\n{statement}")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("dqgen.core.optional.MissingDependency: dqgen.") and last.endswith(
        " needs torch: pip install 'dqgen[torch]'"
    ), r.stderr
    assert "During handling" not in r.stderr and "None in sys.modules" not in r.stderr, r.stderr


def test_the_torch_free_parts_run_without_torch():
    """The numpy quantizer, the references and the GRU's calibration core import and run with torch absent."""
    r = _python(
        """
        import sys
        sys.modules["torch"] = None
        import numpy as np
        import dqgen, dqgen.nn, dqgen.w8a8, dqgen.gru
        from dqgen.w8a8 import quantize_weight
        ck = dqgen.nn.quantize("awq_int4_fp16", np.ones((128, 64), np.float32))
        q, s = quantize_weight(np.ones((8, 16), np.float32))
        print(sorted(ck), q.dtype, s.dtype)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["['qweight',", "'scales',", "'zeros']", "int8", "float32"]


def test_a_broken_torch_is_not_reported_as_missing(tmp_path):
    """torch present but one of its own imports missing: that import's error, not the install line (which would
    send the user to reinstall what they have)."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("import dqgen_missing_part_of_torch\n")
    r = _python("from dqgen.core.optional import require_torch\nrequire_torch('dqgen.nn.QuantLinear')", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: No module named 'dqgen_missing_part_of_torch'"
    ), r.stderr


def _readme_section(title: str) -> str:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    return readme.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_table_names_every_torch_only_part():
    """The README's "What needs torch" rows: every torch-only name sits in a row that says torch "yes", and no
    row that says "no" names one (the sweep above, not this list, decides what is torch-only)."""
    said: dict[str, set[str]] = {"yes": set(), "no": set()}
    for line in _readme_section("What needs torch, what needs a GPU").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] == "part" or set(cells[0]) <= {"-"}:
            continue
        answer = cells[1].split()[0]
        assert answer in said, line
        said[answer] |= set(re.findall(r"`(dqgen\.[\w.]+)`", cells[0]))
    assert said["yes"] >= TORCH_ONLY, f"torch-only names the table misses: {sorted(TORCH_ONLY - said['yes'])}"
    assert not (said["no"] & TORCH_ONLY), f"the table says these need no torch: {sorted(said['no'] & TORCH_ONLY)}"


def test_the_readme_names_the_specs_that_need_sm_90():
    """The section's GPU sentence: the shipped specs it names as sm_90 are those whose arch is sm_90."""
    from dqgen.core.spec import load_spec, shipped_specs

    text = _readme_section("What needs torch, what needs a GPU")
    said = re.search(r"the\s+shipped\s+specs:\s+sm_80,\s+but\s+sm_90\s+for\s+(.*?);", text, flags=re.S)
    assert said, "the README no longer says which shipped specs need sm_90"
    named = set(re.findall(r"`(\w+)`", said.group(1)))
    assert named == {name for name in shipped_specs() if load_spec(name).arch == "sm_90"}
    assert {load_spec(name).arch for name in shipped_specs()} == {"sm_80", "sm_90"}
