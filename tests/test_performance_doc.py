"""docs/performance.md as committed (generated sections + the `notes` narrative; the dated notes live in
docs/experiments/performance-notes.md): every bench's `--docs` writer, fed the committed JSON record, finds its
section in this file and rewrites it, leaving the other sections and the narrative byte for byte. CPU only: the
writers are the ones `dqgen bench ... --docs` calls after measuring; the records stand in for the measurement."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dqgen.tools.bench
from dqgen.gru.bench import performance_section
from dqgen.tools import bench_matmul, bench_w8a8
from dqgen.tools.bench import Row, write_markdown
from dqgen.tools.report import SECTION_ORDER, read_sections, write_section

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
BENCH = ROOT / "docs" / "bench"


def _record(name: str) -> dict[str, Any]:
    return json.loads((BENCH / name).read_text())


def _write_dequant(doc: Path, record: dict[str, Any]) -> None:
    """What `dqgen bench SPEC... --docs` writes; the SASS table (NVRTC + nvdisasm, not in the record) is the
    committed one, and the method line the record's (it names the timer of the machine that ran the bench)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dqgen.tools.bench, "method", lambda: record["method"])
        _write_dequant_rows(doc, record)


def _write_dequant_rows(doc: Path, record: dict[str, Any]) -> None:
    fields = {f.name for f in dataclasses.fields(Row)}
    rows = [Row(**{k: v for k, v in r.items() if k in fields}) for r in record["rows"]]
    body = read_sections(DOC)["dequant"]
    sass = body[body.index("## SASS instructions") :]
    write_markdown(
        doc,
        record["gpu"],
        record["copy_gbps"],
        rows,
        sass,
        record["call_overhead"],
        record["compile_time"],
        when=record["date"],
    )


def _write_matmul(doc: Path, record: dict[str, Any]) -> None:
    bench_matmul.write_markdown(doc, record)


def _write_w8a8(doc: Path, record: dict[str, Any]) -> None:
    gemm = doc.parent / "w8a8.json"
    gemm.write_text(json.dumps(record))
    bench_w8a8.write(doc, gemm, BENCH / "w8a8_act.json")


def _write_gru(doc: Path, record: dict[str, Any]) -> None:
    write_section(doc, "gru", performance_section(record["rows"], record["gpu"], record["date"]))


def _write_linears(doc: Path, record: dict[str, Any]) -> None:
    from dqgen.tools import bench_linears

    bench_linears.write_docs(doc, record)


def _write_model(doc: Path, record: dict[str, Any]) -> None:
    from dqgen.tools import bench_model

    bench_model.write_docs(doc, record)


#: section -> (its JSON record in docs/bench, the writer its `dqgen bench ... --docs` calls)
WRITERS: dict[str, tuple[str, Callable[[Path, dict[str, Any]], None]]] = {
    "dequant": ("dequant.json", _write_dequant),
    "matmul": ("matmul.json", _write_matmul),
    "linears": ("e2e_linears.json", _write_linears),
    "w8a8": ("w8a8.json", _write_w8a8),
    "gru": ("gru.json", _write_gru),
    "model": ("model.json", _write_model),
}


def test_every_bench_section_has_a_writer_and_the_narrative_is_the_notes_section() -> None:
    sections = read_sections(DOC)
    assert list(sections) == list(SECTION_ORDER)
    assert set(WRITERS) == set(SECTION_ORDER) - {"notes"}  # notes: hand-written, no bench writes it
    notes = sections["notes"]
    assert "experiments/performance-notes.md" in notes and len(notes.splitlines()) < 40  # a short narrative


@pytest.mark.parametrize("section", list(WRITERS))
def test_the_committed_record_rewrites_its_section_to_the_committed_text(section: str, tmp_path: Path) -> None:
    """The committed section is what its writer makes of the committed record: `--docs` finds the section and
    the whole file comes back byte-identical (no other section, no narrative lost)."""
    doc = tmp_path / "performance.md"
    shutil.copy(DOC, doc)
    name, write = WRITERS[section]
    write(doc, _record(name))
    assert doc.read_text() == DOC.read_text()


def _slower(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its first row's time changed: a new measurement the writer must put in the file."""
    rows = [dict(r) for r in record["rows"]]
    key = "us" if "us" in rows[0] else "tok_s"  # the model bench's rows are tokens per second
    rows[0][key] = 12345.0
    return {**record, "rows": rows}


@pytest.mark.parametrize("section", list(WRITERS))
def test_a_new_record_replaces_only_its_own_section(section: str, tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    shutil.copy(DOC, doc)
    name, write = WRITERS[section]
    write(doc, _slower(_record(name)))
    before, after = read_sections(DOC), read_sections(doc)
    assert list(after) == list(before)
    assert "12345" in after[section] and "12345" not in before[section]
    assert {k: v for k, v in after.items() if k != section} == {k: v for k, v in before.items() if k != section}


def test_the_dated_notes_moved_whole_with_the_titles_code_and_docs_cite() -> None:
    notes = (ROOT / "docs" / "experiments" / "performance-notes.md").read_text()
    for title in (
        "Fused GEMV speed work, round 3",
        "Fused GEMV speed work, round 4",
        "Tensor-core GEMM speed",
        "W8A8 GEMM speed work",
        "Call paths of the matmuls",
    ):
        assert f"### {title}" in notes, title
    assert "section:" not in notes  # no bench marker: nothing would rewrite or refuse this file
