"""The ``dqgen`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from .spec import SpecError, load_spec

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Generate, prove and run fast GPU dequantization kernels.")


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _load(path: str):
    try:
        return load_spec(path)
    except SpecError as e:
        _fail(str(e))


@app.command()
def explain(
    spec: str = typer.Argument(..., help="Path to a spec YAML file."),
    as_json: bool = typer.Option(False, "--json", help="Print the Plan as JSON."),
    strategy: Optional[str] = typer.Option(None, help="Show this strategy's best plan instead of the cheapest."),
    words: int = typer.Option(1_000_000, min=0, help="Random words in the proof (besides every code at every lane)."),
) -> None:
    """Show the derived bit math of SPEC's conversion, op by op, and prove it."""
    from .explain import render
    from .prove import prove
    from .solver import NoPlanError, solve

    s = _load(spec)
    try:
        plan = solve(s, strategy)
    except NoPlanError as e:
        _fail(str(e))
    proof = prove(plan, s, n_random=words)
    if as_json:
        out = plan.to_json()
        out["proof"] = {"ok": proof.ok, "words": proof.words, "failures": proof.failures}
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(render(s, plan, proof))
    if not proof.ok:
        raise typer.Exit(1)


@app.command()
def build(
    spec: str = typer.Argument(..., help="Path to a spec YAML file."),
    arch: Optional[str] = typer.Option(None, help="Architecture to compile PTX and cubin for (default: the spec's)."),
    out: str = typer.Option("generated", help="Folder for the .cu, .cuh and .ptx files."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    words: int = typer.Option(1_000_000, min=0, help="Random words in the proof (besides every code at every lane)."),
) -> None:
    """Solve, prove, render and compile SPEC; on a machine with a GPU also run it against the reference."""
    from .build import build_spec, print_summary

    s = _load(spec)
    try:
        report = build_spec(s, arch=arch or s.arch, out_dir=Path(out), words=words)
    except ValueError as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"[--out] cannot write {out!r}: {e.strerror or e}")
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_summary(report)
    if not report["ok"]:
        raise typer.Exit(1)


@app.command("list")
def list_specs(directory: str = typer.Argument("specs", help="Folder of spec files.")) -> None:
    """List the specs in DIRECTORY with a one-line description."""
    from .spec import ORDER_PRESETS

    if not Path(directory).is_dir():
        _fail(f"{directory}: no such folder of specs")
    for p in sorted(Path(directory).glob("*.yaml")):
        try:
            s = load_spec(p)
            typer.echo(f"{p.name:<28} {s.source.short} -> {s.target.value:<5} {s.description.strip().splitlines()[0] if s.description else ''}")
        except SpecError as e:
            typer.echo(f"{p.name:<28} INVALID: {e}")
    typer.echo("order presets: " + ", ".join(f"{k} ({', '.join(f'{b}-bit' for b in v)})" for k, v in ORDER_PRESETS.items()))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
