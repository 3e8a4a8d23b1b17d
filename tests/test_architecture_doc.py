"""docs/architecture.md's layer table says what tests/test_layering.py's ``ALLOWED`` holds: the same layers, each
allowed the same imports (a review found the page stale: it said check and solve did not read layout)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layering import ALLOWED, ALLOWED_MODULE

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


def test_the_modules_held_to_less_are_said() -> None:
    """A module held to less than its layer (ALLOWED_MODULE) is named in its layer's row with what it may import:
    "(`reference`, held to core and layout alone)"."""
    section = DOC.read_text().split("## The tree", 1)[1].split("\n## ", 1)[0]
    for module, allowed in ALLOWED_MODULE.items():
        layer, name = module.split(".")[1:]
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{layer}` |")]
        said = re.search(rf"`{name}`, held to ([a-z ,]+?) alone", row)
        assert said, f"docs/architecture.md's {layer} row does not say what {module} is held to"
        assert frozenset(re.findall(r"[a-z_]+", said.group(1))) - {"and"} == allowed


def test_every_module_of_core_is_in_its_row() -> None:
    """The core row names each of its modules (a new module, as optional.py, joins the row)."""
    core = Path(__file__).resolve().parent.parent / "dqgen" / "core"
    (row,) = [line for line in DOC.read_text().splitlines() if line.startswith("| `core` |")]
    missing = [p.stem for p in core.glob("*.py") if p.stem != "__init__" and f"`{p.stem}`" not in row]
    assert not missing, f"docs/architecture.md's core row lacks {missing}"
