"""Every quantized linear layer of a model checkpoint, in the form a ``QuantLinear`` takes, for the model loader
(``dqgen.nn.load``). AWQ and GPTQ go through the same inference as ``dqgen dequant`` (``infer.build_layer``);
compressed-tensors ``pack-quantized`` layers are GPTQ's layout transposed (codes packed along K, 8 or 4 per word,
with the same unsigned offset), so they are transposed and read by that inference too; ModelOpt FP8 and NVFP4
layers, which the dequant inference does not read, are mapped onto dqgen's fp8 and NVFP4 layouts here. Every
refusal is one ValueError naming the layer and the format."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import ml_dtypes
import numpy as np

from ..core.spec import Spec
from .hf_config import QConfig, parse_config, read_config
from .infer import TARGETS, build_layer, check_code_width, layer_names
from .safetensors_io import Tensors, safetensors_files

#: The tensor name endings that mark a quantized layer, by format (the layer is the name before the ending).
CT_PARTS = ("weight_packed", "weight_scale", "weight_zero_point", "weight_g_idx", "weight_shape")
MODELOPT_PARTS = ("weight", "weight_scale", "weight_scale_2", "input_scale")
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


@dataclass
class LinearCheckpoint:
    """One quantized linear layer: its spec and the tensors ``QuantLinear`` takes (``qweight`` [K/P, N] or
    [K, N/P], ``scales`` [G, N], packed ``zeros``, ``g_idx``, ``global_scale``), the checkpoint tensors it was
    made of (``consumed``, every one of them, the ignored activation scales included) and notes."""

    name: str
    fmt: str  # "awq" | "gptq" | "compressed-tensors" | "modelopt"
    spec: Spec
    qweight: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None = None
    g_idx: np.ndarray | None = None
    global_scale: np.ndarray | None = None
    consumed: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def in_features(self) -> int:
        from ..layout.layout import Layout

        return Layout.of(self.spec).kn_of(tuple(self.qweight.shape))[0]

    @property
    def out_features(self) -> int:
        return int(self.scales.shape[1])


def _json(p: Path) -> dict:
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: cannot read it as JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a JSON object, got {type(data).__name__}")
    return data


def checkpoint_quant_config(folder: Path) -> dict:
    """The quantization config of a model folder: config.json's ``quantization_config`` for compressed-tensors and
    ModelOpt (or ModelOpt's own hf_quant_config.json), else what ``read_config`` finds (AWQ / GPTQ files)."""
    cfg = folder / "config.json"
    qc = _json(cfg).get("quantization_config") if cfg.exists() else None
    if isinstance(qc, dict) and str(qc.get("quant_method", "")).lower() in ("compressed-tensors", "modelopt"):
        return {**qc, "config_file": f"{cfg} (quantization_config)"}
    hf_quant = folder / "hf_quant_config.json"
    if hf_quant.exists():  # ModelOpt's export: {"producer": ..., "quantization": {"quant_algo": ...}}
        q = _json(hf_quant).get("quantization")
        if isinstance(q, dict):
            return {**q, "quant_method": "modelopt", "config_file": str(hf_quant)}
    return read_config(folder)


def _first_layer(names: list[str], parts: tuple[str, ...]) -> str:
    for n in sorted(names):
        for p in parts:
            if n.endswith("." + p):
                return n[: -len(p) - 1]
    return "(none found)"


# ------------------------------------------------------------------------------------------ AWQ / GPTQ


def _awq_gptq(qc: Mapping[str, Any], tensors: Mapping[str, Any], folder: Path | None, target: str) -> list:
    q = parse_config(qc)
    names = layer_names(tensors)
    layers = [build_layer(q, cast(Tensors, tensors), n, target) for n in names]
    if isinstance(tensors, Tensors) and folder is not None:
        check_code_width(q, tensors, layers, folder)
    out = []
    for lay in layers:
        if lay.product_scales is not None:
            raise ValueError(
                f"layer {lay.name}: its {lay.product_scales.dtype} scales are not exact in {target} ({q.method}): "
                f"load the model in the scales' dtype (torch_dtype), or dequantize it with dqgen dequant"
            )
        consumed = tuple(
            f"{lay.name}.{p}" for p in ("qweight", "qzeros", "scales", "g_idx") if f"{lay.name}.{p}" in tensors
        )
        # one spec for every layer of a kind (infer names the layer in its description): one solve, one build
        spec = lay.spec.model_copy(update={"description": f"{q.method.upper()} checkpoint layer"})
        out.append(
            LinearCheckpoint(
                lay.name,
                q.method,
                spec,
                np.asarray(lay.qweight),
                lay.scales,
                lay.zeros,
                lay.g_idx,
                consumed=consumed,
                notes=lay.notes,
            )
        )
    return out


# ------------------------------------------------------------------------------------------ compressed-tensors


def _ct_scheme(qc: Mapping[str, Any], name: str) -> dict:
    """The ``weights`` arguments of the config group whose targets match layer ``name``."""
    where = qc.get("config_file", "config")
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ValueError(f"layer {name}: {where} [config_groups] is missing; expected the compressed-tensors schemes")
    short = name.rsplit(".", 1)[-1]
    for gname, g in groups.items():
        targets = g.get("targets", []) if isinstance(g, dict) else []
        for t in targets if isinstance(targets, list) else []:
            t = str(t)
            hit = t == "Linear" or (t.startswith("re:") and re.match(t[3:], name) is not None) or t in (name, short)
            if hit:
                w = g.get("weights")
                if not isinstance(w, dict):
                    raise ValueError(f"layer {name}: {where} [config_groups.{gname}.weights] is not a scheme")
                return w
    raise ValueError(f"layer {name}: no config group of {where} targets it")


def _compressed_tensors(qc: Mapping[str, Any], tensors: Mapping[str, Any], target: str) -> list:
    where = qc.get("config_file", "config")
    fmt = str(qc.get("format", ""))
    names = sorted(n[: -len(".weight_packed")] for n in tensors if n.endswith(".weight_packed"))
    if fmt != "pack-quantized" or not names:
        first = names[0] if names else _first_layer(list(tensors), CT_PARTS)
        raise ValueError(
            f"layer {first}: compressed-tensors format {fmt!r} is not supported (dqgen loads 'pack-quantized' "
            "int4 / int8 weight-only layers)"
        )
    out = []
    for name in names:
        w = _ct_scheme(qc, name)
        bits, wtype, strategy = w.get("num_bits"), w.get("type", "int"), w.get("strategy")
        if wtype != "int" or bits not in (4, 8) or strategy not in ("group", "channel"):
            raise ValueError(
                f"layer {name}: compressed-tensors scheme {wtype} {bits}-bit {strategy} is not supported "
                "(dqgen loads int 4 / 8-bit, group or channel strategy)"
            )
        group = int(w.get("group_size") or -1) if strategy == "group" else -1
        sym = bool(w.get("symmetric", True))
        packed = np.asarray(tensors[f"{name}.weight_packed"])
        if packed.ndim != 2 or packed.dtype not in (np.dtype(np.int32), np.dtype(np.uint32)):
            raise ValueError(
                f"layer {name}, weight_packed: expected 2-D int32 [N, K/{32 // bits}], got "
                f"{list(packed.shape)} {packed.dtype}"
            )
        N, K = packed.shape[0], packed.shape[1] * (32 // bits)
        if f"{name}.weight_shape" in tensors:
            shape = [int(v) for v in np.asarray(tensors[f"{name}.weight_shape"]).reshape(-1)]
            if shape != [N, K]:
                raise ValueError(
                    f"layer {name}, weight_shape: {shape}, but weight_packed {list(packed.shape)} holds [N, K] = "
                    f"[{N}, {K}] ({bits}-bit): a K that does not fill the last word is not supported"
                )
        # GPTQ's layout is this one transposed: qweight [K/P, N], scales [G, N], qzeros [G, N/P] packed along N
        # (compressed-tensors packs its zero points along dim 0, N, the same way), g_idx [K]
        view: dict[str, np.ndarray] = {f"{name}.qweight": np.ascontiguousarray(packed.T)}
        scale = tensors.get(f"{name}.weight_scale")
        if scale is not None:
            view[f"{name}.scales"] = np.ascontiguousarray(np.asarray(scale).T)
        for part, as_part in (("weight_zero_point", "qzeros"), ("weight_g_idx", "g_idx")):
            if f"{name}.{part}" in tensors:
                a = np.asarray(tensors[f"{name}.{part}"])
                view[f"{name}.{as_part}"] = np.ascontiguousarray(a.T) if as_part == "qzeros" else a
        actorder = w.get("actorder")
        q = QConfig("gptq", bits, group, sym, bool(actorder), "gptq_v2", str(where))
        try:
            lay = build_layer(q, cast(Tensors, view), name, target)
        except ValueError as e:
            # the inference names GPTQ's tensors: say which compressed-tensors tensor each one is
            msg = str(e)
            for part, as_part in (
                ("weight_packed", "qweight"),
                ("weight_scale", "scales"),
                ("weight_zero_point", "qzeros"),
                ("weight_g_idx", "g_idx"),
            ):
                msg = msg.replace(f", {as_part}:", f", {part} (transposed):")
            raise ValueError(f"{msg} [compressed-tensors]") from None
        if lay.product_scales is not None:
            raise ValueError(
                f"layer {name}: its {lay.product_scales.dtype} weight_scale is not exact in {target} "
                "(compressed-tensors): load the model in the scales' dtype (torch_dtype)"
            )
        consumed = tuple(f"{name}.{p}" for p in CT_PARTS if f"{name}.{p}" in tensors)
        consumed += tuple(f"{name}.{p}" for p in ("input_scale", "input_zero_point") if f"{name}.{p}" in tensors)
        spec = lay.spec.model_copy(
            update={"name": lay.spec.name.replace("gptq_", "ct_", 1), "description": "compressed-tensors layer"}
        )
        out.append(
            LinearCheckpoint(
                name,
                "compressed-tensors",
                spec,
                lay.qweight,
                lay.scales,
                lay.zeros,
                lay.g_idx,
                consumed=consumed,
                notes=lay.notes,
            )
        )
    return out


# ------------------------------------------------------------------------------------------ ModelOpt


def _modelopt(qc: Mapping[str, Any], tensors: Mapping[str, Any], target: str, arch: str) -> list:
    algo = str(qc.get("quant_algo", "")).upper()
    names = sorted(
        n[: -len(".weight_scale")]
        for n in tensors
        if n.endswith(".weight_scale") and f"{n[: -len('.weight_scale')]}.weight" in tensors
    )
    if algo not in ("FP8", "NVFP4") or not names:
        first = names[0] if names else _first_layer(list(tensors), ("weight_scale", "weight_scale_2"))
        raise ValueError(
            f"layer {first}: ModelOpt quant_algo {algo or None!r} is not supported (dqgen loads FP8 and NVFP4 weights)"
        )
    tdt = TARGETS[target]
    out = []
    for name in names:
        weight = np.asarray(tensors[f"{name}.weight"])
        wscale = np.asarray(tensors[f"{name}.weight_scale"])
        notes = ["weight-only: activations stay in " + target + " (input_scale ignored)"]
        if algo == "FP8":
            if weight.dtype != E4M3 or weight.ndim != 2 or weight.shape[0] % 4:
                raise ValueError(
                    f"layer {name}, weight: expected 2-D float8_e4m3fn [N, K] with N a multiple of 4 (ModelOpt "
                    f"FP8), got {list(weight.shape)} {weight.dtype}"
                )
            N, K = weight.shape
            if wscale.size not in (1, N) or not np.issubdtype(wscale.dtype, np.floating):
                raise ValueError(
                    f"layer {name}, weight_scale: expected one float per tensor or per output channel ({N}), got "
                    f"{list(wscale.shape)} {wscale.dtype} (ModelOpt FP8)"
                )
            per_col = np.broadcast_to(wscale.astype(np.float32).reshape(-1), (N,))
            scales = per_col.astype(tdt).reshape(1, N)
            if not np.array_equal(scales.astype(np.float64).reshape(-1), per_col.astype(np.float64)):
                notes.append(f"fp32 weight_scale rounded to {target} (the kernel's scales are {target})")
            # W^T [K, N] as bytes, 4 columns per little-endian int32 word: dqgen's fp8 layout packed along N
            qweight = np.ascontiguousarray(weight.view(np.uint8).T).view(np.int32)
            spec_dict: dict[str, Any] = dict(
                source={"bits": 8, "kind": "float", "format": "e4m3"},
                packing={"axis": "N", "order": "sequential"},
                scales={"group_size": -1},
            )
            out_layer = LinearCheckpoint(name, "modelopt", _spec(spec_dict, "fp8_e4m3", target, arch), qweight, scales)
        else:
            group = int(qc.get("group_size") or 16)
            if weight.dtype != np.dtype(np.uint8) or weight.ndim != 2 or weight.shape[1] % 4:
                raise ValueError(
                    f"layer {name}, weight: expected 2-D uint8 [N, K/2] (two e2m1 codes a byte, ModelOpt NVFP4), "
                    f"got {list(weight.shape)} {weight.dtype}"
                )
            N, K = weight.shape[0], weight.shape[1] * 2
            if K % group or wscale.shape != (N, K // group) or wscale.dtype not in (E4M3, np.dtype(np.uint8)):
                raise ValueError(
                    f"layer {name}, weight_scale: expected float8_e4m3fn [N, K/{group}] = [{N}, {K // group}] "
                    f"(ModelOpt NVFP4), got {list(wscale.shape)} {wscale.dtype}"
                )
            gname = f"{name}.weight_scale_2"
            g = np.asarray(tensors[gname]) if gname in tensors else None
            if g is None or g.size != 1 or g.dtype != np.dtype(np.float32):
                got = "missing" if g is None else f"{list(g.shape)} {g.dtype}"
                raise ValueError(f"layer {name}, weight_scale_2: expected one float32 (the global scale), got {got}")
            # Codes of a row are little-endian nibbles along K: [N, K/2] bytes are [N, K/8] words packed along K
            # sequentially, which transposed is dqgen's [K/8, N]
            qweight = np.ascontiguousarray(weight.view(np.int32).T)
            scales = np.ascontiguousarray(wscale.view(np.uint8).T)
            spec_dict = dict(
                source={"bits": 4, "kind": "float", "format": "e2m1"},
                packing={"axis": "K", "order": "sequential"},
                scales={"group_size": group, "dtype": "e4m3", "global_scale": True},
            )
            out_layer = LinearCheckpoint(
                name,
                "modelopt",
                _spec(spec_dict, "nvfp4", target, arch),
                qweight,
                scales,
                global_scale=g.reshape(1).astype(np.float32),
            )
        out_layer.notes = notes
        out_layer.consumed = tuple(f"{name}.{p}" for p in MODELOPT_PARTS if f"{name}.{p}" in tensors)
        out.append(out_layer)
    return out


def _spec(d: dict[str, Any], short: str, target: str, arch: str) -> Spec:
    return Spec.model_validate(
        dict(d, name=f"modelopt_{short}_{target}", description="ModelOpt layer", target=target, arch=arch)
    )


# ------------------------------------------------------------------------------------------ entry point


def read_linear_layers(
    checkpoint: Path | Mapping[str, Any],
    target: str,
    quantization_config: Mapping[str, Any] | None = None,
    arch: str = "sm_80",
) -> dict[str, LinearCheckpoint]:
    """Every quantized linear layer of ``checkpoint`` (a model folder, or a mapping of tensor names to numpy
    arrays with ``quantization_config`` given), by its module name, with the specs in ``target`` ('fp16' or
    'bf16'). ``arch`` is the spec's architecture for the float formats (fp8 converts in hardware from sm_90).
    Raises ValueError naming the layer (and the format) for anything the loader cannot run."""
    if target not in TARGETS:
        raise ValueError(f"[target] got {target!r}; expected 'fp16' or 'bf16'")
    if isinstance(checkpoint, Mapping):
        if quantization_config is None:
            raise ValueError(
                "quantization_config: a checkpoint given as tensors needs its config (the quantization_config of "
                "config.json) to say how it was quantized"
            )
        return _read(dict(quantization_config), checkpoint, None, target, arch)
    folder = Path(checkpoint)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder (expected a model folder with config.json and safetensors)")
    qc = dict(quantization_config) if quantization_config is not None else checkpoint_quant_config(folder)
    with Tensors(safetensors_files(folder)) as tensors:
        layers = _read(qc, tensors, folder, target, arch)
        # the arrays are views of the memory-mapped files, which close here
        for lay in layers.values():
            lay.qweight, lay.scales = np.array(lay.qweight), np.array(lay.scales)
            lay.zeros = None if lay.zeros is None else np.array(lay.zeros)
            lay.g_idx = None if lay.g_idx is None else np.array(lay.g_idx)
        return layers


def _read(
    qc: dict, tensors: Mapping[str, Any], folder: Path | None, target: str, arch: str
) -> dict[str, LinearCheckpoint]:
    method = str(qc.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        layers = _compressed_tensors(qc, tensors, target)
    elif method == "modelopt":
        layers = _modelopt(qc, tensors, target, arch)
    else:
        try:
            parse_config(qc)
        except ValueError as e:
            first = _first_layer(list(tensors), ("qweight", "weight_packed", "weight_scale", "SCB", "absmax"))
            raise ValueError(f"layer {first} ({method or 'no quant_method'}): {e}") from None
        if not layer_names(tensors):
            raise ValueError(f"{folder or 'checkpoint'}: no quantized layers (no tensor named <prefix>.qweight)")
        layers = _awq_gptq(qc, tensors, folder, target)
    return {lay.name: lay for lay in layers}
