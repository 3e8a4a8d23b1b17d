"""``save_quantized``: a model whose Linears are QuantLinears, written as an AWQ (gemm) or GPTQ checkpoint folder
with the tensor names, layouts and config that AutoAWQ / AutoGPTQ / GPTQModel / transformers / vLLM read (issue 26),
and that dqgen's own checkpoint reading (dqgen.io.infer, dqgen.from_pretrained) infers back to the same weights.

Layouts (K = in_features, N = out_features, G groups, P = 32 / bits):

- ``awq``: ``<name>.qweight`` int32 [K, N/8] and ``<name>.qzeros`` int32 [G, N/8], 4-bit codes packed along N in
  AWQ's order [0, 2, 4, 6, 1, 3, 5, 7], ``<name>.scales`` [G, N]; value (q - z) * s. config: ``quant_method: awq``,
  ``bits: 4``, ``group_size``, ``zero_point: true``, ``version: gemm``.
- ``gptq``: ``<name>.qweight`` int32 [K/P, N] (3-bit: [3K/32, N]) packed along K, ``<name>.qzeros`` int32
  [G, N/P] packed along N (3-bit: 3-word blocks), ``<name>.scales`` [G, N], ``<name>.g_idx`` int32 [K]; config
  ``quant_method: gptq``, ``bits``, ``group_size``, ``desc_act`` (act-order layers), ``sym`` (codes stored
  q + 2^(bits-1), no zero points of their own), ``checkpoint_format``: ``gptq`` (v1: zeros stored z - 1), or
  ``gptq_v2`` where some zero point is 0 (which v1 cannot store).

A layer is written as is where its spec has the format's layout, else its codes and zero points are moved into it
(exactly, in integers). Layers whose codes the format cannot mean (signed or float codes, additive zeros, another
width) are refused in one line naming the layer, before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..core.shards import DEFAULT_SHARD_BYTES, INDEX_NAME, index_text, natural_key, parse_size, plan_shards
from ..core.shards import shard_names as _shard_names
from ..core.spec import SourceKind, Spec
from ..layout.layout import Layout
from ..layout.packing import pack, pack_zeros, unpack, unpack_zeros, zeros_from_stored, zeros_to_stored
from .linear import QuantLinear

__all__ = ["save_quantized"]

Format = Literal["awq", "gptq"]


def _fmt_spec(fmt: Format, bits: int, target: str, group: int, mode: str, act: bool) -> Spec:
    """The spec of the format's layout for one layer (what dqgen.io.infer infers back)."""
    if fmt == "awq":
        return Spec.model_validate(
            dict(
                name="awq_out",
                source={"bits": 4, "kind": "unsigned"},
                target=target,
                packing={"axis": "N", "order": "awq"},
                scales={"group_size": group},
                zeros={"mode": "integer"},
            )
        )
    source: dict[str, Any] = {"bits": bits, "kind": "unsigned"}
    if mode == "none":
        source = {"bits": bits, "kind": "biased", "bias": 1 << (bits - 1)}
    return Spec.model_validate(
        dict(
            name="gptq_out",
            source=source,
            target=target,
            packing={"axis": "K", "order": "sequential"},
            scales={"group_size": group},
            zeros={"mode": mode},
            act_order=act,
        )
    )


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().cpu().numpy()


def _codes_and_zeros(name: str, layer: QuantLinear, fmt: Format) -> tuple[np.ndarray, np.ndarray | None]:
    """The layer's stored codes W[K, N] as unsigned fields and its true integer zero points [G, N] (None:
    symmetric, value q - 2^(bits-1)); ValueError naming the layer when the format cannot mean its codes."""
    sp = layer.spec
    bits, kind = sp.source.bits, sp.source.kind
    why = None
    if kind is SourceKind.unsigned and not sp.zeros.packed:
        why = f"unsigned codes with {sp.zeros.mode} zeros (the formats store integer zero points)"
    elif kind is SourceKind.biased and (sp.source.offset != 1 << (bits - 1) or sp.zeros.mode != "none"):
        why = f"biased codes (value q - {sp.source.offset}) with zeros {sp.zeros.mode}"
    elif kind not in (SourceKind.unsigned, SourceKind.biased):
        why = f"{kind.value} codes"
    elif fmt == "awq" and bits != 4:
        why = f"{bits}-bit codes (AWQ's gemm layout holds 4-bit codes)"
    elif fmt == "gptq" and bits not in (2, 3, 4, 8):
        why = f"{bits}-bit codes (GPTQ packs 2, 3, 4 or 8 bits)"
    elif layer.spec.scales.block or layer.global_scale is not None:
        why = "block scales"
    if why is not None:
        raise ValueError(f"{name}: spec {sp.name} has {why}: the {fmt.upper()} format cannot hold it")
    codes = unpack(_np(layer.qweight), sp)
    if kind is SourceKind.biased:
        return codes, None
    assert layer.zeros is not None
    return codes, zeros_from_stored(unpack_zeros(_np(layer.zeros), sp), sp)


def _pack_gptq_zeros(stored: np.ndarray, sp: Spec) -> np.ndarray:
    """qzeros [G, N * bits / 32]: stored zero fields packed along N sequentially (3-bit: 3-word blocks, as the
    weights along K: packed as the transpose's K blocks)."""
    lay = Layout.of(sp)
    if sp.source.bits != 3:
        return lay.pack_fields(stored, tuple(range(32 // sp.source.bits)), "N")
    return np.ascontiguousarray(lay.pack_fields(np.ascontiguousarray(stored.T), tuple(range(32)), "K").T)


def _layer_tensors(
    name: str, layer: QuantLinear, fmt: Format, v2: bool, group: int, desc_act: bool
) -> dict[str, torch.Tensor]:
    sp = layer.spec
    bits = sp.source.bits
    K, N = layer.in_features, layer.out_features
    codes, z = _codes_and_zeros(name, layer, fmt)
    G = int(layer.scales.shape[0])
    out: dict[str, torch.Tensor] = {}
    if fmt == "awq":
        osp = _fmt_spec("awq", 4, sp.target.value, group, "integer", False)
        if z is None:  # symmetric: the zero point 2^(bits-1) of every group
            z = np.full((G, N), 1 << (bits - 1), dtype=np.int64)  # biased codes q are AWQ's q with it
        out["qweight"] = torch.from_numpy(pack(codes, osp))
        out["qzeros"] = torch.from_numpy(pack_zeros(zeros_to_stored(z, osp), osp))
    else:
        mode = "none" if z is None else ("gptq_v2" if v2 else "gptq_v1")
        osp = _fmt_spec("gptq", bits, sp.target.value, group, mode, sp.act_order)
        out["qweight"] = torch.from_numpy(pack(codes, osp))
        if z is None:  # the symmetric zero as the format stores it (v1: z - 1)
            stored = np.full((G, N), (1 << (bits - 1)) - (0 if v2 else 1), dtype=np.uint8)
        else:  # range-checked: a v1 zero point of 2^bits has no v2 field, nor 0 a v1 one
            stored = zeros_to_stored(z, osp)
        out["qzeros"] = torch.from_numpy(_pack_gptq_zeros(stored, osp))
        if layer.g_idx is not None:
            out["g_idx"] = layer.g_idx.detach().cpu().to(torch.int32)
        else:
            rows = torch.arange(K, dtype=torch.int32)
            out["g_idx"] = rows // group if group > 0 else torch.zeros(K, dtype=torch.int32)
    out["scales"] = layer.scales.detach().contiguous().cpu()
    if layer.bias is not None:
        out["bias"] = layer.bias.detach().contiguous().cpu()
    return {f"{name}.{k}": v.contiguous() for k, v in out.items()}


def save_quantized(
    model: torch.nn.Module,
    folder: str | os.PathLike[str],
    format: Format = "awq",
    *,
    max_shard_size: int | str = DEFAULT_SHARD_BYTES,
    config: dict[str, Any] | None = None,
) -> Path:
    """Write ``model`` (its QuantLinears, e.g. from ``quantize_model``, and every other parameter and persistent
    buffer of its state_dict) into ``folder`` as an ``"awq"`` or ``"gptq"`` checkpoint (module docstring): shards of
    at most ``max_shard_size`` (``model.safetensors``, or ``model-0000i-of-0000N.safetensors`` with
    ``model.safetensors.index.json``), ``config.json`` (``model.config`` where the model has a transformers config,
    else ``config``, else empty) with the format's ``quantization_config``, and AutoAWQ's ``quant_config.json`` /
    AutoGPTQ's ``quantize_config.json`` holding the same. ``folder`` must be new or empty; it is written under a
    temporary name beside it and renamed when complete. Returns the folder."""
    if format not in ("awq", "gptq"):
        raise ValueError(f"format: expected 'awq' or 'gptq', got {format!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    out = Path(folder)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"folder {out}: exists and is not an empty folder")
    max_bytes = parse_size(max_shard_size, "max_shard_size")
    layers = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    if not layers:
        raise ValueError("model: holds no QuantLinear (quantize it first: dqgen.nn.quantize_model)")
    group = _one_group_size(layers, format)
    if format == "awq" and any(m.spec.act_order for m in layers.values()):
        n = next(n for n, m in layers.items() if m.spec.act_order)
        raise ValueError(f"{n}: act-order (g_idx) layers have no AWQ layout; save it as format='gptq'")
    bits = {m.spec.source.bits for m in layers.values()}
    if len(bits) > 1:
        raise ValueError(f"model: layers of {sorted(bits)} bits; one {format.upper()} config holds one width")
    (width,) = bits
    desc_act = any(m.spec.act_order for m in layers.values())
    # v1 (the tools' default) unless a zero point of 0 needs v2
    v2 = False
    tensors: dict[str, torch.Tensor] = {}
    if format == "gptq":
        for n, m in layers.items():
            _, z = _codes_and_zeros(n, m, "gptq")
            v2 = v2 or (z is not None and bool((z == 0).any()))
    for n, m in layers.items():
        try:
            tensors |= _layer_tensors(n, m, format, v2, group, desc_act)
        except ValueError as e:
            raise ValueError(str(e) if str(e).startswith(f"{n}: ") else f"{n}: {e}") from None
    seen: dict[tuple[int, int], str] = {}
    for key, t in model.state_dict().items():
        owner = key.rsplit(".", 1)[0]
        if owner in layers:
            continue
        t = t.detach()
        ident = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else (0, -1)
        if ident in seen and ident != (0, -1):  # a tied weight (lm_head = embed_tokens): written once
            continue
        seen[ident] = key
        tensors[key] = t.contiguous().cpu()
    qc = _quant_config(format, width, group, desc_act, v2, model, layers)
    cfg = _config(model, config)
    cfg["quantization_config"] = qc
    _write(out, tensors, max_bytes, cfg, qc, format)
    return out


def _one_group_size(layers: dict[str, QuantLinear], fmt: Format) -> int:
    """The config's group size: the one every layer of several groups has (-1 when none has several); a layer of
    one group fits it when its K is that size (a layer cannot tell one group of K rows from per-channel scales)."""
    sizes = {n: m.in_features // int(m.scales.shape[0]) for n, m in layers.items() if int(m.scales.shape[0]) > 1}
    group = next(iter(sizes.values()), -1)
    for n, m in layers.items():
        g = sizes.get(n)
        if (g is not None and g != group) or (g is None and group not in (-1, m.in_features)):
            first = next(iter(sizes))
            raise ValueError(
                f"{n}: group_size {g if g is not None else m.in_features}, but {first} has {group}: one "
                f"{fmt.upper()} config holds one group size"
            )
    return group


def _quant_config(
    fmt: Format, bits: int, group: int, desc_act: bool, v2: bool, model: torch.nn.Module, layers: dict
) -> dict[str, Any]:
    dense = sorted(n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear))
    if fmt == "awq":
        qc: dict[str, Any] = {
            "quant_method": "awq",
            "bits": 4,
            "group_size": group,
            "zero_point": True,
            "version": "gemm",
        }
        if dense:
            qc["modules_to_not_convert"] = dense
        return qc
    sym = all(m.spec.zeros.mode == "none" for m in layers.values())
    return {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group,
        "desc_act": desc_act,
        "sym": sym,
        "checkpoint_format": "gptq_v2" if v2 else "gptq",
        "static_groups": False,
        "true_sequential": True,
    }


def _config(model: torch.nn.Module, config: dict[str, Any] | None) -> dict[str, Any]:
    if config is not None:
        if not isinstance(config, dict):
            raise TypeError(f"config: expected a dict (config.json's fields), got {type(config).__name__}")
        return dict(config)
    mc = getattr(model, "config", None)
    if mc is not None and hasattr(mc, "to_dict"):
        return dict(mc.to_dict())
    return {}


def _write(out: Path, tensors: dict[str, torch.Tensor], max_bytes: int, cfg: dict, qc: dict, fmt: Format) -> None:
    from safetensors.torch import save_file

    names = sorted(tensors, key=natural_key)
    items = [(n, int(tensors[n].numel() * tensors[n].element_size())) for n in names]
    shards = plan_shards(items, max_bytes)
    files = _shard_names(len(shards))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    try:
        for shard, fname in zip(shards, files, strict=True):
            save_file({n: tensors[n] for n, _ in shard}, str(tmp / fname), metadata={"format": "pt"})
        if len(shards) > 1:
            (tmp / INDEX_NAME).write_text(index_text(shards, files))
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n")
        tool = "quant_config.json" if fmt == "awq" else "quantize_config.json"
        (tmp / tool).write_text(json.dumps(qc, indent=2) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
