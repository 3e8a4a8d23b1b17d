"""devtools/host_overhead.py's arithmetic and table on made-up timings (the timing itself needs a GPU: the lead runs
it there): medians of rounds, ratios to the torch int4 row, the 1.2x mark on dqgen rows only, the JSON record."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("host_overhead", ROOT / "devtools" / "host_overhead.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ho = _script()


def test_rows_are_medians_of_rounds_divided_by_the_reference_median() -> None:
    rounds = {
        ho.REFERENCE: [10.0, 9.0, 50.0, 11.0, 10.0],  # median 10 (the outlier round does not move it)
        "F.linear": [17.0, 16.0, 18.0],
        "k.matmul(x, w)": [12.0, 11.0, 14.0, 11.5, 13.0],  # median 12 -> 1.2: within
        "QuantLinear.forward": [12.5, 12.1, 99.0],  # median 12.5 -> 1.25: not within
    }
    rows = ho.summarize(rounds)
    assert [r["impl"] for r in rows] == list(rounds)
    by = {r["impl"]: r for r in rows}
    assert by[ho.REFERENCE]["us_per_call"] == 10.0 and by[ho.REFERENCE]["ratio_to_torch_int4"] == 1.0
    assert by["F.linear"]["us_per_call"] == 17.0 and by["F.linear"]["ratio_to_torch_int4"] == 1.7
    assert by["k.matmul(x, w)"]["ratio_to_torch_int4"] == 1.2
    assert by["QuantLinear.forward"]["ratio_to_torch_int4"] == 1.25
    assert by["QuantLinear.forward"]["us_rounds"] == [12.5, 12.1, 99.0]
    assert [ho.within_bound(by[n]) for n in rounds] == [None, None, True, False]


def test_missing_reference_or_empty_row_is_an_error() -> None:
    with pytest.raises(ValueError, match="reference row"):
        ho.summarize({"F.linear": [1.0]})
    with pytest.raises(ValueError, match="no figures for 'x'"):
        ho.summarize({ho.REFERENCE: [1.0], "x": []})


def test_markdown_table_has_one_line_per_row() -> None:
    rows = ho.summarize({ho.REFERENCE: [9.8], "torch.mul": [7.8], "w8a8.matmul": [19.0]})
    table = ho.markdown(rows).splitlines()
    assert table[0].startswith("| impl | us per call | ratio to torch int4 | within 1.2x |")
    assert table[2] == f"| {ho.REFERENCE} | 9.8 | 1.00 |  |"
    assert table[3] == "| torch.mul | 7.8 | 0.80 |  |"
    assert table[4] == "| w8a8.matmul | 19.0 | 1.94 | no |"
    assert len(table) == 5


def test_record_is_the_header_and_the_rows_as_json(tmp_path: Path) -> None:
    from dqgen.core.files import write_json

    head = {"host": "h (cpu)", "gpu": "g", "date": "2026-11-27T00:00:00+00:00", "torch": "2.11"}
    rows = ho.summarize({ho.REFERENCE: [9.8, 10.0]})
    path = tmp_path / "host_overhead.json"
    write_json(path, ho.record(head, rows))
    doc = json.loads(path.read_text())
    assert {k: doc[k] for k in head} == head
    assert doc["rows"] == [{"impl": ho.REFERENCE, "us_per_call": 9.9, "ratio_to_torch_int4": 1.0,
                            "us_rounds": [9.8, 10.0]}]  # fmt: skip


def test_time_round_is_the_median_of_single_calls_and_syncs_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = iter(range(10**6))
    syncs: list[int] = []
    calls: list[int] = []
    # a call takes 1000 ns, except every 7th (10 us): the median stays 1 us; a sync takes 1 ms, never counted
    now = {"ns": 0}

    def clock() -> int:
        next(reads)
        return now["ns"]

    def call() -> None:
        calls.append(1)
        now["ns"] += 10_000 if len(calls) % 7 == 0 else 1000

    def sync() -> None:
        syncs.append(len(calls))
        now["ns"] += 1_000_000

    monkeypatch.setattr(ho.time, "perf_counter_ns", clock)
    us = ho.time_round(call, 2500, sync)
    assert us == 1.0 and len(calls) == 2500
    assert syncs == [1000, 2000, 2500]  # every 1000 calls and at the end, between timed calls


@pytest.mark.parametrize("argv", [["--calls", "0"], ["--rounds", "0"]])
def test_bad_counts_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        ho.main(argv)
    assert e.value.code == 2
