"""Files written whole or not at all: a reader never sees half a report, a half JSON record, a truncated cache
entry or a partial output (two writers of one path: the last complete one wins).

A file is written to a temporary name in its own folder, then renamed over the path. The temporary file is created
with mode 0666, so that the umask gives the written file the permissions any ``open(path, "w")`` would (mkstemp's
0600 made a record or a plot unreadable to the rest of a group)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path

#: A fresh temporary name clashes with an existing file only by chance: after this many tries something else is wrong.
_TEMP_TRIES = 100


def _create_temp(path: Path) -> tuple[int, Path]:
    """(fd, name) of a new, exclusively created file beside ``path``, mode 0666 less the umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMP_TRIES):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name} after {_TEMP_TRIES} tries")


def _stage(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file beside ``path`` (its name returned); nothing is left when writing fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_whole_bytes(path: Path, data: bytes) -> None:
    """Write whole or not at all: a temporary file in the same folder, then a rename."""
    tmp = _stage(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_whole(path: Path, text: str) -> None:
    """write_whole_bytes for text (UTF-8)."""
    write_whole_bytes(path, text.encode("utf-8"))


def write_all_whole(outputs: list[tuple[Path, bytes]]) -> None:
    """Write several files whole, or none of them: every file is staged beside its path first, and only once all
    are on disk are they renamed into place, so a write that fails (a full disk, a quota, a read-only folder)
    leaves no new file and every earlier file at those paths as it was. (A rename, which needs no space, failing
    after the first ones would leave the earlier renames done; nothing of a half-written file is ever visible.)"""
    staged: list[tuple[Path, Path]] = []
    made: list[Path] = []  # folders this call created, removed again (where still empty) when it fails
    try:
        for path, data in outputs:
            made += _make_folders(path.parent)
            staged.append((_stage(path, data), path))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)  # gone already where the rename ran
        for folder in reversed(made):
            with contextlib.suppress(OSError):  # not empty: something else wrote there meanwhile
                folder.rmdir()
        raise


def _make_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; the ones this call made, outermost first."""
    missing = [f for f in (folder, *folder.parents) if not f.exists()][::-1]
    made = []
    for f in missing:
        try:
            f.mkdir()
        except FileExistsError:  # made meanwhile by another writer: not ours to remove
            continue
        made.append(f)
    return made


def write_json(path: Path, doc: object) -> None:
    """A JSON record (indent 1, a final newline), written whole or not at all; json.dumps fails first on a value
    JSON cannot hold, before the file is touched."""
    write_whole(path, json.dumps(doc, indent=1) + "\n")
