"""``dqgen bench --model``: a whole model, end to end (issue 26, deliverable 4). A ``transformers`` Llama built from
Llama-3-8B's configuration with random weights (no download; ``layers`` decoder layers, 32 in the real model), fp16 on
the GPU: greedy decode tokens/s at each batch size and prefill tokens/s at ``prefill`` tokens, in two modes.

- ``eager``: as a user runs it: ``model.generate`` (greedy, its dynamic cache) for decode, one forward of
  [1, prefill] (no cache) for the prefill.
- ``graphs``: CUDA graphs captured by hand (``torch.cuda.graph``, no torch.compile): a ``transformers``
  StaticCache of prompt + new tokens positions per batch size, the prompt's prefill run eagerly into it, one decode
  step (``model`` on static token ids [batch, 1] at a static position, a device tensor) captured once and replayed
  per token, the argmax copied into the static ids and the position advanced in place between replays
  (:class:`StaticDecoder`). The prefill figure is a captured graph too: the [1, prefill] forward into a StaticCache
  of exactly that length (:class:`StaticPrefill`).

Implementations, all on the same model's weights (the fp16 model's decoder linears are swapped out and put back):
``fp16`` (the model as built), ``dqgen w4a16`` (``dqgen.nn.quantize_model(model, "awq_int4_fp16", group_size=128)``;
where that is not in this dqgen yet, each linear becomes ``QuantLinear.from_linear``), ``dqgen w8a8``
(``W8A8Linear.from_linear``: int8 per-channel weights, per-token activations), ``torch int4`` (the model in bf16,
each linear on aten._weight_int4pack_mm: dqgen.tools.bench_linears.tinygemm_linear). ``lm_head`` stays fp16 in
every implementation, as AWQ / GPTQ checkpoints keep it.

Timing: decode = the median time between consecutive generated tokens (CUDA events recorded at each token's
logits, so the prompt's prefill is not in it), each step ``batch`` tokens; prefill = CUDA events around the
forward (eager) or the replay (graphs). Each figure the median of ``runs`` runs after a warm-up run (which also
captures, in graphs mode). A figure that fails (an unsupported op, a capture error, a transformers without
StaticCache) is a row with its one-line error, not a crash.
"""

from __future__ import annotations

import functools
import gc
import inspect
import io
import itertools
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .bench_linears import GROUP, SPEC
from .options import parse_subset

DEFAULT_BATCHES = (1, 16, 64)
DEFAULT_PREFILL = 2048
DEFAULT_NEW_TOKENS = 32
#: Llama-3-8B's context length: the prompt and the new tokens must fit it.
MAX_POSITIONS = 8192
#: The prompt of the decode runs (its prefill is outside the decode figure).
PROMPT_TOKENS = 128
DEFAULT_RUNS = 3
MAX_LAYERS = 32
MODES = ("eager", "graphs")
#: Eager calls of a step on a side stream before it is captured (torch's recipe; the first compiles dqgen's kernels).
CAPTURE_WARMUP = 3
IMPLS = ("fp16", "dqgen w4a16", "dqgen w8a8", "dqgen w8a8 fused", "torch int4")
#: Llama-3-8B's configuration (meta-llama/Meta-Llama-3-8B config.json), less the layer count.
LLAMA3_8B: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": MAX_POSITIONS,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}

Phase = Literal["decode", "prefill"]


class ModelRow(BaseModel):
    """One figure: ``tok_s`` tokens per second (decode: batch x steps / time; prefill: tokens / time), ``ms`` the
    median time of a decode step or of the prefill forward, ``runs_ms`` every run's; ``error`` where it failed."""

    model_config = ConfigDict(extra="forbid")

    impl: str
    mode: str
    phase: Phase
    batch: int
    tokens: int  # decode: new tokens per sequence; prefill: prompt tokens
    tok_s: float | None
    ms: float | None
    runs_ms: list[float]
    error: str | None = None


class ModelDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str
    date: str
    layers: int
    config: dict[str, Any]
    versions: dict[str, str]
    method: str
    prepare_s: dict[str, float]  # seconds to quantize / swap each implementation's linears
    prepare_how: dict[str, str]
    rows: list[ModelRow]


# ----------------------------------------------------------------------------------------------- flags


def parse_list(flag: str, text: str, lo: int, hi: int) -> list[int]:
    """A comma-separated list of integers in lo..hi; ValueError (one line naming the flag) otherwise."""
    try:
        values = [int(p) for p in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < lo or max(values) > hi:
        raise ValueError(f"[{flag}] got {text!r}; expected comma-separated integers in {lo}..{hi}")
    return values


def parse_int(flag: str, value: int, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise ValueError(f"[{flag}] got {value}; expected {lo}..{hi}")
    return value


def parse_names(flag: str, text: str, allowed: tuple[str, ...]) -> list[str]:
    """``flag`` (--impls, --modes) with --model: a comma-separated subset of ``allowed``."""
    return parse_subset(flag, text, allowed, "--model")


# ----------------------------------------------------------------------------------------------- the record


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def method_text(runs: int, prompt: int = PROMPT_TOKENS) -> str:
    return (
        f"greedy decode after a {prompt}-token prompt: CUDA events at each generated token, the median step (batch "
        "tokens); prefill: one forward of [1, tokens], last position's logits, events around it; a warm-up run "
        f"first, then the median of {runs} runs; eager: generate() on its dynamic cache, the prefill without a "
        "cache; graphs: a transformers StaticCache, the prompt prefilled eagerly, one decode step captured by hand "
        "(torch.cuda.graph, no torch.compile) and replayed per token; the prefill a captured forward into a "
        "StaticCache of its length"
    )


def document(
    gpu: str,
    layers: int,
    rows: list[ModelRow],
    method: str,
    versions: dict[str, str],
    prepare_s: dict[str, float] | None = None,
    prepare_how: dict[str, str] | None = None,
    when: str = "",
) -> dict:
    doc = ModelDocument(
        gpu=gpu,
        date=when or _now(),
        layers=layers,
        config=LLAMA3_8B | {"num_hidden_layers": layers},
        versions=versions,
        method=method,
        prepare_s=prepare_s or {},
        prepare_how=prepare_how or {},
        rows=rows,
    )
    return doc.model_dump()


def load_document(path: Path) -> dict:
    """A model.json record, checked against the schema: ValueError (one line naming the file) otherwise."""
    from .report import validated_record

    return validated_record(path, ModelDocument, "model")


def merge_documents(old: dict, new: dict) -> dict:
    """``new`` with the rows of ``old`` it did not measure (same impl, mode, phase, batch): a table measured over
    several calls (``--merge``). Refused across GPUs or layer counts (not one model)."""
    for key in ("gpu", "layers"):
        if old[key] != new[key]:
            raise ValueError(f"--merge: the record has {key} {old[key]!r}, this run {new[key]!r}; not one table")
    seen = {(r["impl"], r["mode"], r["phase"], r["batch"]) for r in new["rows"]}
    kept = [r for r in old["rows"] if (r["impl"], r["mode"], r["phase"], r["batch"]) not in seen]
    if not kept:
        return new
    return new | {
        "method": f"{new['method']}; {len(kept)} rows from the run of {old['date']}",
        "rows": kept + new["rows"],
        "prepare_s": old["prepare_s"] | new["prepare_s"],
        "prepare_how": old["prepare_how"] | new["prepare_how"],
    }


def _figure_keys(rows: list[dict]) -> list[tuple[str, str, int]]:
    """(mode, phase, batch) of the rows: eager before graphs, decode (by batch) before prefill."""
    keys = dict.fromkeys((r["mode"], r["phase"], r["batch"]) for r in rows)
    return sorted(keys, key=lambda k: (MODES.index(k[0]) if k[0] in MODES else 9, k[1], k[2]))


def speedup_table(doc: dict) -> list[str]:
    """The figure a user reads first, as markdown lines: each implementation's tokens/s over fp16's per mode,
    phase and batch size, fp16's own tokens/s beside them."""
    rows = [r for r in doc["rows"] if r["tok_s"]]
    impls = [i for i in IMPLS if i != "fp16" and any(r["impl"] == i for r in rows)]
    lines = [
        "| mode | phase | batch | fp16 tok/s | " + " | ".join(impls) + " |",
        "|---|---|---:|---:|" + "---:|" * len(impls),
    ]
    for mode, phase, batch in _figure_keys(rows):
        here = {r["impl"]: r["tok_s"] for r in rows if (r["mode"], r["phase"], r["batch"]) == (mode, phase, batch)}
        base = here.get("fp16")
        cells = [f"{here[i] / base:.2f}x" if base and i in here else "" for i in impls]
        lines.append(f"| {mode} | {phase} | {batch} | {f'{base:.0f}' if base else ''} | " + " | ".join(cells) + " |")
    return lines


def speedups(doc: dict) -> str:
    """:func:`speedup_table` under a title line naming the model and the GPU (what the command prints first)."""
    title = f"Speed-up over fp16 (tokens/s ratio), Llama-3-8B-shaped, {doc['layers']} layers, {doc['gpu']}"
    return "\n".join([title, "", *speedup_table(doc)])


def tokens_table(doc: dict) -> list[str]:
    """Tokens/s of every implementation per mode, phase and batch size (markdown lines); a failed figure reads
    "failed" (its error is listed under the table by :func:`markdown_section`)."""
    impls = [i for i in IMPLS if any(r["impl"] == i for r in doc["rows"])]
    lines = [
        "| mode | phase | batch | " + " | ".join(impls) + " |",
        "|---|---|---:|" + "---:|" * len(impls),
    ]
    for mode, phase, batch in _figure_keys(doc["rows"]):
        here = {r["impl"]: r for r in doc["rows"] if (r["mode"], r["phase"], r["batch"]) == (mode, phase, batch)}
        cells = ["" if i not in here else f"{here[i]['tok_s']:.0f}" if here[i]["tok_s"] else "failed" for i in impls]
        lines.append(f"| {mode} | {phase} | {batch} | " + " | ".join(cells) + " |")
    return lines


def table(doc: dict) -> str:
    """Every row: tokens/s and ms, or the error."""
    lines = [
        "| impl | mode | phase | batch | tokens | tok/s | ms | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        tok = f"{r['tok_s']:.1f}" if r["tok_s"] else ""
        ms = f"{r['ms']:.2f}" if r["ms"] else ""
        err = (r["error"] or "").replace("|", "/")[:120]
        lines.append(
            f"| {r['impl']} | {r['mode']} | {r['phase']} | {r['batch']} | {r['tokens']} | {tok} | {ms} | {err} |"
        )
    return "\n".join(lines)


SECTION = "model"
SECTION_TITLE = "## A whole model, end to end (`dqgen bench --model`)"


def markdown_section(doc: dict) -> str:
    """The "model" section of docs/performance.md, from the JSON record alone: the speed-up over fp16 first, then
    tokens/s, the failed figures' errors, how each implementation's linears were made."""
    rows = doc["rows"]
    versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items())
    decode = sorted({r["batch"] for r in rows if r["phase"] == "decode"})
    new_tokens = sorted({r["tokens"] for r in rows if r["phase"] == "decode"})
    prefill = sorted({r["tokens"] for r in rows if r["phase"] == "prefill"})
    layers = doc["layers"]
    whole = "all 32 of Llama-3-8B's" if layers == MAX_LAYERS else f"{layers} of Llama-3-8B's 32"
    lines = [
        SECTION_TITLE,
        "",
        f"Written by `dqgen bench --model` on {doc['date']}, GPU: {doc['gpu']} ({versions}). The model: a "
        f"`transformers` LlamaForCausalLM built from Llama-3-8B's configuration with random weights (no download), "
        f"{whole} decoder layers, fp16; `lm_head` stays fp16 in every implementation (as AWQ / GPTQ checkpoints "
        f"keep it). Decode: greedy, {'/'.join(map(str, new_tokens))} new tokens per sequence at batch "
        f"{', '.join(map(str, decode))}; prefill: one sequence of {'/'.join(map(str, prefill)) or 'no'} tokens.",
        "",
        f"Method: {doc['method']}.",
        "",
        "Implementations: `fp16` (the model as built); "
        + "; ".join(
            f"`{impl}` ({doc['prepare_how'][impl]}, {doc['prepare_s'][impl]:.1f} s for every decoder linear)"
            for impl in IMPLS
            if impl != "fp16" and impl in doc["prepare_how"]
        )
        + ".",
        "",
        "Speed-up over fp16 (tokens/s ratio; fp16's own tokens/s in its column):",
        "",
        *speedup_table(doc),
        "",
        "Tokens per second (decode: batch x steps / time; prefill: prompt tokens / time):",
        "",
        *tokens_table(doc),
    ]
    failed = [r for r in rows if r["error"]]
    if failed:
        lines += ["", "Figures that failed:", ""]
        lines += [f"- {r['impl']}, {r['mode']} {r['phase']} batch {r['batch']}: {r['error']}" for r in failed]
    lines += [
        "",
        "Rows: docs/bench/model.json, plot: docs/bench/model.png. On a GPU machine with transformers, from the repo "
        "root: `dqgen bench --model --docs docs/performance.md` (add `--impls ... --merge` to measure the "
        "implementations over several calls into one table).",
    ]
    return "\n".join(lines)


def write_docs(path: Path, doc: dict) -> None:
    """Rewrite the "model" section of ``path`` (after the kernels' sections, before the notes)."""
    from .report import SECTION_ORDER, write_section

    order = (*(n for n in SECTION_ORDER if n not in (SECTION, "notes")), SECTION, "notes")
    write_section(path, SECTION, markdown_section(doc), order=order)


# ----------------------------------------------------------------------------------------------- the plot


def plot(doc: dict, path: Path) -> None:
    """The speed-up over fp16 (tokens/s ratio) per batch size, one bar per implementation, one panel per (mode,
    phase), fp16's own tokens/s under each group; written whole."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..core.files import write_whole_bytes

    rows = [r for r in doc["rows"] if r["tok_s"]]
    panels = list(dict.fromkeys((r["mode"], r["phase"]) for r in rows)) or [("eager", "decode")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 4.0), squeeze=False)
    for ax, (mode, phase) in zip(axes.flat, panels, strict=True):
        here = [r for r in rows if (r["mode"], r["phase"]) == (mode, phase)]
        batches = sorted({r["batch"] for r in here})
        base = {r["batch"]: r["tok_s"] for r in here if r["impl"] == "fp16"}
        impls = [i for i in IMPLS if any(r["impl"] == i for r in here)]
        width = 0.8 / max(len(impls), 1)
        for j, impl in enumerate(impls):
            vals = {r["batch"]: r["tok_s"] for r in here if r["impl"] == impl}
            xs = [b + (j - (len(impls) - 1) / 2) * width for b in range(len(batches))]
            ratios = [vals[b] / base[b] if b in vals and b in base else 0.0 for b in batches]
            ax.bar(xs, ratios, width, label=impl, color=f"C{IMPLS.index(impl)}")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        what = "batch" if phase == "decode" else f"prompt of {'/'.join(str(r['tokens']) for r in here[:1])} tokens"
        ax.set_xticks(
            range(len(batches)),
            [f"{b}\nfp16 {base[b]:.0f} tok/s" if b in base else str(b) for b in batches],
        )
        ax.set_xlabel(what)
        ax.set_ylabel("tokens/s over fp16's")
        ax.set_title(f"{phase}, {mode}")
        ax.legend(fontsize=7)
    fig.suptitle(f"Llama-3-8B-shaped ({doc['layers']} layers), random weights, on {doc['gpu']}, {doc['date']}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_whole_bytes(Path(path), buf.getvalue())


# ----------------------------------------------------------------------------------------------- the model


def build_model(layers: int) -> Any:
    """LlamaForCausalLM from LLAMA3_8B with ``layers`` layers, random weights (transformers' own init, seed 0),
    built in fp16 directly on the GPU (as from_pretrained's dtype does: the default dtype set while it is built)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**LLAMA3_8B, num_hidden_layers=layers)
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    model.eval()
    model.requires_grad_(False)
    model.generation_config.eos_token_id = None  # every run generates exactly its new tokens
    model.generation_config.pad_token_id = 0
    return model


def decoder_linears(model: Any) -> dict[str, Any]:
    """Every nn.Linear of the model but ``lm_head``, by qualified name."""
    import torch

    return {
        name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and not name.endswith("lm_head")
    }


def _set(model: Any, name: str, module: Any) -> None:
    parent_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, attr, module)


#: The decoder layer's modules an implementation may replace whole (the fused W8A8 model's norms and MLP).
LAYER_PARTS = ("input_layernorm", "post_attention_layernorm", "mlp")


def decoder_parts(model: Any) -> dict[str, Any]:
    """Each decoder layer's LAYER_PARTS, by qualified name."""
    return {
        f"model.layers.{i}.{n}": getattr(layer, n) for i, layer in enumerate(model.model.layers) for n in LAYER_PARTS
    }


def restore(model: Any, originals: dict[str, Any], lm_head: Any, parts: dict[str, Any] | None = None) -> None:
    """Put the fp16 linears (and lm_head, and the layers' ``parts`` first: the linears may live in them) back
    wherever an implementation replaced them."""
    for name, part in (parts or {}).items():
        if model.get_submodule(name) is not part:
            _set(model, name, part)
    for name, lin in originals.items():
        if model.get_submodule(name) is not lin:
            _set(model, name, lin)
    if model.lm_head is not lm_head:
        model.lm_head = lm_head


def _torch_int4_module(linear: Any) -> Any:
    import torch

    from .bench_linears import tinygemm_linear

    call, _ = tinygemm_linear(linear.weight.detach().to(torch.bfloat16), GROUP)

    class TorchInt4Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.in_features, self.out_features = linear.in_features, linear.out_features

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = call(x.reshape(-1, self.in_features).contiguous())
            return y.reshape(*x.shape[:-1], self.out_features)

    return TorchInt4Linear()


def quantize_w4a16(model: Any, originals: dict[str, Any]) -> str:
    """dqgen W4A16 on every decoder linear: ``dqgen.nn.quantize_model`` where this dqgen has it, else each linear
    through ``QuantLinear.from_linear`` (slow: numpy round-to-nearest on the host). Returns which one ran."""
    import importlib

    # looked up, not imported by name: the branch that adds quantize_model may not be merged into this dqgen yet
    quantize_model: Any = getattr(importlib.import_module("dqgen.nn"), "quantize_model", None)
    if quantize_model is not None:
        report = quantize_model(model, SPEC, group_size=GROUP)
        missed = sorted(set(originals) - set(report.replaced))
        if missed:  # a linear left in fp16 would make the row a mix of both: refused, with the reason
            raise RuntimeError(f"quantize_model left {missed[0]} unquantized: {report.skipped.get(missed[0], '?')}")
        return f"dqgen.nn.quantize_model, {len(report.replaced)} linears, {SPEC} group {GROUP}"
    from ..nn.linear import QuantLinear

    for name, lin in originals.items():
        _set(model, name, QuantLinear.from_linear(lin, SPEC, group_size=GROUP))
    return "QuantLinear.from_linear per linear (quantize_model not in this dqgen)"


def prepare(impl: str, model: Any, originals: dict[str, Any]) -> str:
    """Swap ``model``'s decoder linears for ``impl``'s; returns how (for the record)."""
    import torch

    if impl == "fp16":
        return "the model as built"
    if impl == "dqgen w4a16":
        return quantize_w4a16(model, originals)
    if impl == "dqgen w8a8":
        from ..nn.w8a8_linear import W8A8Linear

        for name, lin in originals.items():
            _set(model, name, W8A8Linear.from_linear(lin))
        return "W8A8Linear.from_linear per linear (int8)"
    if impl == "dqgen w8a8 fused":
        from ..nn.w8a8_model import quantize_model_w8a8

        report = quantize_model_w8a8(model)
        if report.skipped:  # a layer left in fp16 would make the row a mix: refused, with the reason
            first = min(report.skipped)
            raise RuntimeError(f"quantize_model_w8a8 left layer {first} as it was: {report.skipped[first]}")
        return (
            f"dqgen.nn.quantize_model_w8a8, {len(report.converted)} layers (int8; the quantizers fused into the "
            "RMSNorms and the SiLU-and-mul; gate / up merged)"
        )
    if impl == "torch int4":
        for name, lin in originals.items():
            _set(model, name, _torch_int4_module(lin))
        model.to(torch.bfloat16)  # tinygemm takes bf16 activations only: the rest of the model follows
        return "aten._weight_int4pack_mm per linear, the model in bf16"
    raise ValueError(f"impl: expected one of {', '.join(IMPLS)}, got {impl!r}")


# ----------------------------------------------------------------------------------------------- timing

#: A recorded timing mark: a CUDA event (``elapsed_time`` to a later one, in ms; ``synchronize``).
Mark = Any
#: ``capture(step)`` -> a replay that runs ``step``'s work again and returns the output of the captured call.
Capture = Callable[[Callable[[], Any]], Callable[[], Any]]


def _mark() -> Mark:
    """A CUDA event recorded on the current stream now (no host sync)."""
    import torch

    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def _sync(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _step_ms(marks: list[Mark]) -> float:
    """The median milliseconds between consecutive marks (one a generated token): a decode step of the batch.
    The median, not the mean: one late host step (a Python GC pause) does not move it."""
    marks[-1].synchronize()
    return statistics.median(float(a.elapsed_time(b)) for a, b in itertools.pairwise(marks))


def _ids(model: Any, batch: int, tokens: int, seed: int) -> Any:
    """Random token ids [batch, tokens] on the model's device (seeded: each run of a figure decodes the same)."""
    import torch

    gen = torch.Generator(device=model.device).manual_seed(seed)
    vocab = int(model.config.vocab_size)
    return torch.randint(min(1000, vocab // 2), vocab, (batch, tokens), device=model.device, generator=gen)


def _keep_last(model: Any) -> dict[str, int]:
    """The forward's argument that computes the last position's logits only (its name by transformers version)."""
    params = inspect.signature(type(model).forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


# ----------------------------------------------------------------------------------------------- eager mode


def _step_timer() -> Any:
    """A logits processor recording a mark at each generated token's logits (no host sync)."""
    from transformers import LogitsProcessor

    class StepTimer(LogitsProcessor):
        def __init__(self) -> None:
            self.marks: list[Mark] = []

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            self.marks.append(_mark())
            return scores

    return StepTimer()


def greedy(model: Any, ids: Any, new_tokens: int, processors: Any = None) -> Any:
    """``model.generate`` greedy for exactly ``new_tokens`` tokens after ``ids`` [batch, prompt] (its default
    dynamic cache): [batch, prompt + new_tokens]."""
    import torch

    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        do_sample=False,
        logits_processor=processors,
    )


def decode_ms(model: Any, batch: int, new_tokens: int, prompt: int = PROMPT_TOKENS) -> float:
    """eager: one greedy ``generate``, the median milliseconds between consecutive generated tokens' logits (a
    decode step: ``batch`` tokens; the prompt's prefill is before the first mark)."""
    from transformers import LogitsProcessorList

    ids = _ids(model, batch, prompt, seed=batch)
    timer = _step_timer()
    out = greedy(model, ids, new_tokens, LogitsProcessorList([timer]))
    _sync(model.device)
    if out.shape[1] - prompt != new_tokens or len(timer.marks) != new_tokens:
        raise RuntimeError(
            f"generate made {out.shape[1] - prompt} tokens ({len(timer.marks)} steps timed), not {new_tokens}"
        )
    return _step_ms(timer.marks)


def prefill_ms(model: Any, tokens: int) -> float:
    """eager: one forward of [1, tokens] (no cache; the last position's logits where this transformers can)."""
    ids = _ids(model, 1, tokens, seed=1)
    start = _mark()
    model(ids, use_cache=False, **_keep_last(model))
    end = _mark()
    end.synchronize()
    return float(start.elapsed_time(end))


# ----------------------------------------------------------------------------------------------- graphs mode


def cuda_graph_capture(step: Callable[[], Any]) -> Callable[[], Any]:
    """``step`` captured in one CUDA graph, as torch's documentation does it: CAPTURE_WARMUP eager calls on a side
    stream first (kernel compiles, cuBLAS workspaces, dqgen's first checked calls), then the capture. Returns the
    replay, which returns the captured call's output: the same tensor each time, rewritten by each replay (read it
    before the next one)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(CAPTURE_WARMUP):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()

    def replay() -> Any:
        graph.replay()
        return out

    return replay


def static_cache(model: Any, batch: int, max_len: int) -> Any:
    """A ``transformers`` StaticCache of ``max_len`` positions for ``batch`` sequences: from 4.56 it sizes itself
    at its first update (config and length only); before, it takes the batch, device and dtype."""
    from transformers import StaticCache

    if "max_batch_size" in inspect.signature(StaticCache.__init__).parameters:
        return StaticCache(
            config=model.config, max_batch_size=batch, max_cache_len=max_len, device=model.device, dtype=model.dtype
        )
    return StaticCache(config=model.config, max_cache_len=max_len)


def _cache_args(model: Any, cache: Any, positions: Any) -> dict[str, Any]:
    """The forward's arguments for ``cache`` and the positions [tokens] of the tokens it is given, by this
    transformers' names: the cache is ``cache`` from transformers 5, ``past_key_values`` before; where the forward
    takes ``cache_position`` (transformers 4) the static cache writes the keys there, so the positions go in as it;
    otherwise (5: the cache counts its length itself, in a device tensor) as ``position_ids`` [1, tokens], which
    the rotary embedding reads."""
    params = inspect.signature(type(model).forward).parameters
    args: dict[str, Any] = {"cache" if "cache" in params else "past_key_values": cache, "use_cache": True}
    if "cache_position" in params:
        args["cache_position"] = positions
    else:
        args["position_ids"] = positions.view(1, -1)
    return args


class StaticDecoder:
    """graphs mode's greedy decode of ``batch`` sequences: a StaticCache of prompt + new tokens positions, the
    prompt's prefill run eagerly into it, then one decode step (``model`` on the static token ids [batch, 1] at the
    static position, a device tensor) captured once (:func:`cuda_graph_capture`, or a stand-in) and replayed per
    token: the argmax of the step's logits is copied into the static ids and the position advanced in place
    (``add_``), both read by the next replay. Greedy, as eager mode's ``generate``."""

    def __init__(self, model: Any, batch: int, prompt: int, new_tokens: int, capture: Capture) -> None:
        import torch

        self.model, self.prompt, self.new_tokens, self.capture = model, prompt, new_tokens, capture
        self.cache = static_cache(model, batch, prompt + new_tokens)
        self.token_ids = torch.zeros((batch, 1), dtype=torch.long, device=model.device)
        self.position = torch.zeros((1,), dtype=torch.long, device=model.device)
        self.step_args = _cache_args(model, self.cache, self.position)
        self.replay: Callable[[], Any] | None = None  # captured at the first run, after the first prefill

    def _step(self) -> Any:
        return self.model(input_ids=self.token_ids, **self.step_args).logits

    def _prefill(self, ids: Any) -> Any:
        """The prompt ``ids`` [batch, prompt] into the emptied cache, eagerly; the first new token [batch]."""
        import torch

        self.cache.reset()  # in place: the captured step keeps reading the same tensors
        positions = torch.arange(self.prompt, device=self.model.device)
        logits = self.model(input_ids=ids, **_cache_args(self.model, self.cache, positions), **_keep_last(self.model))
        self.position.fill_(self.prompt)
        return logits.logits[:, -1].argmax(-1)

    def run(self, ids: Any, mark: Callable[[], Mark] | None = None) -> tuple[Any, list[Mark]]:
        """Greedy decode after the prompt ``ids`` [batch, prompt]: the new tokens [batch, new_tokens] and a mark
        (``mark()``, a CUDA event by default) at each one, the first after the prefill."""
        import torch

        mark = mark or _mark

        if tuple(ids.shape) != (self.token_ids.shape[0], self.prompt):
            raise ValueError(f"ids: expected [{self.token_ids.shape[0]}, {self.prompt}], got {list(ids.shape)}")
        token = self._prefill(ids)
        if self.replay is None:
            # the cache allocates its tensors at its first update (the prefill above): captured after it. The
            # capture's warm-up calls are real steps (transformers 5 advances the cache's own length in them), so
            # the prompt is prefilled again after it
            self.token_ids.copy_(token[:, None])
            self.replay = self.capture(self._step)
            token = self._prefill(ids)
        tokens, marks = [token], [mark()]
        for _ in range(self.new_tokens - 1):
            self.token_ids.copy_(token[:, None])
            token = self.replay()[:, -1].argmax(-1)  # read before the next replay rewrites the logits
            self.position.add_(1)
            tokens.append(token)
            marks.append(mark())
        return torch.stack(tokens, dim=1), marks


def graph_decode_ms(decoder: StaticDecoder, batch: int) -> float:
    """graphs: one greedy decode on ``decoder`` (captured at its first run); the median step in milliseconds."""
    ids = _ids(decoder.model, batch, decoder.prompt, seed=batch)
    _, marks = decoder.run(ids)
    return _step_ms(marks)


class StaticPrefill:
    """graphs mode's prefill: the forward of [1, tokens] into a StaticCache of exactly ``tokens`` positions (so
    that the mask stays the causal one that SDPA is told of, no tensor read on the host inside the capture),
    emptied first inside the captured work (its length would otherwise grow past its end from replay to replay),
    the last position's logits; captured once, replayed."""

    def __init__(self, model: Any, tokens: int, capture: Capture) -> None:
        import torch

        self.model, self.capture = model, capture
        self.cache = static_cache(model, 1, tokens)
        self.ids = _ids(model, 1, tokens, seed=1)
        positions = torch.arange(tokens, device=model.device)
        self.args = _cache_args(model, self.cache, positions) | _keep_last(model)
        self.replay: Callable[[], Any] | None = None

    def _forward(self) -> Any:
        self.cache.reset()
        return self.model(input_ids=self.ids, **self.args).logits

    def logits(self) -> Any:
        """One replay (the capture at the first call, after an eager forward that sizes the cache): the logits
        [1, 1, vocab] of the last position."""
        if self.replay is None:
            self._forward()
            self.replay = self.capture(self._forward)
        return self.replay()


def graph_prefill_ms(prefill: StaticPrefill) -> float:
    """graphs: one replay of the captured prefill (captured at the first call), CUDA events around it."""
    if prefill.replay is None:
        prefill.logits()
    start = _mark()
    prefill.logits()
    end = _mark()
    end.synchronize()
    return float(start.elapsed_time(end))


# ----------------------------------------------------------------------------------------------- the loop


def _timed_runs(fn: Callable[[], float], runs: int) -> list[float]:
    fn()  # warm-up: module loads, dqgen's first checked calls, the capture in graphs mode
    return [fn() for _ in range(runs)]


def _error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def bench_model(
    layers: int,
    batches: list[int],
    prefill: int | None,
    new_tokens: int,
    runs: int,
    modes: list[str],
    impls: list[str],
    log: Callable[[str], None] = print,
    capture: Capture = cuda_graph_capture,
    done: Callable[[list[ModelRow], dict[str, float], dict[str, str]], None] | None = None,
) -> tuple[list[ModelRow], dict[str, float], dict[str, str]]:
    """Every implementation, mode, batch size and the prefill on one model (module docstring). Returns the rows,
    the seconds each implementation took to swap its linears in, and how it did. ``capture``: graphs mode's
    (a stand-in that calls the step runs the same loop where there are no CUDA graphs). ``done``: called with
    what is measured so far after each implementation (a record written then survives a run cut short)."""
    import torch

    model = build_model(layers)
    originals = decoder_linears(model)
    parts = decoder_parts(model)
    lm_head = model.lm_head
    dtype = next(model.parameters()).dtype
    log(f"model: {layers} layers, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, {dtype}")
    rows: list[ModelRow] = []
    prepare_s: dict[str, float] = {}
    prepare_how: dict[str, str] = {}
    keys: list[tuple[Phase, int, int]] = [("decode", b, new_tokens) for b in batches]
    keys += [("prefill", 1, prefill)] if prefill else []

    order = [i for i in IMPLS if i in impls]  # torch int4 last: it turns the model bf16
    for impl in order:
        _sync(model.device)
        t0 = time.perf_counter()
        try:
            prepare_how[impl] = prepare(impl, model, originals)
            _sync(model.device)
            prepare_s[impl] = time.perf_counter() - t0
            log(f"{impl}: {prepare_how[impl]} in {prepare_s[impl]:.1f} s")
        except Exception as e:
            err = _error(e)
            log(f"{impl}: failed to prepare ({err}): error rows")
            rows += [_failed(impl, mode, phase, b, n, f"prepare: {err}") for mode in modes for phase, b, n in keys]
            restore(model, originals, lm_head, parts)
            model.to(dtype)
            if done is not None:
                done(rows, prepare_s, prepare_how)
            continue
        if model.lm_head is not lm_head:  # lm_head stays unquantized (as AWQ / GPTQ checkpoints keep it)
            model.lm_head = lm_head
        for mode in modes:
            for phase, b, n in keys:
                rows.append(_measure(impl, mode, phase, b, n, runs, _figure(model, mode, phase, b, n, capture), log))
                # the row's static cache and graph (a StaticDecoder and its replay refer to each other: a cycle,
                # freed by the collector) make room for the next row's
                gc.collect()
                torch.cuda.empty_cache()
        restore(model, originals, lm_head, parts)
        model.to(dtype)  # after torch int4's bf16
        torch.cuda.empty_cache()
        if done is not None:
            done(rows, prepare_s, prepare_how)
    return rows, prepare_s, prepare_how


def _figure(model: Any, mode: str, phase: Phase, batch: int, tokens: int, capture: Capture) -> Callable[[], float]:
    """The function one run of a figure calls (ms per decode step, or per prefill). graphs mode's static cache and
    graph are made at its first call (in the warm-up run: a failure there is the row's error) and live as long as
    the function."""
    if mode == "eager":
        if phase == "decode":
            return functools.partial(decode_ms, model, batch, tokens)
        return functools.partial(prefill_ms, model, tokens)
    held: dict[str, Any] = {}

    def graphs() -> float:
        if phase == "decode":
            if "decoder" not in held:
                held["decoder"] = StaticDecoder(model, batch, PROMPT_TOKENS, tokens, capture)
            return graph_decode_ms(held["decoder"], batch)
        if "prefill" not in held:
            held["prefill"] = StaticPrefill(model, tokens, capture)
        return graph_prefill_ms(held["prefill"])

    return graphs


def _failed(impl: str, mode: str, phase: Phase, batch: int, tokens: int, err: str) -> ModelRow:
    return ModelRow(impl=impl, mode=mode, phase=phase, batch=batch, tokens=tokens, tok_s=None, ms=None, runs_ms=[],
                    error=err)  # fmt: skip


def _measure(
    impl: str, mode: str, phase: Phase, batch: int, tokens: int, runs: int, fn: Callable[[], float], log: Any
) -> ModelRow:
    """One row: ``fn`` (ms per decode step, or per prefill) run ``runs`` times after a warm-up; its error if any."""
    try:
        times = _timed_runs(fn, runs)
    except Exception as e:  # a mode this transformers / torch cannot run: recorded, the other rows still measured
        err = _error(e)
        log(f"{impl} {mode} {phase} batch {batch}: failed ({err})")
        return _failed(impl, mode, phase, batch, tokens, err)
    ms = statistics.median(times)
    tok_s = (batch if phase == "decode" else batch * tokens) * 1000.0 / ms
    log(
        f"{impl} {mode} {phase} batch {batch}: {tok_s:.1f} tok/s "
        f"({ms:.2f} ms; runs {', '.join(f'{t:.2f}' for t in times)})"
    )
    return ModelRow(impl=impl, mode=mode, phase=phase, batch=batch, tokens=tokens, tok_s=tok_s, ms=ms, runs_ms=times)


def versions() -> dict[str, str]:
    from importlib import metadata

    import torch
    import transformers

    try:  # the distribution's version (dqgen/__init__ is the api layer, above tools)
        dqgen_version = metadata.version("dqgen")
    except metadata.PackageNotFoundError:
        dqgen_version = "not installed (a checkout)"
    return {"torch": torch.__version__, "transformers": transformers.__version__, "dqgen": dqgen_version}
