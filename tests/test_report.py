"""docs/performance.md sections: each bench rewrites only its own."""

from __future__ import annotations

import pytest

from dqgen.tools.report import write_section


def test_each_section_is_replaced_alone_and_kept_in_order(tmp_path):
    doc = tmp_path / "performance.md"
    write_section(doc, "gru", "## GRU\nold gru")
    write_section(doc, "dequant", "# dqgen performance\ndequant v1")
    write_section(doc, "gru", "## GRU\nnew gru")
    text = doc.read_text()
    assert "old gru" not in text and "new gru" in text and "dequant v1" in text
    assert text.index("dequant v1") < text.index("new gru")  # the declared order, not the order of writing
    write_section(doc, "dequant", "# dqgen performance\ndequant v2")
    text = doc.read_text()
    assert "dequant v1" not in text and "dequant v2" in text and "new gru" in text
    assert text.count("section:gru:begin") == 1 and text.count("section:dequant:end") == 1
    assert not list(tmp_path.glob("*.tmp"))


def test_a_report_without_sections_is_replaced(tmp_path):
    doc = tmp_path / "performance.md"
    doc.write_text("# hand-written, no markers\n")
    write_section(doc, "dequant", "fresh")
    assert "hand-written" not in doc.read_text() and "fresh" in doc.read_text()


def test_bad_section_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="section name"):
        write_section(tmp_path / "x.md", "a-->b", "x")


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.replace("<!-- section:gru:end -->", ""),  # an end marker lost in a hand edit
        lambda t: t + "\nhand-written notes after the sections\n",  # text no section owns
    ],
)
def test_a_damaged_report_is_refused_not_dropped(tmp_path, damage):
    doc = tmp_path / "performance.md"
    write_section(doc, "dequant", "dequant v1")
    write_section(doc, "gru", "gru figures")
    doc.write_text(damage(doc.read_text()))
    before = doc.read_text()
    with pytest.raises(ValueError, match=r"performance\.md: expected only whole") as e:
        write_section(doc, "dequant", "dequant v2")
    assert "\n" not in str(e.value)
    assert doc.read_text() == before  # nothing of another bench's figures or the hand-written text is lost


def test_the_committed_report_can_be_rewritten_by_every_bench():
    """docs/performance.md as committed: every section a bench writes is there, and nothing lies outside the
    sections (hand-written text outside them would make the next `dqgen bench --docs` refuse the file)."""
    from pathlib import Path

    from dqgen.tools.report import SECTION_ORDER, read_sections

    committed = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
    assert list(read_sections(committed)) == list(SECTION_ORDER)
