"""docs/formats.md's source table says which code widths a spec accepts, checked against the spec loader itself (the
page once said ``bits: 1..8`` while 5, 6 and 7 were refused for integer codes), and the minifloat rows' widths
against the format registry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from dqgen.core.spec import ELEMENT_FORMATS, SHIPPED_SPECS, SpecError, load_spec

DOC = Path(__file__).resolve().parent.parent / "docs" / "formats.md"


def doc_rows() -> dict[str, str]:
    """The "Element values" table: first cell (kind) + second cell (spec), keyed by the second cell's text."""
    section = DOC.read_text().split("## Element values", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("kind", "") and not set(cells[0]) <= {"-"}:
            rows[cells[1]] = cells[0]
    return rows


def integer_widths_documented() -> set[int]:
    (spec_cell,) = [spec for spec, kind in doc_rows().items() if kind == "unsigned / signed / biased"]
    m = re.match(r"`bits: ([0-9, or]+)`", spec_cell)
    assert m, spec_cell
    return {int(v) for v in re.findall(r"[0-9]+", m.group(1))}


def accepted(bits: int, kind: str) -> bool:
    """Whether the spec loader takes an integer source of this width (packed along K, where every width fits)."""
    spec = yaml.safe_load((SHIPPED_SPECS / "int2_bf16.yaml").read_text())
    spec["packing"] = {"axis": "K", "order": "sequential"}
    spec["source"] = {"bits": bits, "kind": kind, **({"bias": 0} if kind == "biased" else {})}
    try:
        load_spec(spec)
    except SpecError:
        return False
    return True


@pytest.mark.parametrize("kind", ["unsigned", "signed", "biased"])
def test_the_integer_widths_are_what_the_loader_accepts(kind):
    assert integer_widths_documented() == {b for b in range(1, 33) if accepted(b, kind)}


def test_the_minifloat_rows_have_the_registry_widths():
    for spec_cell, kind in doc_rows().items():
        m = re.match(r"`format: (\w+)` \((\d+) bits", spec_cell)
        if kind == "float":
            assert m, spec_cell
            assert ELEMENT_FORMATS[m.group(1)].width == int(m.group(2)), spec_cell
    documented = {re.match(r"`format: (\w+)`", c).group(1) for c, k in doc_rows().items() if k == "float"}
    assert documented == set(ELEMENT_FORMATS)
