"""``dqgen dequant`` into a model folder (issue 26): shards with transformers' names and index, config.json without
quantization_config (and the tokenizer files) so that from_pretrained loads it, natural tensor order, and 3-bit
GPTQ checkpoints (packed here by the test's own AutoGPTQ-style packer, not dqgen's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from dqgen.cli import app
from dqgen.io.checkpoint import dequantize_file, read_layers
from dqgen.io.safetensors_io import natural_key, parse_size, plan_shards

from .test_checkpoint import AWQ_CONFIG, check_output, gptq_config, make_layer, write_checkpoint


def _model(tmp_path: Path, layers: int = 12) -> tuple[Path, dict, dict]:
    """An AWQ checkpoint folder of ``layers`` decoder layers (names that sort wrong as text: 10, 11 before 2),
    config.json with quantization_config and torch_dtype, a tokenizer file and a generation config."""
    rng = np.random.default_rng(26)
    tensors: dict = {}
    made = {}
    for i in range(layers):
        made[f"model.layers.{i}.mlp.up_proj"] = make_layer(
            rng, tensors, f"model.layers.{i}.mlp.up_proj", "awq", 64, 32, 32
        )
    extra = {
        "model.embed_tokens.weight": rng.standard_normal((50, 64)).astype(np.float16),
        "model.layers.1.mlp.up_proj.bias": rng.standard_normal(32).astype(np.float16),
        "lm_head.weight": rng.standard_normal((50, 64)).astype(np.float16),
    }
    tensors.update(extra)
    folder = tmp_path / "awq_model"
    write_checkpoint(folder, tensors, AWQ_CONFIG, "config.json")
    cfg = json.loads((folder / "config.json").read_text())
    cfg |= {"torch_dtype": "float16", "hidden_size": 64, "model_type": "llama"}
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "generation_config.json").write_text('{"bos_token_id": 1}')
    return folder, made, extra


def _read_folder(out: Path) -> dict[str, np.ndarray]:
    """Every tensor of a folder output, through its index when there is one (with the index checked)."""
    index = out / "model.safetensors.index.json"
    if not index.exists():
        return dict(load_file(str(out / "model.safetensors")))
    data = json.loads(index.read_text())
    got: dict[str, np.ndarray] = {}
    for shard in sorted(set(data["weight_map"].values())):
        part = load_file(str(out / shard))
        for name in part:
            assert data["weight_map"][name] == shard, name
        got |= part
    assert set(got) == set(data["weight_map"])
    assert data["metadata"]["total_size"] == sum(a.nbytes for a in got.values())
    return got


def test_folder_output_is_sharded_with_index_and_config(tmp_path: Path) -> None:
    folder, made, extra = _model(tmp_path)
    out = tmp_path / "dense"
    # 64x32 fp16 weights are 4 KiB each; embed and lm_head 6.4 KB: a 10 KB shard holds at most two tensors
    lines = dequantize_file(folder, out, device="cpu", progress=False, shard_size="10KB")
    files = sorted(p.name for p in out.iterdir())
    shards = [f for f in files if f.endswith(".safetensors")]
    n = len(shards)
    assert n > 2
    assert shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert set(files) == {
        *shards,
        "model.safetensors.index.json",
        "config.json",
        "tokenizer.json",
        "generation_config.json",
    }
    got = _read_folder(out)
    for prefix, layer in made.items():
        w = got.pop(f"{prefix}.weight")
        np.testing.assert_array_equal(w.view(np.uint16), layer.expected().T.view(np.uint16), err_msg=prefix)
    assert set(got) == set(extra)
    for name, a in extra.items():
        assert got[name].tobytes() == a.tobytes(), name
    for shard in shards:  # no shard above the limit unless it holds a single tensor
        part = load_file(str(out / shard))
        assert sum(a.nbytes for a in part.values()) <= 10_000 or len(part) == 1
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg
    assert cfg["torch_dtype"] == "float16" and cfg["hidden_size"] == 64 and cfg["architectures"] == ["LlamaForCausalLM"]
    assert (out / "tokenizer.json").read_text() == '{"version": "1.0"}'
    # layers in natural order: the summary lines and the index's tensors
    order = [int(line.split(".")[2]) for line in lines]
    assert order == list(range(12))
    wm = list(json.loads((out / "model.safetensors.index.json").read_text())["weight_map"])
    layer_rows = [name for name in wm if name.startswith("model.layers.")]
    assert layer_rows.index("model.layers.2.mlp.up_proj.weight") < layer_rows.index(
        "model.layers.10.mlp.up_proj.weight"
    )
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_one_shard_is_model_safetensors_bf16_config(tmp_path: Path) -> None:
    folder, made, extra = _model(tmp_path, layers=3)
    out = tmp_path / "dense_bf16"
    out.mkdir()  # an empty folder is taken
    dequantize_file(folder, out, target="bf16", device="cpu", progress=False)
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    check_output(out / "model.safetensors", made, extra, _bf16())
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"


def _bf16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def test_single_file_output_is_in_natural_order(tmp_path: Path) -> None:
    folder, made, extra = _model(tmp_path)
    out = tmp_path / "one.safetensors"
    dequantize_file(folder, out, device="cpu", progress=False)
    check_output(out, made, extra)
    raw = out.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    by_offset = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    assert by_offset == sorted(header, key=natural_key)
    assert by_offset.index("model.layers.9.mlp.up_proj.weight") < by_offset.index("model.layers.10.mlp.up_proj.weight")


def test_cli_folder_output_and_shard_size_option(tmp_path: Path) -> None:
    folder, _made, _extra = _model(tmp_path, layers=4)
    out = tmp_path / "cli_out"
    r = CliRunner().invoke(app, ["dequant", str(folder), "--out", str(out), "--device", "cpu", "--shard-size", "5KB"])
    assert r.exit_code == 0, r.output
    assert (out / "model.safetensors.index.json").exists() and (out / "config.json").exists()
    r = CliRunner().invoke(
        app, ["dequant", str(folder), "--out", str(tmp_path / "x"), "--device", "cpu", "--shard-size", "big"]
    )
    assert r.exit_code == 2 and r.output.startswith("error: [--shard-size] got 'big'"), r.output
    # a folder that already holds files is refused before anything is read
    r = CliRunner().invoke(app, ["dequant", str(folder), "--out", str(out), "--device", "cpu"])
    assert (
        r.exit_code == 2
        and r.output == f"error: output {out}: the folder is not empty; expected a new or empty folder\n"
    )


def test_sizes_and_shard_plan() -> None:
    assert parse_size("5GB") == 5 * 10**9 and parse_size("2GiB") == 2 * 2**30 and parse_size(123) == 123
    assert parse_size("1.5MB") == 1_500_000
    for bad in ("", "5XB", "-1", "0"):
        with pytest.raises(ValueError, match=r"^\[shard size\] got "):
            parse_size(bad)
    items = [(str(i), "F16", (n,), n) for i, n in enumerate([4, 4, 9, 1, 1, 20])]
    plan = plan_shards(items, 8)
    assert [[it[0] for it in s] for s in plan] == [["0", "1"], ["2"], ["3", "4"], ["5"]]
    assert sorted(["layers.23", "layers.9", "layers.100.a", "layers.2"], key=natural_key) == [
        "layers.2",
        "layers.9",
        "layers.23",
        "layers.100.a",
    ]


# ------------------------------------------------------------------------------------------------ 3-bit GPTQ


def _pack3_along_rows(codes: np.ndarray) -> np.ndarray:
    """AutoGPTQ's 3-bit packing (qlinear_cuda_old.pack), written out: each 32 rows of codes fill 3 int32 words,
    code i at bits [3i, 3i + 3) of the 96-bit block (word 0 lowest), codes 10 and 21 straddling two words."""
    R, C = codes.shape
    out = np.zeros((R // 32 * 3, C), dtype=np.uint64)
    for b in range(R // 32):
        block = np.zeros(C, dtype=object)
        for i in range(32):
            block = block + (codes[32 * b + i].astype(object) << (3 * i))
        for w in range(3):
            out[3 * b + w] = np.array([(int(v) >> (32 * w)) & 0xFFFFFFFF for v in block], dtype=np.uint64)
    return out.astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
def test_gptq_3bit_sym_is_dequantized(tmp_path: Path, fmt: str) -> None:
    rng = np.random.default_rng(3)
    K, N, G = 128, 64, 32
    codes = rng.integers(0, 8, size=(K, N))
    scales = (rng.choice([-1.0, 1.0], size=(K // G, N)) * 2.0 ** rng.uniform(-8, -2, size=(K // G, N))).astype(
        np.float16
    )
    zsym = np.full((K // G, N), 4 - (1 if fmt == "gptq" else 0))  # v1 stores z - 1
    tensors = {
        "model.layers.0.mlp.down_proj.qweight": _pack3_along_rows(codes),
        "model.layers.0.mlp.down_proj.qzeros": np.ascontiguousarray(_pack3_along_rows(zsym.T).T),
        "model.layers.0.mlp.down_proj.scales": scales,
        "model.layers.0.mlp.down_proj.g_idx": (np.arange(K) // G).astype(np.int32),
    }
    assert tensors["model.layers.0.mlp.down_proj.qweight"].shape == (12, 64)
    assert tensors["model.layers.0.mlp.down_proj.qzeros"].shape == (4, 6)
    folder = tmp_path / "g3"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "quantize_config.json").write_text(json.dumps(gptq_config(bits=3, group=G, sym=True, fmt=fmt)))
    (lay,) = read_layers(folder)
    assert lay.K == K and lay.N == N and lay.spec.source.bits == 3
    out = tmp_path / "o.safetensors"
    dequantize_file(folder, out, device="cpu", progress=False)
    w = load_file(str(out))["model.layers.0.mlp.down_proj.weight"]
    exact = (codes - 4).astype(np.float64) * scales.astype(np.float64)[np.arange(K) // G]
    np.testing.assert_array_equal(w.view(np.uint16), exact.astype(np.float16).T.view(np.uint16))


def test_gptq_3bit_asym_is_refused_in_one_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    K, N, G = 64, 32, 32
    tensors = {
        "l.qweight": _pack3_along_rows(rng.integers(0, 8, size=(K, N))),
        "l.qzeros": np.ascontiguousarray(_pack3_along_rows(rng.integers(0, 7, size=(N, K // G))).T),
        "l.scales": np.ones((K // G, N), np.float16),
    }
    folder = tmp_path / "g3a"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "quantize_config.json").write_text(json.dumps(gptq_config(bits=3, group=G, sym=False)))
    with pytest.raises(ValueError, match=r"^layer l: no dqgen spec fits .*3-bit") as e:
        read_layers(folder)
    assert "\n" not in str(e.value)


@pytest.mark.gpu
def test_gpu_gptq_3bit_equals_cpu(tmp_path: Path) -> None:
    """The generated kernel of the inferred 3-bit spec gives the CPU reference's bits."""
    rng = np.random.default_rng(33)
    K, N, G = 256, 96, 64
    tensors = {
        "l.qweight": _pack3_along_rows(rng.integers(0, 8, size=(K, N))),
        "l.qzeros": np.ascontiguousarray(_pack3_along_rows(np.full((N, K // G), 3)).T),
        "l.scales": (rng.standard_normal((K // G, N)) * 0.01).astype(np.float16),
    }
    folder = tmp_path / "g3"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "quantize_config.json").write_text(json.dumps(gptq_config(bits=3, group=G, sym=True)))
    outs = {}
    for device in ("cpu", "cuda"):
        outs[device] = tmp_path / f"{device}.safetensors"
        dequantize_file(folder, outs[device], device=device, progress=False)
    assert outs["cpu"].read_bytes() == outs["cuda"].read_bytes()
