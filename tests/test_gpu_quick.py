"""The quick GPU tier (`TIER=quick bash devtools/gpu_all.sh`, about 4 minutes on an H100): every shipped
spec at two shapes (one aligned with several groups, one with partial tiles and unaligned rows), every
entry point once (dqgen.compile, `dqgen build`, `dqgen bench`, `dqgen dequant`, `dqgen explain --sass`)
and every zero mode once, each checked bit-exact against the numba reference. The sanitizer part of the
tier is devtools/sanitize_entry_points.py. Skipped without a GPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

import dqgen
from dqgen.check.reference import dequantize_reference, random_inputs
from dqgen.core.spec import SHIPPED_SPECS, load_spec
from dqgen.run.gpucheck import to_numpy, to_torch

from .conftest import ROOT, SPECS
from .test_checkpoint import check_output, ckpts  # noqa: F401 - ckpts is a fixture used below
from .test_gpu import ZERO_MODE_CASES, _assert_equal, _check, _k_unit, _kernel, _spec

pytestmark = [pytest.mark.gpu, pytest.mark.quick]


def _aligned_shape(spec) -> tuple[int, int]:
    """Several groups (or block-scale blocks) along K, whole 16-byte rows along N."""
    G = spec.scales.group_size
    G = 128 if G == "auto" else G  # 'auto' specs run as shipped: inputs in groups of 128 (example_group_size)
    K = 4 * math.lcm(_k_unit(spec), G if G > 0 else 1)
    zp = 32 // spec.source.bits if spec.zeros.packed else 1
    N = math.lcm(8 * (spec.per_word if spec.packing.axis == "N" else 1), zp) * 64
    return K, N


def _tail_shape(spec) -> tuple[int, int]:
    """Rows and columns that leave partial tiles; along N, rows of words that are not 16-byte multiples."""
    P = spec.per_word
    zp = 32 // spec.source.bits if spec.zeros.packed else 1
    return (37, P * 333) if spec.packing.axis == "N" else (P * 32, -(-1000 // zp) * zp)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_spec_two_shapes(path):
    spec = load_spec(path)
    K, N = _aligned_shape(spec)
    _check(_kernel(spec), K, N, seed=K + N)
    tails = _spec(path, None if spec.act_order else -1)  # act-order needs groups; else one group fits any K
    K, N = _tail_shape(tails)
    _check(_kernel(tails), K, N, seed=K * N)


def _one_case_per_zero_mode():
    seen: dict[str, tuple] = {}
    for case in ZERO_MODE_CASES:
        mode = case[1]["zeros"]["mode"] + ("-act_order" if case[1]["act_order"] else "")
        seen.setdefault(mode, case)
    return list(seen.values())


@pytest.mark.parametrize("case", _one_case_per_zero_mode(), ids=lambda c: c[0])
def test_every_zero_mode_once(case):
    spec = load_spec(case[1])
    K, N = (192, spec.per_word * 40) if spec.packing.axis == "N" else (192, 328)
    _check(_kernel(spec), K, N, seed=sum(map(ord, case[0])))


def test_compile_entry_point_with_out():
    """The README's call: dqgen.compile(path), then k(qweight, scales, qzeros, out=w) on torch tensors."""
    import torch

    path = SHIPPED_SPECS / "awq_int4_fp16.yaml"
    k = dqgen.compile(path)
    q, s, z, _ = random_inputs(k.spec, 256, 1032, 21)
    w = torch.full((256, 1032), float("nan"), dtype=torch.float16, device="cuda")
    got = k(to_torch(q), to_torch(s), to_torch(z), out=w)
    torch.cuda.synchronize()
    assert got is w
    _assert_equal(k.spec, to_numpy(w), dequantize_reference(k.spec, q, s, z), "dqgen.compile(...)(..., out=w)")


def _dqgen(*args: str, env: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dqgen", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_build_entry_point(tmp_path):
    env = dict(os.environ, DQGEN_CACHE_DIR=str(tmp_path / "cache"))
    r = _dqgen("build", "awq_int4_fp16", "--json", "--words", "2000", "--out", str(tmp_path), env=env)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] is True
    gpu = report["steps"]["gpu"]
    assert gpu["skipped"] is False and "bit-exact" in gpu["line"] and "mismatch" not in gpu["line"], gpu


def test_bench_entry_point_smoke(tmp_path):
    """A small bench run: every row equal, the JSON record has its header and row keys."""
    env = dict(os.environ, DQGEN_CACHE_DIR=str(tmp_path / "cache"))
    record, docs = tmp_path / "dequant.json", tmp_path / "performance.md"
    args = ["bench", "awq_int4_fp16", "--shapes", "1024x2048", "--impls", "cuda-naive", "--reps", "3"]
    r = _dqgen(*args, "--no-extras", "--record", str(record), "--docs", str(docs), env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(record.read_text())
    assert {"gpu", "date", "copy_gbps", "method"} <= set(doc) and doc["copy_gbps"] > 100
    impls = {row["impl"] for row in doc["rows"]}
    assert {"dqgen tuned", "dqgen default", "copy, same bytes", "cuda static_cast"} <= impls
    for row in doc["rows"]:
        assert list(row)[:8] == ["impl", "spec", "K", "N", "group", "us", "pct_copy", "equal"]
        assert row["us"] > 0 and row["equal"] in (True, None)
    assert "| awq_int4_fp16 | 1024x2048 | 128 | dqgen tuned |" in docs.read_text()


def test_dequant_cli_entry_point(ckpts, tmp_path):  # noqa: F811 - the imported fixture
    f, made, extra = ckpts["awq"]
    out = tmp_path / "o.safetensors"
    r = _dqgen("dequant", str(f), "--out", str(out), "--device", "cuda")
    assert r.returncode == 0, r.stderr
    check_output(out, made, extra)


def test_explain_sass_entry_point():
    r = _dqgen("explain", "awq_int4_fp16", "--sass", "--json", "--words", "2000")
    assert r.returncode == 0, r.stderr
    per8 = json.loads(r.stdout)["sass_per_8"]
    assert set(per8) == {"sm_80", "sm_90"} and all(v > 0 for v in per8.values()), per8


def test_every_entry_point_of_one_spec_runs():
    """Launch bookkeeping for the sanitizer script: it must reach every variant of every spec."""
    from dqgen.kernels.dequant import variants

    sys.path.insert(0, str(ROOT / "devtools"))
    try:
        from sanitize_entry_points import launch_all
    finally:
        sys.path.pop(0)
    launched = launch_all([SPECS[0]])
    assert launched == len(variants(_spec(SPECS[0], None if load_spec(SPECS[0]).act_order else -1)))
