"""docs/architecture.md's layer table says what tests/test_layering.py's ``ALLOWED`` holds: the same layers, each
allowed the same imports (a review found the page stale: it said check and solve did not read layout)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layering import ALLOWED

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def doc_layers(text: str) -> dict[str, frozenset[str]]:
    """The "The tree" section's table: layer -> what it may import ("nothing of dqgen", a list of layers, or
    "everything": every other layer)."""
    section = text.split("## The tree", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        name = re.match(r"`?([a-z0-9_]+)`?", cells[0])
        assert name is not None, line
        rows[name.group(1)] = cells[2]
    out: dict[str, frozenset[str]] = {}
    for name, imports in rows.items():
        if imports == "nothing of dqgen":
            out[name] = frozenset()
        elif imports == "everything":
            out[name] = frozenset(rows) - {name}
        else:
            out[name] = frozenset(re.findall(r"[a-z0-9_]+", imports))
    return out


def test_the_layer_table_is_allowed() -> None:
    doc = doc_layers(DOC.read_text())
    assert doc == ALLOWED


def test_a_stale_row_is_caught() -> None:
    """The parser reads what the page says: the page's old check row (no layout) and a missing layer differ."""
    text = DOC.read_text()
    stale = re.sub(r"(\| `check` \|[^\n]*\| )core, ir, layout \|", r"\1core, ir |", text)
    assert stale != text
    assert doc_layers(stale)["check"] == frozenset({"core", "ir"}) != ALLOWED["check"]
    without_io = "\n".join(line for line in text.splitlines() if not line.startswith("| `io` |"))
    assert "io" not in doc_layers(without_io)
