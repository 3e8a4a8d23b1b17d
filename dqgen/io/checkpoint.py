"""Read AWQ and GPTQ safetensors checkpoints and dequantize them to dense fp16 / bf16 weights.

Formats (the layouts every loader agrees on; K = in_features, N = out_features, P = 32 // bits):

- AWQ ``gemm`` (casper-hansen/AutoAWQ ``awq/modules/linear/gemm.py``, ``awq/utils/packing_utils.py``):
  ``<prefix>.qweight`` int32 ``[K, N/8]`` packed along N in AWQ order ``[0,2,4,6,1,3,5,7]``,
  ``<prefix>.qzeros`` int32 ``[K/G, N/8]`` packed the same way, ``<prefix>.scales`` fp16 ``[K/G, N]``;
  value ``(q - z) * s``. Config: ``quant_config.json`` (``w_bit``, ``q_group_size``, ``zero_point``,
  ``version``) or ``config.json`` ``quantization_config`` (``quant_method: awq``, ``bits``, ``group_size``).
  dqgen spec: ``u4``, packing ``{axis: N, order: awq}``, zeros ``integer``.
- GPTQ (AutoGPTQ ``auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py``; GPTQModel's ``checkpoint_format``):
  ``<prefix>.qweight`` int32 ``[K/P, N]`` packed along K sequentially, ``<prefix>.qzeros`` int32
  ``[G, N/P]`` packed along N sequentially, ``<prefix>.scales`` fp16 ``[G, N]``, ``<prefix>.g_idx``
  int32 ``[K]`` (optional). Config: ``quantize_config.json`` or ``config.json`` ``quantization_config``
  (``quant_method: gptq``): ``bits``, ``group_size`` (-1: one group), ``desc_act``, ``sym``,
  ``checkpoint_format`` (``gptq`` = v1, stored zero = z - 1, the default; ``gptq_v2``: stored = z).
  dqgen spec: ``sym: true`` -> ``u{bits}b{2^(bits-1)}`` (value q - 2^(bits-1)), zeros ``none`` (a
  ``qzeros`` tensor, if any, is ignored, with a note); ``sym: false`` -> ``u{bits}`` with zeros
  ``gptq_v1`` / ``gptq_v2``. ``act_order`` when ``desc_act`` is true and ``g_idx`` is not the trivial
  ``arange(K) // G`` (a trivial g_idx takes the plain path).

Every disagreement between the config and the tensors (bits or group size against the shapes, a
missing tensor, unpacked float zeros, a g_idx of the wrong length or with group ids out of range,
a v1 zero point of 0 that wrapped to 2^bits - 1, qzeros that vary in a ``sym: true`` file, a ``bits``
that the model's other sizes contradict when no qzeros, g_idx or group size pins the code width)
raises ``ValueError`` naming the layer and the tensor or config field: a file that would dequantize to
silent garbage is refused instead. So are index files whose ``weight_map`` names a file outside the
model's folder.

``dequantize_file`` writes ``<prefix>.weight`` as ``[N, K]`` (``torch.nn.Linear``'s
``[out_features, in_features]``; dqgen's kernels produce ``W[K, N]``, which is transposed) in the
target dtype, drops the layer's ``qweight``, ``qzeros``, ``scales`` and ``g_idx``, and copies every
other tensor (biases, embeddings, norms) byte for byte. To load the result as a dense model, remove
``quantization_config`` from the model's ``config.json``.

Values: each element is ``round_target((q - z) * s)``, one rounding, with the scales as stored. When
the scales' dtype differs from the target they are converted first if that is exact. Scales the target
cannot hold exactly (fp16 scales into bf16, say) are not rounded, which would round twice: the kernel
(an fp16 spec) runs with unit scales and gives ``q - z`` exactly, the product with the stored scales is
formed exactly (fp32 on the GPU for 16-bit scales, float64 on the CPU) and rounded once (the note says
so). Overflow is counted in the dtype written.

Input files are validated by the ``safetensors`` package; their tensors are then read over ``mmap``
from the byte ranges of the header. The output is written here (an 8-byte little-endian header length,
a JSON header ``{name: {dtype, shape, data_offsets}}``, the raw little-endian bytes), streamed tensor
by tensor so that a model larger than memory can be dequantized, into a temporary file of its own
that replaces ``out`` when complete.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import struct
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
from pydantic import ValidationError
from safetensors import SafetensorError, safe_open

from ..core import formats
from ..core.formats import numpy_dtype
from ..core.spec import Spec
from ..layout.packing import unpack_zeros

__all__ = [
    "QuantLayer",
    "dequantize_file",
    "dequantize_layer",
    "infer_spec",
    "read_config",
    "read_layers",
    "read_safetensors",
    "spec_summary",
    "write_safetensors",
]

BF16 = numpy_dtype(formats.BF16)
#: The target dtypes by spec name (the number-format registry's ``target`` rows).
_TARGETS = {name: numpy_dtype(t) for name, t in formats.with_role("target").items()}

#: safetensors dtype names <-> numpy dtypes (the ones an array can be made of here).
_ST_DTYPES: dict[str, np.dtype] = {
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
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}

_LAYER_PARTS = ("qweight", "qzeros", "scales", "g_idx")


# ----------------------------------------------------------------------------------------------
# safetensors I/O.
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    file: _StFile
    dtype: str  # safetensors name, e.g. "I32"
    shape: tuple[int, ...]
    begin: int  # absolute byte offsets in the file
    end: int

    @property
    def np_dtype(self) -> np.dtype | None:
        return _ST_DTYPES.get(self.dtype)


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
        self.entries: dict[str, _Entry] = {}
        for name, info in header.items():
            begin, end = info["data_offsets"]
            if not 0 <= begin <= end <= size - base:  # the file changed since it was validated
                raise ValueError(f"{path}: tensor {name!r} data_offsets {[begin, end]} lie outside the file")
            self.entries[name] = _Entry(self, info["dtype"], tuple(info["shape"]), base + begin, base + end)
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None

    def raw(self, entry: _Entry) -> memoryview:
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


class _Tensors(Mapping):
    """Every tensor of one or more safetensors files, by name, loaded on access."""

    def __init__(self, files: list[Path]) -> None:
        self.files = [_StFile(p) for p in files]
        self.entries: dict[str, _Entry] = {}
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

    def __enter__(self) -> _Tensors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _safetensors_files(path: Path) -> list[Path]:
    """The files a path names: one .safetensors file, a *.index.json (its weight_map), or a folder
    (its model.safetensors.index.json when there is one, else every *.safetensors in it)."""
    if not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    if path.is_dir():
        index = path / "model.safetensors.index.json"
        if index.exists():
            return _safetensors_files(index)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ValueError(f"{path}: no .safetensors files in this folder")
        return files
    if path.name.endswith(".json"):
        try:
            wm = json.loads(path.read_text())["weight_map"]
            names = sorted(set(wm.values()))
            if not all(isinstance(n, str) for n in names):
                raise TypeError("weight_map values must be file names")
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"{path}: not a safetensors index (expected a JSON object with a weight_map): {e}"
            ) from None
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


def _header_bytes(items: list[tuple[str, str, tuple[int, ...], int]], metadata: dict[str, str] | None) -> bytes:
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


def _le_bytes(a: np.ndarray) -> memoryview:
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
        dt = _ST_NAMES.get(np.dtype(a.dtype))
        if dt is None:
            raise ValueError(f"{name}: dtype {a.dtype} has no safetensors name")
        items.append((name, dt, tuple(a.shape), a.nbytes))
    with open(path, "wb") as fh:
        fh.write(_header_bytes(items, metadata))
        for a in tensors.values():
            fh.write(_le_bytes(a))


# ----------------------------------------------------------------------------------------------
# Config.
# ----------------------------------------------------------------------------------------------


def _read_json(p: Path) -> dict:
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a JSON object, got {type(data).__name__}")
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
        raise ValueError(
            f"{p} has no quantization_config, and there is no quantize_config.json or quant_config.json "
            f"in {folder}: cannot tell how the checkpoint was quantized"
        )
    raise ValueError(
        f"no quantization config next to {path}: expected quantize_config.json (GPTQ), quant_config.json (AWQ) "
        f"or a config.json with quantization_config in {folder}"
    )


@dataclass(frozen=True)
class _QConfig:
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


def _parse_config(config: Mapping[str, Any]) -> _QConfig:
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
    method = str(method).lower()
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
        if not zp:
            raise bad(
                "zero_point",
                zp,
                "true (AWQ GEMM checkpoints carry qzeros; symmetric AWQ exists only for "
                "Marlin, casper-hansen/AutoAWQ#478)",
            )
        return _QConfig("awq", bits, group, False, False, "awq", where)
    if bits not in (2, 4, 8):
        raise bad(bname, bits, "2, 4 or 8 (codes that divide a 32-bit word; 3-bit GPTQ straddles words)")
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
    return _QConfig("gptq", bits, group, sym, desc, fmt, where)


# ----------------------------------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------------------------------


@dataclass
class QuantLayer:
    """One quantized linear layer, ready to dequantize: the spec dqgen runs, the tensors in the form
    the kernel takes (scales in ``spec.target``, ``zeros`` None for symmetric GPTQ, ``g_idx`` int32 or
    None) and notes on what was inferred or ignored. ``target`` is the output dtype. When the stored
    scales are not exact in it, ``product_scales`` holds them, the kernel (an fp16 spec) runs with unit
    ``scales`` and gives q - z exactly, and each product with ``product_scales`` is rounded once to
    ``target``."""

    name: str
    spec: Spec
    qweight: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None
    g_idx: np.ndarray | None
    notes: list[str] = field(default_factory=list)
    target: str = ""
    product_scales: np.ndarray | None = None
    width_pinned: bool = True  # some tensor shape ties the code width down (see _analyze)

    def __post_init__(self) -> None:
        if not self.target:
            self.target = self.spec.target.value

    @property
    def K(self) -> int:
        return int(self.qweight.shape[0] * (self.spec.per_word if self.spec.packing.axis == "K" else 1))

    @property
    def N(self) -> int:
        return int(self.scales.shape[1])


def spec_summary(spec: Spec, target: str | None = None) -> str:
    """One line: source code, layout, zeros, group, act_order, target."""
    g = spec.scales.group_size
    parts = [
        f"{spec.source.short} {spec.packing.order} along {spec.packing.axis}",
        f"zeros {spec.zeros.mode}",
        f"group {'auto (from the scales)' if g == 'auto' else g if g > 0 else 'per-channel'}",
    ]
    if spec.act_order:
        parts.append("act_order")
    out = (
        spec.target.value
        if target in (None, spec.target.value)
        else f"{target} (q - z by an {spec.target.value} kernel, scaled and rounded once)"
    )
    return ", ".join(parts) + f" -> {out}"


def _tensor(tensors: Mapping[str, Any], name: str, part: str) -> Any:
    for key in (f"{name}.{part}", part):
        if key in tensors:
            return tensors[key]
    return None


def _meta(tensors: Mapping[str, Any], name: str, part: str) -> tuple[np.dtype | None, tuple[int, ...]] | None:
    """(dtype, shape) of a part without loading it when ``tensors`` can tell."""
    key = next((k for k in (f"{name}.{part}", part) if k in tensors), None)
    if key is None:
        return None
    if isinstance(tensors, _Tensors):
        dt, shape = tensors.meta(key)
        return _ST_DTYPES.get(dt), shape
    a = np.asarray(tensors[key])
    return a.dtype, tuple(a.shape)


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt in (BF16, np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))


def _dname(dt: np.dtype | None) -> str:
    return "unknown" if dt is None else ("bfloat16" if dt == BF16 else dt.name)


def _fits_bits(
    current: int, *, rows: int = 0, want_k: int | None = None, words: int = 0, want_n: int | None = None
) -> str:
    """' (the shapes fit bits=B)' when another code width B explains the shapes: ``rows`` packed rows
    holding ``want_k`` rows of K, and/or ``words`` words per row holding ``want_n`` columns; else ''."""
    for b in (2, 4, 8):
        p = 32 // b
        if b != current and (want_k is None or rows * p == want_k) and (want_n is None or words * p == want_n):
            return f" (the shapes fit bits={b})"
    return ""


def _spec_name(q: _QConfig, short: str, mode: str, act: bool, target: str) -> str:
    g = f"g{q.group_size}" if q.group_size > 0 else "gch"
    return f"{q.method}_{short}_{mode}_{g}{'_act' if act else ''}_{target}"


def infer_spec(
    config: Mapping[str, Any], tensors: Mapping[str, np.ndarray], name: str, target: str = "fp16"
) -> tuple[Spec, list[str]]:
    """The dqgen spec of layer ``name`` (a prefix with ``.qweight``), from its config and tensors.

    ``tensors`` maps full names (``name + ".qweight"``, ...) or bare parts (``"qweight"``) to arrays.
    Checks every config field against the shapes and the small tensors' values; raises ValueError
    naming the layer and the tensor or field when they disagree. Returns the spec and notes (what
    was inferred or ignored). The spec's target is ``target``, except for scales that the target cannot
    hold exactly: then it is the fp16 spec that gives q - z with unit scales (see the module docstring)."""
    return _analyze(config, tensors, name, target)[0:2]


class _Analysis(NamedTuple):
    spec: Spec
    notes: list[str]
    scales: np.ndarray  # what the kernel takes: in the spec's target, or ones when product_scales is set
    zeros: np.ndarray | None
    g_idx: np.ndarray | None
    product_scales: np.ndarray | None  # the stored scales, applied after the kernel (see QuantLayer)
    width_pinned: bool


def _analyze(config: Mapping[str, Any] | _QConfig, tensors: Mapping[str, Any], name: str, target: str) -> _Analysis:
    """infer_spec, also returning what the kernel runs with."""
    if target not in _TARGETS:
        raise ValueError(f"[target] got {target!r}; expected 'fp16' or 'bf16'")
    q = config if isinstance(config, _QConfig) else _parse_config(config)
    notes: list[str] = []

    def err(part: str, msg: str) -> ValueError:
        return ValueError(f"layer {name}, {part}: {msg}" if part else f"layer {name}: {msg}")

    def cfg(fieldname: str) -> str:
        return f"[{fieldname}] in {q.short}"

    qmeta = _meta(tensors, name, "qweight")
    if qmeta is None:
        raise err("qweight", "missing")
    qdt, qshape = qmeta
    if qdt not in (np.dtype(np.int32), np.dtype(np.uint32)) or len(qshape) != 2:
        raise err("qweight", f"expected 2-D int32 packed words, got {list(qshape)} {_dname(qdt)}")
    needed = ["scales"] + (["qzeros"] if not q.sym else [])
    missing = [p for p in needed if _meta(tensors, name, p) is None]
    if missing:
        have = [p for p in _LAYER_PARTS if _meta(tensors, name, p) is not None]
        raise err(
            missing[0],
            f"missing ({'AWQ' if q.method == 'awq' else 'GPTQ'} "
            f"{'asymmetric ' if q.method == 'gptq' and not q.sym else ''}layers need "
            f"{', '.join(['qweight', *needed])}; this one has {', '.join(have)})",
        )
    scales = np.asarray(_tensor(tensors, name, "scales"))
    if scales.ndim != 2 or not _is_float(scales.dtype):
        raise err("scales", f"expected a 2-D float tensor [groups, N], got {list(scales.shape)} {_dname(scales.dtype)}")
    qz_meta = _meta(tensors, name, "qzeros")
    qzeros = np.asarray(_tensor(tensors, name, "qzeros")) if qz_meta is not None else None
    if qzeros is not None and _is_float(qzeros.dtype):
        hint = " (the same shape as scales)" if qzeros.shape == scales.shape else ""
        raise err(
            "qzeros",
            f"holds unpacked float zero points {list(qzeros.shape)} {_dname(qzeros.dtype)}{hint}, not packed "
            f"int32 words [groups, N/{32 // q.bits}]: this is not the {q.method.upper()} layout "
            "(vllm#17862); repack the zero points as integers, or dequantize it as a 'float' (HQQ-style) zeros spec",
        )
    if qzeros is not None and (qzeros.dtype not in (np.dtype(np.int32), np.dtype(np.uint32)) or qzeros.ndim != 2):
        raise err("qzeros", f"expected 2-D int32 packed words, got {list(qzeros.shape)} {_dname(qzeros.dtype)}")

    bits, P, gs = q.bits, 32 // q.bits, q.group_size
    N = scales.shape[1]
    K = qshape[0] if q.method == "awq" else qshape[0] * P
    n_qweight = qshape[1] * P if q.method == "awq" else qshape[1]
    if n_qweight != N:
        # Which of qweight and scales is wrong: the other tensors that hold N decide.
        witnesses = []
        if qzeros is not None and qzeros.shape[1] * P == n_qweight:
            witnesses.append(f"qzeros {list(qzeros.shape)}")
        bias = _meta(tensors, name, "bias")
        if bias is not None and bias[1] == (n_qweight,):
            witnesses.append(f"bias {list(bias[1])}")
        if witnesses:
            raise err(
                "scales",
                f"{list(scales.shape)} has N = {N} columns, but qweight {list(qshape)} and "
                f"{' and '.join(witnesses)} hold N = {n_qweight}",
            )
        if q.method == "awq":
            alt = (
                " (scales has as many columns as qweight: that is GPTQ's layout, packed along K)"
                if qshape[1] == N
                else ""
            )
            raise err(
                "qweight",
                f"{list(qshape)} packs N = {qshape[1]} x {P} = {n_qweight} columns, but scales has N = {N}{alt}",
            )
        alt = " (N/8 words per row: that is AWQ's layout, packed along N)" if qshape[1] * 8 == N else ""
        raise err(
            "qweight",
            f"{list(qshape)} has {qshape[1]} columns but scales {list(scales.shape)} has N = {N}; "
            f"GPTQ packs along K, so both hold N columns{alt}",
        )

    # g_idx: its length is K, which pins down the bits.
    g_idx = _tensor(tensors, name, "g_idx")
    # Whether a tensor shape ties the code width down (K from g_idx or the groups, N from qzeros; AWQ is
    # always 4-bit): without one, qweight [K/P, N] fits every width, and the file as a whole must say.
    width_pinned = q.method == "awq" or g_idx is not None or qzeros is not None or gs > 0
    if g_idx is not None:
        g_idx = np.asarray(g_idx)
        if q.method == "awq":
            notes.append("g_idx ignored (AWQ has no act-order)")
            g_idx = None
        elif g_idx.ndim != 1 or g_idx.dtype.kind not in "iu":
            raise err("g_idx", f"expected a 1-D integer tensor [K], got {list(g_idx.shape)} {_dname(g_idx.dtype)}")
        elif g_idx.shape[0] != K:
            raise err(
                "g_idx",
                f"has {g_idx.shape[0]} entries, but K = qweight rows x {P} = {qshape[0]} x {P} = {K} for "
                f"{cfg('bits')} = {bits}{_fits_bits(bits, rows=qshape[0], want_k=g_idx.shape[0])}",
            )

    if qzeros is not None and qzeros.shape[1] * P != N:
        raise err(
            "qzeros",
            f"{list(qzeros.shape)} packs N = {qzeros.shape[1]} x {P} = {qzeros.shape[1] * P} zero points per row "
            f"({cfg('bits')} = {bits}), but scales has N = {N}{_fits_bits(bits, words=qzeros.shape[1], want_n=N)}",
        )

    # Groups.
    G = scales.shape[0]
    if gs > 0:
        want = K // gs
        if K % gs or want != G:
            fits = []
            if G and K % G == 0:
                fits.append(f"group_size={K // G}")
            alt = _fits_bits(bits, rows=qshape[0], want_k=gs * G) if q.method == "gptq" else ""
            if alt:
                fits.append(alt.strip(" ()").removeprefix("the shapes fit "))
            if K % gs and -(-K // gs) == G:
                raise err(
                    "scales",
                    f"has {G} rows = ceil(K / group_size) = ceil({K} / {gs}): K is not a multiple of "
                    f"{cfg('group_size')}, and a partial last group is not supported",
                )
            raise err(
                "scales",
                f"has {G} rows, but K / group_size = {K} / {gs} = {K / gs:g} for {cfg('group_size')} = {gs} "
                f"and {cfg('bits')} = {bits}: the config and the tensors disagree"
                + (f" (the shapes fit {' or '.join(fits)})" if fits else ""),
            )
    elif G != 1:
        raise err(
            "scales",
            f"has {G} rows, but {cfg('group_size')} = -1 means one group (1 row)"
            + (f" (the shapes fit group_size={K // G})" if G and K % G == 0 else ""),
        )
    if qzeros is not None and qzeros.shape[0] != G:
        raise err("qzeros", f"has {qzeros.shape[0]} rows but scales has {G} (one row of zero points per group)")
    if K == 0 or N == 0:
        raise err("qweight", f"is empty (K = {K}, N = {N})")

    bad = ~np.isfinite(scales.astype(np.float32))
    if bad.any():
        raise err("scales", f"{int(bad.sum())} of {scales.size} scales are inf or NaN")

    # g_idx values and act order.
    act = False
    if g_idx is not None:
        out_of_range = np.nonzero((g_idx < 0) | (g_idx >= G))[0]
        if out_of_range.size:
            i = int(out_of_range[0])
            raise err(
                "g_idx",
                f"{out_of_range.size} entries are outside [0, {G}) (the {G} groups of scales), e.g. "
                f"g_idx[{i}] = {int(g_idx[i])}",
            )
        trivial = np.arange(K) // gs if gs > 0 else np.zeros(K, dtype=np.int64)
        if np.array_equal(g_idx, trivial):
            if q.desc_act:
                notes.append("g_idx is the trivial arange(K) // group_size: plain groups, no act-order")
            g_idx = None
        elif not q.desc_act:
            raise err(
                "g_idx",
                f"is not arange(K) // group_size, but {cfg('desc_act')} is false: loaders disagree on such a "
                "file (vLLM ignores g_idx without desc_act, AutoGPTQ uses it); set desc_act true if g_idx is right",
            )
        else:
            act = True
            g_idx = g_idx.astype(np.int32)
    elif q.desc_act and q.method == "gptq" and G > 1:
        raise err("g_idx", f"missing, but {cfg('desc_act')} is true: the group of each row of K is unknown")

    # Zero points.
    zeros: np.ndarray | None = None
    if q.method == "awq":
        src: dict[str, Any] = {"bits": 4, "kind": "unsigned"}
        packing = {"axis": "N", "order": "awq"}
        mode = "integer"
        zeros = qzeros
    else:
        packing = {"axis": "K", "order": "sequential"}
        probe = Spec.model_validate(  # from a dict: strict models type __init__'s arguments as models
            dict(
                name="probe",
                source={"bits": bits, "kind": "unsigned"},
                target="fp16",
                packing=packing,
                scales={"group_size": -1},
                zeros={"mode": "gptq_v2"},
            )
        )
        stored = unpack_zeros(qzeros, probe) if qzeros is not None else None
        if q.sym:
            half = 1 << (bits - 1)
            src = {"bits": bits, "kind": "biased", "bias": half}
            mode = "none"
            if stored is not None:
                vals = np.unique(stored)
                own, other = (half - 1, half) if q.checkpoint_format == "gptq" else (half, half - 1)
                if vals.size > 1:
                    raise err(
                        "qzeros",
                        f"holds {vals.size} different zero points ({int(vals.min())}..{int(vals.max())}), but "
                        f"{cfg('sym')} is true (every zero point {half}): the file looks asymmetric; set sym false "
                        "(and the right checkpoint_format) if so",
                    )
                v = int(vals[0])
                if v == own:
                    notes.append(
                        f"qzeros ignored (sym: value q - {half}; they hold the symmetric zero as "
                        f"{q.checkpoint_format} stores it)"
                    )
                elif v == other:
                    notes.append(
                        f"qzeros ignored (sym: value q - {half}); they hold {v}, the symmetric zero as "
                        f"{'gptq_v2' if q.checkpoint_format == 'gptq' else 'gptq (v1)'} stores it, although "
                        f"checkpoint_format is {q.checkpoint_format!r} (vllm#38966): harmless here"
                    )
                else:
                    notes.append(
                        f"qzeros ignored (sym: value q - {half}); they all hold {v}, not a symmetric zero point"
                    )
        else:
            src = {"bits": bits, "kind": "unsigned"}
            mode = "gptq_v1" if q.checkpoint_format == "gptq" else "gptq_v2"
            assert stored is not None and qzeros is not None
            if mode == "gptq_v1":
                top = (1 << bits) - 1
                wrapped = int(np.count_nonzero(stored == top))
                if wrapped:
                    raise err(
                        "qzeros",
                        f"{wrapped} of {stored.size} zero points are stored as {top}: under "
                        f"{cfg('checkpoint_format')} = 'gptq' (v1, stored = z - 1) that is a zero point of 0 that "
                        f"wrapped around, which v1 loaders read as z = {top + 1}, one full range off "
                        "(GPTQModel#2350, AutoGPTQ#325); the file should be gptq_v2 (stored = z) or re-quantized "
                        "(if it already is gptq_v2, set checkpoint_format to 'gptq_v2')",
                    )
            zeros = qzeros

    # Scales dtype vs target.
    spec_target = target
    tdt = _TARGETS[target]
    product_scales: np.ndarray | None = None
    if scales.dtype != tdt:
        conv = scales.astype(tdt)
        sname = _dname(scales.dtype)
        if np.array_equal(conv.astype(np.float64), scales.astype(np.float64)):
            notes.append(f"scales converted exactly from {sname} to {target}")
            scales = conv
        else:
            # Rounding the scales to the target and then the product would round twice. The kernel runs with
            # unit scales instead (q - z, |q - z| <= 256, exact in fp16), and the product with the stored
            # scales is formed exactly (9 x 24 significant bits at most) and rounded once.
            if not np.array_equal(scales.astype(np.float32).astype(np.float64), scales.astype(np.float64)):
                raise err(
                    "scales",
                    f"{sname} scales with more precision than float32: store them as float32, fp16 or bf16",
                )
            notes.append(
                f"{sname} scales not exact in {target}: q - z from the fp16 kernel, times the {sname} scales "
                f"exactly, rounded once to {target}"
            )
            spec_target = "fp16"
            product_scales = np.ascontiguousarray(scales)
            scales = np.ones(scales.shape, np.float16)

    short = f"u{bits}b{src['bias']}" if "bias" in src else f"u{bits}"
    try:
        spec = Spec.model_validate(
            dict(
                name=_spec_name(q, short, mode, act, spec_target),
                description=f"{q.method.upper()} checkpoint layer {name}",
                source=src,
                target=spec_target,
                packing=packing,
                scales={"group_size": gs},
                zeros={"mode": mode},
                act_order=act,
                arch="sm_80",
            )
        )
    except ValidationError as e:  # e.g. a group size that is not a multiple of the codes per word
        raise err(
            "",
            f"no dqgen spec fits {q.where}: " + "; ".join(x["msg"].removeprefix("Value error, ") for x in e.errors()),
        ) from None
    return _Analysis(spec, notes, np.ascontiguousarray(scales), zeros, g_idx, product_scales, width_pinned)


def _layer_names(tensors: Iterable[str]) -> list[str]:
    return sorted(n[: -len(".qweight")] for n in tensors if n.endswith(".qweight"))


def _build_layer(config: _QConfig, tensors: _Tensors, name: str, target: str, load_qweight: bool = True) -> QuantLayer:
    try:
        a = _analyze(config, tensors, name, target)
    except ValueError as e:
        if str(e).startswith("layer "):
            raise
        raise ValueError(f"layer {name}: {e}") from None
    if load_qweight:
        qweight = tensors[f"{name}.qweight"]
    else:  # shape/dtype only, for planning; replaced before dequantizing
        dt, shape = tensors.meta(f"{name}.qweight")
        qweight = np.lib.stride_tricks.as_strided(np.zeros(1, _ST_DTYPES[dt]), shape=shape, strides=(0,) * len(shape))
    zeros = np.ascontiguousarray(a.zeros) if a.zeros is not None else None
    return QuantLayer(
        name, a.spec, qweight, a.scales, zeros, a.g_idx, a.notes, target, a.product_scales, a.width_pinned
    )


_DIM_KEYS = ("_size", "_dim", "_rank")


def _model_dims(folder: Path) -> dict[int, str]:
    """Sizes the model's config.json declares (hidden_size, intermediate_size, head_dim, ...), by value."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    dims: dict[int, str] = {}

    def walk(d: Any, where: str) -> None:
        if isinstance(d, dict):
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v, f"{where}{k}.")
                elif isinstance(v, int) and not isinstance(v, bool) and v > 0 and str(k).endswith(_DIM_KEYS):
                    dims.setdefault(v, f"config.json {where}{k}")

    walk(config, "")
    return dims


def _check_code_width(q: _QConfig, tensors: _Tensors, layers: list[QuantLayer], folder: Path) -> None:
    """GPTQ's qweight [K/P, N] fits every code width; qzeros, g_idx or a group size pin it down. When no
    layer of the file has one, K = rows x 32/bits must still be a size the model has elsewhere (another
    layer's N, a dimension of another tensor, a size in config.json): if it is not, and another width
    makes every K one, the config's bits are wrong and the output would have the wrong shape."""
    if not layers or any(lay.width_pinned for lay in layers):
        return
    consumed = {f"{lay.name}.{p}" for lay in layers for p in _LAYER_PARTS}
    known = _model_dims(folder)
    for name, e in tensors.entries.items():
        if name not in consumed:
            for d in e.shape:
                known.setdefault(d, f"tensor {name} {list(e.shape)}")
    for lay in layers:
        known.setdefault(lay.N, f"N of layer {lay.name}")
    rows = {lay.name: int(lay.qweight.shape[0]) for lay in layers}

    def unknown(bits: int) -> list[str]:
        return [n for n, r in rows.items() if r * 32 // bits not in known]

    stray = unknown(q.bits)
    fits = [b for b in (2, 4, 8) if b != q.bits and not unknown(b)]
    if not stray:
        return
    if not fits:  # nothing to tell the widths apart: the config is trusted, and the summary line says so
        for lay in layers:
            if lay.name in stray:
                lay.notes.append(
                    f"K = {lay.K} for [bits] = {q.bits} is not a size found elsewhere in the model, and no qzeros, "
                    "g_idx or group size pins the code width: the config's bits are trusted"
                )
        return
    name, b = stray[0], fits[0]
    lay = next(x for x in layers if x.name == name)
    r = rows[name]
    raise ValueError(
        f"layer {name}, qweight: [{r}, {lay.N}] unpacks to K = {r} x {32 // q.bits} = {lay.K} rows for [bits] = "
        f"{q.bits} in {q.short}, a size nothing else in the model has; with bits={b} every layer's K is one "
        f"(here {r * 32 // b}: {known[r * 32 // b]}): the config and the tensors disagree, and no qzeros, g_idx "
        "or group size in the file pins the code width"
    )


def read_layers(file: Path | str, target: str = "fp16", config: dict | None = None) -> list[QuantLayer]:
    """Every quantized layer (a prefix with ``.qweight``) of a checkpoint: one .safetensors file, a
    ``model.safetensors.index.json`` or a folder. ``config`` defaults to ``read_config(file)``.
    Raises ValueError naming the layer and the tensor or config field on any disagreement."""
    path = Path(file)
    qc = _parse_config(config if config is not None else read_config(path))
    with _Tensors(_safetensors_files(path)) as tensors:
        names = _layer_names(tensors)
        if not names:
            raise ValueError(f"{path}: no quantized layers (no tensor named <prefix>.qweight)")
        layers = [_build_layer(qc, tensors, n, target) for n in names]
        _check_code_width(qc, tensors, layers, path if path.is_dir() else path.parent)
        return layers


# ----------------------------------------------------------------------------------------------
# Dequantizing.
# ----------------------------------------------------------------------------------------------

_KERNELS: dict[str, Any] = {}


def _kernel(spec: Spec) -> Any:
    key = spec.model_dump_json(exclude={"name", "description"})
    if key not in _KERNELS:
        from ..run.runtime import compile as compile_spec

        _KERNELS[key] = compile_spec(spec)
    return _KERNELS[key]


def _row_groups(layer: QuantLayer, K: int) -> np.ndarray:
    """The scales row (group) of each row of K."""
    if layer.g_idx is not None:
        return layer.g_idx.astype(np.int64)
    assert layer.product_scales is not None
    return np.arange(K) // (K // layer.product_scales.shape[0])


def _scale_once(diff: np.ndarray, layer: QuantLayer) -> np.ndarray:
    """round_target(diff * product_scales[row group]) for diff = q - z [K, N] (fp16 integers), on the CPU:
    the float64 product is exact (9 x 24 significant bits at most), and the reference's rounding rounds
    it once (numpy and ml_dtypes go float64 -> float32 -> bf16, which can round twice)."""
    from ..check.reference import _FORMAT_BITS, _round_array
    from ..core.spec import Target

    assert layer.product_scales is not None
    K, N = diff.shape
    rows = _row_groups(layer, K)
    scales = layer.product_scales.astype(np.float64)
    bits = np.empty((K, N), np.uint16)
    step = max(1, (1 << 22) // max(N, 1))  # rows per chunk: bounded float64 temporaries
    for k in range(0, K, step):
        exact = diff[k : k + step].astype(np.float64) * scales[rows[k : k + step]]
        bits[k : k + step] = _round_array(exact.reshape(-1), *_FORMAT_BITS[Target(layer.target)]).reshape(exact.shape)
    return bits.view(_TARGETS[layer.target])


def _dequantize(layer: QuantLayer, device: str, transpose: bool) -> np.ndarray:
    if device == "cpu":
        from ..check.reference import dequantize_reference

        w = dequantize_reference(layer.spec, layer.qweight, layer.scales, layer.zeros, layer.g_idx)
        if layer.product_scales is not None:
            w = _scale_once(w, layer)
        if transpose:
            w = np.ascontiguousarray(w.T)
    elif device == "cuda":
        try:
            import torch
        except ImportError:
            raise ValueError("device 'cuda' needs torch (pip install torch); or dequantize with device 'cpu'") from None

        def up(a: np.ndarray | None) -> Any:
            if a is None:
                return None
            a = np.ascontiguousarray(a)
            if a.dtype == BF16:
                return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
            return torch.from_numpy(a).cuda()

        def down(t: Any) -> np.ndarray:
            t = t.cpu()
            return t.view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.numpy()

        kernel = _kernel(layer.spec)
        out = kernel(up(layer.qweight), up(layer.scales), up(layer.zeros), g_idx=up(layer.g_idx))
        ps = layer.product_scales
        if ps is not None and ps.dtype.itemsize <= 2:
            # q - z (9 significant bits at most) times an fp16 / bf16 / fp8 scale (11 at most) is exact in
            # fp32, and torch's fp32 -> fp16 / bf16 conversion rounds to nearest even: one rounding.
            rows = torch.from_numpy(_row_groups(layer, out.shape[0])).cuda()
            out = (out.float() * torch.from_numpy(ps.astype(np.float32)).cuda()[rows]).to(
                torch.bfloat16 if layer.target == "bf16" else torch.float16
            )
            ps = None
        if ps is not None:  # fp32 scales: the exact product needs float64
            out = torch.from_numpy(_scale_once(down(out), layer).view(np.int16)).view(
                torch.bfloat16 if layer.target == "bf16" else torch.float16
            )
        if transpose:
            out = out.t().contiguous()
        w = down(out)
    else:
        raise ValueError(f"[device] got {device!r}; expected 'cuda' or 'cpu'")
    bad = ~np.isfinite(w.astype(np.float32))
    if bad.any():
        raise ValueError(
            f"layer {layer.name}: {int(bad.sum())} dequantized values overflow {layer.target} (|value| too large)"
            + ("; dequantize to bf16 instead" if layer.target == "fp16" else "")
        )
    return w


def dequantize_layer(layer: QuantLayer, device: str = "cuda") -> np.ndarray:
    """``W[K, N]`` in ``layer.target`` (dqgen's orientation; ``dequantize_file`` writes its transpose).
    ``device="cuda"`` runs ``dqgen.compile(layer.spec)`` on torch CUDA tensors; ``"cpu"`` runs
    ``dqgen.check.reference.dequantize_reference``. Both give the same bits."""
    return _dequantize(layer, device, transpose=False)


def _check_out(out: Path) -> None:
    """Refuse an output path that cannot be a file before any input is read."""
    if out.is_dir():
        raise ValueError(f"output {out}: is a folder; expected the path of the .safetensors file to write")
    if out.exists() and not out.is_file():  # a device or a FIFO would be replaced by a regular file
        raise ValueError(f"output {out}: exists and is not a regular file")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ValueError(f"output {out}: {parent} is not a folder")


def _open_temp(out: Path) -> tuple[Any, Path]:
    """A new file of its own next to ``out`` (renamed onto it when complete), with the permissions a
    plain open() would give it (mkstemp makes it 0600)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
    except OSError as e:
        raise ValueError(f"output {out}: cannot write in {out.parent}: {e.strerror or e}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return os.fdopen(fd, "wb"), Path(name)
    except BaseException:  # an interrupt here too leaves no file behind
        os.close(fd)
        os.unlink(name)
        raise


def dequantize_file(
    file: Path | str,
    out: Path | str,
    target: str = "fp16",
    device: str = "cuda",
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    config: dict | None = None,
) -> list[str]:
    """Dequantize every quantized layer of a checkpoint into ``out`` (a .safetensors file).

    ``out`` holds ``<prefix>.weight`` ``[N, K]`` (out_features x in_features, ``torch.nn.Linear``'s
    layout) in ``target`` for each layer, and every non-quantized tensor of the input unchanged; the
    layers' qweight / qzeros / scales / g_idx are dropped. ``out`` and all layers are checked before
    anything is written; the file is written under a temporary name of its own in ``out``'s folder and
    renamed onto ``out`` when complete (atomically: concurrent runs to one ``out`` each install a whole
    file of their own, the last one stays), and removed on any error or interrupt. With ``progress`` a
    rich progress bar (one step per layer) runs on stderr when it is a terminal. Returns one summary
    line per layer (also passed to ``log`` as each layer is done)."""
    path, out = Path(file), Path(out)
    if target not in _TARGETS:
        raise ValueError(f"[target] got {target!r}; expected 'fp16' or 'bf16'")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"[device] got {device!r}; expected 'cuda' or 'cpu'")
    _check_out(out)
    qc = _parse_config(config if config is not None else read_config(path))
    files = _safetensors_files(path)
    if out.resolve() in {f.resolve() for f in files}:
        raise ValueError(f"{out}: the output would overwrite an input file")
    with _Tensors(files) as tensors:
        names = _layer_names(tensors)
        if not names:
            raise ValueError(f"{path}: no quantized layers (no tensor named <prefix>.qweight)")
        # Pass 1: check every layer (reads only the small tensors) before writing anything.
        plans = {n: _build_layer(qc, tensors, n, target, load_qweight=False) for n in names}
        _check_code_width(qc, tensors, list(plans.values()), path if path.is_dir() else path.parent)
        consumed = {f"{n}.{p}" for n in names for p in _LAYER_PARTS}
        items: list[tuple[str, str, tuple[int, ...], int]] = []
        sources: dict[str, Any] = {}
        for n, layer in plans.items():
            wname = f"{n}.weight"
            if wname in tensors:
                raise ValueError(f"layer {n}: the checkpoint already has a tensor {wname}")
            items.append((wname, _ST_NAMES[_TARGETS[target]], (layer.N, layer.K), layer.N * layer.K * 2))
            sources[wname] = n
        for name, e in tensors.entries.items():
            if name not in consumed:
                items.append((name, e.dtype, e.shape, e.end - e.begin))
                sources[name] = e
        items.sort(key=lambda it: it[0])
        meta = {
            "format": "pt",
            "dqgen": f"dequantized {qc.method.upper()} layers to {target} [out_features, in_features]",
        }
        lines: list[str] = []
        fh, tmp = _open_temp(out)
        bar = None
        try:
            if progress:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )

                console = Console(stderr=True)
                if console.is_terminal:  # no bar (nor its stray newline) in logs and pipes
                    bar = Progress(
                        TextColumn("dequant"),
                        BarColumn(),
                        MofNCompleteColumn(),
                        TimeElapsedColumn(),
                        TextColumn("{task.description}"),
                        console=console,
                        transient=True,
                    )
                    bar.start()
                    task = bar.add_task("", total=len(names))
            with fh:
                fh.write(_header_bytes(items, meta))
                for name, _dt, shape, nbytes in items:
                    src = sources[name]
                    if isinstance(src, _Entry):
                        fh.write(src.file.raw(src))
                        continue
                    layer = plans[src]
                    if bar is not None:
                        bar.update(task, description=src)
                    line = f"{src}: {layer.K}x{layer.N} {spec_summary(layer.spec, layer.target)}" + (
                        f" [{'; '.join(layer.notes)}]" if layer.notes else ""
                    )
                    layer.qweight = tensors[f"{src}.qweight"]
                    w = _dequantize(layer, device, transpose=True)
                    layer.qweight = layer.qweight[:0]  # free it (keeps the dtype)
                    assert w.shape == shape and w.nbytes == nbytes, (w.shape, shape)
                    fh.write(_le_bytes(w))
                    del w
                    lines.append(line)
                    if log is not None:
                        log(line)
                    if bar is not None:
                        bar.advance(task)
            os.replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            if bar is not None:
                bar.stop()
    return lines
