"""Reading AWQ / GPTQ safetensors checkpoints and dequantizing them (``dqgen.io.checkpoint``, ``dqgen dequant``).

The files are written here from integer codes, zero points and scales this module generates, packed
with ``dqgen.layout.packing`` and saved with the ``safetensors`` package, in the layouts of:

- AWQ gemm: casper-hansen/AutoAWQ ``awq/modules/linear/gemm.py`` and ``awq/utils/packing_utils.py``
  (qweight int32 [K, N/8] and qzeros [K/G, N/8] packed along N in the order [0,2,4,6,1,3,5,7],
  scales fp16 [K/G, N], value (q - z) * s);
- GPTQ: AutoGPTQ/AutoGPTQ ``auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py`` (qweight [K/P, N] packed
  along K, qzeros [G, N/P] along N, both sequential; scales [G, N]; g_idx [K]; v1 stores z - 1) and
  GPTQModel's ``checkpoint_format`` docs (``gptq`` = v1, ``gptq_v2`` stores z).

Expected values never come from dqgen: each layer is recomputed here from the generated integers as
an exact float64 product ``(q - z) * s`` rounded once by numpy's float16 cast, and compared layer by
layer with what ``dequantize_file`` wrote (transposed: the output is [N, K], nn.Linear's layout).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from dqgen.cli import app
from dqgen.core.spec import Spec
from dqgen.io.checkpoint import (
    dequantize_file,
    dequantize_layer,
    infer_spec,
    read_config,
    read_layers,
    read_safetensors,
    write_safetensors,
)
from dqgen.layout.packing import pack, pack_zeros, zeros_to_stored

from .conftest import ROOT

BF16 = np.dtype(ml_dtypes.bfloat16)


# ----------------------------------------------------------------------------------------------
# Writing test checkpoints.
# ----------------------------------------------------------------------------------------------


def _pack_spec(kind: str, bits: int, mode: str = "gptq_v2") -> Spec:
    """A spec used only to pack integers into a layout (AWQ: along N in awq order; GPTQ: along K)."""
    if kind == "awq":
        return Spec(
            name="pack_awq",
            source={"bits": 4, "kind": "unsigned"},
            target="fp16",
            packing={"axis": "N", "order": "awq"},
            scales={"group_size": -1},
            zeros={"mode": "integer"},
        )
    return Spec(
        name="pack_gptq",
        source={"bits": bits, "kind": "unsigned"},
        target="fp16",
        packing={"axis": "K", "order": "sequential"},
        scales={"group_size": -1},
        zeros={"mode": mode},
    )


@dataclass
class Layer:
    """The integers and scales a test layer was made from, and the exact expected W[K, N]."""

    codes: np.ndarray  # [K, N] stored codes
    z: np.ndarray | None  # [G, N] true zero points (None: symmetric, value q - 2^(bits-1))
    scales: np.ndarray  # [G, N]
    rows: np.ndarray  # [K] group of each row
    bits: int

    def expected(self, out: np.dtype | None = None) -> np.ndarray:
        """(q - z) * s rounded once: the product of |q - z| <= 256 and a <= 16-bit scale is exact in float64
        and in float32; numpy rounds float64 -> fp16 once, ml_dtypes float32 -> bf16 once."""
        out = np.dtype(np.float16) if out is None else out
        zero = (1 << (self.bits - 1)) if self.z is None else self.z[self.rows].astype(np.int64)
        exact = (self.codes.astype(np.int64) - zero).astype(np.float64) * self.scales.astype(np.float64)[self.rows]
        return exact.astype(np.float32).astype(out) if out == BF16 else exact.astype(out)


def _scales(rng: np.random.Generator, shape: tuple[int, ...], dtype=np.float16) -> np.ndarray:
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * 2.0 ** rng.uniform(-10, -2, size=shape)).astype(np.float32).astype(dtype)


def make_layer(
    rng,
    tensors: dict,
    prefix: str,
    kind: str,
    K: int,
    N: int,
    G: int,
    *,
    bits: int = 4,
    sym: bool = False,
    fmt: str = "gptq",
    g_idx: str | None = None,
    qzeros_when_sym: bool = True,
    z_low: int | None = None,
    scale_dtype=np.float16,
) -> Layer:
    """Add one layer's tensors to ``tensors``; g_idx: None, 'trivial' or 'shuffled'."""
    groups = K // G if G > 0 else 1
    gsize = G if G > 0 else K
    codes = rng.integers(0, 1 << bits, size=(K, N))
    scales = _scales(rng, (groups, N), scale_dtype)
    rows = np.arange(K) // gsize
    if g_idx == "shuffled":
        rows = rng.permutation(rows)
    z = None
    if kind == "awq":
        z = rng.integers(0, 16, size=(groups, N))
        sp = _pack_spec("awq", 4)
        tensors[f"{prefix}.qweight"] = pack(codes, sp)
        tensors[f"{prefix}.qzeros"] = pack_zeros(z, sp)
    else:
        mode = "gptq_v1" if fmt == "gptq" else "gptq_v2"
        sp = _pack_spec("gptq", bits, mode)
        tensors[f"{prefix}.qweight"] = pack(codes, sp)
        if sym:
            if qzeros_when_sym:  # what GPTQ exporters write for sym: the symmetric zero, stored per format
                zsym = np.full((groups, N), 1 << (bits - 1))
                tensors[f"{prefix}.qzeros"] = pack_zeros(zeros_to_stored(zsym, sp), sp)
        else:
            lo = z_low if z_low is not None else (1 if mode == "gptq_v1" else 0)
            z = rng.integers(lo, 1 << bits, size=(groups, N))
            tensors[f"{prefix}.qzeros"] = pack_zeros(zeros_to_stored(z, sp), sp)
        if g_idx is not None:
            tensors[f"{prefix}.g_idx"] = rows.astype(np.int32)
    tensors[f"{prefix}.scales"] = scales
    return Layer(codes, z, scales, rows, bits)


def write_checkpoint(folder: Path, tensors: dict, config: dict, config_name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "model.safetensors"
    save_file(tensors, str(f), metadata={"format": "pt"})
    if config_name == "config.json":
        config = {"architectures": ["LlamaForCausalLM"], "quantization_config": config}
    (folder / config_name).write_text(json.dumps(config))
    return f


AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"}


def gptq_config(bits=4, group=32, sym=False, fmt="gptq", desc_act=False) -> dict:
    c = {"bits": bits, "group_size": group, "desc_act": desc_act, "sym": sym, "damp_percent": 0.01}
    if fmt is not None:
        c["checkpoint_format"] = fmt
    return c


def passthrough(rng) -> dict:
    return {
        "model.embed_tokens.weight": rng.standard_normal((40, 64)).astype(np.float16),
        "model.norm.weight": rng.standard_normal(64).astype(np.float32).astype(BF16),
        "model.layers.0.self_attn.q_proj.bias": rng.standard_normal(64).astype(np.float16),
        "model.rotary.inv_freq": rng.standard_normal(8).astype(np.float32),
    }


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """name -> (file, {layer: Layer}, passthrough tensors)."""
    root = tmp_path_factory.mktemp("ckpt")
    rng = np.random.default_rng(1234)
    out = {}

    def build(name, config, config_name, layers):
        tensors, made = {}, {}
        extra = passthrough(rng)
        tensors.update(extra)
        for prefix, kw in layers.items():
            made[prefix] = make_layer(rng, tensors, prefix, **kw)
        # the bias holds one value per output feature of its layer (dequant refuses any other length)
        bias = "model.layers.0.self_attn.q_proj.bias"
        extra[bias] = tensors[bias] = extra[bias][: layers[bias.removesuffix(".bias")]["N"]].copy()
        out[name] = (write_checkpoint(root / name, tensors, config, config_name), made, extra)

    build(
        "awq",
        AWQ_CONFIG,
        "config.json",
        {
            "model.layers.0.self_attn.q_proj": dict(kind="awq", K=128, N=64, G=32),
            "model.layers.0.mlp.up_proj": dict(kind="awq", K=64, N=96, G=32),
            "model.layers.0.mlp.down_proj": dict(kind="awq", K=96, N=64, G=32),
        },
    )
    build(
        "gptq_sym",
        gptq_config(sym=True),
        "quantize_config.json",
        {
            "model.layers.0.self_attn.q_proj": dict(kind="gptq", K=128, N=48, G=32, sym=True),
            "model.layers.0.mlp.up_proj": dict(kind="gptq", K=64, N=40, G=32, sym=True, g_idx="trivial"),
        },
    )
    for fmt in ("gptq", "gptq_v2"):
        build(
            f"gptq_asym_{fmt}",
            gptq_config(fmt=fmt),
            "quantize_config.json",
            {
                "model.layers.0.self_attn.q_proj": dict(kind="gptq", K=128, N=48, G=32, fmt=fmt),
                "model.layers.0.mlp.up_proj": dict(kind="gptq", K=96, N=64, G=32, fmt=fmt),
            },
        )
    build(
        "gptq_act",
        gptq_config(fmt="gptq_v2", desc_act=True),
        "config.json",
        {
            "model.layers.0.self_attn.q_proj": dict(kind="gptq", K=128, N=48, G=32, fmt="gptq_v2", g_idx="shuffled"),
            "model.layers.0.mlp.up_proj": dict(kind="gptq", K=64, N=40, G=32, fmt="gptq_v2", g_idx="trivial"),
        },
    )
    return out


def check_output(out_file: Path, made: dict, extra: dict, dtype: np.dtype | None = None) -> None:
    """The written file: each layer's [N, K] weight equals the independent computation, passthrough
    tensors are byte-identical, the quantized tensors are gone."""
    dtype = np.dtype(np.float16) if dtype is None else dtype
    got = read_safetensors(out_file)
    for prefix, layer in made.items():
        w = got.pop(f"{prefix}.weight")
        exp = layer.expected(dtype)
        assert w.dtype == dtype and w.shape == exp.T.shape, prefix
        np.testing.assert_array_equal(w.view(np.uint16), exp.T.view(np.uint16), err_msg=prefix)
    assert set(got) == set(extra)
    for name, a in extra.items():
        assert got[name].dtype == a.dtype and got[name].tobytes() == a.tobytes(), name


# ----------------------------------------------------------------------------------------------
# Specs and values.
# ----------------------------------------------------------------------------------------------


def test_awq_specs_and_values(ckpts, tmp_path):
    f, made, extra = ckpts["awq"]
    layers = read_layers(f)
    assert [lay.name for lay in layers] == sorted(made)
    for lay in layers:
        s = lay.spec
        assert (s.source.short, s.packing.axis, s.packing.order, s.zeros.mode) == ("u4", "N", "awq", "integer")
        assert (s.scales.group_size, s.target.value, s.act_order, s.arch) == (32, "fp16", False, "sm_80")
        assert lay.g_idx is None and lay.zeros is not None
        m = made[lay.name]
        assert m.codes.shape == (lay.K, lay.N)
        np.testing.assert_array_equal(dequantize_layer(lay, device="cpu").view(np.uint16), m.expected().view(np.uint16))
    out = tmp_path / "dense.safetensors"
    lines = dequantize_file(f, out, device="cpu", progress=False)
    assert len(lines) == 3 and all("u4 awq along N" in ln for ln in lines)
    check_output(out, made, extra)
    # The safetensors package reads our writer's file, metadata included.
    ref = load_file(str(out))
    for prefix, layer in made.items():
        np.testing.assert_array_equal(ref[f"{prefix}.weight"], layer.expected().T)
    assert struct.unpack("<Q", out.read_bytes()[:8])[0] % 8 == 0
    header = json.loads(out.read_bytes()[8 : 8 + struct.unpack("<Q", out.read_bytes()[:8])[0]])
    assert header["__metadata__"]["format"] == "pt"


@pytest.mark.parametrize("bits,group", [(4, 32), (8, 32), (2, 32), (4, -1)])
def test_gptq_sym_ignores_qzeros(tmp_path, bits, group):
    rng = np.random.default_rng(bits)
    tensors: dict = {}
    made = {
        "a.q": make_layer(rng, tensors, "a.q", "gptq", K=128, N=32, G=group, bits=bits, sym=True),
        "a.k": make_layer(rng, tensors, "a.k", "gptq", K=64, N=16, G=group, bits=bits, sym=True, qzeros_when_sym=False),
    }
    f = write_checkpoint(tmp_path / "m", tensors, gptq_config(bits=bits, group=group, sym=True), "quantize_config.json")
    layers = {lay.name: lay for lay in read_layers(f)}
    for lay in layers.values():
        s = lay.spec
        assert (s.source.short, s.packing.axis, s.packing.order, s.zeros.mode) == (
            f"u{bits}b{1 << (bits - 1)}",
            "K",
            "sequential",
            "none",
        )
        assert s.scales.group_size == group and lay.zeros is None
    assert any("qzeros ignored" in n for n in layers["a.q"].notes) and not layers["a.k"].notes
    out = tmp_path / "o.safetensors"
    dequantize_file(f, out, device="cpu", progress=False)
    check_output(out, made, {})


def test_gptq_sym_file(ckpts, tmp_path):
    f, made, extra = ckpts["gptq_sym"]
    layers = {lay.name: lay for lay in read_layers(f)}
    assert all(lay.spec.source.short == "u4b8" and lay.spec.zeros.mode == "none" for lay in layers.values())
    up = layers["model.layers.0.mlp.up_proj"]
    assert not up.spec.act_order and up.g_idx is None  # trivial g_idx, desc_act false: plain groups
    out = tmp_path / "o.safetensors"
    dequantize_file(f, out, device="cpu", progress=False)
    check_output(out, made, extra)


@pytest.mark.parametrize("fmt,mode", [("gptq", "gptq_v1"), ("gptq_v2", "gptq_v2")])
def test_gptq_asym_v1_v2(ckpts, tmp_path, fmt, mode):
    f, made, extra = ckpts[f"gptq_asym_{fmt}"]
    for lay in read_layers(f):
        s = lay.spec
        assert (s.source.short, s.packing.axis, s.zeros.mode, s.act_order) == ("u4", "K", mode, False)
        np.testing.assert_array_equal(
            dequantize_layer(lay, "cpu").view(np.uint16), made[lay.name].expected().view(np.uint16)
        )
    out = tmp_path / "o.safetensors"
    dequantize_file(f, out, device="cpu", progress=False)
    check_output(out, made, extra)


def test_gptq_v1_absent_checkpoint_format_means_v1(tmp_path):
    rng = np.random.default_rng(7)
    tensors: dict = {}
    made = {"l": make_layer(rng, tensors, "l", "gptq", K=64, N=16, G=32, fmt="gptq")}
    f = write_checkpoint(tmp_path / "m", tensors, gptq_config(fmt=None), "quantize_config.json")
    (lay,) = read_layers(f)
    assert lay.spec.zeros.mode == "gptq_v1"
    np.testing.assert_array_equal(dequantize_layer(lay, "cpu"), made["l"].expected())


def test_gptq_act_order(ckpts, tmp_path):
    f, made, extra = ckpts["gptq_act"]
    layers = {lay.name: lay for lay in read_layers(f)}
    q = layers["model.layers.0.self_attn.q_proj"]
    assert q.spec.act_order and q.spec.zeros.mode == "gptq_v2" and q.g_idx is not None and q.g_idx.dtype == np.int32
    up = layers["model.layers.0.mlp.up_proj"]
    assert not up.spec.act_order and up.g_idx is None and any("trivial" in n for n in up.notes)
    out = tmp_path / "o.safetensors"
    dequantize_file(f, out, device="cpu", progress=False)
    check_output(out, made, extra)


def test_bf16_output(ckpts, tmp_path):
    """fp16 scales into bf16: one rounding of (q - z) * s; our writer's BF16 tensors read back with a raw
    header parse, our reader, and the safetensors package where it can."""
    f, made, extra = ckpts["gptq_act"]
    layers = read_layers(f, target="bf16")
    assert all(lay.target == "bf16" and lay.spec.target.value == "fp16" for lay in layers)
    out = tmp_path / "o.safetensors"
    lines = dequantize_file(f, out, target="bf16", device="cpu", progress=False)
    assert all("bf16 (q - z by an fp16 kernel, scaled and rounded once)" in ln for ln in lines)
    check_output(out, made, extra, BF16)
    raw = out.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    name = "model.layers.0.self_attn.q_proj.weight"
    assert header[name]["dtype"] == "BF16" and header[name]["shape"] == [48, 128]
    b, e = header[name]["data_offsets"]
    w = np.frombuffer(raw[8 + n + b : 8 + n + e], dtype="<u2").reshape(48, 128)
    np.testing.assert_array_equal(w, made[name.removesuffix(".weight")].expected(BF16).T.view(np.uint16))
    try:
        ref = load_file(str(out))
    except Exception:
        return
    np.testing.assert_array_equal(ref[name].view(np.uint16), w)


def test_bf16_scales(tmp_path):
    """bf16 scales: bf16 output is direct; fp16 output converts the scales exactly (in range)."""
    rng = np.random.default_rng(3)
    tensors: dict = {}
    made = {"l": make_layer(rng, tensors, "l", "gptq", K=64, N=16, G=32, fmt="gptq_v2", scale_dtype=BF16)}
    f = write_checkpoint(tmp_path / "m", tensors, gptq_config(fmt="gptq_v2"), "quantize_config.json")
    (lay,) = read_layers(f, target="bf16")
    assert lay.spec.target.value == "bf16" and not lay.notes
    np.testing.assert_array_equal(
        dequantize_layer(lay, "cpu").view(np.uint16), made["l"].expected(BF16).view(np.uint16)
    )
    (lay,) = read_layers(f, target="fp16")
    assert lay.spec.target.value == "fp16" and "exactly" in lay.notes[0]
    np.testing.assert_array_equal(dequantize_layer(lay, "cpu"), made["l"].expected())


def test_infer_spec_plain_dicts():
    rng = np.random.default_rng(5)
    tensors: dict = {}
    make_layer(rng, tensors, "x", "gptq", K=64, N=16, G=32, sym=True)
    spec, notes = infer_spec(gptq_config(sym=True), tensors, "x", "fp16")
    assert spec.source.short == "u4b8" and notes
    bare = {k.removeprefix("x."): v for k, v in tensors.items()}
    assert infer_spec(gptq_config(sym=True), bare, "x", "bf16")[0].target.value == "fp16"  # via fp16


def test_sharded_index_and_folder(ckpts, tmp_path):
    """A layer split across two shards, found through model.safetensors.index.json or the folder."""
    f, made, extra = ckpts["awq"]
    all_t = load_file(str(f))
    names = sorted(all_t)
    shard1 = {k: all_t[k] for k in names[::2]}
    shard2 = {k: all_t[k] for k in names[1::2]}
    d = tmp_path / "sharded"
    d.mkdir()
    save_file(shard1, str(d / "model-00001-of-00002.safetensors"))
    save_file(shard2, str(d / "model-00002-of-00002.safetensors"))
    wm = {k: "model-00001-of-00002.safetensors" for k in shard1} | {
        k: "model-00002-of-00002.safetensors" for k in shard2
    }
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (d / "quant_config.json").write_text(
        json.dumps({"zero_point": True, "q_group_size": 32, "w_bit": 4, "version": "GEMM"})
    )
    for src in (d, d / "model.safetensors.index.json"):
        out = tmp_path / "o.safetensors"
        dequantize_file(src, out, device="cpu", progress=False)
        check_output(out, made, extra)


def test_read_config_sources(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": AWQ_CONFIG}))
    assert read_config(tmp_path / "model.safetensors")["quant_method"] == "awq"
    (tmp_path / "quantize_config.json").write_text(json.dumps(gptq_config()))
    c = read_config(tmp_path)
    assert c["bits"] == 4 and c["config_file"].endswith("quantize_config.json")
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError, match="no quantization config"):
        read_config(tmp_path / "x" / "model.safetensors")
    (tmp_path / "x" / "config.json").write_text(json.dumps({"architectures": []}))
    with pytest.raises(ValueError, match="has no quantization_config"):
        read_config(tmp_path / "x")


def test_writer_roundtrip(tmp_path):
    a = {
        "b": np.arange(6, dtype=np.float32).astype(BF16).reshape(2, 3),
        "a": np.arange(5, dtype=np.int32),
        "e": np.zeros((0, 4), np.float16),
    }
    write_safetensors(tmp_path / "t.safetensors", a, {"format": "pt"})
    got = read_safetensors(tmp_path / "t.safetensors")
    for k in a:
        assert got[k].dtype == a[k].dtype and got[k].shape == a[k].shape and got[k].tobytes() == a[k].tobytes()
    ref = load_file(str(tmp_path / "t.safetensors"))
    np.testing.assert_array_equal(ref["a"], a["a"])


# ----------------------------------------------------------------------------------------------
# Refusals: config and tensors disagree.
# ----------------------------------------------------------------------------------------------


def _bad(tmp_path, config, config_name="quantize_config.json", edit=None, **layer):
    rng = np.random.default_rng(11)
    tensors: dict = {}
    kw = dict(kind="gptq", K=128, N=32, G=32) | layer
    make_layer(rng, tensors, "model.layers.3.mlp.down_proj", **kw)
    if edit:
        edit(tensors, "model.layers.3.mlp.down_proj")
    return write_checkpoint(tmp_path / "bad", tensors, config, config_name)


def _v1_wrapped(t, p):
    """A v1 file where some zero points are 0: GPTQ's old packer stored z - 1 = -1 as 15."""
    sp = _pack_spec("gptq", 4, "gptq_v2")
    z = np.random.default_rng(0).integers(1, 16, size=(4, 32))
    z[0, :5] = 0
    t[f"{p}.qzeros"] = pack_zeros((z - 1) % 16, sp)


def _v2_with_15(t, p):
    sp = _pack_spec("gptq", 4, "gptq_v2")
    z = np.full((4, 32), 15)
    t[f"{p}.qzeros"] = pack_zeros(zeros_to_stored(z, sp), sp)


def _pop(part):
    return lambda t, p: t.pop(f"{p}.{part}")


def _set(part, fn):
    def edit(t, p):
        t[f"{p}.{part}"] = fn(t[f"{p}.{part}"])

    return edit


def _float_zeros(t, p):
    t[f"{p}.qzeros"] = np.full(t[f"{p}.scales"].shape, 8.0, dtype=np.float16)


def _varying_sym_zeros(t, p):
    sp = _pack_spec("gptq", 4, "gptq_v2")
    t[f"{p}.qzeros"] = pack_zeros(np.random.default_rng(0).integers(0, 16, size=(4, 32)), sp)


REFUSALS = {
    # name: (config, make_layer kwargs, edit, substrings the message must contain)
    "v1_zero_point_0_wrapped": (
        gptq_config(fmt="gptq"),
        {},
        _v1_wrapped,
        ["qzeros", "5 of 128", "stored as 15", "gptq_v2"],
    ),
    "v2_file_labelled_v1": (gptq_config(fmt="gptq"), {}, _v2_with_15, ["qzeros", "stored as 15", "checkpoint_format"]),
    "g_idx_wrong_length": (
        gptq_config(desc_act=True),
        {"g_idx": "shuffled"},
        _set("g_idx", lambda g: g[:100]),
        ["g_idx", "100 entries", "K = "],
    ),
    "g_idx_out_of_range": (
        gptq_config(desc_act=True),
        {"g_idx": "shuffled"},
        _set("g_idx", lambda g: np.where(g == 1, 4, g).astype(np.int32)),
        ["g_idx", "outside [0, 4)", "32 entries"],
    ),
    "g_idx_without_desc_act": (gptq_config(desc_act=False), {"g_idx": "shuffled"}, None, ["g_idx", "desc_act"]),
    "desc_act_without_g_idx": (gptq_config(desc_act=True), {}, None, ["g_idx", "missing", "desc_act"]),
    "bits_4_but_8bit_shapes_g_idx": (
        gptq_config(bits=4, desc_act=True),
        {"bits": 8, "g_idx": "shuffled"},
        None,
        ["g_idx", "[bits]", "= 4", "fit bits=8"],
    ),
    "bits_4_but_8bit_shapes": (
        gptq_config(bits=4, sym=True),
        {"bits": 8, "sym": True, "qzeros_when_sym": False},
        None,
        ["scales", "[bits]", "group_size", "bits=8"],
    ),
    "bits_4_but_8bit_qzeros": (gptq_config(bits=4), {"bits": 8}, None, ["qzeros", "[bits]", "fit bits=8"]),
    "group_size_mismatch": (gptq_config(group=64), {}, None, ["scales", "4 rows", "[group_size]", "group_size=32"]),
    "partial_last_group": (
        gptq_config(group=48),
        {"G": 32},
        _set("scales", lambda s: s[:3]),
        ["scales", "ceil", "partial"],
    ),
    "missing_scales": (gptq_config(), {}, _pop("scales"), ["scales", "missing"]),
    "missing_qzeros_asym": (gptq_config(), {}, _pop("qzeros"), ["qzeros", "missing"]),
    "unpacked_float_zeros": (gptq_config(), {}, _float_zeros, ["qzeros", "unpacked", "same shape as scales"]),
    "sym_with_varying_qzeros": (
        gptq_config(sym=True),
        {"sym": True},
        _varying_sym_zeros,
        ["qzeros", "sym", "asymmetric"],
    ),
    "awq_file_as_gptq": (gptq_config(), {"kind": "awq"}, None, ["qweight", "AWQ"]),
    "nan_scale": (
        gptq_config(),
        {},
        _set("scales", lambda s: np.where(np.arange(s.size).reshape(s.shape) == 3, np.nan, s).astype(s.dtype)),
        ["scales", "NaN"],
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals(tmp_path, case):
    config, kw, edit, words = REFUSALS[case]
    f = _bad(tmp_path, config, edit=edit, **kw)
    with pytest.raises(ValueError) as e:
        read_layers(f)
    msg = str(e.value)
    assert msg.startswith("layer model.layers.3.mlp.down_proj, "), msg
    for w in words:
        assert w in msg, (w, msg)
    with pytest.raises(ValueError):
        dequantize_file(f, tmp_path / "o.safetensors", device="cpu", progress=False)
    assert not list(tmp_path.glob("o.safetensors*"))  # nothing written
    # The CLI: one `error:` line, no traceback, a non-zero exit.
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(tmp_path / "o.safetensors"), "--device", "cpu"])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: layer model.layers.3.mlp.down_proj"), r.output
    assert "Traceback" not in r.output


def test_v2_sym_labelled_v1_is_noted_not_wrong(tmp_path):
    """vllm#38966: a sym file whose qzeros hold 8 (v2's stored symmetric zero) labelled checkpoint_format
    'gptq'. A v1 reader would use z = 9; sym means value q - 8 whatever qzeros say, so the result is right."""
    rng = np.random.default_rng(2)
    tensors: dict = {}
    made = {"l": make_layer(rng, tensors, "l", "gptq", K=64, N=16, G=32, sym=True, fmt="gptq_v2")}
    f = write_checkpoint(tmp_path / "m", tensors, gptq_config(sym=True, fmt="gptq"), "quantize_config.json")
    (lay,) = read_layers(f)
    assert any("vllm#38966" in n for n in lay.notes)
    np.testing.assert_array_equal(dequantize_layer(lay, "cpu"), made["l"].expected())


@pytest.mark.parametrize(
    "config,words",
    [
        ({**AWQ_CONFIG, "version": "gemv"}, ["[version]", "gemm"]),
        ({**AWQ_CONFIG, "zero_point": False}, ["[zero_point]"]),
        ({"quant_method": "bitsandbytes"}, ["[quant_method]"]),
        (gptq_config(fmt="marlin"), ["[checkpoint_format]", "marlin"]),
        (gptq_config(bits=3), ["[bits]", "3"]),
    ],
)
def test_config_refusals(tmp_path, config, words):
    f = _bad(tmp_path, config, "config.json")
    with pytest.raises(ValueError) as e:
        read_layers(f)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_missing_config_and_file(tmp_path):
    rng = np.random.default_rng(0)
    tensors: dict = {}
    make_layer(rng, tensors, "l", "awq", K=64, N=16, G=32)
    save_file(tensors, str(tmp_path / "m.safetensors"))
    with pytest.raises(ValueError, match="no quantization config"):
        read_layers(tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match="no such file"):
        read_layers(tmp_path / "nope.safetensors", config=AWQ_CONFIG)
    (tmp_path / "junk.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(ValueError, match="not a safetensors file"):
        read_layers(tmp_path / "junk.safetensors", config=AWQ_CONFIG)


# ----------------------------------------------------------------------------------------------
# The CLI end to end.
# ----------------------------------------------------------------------------------------------


def test_cli_end_to_end(ckpts, tmp_path):
    f, made, extra = ckpts["gptq_act"]
    out = tmp_path / "dense.safetensors"
    r = subprocess.run(
        [sys.executable, "-m", "dqgen", "dequant", str(f), "--out", str(out), "--device", "cpu"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == f"wrote {out}"
    assert lines[0].startswith(
        "model.layers.0.mlp.up_proj: 64x40 u4 sequential along K, zeros gptq_v2, group 32 -> fp16"
    )
    assert lines[1].startswith("model.layers.0.self_attn.q_proj: 128x48 ") and "act_order" in lines[1]
    check_output(out, made, extra)


def test_cli_bad_input_subprocess(tmp_path):
    f = _bad(tmp_path, gptq_config(fmt="gptq"), edit=_v1_wrapped)
    r = subprocess.run(
        [sys.executable, "-m", "dqgen", "dequant", str(f), "--out", str(tmp_path / "o.safetensors"), "--device", "cpu"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: layer model.layers.3.mlp.down_proj, qzeros: "), (
        r.stderr
    )


def test_cli_options(ckpts, tmp_path):
    f = ckpts["awq"][0]
    r = CliRunner().invoke(
        app, ["dequant", str(f), "--out", str(tmp_path / "o.safetensors"), "--dtype", "fp32", "--device", "cpu"]
    )
    assert r.exit_code != 0 and r.output.startswith("error: [--dtype]")
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(tmp_path / "o.safetensors"), "--device", "tpu"])
    assert r.exit_code != 0 and r.output.startswith("error: [--device]")
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(f), "--device", "cpu"])
    assert r.exit_code != 0 and "overwrite" in r.output


def test_cli_default_device_without_gpu(ckpts, tmp_path, monkeypatch):
    import dqgen.run.device

    monkeypatch.setattr(dqgen.run.device, "gpu_available", lambda: False)
    r = CliRunner().invoke(app, ["dequant", str(ckpts["awq"][0]), "--out", str(tmp_path / "o.safetensors")])
    assert r.exit_code != 0 and "--device cpu" in r.output and r.output.startswith("error:")


# ----------------------------------------------------------------------------------------------
# GPU: the generated kernels give the reference's bits.
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["awq", "gptq_act", "gptq_asym_gptq", "gptq_sym"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_gpu_equals_cpu(ckpts, tmp_path, name, dtype):
    f, made, extra = ckpts[name]
    cpu, gpu = tmp_path / "cpu.safetensors", tmp_path / "gpu.safetensors"
    dequantize_file(f, cpu, target=dtype, device="cpu", progress=False)
    dequantize_file(f, gpu, target=dtype, device="cuda", progress=False)
    assert cpu.read_bytes() == gpu.read_bytes()
    check_output(gpu, made, extra, BF16 if dtype == "bf16" else np.dtype(np.float16))


# ----------------------------------------------------------------------------------------------
# Hardening (issue 11): one rounding, overflow in the written dtype, whole files only, inputs confined.
# ----------------------------------------------------------------------------------------------


def _round_once(exact: Fraction, dtype: np.dtype) -> int:
    """The bits of the fp16 / bf16 value nearest to ``exact`` (ties: even last bit), from exact rational
    arithmetic: any nearby grid point g is at most one step off, so the answer is g or a neighbour."""
    g = int(np.array([float(exact)]).astype(np.float32).astype(dtype).view(np.uint16)[0])
    sign, mag = g & 0x8000, g & 0x7FFF
    if exact < 0:
        sign = 0x8000
    finite_limit = 0x7C00 if dtype == np.float16 else 0x7F80

    def value(m: int) -> Fraction:
        return Fraction(float(np.array([sign | m], np.uint16).view(dtype)[0]))

    cands = [m for m in (mag - 1, mag, mag + 1) if 0 <= m < finite_limit]
    return sign | min(cands, key=lambda m: (abs(value(m) - exact), m & 1))


def _expected_once(layer: Layer, dtype: np.dtype) -> np.ndarray:
    zero = (1 << (layer.bits - 1)) if layer.z is None else layer.z[layer.rows].astype(np.int64)
    diff = layer.codes.astype(np.int64) - zero
    s = layer.scales.astype(np.float64)[layer.rows]  # exact widening
    memo: dict[tuple[int, float], int] = {}
    bits = np.empty(diff.shape, np.uint16)
    for idx in np.ndindex(*diff.shape):
        key = (int(diff[idx]), float(s[idx]))
        if key not in memo:
            # q == z: IEEE's (+0) x s = -0.0 for a negative scale, as every dqgen kernel gives.
            zero_sign = 0x8000 if key[0] == 0 and key[1] < 0 else 0
            memo[key] = zero_sign | _round_once(Fraction(key[0]) * Fraction(key[1]), dtype)
        bits[idx] = memo[key]
    return bits


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize(
    "scale_dtype,target,bits,exponents",
    [
        ("fp16", "bf16", 4, (-10, -2)),
        ("fp16", "bf16", 8, (-10, -2)),
        ("fp32", "bf16", 4, (-10, -2)),
        ("fp32", "fp16", 8, (-20, -2)),  # fp16 subnormal products too
        ("bf16", "fp16", 4, (-24, -14)),  # bf16 scales below fp16's normal range: not exact in fp16
    ],
)
def test_one_rounding_when_scales_are_not_exact_in_the_target(tmp_path, scale_dtype, target, bits, exponents, device):
    """Issue 11 case 2: each element is the exact (q - z) * s rounded once to the target, checked against
    rational arithmetic; rounding the scales (or an fp16 product) first would differ."""
    sdt = {"fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32), "bf16": BF16}[scale_dtype]
    tdt = np.dtype(np.float16) if target == "fp16" else BF16
    rng = np.random.default_rng([bits, len(scale_dtype), -exponents[0]])
    tensors: dict = {}
    lay = make_layer(rng, tensors, "l", "gptq", K=64, N=32, G=32, bits=bits, fmt="gptq_v2")
    sign = np.where(rng.random(lay.scales.shape) < 0.5, -1.0, 1.0)
    scales = (sign * 2.0 ** rng.uniform(*exponents, size=lay.scales.shape)).astype(np.float32).astype(sdt)
    assert not np.array_equal(scales.astype(tdt).astype(np.float64), scales.astype(np.float64))
    tensors["l.scales"] = lay.scales = scales
    f = write_checkpoint(tmp_path / "m", tensors, gptq_config(bits=bits, fmt="gptq_v2"), "quantize_config.json")
    (layer,) = read_layers(f, target=target)
    assert layer.target == target and any("rounded once" in n for n in layer.notes), layer.notes
    assert not any("exactly in fp16" in n for n in layer.notes)
    want = _expected_once(lay, tdt)
    got = dequantize_layer(layer, device=device)
    assert got.dtype == tdt
    np.testing.assert_array_equal(got.view(np.uint16), want)
    out = tmp_path / "o.safetensors"
    dequantize_file(f, out, target=target, device=device, progress=False)
    np.testing.assert_array_equal(read_safetensors(out)["l.weight"].view(np.uint16), want.T)
    # The data tells the two apart: rounding through the scales' dtype or the target first differs somewhere.
    zero = lay.z[lay.rows].astype(np.int64)
    diff = (lay.codes.astype(np.int64) - zero).astype(np.float64)
    if scale_dtype == "fp16":
        twice = (diff * scales.astype(np.float64)[lay.rows]).astype(np.float16).astype(np.float32).astype(tdt)
    else:
        twice = (diff * scales.astype(tdt).astype(np.float64)[lay.rows]).astype(np.float32).astype(tdt)
    assert np.count_nonzero(twice.view(np.uint16) != want) > 0


def test_fp16_overflow_is_not_a_bf16_overflow(tmp_path):
    """Issue 11 case 3: AWQ scales of 60000 and |q - z| up to 15 overflow fp16, not bf16."""
    rng = np.random.default_rng(60000)
    tensors: dict = {}
    lay = make_layer(rng, tensors, "model.layers.0.mlp.up_proj", "awq", K=64, N=32, G=32)
    tensors["model.layers.0.mlp.up_proj.scales"] = lay.scales = np.full(lay.scales.shape, 60000, np.float16)
    f = write_checkpoint(tmp_path / "m", tensors, AWQ_CONFIG, "config.json")
    out = tmp_path / "bf16.safetensors"
    dequantize_file(f, out, target="bf16", device="cpu", progress=False)
    w = read_safetensors(out)["model.layers.0.mlp.up_proj.weight"]
    want = _expected_once(lay, BF16)
    np.testing.assert_array_equal(w.view(np.uint16), want.T)
    assert np.abs(w.astype(np.float32)).max() > 65504  # values fp16 cannot hold, written as bf16
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(tmp_path / "fp16.safetensors"), "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: layer model.layers.0.mlp.up_proj:") and "overflow fp16" in r.output
    assert not (tmp_path / "fp16.safetensors").exists() and not list(tmp_path.glob(".fp16*"))


def test_concurrent_runs_each_install_a_whole_file_of_their_own(ckpts, tmp_path):
    """Issue 11 case 1: run A (fp16) is paused after its first layer while run B (bf16) writes the same
    --out from start to end; B's success leaves B's file, and A then installs its own, whole."""
    f, made, extra = ckpts["awq"]
    solo16, solo_bf = tmp_path / "solo16.safetensors", tmp_path / "solo_bf.safetensors"
    dequantize_file(f, solo16, target="fp16", device="cpu", progress=False)
    dequantize_file(f, solo_bf, target="bf16", device="cpu", progress=False)
    assert solo16.read_bytes() != solo_bf.read_bytes()
    race = tmp_path / "race"
    out = race / "same.safetensors"
    a_paused, b_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def pause_a(line: str) -> None:
        a_paused.set()
        assert b_done.wait(120)

    def run_a() -> None:
        try:
            dequantize_file(f, out, target="fp16", device="cpu", progress=False, log=pause_a)
        except BaseException as e:
            errors.append(e)

    a = threading.Thread(target=run_a)
    a.start()
    try:
        assert a_paused.wait(120)
        dequantize_file(f, out, target="bf16", device="cpu", progress=False)
        assert out.read_bytes() == solo_bf.read_bytes()
    finally:
        b_done.set()
        a.join(120)
    assert not errors, errors
    assert out.read_bytes() == solo16.read_bytes()
    check_output(out, made, extra)
    assert [p.name for p in race.iterdir()] == ["same.safetensors"]  # no temporary file left


def test_concurrent_cli_runs_leave_one_whole_file(ckpts, tmp_path):
    """Issue 11 case 1 with two real processes (fp16 and bf16) started together on one --out: both
    succeed (each installs a file of its own), and what is left is one of the two whole files."""
    f = ckpts["awq"][0]
    solo = {}
    for dtype in ("fp16", "bf16"):
        solo[dtype] = tmp_path / f"solo_{dtype}.safetensors"
        dequantize_file(f, solo[dtype], target=dtype, device="cpu", progress=False)
    race = tmp_path / "race"
    race.mkdir()
    out = race / "same.safetensors"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dqgen", "dequant", str(f), "--out", str(out), "--dtype", dtype, "--device", "cpu"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for dtype in ("fp16", "bf16")
    ]
    results = [(p.communicate(timeout=300), p.returncode) for p in procs]
    for (stdout, stderr), rc in results:
        assert rc == 0 and stdout.splitlines()[-1] == f"wrote {out}", (rc, stdout, stderr)
    assert out.read_bytes() in (solo["fp16"].read_bytes(), solo["bf16"].read_bytes())
    assert [p.name for p in race.iterdir()] == ["same.safetensors"]


def test_sigterm_removes_the_temporary_file(tmp_path):
    """Issue 11 case 4: SIGTERM while the CLI dequantizes ends it (exit 143) without a partial file."""
    rng = np.random.default_rng(4)
    tensors: dict = {}
    for i in range(16):
        make_layer(rng, tensors, f"model.layers.{i}.mlp.up_proj", "awq", K=512, N=512, G=32)
    f = write_checkpoint(tmp_path / "m", tensors, AWQ_CONFIG, "config.json")
    outdir = tmp_path / "out"
    outdir.mkdir()
    p = subprocess.Popen(
        [sys.executable, "-m", "dqgen", "dequant", str(f), "--out", str(outdir / "o.safetensors"), "--device", "cpu"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not [q for q in outdir.iterdir() if q.name.endswith(".partial")]:
            assert p.poll() is None and time.monotonic() < deadline, "the temporary file never appeared"
            time.sleep(0.005)
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, (p.returncode, stdout, stderr)
    assert "Traceback" not in stderr
    assert list(outdir.iterdir()) == []


def _interrupt_after(real):
    """``real`` runs to completion, then a Ctrl-C lands before its result reaches the caller."""

    def wrapped(*a, **k):
        real(*a, **k)
        raise KeyboardInterrupt

    return wrapped


def _fdopen_that_fails_after_taking_fd(fd, *a, **k):
    """What io.open does when it fails after owning the descriptor: it closes it, then raises."""
    os.close(fd)
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "where, folder",
    [("mkstemp", False), ("fdopen", False), ("fdopen_closes", False), ("mkdtemp", True)],
)
def test_an_interrupt_while_the_temporary_is_made_leaves_nothing(ckpts, tmp_path, monkeypatch, where, folder):
    """Stop 33's CI: SIGTERM landing while the temporary file was being opened exited 2 ("Bad file descriptor")
    instead of 143, as the cleanup closed a descriptor io.open had already closed. Each window between making the
    temporary and the writer owning it: the interrupt comes out unchanged and no file or folder is left."""
    import dqgen.io.dequant_file as df

    if where == "mkstemp":
        monkeypatch.setattr(df.tempfile, "mkstemp", _interrupt_after(df.tempfile.mkstemp))
    elif where == "mkdtemp":
        monkeypatch.setattr(df.tempfile, "mkdtemp", _interrupt_after(df.tempfile.mkdtemp))
    elif where == "fdopen":
        monkeypatch.setattr(df.os, "fdopen", _interrupt_after(os.fdopen))
    else:
        monkeypatch.setattr(df.os, "fdopen", _fdopen_that_fails_after_taking_fd)
    out = tmp_path / ("model" if folder else "o.safetensors")
    with pytest.raises(KeyboardInterrupt):
        dequantize_file(ckpts["awq"][0], out, device="cpu")
    assert list(tmp_path.iterdir()) == []


def _spy_dequantize(monkeypatch) -> list[str]:
    import dqgen.io.dequant_file as ck

    calls: list[str] = []
    real = ck._dequantize

    def spy(layer, *a, **k):
        calls.append(layer.name)
        return real(layer, *a, **k)

    monkeypatch.setattr(ck, "_dequantize", spy)
    return calls


@pytest.mark.parametrize("where", ["folder", "under_a_file", "unwritable"])
def test_out_is_checked_before_any_layer(ckpts, tmp_path, monkeypatch, where):
    """Issue 11 case 5: --out naming a non-empty folder, a path under a file, or a place that cannot be written
    fails with one line, exit 2, before any layer is dequantized."""
    f = ckpts["awq"][0]
    if where == "folder":  # a folder is a model folder output (issue 26): one already holding files is refused
        out = tmp_path / "existing"
        out.mkdir()
        (out / "keep.txt").write_text("")
    elif where == "under_a_file":
        (tmp_path / "a_file").write_text("")
        out = tmp_path / "a_file" / "o.safetensors"
    elif os.geteuid() == 0:  # root writes through permission bits; /proc takes no new files
        out = Path("/proc/dqgen-test-o.safetensors")
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        out = tmp_path / "ro" / "o.safetensors"
    calls = _spy_dequantize(monkeypatch)
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(out), "--device", "cpu"])
    assert r.exit_code == 2, r.output
    lines = r.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: output {out}: "), r.output
    assert calls == []
    with pytest.raises(ValueError, match=r"^output "):
        dequantize_file(f, out, device="cpu", progress=False)
    assert calls == []


def _index_checkpoint(tmp_path: Path, entry: str) -> Path:
    """A model folder whose index maps one tensor to ``entry``; that file (outside the folder) exists."""
    rng = np.random.default_rng(6)
    tensors: dict = {}
    make_layer(rng, tensors, "l", "awq", K=64, N=32, G=32)
    d = tmp_path / "model" / "sub"
    d.mkdir(parents=True)
    save_file(tensors, str(d / "model.safetensors"))
    save_file({"stolen": np.arange(4, dtype=np.float32)}, str(tmp_path / "elsewhere.safetensors"))
    wm = dict.fromkeys(tensors, "model.safetensors") | {"stolen": entry}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    (d / "config.json").write_text(json.dumps({"quantization_config": AWQ_CONFIG}))
    return d


@pytest.mark.parametrize("entry", ["../../elsewhere.safetensors", "ABS", "./../../elsewhere.safetensors"])
def test_weight_map_outside_the_model_folder_is_refused(tmp_path, entry):
    """Issue 11 case 6."""
    if entry == "ABS":
        entry = str(tmp_path / "elsewhere.safetensors")
    d = _index_checkpoint(tmp_path, entry)
    with pytest.raises(ValueError, match="weight_map entry 'stolen'"):
        read_layers(d)
    r = CliRunner().invoke(app, ["dequant", str(d), "--out", str(tmp_path / "o.safetensors"), "--device", "cpu"])
    assert r.exit_code == 2
    lines = r.output.splitlines()
    assert len(lines) == 1 and "weight_map entry 'stolen'" in lines[0] and entry in lines[0], r.output
    assert not (tmp_path / "o.safetensors").exists()


def test_weight_map_symlinked_shard_is_read(tmp_path):
    """Shards that are symlinks to elsewhere (the Hugging Face cache's blobs/) are still read."""
    d = _index_checkpoint(tmp_path, "stolen.safetensors")
    (d / "stolen.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    out = tmp_path / "o.safetensors"
    dequantize_file(d, out, device="cpu", progress=False)
    assert set(read_safetensors(out)) == {"l.weight", "stolen"}


def test_overlapping_data_offsets_are_refused(tmp_path):
    """Issue 11 case 7: the safetensors package's validation, e.g. two tensors sharing bytes."""
    header = {
        "a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "I32", "shape": [2], "data_offsets": [4, 12]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    bad = tmp_path / "overlap.safetensors"
    bad.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(12))
    with pytest.raises(ValueError, match=r"overlap\.safetensors: not a safetensors file \(.*invalid offset"):
        read_safetensors(bad)
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": AWQ_CONFIG}))
    r = CliRunner().invoke(app, ["dequant", str(bad), "--out", str(tmp_path / "o.safetensors"), "--device", "cpu"])
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1 and "not a safetensors file" in r.output


def _per_channel_sym_model(tmp_path: Path, config_bits: int) -> tuple[Path, dict, dict]:
    """A small model of 4-bit sym GPTQ layers, per channel, with neither qzeros nor g_idx: qweight's shape
    alone fits 2, 4 and 8 bits. The sizes are linked as in a transformer (hidden 256, intermediate 512)."""
    rng = np.random.default_rng(8)
    tensors: dict = {"model.embed_tokens.weight": rng.standard_normal((100, 256)).astype(np.float16)}
    made = {}
    for prefix, K, N in (
        ("model.layers.0.self_attn.q_proj", 256, 256),
        ("model.layers.0.mlp.up_proj", 256, 512),
        ("model.layers.0.mlp.down_proj", 512, 256),
    ):
        made[prefix] = make_layer(rng, tensors, prefix, "gptq", K, N, -1, sym=True, qzeros_when_sym=False)
    config = gptq_config(bits=config_bits, group=-1, sym=True)
    return write_checkpoint(tmp_path / "m", tensors, config, "quantize_config.json"), made, tensors


@pytest.mark.parametrize("config_bits", [2, 8])
def test_code_width_that_the_model_contradicts_is_refused(tmp_path, config_bits):
    """Issue 11 case 8: 4-bit data, bits 2 or 8 in the config, nothing in a layer pins the width: refused
    (K would be 2x or 0.5x), naming the layer and the width the model's sizes fit."""
    f, _, _ = _per_channel_sym_model(tmp_path, config_bits)
    with pytest.raises(ValueError) as e:
        read_layers(f)
    msg = str(e.value)
    assert msg.startswith("layer model.layers.0.") and "[bits]" in msg and "with bits=4" in msg, msg
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(tmp_path / "o.safetensors"), "--device", "cpu"])
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1 and r.output.startswith("error: layer "), r.output
    assert not list(tmp_path.glob("*o.safetensors*"))


def test_code_width_that_the_model_confirms_is_read(tmp_path):
    f, made, tensors = _per_channel_sym_model(tmp_path, 4)
    out = tmp_path / "o.safetensors"
    dequantize_file(f, out, device="cpu", progress=False)
    check_output(out, made, {"model.embed_tokens.weight": tensors["model.embed_tokens.weight"]})


def _narrow_scales(t, p):
    t[f"{p}.scales"] = t[f"{p}.scales"][:, :16]


def _with_bias(t, p):
    t[f"{p}.bias"] = np.zeros(t[f"{p}.qweight"].shape[1], np.float16)
    _narrow_scales(t, p)


@pytest.mark.parametrize(
    "config,layer,edit",
    [
        (AWQ_CONFIG, {"kind": "awq"}, _narrow_scales),  # qweight and qzeros hold N = 32
        (gptq_config(), {}, _narrow_scales),  # qweight and qzeros
        (gptq_config(sym=True), {"sym": True, "qzeros_when_sym": False}, _with_bias),  # qweight and bias
    ],
)
def test_wrong_n_scales_names_scales(tmp_path, config, layer, edit):
    """Issue 11 case 18: scales with the wrong N is blamed on scales, with no other bit width suggested."""
    f = _bad(tmp_path, config, "config.json", edit=edit, **layer)
    with pytest.raises(ValueError) as e:
        read_layers(f)
    msg = str(e.value)
    assert msg.startswith("layer model.layers.3.mlp.down_proj, scales: [4, 16] has N = 16 columns"), msg
    assert "N = 32" in msg and "bits=" not in msg, msg


def test_code_width_without_evidence_is_trusted_and_noted(tmp_path):
    """One layer, K != N, nothing else in the model: no size tells the widths apart; the config is used,
    and the summary line says that it could not be checked."""
    rng = np.random.default_rng(9)
    tensors: dict = {}
    made = {"l": make_layer(rng, tensors, "l", "gptq", 256, 96, -1, sym=True, qzeros_when_sym=False)}
    f = write_checkpoint(tmp_path / "m", tensors, gptq_config(bits=4, group=-1, sym=True), "quantize_config.json")
    out = tmp_path / "o.safetensors"
    (line,) = dequantize_file(f, out, device="cpu", progress=False)
    assert "the config's bits are trusted" in line, line
    check_output(out, made, {})


def test_out_that_is_not_a_regular_file_is_refused(ckpts, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="exists and is not a regular file"):
        dequantize_file(ckpts["awq"][0], fifo, device="cpu", progress=False)
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]
