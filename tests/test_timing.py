"""CPU tests of how dqgen times and chooses: the single-call method with a fake event clock, the tuner's
keep rule, the bench JSON record and report. The GPU side runs in the quick tier (test_gpu_quick.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dqgen.core.files import write_json
from dqgen.core.spec import load_spec
from dqgen.run import timing
from dqgen.run.timing import EventBackend, Timed, do_bench_us, keep_tuned, method
from dqgen.tools.baselines import field_shifts
from dqgen.tools.bench import (
    JSON_ROW_KEYS,
    Row,
    behind_triton,
    bench_document,
    rows_json,
    write_markdown,
)

ROOT = Path(__file__).resolve().parent.parent


class FakeGPU:
    """A device clock: a flush costs 1 ms and leaves L2 cold; call i costs ``cost(i)`` ms, plus 0.5 ms when L2 is
    still warm from the previous call (so an unflushed call would be timed wrong)."""

    def __init__(self, cost: Callable[[int], float]) -> None:
        self.cost = cost
        self.now = 0.0
        self.cold = False
        self.calls = 0
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
        self.now += self.cost(self.calls) + (0.0 if self.cold else 0.5)
        self.calls += 1
        self.cold = False
        self.log.append("call")


def test_do_bench_procedure_flushes_times_each_call_alone_and_takes_the_median():
    # call 0 (first touch) is slow; call 10 (a timed one) is an outlier; the others take 10 us
    gpu = FakeGPU(lambda i: {0: 9.0, 10: 5.0}.get(i, 0.010))
    timed = do_bench_us(gpu.call, gpu.backend(), warmup_ms=3.0, rep_ms=15.0)
    # the estimate: 5 flushed calls of 1.010 ms each -> 2 warm-up calls (3 ms), 14 timed calls (15 ms)
    assert timed == Timed(us=pytest.approx(10.0), calls=14, cut=False)
    assert gpu.log[:3] == ["call", "sync", "event"] and gpu.log[3:14] == ["flush", "call"] * 5 + ["event"]
    assert gpu.log[14:17] == ["sync", "call", "call"]  # warm-up: unflushed, untimed
    rest = gpu.log[17:]
    assert rest == ["flush", "event", "call", "event"] * 14 + ["sync"] and gpu.calls == 1 + 5 + 2 + 14


def test_do_bench_times_at_least_one_call():
    gpu = FakeGPU(lambda i: 50.0)  # a call longer than both budgets
    assert do_bench_us(gpu.call, gpu.backend(), warmup_ms=3.0, rep_ms=15.0) == Timed(50_000.0, 1)


def test_a_variant_far_slower_than_the_bound_stops_after_the_probe():
    slow = FakeGPU(lambda i: 0.2)  # 200 us; bound 150 us
    timed = do_bench_us(slow.call, slow.backend(), 3.0, 15.0, cut_above_us=150.0, probe_calls=4)
    assert timed == Timed(pytest.approx(200.0), 4, cut=True)
    # the full run would have timed int(15 / 1.2) = 12 calls after int(3 / 1.2) = 2 warm-ups
    assert slow.calls == 1 + 5 + 2 + 4
    near = FakeGPU(lambda i: 0.14)  # under the bound: timed in full, the probe's calls counted in the median
    timed = do_bench_us(near.call, near.backend(), 3.0, 15.0, cut_above_us=150.0, probe_calls=4)
    assert timed == Timed(pytest.approx(140.0), int(15.0 / 1.14), cut=False)
    assert near.log[-1] == "sync" and near.log.count("sync") == 4  # first call, estimate, probe, rest


def _jitter(base_ms: float) -> Callable[[int], float]:
    """A call time with a repeating +-3% spread, as flushed calls have."""
    return lambda i: base_ms * (1.0 + 0.03 * ((i * 7) % 5 - 2) / 2)


def test_the_early_cut_spends_fewer_calls_and_never_changes_the_choice():
    """The tuner's screen with the cut and without it, on the same fake variants: the same variant is kept (or the
    default), and the variants that are 15% or more slower than the default stop after the probe."""
    from dqgen.run.tune import screen

    cases = [
        {"d": 0.100, "a": 0.097, "b": 0.115, "c": 0.160, "e": 0.250},  # a is 3% faster: kept
        {"d": 0.100, "a": 0.099, "b": 0.130, "c": 0.300},  # no clear win: the default stays
        {"d": 0.100, "a": 0.090, "b": 0.085, "c": 0.200},  # the fastest of two winners
    ]
    for cost in cases:
        spent: dict[str, dict[str, int]] = {"cut": {}, "full": {}}

        def timer(mode: str, cost: dict[str, float] = cost, spent: dict = spent) -> Callable:
            def time(name: str, bound: float | None) -> Timed:
                gpu = FakeGPU(_jitter(cost[name]))
                timed = do_bench_us(gpu.call, gpu.backend(), 3.0, 15.0, bound if mode == "cut" else None)
                spent[mode][name] = gpu.calls
                return timed

            return time

        with_cut = screen("d", timer("cut"), list(cost))
        full = screen("d", timer("full"), list(cost))
        choose = {
            mode: keep_tuned("d", {n: t.us for n, t in r.items()}) for mode, r in (("cut", with_cut), ("full", full))
        }
        assert choose["cut"] == choose["full"], cost
        slow = {n for n, ms in cost.items() if ms >= 1.15 * cost["d"]}
        assert {n for n, t in with_cut.items() if t.cut} == slow
        assert all(spent["cut"][n] < spent["full"][n] for n in slow)
        assert all(spent["cut"][n] == spent["full"][n] for n in cost if n not in slow)
    assert choose == {"cut": "b", "full": "b"}


def test_method_names_the_events_it_times_with(monkeypatch: pytest.MonkeyPatch):
    import importlib.util

    from dqgen.run import timing

    assert "driver-API CUDA events" in method("driver") and "L2 flush" in method("driver")
    assert "torch CUDA events" in method("torch") and method("triton").startswith("triton.testing.do_bench")
    with pytest.raises(ValueError, match="events: expected"):
        method("cupy")
    # without importing them: neither installed -> driver; torch only -> torch; triton -> do_bench itself
    for installed, events in (((), "driver"), (("torch",), "torch"), (("torch", "triton"), "triton")):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, installed=installed: name in installed or None)
        assert timing.events_here() == events and method() == method(events)


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


def test_graph_copies_pass_three_l2s() -> None:
    l2 = 50 << 20
    # 4096 x 4096 int4 (8 MB): 150 MB / 8 MB -> 19 copies; 4096 x 1024 (2 MB) would want 75: at most 64
    assert timing.graph_copies(4096 * 4096 // 2, l2) == 19
    assert timing.graph_copies(4096 * 1024 // 2, l2) == timing.MAX_COPIES == 64
    # 8192 x 28672 int4 (117 MB): 2 would pass 3 L2s; at least 4 (the graph's rotation)
    assert timing.graph_copies(8192 * 28672 // 2, l2) == timing.MIN_COPIES == 4
