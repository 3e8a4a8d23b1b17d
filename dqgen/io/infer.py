"""Spec inference: the dqgen spec of each quantized layer, from its config and its tensors' shapes and values, with
every disagreement between the two refused by a ValueError naming the layer and the tensor or field."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
from pydantic import ValidationError

from ..core import formats
from ..core.formats import numpy_dtype
from ..core.spec import Spec
from ..layout.layout import Layout
from ..layout.packing import unpack_zeros
from .hf_config import QConfig, parse_config, read_config
from .safetensors_io import BF16, ST_DTYPES, Tensors, safetensors_files

#: The target dtypes by spec name (the number-format registry's ``target`` rows).
TARGETS = {name: numpy_dtype(t) for name, t in formats.with_role("target").items()}

LAYER_PARTS = ("qweight", "qzeros", "scales", "g_idx")


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
        return Layout.of(self.spec).k_of(int(self.qweight.shape[0]))  # 3-bit: 32 rows per 3 words

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
    if isinstance(tensors, Tensors):
        dt, shape = tensors.meta(key)
        return ST_DTYPES.get(dt), shape
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


def _codes_in(words: int, bits: int) -> int:
    """Codes that ``words`` int32 words hold along the packed axis: 32 / bits each, and 3-bit codes 32 per block of
    3 words (GPTQ's 3-bit packing: code i at bits [3i, 3i + 3) of a 96-bit block, some straddling two words)."""
    return words * 32 // bits


def _gptq_zero_fields(qzeros: np.ndarray, probe: Spec) -> np.ndarray:
    """GPTQ's stored zero fields [G, N] from qzeros [G, N * bits / 32], packed along N sequentially; 3-bit zeros
    fill blocks of 3 words along N as the weights do along K (AutoGPTQ's pack), read as the transpose's K blocks."""
    bits = probe.source.bits
    if bits != 3:
        return unpack_zeros(qzeros, probe)
    words = np.ascontiguousarray(np.asarray(qzeros).T).view(np.uint32)
    if words.shape[0] % 3:
        raise ValueError(f"qzeros: {list(np.shape(qzeros))}: 3-bit zero points fill blocks of 3 words along N")
    return np.ascontiguousarray(Layout.of(probe).unpack_fields(words, tuple(range(32)), "K").T)


def _spec_name(q: QConfig, short: str, mode: str, act: bool, target: str) -> str:
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


def _analyze(config: Mapping[str, Any] | QConfig, tensors: Mapping[str, Any], name: str, target: str) -> _Analysis:
    """infer_spec, also returning what the kernel runs with."""
    if target not in TARGETS:
        raise ValueError(f"[target] got {target!r}; expected 'fp16' or 'bf16'")
    q = config if isinstance(config, QConfig) else parse_config(config)
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
        have = [p for p in LAYER_PARTS if _meta(tensors, name, p) is not None]
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
    if q.method == "gptq" and bits == 3 and qshape[0] % 3:
        raise err(
            "qweight",
            f"{list(qshape)} has {qshape[0]} rows, not a multiple of 3: 3-bit GPTQ packs 32 rows of K in blocks "
            f"of 3 int32 words ({cfg('bits')} = 3)",
        )
    K = qshape[0] if q.method == "awq" else _codes_in(qshape[0], bits)
    n_qweight = qshape[1] * P if q.method == "awq" else qshape[1]
    if n_qweight != N:
        # Which of qweight and scales is wrong: the other tensors that hold N decide.
        witnesses = []
        if qzeros is not None and _codes_in(qzeros.shape[1], bits) == n_qweight:
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

    if qzeros is not None and _codes_in(qzeros.shape[1], bits) != N:
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
                zeros={"mode": "gptq_v2" if bits != 3 else "none"},  # 3-bit: the Layout only (no packed zeros)
            )
        )
        stored = _gptq_zero_fields(qzeros, probe) if qzeros is not None else None
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
    tdt = TARGETS[target]
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


def layer_names(tensors: Iterable[str]) -> list[str]:
    return sorted(n[: -len(".qweight")] for n in tensors if n.endswith(".qweight"))


def build_layer(config: QConfig, tensors: Tensors, name: str, target: str, load_qweight: bool = True) -> QuantLayer:
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
        qweight = np.lib.stride_tricks.as_strided(np.zeros(1, ST_DTYPES[dt]), shape=shape, strides=(0,) * len(shape))
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


def check_code_width(q: QConfig, tensors: Tensors, layers: list[QuantLayer], folder: Path) -> None:
    """GPTQ's qweight [K/P, N] fits every code width; qzeros, g_idx or a group size pin it down. When no
    layer of the file has one, K = rows x 32/bits must still be a size the model has elsewhere (another
    layer's N, a dimension of another tensor, a size in config.json): if it is not, and another width
    makes every K one, the config's bits are wrong and the output would have the wrong shape."""
    if not layers or any(lay.width_pinned for lay in layers):
        return
    consumed = {f"{lay.name}.{p}" for lay in layers for p in LAYER_PARTS}
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
    qc = parse_config(config if config is not None else read_config(path))
    with Tensors(safetensors_files(path)) as tensors:
        names = layer_names(tensors)
        if not names:
            raise ValueError(f"{path}: no quantized layers (no tensor named <prefix>.qweight)")
        layers = [build_layer(qc, tensors, n, target) for n in names]
        check_code_width(qc, tensors, layers, path if path.is_dir() else path.parent)
        return layers
