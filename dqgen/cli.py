"""The ``dqgen`` command line."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

import typer
from typer.core import TyperCommand, TyperGroup

from .core.printable import printable
from .core.spec import SpecError, load_spec, shown

#: Exit codes of every command (README.md "Exit codes"; 130 / 143: Ctrl-C / SIGTERM).
EXIT_INPUT = 2  # bad usage or input: a spec, a tensor, a file, an option
EXIT_FAILED = 3  # a proof, a compile or a check against the reference failed
EXIT_INTERNAL = 70  # an uncaught exception: a bug in dqgen (EX_SOFTWARE)

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 2 bad usage or input (spec, tensor, file, option); 3 a proof, compile or reference "
    "check failed; 70 internal error (a bug: the traceback goes to a file, or to stderr with --debug); "
    "130 / 143 interrupted (Ctrl-C / SIGTERM)."
)


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"dqgen {__version__}")
        raise typer.Exit()


def _without_flag_metavars(params: list[Any]) -> list[Any]:
    """typer's rich help prints '<bool>' after flags (--json, --help), which take no value."""
    for p in params:
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""
    return params


def _internal_error(e: Exception, debug: bool) -> NoReturn:
    text = str(e).strip()
    what = f"{type(e).__name__}: {text.splitlines()[0][:200]}" if text else type(e).__name__
    if debug:
        traceback.print_exception(type(e), e, e.__traceback__)
        where = "traceback above"
    else:
        try:
            fd, name = tempfile.mkstemp(prefix="dqgen-traceback-", suffix=".txt")
            with os.fdopen(fd, "w") as fh:
                traceback.print_exception(type(e), e, e.__traceback__, file=fh)
            where = f"traceback in {name}; dqgen --debug prints it"
        except OSError:
            where = "dqgen --debug prints the traceback"
    typer.echo(f"error: internal error, a bug in dqgen ({what}); {where}", err=True)
    raise typer.Exit(EXIT_INTERNAL)


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_metavars(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_metavars(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except Exception as e:
            # typer's exits, aborts and usage errors (exit 2) carry their own exit codes; typer quiets a
            # closed pipe (dqgen explain ... | head).
            if isinstance(e, (typer.Exit, typer.Abort, BrokenPipeError)) or hasattr(e, "exit_code"):
                raise
            _internal_error(e, bool(ctx.params.get("debug")))


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    help="Generate, prove and run fast GPU dequantization kernels.",
    epilog=EXIT_CODES_HELP,
)


@app.callback()
def _root(
    debug: bool = typer.Option(
        False, "--debug", envvar="DQGEN_DEBUG", help="On an internal error, print the traceback to stderr."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print dqgen's version and exit."
    ),
) -> None:
    """Generate, prove and run fast GPU dequantization kernels."""


def _fail(msg: str, code: int = EXIT_INPUT) -> NoReturn:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _load(path: str):
    try:
        return load_spec(path)
    except SpecError as e:
        _fail(str(e))


#: Proofs with at least this many random words show a progress bar on a terminal (a million take about a second).
PROGRESS_MIN_WORDS = 4_000_000
#: The most random words a proof takes: a billion is about a quarter of an hour; more is a typo, not a proof.
MAX_PROOF_WORDS = 1_000_000_000


def _words(text: str | int) -> int:
    """--words as an int in [0, MAX_PROOF_WORDS], or one error line and exit 2 (click's own check of a bad value
    prints a multi-line box); a parser so that it runs while the options are read, before any spec is loaded."""
    if isinstance(text, int):  # the default, which click passes through the parser too
        text = str(text)
    digits = re.fullmatch(r"\s*([0-9](?:_?[0-9])*)\s*", text, flags=re.ASCII)  # 1000000 or 1_000_000
    if digits is None or int(digits.group(1)) > MAX_PROOF_WORDS:
        _fail(f"[--words] got {printable(shown(text))}; expected a whole number from 0 to {MAX_PROOF_WORDS:_}")
    return int(digits.group(1))


def _words_option(default: int, help: str) -> Any:
    help += f" At most {MAX_PROOF_WORDS:_}."
    return typer.Option(default, "--words", parser=_words, metavar="INTEGER", help=help)


@contextmanager
def _proof_progress(words: int, stream: TextIO | None = None) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback for ``prove`` drawing a rich bar on ``stream`` (stderr) when it is a terminal and the
    proof is long; None otherwise, so that piped output stays exactly as it was."""
    stream = sys.stderr if stream is None else stream
    if words < PROGRESS_MIN_WORDS or not stream.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("proof"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream), transient=True) as bar:
        task = bar.add_task("proof", total=words)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@app.command()
def explain(
    spec: str = typer.Argument(..., help="A spec YAML file, or a shipped spec by name (dqgen list)."),
    as_json: bool = typer.Option(False, "--json", help="Print the Plan as JSON."),
    strategy: str | None = typer.Option(None, help="Show this strategy's best plan instead of the cheapest."),
    words: int = _words_option(1_000_000, "Random words in the proof (besides every code at every lane)."),
    sass: bool = typer.Option(
        False, "--sass", help="Also count the conversion's SASS instructions (NVRTC cubin + nvdisasm, sm_80 and sm_90)."
    ),
) -> None:
    """Show the derived bit math of SPEC's conversion, op by op, and prove it (or a saved quantized GRU's constants)."""
    if spec.endswith(".npz"):  # a QuantGRU file (dqgen.gru): its derived requantization constants
        from .gru.explain import explain_file

        try:
            typer.echo(explain_file(spec))
        except ValueError as e:
            _fail(str(e).splitlines()[0])
        return
    from .emit.pipeline import compile_artifact
    from .solve.solver import NoPlanError
    from .tools.explain import render

    s = _load(spec)
    try:
        compile_artifact(s, strategy=strategy)  # a spec with no plan fails here, before the progress bar
        with _proof_progress(words) as progress:
            artifact = compile_artifact(s, strategy=strategy, proof_words=words, progress=progress)
    except NoPlanError as e:
        _fail(str(e))
    plan, proof = artifact.plan, artifact.proof
    assert proof is not None
    counts = []
    if sass:
        from .emit.sass import sass_count

        counts = [sass_count(s, a) for a in ("sm_80", "sm_90")]
    if as_json:
        out = plan.to_json()
        out["proof"] = {"ok": proof.ok, "words": proof.words, "failures": proof.failures}
        if counts:
            out["sass_per_8"] = {c.arch: float(c.per8) for c in counts}
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(render(s, plan, proof))
        for c in counts:
            typer.echo(f"SASS {c.line()}" + (f"; SLOW CONVERSIONS: {c.slow}" if c.slow else "; no I2F/F2F"))
    if not proof.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def build(
    spec: str = typer.Argument(..., help="A spec YAML file, or a shipped spec by name (dqgen list)."),
    arch: str | None = typer.Option(None, help="Architecture to compile PTX and cubin for (default: the spec's)."),
    out: str = typer.Option("generated", help="Folder for the .cu, .cuh and .ptx files (the matmul kernels' too)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (with seconds per step) as JSON."),
    words: int = _words_option(
        1_000_000, "Random words in the proof (besides every code at every lane); a passed proof is cached."
    ),
) -> None:
    """Solve, prove, render and compile SPEC and every matmul kernel that takes it (the GEMV; the GEMM for 4- and
    8-bit integer codes); on a machine with a GPU also run them against the reference."""
    from .tools.build import build_spec, print_summary

    s = _load(spec)
    try:
        with _proof_progress(words) as progress:
            report = build_spec(s, arch=arch or s.arch, out_dir=Path(out), words=words, progress=progress)
    except ValueError as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"[--out] cannot write {out!r}: {e.strerror or e}")
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_summary(report)
    if not report["ok"]:
        raise typer.Exit(EXIT_FAILED)


def _parse_shapes(text: str) -> list[tuple[int, int, int | None]]:
    shapes = []
    for part in text.split(","):
        part = part.strip().replace("\u00d7", "x")
        dims, _, group = part.partition(":")
        try:
            K, N = (int(v) for v in dims.lower().split("x"))
            G = int(group) if group else None
        except ValueError:
            K = N = G = 0
        if K <= 0 or N <= 0 or (G is not None and G != -1 and G <= 0):  # nothing to time, or no group size
            _fail(
                f"[--shapes] got {printable(shown(part))}; expected KxN or KxN:G (K, N positive; G positive or -1), "
                "e.g. 4096x4096,3584x37888:-1"
            )
        shapes.append((K, N, G))
    return shapes


#: The implementations plain `dqgen bench` times beside dqgen and the copy (dqgen.tools.bench._bench_shape).
DEQUANT_IMPLS = ("torch", "cuda-naive", "triton")


def _parse_dequant_impls(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if name not in DEQUANT_IMPLS:
            subset = ", ".join(DEQUANT_IMPLS)
            _fail(f"[--impls] got {printable(shown(name))}; expected a comma-separated subset of {subset}")
    return names


@app.command()
def bench(
    # typer reads the default from the call (B008 is about mutable defaults shared between calls)
    specs: list[str] = typer.Argument(None, help="Spec YAML files or shipped spec names."),  # noqa: B008
    gru: bool = typer.Option(False, "--gru", help="Time the int8 GRU (dqgen.gru) against cuDNN instead."),
    shapes: str | None = typer.Option(
        None, help="Comma-separated KxN[:G] (default: the five shapes of docs/performance.md)."
    ),
    impls: str | None = typer.Option(
        None, help="Comma-separated subset of: torch, cuda-naive, triton (dqgen and the same-bytes copy always run)."
    ),
    reps: int = typer.Option(20, min=3, help="Timed CUDA-graph replays (of 20 calls each) for the graph column."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    docs: str | None = typer.Option(None, help="Write the markdown report here (e.g. docs/performance.md)."),
    record: str | None = typer.Option(
        None, help="Write the rows as JSON here (default: bench/dequant.json beside --docs, else docs/bench/...)."
    ),
    extras: bool = typer.Option(
        True, help="Also measure call overhead and compile times (first spec only; subprocesses)."
    ),
    matmul: bool = typer.Option(
        False, "--matmul", help="Time y = x @ dequant(W) (M = 1..16) against cuBLAS, dequant + cuBLAS and torch int4."
    ),
    m: str | None = typer.Option(None, "--m", help="With --matmul: comma-separated M values (default 1,2,4,8,16)."),
    merge: bool = typer.Option(
        False, "--merge", help="With --matmul: keep the rows of the existing JSON record that this run does not time."
    ),
    plot: str | None = typer.Option(
        None, "--plot", help="Draw the matmul PNG from this JSON record (no GPU; needs matplotlib), then stop."
    ),
    w8a8: bool = typer.Option(
        False,
        "--w8a8",
        help="Time the activation quantizer and the W8A8 GEMM (int8 / fp8, M = 1..4096) against torch's "
        "(docs/bench/w8a8.json, w8a8_act.json; with --docs its section of the report).",
    ),
    model_linears: bool = typer.Option(
        False,
        "--model-linears",
        help="Time Llama-3-8B's 7 linears x --layers (default 4) as one CUDA graph per implementation, M = 1..256 "
        "(docs/bench/e2e_linears.json).",
    ),
    model: bool = typer.Option(
        False,
        "--model",
        help="Time a random-weight Llama-3-8B-shaped transformers model end to end: decode and prefill tokens/s, "
        "fp16 vs dqgen W4A16 / W8A8 vs torch int4, eager and as CUDA graphs (docs/bench/model.json, model.png; with "
        "--docs its section of the report).",
    ),
    layers: int | None = typer.Option(
        None, "--layers", help="With --model-linears (default 4) or --model (default 32): decoder layers, 1..32."
    ),
    batches: str | None = typer.Option(None, "--batches", help="With --model: decode batch sizes (default 1,16,64)."),
    prefill: int | None = typer.Option(
        None, "--prefill", help="With --model: prefill tokens (default 2048; 0: no prefill rows)."
    ),
    new_tokens: int | None = typer.Option(
        None, "--new-tokens", help="With --model: tokens generated per decode run (default 32)."
    ),
    modes: str | None = typer.Option(
        None,
        "--modes",
        help="With --model: eager (generate()), graphs (a static cache, one decode step captured as a CUDA graph "
        "and replayed) or both (default both).",
    ),
    runs: int | None = typer.Option(
        None, "--runs", help="With --model: timed runs per figure, the median (default 3; a warm-up run first)."
    ),
    replays: int | None = typer.Option(
        None, "--replays", help="With --model-linears: timed graph replays per round (default 20)."
    ),
    breakdown: bool = typer.Option(
        False,
        "--breakdown",
        help="With --model-linears: also time, per linear, the graph without it (each linear's share of the model).",
    ),
) -> None:
    """Time SPEC's kernel on the GPU (one call after an L2 flush, median) against copy bandwidth, its
    default launch, torch eager, a static_cast CUDA kernel and Triton; or, with --matmul, the fused matmul."""
    from .check.reference import example_group_size
    from .core.files import write_json
    from .run import device as dev
    from .tools.bench import (
        DEFAULT_SHAPES,
        bench_document,
        bench_spec,
        call_overhead,
        compile_times,
        copy_bandwidth,
        write_markdown,
    )

    e2e = {"--layers": layers, "--batches": batches, "--prefill": prefill, "--new-tokens": new_tokens,
           "--modes": modes, "--runs": runs, "--replays": replays,
           "--breakdown": True if breakdown else None}  # fmt: skip
    if model or model_linears:
        _bench_e2e(model, model_linears, e2e, specs, shapes, impls, m, as_json, docs, record, merge, plot,
                   matmul or gru or w8a8)  # fmt: skip
        return
    given = [flag for flag, value in e2e.items() if value is not None]
    if given:
        _fail(f"[{given[0]}] applies to --model or --model-linears only")
    if docs:
        _check_report(docs)
    if w8a8:
        other = [f for f, on in (("--matmul", matmul), ("--gru", gru), ("--m", m is not None), ("--merge", merge),
                                 ("--plot", plot is not None), ("--json", as_json), ("specs", bool(specs)),
                                 ("--shapes", shapes is not None), ("--impls", impls is not None)) if on]  # fmt: skip
        if other:
            _fail(f"--w8a8 times its own shapes and implementations; it takes --docs and --record only, got {other[0]}")
        if not dev.gpu_available():
            _fail("dqgen bench --w8a8 needs an NVIDIA GPU (none found)")
        from .tools import bench_w8a8
        from .w8a8 import bench as act_bench
        from .w8a8 import gemm_bench

        gemm_path = Path(record) if record else (Path(docs).parent if docs else Path("docs")) / "bench" / "w8a8.json"
        act_path = gemm_path.with_name(gemm_path.stem + "_act.json")
        act_bench.run(out=act_path)
        gemm_bench.run(out=gemm_path)
        if docs:
            bench_w8a8.write(Path(docs), gemm_path, act_path)
        return
    if plot is not None or matmul or m is not None or merge:
        _bench_matmul(specs, gru, shapes, impls, as_json, docs, record, matmul, m, plot, merge)
        return
    if gru:
        if not dev.gpu_available():
            _fail("dqgen bench --gru needs an NVIDIA GPU (none found)")
        from .gru.bench import bench_gru, markdown_table

        gru_json = Path(record) if record else Path(docs or "docs/performance.md").parent / "bench/gru.json"
        gru_rows = bench_gru(out_json=gru_json)
        typer.echo(markdown_table(gru_rows))
        if docs:
            import json

            from .gru.bench import performance_section
            from .tools.report import write_section

            header = json.loads(gru_json.read_text())  # the GPU and date the rows were taken on
            write_section(Path(docs), "gru", performance_section(gru_rows, header["gpu"], header["date"]))
        return
    if not specs:
        _fail("specs: expected at least one spec (a YAML file or a shipped name), or --gru")
    loaded = [_load(s) for s in specs]
    wanted = _parse_shapes(shapes) if shapes else DEFAULT_SHAPES  # every argument is checked before the GPU
    impl_names = _parse_dequant_impls(impls)
    if not dev.gpu_available():
        _fail("dqgen bench needs an NVIDIA GPU (none found)")
    import torch
    from rich.console import Console
    from rich.table import Table

    copy = copy_bandwidth()
    gpu = torch.cuda.get_device_name(0)
    log = (lambda m: None) if as_json else (lambda m: typer.echo(m, err=True))
    rows = []
    for s in loaded:
        sh = [(K, N, G if G is not None else example_group_size(s, K)) for K, N, G in wanted]
        rows += bench_spec(s, sh, copy, impls=impl_names, reps=reps, log=log)
    overhead: dict[str, dict] = {}
    compile_s: dict[str, dict] = {}
    if extras:
        name = loaded[0].name
        for what, measure, into in (
            ("call overhead", call_overhead, overhead),
            ("compile times", compile_times, compile_s),
        ):
            try:
                into[name] = measure(loaded[0])
                log(f"{what}: {into[name]}")
            except Exception as e:  # the rows are still worth writing; the figure is reported missing
                log(f"{what}: failed, not reported: {type(e).__name__}: {e}")
    doc = bench_document(gpu, copy, rows, overhead, compile_s)
    record_path = Path(record) if record else (Path(docs).parent if docs else Path("docs")) / "bench" / "dequant.json"
    write_json(record_path, doc)
    if docs:
        from .emit.sass import sass_report

        write_markdown(Path(docs), gpu, copy, rows, sass_report(list(specs)), overhead, compile_s, when=doc["date"])
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    t = Table(title=f"dqgen bench on {gpu}: copy {copy:.0f} GB/s; us = one call after an L2 flush (median)")
    for c in ("spec", "K x N", "G", "impl", "us", "GB/s", "% copy", "graph us", "equal"):
        t.add_column(c, justify="right" if c in ("us", "GB/s", "% copy", "graph us") else "left")
    for r in rows:
        t.add_row(
            r.spec,
            f"{r.K}x{r.N}",
            str(r.group),
            r.impl,
            f"{r.us:.1f}",
            f"{r.gbps:.0f}",
            f"{r.pct_copy:.1f}",
            "" if r.graph_us is None else f"{r.graph_us:.1f}",
            "n/a" if r.equal is None else ("yes" if r.equal else "NO"),
        )
    Console(width=140).print(t)
    if any(r.equal is False for r in rows):
        raise typer.Exit(EXIT_FAILED)


def _bench_matmul(
    specs: list[str] | None,
    gru: bool,
    shapes: str | None,
    impls: str | None,
    as_json: bool,
    docs: str | None,
    record: str | None,
    matmul: bool,
    m: str | None,
    plot: str | None,
    merge: bool = False,
) -> None:
    """``dqgen bench --matmul`` and ``--plot`` (dqgen.tools.bench_matmul): every flag checked before the GPU."""
    from .run import device as dev
    from .tools import bench_matmul as bm

    if plot is not None:
        if matmul or gru or specs or m is not None:
            _fail("--plot: draws the PNG from a JSON record alone; give no specs, --matmul, --m or --gru with it")
        try:
            doc = bm.load_document(Path(plot))
        except ValueError as e:
            _fail(f"--plot: {e}")
        if not bm.plot_available():
            _fail("--plot needs matplotlib (pip install matplotlib)")
        png = Path(plot).with_suffix(".png")
        bm.plot(doc, png)
        typer.echo(f"wrote {png}")
        return
    if not matmul:
        _fail("[--m] and [--merge] apply to --matmul only")
    if gru:
        _fail("--matmul and --gru are separate benches; give one of them")
    try:
        ms = bm.parse_ms(m) if m is not None else list(bm.DEFAULT_MS)
        wanted = bm.parse_impls(impls) if impls else None
    except ValueError as e:
        _fail(str(e))
    kn = list(bm.DEFAULT_SHAPES)
    if shapes:
        parsed = _parse_shapes(shapes)
        if any(g is not None for _, _, g in parsed):
            _fail("[--shapes] with --matmul takes KxN only: the group size is the spec's (128 for 'auto')")
        kn = [(K, N) for K, N, _ in parsed]
    loaded = [_load(s) for s in (specs or bm.DEFAULT_SPECS)]
    record_path = Path(record) if record else (Path(docs).parent if docs else Path("docs")) / "bench" / "matmul.json"
    old = None
    if merge:
        old = _merge_record(bm.load_document, record_path)
    if not dev.gpu_available():
        _fail("dqgen bench --matmul needs an NVIDIA GPU (none found)")
    import torch

    _same_gpu(old, record_path, torch.cuda.get_device_name(0))
    from .core.files import write_json
    from .run.timing import method
    from .tools.bench import copy_bandwidth

    log = (lambda msg: None) if as_json else (lambda msg: typer.echo(msg, err=True))
    copy = copy_bandwidth()
    rows = bm.bench_matmul(loaded, kn, ms, copy, impls=wanted, log=log)
    rounds = f"; the lowest of {bm.ROUNDS} rounds' medians (every other round in reverse order; each in us_rounds)"
    doc = bm.matmul_document(torch.cuda.get_device_name(0), copy, rows, method() + rounds)
    if old is not None:
        doc = bm.merge_documents(old, doc)
    write_json(record_path, doc)
    if docs:
        bm.write_markdown(Path(docs), doc)
    _plot_beside(record_path, doc, bm.plot, f"draw it with `dqgen bench --plot {record_path}`")
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(bm.markdown_section(doc))
    # humming quantizes W itself (its own scales): its rel_err is reported, not held to dqgen's tolerance
    if any(r.rel_err > bm.TOLERANCE[r.dtype] for r in rows if r.impl != "humming"):
        raise typer.Exit(EXIT_FAILED)


def _merge_record(load: Callable[[Path], dict], path: Path) -> dict:
    """--merge: the bench's existing record, checked against its schema before the GPU is touched (one line)."""
    try:
        return load(path)
    except ValueError as e:
        _fail(f"--merge: {e}")


def _same_gpu(old: dict | None, path: Path, gpu: str) -> None:
    """--merge: a record of another GPU is refused before anything is measured."""
    if old is not None and old["gpu"] != gpu:
        _fail(f"--merge: {path} is from {old['gpu']!r}, this GPU is {gpu!r}")


def _check_report(docs: str) -> None:
    """--docs: a report the bench could not rewrite (text outside its sections, a directory) is refused in one line
    before anything is measured or written."""
    from .tools.report import read_sections

    if Path(docs).exists() and not Path(docs).is_file():
        _fail(f"--docs: {docs} is not a file")
    try:
        read_sections(Path(docs))
    except (ValueError, OSError, UnicodeDecodeError) as e:
        _fail(f"--docs: {e}")


def _bench_e2e(
    model: bool,
    model_linears: bool,
    e2e: dict[str, Any],
    specs: list[str] | None,
    shapes: str | None,
    impls: str | None,
    m: str | None,
    as_json: bool,
    docs: str | None,
    record: str | None,
    merge: bool,
    plot: str | None,
    other_bench: bool,
) -> None:
    """``dqgen bench --model-linears`` and ``--model``: every flag checked before the GPU is looked for."""

    which = "--model" if model else "--model-linears"
    if model and model_linears:
        _fail("--model and --model-linears are separate benches; give one of them")
    if other_bench:
        _fail(f"{which} is a bench of its own; give no --matmul, --gru or --w8a8 with it")
    for flag, on in (("specs", bool(specs)), ("--shapes", shapes is not None),
                     ("--plot", plot is not None)):  # fmt: skip
        if on:
            _fail(f"{which} times fixed Llama-3-8B shapes; got {flag}")
    own = (("--layers", "--replays", "--breakdown") if model_linears
           else ("--layers", "--batches", "--prefill", "--new-tokens", "--modes", "--runs"))  # fmt: skip
    stray = [f for f, v in e2e.items() if v is not None and f not in own]
    if stray:
        _fail(f"[{stray[0]}] does not apply to {which}")
    if model_linears:
        _bench_linears(e2e, impls, m, as_json, record, merge, docs)
    else:
        if m is not None:
            _fail("[--m] does not apply to --model (it times --batches and --prefill)")
        _bench_model(e2e, impls, as_json, record, merge, docs)


def _bench_linears(
    e2e: dict[str, Any],
    impls: str | None,
    m: str | None,
    as_json: bool,
    record: str | None,
    merge: bool,
    docs: str | None,
) -> None:
    """``dqgen bench --model-linears``: the record (``--merge``: this run's rows over the record's), with --docs the
    "linears" section of the report."""
    from .run import device as dev
    from .tools import bench_linears as bl
    from .tools import bench_matmul as bm

    try:
        layers = bl.parse_layers(e2e["--layers"] if e2e["--layers"] is not None else bl.DEFAULT_LAYERS)
        replays = bl.parse_replays(e2e["--replays"] if e2e["--replays"] is not None else bl.DEFAULT_REPLAYS)
        ms = bm.parse_ms(m) if m is not None else list(bl.DEFAULT_MS)
        wanted = bl.parse_impls(impls) if impls else list(bl.IMPLS)
    except ValueError as e:
        _fail(str(e))
    record_path = Path(record) if record else Path("docs") / "bench" / "e2e_linears.json"
    old = None
    if merge:
        old = _merge_record(bl.load_document, record_path)
        if (old["spec"], old["layers"]) != (bl.SPEC, layers):
            _fail(
                f"--merge: {record_path} is of {old['spec']} with {old['layers']} layers; this run {bl.SPEC}, {layers}"
            )
    if docs:
        _check_report(docs)
    if not dev.gpu_available():
        _fail("dqgen bench --model-linears needs an NVIDIA GPU (none found)")
    import torch

    _same_gpu(old, record_path, torch.cuda.get_device_name(0))

    from .core.files import write_json

    log = (lambda msg: None) if as_json else (lambda msg: typer.echo(msg, err=True))
    rows = bl.bench_linears(layers, ms, wanted, replays, log=log, breakdown=bool(e2e["--breakdown"]))
    doc = bl.document(torch.cuda.get_device_name(0), layers, rows, bl.method_text(replays))
    if old is not None:
        try:
            doc = bl.merge_documents(old, doc)
        except ValueError as e:
            _fail(str(e))
    write_json(record_path, doc)
    if docs:
        bl.write_docs(Path(docs), doc)
    typer.echo(json.dumps(doc, indent=2) if as_json else bl.table(doc))
    bad = bl.failed(rows)
    if bad:
        typer.echo(f"error: {bad[0].impl} does not compute x @ W (rel_err {bad[0].rel_err:.2e})", err=True)
        raise typer.Exit(EXIT_FAILED)


def _bench_model(
    e2e: dict[str, Any], impls: str | None, as_json: bool, record: str | None, merge: bool, docs: str | None
) -> None:
    """``dqgen bench --model``: the record (rewritten after each implementation, so a run cut short keeps what it
    measured), its plot, with --docs the "model" section of the report."""
    import importlib.util

    from .run import device as dev
    from .tools import bench_model as bmod

    try:
        given = {flag: value for flag, value in e2e.items() if value is not None}
        layers = bmod.parse_int("--layers", given.get("--layers", bmod.MAX_LAYERS), 1, bmod.MAX_LAYERS)
        batches = bmod.parse_list(
            "--batches", given.get("--batches", ",".join(map(str, bmod.DEFAULT_BATCHES))), 1, 1024
        )
        prefill = bmod.parse_int("--prefill", given.get("--prefill", bmod.DEFAULT_PREFILL), 0, bmod.MAX_POSITIONS)
        new_tokens = bmod.parse_int("--new-tokens", given.get("--new-tokens", bmod.DEFAULT_NEW_TOKENS), 2, 4096)
        runs = bmod.parse_int("--runs", given.get("--runs", bmod.DEFAULT_RUNS), 1, 100)
        modes = bmod.parse_names("--modes", given.get("--modes", ",".join(bmod.MODES)), bmod.MODES)
        wanted = bmod.parse_names("--impls", impls, bmod.IMPLS) if impls else list(bmod.IMPLS)
    except ValueError as e:
        _fail(str(e))
    record_path = Path(record) if record else Path("docs") / "bench" / "model.json"
    old = None
    if merge:
        old = _merge_record(bmod.load_document, record_path)
    if docs:
        _check_report(docs)
    if importlib.util.find_spec("transformers") is None:
        _fail("dqgen bench --model needs transformers (pip install transformers)")
    if not dev.gpu_available():
        _fail("dqgen bench --model needs an NVIDIA GPU (none found)")
    import torch

    from .core.files import write_json

    gpu = torch.cuda.get_device_name(0)
    if old is not None and (old["gpu"], old["layers"]) != (gpu, layers):
        _fail(f"--merge: {record_path} is of {old['gpu']!r} with {old['layers']} layers; this run {gpu!r}, {layers}")
    log = (lambda msg: None) if as_json else (lambda msg: typer.echo(msg, err=True))
    run_versions = bmod.versions()

    def record_of(rows: list[Any], prepare_s: dict[str, float], prepare_how: dict[str, str]) -> dict:
        doc = bmod.document(gpu, layers, rows, bmod.method_text(runs), run_versions, prepare_s, prepare_how)
        return doc if old is None else bmod.merge_documents(old, doc)

    def so_far(rows: list[Any], prepare_s: dict[str, float], prepare_how: dict[str, str]) -> None:
        write_json(record_path, record_of(rows, prepare_s, prepare_how))

    rows, prepare_s, prepare_how = bmod.bench_model(
        layers, batches, prefill or None, new_tokens, runs, modes, wanted, log=log, done=so_far
    )
    doc = record_of(rows, prepare_s, prepare_how)
    write_json(record_path, doc)
    _plot_beside(record_path, doc, bmod.plot, "pip install 'dqgen[plot]'")
    if docs:
        bmod.write_docs(Path(docs), doc)
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(bmod.speedups(doc) + "\n\n" + bmod.table(doc))


def _plot_beside(record_path: Path, doc: dict, plot: Any, remedy: str) -> None:
    """A bench record's PNG beside it where matplotlib is installed, else one line saying how to get it."""
    from .tools.bench_matmul import plot_available

    png = record_path.with_suffix(".png")
    if plot_available():
        plot(doc, png)
    else:
        typer.echo(f"matplotlib is not installed here: no {png} ({remedy})", err=True)


def _bits_text(widths: list[int]) -> str:
    """[1, 2, 3, 4] -> '1-4'; [1, 2, 4, 8] -> '1, 2, 4, 8'."""
    runs: list[list[int]] = []
    for b in sorted(widths):
        if runs and b == runs[-1][-1] + 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _accepted_widths(packing: dict, zeros: str = "none") -> list[int]:
    """The widths of unsigned codes for which the spec validator accepts this packing and zero mode."""
    from pydantic import ValidationError

    from .core.spec import Spec

    widths = []
    for bits in range(1, 9):
        try:
            Spec.model_validate(
                {
                    "name": "w",
                    "source": {"bits": bits, "kind": "unsigned"},
                    "target": "fp16",
                    "packing": packing,
                    "scales": {"group_size": -1},
                    "zeros": {"mode": zeros},
                }
            )
            widths.append(bits)
        except ValidationError:
            pass
    return widths


def _preset_rows() -> list[tuple[str, str, str, str]]:
    """(spec field, name, code bits, one-line description) of every preset, from dqgen.core.spec's own tables."""
    import math
    from typing import get_args

    from .core import formats
    from .core import spec as sp

    rows = []
    for name, by_bits in sp.ORDER_PRESETS.items():
        orders = (
            ""
            if name == "sequential"
            else "; " + "; ".join(f"{b}-bit fields hold elements {o}" for b, o in sorted(by_bits.items()))
        )
        rows.append(
            (
                "packing.order",
                name,
                _bits_text(_accepted_widths({"axis": "K", "order": name})),
                sp.ORDER_PRESET_DOCS.get(name, "") + orders,
            )
        )
    for name, values in sp.CODEBOOK_PRESETS.items():
        bits = max(1, (len(values) - 1).bit_length())
        rows.append(
            (
                "source.codebook",
                name,
                str(bits),
                f"{sp.CODEBOOK_PRESET_DOCS.get(name, '')}; "
                f"{len(values)} values from {min(values):g} to {max(values):g}",
            )
        )
    for fmt in sp.ELEMENT_FORMATS.values():
        # decode gives Fraction / int / float; every finite minifloat value is exact as a float
        finite = sorted({abs(float(v)) for v in map(fmt.decode, range(1 << fmt.width)) if math.isfinite(v)})
        value_text = "+-{" + ", ".join(f"{v:g}" for v in finite) + "}" if len(finite) <= 8 else f"max {finite[-1]:g}"
        layout = fmt.describe().removeprefix(f"{fmt.name}: ")
        rows.append(("source.format", fmt.name, str(fmt.width), f"{fmt.doc}; {layout}; {value_text}"))
    for name in sp.BLOCK_SCALE_DTYPES:
        rows.append(("scales.dtype", name, str(formats.MINIFLOATS[name].width), sp.BLOCK_SCALE_DOCS.get(name, "")))
    for name in get_args(sp.ZeroMode):
        rows.append(
            (
                "zeros.mode",
                name,
                _bits_text(_accepted_widths({"axis": "K"}, zeros=name)),
                sp.ZERO_MODE_DOCS.get(name, ""),
            )
        )
    return rows


@app.command("list")
def list_specs(
    directory: str = typer.Argument(None, help="Folder of spec files (default: the specs shipped with dqgen)."),
) -> None:
    """List the specs in DIRECTORY (default: the shipped ones, each usable by name) and every preset."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from .core.spec import SHIPPED_SPECS

    shipped = directory is None
    if directory is None:
        directory = str(SHIPPED_SPECS)
    if not Path(directory).is_dir():
        _fail(f"{printable(directory)}: no such folder of specs")
    paths = sorted(Path(directory).glob("*.yaml"))
    console = Console()
    title = Text("Shipped specs (use by name: dqgen build NAME)" if shipped else f"Specs in {printable(directory)}/")
    specs = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    specs.add_column("spec", no_wrap=True, min_width=max([len(p.name) for p in paths], default=4))
    specs.add_column("conversion", no_wrap=True)
    specs.add_column("description")
    for p in paths:
        try:
            s = load_spec(p)
        except SpecError as e:
            specs.add_row(
                Text(printable(p.stem if shipped else p.name)),
                Text("INVALID", style="red"),
                Text(printable(str(e).removeprefix(f"{printable(str(p))}: "))),
            )
            continue
        line = s.description.strip().splitlines()[0] if s.description.strip() else ""
        name = "" if s.name == p.stem else f" (name: {s.name})"
        specs.add_row(
            Text(printable(p.stem if shipped else p.name)),
            Text(f"{s.source.short} -> {s.target.value}"),
            Text(printable(line + name)),
        )
    console.print(specs)
    presets = Table(title="Presets", box=box.SIMPLE_HEAD, title_justify="left")
    rows = _preset_rows()
    presets.add_column("field", no_wrap=True)
    presets.add_column("name", no_wrap=True, min_width=max(len(r[1]) for r in rows))
    presets.add_column("bits", no_wrap=True)
    presets.add_column("description")
    for i, (field, name, bits, doc) in enumerate(rows):
        if i and field != rows[i - 1][0]:
            presets.add_section()
        presets.add_row(Text(field), Text(name), Text(bits), Text(doc))
    console.print(presets)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends a command the way Ctrl-C does, as an exception, so that its cleanup runs (dequant
    removes its temporary file); a second SIGTERM kills at once."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise SystemExit(128 + signum)


def main() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


@app.command()
def dequant(
    file: str = typer.Argument(
        ..., help="An AWQ or GPTQ checkpoint: a .safetensors file, a folder, or a model.safetensors.index.json."
    ),
    out: str = typer.Option(
        ...,
        "--out",
        help="A new (or empty) model folder: shards, model.safetensors.index.json, config.json without "
        "quantization_config, the tokenizer files; or one .safetensors file (<prefix>.weight as "
        "\\[out_features, in_features]).",
    ),
    dtype: str = typer.Option("fp16", "--dtype", help="Output dtype: fp16 or bf16."),
    device: str | None = typer.Option(
        None,
        "--device",
        help="cuda (the generated kernels) or cpu (the reference); default cuda when a GPU is present.",
    ),
    shard_size: str = typer.Option(
        "5GB", "--shard-size", help="Most bytes of tensors per shard of a folder output: 5GB, 500MB, 2GiB, bytes."
    ),
) -> None:
    """Dequantize every AWQ / GPTQ layer of FILE into a dense model OUT; other tensors are copied unchanged."""
    from .emit.nvrtc import CompileError
    from .io.checkpoint import dequantize_file
    from .io.safetensors_io import parse_size

    if dtype not in ("fp16", "bf16"):
        _fail(f"[--dtype] got {dtype!r}; expected fp16 or bf16")
    if device not in (None, "cuda", "cpu"):
        _fail(f"[--device] got {device!r}; expected cuda or cpu")
    try:
        shard_bytes = parse_size(shard_size, "--shard-size")
    except ValueError as e:
        _fail(str(e))
    if device != "cpu":
        from .run import device as dev

        if not dev.gpu_available():
            which = "--device cuda: " if device == "cuda" else ""
            _fail(f"{which}no NVIDIA GPU found; pass --device cpu to dequantize with the CPU reference (same bits)")
        device = "cuda"
    try:
        # print, not typer.echo: while the progress bar runs on a terminal, rich redirects sys.stdout above it.
        dequantize_file(
            file,
            out,
            target=dtype,
            device=device,
            progress=True,
            log=lambda line: print(line, flush=True),
            shard_size=shard_bytes,
        )
    except (ValueError, OSError) as e:
        _fail(str(e).replace("\n", " "))
    except CompileError as e:
        _fail(f"compiling a layer's kernel failed: {str(e).strip().splitlines()[0]}", EXIT_FAILED)
    typer.echo(f"wrote {out}")


# Every command gets the help without '<bool>' after flags (after the last @app.command above).
for _info in app.registered_commands:
    if _info.cls in (None, TyperCommand):
        _info.cls = _Command
