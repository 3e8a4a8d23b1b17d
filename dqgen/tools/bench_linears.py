"""``dqgen bench --model-linears``: what a user of a quantized Llama-3-8B sees of its linears (issue 23, deliverable 5,
"end to end"): the 7 linears of a decoder layer (q, k, v, o, gate, up, down) x ``layers`` layers, every call of one
implementation captured in ONE CUDA graph, replayed, at M = 1..256 tokens.

Weights: per layer and linear, random AWQ int4 g128 fp16 checkpoint tensors (dqgen.run.inputs.make_inputs) and the
dense W dqgen dequantizes them to; every implementation runs that same weight: ``fp16 cublas``
(torch.nn.functional.linear on W, unquantized), ``dqgen`` (dqgen.nn.QuantLinear over the checkpoint: the GEMV, GEMM
or dequantize + cuBLAS its dispatch rule picks), ``torch int4`` (aten._weight_int4pack_mm, bf16, W requantized by
:func:`tinygemm_linear`: W's groups are on a 16-level grid, so the codes come back the same) and ``humming``
(humming-kernels' HummingLayer on W, where installed). Each implementation's output is checked against float64
x @ W first (``rel_err``, layer 0's seven linears, M = 16).

Timing: per M, one graph per implementation; each graph replayed ``replays`` times after WARMUP_REPLAYS untimed
ones, CUDA events around each replay, the median; ROUNDS rounds (the second in reverse order), a row's ``us`` the
lowest round median. No L2 flush: the weights of even one layer (about 110 MB int4, 440 MB fp16) exceed the H100's
50 MB L2, so a replay reads them from memory as a model does. Inputs: one x [M, K] per K (4096, 14336), as a
layer's activations sit in L2 in a model.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from .options import parse_subset

#: Llama-3-8B's decoder linears as (name, K = in_features, N = out_features).
LINEARS: tuple[tuple[str, int, int], ...] = (
    ("q", 4096, 4096),
    ("k", 4096, 1024),
    ("v", 4096, 1024),
    ("o", 4096, 4096),
    ("gate", 4096, 14336),
    ("up", 4096, 14336),
    ("down", 14336, 4096),
)
SPEC = "awq_int4_fp16"
#: Where the inputs are drawn (a CPU test of the bench's bookkeeping draws them on the CPU).
DEVICE = "cuda"
GROUP = 128
DEFAULT_LAYERS = 4
#: Llama-3-8B has 32 decoder layers; more would only measure a model that does not exist.
MAX_LAYERS = 32
DEFAULT_MS = (1, 4, 16, 32, 64, 128, 256)
IMPLS = ("fp16 cublas", "dqgen", "torch int4", "humming")
DEFAULT_REPLAYS = 20
WARMUP_REPLAYS = 3
ROUNDS = 2
#: M of the correctness check (a GEMV-or-GEMM boundary case of the dispatch).
CHECK_M = 16
#: Relative error bounds against float64 x @ W: fp16 outputs (dqgen, cuBLAS, humming), bf16 (torch int4: bf16
#: activations and bf16-rounded scales and zeros).
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}


class LinearsRow(BaseModel):
    """One graph: ``impl`` at ``M`` tokens over ``layers`` x 7 linears; ``us`` the lowest round's median replay."""

    model_config = ConfigDict(extra="forbid")

    impl: str
    M: int
    layers: int
    us: float
    us_rounds: list[float]
    rel_err: float
    #: ``--breakdown``: the linear (a LINEARS name) whose calls this graph leaves out; the full graph's time less
    #: this one's is what that linear costs in the model's sequence (its neighbours' weights evict it from L2, as in
    #: the full graph). "": every linear.
    without: str = ""


class LinearsDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str
    date: str
    spec: str
    layers: int
    linears: list[tuple[str, int, int]]
    method: str
    rows: list[LinearsRow]
    #: How the table was assembled where it is not one run's (``--merge``: which rows came from which run).
    note: str = ""


# ----------------------------------------------------------------------------------------------- flags


def parse_layers(value: int) -> int:
    """``--layers`` with --model-linears: 1..MAX_LAYERS."""
    if not 1 <= value <= MAX_LAYERS:
        raise ValueError(f"[--layers] got {value}; expected 1..{MAX_LAYERS} decoder layers")
    return value


def parse_impls(text: str) -> list[str]:
    """``--impls`` with --model-linears: a comma-separated subset of IMPLS."""
    return parse_subset("--impls", text, IMPLS, "--model-linears")


def parse_replays(value: int) -> int:
    if value < 3:
        raise ValueError(f"[--replays] got {value}; expected at least 3 timed graph replays")
    return value


# ----------------------------------------------------------------------------------------------- the record


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def method_text(replays: int) -> str:
    return (
        f"one CUDA graph per implementation and M holding every linear call; {WARMUP_REPLAYS} untimed replays, then "
        f"{replays} replays timed one by one with CUDA events, median; the lowest of {ROUNDS} rounds' medians "
        "(every other round in reverse order; each in us_rounds); no L2 flush (the weights exceed L2)"
    )


def document(gpu: str, layers: int, rows: list[LinearsRow], method: str, when: str = "") -> dict:
    """The JSON record of docs/bench/e2e_linears.json, checked by its schema."""
    doc = LinearsDocument(
        gpu=gpu, date=when or _now(), spec=SPEC, layers=layers, linears=list(LINEARS), method=method, rows=rows
    )
    return doc.model_dump()


def load_document(path: Path) -> dict:
    """An e2e_linears.json record, checked against the schema: ValueError (one line naming the file) otherwise."""
    from .report import validated_record

    return validated_record(path, LinearsDocument, "linears")


def merge_documents(old: dict, new: dict) -> dict:
    """``new`` with the rows of ``old`` it did not measure (same impl and M): one table from several runs
    (``--merge``; e.g. M = 256 in a process of its own). Refused across GPUs, specs or layer counts."""
    for key in ("gpu", "spec", "layers"):
        if old[key] != new[key]:
            raise ValueError(f"--merge: the record has {key} {old[key]!r}, this run {new[key]!r}; not one table")
    # by (impl, M): a --breakdown share subtracts two graphs of one run, so a pair this run measured keeps none of
    # the record's rows (a leave-one-out row of another run would be paired with this run's full graph)
    seen = {(r["impl"], r["M"]) for r in new["rows"]}
    kept = [r for r in old["rows"] if (r["impl"], r["M"]) not in seen]
    if not kept:
        return new
    by_m: dict[int, list[str]] = {}
    for r in kept:
        by_m.setdefault(r["M"], []).append(r["impl"] + (f" without {r['without']}" if r.get("without") else ""))
    which = "; ".join(f"M = {M}: {', '.join(impls)}" for M, impls in sorted(by_m.items()))
    note = f"rows kept from the run of {old['date']} ({which}), the rest from the run of {new['date']}"
    if old.get("note"):
        note += f"; that run's record: {old['note']}"
    return new | {"rows": sorted(kept + new["rows"], key=lambda r: r["M"]), "note": note}


def full_rows(doc: dict) -> list[dict]:
    """The rows of graphs over every linear (not --breakdown's leave-one-out graphs)."""
    return [r for r in doc["rows"] if not r.get("without")]


class Share(NamedTuple):
    """--breakdown: what one linear's ``layers`` calls cost in the model's sequence (µs), and the larger of the two
    graphs' round-to-round spreads (µs), under which the share is not a measurement."""

    us: float
    spread: float

    @property
    def measured(self) -> bool:
        return self.us > self.spread


def shares(doc: dict) -> dict[tuple[str, int, str], Share]:
    """--breakdown: (impl, M, linear) -> the full graph's µs less the graph's without that linear."""
    full = {(r["impl"], r["M"]): r for r in full_rows(doc)}

    def spread(r: dict) -> float:
        return max(r["us_rounds"]) - min(r["us_rounds"])

    out = {}
    for r in doc["rows"]:
        whole = full.get((r["impl"], r["M"]))
        if r.get("without") and whole is not None:
            out[(r["impl"], r["M"], r["without"])] = Share(whole["us"] - r["us"], max(spread(whole), spread(r)))
    return out


def breakdown_table(doc: dict) -> str:
    """Markdown: per M and linear, each implementation's share of the graph (:func:`shares`; in parentheses where it
    is within the two graphs' round spread), and dqgen's over the fastest other implementation's where both are
    measured; "" without --breakdown rows."""
    part = shares(doc)
    if not part:
        return ""
    impls = [i for i in IMPLS if any(k[0] == i for k in part)]
    head = ["M", "linear", *(f"{i} us" for i in impls), "dqgen / best other"]
    lines = [
        f"Each linear's share ({doc['layers']} calls): the full graph's time less the graph without that linear, µs;"
        " in parentheses where it is within the spread of the two graphs' rounds (not a measurement). Shares need"
        " not add up to the full graph: a linear's cost depends on its neighbours.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for M in sorted({k[1] for k in part}):
        for name, _, _ in LINEARS:
            here = {i: part[(i, M, name)] for i in impls if (i, M, name) in part}
            if not here:
                continue
            others = {i: t.us for i, t in here.items() if i != "dqgen" and t.measured}
            best = min(others, key=others.__getitem__) if others else None
            mine = here.get("dqgen")
            ratio = f"{mine.us / others[best]:.2f}x {best}" if best is not None and mine and mine.measured else ""
            cells = ["" if i not in here else f"{here[i].us:.1f}" if here[i].measured else f"({here[i].us:.1f})"
                     for i in impls]  # fmt: skip
            lines.append("| " + " | ".join([str(M), name, *cells, ratio]) + " |")
    return "\n".join(lines)


#: The "linears" section's title in docs/performance.md.
SECTION_TITLE = "## Llama-3-8B's linears as one CUDA graph (`dqgen bench --model-linears`)"


def markdown_section(doc: dict) -> str:
    """The "linears" section of docs/performance.md, from the record alone: how it was measured, the table, and
    where dqgen stands against fp16 and each peer at each M."""
    by = {(r["impl"], r["M"]): r["us"] for r in full_rows(doc)}
    verdicts = []
    for peer in ("fp16 cublas", "humming", "torch int4"):
        ms = sorted(M for (i, M) in by if i == peer and ("dqgen", M) in by)
        if not ms:
            continue
        ahead = [M for M in ms if by[("dqgen", M)] < by[(peer, M)]]
        behind = [M for M in ms if M not in ahead]
        where = (
            "faster at every M" if not behind else "slower at every M" if not ahead
            else f"faster at M = {', '.join(map(str, ahead))}, slower at M = {', '.join(map(str, behind))}"
        )  # fmt: skip
        ratios = ", ".join(f"{by[('dqgen', M)] / by[(peer, M)]:.2f}x at {M}" for M in ms)
        verdicts.append(f"- dqgen against {peer}: {where} ({ratios} its time).")
    names = ", ".join(f"{n} {k}x{m}" for n, k, m in doc["linears"])
    return "\n".join(
        [
            SECTION_TITLE,
            "",
            f"Written by `dqgen bench --model-linears` on {doc['date']}, GPU: {doc['gpu']}. The {len(doc['linears'])} "
            f"linears of a Llama-3-8B decoder layer ({names}; K x N) x {doc['layers']} layers, {doc['spec']}, every "
            "call of one implementation in one CUDA graph (what a server replays); the same weights for every "
            "implementation (module docstring of dqgen.tools.bench_linears).",
            "",
            f"Method: {doc['method']}." + (f" {doc['note']}." if doc.get("note") else ""),
            "",
            table(doc),
            "",
            *verdicts,
            *(["", parts] if (parts := breakdown_table(doc)) else []),
        ]
    )


def write_docs(path: Path, doc: dict) -> None:
    """Rewrite the "linears" section of ``path`` (docs/performance.md) from ``doc``."""
    from .report import write_section

    write_section(path, "linears", markdown_section(doc))


def table(doc: dict) -> str:
    """Markdown: one line per M, one column per implementation that ran (µs), then each one's time over fp16's."""
    rows = full_rows(doc)
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    others = [i for i in impls if i != "fp16 cublas"] if "fp16 cublas" in impls else []
    head = ["M", *(f"{i} us" for i in impls), *(f"{i} / fp16" for i in others)]
    lines = [
        f"{len(LINEARS)} Llama-3-8B linears x {doc['layers']} layers in one CUDA graph, {doc['spec']}, "
        f"on {doc['gpu']} ({doc['date']})",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for M in sorted({r["M"] for r in rows}):
        here = {r["impl"]: r["us"] for r in rows if r["M"] == M}
        cells = [str(M), *(f"{here[i]:.1f}" if i in here else "" for i in impls)]
        base = here.get("fp16 cublas")
        cells += [f"{here[i] / base:.2f}x" if i in here and base else "" for i in others]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- torch int4


def tinygemm_quantize(W_nk: Any, group: int = GROUP) -> tuple[Any, Any, Any]:
    """Round-to-nearest of W [N, K] for tinygemm, per group of ``group`` along K: codes [N, K] int32 in 0..15 with
    scale = (max - min) / 15 and the additive zero = min + 8 * scale, both rounded to bf16, so that
    W ~ (q - 8) * scale + zero. Returns the codes, scales-and-zeros [K / group, N, 2] bf16 (the kernel's operand)
    and the weight they stand for, [N, K] float32."""
    import torch

    N, K = (int(d) for d in W_nk.shape)
    if K % group:
        raise ValueError(f"W: K = {K} is not a multiple of the group size {group}")
    w = W_nk.float().reshape(N, K // group, group)
    lo, hi = w.amin(dim=2, keepdim=True), w.amax(dim=2, keepdim=True)
    scale = ((hi - lo) / 15).clamp_min(1e-8)
    codes = ((w - lo) / scale).round_().clamp_(0, 15).to(torch.int32)
    scale_b = scale.to(torch.bfloat16)
    zero_b = (lo + 8 * scale).to(torch.bfloat16)
    w_ref = ((codes - 8).float() * scale_b.float() + zero_b.float()).reshape(N, K)
    sz = torch.stack([scale_b.squeeze(2).t(), zero_b.squeeze(2).t()], dim=2).contiguous()
    return codes.reshape(N, K), sz, w_ref


def tinygemm_linear(W_nk: Any, group: int = GROUP) -> tuple[Callable[[Any], Any], Any]:
    """torch's int4 kernel (aten._weight_int4pack_mm, bf16) on W [N, K], quantized by :func:`tinygemm_quantize`.
    Returns the call on x [M, K] bf16 and the weight it computes with (bf16-rounded
    scales and zeros, [N, K] float32: the reference). Torch packs the codes itself
    (_convert_weight_to_int4pack, uint8 [N, K / 2]); which nibble holds the even k has changed between torch
    versions, so both are tried on a probe and the one that reproduces the weight is kept."""
    import torch

    codes, sz, w_ref = tinygemm_quantize(W_nk, group)
    K = int(W_nk.shape[1])
    probe = torch.randn((CHECK_M, K), dtype=torch.bfloat16, device=W_nk.device, generator=_gen(7))
    ref = probe.double() @ w_ref.double().t()
    errs = []
    for even_high in (True, False):
        hi_n, lo_n = (codes[:, 0::2], codes[:, 1::2]) if even_high else (codes[:, 1::2], codes[:, 0::2])
        packed = torch._convert_weight_to_int4pack((hi_n << 4 | lo_n).to(torch.uint8).contiguous(), 8)

        def call(x: Any, packed: Any = packed) -> Any:
            return torch.ops.aten._weight_int4pack_mm(x, packed, group, sz)

        errs.append(rel_err(call(probe), ref))
        if errs[-1] <= TOLERANCE["bf16"]:
            return call, w_ref
    raise RuntimeError(f"torch int4: neither nibble order reproduces the weight (rel_err {errs})")


# ----------------------------------------------------------------------------------------------- measuring


def _gen(seed: int) -> Any:
    import torch

    return torch.Generator(device=DEVICE).manual_seed(seed)


def rel_err(y: Any, ref: Any) -> float:
    """||y - ref|| / ||ref|| in float64; inf for a non-finite output."""
    import torch

    if not bool(torch.isfinite(y).all()):
        return float("inf")
    return float(torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref))


def graph_replays_us(run: Callable[[], None], replays: int) -> tuple[Any, Callable[[], float]]:
    """``run`` (every linear call of one implementation) captured in one CUDA graph after two eager calls (JIT
    compiles, handles, the fast paths' first checked calls); returns the graph and a function that times it:
    WARMUP_REPLAYS untimed replays, then ``replays`` replays each between CUDA events, the median in µs. The graph
    reads the tensors ``run`` read at their captured addresses: the caller keeps them alive as long as the graph."""
    import torch

    run()
    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()  # on the capture stream first, as torch recommends
        with torch.cuda.graph(graph, stream=stream):
            run()
    torch.cuda.synchronize()

    def timed() -> float:
        for _ in range(WARMUP_REPLAYS):
            graph.replay()
        pairs = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graph.replay()
            b.record()
            pairs.append((a, b))
        torch.cuda.synchronize()
        return 1000.0 * statistics.median(a.elapsed_time(b) for a, b in pairs)

    return graph, timed


def _build(impl: str, weights: list[dict[str, Any]]) -> list[Callable[[Any], Any]]:
    """One callable per linear (in ``weights``' order) for ``impl``."""
    import torch

    if impl == "fp16 cublas":
        import functools

        linear = torch.nn.functional.linear
        return [functools.partial(lambda x, w: linear(x, w), w=w["W_nk"]) for w in weights]
    if impl == "dqgen":
        from ..nn.linear import QuantLinear

        return [QuantLinear.from_checkpoint(SPEC, w["q"], w["s"], w["z"]) for w in weights]
    if impl == "torch int4":
        return [tinygemm_linear(w["W_nk"].to(torch.bfloat16))[0] for w in weights]
    if impl == "humming":
        from .bench_matmul import humming_layer

        return [humming_layer(w["W_nk"]) for w in weights]
    raise ValueError(f"impl: expected one of {', '.join(IMPLS)}, got {impl!r}")


def bench_linears(
    layers: int,
    ms: list[int],
    impls: list[str] | None = None,
    replays: int = DEFAULT_REPLAYS,
    log: Callable[[str], None] = print,
    breakdown: bool = False,
) -> list[LinearsRow]:
    """Every implementation at every M on the same weights (see the module docstring); with ``breakdown`` also,
    per linear, the graph of every call but that linear's (LinearsRow.without)."""
    import torch

    from ..core.spec import load_spec
    from ..run.inputs import make_inputs
    from ..run.runtime import Kernel
    from .bench_matmul import humming_installed

    wanted = list(impls or IMPLS)
    if "humming" in wanted and not humming_installed():
        log("humming: not installed (pip install humming-kernels): no humming rows")
        wanted.remove("humming")
    spec = load_spec(SPEC)
    kernel: Any = Kernel(spec)
    weights: list[dict[str, Any]] = []
    for layer in range(layers):
        for i, (name, K, N) in enumerate(LINEARS):
            q, s, z = make_inputs(spec, K, N, 1000 * layer + i)
            W = kernel(q, s, z)  # [K, N] fp16: the weight every implementation multiplies by
            weights.append({"name": name, "K": K, "N": N, "q": q, "s": s, "z": z, "W_nk": W.t().contiguous()})
    fns: dict[str, list[Callable[[Any], Any]]] = {}
    errs: dict[str, float] = {}
    for impl in wanted:
        dtype = torch.bfloat16 if impl == "torch int4" else torch.float16
        try:
            calls = _build(impl, weights)
            worst = 0.0
            for w, fn in list(zip(weights, calls, strict=True))[: len(LINEARS)]:
                x = torch.randn((CHECK_M, w["K"]), dtype=dtype, device=DEVICE, generator=_gen(w["K"]))
                worst = max(worst, rel_err(fn(x), x.double() @ w["W_nk"].double().t()))
        except Exception as e:  # a peer that fails to build or run (a JIT compile, a refused format): its rows only
            log(f"{impl}: failed ({type(e).__name__}: {str(e)[:200]}): no rows")
            continue
        fns[impl] = calls
        errs[impl] = worst
        tol = TOLERANCE["bf16" if impl == "torch int4" else "fp16"]
        log(f"{impl}: rel_err {worst:.2e} against float64 x @ W (layer 0, M = {CHECK_M}; bound {tol:g})")
    for w in weights:  # the builders made what they keep; the checkpoint tensors stay only in QuantLinear's buffers
        w.pop("q"), w.pop("s"), w.pop("z")
    variants = ["", *(name for name, _, _ in LINEARS)] if breakdown else [""]
    rows: list[LinearsRow] = []
    for M in ms:
        timers: list[tuple[str, str, Callable[[], float]]] = []
        graphs = []
        for impl, calls in fns.items():
            dtype = torch.bfloat16 if impl == "torch int4" else torch.float16
            xs = {
                K: torch.randn((M, K), dtype=dtype, device=DEVICE, generator=_gen(M * 31 + K))
                for K in sorted({k for _, k, _ in LINEARS})
            }
            for without in variants:
                pairs = [(xs[w["K"]], fn) for w, fn in zip(weights, calls, strict=True) if w["name"] != without]

                def run(pairs: list[tuple[Any, Callable[[Any], Any]]] = pairs) -> None:
                    for x, fn in pairs:
                        fn(x)

                what = f"{impl} M={M}" + (f" without {without}" if without else "")
                try:
                    graph, timed = graph_replays_us(run, replays)
                except Exception as e:
                    log(f"{what}: capture failed ({type(e).__name__}: {str(e)[:200]}): no row")
                    continue
                # the graph reads its inputs where they were at capture: they live as long as it does (the next
                # capture empties torch's cache, so a freed x's memory may be unmapped by the replay)
                graphs.append((graph, pairs))
                timers.append((impl, without, timed))
        times = [[t() for _, _, t in (timers if r % 2 == 0 else timers[::-1])] for r in range(ROUNDS)]
        for i, (impl, without, _) in enumerate(timers):
            rounds = [t[i] if r % 2 == 0 else t[len(timers) - 1 - i] for r, t in enumerate(times)]
            row = LinearsRow(
                impl=impl, M=M, layers=layers, us=min(rounds), us_rounds=rounds, rel_err=errs[impl], without=without
            )
            rows.append(row)
            what = f"M={M} {impl}" + (f" without {without}" if without else "")
            log(f"{what}: {row.us:.1f} us (rounds {', '.join(f'{t:.1f}' for t in rounds)})")
        del graphs, timers
        torch.cuda.empty_cache()
    return rows


def failed(rows: list[LinearsRow]) -> list[LinearsRow]:
    """Rows whose implementation did not compute x @ W within its dtype's bound (humming's quantization of W is
    its own: reported, not held to the bound)."""
    return [
        r
        for r in rows
        if not r.without and r.impl != "humming" and r.rel_err > TOLERANCE["bf16" if r.impl == "torch int4" else "fp16"]
    ]
