"""CPU tests of how dqgen times and chooses: the single-call method with a fake event clock, the tuner's
keep rule, the bench JSON record and report. The GPU side runs in the quick tier (test_gpu_quick.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dqgen.core.spec import load_spec
from dqgen.run.timing import EventBackend, keep_tuned, median_single_call_us
from dqgen.tools.baselines import field_shifts
from dqgen.tools.bench import (
    JSON_ROW_KEYS,
    Row,
    behind_triton,
    bench_document,
    rows_json,
    write_json,
    write_markdown,
)

ROOT = Path(__file__).resolve().parent.parent


class FakeGPU:
    """A device clock: a flush costs 1 ms and leaves L2 cold; a call costs its next listed time, plus
    0.5 ms when L2 is still warm from the previous call (so an unflushed call would be timed wrong)."""

    def __init__(self, costs_ms: list[float]) -> None:
        self.costs = list(costs_ms)
        self.now = 0.0
        self.cold = False
        self.log: list[str] = []

    def backend(self) -> EventBackend:
        def flush() -> None:
            self.now += 1.0
            self.cold = True
            self.log.append("flush")

        def record() -> float:
            self.log.append("event")
            return self.now

        return EventBackend(flush, record, lambda a, b: b - a, lambda: self.log.append("sync"))

    def call(self) -> None:
        self.now += self.costs.pop(0) + (0.0 if self.cold else 0.5)
        self.cold = False
        self.log.append("call")


def test_single_call_is_flushed_timed_alone_and_median():
    gpu = FakeGPU([9.0, 9.0, 0.010, 0.012, 0.011, 5.0, 0.013])  # two warm-ups, then an outlier among five
    us = median_single_call_us(gpu.call, gpu.backend(), warmup=2, calls=5)
    assert us == pytest.approx(12.0)  # the median of 10, 12, 11, 5000, 13 us; no flush time, no warm-up
    timed = gpu.log[gpu.log.index("sync") + 1 :]
    assert timed[:4] == ["flush", "event", "call", "event"] and timed.count("flush") == 5
    assert timed[-1] == "sync" and not gpu.costs


def test_single_call_needs_a_timed_call():
    gpu = FakeGPU([])
    with pytest.raises(ValueError, match="calls: expected at least 1"):
        median_single_call_us(gpu.call, gpu.backend(), warmup=0, calls=0)


def test_keep_tuned_keeps_the_default_unless_clearly_faster():
    assert keep_tuned("d", {"d": 100.0, "a": 98.5, "b": 101.0}) == "d"  # 1.5% faster: noise, keep the default
    assert keep_tuned("d", {"d": 100.0, "a": 97.9, "b": 90.0}) == "b"  # the fastest, 10% ahead
    assert keep_tuned("d", {"d": 100.0, "a": 98.0}) == "a"  # exactly 2%: kept
    assert keep_tuned("d", {"d": 90.0, "a": 95.0}) == "d"  # the default is fastest
    assert keep_tuned("d", {"d": 100.0, "a": 96.0}, margin=0.05) == "d"
    with pytest.raises(ValueError, match="default variant 'd' was not timed"):
        keep_tuned("d", {"a": 1.0})


def _rows() -> list[Row]:
    return [
        Row("awq_int4_fp16", 4096, 11008, 128, "dqgen tuned", 42.0, 2700.0, 88.0, True, 40.0, "awq_v1"),
        Row("awq_int4_fp16", 4096, 11008, 128, "triton", 40.0, 2800.0, 91.0, True, 39.0, ""),
        Row("awq_int4_fp16", 8192, 28672, 128, "dqgen tuned", 200.0, 2900.0, 96.0, True, None, "awq_v2"),
        Row("awq_int4_fp16", 8192, 28672, 128, "triton", 210.0, 2800.0, 93.0, True, None, ""),
        Row("awq_int4_fp16", 8192, 28672, 128, "copy, same bytes", 220.0, 2600.0, 88.0, None, None, ""),
    ]


def test_json_record_schema_and_atomic_write(tmp_path):
    doc = bench_document("NVIDIA H100 80GB HBM3", 3000.0, _rows(), when="2026-11-23 21:00 UTC")
    path = tmp_path / "bench" / "dequant.json"
    write_json(path, doc)
    back = json.loads(path.read_text())
    assert list(back)[:4] == ["gpu", "date", "copy_gbps", "method"]
    assert back["gpu"] == "NVIDIA H100 80GB HBM3" and back["copy_gbps"] == 3000.0
    assert "L2 flush" in back["method"]
    assert [list(r)[:8] for r in back["rows"]] == [list(JSON_ROW_KEYS)] * 5
    assert back["rows"][4]["equal"] is None and back["rows"][0]["graph_us"] == 40.0
    with pytest.raises(TypeError):  # a value JSON cannot hold: the old record stays whole, no temp file left
        write_json(path, doc | {"bad": object()})
    assert json.loads(path.read_text()) == back and sorted(p.name for p in path.parent.iterdir()) == ["dequant.json"]


def test_rows_json_keeps_extra_fields_after_the_required_ones():
    row = rows_json(_rows()[:1])[0]
    assert list(row) == [*JSON_ROW_KEYS, "gbps", "graph_us", "variant"]


def test_behind_triton_names_only_shapes_where_dqgen_is_slower():
    lines = behind_triton(_rows())
    assert len(lines) == 1 and lines[0].startswith("awq_int4_fp16 4096x11008 G=128: dqgen 42.0 us")


def test_markdown_report_has_both_columns_and_the_behind_list(tmp_path):
    md = tmp_path / "performance.md"
    over = {
        "awq_int4_fp16": dict(
            tiny_K=128,
            tiny_N=64,
            host_us_call=4.2,
            host_us_torch_mul=3.1,
            big_K=4096,
            big_N=4096,
            flushed_us_call=16.0,
            flushed_us_prepared=15.8,
            pct_diff=1.3,
        )
    }
    comp = {
        "awq_int4_fp16": dict(
            cold_compile_s=0.1,
            cold_first_call_s=0.4,
            warm_compile_s=0.1,
            warm_first_call_s=0.004,
            build_cold_s=7.5,
            build_cached_s=2.5,
            build_cold_steps_s={"proof": 1.5},
            build_cached_steps_s=None,
        )
    }
    write_markdown(md, "H100", 3000.0, _rows(), overhead=over, compile_s=comp, when="2026-11-23")
    text = md.read_text()
    assert "| awq_int4_fp16 | 4096x11008 | 128 | dqgen tuned | 42.0 | 2700 | 88.0 | 40.0 | yes | awq_v1 |" in text
    assert "| awq_int4_fp16 | 8192x28672 | 128 | copy, same bytes | 220.0 | 2600 | 88.0 |  | n/a |  |" in text
    assert "- awq_int4_fp16 4096x11008 G=128: dqgen 42.0 us (88.0% of copy) vs triton 40.0 us (91.0%)" in text
    assert "| awq_int4_fp16 | 128x64 | 4.2 | 3.1 | 16.0 | 15.8 | +1.3% |" in text
    assert "| 7.50 | 2.50 | proof 1.50 | (none in --json) |" in text


def test_field_shifts_awq_and_sequential():
    # AWQ stores element e of 8 in nibble [0, 4, 1, 5, 2, 6, 3, 7][e] (AutoAWQ's reverse order)
    assert field_shifts(load_spec("awq_int4_fp16")) == [0, 16, 4, 20, 8, 24, 12, 28]
    assert field_shifts(load_spec("int8_fp16")) == [0, 8, 16, 24]


def test_subprocess_json_is_found_after_other_output(tmp_path):
    """`dqgen build --json` prints an indented document; anything printed before it is skipped."""
    import sys

    from dqgen.tools.bench import _run_json

    script = tmp_path / "s.py"
    script.write_text("print('warning: x')\nprint('{not json')\nprint('{\\n \"steps\": {\"proof\": 1}\\n}')\n")
    doc, wall = _run_json([sys.executable, str(script)], None)
    assert doc == {"steps": {"proof": 1}} and wall > 0
    script.write_text("print(1)\n")
    with pytest.raises(RuntimeError, match="printed no JSON: stdout '1"):
        _run_json([sys.executable, str(script)], None)


def test_confirm_tuned_keeps_only_a_repeated_win():
    from dqgen.run.timing import confirm_tuned

    def clock(times: dict[str, list[float]]):
        it = {k: iter(v) for k, v in times.items()}
        return lambda name: next(it[name])

    # a steady 5% win: kept
    assert confirm_tuned("d", "c", clock({"d": [100.0] * 5, "c": [95.0] * 5}))
    # the screen's 5% win was one lucky sample: in the alternating rounds it loses or ties
    assert not confirm_tuned("d", "c", clock({"d": [100.0, 100, 100, 100, 100], "c": [95.0, 101, 100, 103, 99]}))
    # one outlier round does not decide either way: the median of the ratios does
    assert confirm_tuned("d", "c", clock({"d": [100.0, 100, 100, 100, 100], "c": [97.0, 150, 96, 97, 97]}))
    assert not confirm_tuned("d", "d", clock({"d": [1.0] * 10}))  # the default needs no confirming
    with pytest.raises(ValueError, match="rounds"):
        confirm_tuned("d", "c", clock({}), rounds=0)


def test_confirm_tuned_alternates_the_order():
    from dqgen.run.timing import confirm_tuned

    seen: list[str] = []
    confirm_tuned("d", "c", lambda name: seen.append(name) or 1.0, rounds=4)
    assert seen == ["d", "c", "c", "d", "d", "c", "c", "d"]
