"""Issue 26's small defects of ``dqgen dequant``, each reproduced: ``--device cuda`` with torch and no GPU (exit 70
before), a bias whose length is not N (copied before), a SIGKILLed run's hidden ``.partial`` (never removed before),
a mistyped input path (reported as a missing quantization config before)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from typer.testing import CliRunner

from dqgen.cli import app
from dqgen.io import dequant_file
from dqgen.io.checkpoint import dequantize_file

from .conftest import ROOT
from .test_checkpoint import AWQ_CONFIG, check_output, make_layer, write_checkpoint


def _ckpt(tmp_path: Path, bias_len: int | None = None, layers: int = 2) -> tuple[Path, dict, dict]:
    rng = np.random.default_rng(9)
    tensors: dict = {}
    made = {f"model.layers.{i}.mlp.up_proj": None for i in range(layers)}
    for name in made:
        made[name] = make_layer(rng, tensors, name, "awq", K=64, N=32, G=32)
    extra = {}
    if bias_len is not None:
        extra["model.layers.1.mlp.up_proj.bias"] = rng.standard_normal(bias_len).astype(np.float16)
    tensors |= extra
    return write_checkpoint(tmp_path / "m", tensors, AWQ_CONFIG, "config.json"), made, extra


# ------------------------------------------------------------------------------------------------ --device cuda


def test_cli_device_cuda_without_a_gpu_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dqgen.run.device

    monkeypatch.setattr(dqgen.run.device, "gpu_available", lambda: False)
    f, _, _ = _ckpt(tmp_path)
    out = tmp_path / "o.safetensors"
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(out), "--device", "cuda"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --device cuda: no NVIDIA GPU found;") and r.output.count("\n") == 1
    assert not out.exists()


def test_library_device_cuda_without_a_gpu_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    f, _, _ = _ckpt(tmp_path)
    with pytest.raises(
        ValueError, match=r"^device 'cuda': no NVIDIA GPU found \(torch.cuda.is_available\(\) is false\)"
    ):
        dequantize_file(f, tmp_path / "o.safetensors", device="cuda", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


# ------------------------------------------------------------------------------------------------ bias


@pytest.mark.parametrize("bias_len", [31, 64])
def test_bias_whose_length_is_not_n_is_refused(tmp_path: Path, bias_len: int) -> None:
    f, _, _ = _ckpt(tmp_path, bias_len=bias_len)
    out = tmp_path / "o.safetensors"
    with pytest.raises(ValueError) as e:
        dequantize_file(f, out, device="cpu", progress=False)
    assert str(e.value) == (
        f"layer model.layers.1.mlp.up_proj, bias: has shape [{bias_len}], expected [32] (N, the layer's "
        "out_features, from its scales)"
    )
    assert not out.exists()
    r = CliRunner().invoke(app, ["dequant", str(f), "--out", str(out), "--device", "cpu"])
    assert r.exit_code == 2 and r.output.startswith("error: layer model.layers.1.mlp.up_proj, bias: has shape")


def test_bias_of_length_n_is_copied(tmp_path: Path) -> None:
    f, made, extra = _ckpt(tmp_path, bias_len=32)
    out = tmp_path / "o.safetensors"
    dequantize_file(f, out, device="cpu", progress=False)
    check_output(out, made, extra)


# ------------------------------------------------------------------------------------------------ stale partials

_KILL_AFTER_FIRST_LAYER = """
import os, signal, sys
from dqgen.io.checkpoint import dequantize_file
def die(line):
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup can run: what a power loss or the OOM killer leaves
dequantize_file(sys.argv[1], sys.argv[2], device="cpu", progress=False, log=die)
"""


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_killed_runs_partial_is_removed_by_the_next_run(tmp_path: Path, kind: str) -> None:
    f, made, extra = _ckpt(tmp_path, layers=3)
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / ("o.safetensors" if kind == "file" else "model")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", _KILL_AFTER_FIRST_LAYER, str(f), str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    left = [p.name for p in outdir.iterdir()]
    assert len(left) == 1 and left[0].startswith(f".{out.name}.") and left[0].endswith(".partial"), left
    # a live run's temporary (this process's, as a concurrent run's would be) and another name are kept
    mine = outdir / f"{dequant_file._prefix(out)}abcdefgh.partial"
    mine.write_bytes(b"")
    other = outdir / f".{out.name}.keepme.partial"
    other.write_bytes(b"")
    dequantize_file(f, out, device="cpu", progress=False)
    assert sorted(p.name for p in outdir.iterdir()) == sorted([out.name, mine.name, other.name])
    check_output(out if kind == "file" else out / "model.safetensors", made, extra)


# ------------------------------------------------------------------------------------------------ a typo


def test_a_mistyped_input_path_is_no_such_file(tmp_path: Path) -> None:
    f, _, _ = _ckpt(tmp_path)
    typo = tmp_path / "modle" / "model.safetensors"  # no config beside it either
    with pytest.raises(ValueError, match=r"^.*modle/model.safetensors: no such file or folder$"):
        dequantize_file(typo, tmp_path / "o.safetensors", device="cpu", progress=False)
    r = CliRunner().invoke(app, ["dequant", str(typo), "--out", str(tmp_path / "o.safetensors"), "--device", "cpu"])
    assert r.exit_code == 2 and r.output == f"error: {typo}: no such file or folder\n"
    save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "lonely.safetensors"))
    with pytest.raises(ValueError, match="no quantization config"):  # an existing file without a config still says so
        dequantize_file(tmp_path / "lonely.safetensors", tmp_path / "o.safetensors", device="cpu", progress=False)
    assert f.exists()
