"""Issue 26: files written whole (core.files) get the permissions any open(path, "w") would, 0666 less the umask
(mkstemp's 0600 made records and plots unreadable to a group), and several files are written all or none."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dqgen.core import files


@pytest.fixture(params=[0o022, 0o027, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _open_mode(p: Path) -> int:
    """The mode a plain open(path, "w") gives under the current umask: what every writer should match."""
    with open(p, "w") as f:
        f.write("x")
    return _mode(p)


def test_write_whole_has_the_umasks_mode(tmp_path: Path, umask: int) -> None:
    expected = _open_mode(tmp_path / "plain")
    assert expected == 0o666 & ~umask
    for name, write in (
        ("a.txt", lambda p: files.write_whole(p, "text")),
        ("b.bin", lambda p: files.write_whole_bytes(p, b"\x00\x01")),
        ("c.json", lambda p: files.write_json(p, {"a": 1})),
        ("d.png", lambda p: files.write_all_whole([(p, b"png")])),
    ):
        path = tmp_path / "sub" / name
        write(path)
        assert _mode(path) == expected, (name, oct(_mode(path)))
    assert (tmp_path / "sub" / "c.json").read_text() == '{\n "a": 1\n}\n'
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["a.txt", "b.bin", "c.json", "d.png"]


def test_rewriting_a_0600_file_gives_the_umasks_mode(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "record.json"
    path.write_text("old")
    path.chmod(0o600)
    files.write_json(path, [1])
    assert _mode(path) == 0o666 & ~umask and path.read_text() == "[\n 1\n]\n"


def test_write_all_whole_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails part way (here the third file, as a full disk would) leaves the earlier files at those
    paths as they were, creates none of the others and leaves no temporary file or new folder behind."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.cu").write_text("old a")
    (out / "b.cuh").write_text("old b")
    real_fdopen = os.fdopen
    calls = {"n": 0}

    def fdopen(fd: int, *args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:
            os.close(fd)
            raise OSError(28, "No space left on device")
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "fdopen", fdopen)
    outputs = [(out / "a.cu", b"new a"), (out / "b.cuh", b"new b"), (out / "new" / "c.ptx", b"new c")]
    with pytest.raises(OSError, match="No space left"):
        files.write_all_whole(outputs)
    assert sorted(p.name for p in out.iterdir()) == ["a.cu", "b.cuh"]
    assert (out / "a.cu").read_text() == "old a" and (out / "b.cuh").read_text() == "old b"
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    files.write_all_whole(outputs)
    assert [p.read_bytes() for p, _ in outputs] == [b"new a", b"new b", b"new c"]
    assert sorted(p.name for p in out.iterdir()) == ["a.cu", "b.cuh", "new"]
