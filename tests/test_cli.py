"""The ``dqgen`` command line (CPU only), run as ``python -m dqgen`` from the repository root,
and the README it documents: the op counts in its table and the commands the CI runs."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dqgen.cli import app
from dqgen.core.spec import SHIPPED_SPECS, load_spec

from .conftest import ROOT, SPECS

AWQ = "dqgen/specs/awq_int4_fp16.yaml"
WORDS = ["--words", "20000"]
README = (ROOT / "README.md").read_text()


def dqgen(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dqgen", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=None if env is None else os.environ | env,
    )


def readme_table() -> dict[str, str]:
    """spec name -> 'ops per 8 outputs' column of the README's table."""
    rows = re.findall(r"^\|\s*`(\w+)`\s*\|[^|\n]*\|\s*([0-9][0-9./]*)\s*\|", README, flags=re.M)
    return dict(rows)


def readme_best_published() -> dict[str, str]:
    """spec name -> the number in the README table's 'best published' column ('none' where none is)."""
    rows = re.findall(r"^\|\s*`(\w+)`\s*\|[^|\n]*\|[^|\n]*\|\s*([0-9][0-9./]*|none)\b[^|\n]*\|", README, flags=re.M)
    return dict(rows)


def shown_convert(text: str) -> str:
    m = re.search(r"^Ops per 8 outputs: convert ([0-9./]+)\b", text, flags=re.M)
    assert m, text[-2000:]
    return m.group(1)


# --------------------------------------------------------------------------- explain


@pytest.fixture(scope="module")
def awq_explain() -> subprocess.CompletedProcess:
    return dqgen("explain", AWQ, *WORDS)


def test_explain_awq(awq_explain):
    r = awq_explain
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert shown_convert(out) == "9"
    assert "convert 9" in out
    for const in ("0x64006400", "0x2C002C00", "0x000F000F", "0x00F000F0"):
        assert const in out
    assert re.search(r"lop3\.b32 x0, w, 0x000F000F, 0x64006400, 0xEA;", out)
    assert "0xEA" in out and "immLut" in out
    # the bit diagram of x0: magic exponent bits on top of element 0's (a) and 1's (b) codes
    assert re.search(r"^\s+x0\s+= 0110 0100 0000 bbbb \| 0110 0100 0000 aaaa$", out, flags=re.M), out
    assert re.search(r"^\s+w\s+= hhhh ffff dddd bbbb \| gggg eeee cccc aaaa$", out, flags=re.M)
    assert re.search(r"^Proof: PROVEN: 24,128 words", out, flags=re.M)
    assert "FAILED" not in out and "Traceback" not in r.stderr


def test_explain_json():
    r = dqgen("explain", AWQ, *WORDS, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["spec"] == "awq_int4_fp16" and d["strategy"] == "lanes"
    assert d["ops_per_8"]["convert"] == 9 and d["ops_per_8"]["scale"] == 4
    assert d["proof"]["ok"] is True and d["proof"]["failures"] == []
    assert d["proof"]["words"] >= 20000
    stages = [op["stage"] for op in d["ops"]]
    assert stages.count("convert") == 9 and stages.count("scale") == 4 and stages.count("zero") == 7
    consts = {a["const"] for op in d["ops"] for a in op["args"] if isinstance(a, dict)}
    assert {"0x64006400", "0x2C002C00"} <= consts
    assert any(op["ptx"] == "lop3.b32" and op["imm"] == "0xEA" for op in d["ops"])


def test_readme_table_lists_every_spec():
    table = readme_table()
    assert set(table) == {p.stem for p in SPECS}, "README's table and specs/ disagree"


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_spec_explains_proves_and_matches_readme(path):
    r = dqgen("explain", f"dqgen/specs/{path.name}", *WORDS)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^Proof: PROVEN: ", r.stdout, flags=re.M)
    table = readme_table()
    assert path.stem in table, f"README's table has no row for {path.stem}"
    assert shown_convert(r.stdout) == table[path.stem], (
        f"README says {table[path.stem]} convert ops per 8 for {path.stem}"
    )
    # "The scale multiply adds 4 ops per 8 outputs" (+4 for float zeros; block scales: 20 / 24), and
    # the "best published" column
    spec = load_spec(path)
    scale = {"e8m0": "20", "e4m3": "24"}.get(
        spec.scales.dtype.value if spec.scales.block else "", "8" if spec.zeros.mode == "float" else "4"
    )
    m = re.search(
        r"^Ops per 8 outputs: convert [0-9./]+ "
        r"\((?:best published: ([0-9./]+),.*|no published figure)\); scale (\d+)\b",
        r.stdout,
        flags=re.M,
    )
    assert m and m.group(2) == scale, r.stdout[-600:]
    assert readme_best_published()[path.stem] == (m.group(1) or "none")


# --------------------------------------------------------------------------- invalid input

AWQ_TEXT = (ROOT / AWQ).read_text()
INVALID = {
    "group_size_0": (AWQ_TEXT.replace("group_size: auto", "group_size: 0"), "scales.group_size"),
    "order_not_permutation": (AWQ_TEXT.replace("order: awq", "order: [0, 1, 2, 3, 4, 5, 6, 6]"), "packing.order"),
    "target_fp8": (AWQ_TEXT.replace("target: fp16", "target: fp8"), "target"),
    "unknown_field": (AWQ_TEXT + "colour: blue\n", "colour"),
    "bits_3": (AWQ_TEXT.replace("bits: 4", "bits: 3"), "packing.axis"),
    "zeros_for_signed": ((SHIPPED_SPECS / "int8_fp16.yaml").read_text() + "zeros: {mode: integer}\n", "zeros.mode"),
    # issue 11: names NVRTC or the file system would choke on later, arches NVRTC cannot target, lax types
    "name_keyword": (AWQ_TEXT.replace("name: awq_int4_fp16", "name: namespace"), "name"),
    "name_reserved": (AWQ_TEXT.replace("name: awq_int4_fp16", "name: __global__"), "name"),
    "name_5000_chars": (AWQ_TEXT.replace("name: awq_int4_fp16", "name: " + "x" * 5000), "name"),
    "arch_sm_1000": (AWQ_TEXT.replace("arch: sm_80", "arch: sm_1000"), "arch"),
    "arch_newline": (AWQ_TEXT.replace("arch: sm_80", 'arch: "sm_80\\n"'), "arch"),
    "arch_arabic_digits": (AWQ_TEXT.replace("arch: sm_80", "arch: sm_\u0668\u0660"), "arch"),
    "bits_string": (AWQ_TEXT.replace("bits: 4", 'bits: "4"'), "source.bits"),
    "bits_true": (AWQ_TEXT.replace("bits: 4", "bits: true"), "source.bits"),
    "group_size_1e30": (AWQ_TEXT.replace("group_size: auto", "group_size: 1e30"), "scales.group_size"),
}


def _assert_one_error_line(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode not in (0, None)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    lines = r.stderr.strip("\n").splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), lines[0]
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(INVALID))
@pytest.mark.parametrize("command", ["explain", "build"])
def test_invalid_spec_is_one_error_line(tmp_path, case, command):
    text, field = INVALID[case]
    spec = tmp_path / f"{case}.yaml"
    spec.write_text(text)
    extra = ["--out", str(tmp_path / "out")] if command == "build" else []
    r = dqgen(command, str(spec), *WORDS, *extra)
    # the field is named as [field] so a reader can find it in the spec
    _assert_one_error_line(r, f"[{field}]", spec.name)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["explain", "build"])
def test_missing_spec_file_is_one_error_line(tmp_path, command):
    missing = tmp_path / "nope.yaml"
    r = (
        dqgen(command, str(missing), *WORDS, "--out", str(tmp_path / "out"))
        if command == "build"
        else dqgen(command, str(missing))
    )
    _assert_one_error_line(r, "nope.yaml", "no such spec file")


def test_unknown_strategy_is_one_error_line():
    _assert_one_error_line(dqgen("explain", AWQ, "--strategy", "bogus", "--words", "100"), "strategy", "bogus")
    _assert_one_error_line(dqgen("explain", AWQ, "--strategy", "sign_split", "--words", "100"), "no exact plan")


def test_spec_path_without_yaml_suffix_missing(tmp_path):
    """A missing path without a .yaml suffix: still one error line, no traceback."""
    r = dqgen("explain", "dqgen/specs/awq_int4_fp16")
    _assert_one_error_line(r)


def test_existing_spec_file_with_other_suffix_explains(tmp_path):
    spec = tmp_path / "awq.spec"
    spec.write_text(AWQ_TEXT)
    r = dqgen("explain", str(spec), "--words", "100")
    assert r.returncode == 0, r.stderr


def test_missing_spec_file_without_yaml_suffix_is_named():
    _assert_one_error_line(
        dqgen("explain", "dqgen/specs/awq_int4_fp16"), "dqgen/specs/awq_int4_fp16", "no such spec file"
    )


def test_build_out_is_a_file_is_one_error_line(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    _assert_one_error_line(dqgen("build", AWQ, "--out", str(f), "--words", "100"), "afile")


def test_bad_arch_is_one_error_line(tmp_path):
    _assert_one_error_line(dqgen("build", AWQ, "--arch", "sm_7", "--out", str(tmp_path), "--words", "100"), "sm_7")


# --------------------------------------------------------------------------- build


def test_build_json_without_gpu(tmp_path):
    out = tmp_path / "gen"
    # An empty CUDA_VISIBLE_DEVICES hides any GPU, so the skip path runs on every machine.
    r = dqgen("build", AWQ, "--out", str(out), *WORDS, "--json", env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["ok"] is True and rep["spec"] == "awq_int4_fp16" and rep["arch"] == "sm_80"
    steps = rep["steps"]
    assert steps["gpu"]["skipped"] is True and "no GPU" in steps["gpu"]["line"]
    assert steps["proof"]["ok"] is True and steps["proof"]["line"].startswith("PROVEN")
    assert steps["compile"]["ok"] is True and steps["compile"]["problems"] == []
    assert "sm_80" in steps["compile"]["line"]
    assert rep["ops_per_8"]["convert"] == 9 and isinstance(rep["ops_per_8"]["convert"], float)
    assert {c["hex"] for c in rep["constants"]} >= {"0x64006400", "0x2C002C00"}
    cu, cuh, ptx = out / "awq_int4_fp16.cu", out / "awq_int4_fp16.cuh", out / "awq_int4_fp16.sm_80.ptx"
    # the matmul families that take AWQ int4 (the GEMV and the GEMM), each a source and its PTX beside the kernel's
    matmul = [out / f"awq_int4_fp16_{f}.{x}" for f in ("gemv", "gemm") for x in ("cu", "sm_80.ptx")]
    assert sorted(rep["files"]) == sorted(str(p) for p in (cu, cuh, ptx, *matmul))
    for p in (cu, cuh, ptx, *matmul):
        assert p.is_file() and p.stat().st_size > 0
    assert [f["family"] for f in rep["families"]] == ["dequant", "gemv", "gemm"]
    for fam in rep["families"]:
        assert fam["ok"] and set(fam["steps"]) == {"proof", "compile", "gpu"}, fam
        assert fam["steps"]["gpu"]["skipped"] is True
    assert cu.read_bytes() == (ROOT / "generated" / cu.name).read_bytes()
    assert cuh.read_bytes() == (ROOT / "generated" / cuh.name).read_bytes()
    text = ptx.read_text()
    assert ".target sm_80" in text and "lop3.b32" in text and ".entry dqgen_awq_int4_fp16_v1_r4" in text


def test_build_summary_table(tmp_path):
    r = dqgen(
        "build",
        "dqgen/specs/gptq_int4_fp16.yaml",
        "--out",
        str(tmp_path),
        "--words",
        "1000",
        "--arch",
        "sm_90",
        env={"CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200"},
    )
    assert r.returncode == 0, r.stderr
    assert "gptq_int4_fp16" in r.stdout and "sm_90" in r.stdout and "no GPU: skipped" in r.stdout
    assert "skipped no GPU" not in r.stdout  # said once (issue 11)
    assert (tmp_path / "gptq_int4_fp16.sm_90.ptx").is_file()
    # one row per matmul family, each saying its GPU check was skipped and why
    for family in ("gemv", "gemm"):
        (row,) = [line for line in r.stdout.splitlines() if line.strip("│ ").startswith(family)]
        assert "OK" in row and "entry points" in row, row
    assert re.sub(r"[\s│]+", " ", r.stdout).count("GPU: skipped: no GPU") == 2
    assert (tmp_path / "gptq_int4_fp16_gemv.sm_90.ptx").is_file() and (tmp_path / "gptq_int4_fp16_gemm.cu").is_file()


# --------------------------------------------------------------------------- list


def _presets() -> list[tuple[str, str, str]]:
    """(spec field, preset name, its one-line description) of every preset, enumerated from dqgen.core.spec."""
    from typing import get_args

    from dqgen.core import spec as sp

    return (
        [("packing.order", n, sp.ORDER_PRESET_DOCS[n]) for n in sp.ORDER_PRESETS]
        + [("source.codebook", n, sp.CODEBOOK_PRESET_DOCS[n]) for n in sp.CODEBOOK_PRESETS]
        + [("source.format", n, f.doc) for n, f in sp.ELEMENT_FORMATS.items()]
        + [("scales.dtype", n, sp.BLOCK_SCALE_DOCS[n]) for n in sp.BLOCK_SCALE_DTYPES]
        + [("zeros.mode", n, sp.ZERO_MODE_DOCS[n]) for n in get_args(sp.ZeroMode)]
    )


def _spec_rows() -> list[tuple[str, str, str]]:
    """(name, 'source -> target', first line of the YAML description) of every shipped spec."""
    import yaml

    from dqgen.core.spec import load_spec

    rows = []
    for p in SPECS:
        s = load_spec(p)
        desc = yaml.safe_load(p.read_text())["description"].strip().splitlines()[0]
        rows.append((p.stem, f"{s.source.short} -> {s.target.value}", desc))
    return rows


def _row(out: str, *cells: str) -> str:
    """The output line holding these cells in this order, separated by table padding."""
    pat = r"^[ \t]*" + r"[ \t]+".join(re.escape(c) for c in cells) + r"(?!\w)"
    m = re.search(pat, out, flags=re.M)
    assert m, f"no row {cells} in:\n{out}"
    return out[m.start() : out.index("\n", m.start())]


def test_list_shows_every_spec_and_preset():
    # wide enough that no description wraps: each spec and preset is one line with its description
    r = dqgen("list", env={"COLUMNS": "400"})
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "INVALID" not in r.stdout and "Traceback" not in r.stdout
    for name, conversion, desc in _spec_rows():
        _row(r.stdout, name, conversion, desc)
    for field, name, doc in _presets():
        line = _row(r.stdout, field, name)
        assert doc in line, line
    from dqgen.core.formats import MINIFLOATS

    for m in ("e4m3", "e5m2", "e2m1"):  # the bit layout comes from dqgen.core.formats
        assert MINIFLOATS[m].describe().removeprefix(f"{m}: ") in _row(r.stdout, "source.format", m)
    # the widths each preset is accepted for are the validator's
    assert re.search(r"^\s*packing\.order\s+sequential\s+1-4, 8\s", r.stdout, flags=re.M)
    assert re.search(r"^\s*packing\.order\s+awq\s+4\s", r.stdout, flags=re.M)
    assert re.search(r"^\s*zeros\.mode\s+integer\s+1, 2, 4, 8\s", r.stdout, flags=re.M)
    assert re.search(r"^\s*source\.format\s+e2m1\s+4\s.*\+-\{0, 0\.5, 1, 1\.5, 2, 3, 4, 6\}", r.stdout, flags=re.M)
    assert re.search(r"^\s*source\.format\s+e4m3\s+8\s.*max 448\b", r.stdout, flags=re.M)


def test_list_narrow_terminal_keeps_names_whole():
    """At 80 columns (a pipe's default) descriptions wrap, but no spec file or preset name is cut."""
    r = dqgen("list", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert max(len(line.rstrip()) for line in r.stdout.splitlines()) <= 80
    for p in SPECS:
        assert re.search(rf"^\s*{re.escape(p.stem)}\s", r.stdout, flags=re.M), r.stdout
    for field, name, _ in _presets():
        assert re.search(rf"^\s*{re.escape(field)}\s+{re.escape(name)}\s", r.stdout, flags=re.M), r.stdout


def test_list_is_fast():
    """`dqgen list` validates specs and reads the preset tables: it never solves, proves or loads a GPU runtime."""
    code = (
        "import sys; from typer.testing import CliRunner; from dqgen.cli import app; "
        "r = CliRunner().invoke(app, ['list']); assert r.exit_code == 0, r.output; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dqgen', 'torch', 'numba', 'cuda', 'triton')))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    loaded = set(ast.literal_eval(r.stdout))
    assert loaded.isdisjoint(
        {
            "dqgen.solve.solver",
            "dqgen.check.prove",
            "dqgen.ir.plan",
            "dqgen.run.runtime",
            "dqgen.emit.render",
            "torch",
            "numba",
        }
    ), loaded


def test_list_cli_runner(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the shipped specs are listed from any folder
    r = CliRunner().invoke(app, ["list"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    listed = [m.group(1) for m in re.finditer(r"^\s*(\w+)\s+\S+ -> (?:fp16|bf16)\s", r.output, flags=re.M)]
    assert listed == [p.stem for p in SPECS]
    # an invalid spec in a directory is listed as INVALID with its one-line error, not a crash
    (tmp_path / "bad.yaml").write_text(AWQ_TEXT.replace("group_size: auto", "group_size: 0"))
    (tmp_path / "good.yaml").write_text(AWQ_TEXT)
    (tmp_path / "notes.yaml").write_text("- just\n- a list\n")
    r = CliRunner().invoke(app, ["list", str(tmp_path)], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    bad = _row(r.output, "bad.yaml", "INVALID", "[scales.group_size] got 0")
    assert str(tmp_path) not in bad  # the file is named once, in its own column
    _row(r.output, "notes.yaml", "INVALID", "expected a mapping")
    _row(r.output, "good.yaml", "u4 -> fp16", "AutoAWQ")
    # presets are listed whatever the folder
    for field, name, _ in _presets():
        _row(r.output, field, name)


def test_list_missing_folder_is_one_error_line(tmp_path):
    _assert_one_error_line(dqgen("list", str(tmp_path / "nope")), "nope", "no such folder")


def test_explain_json_cli_runner(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(app, ["explain", "dqgen/specs/int8_fp16.yaml", "--json", "--words", "1000"])
    assert r.exit_code == 0
    d = json.loads(r.output)
    assert d["ops_per_8"]["convert"] == float(readme_table()["int8_fp16"]) and d["proof"]["ok"] is True


# --------------------------------------------------------------------------- README <-> CI


def test_readme_commands_are_what_ci_runs():
    blocks = re.findall(r"^```bash\n(.*?)^```", README, flags=re.M | re.S)
    assert len(blocks) >= 2
    ci_lines = {line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()}
    for block in blocks[:2]:
        cmds = [line.strip() for line in block.splitlines() if line.strip()]
        assert cmds
        for cmd in cmds:
            assert cmd in ci_lines, f"README command not run verbatim by .ci/run: {cmd}"


def test_explain_prints_f32_pack_in_ptx_operand_order():
    """cvt.rn.{f16,bf16}x2.f32 d, a, b puts a in the UPPER half (PTX ISA); the Plan lists (lo, hi).
    explain's text must be pasteable PTX, so the high source comes first."""
    from dqgen.ir.isa import Opcode
    from dqgen.solve.solver import solve
    from dqgen.tools.explain import render

    seen = 0
    for name in ("mxfp4_bf16", "nvfp4_fp16"):
        spec = load_spec(SHIPPED_SPECS / f"{name}.yaml")
        plan = solve(spec)
        text = render(spec, plan, None)
        for op in plan.ops:
            if op.opcode in (Opcode.CVT_F16X2_F32, Opcode.CVT_BF16X2_F32):
                lo, hi = op.args
                assert f"{op.opcode.ptx} {op.dst}, {hi}, {lo};" in text
                seen += 1
    assert seen >= 2


# --------------------------------------------------------------------------- issue 11: hostile input


def test_invalid_value_is_echoed_short(tmp_path):
    spec = tmp_path / "long.yaml"
    spec.write_text(AWQ_TEXT.replace("arch: sm_80", "arch: sm_" + "8" * 100_000))
    r = dqgen("explain", str(spec), *WORDS)
    _assert_one_error_line(r, "[arch]", "\u2026")
    assert len(r.stderr) < 400


def test_duplicate_key_is_one_error_line(tmp_path):
    spec = tmp_path / "dup.yaml"
    spec.write_text(AWQ_TEXT + "target: bf16\n")
    r = dqgen("build", str(spec), "--out", str(tmp_path / "out"), *WORDS)
    _assert_one_error_line(r, "dup.yaml", "duplicate key 'target' on line")
    assert not (tmp_path / "out").exists()


def test_build_arch_option_nvrtc_cannot_target_writes_nothing(tmp_path):
    for arch in ("sm_1000", "sm_80\n", "sm_\u0668\u0660"):
        r = dqgen("build", AWQ, "--arch", arch, "--out", str(tmp_path / "out"), *WORDS)
        _assert_one_error_line(r, "[--arch]")
        assert not (tmp_path / "out").exists()


def test_explain_reads_only_small_regular_files(tmp_path):
    _assert_one_error_line(dqgen("explain", "/dev/zero"), "/dev/zero", "not a regular file")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    r = dqgen("explain", str(fifo))  # dqgen() times out (fails) if opening the FIFO blocks
    _assert_one_error_line(r, str(fifo), "not a regular file")
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(3 << 20)
    _assert_one_error_line(dqgen("explain", str(big)), str(big), f"{3 << 20} bytes", "at most 1048576")


ESCAPES = '"\\e[31mRED\\e[0m\\a\\x9b2J\\e]0;title\\a tab\\tend"'  # YAML escapes: ESC, BEL, 8-bit CSI, OSC


def test_list_and_explain_strip_control_characters(tmp_path):
    (tmp_path / "esc.yaml").write_text(AWQ_TEXT.replace(AWQ_TEXT.splitlines()[1], f"description: {ESCAPES}"))
    assert "\x1b" in load_spec(tmp_path / "esc.yaml").description  # the escapes are in the spec ...
    for r in (dqgen("list", str(tmp_path)), dqgen("explain", str(tmp_path / "esc.yaml"), *WORDS)):
        assert r.returncode == 0, r.stderr
        assert "RED" in r.stdout and "title" in r.stdout
        for c in ("\x1b", "\x07", "\x9b"):  # ... but never reach the terminal
            assert c not in r.stdout
    escaped_name = tmp_path / "bad\x1b[2J.yaml"
    escaped_name.write_text("- not a spec\n")
    r = dqgen("list", str(tmp_path))
    assert r.returncode == 0 and "\x1b" not in r.stdout and "bad[2J.yaml" in r.stdout


def test_explain_progress_only_on_a_terminal(monkeypatch):
    import io

    from dqgen.cli import PROGRESS_MIN_WORDS, _proof_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    pipe, tty = io.StringIO(), Tty()
    with _proof_progress(PROGRESS_MIN_WORDS, pipe) as cb:
        assert cb is None  # not a terminal: no progress, output unchanged
    with _proof_progress(PROGRESS_MIN_WORDS - 1, tty) as cb:
        assert cb is None  # short proof: no bar
    with _proof_progress(PROGRESS_MIN_WORDS, tty) as cb:
        assert cb is not None
        cb(PROGRESS_MIN_WORDS // 2, PROGRESS_MIN_WORDS)
    assert "proof" in tty.getvalue() and pipe.getvalue() == ""
    # piped `dqgen explain` output is exactly the rendered plan and proof: nothing from a progress bar
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(app, ["explain", "int8_fp16", "--words", str(PROGRESS_MIN_WORDS)])
    assert r.exit_code == 0 and r.output.startswith("dqgen explain: int8_fp16") and "\r" not in r.output


def test_prove_reports_progress():
    from dqgen.check.prove import prove
    from dqgen.solve.solver import solve

    spec = load_spec("int8_fp16")
    calls: list[tuple[int, int]] = []
    result = prove(solve(spec), spec, n_random=10_000, chunk=3000, progress=lambda d, t: calls.append((d, t)))
    assert result.ok
    assert calls == [(3000, 10_000), (6000, 10_000), (9000, 10_000), (10_000, 10_000)]


# --------------------------------------------------------------------------- exit codes and help (issue 11)


def _one_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1, output
    return lines[0]


def _boom(*args, **kwargs):
    raise RuntimeError("boom\nsecond line")


def _failed_proof(monkeypatch, tmp_path) -> None:
    """prove() reports a counterexample (as it would for a wrong plan), with no proof memoized in the process or
    on disk (the pipeline keeps passed proofs) that could answer instead."""
    import dataclasses

    import dqgen.check.prove
    import dqgen.emit.pipeline

    real = dqgen.check.prove.prove

    def failing(plan, spec, n_random=0, **kwargs):
        return dataclasses.replace(real(plan, spec, n_random=100), ok=False, failures=["word 0x0: got 1, want 2"])

    monkeypatch.setattr(dqgen.emit.pipeline, "prove", failing)
    monkeypatch.setattr(dqgen.emit.pipeline, "_PROOFS", {})
    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "cache"))


# command -> (args that work but for the patched internals, args with a bad input, what to break for a bug)
EXIT_CASES = {
    "explain": (
        ["explain", AWQ, "--words", "100"],
        ["explain", "nope.yaml"],
        ("dqgen.emit.pipeline", "compile_artifact"),
    ),
    "build": (
        ["build", AWQ, "--words", "100", "--out", "OUT"],
        ["build", "nope.yaml"],
        ("dqgen.tools.build", "compile_artifact"),
    ),
    "bench": (["bench", AWQ], ["bench", "nope.yaml"], ("dqgen.run.device", "gpu_available")),
    "list": (["list"], ["list", "no_such_folder"], ("dqgen.cli", "_preset_rows")),
    "dequant": (
        ["dequant", "x.safetensors", "--out", "OUT/o.safetensors", "--device", "cpu"],
        ["dequant", "no_such.safetensors", "--out", "OUT/o.safetensors", "--device", "cpu"],
        ("dqgen.io.checkpoint", "dequantize_file"),
    ),
}


@pytest.mark.parametrize("command", sorted(EXIT_CASES))
def test_exit_codes(command, monkeypatch, tmp_path):
    """Issue 11 case 16: 2 for usage and input errors, 70 (one line naming the traceback's file) for a bug,
    for every command; --debug prints the traceback instead."""
    import importlib

    monkeypatch.chdir(ROOT)
    works, bad_input, (module, attr) = EXIT_CASES[command]
    works = [a.replace("OUT", str(tmp_path)) for a in works]
    bad_input = [a.replace("OUT", str(tmp_path)) for a in bad_input]
    runner = CliRunner()
    r = runner.invoke(app, bad_input)
    assert r.exit_code == 2, r.output
    assert _one_line(r.stderr).startswith("error: ") and r.stdout == ""
    r = runner.invoke(app, [command, "--no-such-option"])
    assert r.exit_code == 2, r.output
    monkeypatch.setattr(importlib.import_module(module), attr, _boom)
    r = runner.invoke(app, works)
    assert r.exit_code == 70, r.output
    line = _one_line(r.stderr)
    assert line.startswith("error: internal error, a bug in dqgen (RuntimeError: boom); traceback in "), line
    saved = Path(re.search(r"traceback in (\S+);", line).group(1))
    try:
        text = saved.read_text()
        assert "Traceback" in text and "RuntimeError: boom" in text and "second line" in text
    finally:
        saved.unlink()
    r = runner.invoke(app, ["--debug", *works])
    assert r.exit_code == 70 and "Traceback (most recent call last)" in r.stderr, r.output
    assert r.stderr.rstrip().splitlines()[-1].startswith("error: internal error, a bug in dqgen (RuntimeError: boom)")


def test_exit_code_3_when_a_proof_fails(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    _failed_proof(monkeypatch, tmp_path)
    r = CliRunner().invoke(app, ["explain", AWQ, "--words", "100"])
    assert r.exit_code == 3 and "FAILED" in r.output, r.output
    r = CliRunner().invoke(app, ["build", AWQ, "--words", "100", "--out", str(tmp_path), "--json"])
    assert r.exit_code == 3, r.output
    assert json.loads(r.output)["steps"]["proof"]["ok"] is False


def test_exit_code_70_through_main_in_a_subprocess(tmp_path):
    """The installed entry point (dqgen.cli:main): an uncaught exception is one line and exit 70."""
    code = (
        "import sys, dqgen.solve.solver\n"
        "def boom(*a, **k):\n    raise KeyError('x')\n"
        "dqgen.solve.solver.solve = boom\n"
        f"sys.argv = ['dqgen', 'explain', {AWQ!r}, '--words', '100']\n"
        "from dqgen.cli import main\nmain()\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"TMPDIR": str(tmp_path)},
    )
    assert r.returncode == 70, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    line = _one_line(r.stderr)
    assert line.startswith("error: internal error, a bug in dqgen (KeyError: 'x'); traceback in "), line
    assert len(list(tmp_path.glob("dqgen-traceback-*.txt"))) == 1


def test_exit_codes_are_documented():
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    text = re.sub(r"[\s│]+", " ", r.output)
    readme = re.search(r"^## Exit codes\n(.*?)^## ", README, flags=re.M | re.S)
    assert readme, "README.md has no '## Exit codes' section"
    for code in ("0", "2", "3", "70", "130", "143"):
        assert re.search(rf"\b{code}\b", text), code
        assert re.search(rf"^\| `?{code}`? \|", readme.group(1), flags=re.M), code


def test_dequant_help_shows_brackets_and_no_bool_metavars():
    """Issue 11 case 17: rich markup does not eat [out_features, in_features]; flags show no <bool>."""
    for args in (["dequant", "--help"], ["explain", "--help"], ["--help"]):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
        assert r.exit_code == 0, r.output
        text = re.sub(r"[\s│]+", " ", r.output)
        assert "<bool>" not in text, text
        assert "--help Show this message and exit." in text, text
    r = CliRunner().invoke(app, ["dequant", "--help"], env={"COLUMNS": "100"})
    assert "<prefix>.weight as [out_features, in_features])" in re.sub(r"[\s│]+", " ", r.output)
    r = CliRunner().invoke(app, ["explain", "--help"], env={"COLUMNS": "100"})
    assert re.search(r"--json\s+Print the Plan as JSON", r.output), r.output


@pytest.mark.parametrize("gru", [True, False])
def test_bench_refuses_a_damaged_report_before_measuring(tmp_path, monkeypatch, gru):
    """A docs/performance.md whose sections the bench could not rewrite without dropping text is refused up front
    (one line naming the file), not after minutes of GPU time; the file is left as it was."""
    from dqgen.run import device as dev

    monkeypatch.setattr(dev, "gpu_available", lambda: True)  # the check must come before any GPU work
    doc = tmp_path / "performance.md"
    doc.write_text("<!-- section:dequant:begin -->\nold figures\n")  # its end marker lost in a hand edit
    r = CliRunner().invoke(app, ["bench", *(["--gru"] if gru else ["awq_int4_fp16"]), "--docs", str(doc)])
    assert r.exit_code == 2, r.output
    line = _one_line(r.stderr)
    assert line.startswith(f"error: --docs: {doc}: ") and "unpaired marker" in line
    assert doc.read_text() == "<!-- section:dequant:begin -->\nold figures\n"
