"""Files written whole or not at all: a reader never sees half a report, a half JSON record, a truncated cache
entry or a partial output (two writers of one path: the last complete one wins)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_whole_bytes(path: Path, data: bytes) -> None:
    """Write whole or not at all: a temporary file in the same folder, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_whole(path: Path, text: str) -> None:
    """write_whole_bytes for text (UTF-8)."""
    write_whole_bytes(path, text.encode("utf-8"))


def write_json(path: Path, doc: object) -> None:
    """A JSON record (indent 1, a final newline), written whole or not at all; json.dumps fails first on a value
    JSON cannot hold, before the file is touched."""
    write_whole(path, json.dumps(doc, indent=1) + "\n")
