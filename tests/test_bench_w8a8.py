"""The W8A8 section of the report (dqgen.tools.bench_w8a8): issue 15's targets judged from hand-made records whose
verdicts are known, the table rendered from the record alone, and bad records refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dqgen.tools import bench_w8a8 as bw
from dqgen.tools.report import read_sections


def _row(impl: str, m: int, us: float, k: int = 4096, n: int = 4096, exact: bool | None = None) -> dict:
    floor = n * k / (3000.0 * 1e3)  # µs at 3000 GB/s
    return {"impl": impl, "M": m, "K": k, "N": n, "us": us, "pct_floor": round(100 * floor / us, 1), "exact": exact}


def _gemm_doc(rows: list[dict]) -> dict:
    return {"device": "test GPU", "method": "m", "copy_GBps": 3000.0, "floor": "f", "exact": "e", "rows": rows}


FLOOR_US = 4096 * 4096 / 3e6  # 5.59 µs


def test_small_m_targets_follow_the_floor_and_int_mm_plus_scaling() -> None:
    fast = FLOOR_US / 0.9  # 90% of the floor
    slow = FLOOR_US / 0.5  # 50%
    doc = _gemm_doc(
        [
            _row(bw.DQ_INT8, 1, fast, exact=True),
            _row(bw.DQ_INT8, 64, slow, exact=True),
            _row(bw.INT_MM_SCALED, 64, slow - 1.0),  # torch is 1 µs faster at M = 64
        ]
    )
    lines = bw.gemm_targets(doc)
    assert any("M <= 64: >= 80% of the floor: MISSED (lowest 50.0% at M = 64" in line for line in lines)
    assert any("faster than _int_mm + scaling: MISSED (M = 64:" in line for line in lines)
    doc["rows"][1] = _row(bw.DQ_INT8, 64, fast, exact=True)
    lines = bw.gemm_targets(doc)
    assert any("M <= 64: >= 80% of the floor: met" in line for line in lines)
    assert any("faster than _int_mm + scaling: met" in line for line in lines)


def test_large_m_targets_compare_with_int_mm_and_dense() -> None:
    doc = _gemm_doc(
        [
            _row(bw.DQ_INT8, 256, 100.0, exact=True),
            _row(bw.INT_MM, 256, 79.0),  # dqgen at 0.79x: missed
            _row(bw.DENSE, 256, 101.0),  # dqgen faster: met
        ]
    )
    lines = bw.gemm_targets(doc)
    assert "- 4096x4096, M = 256: >= 0.8x _int_mm's speed: MISSED (0.79x: 100.0 vs 79.0 us)" in lines
    assert "- 4096x4096, M = 256: faster than cuBLAS fp16 dense: met (100.0 vs 101.0 us)" in lines
    doc["rows"][1] = _row(bw.INT_MM, 256, 80.0)
    assert "- 4096x4096, M = 256: >= 0.8x _int_mm's speed: met (0.80x: 100.0 vs 80.0 us)" in bw.gemm_targets(doc)


def test_activation_bar_applies_from_4096_squared() -> None:
    act = {
        "copy_GBps": 3000.0,
        "rows": [
            {"impl": "dqgen", "M": 16, "K": 4096, "us": 5.0, "pct_copy": 1.0, "exact": True},  # too small: no bar
            {"impl": "dqgen", "M": 4096, "K": 4096, "us": 20.0, "pct_copy": 84.9, "exact": True},
            {"impl": "dqgen", "M": 8192, "K": 8192, "us": 70.0, "pct_copy": 85.0, "exact": True},
            {"impl": "torch eager", "M": 8192, "K": 8192, "us": 900.0, "pct_copy": 5.0, "exact": True},
        ],
    }
    lines = bw.act_targets(act)
    assert lines == [
        "- quantize_activations 4096x4096: >= 85% of copy: MISSED (84.9%, 20.0 us)",
        "- quantize_activations 8192x8192: >= 85% of copy: met (85.0%, 70.0 us)",
    ]


def test_section_is_written_from_the_records(tmp_path: Path) -> None:
    gemm = _gemm_doc(
        [_row(bw.DQ_INT8, 1, 10.0, exact=True), _row(bw.INT_MM, 64, 7.0), _row(bw.DQ_INT8, 64, 9.0, exact=False)]
    )
    gp = tmp_path / "w8a8.json"
    gp.write_text(json.dumps(gemm))
    docs = tmp_path / "performance.md"
    bw.write(docs, gp, tmp_path / "missing_act.json")  # no quantizer record: the GEMM part alone
    body = read_sections(docs)["w8a8"]
    assert "| 4096x4096 | 1 | 10.0 (56%) | n/a | yes |" in body
    assert "| 4096x4096 | 64 | 9.0 (62%) | 7.0 (80%) | NO |" in body  # an inexact output shows
    assert "Activation quantization" not in body


@pytest.mark.parametrize(
    ("text", "match"),
    [("{not json", "not JSON"), ('{"rows": []}', "expected a JSON object with copy_GBps"), (None, "cannot read")],
)
def test_bad_record_is_one_line_naming_the_file(tmp_path: Path, text: str | None, match: str) -> None:
    p = tmp_path / "w8a8.json"
    if text is not None:
        p.write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        bw.load(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_w4a8_rows_are_a_column_judged_against_int8_from_m_128(tmp_path: Path) -> None:
    """Issue 24 item 3's part in this record: W4A8 faster than dqgen int8 at M >= 128 (not at decode M, whose bar
    is the W4A16 path's); an inexact W4A8 row turns the row's verdict to NO."""
    doc = _gemm_doc(
        [
            _row(bw.DQ_INT8, 16, 10.0, exact=True),
            _row(bw.DQ_W4A8, 16, 12.0, exact=True),  # slower, but at decode M: no int8 bar
            _row(bw.DQ_INT8, 256, 30.0, exact=True),
            _row(bw.DQ_W4A8, 256, 25.0, exact=True),
            _row(bw.DQ_INT8, 1024, 80.0, exact=True),
            _row(bw.DQ_W4A8, 1024, 81.0, exact=False),
        ]
    )
    assert bw.w4a8_targets(doc) == [
        "- 4096x4096, M = 256: W4A8 faster than dqgen int8: met (25.0 vs 30.0 us)",
        "- 4096x4096, M = 1024: W4A8 faster than dqgen int8: MISSED (81.0 vs 80.0 us)",
    ]
    gp = tmp_path / "w8a8.json"
    gp.write_text(json.dumps(doc))
    docs = tmp_path / "performance.md"
    bw.write(docs, gp, None)
    body = read_sections(docs)["w8a8"]
    assert "| K x N | M | dqgen int8 | dqgen w4a8 | dqgen exact |" in body
    assert "| 4096x4096 | 256 | 30.0 (19%) | 25.0 (22%) | yes |" in body
    assert "| 4096x4096 | 1024 | 80.0 (7%) | 81.0 (7%) | NO |" in body
    assert "W4A8 against int8 W8A8 (issue 24 item 3" in body
