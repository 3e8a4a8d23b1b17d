"""dqgen bench --matmul on the CPU: the floor arithmetic (hand-computed), the JSON record and the markdown section
written from fake rows, the targets' verdicts, the flags refused before any GPU work, the PNG drawn from a fixture."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dqgen.cli import app
from dqgen.core.files import write_json
from dqgen.core.spec import load_spec
from dqgen.tools import bench_matmul as bm
from dqgen.tools.report import write_section


def test_weight_bytes_and_floor_by_hand() -> None:
    # awq int4, 8192 x 28672, group 128: qweight [8192, 3584] int32, scales [64, 28672] fp16, qzeros [64, 3584] int32
    nbytes = bm.weight_bytes(load_spec("awq_int4_fp16"), 8192, 28672, 64)
    assert nbytes == 8192 * 3584 * 4 + 64 * 28672 * 2 + 64 * 3584 * 4 == 122_028_032
    # at 3006 GB/s: 122028032 / 3.006e9 s = 40.595 us (research/gemm.md measured this floor as 40.6 us)
    assert bm.floor_us(nbytes, 3006.0) == pytest.approx(40.5948, abs=1e-3)
    assert bm.pct_floor(40.6, 50.75) == pytest.approx(80.0)
    # NVFP4 4096 x 4096: qweight [512, 4096] int32, e4m3 scales [256, 4096] one byte each, fp32 global scale
    assert bm.weight_bytes(load_spec("nvfp4_fp16"), 4096, 4096, 256) == 512 * 4096 * 4 + 256 * 4096 + 4
    # GPTQ 3-bit in 3-word blocks, per-128 fp16 scales, no zeros: [4096 * 3 / 32, 1024] int32
    assert bm.weight_bytes(load_spec("gptq_int3_fp16"), 4096, 1024, 32) == 384 * 1024 * 4 + 32 * 1024 * 2
    # HQQ-style dense bf16 zeros [G, N]
    assert bm.weight_bytes(load_spec("uint3_float_zeros_bf16"), 128, 64, 2) == 12 * 64 * 4 + 2 * 64 * 2 * 2


def _row(impl: str, M: int, us: float, K: int = 8192, N: int = 28672, spec: str = "awq_int4_fp16") -> bm.MatmulRow:
    floor = 40.0
    return bm.MatmulRow(impl, spec, spec.rsplit("_", 1)[-1], M, K, N, us, bm.pct_floor(floor, us), 1e-4, floor, 64)


def _doc(rows: list[bm.MatmulRow]) -> dict:
    return bm.matmul_document("NVIDIA H100 80GB HBM3", 3000.0, rows, "do_bench", when="2026-11-23 23:00 UTC")


def test_json_record_keys_and_round_trip(tmp_path) -> None:
    rows = [_row("dqgen", 1, 50.0), _row("cublas dense", 1, 170.0)]
    doc = _doc(rows)
    assert list(doc)[:3] == ["gpu", "date", "copy_gbps"]
    assert list(doc["rows"][0])[:9] == ["impl", "spec", "dtype", "M", "K", "N", "us", "pct_floor", "rel_err"]
    assert doc["rows"][0]["pct_floor"] == pytest.approx(80.0)  # 40 us floor / 50 us
    assert doc["rows"][1]["pct_floor"] == pytest.approx(100 * 40 / 170)
    path = tmp_path / "bench" / "matmul.json"
    write_json(path, doc)
    assert bm.load_document(path) == json.loads(json.dumps(doc))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read the matmul record"),
        ("{not json", "not JSON"),
        ('{"gpu": "x", "date": "d", "rows": []}', "expected a JSON object with gpu, date, copy_gbps, rows"),
        ('{"gpu": "x", "date": "d", "copy_gbps": 1, "rows": []}', "'rows' must be a non-empty list"),
        ('{"gpu": "x", "date": "d", "copy_gbps": 1, "rows": [{"impl": "dqgen"}]}', "row 0 lacks spec, dtype, M"),
    ],
)
def test_bad_record_is_one_line_naming_the_file(tmp_path, text, message) -> None:
    path = tmp_path / "matmul.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError) as e:
        bm.load_document(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value) and "\n" not in str(e.value)


def test_targets_met_and_missed_with_figures() -> None:
    rows = [
        _row("dqgen", 1, 48.0),  # 40 / 48 = 83.3%: met
        _row("dqgen", 16, 57.6),  # 57.6 / 48 = 1.20x: missed
        _row("dqgen", 4, 50.0),
        _row("dqgen", 1, 60.0, K=28672, N=8192),  # 66.7%: missed
        _row("dqgen", 2, 66.0, K=28672, N=8192),  # 1.10x: met
        _row("dqgen", 1, 7.5, K=4096, N=6144),  # <= 8 us: met
        _row("cublas dense", 1, 170.0),  # not dqgen: never a target row
    ]
    lines = "\n".join(bm.targets(_doc(rows)))
    assert "M = 1, awq_int4_fp16 8192x28672: >= 80% of the floor: met (83.3%, 48.0 us against 40.0 us)" in lines
    assert "M = 1, awq_int4_fp16 28672x8192: >= 80% of the floor: MISSED (66.7%" in lines
    assert "awq_int4_fp16 4096x28672: >= 80% of the floor: not measured in this run" in lines
    assert "M = 1, awq_int4_fp16 4096x6144: <= 8 us: met (7.5 us)" in lines
    assert (
        "M = 2..16, awq_int4_fp16 8192x28672: <= 1.15x the M = 1 time: MISSED (worst M = 16: 57.6 us = 1.20x" in lines
    )
    assert "M = 2..16, awq_int4_fp16 28672x8192: <= 1.15x the M = 1 time: met (worst M = 2: 66.0 us = 1.10x" in lines
    assert bm.targets(_doc([_row("cublas dense", 1, 170.0)])) == [
        "No `dqgen` rows in this run: no target is evaluated."
    ]


def test_bf16_against_fp16_worst_ratio() -> None:
    rows = [
        _row("dqgen", 1, 50.0, spec="awq_int4_fp16"),
        _row("dqgen", 1, 52.0, spec="awq_int4_bf16"),  # 1.04x
        _row("dqgen", 16, 50.0, spec="awq_int4_fp16"),
        _row("dqgen", 16, 60.0, spec="awq_int4_bf16"),  # 1.20x: the worst
    ]
    lines = "\n".join(bm.targets(_doc(rows)))
    assert "bf16 at the speed of fp16 (item 1), worst case: awq_int4_bf16 8192x28672 M = 16: 60.0 us vs" in lines
    assert "awq_int4_fp16 50.0 us (1.20x)" in lines


def test_fp8_and_int8_targets_compare_fractions() -> None:
    rows = [
        _row("dqgen", 1, 50.0, spec="awq_int4_fp16"),  # 80%
        _row("dqgen", 1, 54.0, spec="fp8_e4m3_fp16"),  # 74.1% >= 0.9 * 80 = 72: met
        _row("dqgen", 1, 45.0, spec="int8_fp16"),  # 88.9%: met
    ]
    lines = "\n".join(bm.targets(_doc(rows)))
    assert "fp8_e4m3_fp16, M = 1: within 10% of int4's fraction of floor: met (worst 8192x28672: 74.1% vs" in lines
    assert "int8 (W8A16) int8_fp16, M = 1: >= 80% of its floor: met (lowest 88.9%" in lines
    rows[1] = _row("dqgen", 1, 60.0, spec="fp8_e4m3_fp16")  # 66.7% < 72
    assert "fp8_e4m3_fp16, M = 1: within 10% of int4's fraction of floor: MISSED" in "\n".join(bm.targets(_doc(rows)))


def test_markdown_section_keeps_other_sections(tmp_path) -> None:
    doc_path = tmp_path / "performance.md"
    write_section(doc_path, "dequant", "dequant figures")
    write_section(doc_path, "gru", "gru figures")
    bm.write_markdown(doc_path, _doc([_row("dqgen", 1, 50.0), _row("torch int4", 1, 69.6, spec="awq_int4_bf16")]))
    text = doc_path.read_text()
    assert "dequant figures" in text and "gru figures" in text
    assert text.index("dequant figures") < text.index("section:matmul:begin") < text.index("gru figures")
    # one line per spec, shape and M; a column per implementation that ran (dqgen, torch int4), blank where absent
    assert "| spec | K x N | M | floor us | dqgen | torch int4 | rel_err |" in text
    assert "| awq_int4_fp16 | 8192x28672 | 1 | 40.0 | 50.0 (80%) |  | 1.0e-04 |" in text
    assert "| awq_int4_bf16 | 8192x28672 | 1 | 40.0 |  | 69.6 (57%) | 1.0e-04 |" in text
    assert "3000 GB/s" in text and "### Targets (issue 13: M <= 16)" in text
    assert "issue 14" not in text  # no row past M = 16: no GEMM target


def test_gemm_targets_judge_the_gemm_and_the_dispatcher_apart() -> None:
    rows = [
        _row("dqgen gemm", 64, 80.0),
        _row("cublas dense", 64, 170.0),
        _row("dqgen gemm", 128, 180.0),  # 1.06x cuBLAS: the worst of M <= 128, missed
        _row("cublas dense", 128, 170.0),
        _row("dqgen gemm", 256, 199.0),  # <= cuBLAS at 256: fine
        _row("cublas dense", 256, 200.0),
        _row("dequant + cublas", 256, 380.0),
        _row("dqgen gemm", 1024, 780.0),  # 1.0955x cuBLAS at 1024: within 1.1x
        _row("cublas dense", 1024, 712.0),
        _row("dequant + cublas", 1024, 840.0),
        _row("dqgen", 1024, 840.0),  # the dispatch took dequantize + cuBLAS: not a GEMM row, not judged as one
        _row("dqgen", 4096, 2780.0),  # the dispatch's path is 2.8% slower than the best: within 3%
        _row("dqgen gemm", 4096, 9600.0),
        _row("dequant + cublas", 4096, 2704.0),
    ]
    lines = bm.gemm_targets(_doc(rows))
    where = "awq_int4_fp16 8192x28672"
    assert (
        f"- M = 64..128, {where}: the GEMM faster than cuBLAS dense: MISSED (worst M = 128: 180.0 us = 1.06x cuBLAS)"
        in lines
    )
    text = "\n".join(lines)
    assert (
        f"- M = 256..1024, {where}: the GEMM <= cuBLAS dense at M = 256, <= 1.1x it beyond: met (worst M = 1024: 1.10x"
        in (text)
    )
    assert f"- M = 256..1024, {where}: the GEMM faster than dequantize + cuBLAS: met (worst M = 1024: 0.93x)" in lines
    assert f"- M = 4096, {where}: the dispatcher within 3% of the best path: met (2780.0 us, best 2704.0 us)" in lines
    assert f"- M = 64, {where}: the GEMM ahead of humming's 87.6 us (the issue's H100 figure): met (80.0 us)" in lines
    rows[4] = _row("dqgen gemm", 256, 201.0)  # above cuBLAS at M = 256 (no 10% slack there)
    rows[11] = _row("dqgen", 4096, 2800.0)  # 3.6% over the best
    text = "\n".join(bm.gemm_targets(_doc(rows)))
    assert "<= 1.1x it beyond: MISSED (worst M = 256: 1.00x cuBLAS)" in text
    assert "within 3% of the best path: MISSED (2800.0 us, best 2704.0 us)" in text
    assert bm.gemm_targets(_doc([_row("dqgen", 16, 50.0), _row("cublas dense", 16, 170.0)])) == []


def test_merge_keeps_rows_the_new_run_did_not_measure() -> None:
    old = _doc([_row("dqgen", 1, 50.0), _row("dqgen", 64, 90.0)])
    new = bm.matmul_document(
        "NVIDIA H100 80GB HBM3", 3010.0, [_row("dqgen", 64, 80.0)], "do_bench", when="2026-11-24 02:00 UTC"
    )
    merged = bm.merge_documents(old, new)
    assert sorted((r["M"], r["us"]) for r in merged["rows"]) == [(1, 50.0), (64, 80.0)]  # M = 64 re-measured
    assert merged["copy_gbps"] == 3010.0 and merged["date"] == "2026-11-24 02:00 UTC"
    assert "1 rows from the run of 2026-11-23 23:00 UTC (copy 3000 GB/s)" in merged["method"]
    assert bm.merge_documents(_doc([_row("dqgen", 64, 90.0)]), new) == new  # nothing left of the old run
    other_gpu = bm.matmul_document("NVIDIA H200", 4000.0, [_row("dqgen", 64, 70.0)], "do_bench")
    with pytest.raises(ValueError, match="the record is from 'NVIDIA H100 80GB HBM3', this run from 'NVIDIA H200'"):
        bm.merge_documents(new, other_gpu)


FIXTURE = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "date": "2026-11-23 23:00 UTC",
    "copy_gbps": 3006.0,
    "rows": [
        {"impl": i, "spec": s, "dtype": s[-4:], "M": m, "K": K, "N": N, "us": us * (1 + m / 64), "pct_floor": 0.0,
         "rel_err": 1e-4, "floor_us": fl, "group": 128}
        for K, N, fl in ((4096, 6144, 4.3), (8192, 28672, 40.6))
        for s in ("awq_int4_fp16", "awq_int4_bf16")
        for i, us in (("cublas dense", 6 * fl), ("dequant + cublas", 9 * fl))
        for m in (1, 2, 4, 8, 16)
    ],
}  # fmt: skip


@pytest.mark.skipif(not bm.plot_available(), reason="matplotlib is not installed")
def test_plot_from_fixture_json(tmp_path) -> None:
    record = tmp_path / "matmul.json"
    record.write_text(json.dumps(FIXTURE))
    r = CliRunner().invoke(app, ["bench", "--plot", str(record)])
    assert r.exit_code == 0, r.output
    png = tmp_path / "matmul.png"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    assert img.shape[1] > 2 * img.shape[0] / 2  # two panels side by side
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--matmul", "--m", "0"], "error: [--m] got '0'; expected comma-separated positive integers"),
        (["--matmul", "--m", "1,x"], "error: [--m] got '1,x'"),
        (["--m", "1"], "error: [--m] and [--merge] apply to --matmul only"),
        (["--merge"], "error: [--m] and [--merge] apply to --matmul only"),
        (
            ["--w8a8", "--matmul"],
            "error: --w8a8 times its own shapes and implementations; it takes --docs and --record",
        ),
        (["--w8a8", "awq_int4_fp16"], "error: --w8a8 times its own shapes and implementations"),
        (["--matmul", "--merge"], "error: --merge: docs/bench/matmul.json: cannot read the matmul record"),
        (["--matmul", "--gru"], "error: --matmul and --gru are separate benches"),
        (["--matmul", "--shapes", "4096x4096:64"], "error: [--shapes] with --matmul takes KxN only"),
        (["--matmul", "--shapes", "4096by4096"], "error: [--shapes] got '4096by4096'"),
        (["--matmul", "--impls", "dqgen,marlin"], "error: [--impls] got 'marlin'; with --matmul expected a subset of"),
        (["--matmul", "no_such_spec"], "error: no_such_spec: no such spec file"),
        (["--plot", "missing.json"], "error: --plot: missing.json: cannot read the matmul record"),
        (["--plot", "x.json", "--matmul"], "error: --plot: draws the PNG from a JSON record alone"),
    ],
)
def test_flags_refused_before_the_gpu(monkeypatch, tmp_path, args, message) -> None:
    from dqgen.run import device as dev

    monkeypatch.setattr(dev, "gpu_available", lambda: True)  # the checks must come before any GPU work
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["bench", *args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr
    assert not (tmp_path / "docs").exists()  # nothing written
