"""dqgen bench --model-linears on the CPU: flags refused before any GPU work, the JSON record and the table from
stand-in rows (ratios computed by hand), the correctness verdict, tinygemm's quantizer on a weight it must give back
exactly; on a GPU, one small run of every implementation."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dqgen.cli import app
from dqgen.core.files import write_json
from dqgen.tools import bench_linears as bl


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "0"], "error: [--layers] got 0; expected 1..32 decoder layers"),
        (["--layers", "33"], "error: [--layers] got 33; expected 1..32"),
        (["--m", "0"], "error: [--m] got '0'; expected comma-separated positive integers"),
        (["--m", "1,x"], "error: [--m] got '1,x'"),
        (["--impls", "dqgen,marlin"], "error: [--impls] got 'marlin'; with --model-linears expected a subset of"),
        (["--replays", "2"], "error: [--replays] got 2; expected at least 3"),
        (["--batches", "1"], "error: [--batches] does not apply to --model-linears"),
        (["--runs", "3"], "error: [--runs] does not apply to --model-linears"),
        (["--merge", "--record", "missing.json"], "error: --merge: missing.json: cannot read the linears record:"),
        (["--docs", "report.md"], "error: --docs: report.md: expected only whole"),
        (["--docs", "adir"], "error: --docs: adir is not a file"),
        (["--merge", "--record", "rec.json", "--layers", "2"],
         "error: --merge: rec.json is of awq_int4_fp16 with 4 layers; this run awq_int4_fp16, 2"),
        (["--matmul"], "error: --model-linears is a bench of its own"),
        (["--model"], "error: --model and --model-linears are separate benches"),
        (["awq_int4_fp16"], "error: --model-linears times fixed Llama-3-8B shapes; got specs"),
        (["--shapes", "4096x4096"], "error: --model-linears times fixed Llama-3-8B shapes"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("gpu", [True, False])
def test_flags_refused_before_the_gpu(monkeypatch, tmp_path, args, message, gpu) -> None:
    from dqgen.run import device as dev

    monkeypatch.setattr(dev, "gpu_available", lambda: gpu)  # the same message with or without a GPU: checked first
    monkeypatch.chdir(tmp_path)
    report = "prose outside any section\n<!-- section:x:begin -->\nx\n<!-- section:x:end -->\n"
    (tmp_path / "report.md").write_text(report)
    (tmp_path / "adir").mkdir()
    write_json(tmp_path / "rec.json", _doc(ROWS))
    r = CliRunner().invoke(app, ["bench", "--model-linears", *args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr
    assert not (tmp_path / "docs").exists()


def test_e2e_flags_without_their_bench(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    for args in (["--layers", "2"], ["--replays", "5"], ["--batches", "1"], ["--modes", "eager"], ["--breakdown"]):
        r = CliRunner().invoke(app, ["bench", *args])
        assert r.exit_code == 2, r.output
        assert r.stderr.strip() == f"error: [{args[0]}] applies to --model or --model-linears only"


def test_valid_flags_then_no_gpu(monkeypatch, tmp_path) -> None:
    from dqgen.run import device as dev

    monkeypatch.setattr(dev, "gpu_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["bench", "--model-linears", "--layers", "2", "--m", "1,16", "--impls", "dqgen"])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == "error: dqgen bench --model-linears needs an NVIDIA GPU (none found)"
    assert not (tmp_path / "docs").exists()


def _row(impl: str, M: int, us: float, rel_err: float = 1e-4, without: str = "") -> bl.LinearsRow:
    return bl.LinearsRow(impl=impl, M=M, layers=4, us=us, us_rounds=[us, us + 1.0], rel_err=rel_err, without=without)


# the H200 figures at M = 1 and 64 (µs)
ROWS = [
    _row("fp16 cublas", 1, 552.0),
    _row("dqgen", 1, 322.0),
    _row("humming", 1, 340.0),
    _row("torch int4", 1, 317.0, rel_err=4e-3),
    _row("fp16 cublas", 64, 557.0),
    _row("dqgen", 64, 700.0),
    _row("humming", 64, 490.0),
]


def _doc(rows: list[bl.LinearsRow]) -> dict:
    return bl.document("NVIDIA H100 80GB HBM3", 4, rows, bl.method_text(20), when="2026-11-27 16:00 UTC")


def test_record_keys_schema_and_round_trip(tmp_path) -> None:
    doc = _doc(ROWS)
    assert list(doc["rows"][0])[:4] == ["impl", "M", "layers", "us"]  # the fields first
    assert doc["linears"][0] == ("q", 4096, 4096) and doc["linears"][-1] == ("down", 14336, 4096)
    assert sum(k * n for _, k, n in doc["linears"]) == 218_103_808  # Llama-3-8B's weights per decoder layer
    path = tmp_path / "bench" / "e2e_linears.json"
    write_json(path, doc)
    back = json.loads(path.read_text())
    assert bl.LinearsDocument.model_validate(back).model_dump() == bl.LinearsDocument.model_validate(doc).model_dump()
    assert back["gpu"] == "NVIDIA H100 80GB HBM3" and back["date"] == "2026-11-27 16:00 UTC"
    with pytest.raises(ValueError, match="extra"):
        bl.LinearsRow.model_validate(back["rows"][0] | {"speed": 1})


def test_table_columns_and_ratios_by_hand() -> None:
    text = bl.table(_doc(ROWS))
    assert "| M | fp16 cublas us | dqgen us | torch int4 us | humming us | dqgen / fp16 | torch int4 / fp16 |" in text
    # 322 / 552 = 0.583, 317 / 552 = 0.574, 340 / 552 = 0.616
    assert "| 1 | 552.0 | 322.0 | 317.0 | 340.0 | 0.58x | 0.57x | 0.62x |" in text
    # torch int4 not timed at 64: blank cells; 700 / 557 = 1.257, 490 / 557 = 0.880
    assert "| 64 | 557.0 | 700.0 |  | 490.0 | 1.26x |  | 0.88x |" in text
    no_base = bl.table(_doc([_row("dqgen", 1, 322.0)]))
    assert "| M | dqgen us |" in no_base and "/ fp16" not in no_base


def test_failed_rows_by_dtype_bound() -> None:
    rows = [
        _row("dqgen", 1, 1.0, rel_err=2.5e-3),  # over fp16's 2e-3
        _row("torch int4", 1, 1.0, rel_err=5e-3),  # bf16: within 1e-2
        _row("humming", 1, 1.0, rel_err=0.5),  # its own quantization: reported, not judged
        _row("fp16 cublas", 1, 1.0, rel_err=float("inf")),
    ]
    assert [r.impl for r in bl.failed(rows)] == ["dqgen", "fp16 cublas"]


def test_cli_writes_record_and_table_from_stand_in_rows(monkeypatch, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from dqgen.run import device as dev

    seen = {}

    def fake_bench(layers, ms, impls, replays, log, breakdown):
        seen.update(layers=layers, ms=ms, impls=impls, replays=replays, breakdown=breakdown)
        return [_row("fp16 cublas", 1, 552.0), _row("dqgen", 1, 322.0)]

    monkeypatch.setattr(dev, "gpu_available", lambda: True)
    monkeypatch.setattr(bl, "bench_linears", fake_bench)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Stand-in GPU")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["bench", "--model-linears", "--layers", "2", "--m", "1", "--replays", "5"])
    assert r.exit_code == 0, r.output
    assert seen == {"layers": 2, "ms": [1], "impls": list(bl.IMPLS), "replays": 5, "breakdown": False}
    doc = json.loads((tmp_path / "docs/bench/e2e_linears.json").read_text())
    assert doc["gpu"] == "Stand-in GPU" and doc["layers"] == 2 and len(doc["rows"]) == 2
    assert "| 1 | 552.0 | 322.0 | 0.58x |" in r.stdout

    r = CliRunner().invoke(app, ["bench", "--model-linears", "--m", "1", "--breakdown", "--record", "b.json"])
    assert r.exit_code == 0 and seen["breakdown"] is True, r.output

    monkeypatch.setattr(bl, "bench_linears", lambda *a, **k: [_row("dqgen", 1, 322.0, rel_err=0.1)])
    r = CliRunner().invoke(app, ["bench", "--model-linears", "--record", "x.json"])
    assert r.exit_code == 3 and "error: dqgen does not compute x @ W (rel_err 1.00e-01)" in r.stderr
    assert (tmp_path / "x.json").is_file()  # the record is kept to look at


def test_tinygemm_quantize_gives_a_grid_weight_back() -> None:
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    N, K, G = 8, 256, 128
    # every group on a 16-level grid that uses its two ends: scale and min are found exactly
    codes = torch.randint(0, 16, (N, K), generator=g)
    codes[:, 0], codes[:, 1], codes[:, 128], codes[:, 129] = 0, 15, 0, 15
    scale = torch.tensor([0.5, 0.25]).repeat(N, 1)  # [N, groups], powers of two: exact in bf16
    lo = torch.tensor([-4.0, -1.0]).repeat(N, 1)
    W = codes.float() * scale.repeat_interleave(G, 1) + lo.repeat_interleave(G, 1)
    q, sz, w_ref = bl.tinygemm_quantize(W, G)
    assert torch.equal(q, codes.to(torch.int32))
    assert torch.equal(w_ref, W)
    assert sz.shape == (K // G, N, 2) and sz.dtype == torch.bfloat16
    assert sz[0, 0].tolist() == [0.5, -4.0 + 8 * 0.5] and sz[1, 0].tolist() == [0.25, -1.0 + 8 * 0.25]
    with pytest.raises(ValueError, match="K = 200 is not a multiple of the group size 128"):
        bl.tinygemm_quantize(torch.zeros(4, 200), 128)


@pytest.mark.gpu
def test_every_implementation_small_run() -> None:
    rows = bl.bench_linears(1, [1, 16], ["fp16 cublas", "dqgen", "torch int4", "humming"], replays=3, log=print)
    impls = {r.impl for r in rows}
    assert {"fp16 cublas", "dqgen", "torch int4"} <= impls
    assert not bl.failed(rows)
    assert all(r.us > 0 and r.M in (1, 16) and r.layers == 1 and len(r.us_rounds) == bl.ROUNDS for r in rows)


# ----------------------------------------------------------------------------------------------- humming in --matmul


def test_humming_applies_to_awq_like_int4_g128_only() -> None:
    from dqgen.core.spec import load_spec
    from dqgen.tools import bench_matmul as bm

    assert bm.humming_applies(load_spec("awq_int4_fp16"), 32, 4096)  # 4096 / 32 = group 128
    assert bm.humming_applies(load_spec("awq_int4_bf16"), 32, 4096)
    assert not bm.humming_applies(load_spec("awq_int4_fp16"), 64, 4096)  # group 64
    assert not bm.humming_applies(load_spec("nvfp4_fp16"), 256, 4096)  # fp4 codes
    assert "humming" in bm.IMPLS and bm.parse_impls("dqgen,humming") == ["dqgen", "humming"]


def test_matmul_section_names_humming_where_it_ran() -> None:
    from dqgen.tools import bench_matmul as bm

    def row(impl: str, us: float) -> bm.MatmulRow:
        return bm.MatmulRow(impl, "awq_int4_fp16", "fp16", 64, 8192, 28672, us, bm.pct_floor(40.0, us), 1e-4, 40.0, 64)

    with_h = bm.markdown_section(bm.matmul_document("H100", 3000.0, [row("dqgen", 123.1), row("humming", 87.3)], "m"))
    assert "| spec | K x N | M | floor us | dqgen | humming | rel_err |" in with_h
    assert "| awq_int4_fp16 | 8192x28672 | 64 | 40.0 | 123.1 (32%) | 87.3 (46%) |" in with_h
    assert "`humming` (humming-kernels' HummingLayer" in with_h
    without = bm.markdown_section(bm.matmul_document("H100", 3000.0, [row("dqgen", 123.1)], "m"))
    assert "HummingLayer" not in without


def test_matmul_without_humming_says_so_in_one_line(monkeypatch) -> None:
    pytest.importorskip("torch")
    from dqgen.tools import bench_matmul as bm

    lines: list[str] = []
    monkeypatch.setattr(bm, "humming_installed", lambda: False)
    assert bm.bench_matmul([], [], [1], 3000.0, impls=["dqgen", "humming"], log=lines.append) == []
    assert [ln for ln in lines if ln.startswith("humming")] == [
        "humming: not installed (pip install humming-kernels): no humming rows"
    ]
    lines.clear()
    monkeypatch.setattr(bm, "humming_installed", lambda: True)
    bm.bench_matmul([], [], [1], 3000.0, impls=["humming"], log=lines.append)
    assert not [ln for ln in lines if ln.startswith("humming")]


@pytest.mark.gpu
def test_humming_layer_computes_the_awq_weight() -> None:
    pytest.importorskip("humming")
    import torch

    from dqgen.core.spec import load_spec
    from dqgen.run.inputs import make_inputs
    from dqgen.run.runtime import Kernel
    from dqgen.tools import bench_matmul as bm

    spec = load_spec("awq_int4_fp16")
    q, s, z = make_inputs(spec, 4096, 6144, 5)
    W = Kernel(spec)(q, s, z)  # [K, N], every group of 128 on a 16-level grid
    layer = bm.humming_layer(W.t())
    x = torch.randn((16, 4096), dtype=torch.float16, device="cuda")
    assert bl.rel_err(layer(x), x.double() @ W.double()) < 1e-2


def _cpu_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench on the CPU with its GPU parts stood in for (two small linears; make_inputs' "codes" are the dense
    weight itself and the stand-in Kernel dequantizes by returning it; no humming); a skip without torch."""
    torch = pytest.importorskip("torch")
    import dqgen.run.inputs as inputs
    import dqgen.run.runtime as runtime
    from dqgen.tools import bench_matmul as bm

    monkeypatch.setattr(bl, "DEVICE", "cpu")
    monkeypatch.setattr(bl, "LINEARS", (("q", 256, 128), ("down", 384, 256)))
    monkeypatch.setattr(inputs, "make_inputs", lambda spec, K, N, seed: (torch.randn(K, N).half(), None, None))
    monkeypatch.setattr(runtime, "Kernel", lambda spec: lambda q, s, z: q)
    monkeypatch.setattr(bm, "humming_installed", lambda: False)


def test_bench_bookkeeping_on_cpu_stand_ins(monkeypatch) -> None:
    """The bench's own bookkeeping with the GPU parts stood in for: each implementation checked against x @ W, one
    graph per implementation and M, rounds in alternating order, the lowest round kept, a failing one left out."""
    _cpu_stand_ins(monkeypatch)
    real_build = bl._build

    def build(impl, weights):
        if impl == "torch int4":
            raise RuntimeError("stand-in failure")
        return real_build("fp16 cublas", weights)  # dqgen stands in as a second F.linear

    monkeypatch.setattr(bl, "_build", build)
    graphs: list[int] = []  # replays asked for, per graph
    calls: list[int] = []  # which graph each timing call hit

    def fake_graph(run, replays):
        run()  # every linear of the implementation, on inputs of its K
        index = len(graphs)
        graphs.append(replays)
        figures = iter([100.0 + index, 90.0 + index])  # the second round is the faster one

        def timed() -> float:
            calls.append(index)
            return next(figures)

        return object(), timed

    monkeypatch.setattr(bl, "graph_replays_us", fake_graph)
    lines: list[str] = []
    rows = bl.bench_linears(2, [1, 16], ["fp16 cublas", "dqgen", "torch int4", "humming"], 5, log=lines.append)
    assert "humming: not installed (pip install humming-kernels): no humming rows" in lines
    assert "torch int4: failed (RuntimeError: stand-in failure): no rows" in lines  # the others still measured
    assert len([ln for ln in lines if "rel_err" in ln and "against float64 x @ W" in ln]) == 2
    assert [(r.impl, r.M, r.layers, r.us, r.us_rounds) for r in rows] == [
        ("fp16 cublas", 1, 2, 90.0, [100.0, 90.0]),
        ("dqgen", 1, 2, 91.0, [101.0, 91.0]),
        ("fp16 cublas", 16, 2, 92.0, [102.0, 92.0]),
        ("dqgen", 16, 2, 93.0, [103.0, 93.0]),
    ]
    assert calls == [0, 1, 1, 0, 2, 3, 3, 2]  # round two in reverse order
    assert graphs == [5, 5, 5, 5] and all(r.rel_err < bl.TOLERANCE["fp16"] for r in rows)


def test_merge_keeps_the_rows_this_run_did_not_time() -> None:
    old = _doc(ROWS)
    new = bl.document(
        "NVIDIA H100 80GB HBM3", 4, [_row("dqgen", 64, 600.0), _row("dqgen", 256, 1000.0)], "m", when="later"
    )
    merged = bl.merge_documents(old, new)
    got = {(r["impl"], r["M"]): r["us"] for r in merged["rows"]}
    assert got[("dqgen", 64)] == 600.0 and got[("dqgen", 256)] == 1000.0  # the new run's
    assert got[("dqgen", 1)] == 322.0 and got[("humming", 64)] == 490.0  # kept from the record
    assert len(merged["rows"]) == len(ROWS) + 1
    assert merged["note"] == (
        "rows kept from the run of 2026-11-27 16:00 UTC (M = 1: fp16 cublas, dqgen, humming, torch int4; "
        "M = 64: fp16 cublas, humming), the rest from the run of later"
    )
    again = bl.merge_documents(
        merged, bl.document("NVIDIA H100 80GB HBM3", 4, [_row("dqgen", 1, 300.0)], "m", when="t3")
    )
    assert again["note"].endswith("the rest from the run of t3; that run's record: " + merged["note"])
    with pytest.raises(ValueError, match="layers 4, this run 2"):
        bl.merge_documents(old, bl.document("NVIDIA H100 80GB HBM3", 2, [], "m"))
    with pytest.raises(ValueError, match="gpu"):
        bl.merge_documents(old, bl.document("NVIDIA H200", 4, [], "m"))


def test_load_document_names_the_file(tmp_path) -> None:
    path = tmp_path / "e2e.json"
    write_json(path, _doc(ROWS))
    assert bl.load_document(path)["rows"][1]["us"] == 322.0
    write_json(path, _doc(ROWS) | {"layers": "four"})
    with pytest.raises(ValueError, match=r"e2e.json: layers: "):
        bl.load_document(path)


def test_section_states_each_peer_by_hand(tmp_path) -> None:
    text = bl.markdown_section(_doc(ROWS))
    assert text.startswith(bl.SECTION_TITLE)
    # 322 / 552 = 0.58, 700 / 557 = 1.26; 322 / 340 = 0.95, 700 / 490 = 1.43; 322 / 317 = 1.02
    assert "- dqgen against fp16 cublas: faster at M = 1, slower at M = 64 (0.58x at 1, 1.26x at 64 its time)." in text
    assert "- dqgen against humming: faster at M = 1, slower at M = 64 (0.95x at 1, 1.43x at 64 its time)." in text
    assert "- dqgen against torch int4: slower at every M (1.02x at 1 its time)." in text
    report = tmp_path / "performance.md"
    report.write_text("<!-- section:matmul:begin -->\nm\n<!-- section:matmul:end -->\n\n"
                      "<!-- section:gru:begin -->\ng\n<!-- section:gru:end -->\n")  # fmt: skip
    bl.write_docs(report, _doc(ROWS))
    body = report.read_text()
    assert body.index("section:matmul:end") < body.index("section:linears:begin") < body.index("section:gru:begin")


def test_every_graphs_inputs_live_until_its_replays(monkeypatch) -> None:
    """A CUDA graph reads x at the address it was captured with: each implementation's x must outlive its graph's
    replays, which come after the other implementations' captures (torch.cuda.graph empties the allocator's cache
    on entry, so a freed x's memory can be unmapped by then: the "illegal memory access" at M = 256, issue 23)."""
    import weakref

    _cpu_stand_ins(monkeypatch)
    real_build = bl._build
    touched: list[weakref.ref] = []  # weak references to the x of every linear call since the last capture began

    def build(impl, weights):
        def recording(fn):
            def call(x):
                touched.append(weakref.ref(x))
                return fn(x.half())  # torch int4's bf16 x too

            return call

        return [recording(fn) for fn in real_build("fp16 cublas", weights)]

    monkeypatch.setattr(bl, "_build", build)
    dead_at_replay: list[int] = []

    def fake_graph(run, replays):
        touched.clear()
        run()  # the capture: what the graph will read
        inputs_read = list(touched)

        def timed() -> float:
            dead_at_replay.append(sum(ref() is None for ref in inputs_read))
            return 1.0

        return object(), timed

    monkeypatch.setattr(bl, "graph_replays_us", fake_graph)
    rows = bl.bench_linears(1, [1, 16], ["fp16 cublas", "dqgen", "torch int4"], 5, log=lambda msg: None)
    assert len(rows) == 6 and len(dead_at_replay) == 12  # 2 M x 3 implementations x 2 rounds
    assert dead_at_replay == [0] * 12


def test_breakdown_graphs_leave_one_linear_out(monkeypatch) -> None:
    """--breakdown: per implementation and M, the full graph and one graph without each linear's calls, all timed in
    the same alternating rounds; rows name the linear left out."""
    _cpu_stand_ins(monkeypatch)
    real_build = bl._build
    widths: list[list[int]] = []  # per captured graph: the K of each call it holds

    def counting_build(impl, weights):
        calls = real_build("fp16 cublas", weights)

        def counted(x, fn):
            if widths:  # not the correctness check before the captures
                widths[-1].append(int(x.shape[1]))
            return fn(x)

        return [lambda x, fn=fn: counted(x, fn) for fn in calls]

    monkeypatch.setattr(bl, "_build", counting_build)

    def capture(run, replays):
        index = len(widths)
        widths.append([])
        run()
        return object(), lambda: 10.0 * (index + 1)

    monkeypatch.setattr(bl, "graph_replays_us", capture)
    rows = bl.bench_linears(2, [1], ["fp16 cublas", "dqgen"], 5, log=lambda msg: None, breakdown=True)
    # LINEARS stands in as q (K 256) and down (K 384), 2 layers: the full graph 4 calls, each leave-one-out 2
    assert widths == [[256, 384, 256, 384], [384, 384], [256, 256]] * 2
    assert [(r.impl, r.without, r.us) for r in rows] == [
        ("fp16 cublas", "", 10.0),
        ("fp16 cublas", "q", 20.0),
        ("fp16 cublas", "down", 30.0),
        ("dqgen", "", 40.0),
        ("dqgen", "q", 50.0),
        ("dqgen", "down", 60.0),
    ]


def test_breakdown_shares_and_table_by_hand() -> None:
    rows = [
        *ROWS,  # us_rounds [us, us + 1]: a spread of 1 µs
        _row("fp16 cublas", 1, 500.0, without="q"),
        _row("dqgen", 1, 290.0, without="q"),
        _row("humming", 1, 300.0, without="q"),
        _row("torch int4", 1, 316.5, without="q"),  # 0.5 µs under its full graph: within the spread
        _row("dqgen", 1, 250.0, without="down"),
    ]
    doc = _doc(rows)
    part = bl.shares(doc)
    # 552 - 500, 322 - 290, 340 - 300, 317 - 316.5, 322 - 250
    assert {k: v.us for k, v in part.items()} == {
        ("fp16 cublas", 1, "q"): 52.0, ("dqgen", 1, "q"): 32.0, ("humming", 1, "q"): 40.0,
        ("torch int4", 1, "q"): 0.5, ("dqgen", 1, "down"): 72.0,
    }  # fmt: skip
    assert {v.spread for v in part.values()} == {1.0} and not part[("torch int4", 1, "q")].measured
    text = bl.breakdown_table(doc)
    assert "| M | linear | fp16 cublas us | dqgen us | torch int4 us | humming us | dqgen / best other |" in text
    # torch int4's 0.5 is no measurement: the best other is humming's 40, 32 / 40 = 0.80
    assert "| 1 | q | 52.0 | 32.0 | (0.5) | 40.0 | 0.80x humming |" in text
    assert "| 1 | down |  | 72.0 |  |  |  |" in text
    # the main table, the verdicts and the failure check read the full graphs only
    assert bl.table(doc) == bl.table(_doc(ROWS))
    assert bl.markdown_section(doc).startswith(bl.markdown_section(_doc(ROWS)))
    assert bl.breakdown_table(_doc(ROWS)) == "" and bl.markdown_section(doc).endswith(text)
    bad = _row("dqgen", 1, 1.0, rel_err=0.5, without="q")
    assert bl.failed([bad]) == []


def test_merge_pairs_breakdown_rows_within_one_run() -> None:
    """A pair (impl, M) this run measured keeps none of the record's rows: a share subtracts two graphs of one run."""
    old = _doc([_row("dqgen", 1, 322.0), _row("dqgen", 1, 290.0, without="q"), _row("dqgen", 4, 330.0, without="q")])
    new = bl.document("NVIDIA H100 80GB HBM3", 4, [_row("dqgen", 1, 300.0)], "m", when="later")
    merged = bl.merge_documents(old, new)
    assert [(r["M"], r["without"], r["us"]) for r in merged["rows"]] == [(1, "", 300.0), (4, "q", 330.0)]
    assert bl.shares(merged) == {}  # M = 4's leave-one-out graph has no full graph of its run
    assert "M = 4: dqgen without q" in merged["note"]
