"""dqgen bench --model on the CPU: flags refused before any GPU work, the record's schema, merge and one-line errors,
the speed-up table (ratios by hand), the report's section, the plot, the linear swap that gives every implementation
the same weights; graphs mode's loop (static cache, prefill, the step replayed with the token and the position
updated in place) on a tiny Llama with the capture stood in for, against generate()'s tokens; the whole loop's rows.
On a GPU: one short run of every implementation and mode, and the captured decode against the same loop uncaptured."""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from dqgen.cli import app
from dqgen.core.files import write_json
from dqgen.tools import bench_model as bmod
from dqgen.tools.bench_matmul import plot_available


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "0"], "error: [--layers] got 0; expected 1..32"),
        (["--layers", "40"], "error: [--layers] got 40; expected 1..32"),
        (["--batches", "0"], "error: [--batches] got '0'; expected comma-separated integers in 1..1024"),
        (["--batches", "1,a"], "error: [--batches] got '1,a'"),
        (["--prefill", "-1"], "error: [--prefill] got -1; expected 0..8192"),
        (["--new-tokens", "1"], "error: [--new-tokens] got 1; expected 2..4096"),
        (["--runs", "0"], "error: [--runs] got 0; expected 1..100"),
        (["--modes", "eager,compiled"], "error: [--modes] got 'compiled'; with --model expected a subset of eager"),
        (["--impls", "fp16,awq"], "error: [--impls] got 'awq'; with --model expected a subset of fp16, dqgen w4a16"),
        (["--m", "1"], "error: [--m] does not apply to --model"),
        (["--replays", "5"], "error: [--replays] does not apply to --model"),
        (["--breakdown"], "error: [--breakdown] does not apply to --model"),
        (["--gru"], "error: --model is a bench of its own"),
        (["--plot", "x.json"], "error: --model times fixed Llama-3-8B shapes; got --plot"),
        (["--merge"], "error: --merge: docs/bench/model.json: cannot read the model record"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("gpu", [True, False])
def test_flags_refused_before_the_gpu(monkeypatch, tmp_path, args, message, gpu) -> None:
    from dqgen.run import device as dev

    monkeypatch.setattr(dev, "gpu_available", lambda: gpu)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["bench", "--model", *args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), r.stderr
    assert not (tmp_path / "docs").exists()


def test_missing_transformers_then_gpu(monkeypatch, tmp_path) -> None:
    import importlib.util

    from dqgen.run import device as dev

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name))
    monkeypatch.setattr(dev, "gpu_available", lambda: True)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["bench", "--model", "--layers", "2"])
    assert (
        r.exit_code == 2
        and r.stderr.strip() == "error: dqgen bench --model needs transformers (pip install transformers)"
    )
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "transformers" else real(name)
    )
    monkeypatch.setattr(dev, "gpu_available", lambda: False)
    r = CliRunner().invoke(app, ["bench", "--model", "--layers", "2"])
    assert r.exit_code == 2 and r.stderr.strip() == "error: dqgen bench --model needs an NVIDIA GPU (none found)"


def _row(impl: str, mode: str, phase: str, batch: int, tok_s: float | None, error: str | None = None) -> bmod.ModelRow:
    tokens = 32 if phase == "decode" else 2048
    ms = None if tok_s is None else (batch if phase == "decode" else tokens) * 1000.0 / tok_s
    return bmod.ModelRow(impl=impl, mode=mode, phase=phase, batch=batch, tokens=tokens, tok_s=tok_s, ms=ms,
                         runs_ms=[] if ms is None else [ms], error=error)  # fmt: skip


ROWS = [
    _row("fp16", "eager", "decode", 1, 30.0),
    _row("dqgen w4a16", "eager", "decode", 1, 48.0),
    _row("dqgen w8a8", "eager", "decode", 1, 36.0),
    _row("fp16", "eager", "decode", 64, 1600.0),
    _row("dqgen w4a16", "eager", "decode", 64, 1200.0),
    _row("fp16", "graphs", "decode", 1, 110.0),
    _row("dqgen w4a16", "graphs", "decode", 1, None, error="TorchRuntimeError: something"),
    _row("fp16", "eager", "prefill", 1, 9000.0),
    _row("dqgen w4a16", "eager", "prefill", 1, 8100.0),
]


def _doc(rows: list[bmod.ModelRow], gpu: str = "NVIDIA H100 80GB HBM3", layers: int = 32, when: str = "") -> dict:
    return bmod.document(gpu, layers, rows, bmod.method_text(3), {"torch": "2.11"}, {"dqgen w4a16": 7.5},
                         {"dqgen w4a16": "dqgen.nn.quantize_model"}, when=when or "2026-11-27 16:00 UTC")  # fmt: skip


def test_speedups_by_hand() -> None:
    text = bmod.speedups(_doc(ROWS))
    assert text.startswith("Speed-up over fp16 (tokens/s ratio), Llama-3-8B-shaped, 32 layers, NVIDIA H100")
    assert "| mode | phase | batch | fp16 tok/s | dqgen w4a16 | dqgen w8a8 |" in text  # no torch int4 row: no column
    assert "| eager | decode | 1 | 30 | 1.60x | 1.20x |" in text  # 48 / 30, 36 / 30
    assert "| eager | decode | 64 | 1600 | 0.75x |  |" in text  # 1200 / 1600
    assert "| eager | prefill | 1 | 9000 | 0.90x |  |" in text  # 8100 / 9000
    assert "| graphs | decode | 1 | 110 |  |  |" in text  # the failed row has no figure
    assert text.index("| eager | decode | 64") < text.index("| eager | prefill") < text.index("| graphs | decode")


def test_markdown_section_speedups_first() -> None:
    """The report's section: the speed-up table before tokens/s, every failed figure's error listed once, how the
    linears were made and how long it took, the command that refreshes it."""
    text = bmod.markdown_section(_doc(ROWS))
    assert text.startswith(bmod.SECTION_TITLE + "\n")
    assert "all 32 of Llama-3-8B's decoder layers" in text and "batch 1, 64" in text and "of 2048 tokens" in text
    assert "`dqgen w4a16` (dqgen.nn.quantize_model, 7.5 s for every decoder linear)" in text
    assert text.index("| eager | decode | 1 | 30 | 1.60x | 1.20x |") < text.index("Tokens per second")
    assert "| mode | phase | batch | fp16 | dqgen w4a16 | dqgen w8a8 |" in text
    assert "| eager | decode | 1 | 30 | 48 | 36 |" in text and "| graphs | decode | 1 | 110 | failed |  |" in text
    assert text.count("TorchRuntimeError: something") == 1
    assert "- dqgen w4a16, graphs decode batch 1: TorchRuntimeError: something" in text
    assert "`dqgen bench --model --docs docs/performance.md`" in text
    assert "of Llama-3-8B's 32 decoder layers" in bmod.markdown_section(_doc(ROWS, layers=8))


def test_docs_section_sits_before_the_notes(tmp_path) -> None:
    """--docs rewrites its own section only, after the kernels' sections and before the notes."""
    report = tmp_path / "performance.md"
    report.write_text(
        "<!-- section:dequant:begin -->\nD\n<!-- section:dequant:end -->\n\n"
        "<!-- section:notes:begin -->\nN\n<!-- section:notes:end -->\n"
    )
    bmod.write_docs(report, _doc(ROWS))
    text = report.read_text()
    assert text.index("\nD\n") < text.index(bmod.SECTION_TITLE) < text.index("\nN\n")
    bmod.write_docs(report, _doc(ROWS[:1]))
    text = report.read_text()
    assert text.count(bmod.SECTION_TITLE) == 1 and "1.60x" not in text and "| eager | decode | 1 | 30 |" in text


def test_table_shows_errors_and_figures() -> None:
    text = bmod.table(_doc(ROWS))
    assert "| dqgen w4a16 | graphs | decode | 1 | 32 |  |  | TorchRuntimeError: something |" in text
    assert "| fp16 | eager | decode | 64 | 32 | 1600.0 | 40.00 |  |" in text  # 64 tokens a step in 40 ms


def test_record_round_trip_and_bad_records(tmp_path) -> None:
    path = tmp_path / "model.json"
    doc = _doc(ROWS)
    write_json(path, doc)
    assert bmod.load_document(path) == json.loads(json.dumps(doc))
    assert doc["config"]["num_hidden_layers"] == 32 and doc["config"]["intermediate_size"] == 14336
    path.write_text(json.dumps(doc | {"rows": [{"impl": "fp16"}]}))
    with pytest.raises(ValueError) as e:
        bmod.load_document(path)
    assert str(e.value).startswith(f"{path}: rows.0.mode: ") and "\n" not in str(e.value)
    path.write_text("{nope")
    with pytest.raises(ValueError, match="not JSON"):
        bmod.load_document(path)


def test_merge_keeps_rows_not_remeasured() -> None:
    old = _doc(ROWS, when="2026-11-27 15:00 UTC")
    new = _doc([_row("fp16", "eager", "decode", 1, 31.0)])
    merged = bmod.merge_documents(old, new)
    assert len(merged["rows"]) == len(ROWS)
    fp16_b1 = [
        r for r in merged["rows"] if (r["impl"], r["mode"], r["phase"], r["batch"]) == ("fp16", "eager", "decode", 1)
    ]
    assert [r["tok_s"] for r in fp16_b1] == [31.0]  # re-measured: the new figure only
    assert f"{len(ROWS) - 1} rows from the run of 2026-11-27 15:00 UTC" in merged["method"]
    with pytest.raises(ValueError, match="the record has layers 32, this run 2"):
        bmod.merge_documents(old, _doc([_row("fp16", "eager", "decode", 1, 31.0)], layers=2))
    with pytest.raises(ValueError, match="the record has gpu"):
        bmod.merge_documents(old, _doc([], gpu="NVIDIA H200"))


@pytest.mark.skipif(not plot_available(), reason="matplotlib is not installed")
def test_plot_from_stand_in_rows(tmp_path) -> None:
    png = tmp_path / "model.png"
    bmod.plot(_doc(ROWS), png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_cli_writes_record_speedups_first(monkeypatch, tmp_path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from dqgen.run import device as dev

    seen = {}

    def fake_bench(layers, batches, prefill, new_tokens, runs, modes, impls, log, done):
        seen.update(layers=layers, batches=batches, prefill=prefill, new_tokens=new_tokens, modes=modes, impls=impls)
        return ROWS, {"dqgen w4a16": 7.5}, {"dqgen w4a16": "dqgen.nn.quantize_model"}

    monkeypatch.setattr(dev, "gpu_available", lambda: True)
    monkeypatch.setattr(bmod, "bench_model", fake_bench)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Stand-in GPU")
    monkeypatch.chdir(tmp_path)
    args = ["bench", "--model", "--layers", "2", "--batches", "1,64", "--prefill", "0", "--modes", "eager"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert seen == {"layers": 2, "batches": [1, 64], "prefill": None, "new_tokens": 32, "modes": ["eager"],
                    "impls": list(bmod.IMPLS)}  # fmt: skip
    assert r.stdout.startswith("Speed-up over fp16")
    doc = bmod.load_document(tmp_path / "docs/bench/model.json")
    assert doc["gpu"] == "Stand-in GPU" and doc["layers"] == 2 and doc["versions"]["torch"] == torch.__version__
    assert not (tmp_path / "docs/performance.md").exists()  # no --docs: the record only
    r = CliRunner().invoke(app, [*args, "--merge", "--impls", "fp16", "--docs", "docs/performance.md"])
    assert r.exit_code == 0, r.output
    assert len(bmod.load_document(tmp_path / "docs/bench/model.json")["rows"]) == len(ROWS)
    assert (tmp_path / "docs/performance.md").read_text().startswith("<!-- section:model:begin -->\n" +
                                                                     bmod.SECTION_TITLE)  # fmt: skip


def test_cli_keeps_what_a_cut_run_measured(monkeypatch, tmp_path) -> None:
    """The record is written after each implementation: a run that dies in the second keeps the first's rows."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from dqgen.run import device as dev

    def dies_in_the_second(layers, batches, prefill, new_tokens, runs, modes, impls, log, done):
        done(ROWS[:2], {"fp16": 0.0}, {"fp16": "the model as built"})
        raise RuntimeError("the call's time is up")

    monkeypatch.setattr(dev, "gpu_available", lambda: True)
    monkeypatch.setattr(bmod, "bench_model", dies_in_the_second)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Stand-in GPU")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["bench", "--model", "--layers", "2"])
    assert r.exit_code != 0
    doc = bmod.load_document(tmp_path / "docs/bench/model.json")
    assert [(x["impl"], x["batch"]) for x in doc["rows"]] == [("fp16", 1), ("dqgen w4a16", 1)]


def test_cli_refuses_a_damaged_report_before_the_gpu(monkeypatch, tmp_path) -> None:
    from dqgen.run import device as dev

    looked = []
    monkeypatch.setattr(dev, "gpu_available", lambda: looked.append(1) or True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.md").write_text("stray text\n<!-- section:gru:begin -->\nG\n<!-- section:gru:end -->\n")
    r = CliRunner().invoke(app, ["bench", "--model", "--docs", "report.md"])
    assert r.exit_code == 2 and r.stderr.startswith("error: --docs: report.md: expected only whole"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not looked
    r = CliRunner().invoke(app, ["bench", "--model-linears", "--docs", "report.md"])  # its own section: the same check
    assert r.exit_code == 2 and r.stderr.startswith("error: --docs: report.md: expected only whole"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not looked


def test_swap_and_restore_keep_the_fp16_linears() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100)  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    originals = bmod.decoder_linears(model)
    assert len(originals) == 2 * 7 and not any(n.endswith("lm_head") for n in originals)
    assert sorted({n.rsplit(".", 1)[-1] for n in originals}) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    lm_head = model.lm_head
    for name in originals:
        bmod._set(model, name, torch.nn.Identity())
    model.lm_head = torch.nn.Identity()
    assert not bmod.decoder_linears(model)
    bmod.restore(model, originals, lm_head)
    assert all(model.get_submodule(n) is lin for n, lin in originals.items()) and model.lm_head is lm_head


def test_the_fused_w8a8_model_swaps_whole_norms_and_mlps_and_restores_them() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).half()
    originals, parts, lm_head = bmod.decoder_linears(model), bmod.decoder_parts(model), model.lm_head
    how = bmod.prepare("dqgen w8a8 fused", model, originals)
    assert how.startswith("dqgen.nn.quantize_model_w8a8, 2 layers")
    assert type(model.model.layers[1].mlp).__name__ == "W8A8MLP" and not bmod.decoder_linears(model)
    bmod.restore(model, originals, lm_head, parts)
    assert all(model.get_submodule(n) is m for n, m in (parts | originals).items())


@pytest.mark.gpu
def test_short_run_every_implementation() -> None:
    """Every implementation in both modes on a 1-layer model: no figure may fail (graphs mode's capture included)."""
    pytest.importorskip("transformers")
    rows, prepare_s, how = bmod.bench_model(1, [1, 4], 64, 4, 1, list(bmod.MODES), list(bmod.IMPLS), log=print)
    assert all(r.error is None and r.tok_s and r.tok_s > 0 for r in rows), [r for r in rows if r.error]
    for impl in bmod.IMPLS:
        for mode in bmod.MODES:
            assert sorted((r.phase, r.batch) for r in rows if (r.impl, r.mode) == (impl, mode)) == [
                ("decode", 1),
                ("decode", 4),
                ("prefill", 1),
            ]
    assert set(prepare_s) == set(bmod.IMPLS) and all(how.values())


@pytest.mark.gpu
def test_captured_decode_matches_its_own_replay_free_run() -> None:
    """On the GPU, the hand-captured decode gives the tokens of the same loop with the step called eagerly (the
    same static cache, the same kernels: what the graph adds is only the replay), at batch 1 and 4."""
    torch = pytest.importorskip("torch")
    model = bmod.build_model(1)
    for batch in (1, 4):
        ids = bmod._ids(model, batch, 16, seed=batch)
        graphed, marks = bmod.StaticDecoder(model, batch, 16, 8, bmod.cuda_graph_capture).run(ids)
        called, _ = bmod.StaticDecoder(model, batch, 16, 8, lambda step: step).run(ids)
        assert torch.equal(graphed, called), (graphed, called)
        assert len(marks) == 8 and bmod._step_ms(marks) > 0


def _tiny_llama(layers: int = 2):
    """A tiny Llama on the CPU, its weights spread wide enough (initializer_range) that greedy decoding does not
    settle on one token: a wrong position or a stale cache entry changes the tokens."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch").manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                      max_position_embeddings=256, initializer_range=0.2)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval().requires_grad_(False)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


class _StandInCapture:
    """graphs mode's capture where there are no CUDA graphs: the step's warm-up calls run as the real capture's do
    (they move a transformers 5 cache on), then each "replay" calls the step."""

    def __init__(self) -> None:
        self.captured = 0

    def __call__(self, step):
        self.captured += 1
        for _ in range(bmod.CAPTURE_WARMUP):
            step()
        return step


def test_static_decoder_gives_generates_tokens() -> None:
    """The graphs-mode loop (static cache, prefill, the step replayed with the argmax copied in and the position
    advanced in place) decodes the tokens of greedy ``generate`` on its dynamic cache; it captures once and a second
    run (the cache emptied and prefilled again) decodes the same."""
    torch = pytest.importorskip("torch")
    model = _tiny_llama()
    for batch in (1, 3):
        prompt = torch.randint(3, 100, (batch, 7), generator=torch.Generator().manual_seed(batch))
        expected = bmod.greedy(model, prompt, 6)[:, 7:]
        assert len({int(t) for t in expected.flatten()}) > 3  # the model does not repeat one token
        capture = _StandInCapture()
        decoder = bmod.StaticDecoder(model, batch, 7, 6, capture)
        tokens, got_marks = decoder.run(prompt, mark=itertools.count(1).__next__)
        assert torch.equal(tokens, expected), (tokens, expected)
        assert got_marks == [1, 2, 3, 4, 5, 6]  # one mark per new token, the first after the prefill
        other = torch.randint(3, 100, (batch, 7), generator=torch.Generator().manual_seed(10 + batch))
        assert torch.equal(decoder.run(other, mark=lambda: 0)[0], bmod.greedy(model, other, 6)[:, 7:])
        assert torch.equal(decoder.run(prompt, mark=lambda: 0)[0], expected)
        assert capture.captured == 1
    with pytest.raises(ValueError, match=r"^ids: expected \[3, 7\], got \[3, 8\]$"):
        decoder.run(torch.zeros((3, 8), dtype=torch.long))


def test_static_prefill_replays_the_forward() -> None:
    """graphs mode's prefill: each replay (the cache emptied inside the captured work) gives the last position's
    logits of a plain forward without a cache, the first replay and the later ones alike; captured once."""
    torch = pytest.importorskip("torch")
    model = _tiny_llama()
    capture = _StandInCapture()
    prefill = bmod.StaticPrefill(model, 16, capture)
    expected = model(prefill.ids, use_cache=False).logits[:, -1]
    for _ in range(3):
        got = prefill.logits()
        assert got.shape == (1, 1, 100)
        torch.testing.assert_close(got[:, -1], expected, rtol=1e-5, atol=1e-5)
    assert capture.captured == 1


def test_cache_arguments_by_transformers_version(monkeypatch) -> None:
    """transformers 5 names the cache ``cache`` and counts its length itself (positions go in as position_ids);
    4.x names it ``past_key_values`` and writes where ``cache_position`` says; StaticCache before 4.56 takes the
    batch, device and dtype."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    class V5:
        def forward(self, input_ids=None, position_ids=None, cache=None, use_cache=None, logits_to_keep=0): ...

    class V4:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None, cache_position=None,
                    num_logits_to_keep=0): ...  # fmt: skip

    positions = torch.arange(5)
    v5 = bmod._cache_args(V5(), "the cache", positions)
    assert v5.keys() == {"cache", "use_cache", "position_ids"} and v5["cache"] == "the cache"
    assert v5["position_ids"].tolist() == [[0, 1, 2, 3, 4]]
    v4 = bmod._cache_args(V4(), "the cache", positions)
    assert v4.keys() == {"past_key_values", "use_cache", "cache_position"} and v4["cache_position"] is positions
    assert bmod._keep_last(V5()) == {"logits_to_keep": 1} and bmod._keep_last(V4()) == {"num_logits_to_keep": 1}

    seen = {}

    class OldStaticCache:
        def __init__(self, config, max_batch_size, max_cache_len, device=None, dtype=None) -> None:
            seen.update(batch=max_batch_size, length=max_cache_len, device=device, dtype=dtype)

    model = _tiny_llama(1)
    monkeypatch.setattr(transformers, "StaticCache", OldStaticCache)
    bmod.static_cache(model, 4, 40)
    assert seen == {"batch": 4, "length": 40, "device": model.device, "dtype": torch.float32}


class _StandInEvent:
    """A CUDA event's stand-in: each one recorded 1 ms after the one before."""

    clock = 0.0

    def __init__(self) -> None:
        _StandInEvent.clock += 1.0
        self.at = _StandInEvent.clock

    def elapsed_time(self, later: _StandInEvent) -> float:
        return later.at - self.at

    def synchronize(self) -> None:
        pass


def test_bench_rows_on_a_tiny_cpu_llama(monkeypatch) -> None:
    """bench_model's loop on a tiny Llama on the CPU, both modes run for real (graphs with the stand-in capture),
    CUDA events stood in for (1 ms apart): every implementation gets a row per mode, batch and the prefill; one that
    cannot run here (dqgen's kernels and torch's int4 need a GPU) is rows with its error, not a crash; the fp16
    linears are back in the model afterwards, in its own dtype."""
    torch = pytest.importorskip("torch")
    model = _tiny_llama(1)
    originals = bmod.decoder_linears(model)
    monkeypatch.setattr(bmod, "build_model", lambda layers: model)
    monkeypatch.setattr(bmod, "_mark", _StandInEvent)
    monkeypatch.setattr(bmod, "PROMPT_TOKENS", 5)
    capture = _StandInCapture()
    rows, prepare_s, how = bmod.bench_model(1, [1, 2], 8, 4, 2, list(bmod.MODES), list(bmod.IMPLS), log=print,
                                            capture=capture)  # fmt: skip
    keys = [(r.impl, r.mode, r.phase, r.batch, r.tokens) for r in rows]
    for impl in bmod.IMPLS:
        for mode in bmod.MODES:
            assert [k for k in keys if k[:2] == (impl, mode)] == [
                (impl, mode, "decode", 1, 4), (impl, mode, "decode", 2, 4), (impl, mode, "prefill", 1, 8)
            ]  # fmt: skip
    fp16 = [r for r in rows if r.impl == "fp16"]
    assert all(r.error is None for r in fp16), [r.error for r in fp16 if r.error]
    # decode: a step of batch tokens 1 ms apart; prefill: 8 tokens in the 1 ms between its two events
    assert [r.tok_s for r in fp16] == [1000.0, 2000.0, 8000.0] * 2
    assert all(r.runs_ms == [1.0, 1.0] for r in fp16)
    assert capture.captured == 3  # fp16's graphs rows: one capture per batch size and one of the prefill
    for impl in ("dqgen w4a16", "dqgen w8a8", "torch int4"):
        mine = [r for r in rows if r.impl == impl]
        assert all(r.tok_s is None and r.error and "\n" not in r.error for r in mine), mine
    assert how["fp16"] == "the model as built" and "fp16" in prepare_s
    assert all(model.get_submodule(n) is lin for n, lin in originals.items())
    assert model.lm_head.weight.dtype == torch.float32  # the model's own dtype, back after torch int4's bf16
