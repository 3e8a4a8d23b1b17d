"""docs/performance.md is written by several benchmarks (dequantize, GRU, later the matmuls): each owns one
marked section and rewrites only that one, so a run of one bench never drops another's figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.files import write_whole

if TYPE_CHECKING:
    from pydantic import BaseModel

_SECTION = re.compile(r"<!-- section:([a-z0-9_]+):begin[^>]*-->\n(.*?)\n<!-- section:\1:end -->", re.S)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- section:{name}:begin -->", f"<!-- section:{name}:end -->"


def read_sections(path: Path) -> dict[str, str]:
    """The sections of ``path`` ({} when it is missing or has no markers). A marker without its pair, or text
    outside every section, would be dropped by a rewrite: a one-line ValueError instead (benches call this before
    they measure, so a damaged report costs no GPU time)."""
    if not path.is_file():
        return {}
    text = path.read_text()
    sections = {m.group(1): m.group(2) for m in _SECTION.finditer(text)}
    rest = _SECTION.sub("", text)
    unpaired = re.search(r"<!-- section:[a-z0-9_]+:(?:begin|end)\b", rest)
    if (sections or unpaired) and rest.strip():
        raise ValueError(
            f"{path}: expected only whole '<!-- section:NAME:begin/end -->' sections; found "
            + (f"the unpaired marker {unpaired.group(0)!r}" if unpaired else "text outside them")
            + " (fix the file by hand; nothing was written)"
        )
    return sections


#: The order sections appear in, whichever bench wrote last.
SECTION_ORDER = ("dequant", "matmul", "linears", "w8a8", "gru", "model", "notes")


def write_section(path: Path, name: str, body: str, order: tuple[str, ...] = SECTION_ORDER) -> None:
    """Replace section ``name`` of ``path`` with ``body`` (added, in ``order``, if it is not there yet). A file
    without any section markers is a report of the older single-writer kind: it is replaced whole."""
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"section name: expected [a-z0-9_]+, got {name!r}")
    sections = read_sections(path)
    sections[name] = body.strip("\n")
    names = [n for n in order if n in sections] + sorted(n for n in sections if n not in order)
    parts = []
    for n in names:
        begin, end = _markers(n)
        parts.append(f"{begin}\n{sections[n]}\n{end}")
    write_whole(path, "\n\n".join(parts) + "\n")


def read_json_record(path: Path, what: str) -> object:
    """A bench's JSON record as parsed; ValueError (one line naming the file and ``what`` it should hold) when it
    cannot be read or is not JSON. The caller checks the record's keys."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read the {what} record: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not JSON ({str(e).splitlines()[0][:120]})") from None


def validated_record(path: Path, schema: type[BaseModel], what: str) -> dict:
    """A bench's JSON record checked against its pydantic ``schema`` (model_dump of it): ValueError (one line naming
    the file and the first bad field) where it cannot be read, is not JSON or does not fit."""
    from pydantic import ValidationError

    raw = read_json_record(path, what)
    try:
        return schema.model_validate(raw).model_dump()
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the record"
        raise ValueError(f"{path}: {where}: {first['msg']}") from None
