"""The quantization config of an AWQ / GPTQ checkpoint: where it is (quantize_config.json, quant_config.json or
config.json's quantization_config) and its fields checked and normalized into one ``QConfig``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def json_kind(value: object) -> str:
    """A JSON value's type as JSON names it (an error names what the file holds, not a Python class)."""
    kinds = (
        (bool, "true/false"),
        (dict, "an object"),
        (list, "an array"),
        (str, "a string"),
        ((int, float), "a number"),
    )
    return "null" if value is None else next((k for t, k in kinds if isinstance(value, t)), type(value).__name__)


def json_document(p: Path, what: str) -> object:
    """The JSON document in file ``p``, or one-line ValueError starting with ``what`` (the file and what it should
    be) when it is not UTF-8 text or not JSON: no decoder's traceback text."""
    try:
        return json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{what} (not a UTF-8 text file)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} (not valid JSON: {e})") from None


def _read_json(p: Path) -> dict:
    data = json_document(p, f"{p}: expected a JSON object")
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a JSON object, got {json_kind(data)}")
    return data


def read_config(path: Path | str) -> dict:
    """The quantization config next to a checkpoint (``path``: a .safetensors file, an index or a folder).

    Looks, in this order, for ``quantize_config.json`` (AutoGPTQ / GPTQModel), ``quant_config.json``
    (AutoAWQ) and ``config.json``'s ``quantization_config`` (transformers). Returns the config dict with
    ``"config_file"`` added (where it came from). Raises ValueError when there is none."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    for fname in ("quantize_config.json", "quant_config.json"):
        p = folder / fname
        if p.exists():
            return {**_read_json(p), "config_file": str(p)}
    p = folder / "config.json"
    if p.exists():
        qc = _read_json(p).get("quantization_config")
        if isinstance(qc, dict):
            return {**qc, "config_file": f"{p} (quantization_config)"}
        if qc is not None:  # there, but not a config: say so rather than "no quantization_config"
            raise ValueError(
                f"{p}: [quantization_config] got {json_kind(qc)}; expected an object (the quant_method, bits...)"
            )
        raise ValueError(
            f"{p} has no quantization_config, and there is no quantize_config.json or quant_config.json "
            f"in {folder}: cannot tell how the checkpoint was quantized"
        )
    raise ValueError(
        f"no quantization config next to {path}: expected quantize_config.json (GPTQ), quant_config.json (AWQ) "
        f"or a config.json with quantization_config in {folder}"
    )


@dataclass(frozen=True)
class QConfig:
    method: str  # "awq" | "gptq"
    bits: int
    group_size: int
    sym: bool  # GPTQ sym; AWQ: not zero_point
    desc_act: bool
    checkpoint_format: str  # GPTQ: "gptq" | "gptq_v2"; AWQ: "awq"
    where: str  # for messages: the config's path

    @property
    def short(self) -> str:
        """The config file's name (without its folder), for messages about one field."""
        return Path(self.where.split(" (")[0]).name + (
            " quantization_config" if "(quantization_config)" in self.where else ""
        )


_AWQ_KEYS = ("w_bit", "q_group_size", "zero_point", "version")
_GPTQ_KEYS = ("desc_act", "sym", "checkpoint_format", "damp_percent", "static_groups")


def parse_config(config: Mapping[str, Any]) -> QConfig:
    where = str(config.get("config_file", "config"))

    def bad(fieldname: str, got: object, expected: str) -> ValueError:
        return ValueError(f"{where}: [{fieldname}] got {got!r}; expected {expected}")

    method = config.get("quant_method")
    if method is None:
        if any(k in config for k in _AWQ_KEYS) and not any(k in config for k in _GPTQ_KEYS):
            method = "awq"
        elif any(k in config for k in _GPTQ_KEYS) or "bits" in config:
            method = "gptq"
        else:
            raise bad(
                "quant_method", None, "'awq' or 'gptq' (the config has no quant_method and no AWQ or GPTQ fields)"
            )
    if not isinstance(method, str):
        raise bad("quant_method", method, "'awq' or 'gptq', a string")
    method = method.lower()
    if method not in ("awq", "gptq"):
        raise bad("quant_method", method, "'awq' or 'gptq' (dqgen reads AWQ gemm and GPTQ checkpoints)")

    def integer(*names: str, default: int | None = None) -> tuple[str, int]:
        for n in names:
            if n in config and config[n] is not None:
                v = config[n]
                if isinstance(v, bool) or not isinstance(v, int):
                    raise bad(n, v, "an integer")
                return n, v
        if default is None:
            raise bad(names[0], None, f"an integer (the config has none of {', '.join(names)})")
        return names[0], default

    bname, bits = integer("bits", "w_bit")
    gname, group = integer("group_size", "q_group_size", default=-1)
    if group == 0 or group < -1:
        raise bad(gname, group, "-1 (one group) or a positive number of rows")
    if method == "awq":
        version = str(config.get("version", "gemm")).lower()
        if version != "gemm":
            raise bad(
                "version",
                config.get("version"),
                "'gemm' (AWQ's gemv / gemv_fast / marlin / exllama layouts are "
                "repacked for one kernel; dqgen reads the plain GEMM layout)",
            )
        if bits != 4:
            raise bad(bname, bits, "4 (AWQ's GEMM layout packs 4-bit codes in the [0,2,4,6,1,3,5,7] order)")
        zp = config.get("zero_point", True)
        if not isinstance(zp, bool):  # "false" (a string) would read as true
            raise bad("zero_point", zp, "true or false")
        if not zp:
            raise bad(
                "zero_point",
                zp,
                "true (AWQ GEMM checkpoints carry qzeros; symmetric AWQ exists only for "
                "Marlin, casper-hansen/AutoAWQ#478)",
            )
        return QConfig("awq", bits, group, False, False, "awq", where)
    if bits not in (2, 3, 4, 8):
        raise bad(bname, bits, "2, 3, 4 or 8 (the widths GPTQ packs)")
    fmt = config.get("checkpoint_format") or "gptq"
    if fmt not in ("gptq", "gptq_v2"):
        raise bad(
            "checkpoint_format",
            fmt,
            "'gptq' (v1) or 'gptq_v2'; other formats (marlin, bitblas, ...) are "
            "repacked for one kernel and are not the plain GPTQ layout",
        )
    if config.get("is_marlin_format"):
        raise bad("is_marlin_format", True, "false (Marlin-repacked tensors are not the plain GPTQ layout)")
    sym, desc = config.get("sym", True), config.get("desc_act", False)
    for n, v in (("sym", sym), ("desc_act", desc)):
        if not isinstance(v, bool):
            raise bad(n, v, "true or false")
    return QConfig("gptq", bits, group, sym, desc, fmt, where)
