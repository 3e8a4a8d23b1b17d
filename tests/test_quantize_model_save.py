"""dqgen.nn.save_quantized: a quantized model written as an AWQ or GPTQ checkpoint folder is read back by dqgen's
checkpoint inference (dqgen.io.infer, the path ``dqgen dequant`` and the loader take) as the same weights: every
layer dequantizes (the CPU reference) to the bits of the QuantLinear it was saved from; the config fields, the
dense tensors and the shards are checked against literal expectations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.numpy import load_file  # noqa: E402

from dqgen.check.reference import dequantize_reference  # noqa: E402
from dqgen.io.checkpoint import dequantize_layer, read_layers  # noqa: E402
from dqgen.nn import QuantLinear, quantize, quantize_model, save_quantized  # noqa: E402


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.embed_tokens = torch.nn.Embedding(40, 128)
        self.layers = torch.nn.ModuleList(
            [
                torch.nn.ModuleDict(
                    {"q_proj": torch.nn.Linear(128, 256, bias=True), "down_proj": torch.nn.Linear(256, 128, bias=False)}
                )
                for _ in range(11)  # layers.10 sorts after layers.9 in the shards
            ]
        )
        self.norm = torch.nn.LayerNorm(128)
        self.lm_head = torch.nn.Linear(128, 40, bias=False)
        self.half()


def _raw(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _dense_of(layer: QuantLinear) -> np.ndarray:
    """W[K, N] of a QuantLinear by the CPU reference, from its own buffers."""
    z = None if layer.zeros is None else _raw(layer.zeros)
    gi = None if layer.g_idx is None else layer.g_idx.numpy()
    return np.asarray(dequantize_reference(layer.spec, _raw(layer.qweight), _raw(layer.scales), z, gi))


def _check_read_back(model: torch.nn.Module, folder: Path) -> dict:
    qlayers = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    read = {lay.name: lay for lay in read_layers(folder)}
    assert set(read) == set(qlayers)
    for name, layer in qlayers.items():
        got = dequantize_layer(read[name], "cpu")
        want = _dense_of(layer)
        assert got.shape == want.shape == (layer.in_features, layer.out_features), name
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=name)
    return read


def _all_tensors(folder: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out |= load_file(str(f))
    return out


def test_awq_folder_reads_back(tmp_path: Path) -> None:
    model = _Tiny()
    lm_head = model.lm_head.weight.detach().clone()
    rep = quantize_model(model, "awq_int4_fp16", group_size=64)
    assert len(rep.replaced) == 22
    out = save_quantized(model, tmp_path / "awq", "awq")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "quant_config.json"]
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc == {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 64,
        "zero_point": True,
        "version": "gemm",
        "modules_to_not_convert": ["lm_head"],
    }
    assert json.loads((out / "quant_config.json").read_text()) == qc
    t = _all_tensors(out)
    assert t["layers.0.q_proj.qweight"].shape == (128, 32) and t["layers.0.q_proj.qweight"].dtype == np.int32
    assert t["layers.0.q_proj.qzeros"].shape == (2, 32) and t["layers.0.q_proj.scales"].shape == (2, 256)
    assert "layers.0.q_proj.bias" in t and "layers.0.down_proj.bias" not in t
    assert np.array_equal(t["lm_head.weight"], lm_head.numpy()) and "embed_tokens.weight" in t
    assert "norm.weight" in t and "norm.bias" in t
    _check_read_back(model, out)


@pytest.mark.parametrize("spec", ["gptq_int4_fp16", "awq_int4_fp16", "gptq_int3_fp16", "gptq_uint2_asym_fp16"])
def test_gptq_folder_reads_back(tmp_path: Path, spec: str) -> None:
    model = _Tiny()
    quantize_model(model, spec, group_size=128 if spec != "gptq_uint2_asym_fp16" else 64)
    out = save_quantized(model, tmp_path / "gptq", "gptq", max_shard_size="40KB")
    files = sorted(p.name for p in out.iterdir())
    assert "model.safetensors.index.json" in files and "quantize_config.json" in files
    shards = [f for f in files if f.endswith(".safetensors")]
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    bits = {"gptq_int3_fp16": 3, "gptq_uint2_asym_fp16": 2}.get(spec, 4)
    assert (qc["quant_method"], qc["bits"], qc["desc_act"]) == ("gptq", bits, False)
    assert qc["sym"] == (spec in ("gptq_int4_fp16", "gptq_int3_fp16"))
    read = _check_read_back(model, out)
    t = _all_tensors(out)
    K = 128
    assert t["layers.0.q_proj.qweight"].shape == (K * bits // 32, 256)
    assert np.array_equal(t["layers.0.q_proj.g_idx"], np.arange(K) // qc["group_size"])
    assert read["layers.0.q_proj"].spec.source.bits == bits


def test_gptq_act_order_layer(tmp_path: Path) -> None:
    model = torch.nn.Module()
    w = (torch.randn(256, 96) * 0.05).half()  # W[K, N]
    ck = quantize("gptq_int4_asym_act_order_fp16", w, group_size=64, act_order=True)
    model.proj = QuantLinear.from_checkpoint("gptq_int4_asym_act_order_fp16", **ck)
    out = save_quantized(model, tmp_path / "act", "gptq")
    qc = json.loads((out / "quantize_config.json").read_text())
    assert qc["desc_act"] is True and qc["sym"] is False
    read = _check_read_back(model, out)
    assert read["proj"].spec.act_order
    with pytest.raises(ValueError, match=r"^proj: act-order \(g_idx\) layers have no AWQ layout"):
        save_quantized(model, tmp_path / "act_awq", "awq")


def test_refusals(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(128, 64).half())
    quantize_model(model, "int8_fp16")
    with pytest.raises(ValueError, match=r"^0: spec int8_fp16 has signed codes: the AWQ format cannot hold it$"):
        save_quantized(model, tmp_path / "x", "awq")
    with pytest.raises(ValueError, match=r"^format: expected 'awq' or 'gptq', got 'exl2'$"):
        save_quantized(model, tmp_path / "x", "exl2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^model: holds no QuantLinear"):
        save_quantized(torch.nn.Linear(4, 4), tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "a").write_text("")
    with pytest.raises(ValueError, match=r"folder .*full: exists and is not an empty folder$"):
        save_quantized(model, tmp_path / "full")
    assert not (tmp_path / "x").exists()


def test_tied_lm_head_is_written_once(tmp_path: Path) -> None:
    model = _Tiny()
    model.lm_head.weight = model.embed_tokens.weight  # tie_word_embeddings: one tensor under two names
    quantize_model(model, "awq_int4_fp16")
    out = save_quantized(model, tmp_path / "tied", "awq", config={"tie_word_embeddings": True, "model_type": "x"})
    t = _all_tensors(out)
    assert "embed_tokens.weight" in t and "lm_head.weight" not in t
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True and cfg["model_type"] == "x"
    assert cfg["quantization_config"]["quant_method"] == "awq"
