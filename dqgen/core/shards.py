"""Sharded model folders as transformers' ``save_pretrained`` writes them: shard sizes, names and the index
(``model.safetensors.index.json``), and the natural order of tensor names. Used by ``dqgen dequant``'s folder output
(dqgen.io) and ``dqgen.nn.save_quantized``."""

from __future__ import annotations

import json
import re
from typing import Any

#: transformers' default max_shard_size ("5GB": decimal units, as its save_pretrained reads them).
DEFAULT_SHARD_BYTES = 5 * 10**9
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20}
_SIZE_UNITS |= {"GIB": 2**30, "TIB": 2**40}


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders the numbers in a name by value: ``layers.9`` before ``layers.23``."""
    parts = re.split(r"(\d+)", name)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p != "")


def parse_size(text: str | int, name: str = "shard size") -> int:
    """Bytes from ``5GB``, ``500MB``, ``2GiB`` or a plain integer (decimal units as transformers reads them);
    ValueError naming ``name`` for anything else or a size below 1 byte."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
        unit = m.group(2).upper() if m else ""
        if m is None or unit not in _SIZE_UNITS:
            raise ValueError(f"[{name}] got {text!r}; expected a size such as 5GB, 500MB, 2GiB or a number of bytes")
        value = int(float(m.group(1)) * _SIZE_UNITS[unit])
    if value < 1:
        raise ValueError(f"[{name}] got {text!r}; expected at least 1 byte")
    return value


def plan_shards(items: list[Any], max_bytes: int) -> list[list[Any]]:
    """Items (name, ..., bytes: the last field), in their order, cut into shards of at most ``max_bytes`` of tensor data
    each (a tensor larger than that gets a shard of its own), as transformers' shard_checkpoint does."""
    shards: list[list[Any]] = [[]]
    size = 0
    for it in items:
        if shards[-1] and size + it[-1] > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(it)
        size += it[-1]
    return shards


def shard_names(count: int) -> list[str]:
    """``model.safetensors`` for one shard, else ``model-00001-of-0000N.safetensors``, ... (transformers')."""
    if count == 1:
        return [SINGLE_NAME]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def index_text(shards: list[list[Any]], names: list[str]) -> str:
    """``model.safetensors.index.json``: total_size (bytes of tensor data) and the weight_map."""
    total = sum(it[-1] for shard in shards for it in shard)
    wm = {it[0]: fname for shard, fname in zip(shards, names, strict=True) for it in shard}
    return json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=2) + "\n"
