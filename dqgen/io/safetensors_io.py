"""safetensors files: reading with the ``safetensors`` package (it validates the header) and the byte-level checks
kept here (offsets inside the file, dtypes numpy can hold), tensors read over ``mmap``; writing (an 8-byte
little-endian header length, a JSON header, the raw little-endian bytes). Sharded checkpoints through their index."""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from safetensors import SafetensorError, safe_open

from ..core import formats
from ..core.formats import numpy_dtype
from ..core.shards import (  # noqa: F401 - the sharded output's helpers, re-exported for dequant
    DEFAULT_SHARD_BYTES,
    INDEX_NAME,
    SINGLE_NAME,
    index_text,
    natural_key,
    parse_size,
    plan_shards,
    shard_names,
)

BF16 = numpy_dtype(formats.BF16)

#: safetensors dtype names <-> numpy dtypes (the ones an array can be made of here).
ST_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": BF16,
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U64": np.dtype(np.uint64),
    "U32": np.dtype(np.uint32),
    "U16": np.dtype(np.uint16),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}


@dataclass(frozen=True)
class Entry:
    file: _StFile
    dtype: str  # safetensors name, e.g. "I32"
    shape: tuple[int, ...]
    begin: int  # absolute byte offsets in the file
    end: int

    @property
    def np_dtype(self) -> np.dtype | None:
        return ST_DTYPES.get(self.dtype)


class _StFile:
    """One safetensors file, header validated by the safetensors package, data memory-mapped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # The package checks what its own loaders check (header size bounds, JSON, dtypes, byte counts,
        # data_offsets that tile the data with no gap, overlap or overrun): a file it refuses is refused here.
        try:
            with safe_open(str(path), framework="numpy"):
                pass
        except SafetensorError as e:
            raise ValueError(f"{path}: not a safetensors file ({e})") from None
        except OSError as e:
            raise ValueError(f"{path}: cannot open: {e.strerror or e}") from None
        # Its API hands out arrays, not byte ranges, and only of dtypes numpy knows. The output is streamed
        # and every other tensor is copied byte for byte whatever its dtype, so the byte ranges are read from
        # the header it just validated.
        try:
            self._fh = open(path, "rb")  # noqa: SIM115 - stays open under the mmap until close()
        except OSError as e:
            raise ValueError(f"{path}: cannot open: {e.strerror or e}") from None
        size = os.fstat(self._fh.fileno()).st_size
        (n,) = struct.unpack("<Q", self._fh.read(8))
        header = json.loads(self._fh.read(n))
        self.metadata: dict[str, str] = header.pop("__metadata__", None) or {}
        base = 8 + n
        self.entries: dict[str, Entry] = {}
        for name, info in header.items():
            begin, end = info["data_offsets"]
            if not 0 <= begin <= end <= size - base:  # the file changed since it was validated
                raise ValueError(f"{path}: tensor {name!r} data_offsets {[begin, end]} lie outside the file")
            self.entries[name] = Entry(self, info["dtype"], tuple(info["shape"]), base + begin, base + end)
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None

    def raw(self, entry: Entry) -> memoryview:
        if self._mm is None or entry.begin == entry.end:
            return memoryview(b"")
        return memoryview(self._mm)[entry.begin : entry.end]

    def array(self, name: str) -> np.ndarray:
        """A fresh (writable, native-order) copy of tensor ``name``."""
        entry = self.entries[name]
        dt = entry.np_dtype
        if dt is None:
            raise ValueError(f"{self.path}: tensor {name!r} has dtype {entry.dtype}, which dqgen does not read")
        buf = self.raw(entry)
        a = np.frombuffer(buf, dtype=dt.newbyteorder("<") if dt.itemsize > 1 else dt, count=math.prod(entry.shape))
        return a.astype(dt, copy=True).reshape(entry.shape)

    def close(self) -> None:
        if self._mm is not None:
            with contextlib.suppress(BufferError):  # an exported view is still alive; the GC closes it later
                self._mm.close()
        self._fh.close()


class Tensors(Mapping):
    """Every tensor of one or more safetensors files, by name, loaded on access."""

    def __init__(self, files: list[Path]) -> None:
        self.files = [_StFile(p) for p in files]
        self.entries: dict[str, Entry] = {}
        for f in self.files:
            for name, e in f.entries.items():
                if name in self.entries:
                    raise ValueError(f"tensor {name!r} is in both {self.entries[name].file.path} and {f.path}")
                self.entries[name] = e

    def __getitem__(self, name: str) -> np.ndarray:
        return self.entries[name].file.array(name)

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def meta(self, name: str) -> tuple[str, tuple[int, ...]]:
        e = self.entries[name]
        return e.dtype, e.shape

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __enter__(self) -> Tensors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _weight_map(path: Path) -> dict[str, str]:
    """The weight_map of a safetensors index (tensor name -> shard file name), its shape checked: a ValueError
    naming the field and the JSON type it holds, not a Python exception's text."""
    from .hf_config import json_document, json_kind

    what = f"{path}: not a safetensors index"
    doc = json_document(path, what)
    if not isinstance(doc, dict):
        raise ValueError(f"{what}: expected a JSON object with a weight_map, got {json_kind(doc)}")
    if "weight_map" not in doc:
        raise ValueError(f"{what}: the JSON object has no weight_map")
    wm = doc["weight_map"]
    if not isinstance(wm, dict):
        raise ValueError(f"{what}: [weight_map] got {json_kind(wm)}; expected an object of tensor -> shard file name")
    for tensor, n in wm.items():
        if not isinstance(n, str):
            raise ValueError(f"{what}: [weight_map] {tensor!r} got {json_kind(n)}; expected a shard file name")
    return wm


def safetensors_files(path: Path) -> list[Path]:
    """The files a path names: one .safetensors file, a *.index.json (its weight_map), or a folder
    (its model.safetensors.index.json when there is one, else every *.safetensors in it)."""
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    if path.is_dir():
        index = path / "model.safetensors.index.json"
        if index.exists():
            return safetensors_files(index)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ValueError(f"{path}: no .safetensors files in this folder")
        return files
    if path.name.endswith(".json"):
        wm = _weight_map(path)
        names = sorted(set(wm.values()))
        for tensor, n in wm.items():
            # Checked on the name, not on the resolved path: shards may be symlinks that leave the folder
            # (the Hugging Face cache links them to its blobs/), but the index itself must not point outside.
            parts = Path(n).parts
            if not parts or Path(n).is_absolute() or ".." in parts or "\\" in n:
                raise ValueError(
                    f"{path}: weight_map entry {tensor!r} names {n!r}, which is not a file inside {path.parent}"
                )
        missing = [n for n in names if not (path.parent / n).exists()]
        if missing:
            raise ValueError(f"{path}: weight_map names files that are not there: {', '.join(missing)}")
        return [path.parent / n for n in names]
    return [path]


def read_safetensors(path: Path | str) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file (bf16 as ml_dtypes.bfloat16), for tests and small files."""
    f = _StFile(Path(path))
    try:
        return {name: f.array(name) for name in f.entries}
    finally:
        f.close()


def header_bytes(items: list[tuple[str, str, tuple[int, ...], int]], metadata: dict[str, str] | None) -> bytes:
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    for name, dtype, shape, nbytes in items:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # pad so the data starts 8-byte aligned
    return struct.pack("<Q", len(raw)) + raw


def le_bytes(a: np.ndarray) -> memoryview:
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.reshape(-1).view(np.uint8).data


def write_safetensors(
    path: Path | str, tensors: Mapping[str, np.ndarray], metadata: dict[str, str] | None = None
) -> None:
    """Write numpy arrays (bf16 included) as a safetensors file, in the mapping's order."""
    items = []
    for name, a in tensors.items():
        dt = ST_NAMES.get(np.dtype(a.dtype))
        if dt is None:
            raise ValueError(f"{name}: dtype {a.dtype} has no safetensors name")
        items.append((name, dt, tuple(a.shape), a.nbytes))
    with open(path, "wb") as fh:
        fh.write(header_bytes(items, metadata))
        for a in tensors.values():
            fh.write(le_bytes(a))


# -- sharded output: dqgen.core.shards (shared with dqgen.nn's save_quantized) ------------------------------------
