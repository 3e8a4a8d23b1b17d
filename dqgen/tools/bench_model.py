"""``dqgen bench --model``: a whole model, end to end (issue 26, deliverable 4). A ``transformers`` Llama built from
Llama-3-8B's configuration with random weights (no download; ``layers`` decoder layers, 32 in the real model), fp16 on
the GPU, run as a user runs it: greedy decode tokens/s (``generate``) at each batch size and prefill tokens/s at
``prefill`` tokens, eager and with a static cache + CUDA graphs (``torch.compile(model.forward,
mode="reduce-overhead")``).

Implementations, all on the same model's weights (the fp16 model's decoder linears are swapped out and put back):
``fp16`` (the model as built), ``dqgen w4a16`` (``dqgen.nn.quantize_model(model, "awq_int4_fp16", group_size=128)``;
where that is not in this dqgen yet, each linear becomes ``QuantLinear.from_linear``), ``dqgen w8a8``
(``W8A8Linear.from_linear``: int8 per-channel weights, per-token activations), ``torch int4`` (the model in bf16,
each linear on aten._weight_int4pack_mm: dqgen.tools.bench_linears.tinygemm_linear). ``lm_head`` stays fp16 in
every implementation, as AWQ / GPTQ checkpoints keep it.

Timing: decode = the median time between consecutive generated tokens' logits (CUDA events recorded by a logits
processor, so the prompt's prefill is not in it), each step ``batch`` tokens (the median, not the mean: a graphs-mode
generate() may re-record its graphs in its first steps, where it makes a new static cache per call);
prefill = one forward of [1, prefill] tokens (no cache, the last position's logits only), CUDA events around it.
Each figure the median of ``runs`` runs after a warm-up run (which also compiles and captures, in graphs mode). A
mode that fails (a compile error, an unsupported op) is a row with its error, not a crash.
"""

from __future__ import annotations

import functools
import io
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
IMPLS = ("fp16", "dqgen w4a16", "dqgen w8a8", "torch int4")
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
        f"greedy generate(); decode: CUDA events at each generated token's logits, the median step (batch tokens) "
        f"after a {prompt}-token prompt; prefill: one forward, no cache, last position's logits, "
        f"events around it; a warm-up run first (compiles and captures in graphs mode), then the median of {runs} "
        "runs; graphs: static cache + torch.compile(model.forward, mode='reduce-overhead')"
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
    from pydantic import ValidationError

    from .report import read_json_record

    raw = read_json_record(path, "model")
    try:
        return ModelDocument.model_validate(raw).model_dump()
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the record"
        raise ValueError(f"{path}: {where}: {first['msg']}") from None


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


def speedups(doc: dict) -> str:
    """The figure a user reads first: each implementation's tokens/s over fp16's, per mode, phase and batch."""
    rows = [r for r in doc["rows"] if r["tok_s"]]
    impls = [i for i in IMPLS if i != "fp16" and any(r["impl"] == i for r in rows)]
    lines = [
        f"Speed-up over fp16 (tokens/s ratio), Llama-3-8B-shaped, {doc['layers']} layers, {doc['gpu']}",
        "",
        "| mode | phase | batch | " + " | ".join(impls) + " |",
        "|---|---|---|" + "---|" * len(impls),
    ]
    keys = dict.fromkeys((r["mode"], r["phase"], r["batch"]) for r in rows)
    for mode, phase, batch in sorted(keys, key=lambda k: (MODES.index(k[0]) if k[0] in MODES else 9, k[1], k[2])):
        here = {r["impl"]: r["tok_s"] for r in rows if (r["mode"], r["phase"], r["batch"]) == (mode, phase, batch)}
        base = here.get("fp16")
        cells = [f"{here[i] / base:.2f}x" if base and i in here else "" for i in impls]
        lines.append(f"| {mode} | {phase} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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


def restore(model: Any, originals: dict[str, Any], lm_head: Any) -> None:
    """Put the fp16 linears (and lm_head) back wherever an implementation replaced them."""
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
        quantize_model(model, SPEC, group_size=GROUP)
        return "dqgen.nn.quantize_model"
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
    if impl == "torch int4":
        for name, lin in originals.items():
            _set(model, name, _torch_int4_module(lin))
        model.to(torch.bfloat16)  # tinygemm takes bf16 activations only: the rest of the model follows
        return "aten._weight_int4pack_mm per linear, the model in bf16"
    raise ValueError(f"impl: expected one of {', '.join(IMPLS)}, got {impl!r}")


def _step_timer() -> Any:
    """A logits processor recording a CUDA event at each generated token's logits (no host sync)."""
    import torch
    from transformers import LogitsProcessor

    class StepTimer(LogitsProcessor):
        def __init__(self) -> None:
            self.events: list[Any] = []

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.events.append(e)
            return scores

    return StepTimer()


def _static_cache(model: Any, batch: int, max_len: int, caches: dict[int, Any]) -> Any:
    """graphs mode: one static cache per batch size, kept across generate() calls and reset before each (as
    transformers documents it: a new cache per call would give the CUDA graphs new addresses, so re-recording or
    recompiling in every run), or None where this transformers' StaticCache takes other arguments (then generate()
    makes its own, cache_implementation="static")."""
    if batch in caches:
        cache = caches[batch]
        if cache is not None:
            cache.reset()
        return cache
    try:
        from transformers import StaticCache

        cache = StaticCache(config=model.config, max_cache_len=max_len)
    except (ImportError, TypeError):
        cache = None
    caches[batch] = cache
    return cache


def greedy(model: Any, ids: Any, new_tokens: int, processors: Any, caches: dict[int, Any] | None) -> Any:
    """``model.generate`` greedy for exactly ``new_tokens`` tokens after ``ids`` [batch, prompt]; with ``caches``
    (graphs mode) on the batch size's kept static cache (:func:`_static_cache`) where this transformers takes one."""
    import inspect

    import torch

    batch, prompt = (int(d) for d in ids.shape)
    kw: dict[str, Any] = {}
    cache = None if caches is None else _static_cache(model, batch, prompt + new_tokens, caches)
    config = model.generation_config
    implementation = config.cache_implementation
    if cache is not None:
        # the forward's name for it: "cache" in transformers 5, "past_key_values" before
        name = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
        kw[name] = cache
        config.cache_implementation = None  # generate() refuses a cache object and a cache_implementation together
    try:
        return model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            do_sample=False,
            logits_processor=processors,
            **kw,
        )
    finally:
        config.cache_implementation = implementation


def decode_ms(
    model: Any, batch: int, new_tokens: int, caches: dict[int, Any] | None = None, prompt: int = PROMPT_TOKENS
) -> float:
    """One greedy generate: the median milliseconds between consecutive generated tokens' logits (a decode step:
    ``batch`` tokens). ``caches``: graphs mode's static caches by batch size (None in eager mode)."""

    import torch
    from transformers import LogitsProcessorList

    ids = torch.randint(
        1000, 100000, (batch, prompt), device="cuda", generator=torch.Generator(device="cuda").manual_seed(batch)
    )
    timer = _step_timer()
    out = greedy(model, ids, new_tokens, LogitsProcessorList([timer]), caches)
    torch.cuda.synchronize()
    if out.shape[1] - prompt != new_tokens or len(timer.events) != new_tokens:
        raise RuntimeError(
            f"generate made {out.shape[1] - prompt} tokens ({len(timer.events)} steps timed), not {new_tokens}"
        )
    # the median step, not the mean: where generate() makes a new static cache per call, the first steps after the
    # prompt may re-record the CUDA graphs for the new cache's addresses
    steps = [float(a.elapsed_time(b)) for a, b in zip(timer.events, timer.events[1:], strict=False)]
    return statistics.median(steps)


def prefill_ms(model: Any, tokens: int) -> float:
    """One forward of [1, tokens] (no cache; the last position's logits where this transformers can)."""
    import inspect

    import torch

    ids = torch.randint(
        1000, 100000, (1, tokens), device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)
    )
    params = inspect.signature(type(model).forward).parameters
    kw: dict[str, Any] = {"use_cache": False}
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            kw[name] = 1
            break
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    model(ids, **kw)
    b.record()
    b.synchronize()
    return float(a.elapsed_time(b))


def _graphs_on(model: Any) -> None:
    import torch

    for knob in ("cache_size_limit", "recompile_limit"):  # one graph per batch size and phase: more than 8
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    model.generation_config.cache_implementation = "static"
    if hasattr(model.generation_config, "disable_compile"):
        model.generation_config.disable_compile = True  # ours below, not generate's own on top of it
    model.forward = torch.compile(model.forward, mode="reduce-overhead")


def _graphs_off(model: Any) -> None:
    import torch

    model.__dict__.pop("forward", None)
    model.generation_config.cache_implementation = None
    for attr in ("_cache",):  # generate's kept static cache: the next implementation may differ in dtype
        model.__dict__.pop(attr, None)
    torch._dynamo.reset()


def _timed_runs(fn: Callable[[], float], runs: int) -> list[float]:
    fn()  # warm-up: module loads, checked first calls, compile and capture in graphs mode
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
) -> tuple[list[ModelRow], dict[str, float], dict[str, str]]:
    """Every implementation, mode, batch size and the prefill on one model (module docstring). Returns the rows,
    the seconds each implementation took to swap its linears in, and how it did."""
    import torch

    model = build_model(layers)
    originals = decoder_linears(model)
    lm_head = model.lm_head
    dtype = next(model.parameters()).dtype
    log(f"model: {layers} layers, {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, {dtype}")
    rows: list[ModelRow] = []
    prepare_s: dict[str, float] = {}
    prepare_how: dict[str, str] = {}

    def failed(impl: str, mode: str, err: str) -> list[ModelRow]:
        """Rows of every figure of ``impl`` in ``mode`` that could not be measured, with the error."""
        keys: list[tuple[Phase, int, int]] = [("decode", b, new_tokens) for b in batches]
        keys += [("prefill", 1, prefill)] if prefill else []
        return [ModelRow(impl=impl, mode=mode, phase=phase, batch=b, tokens=n, tok_s=None, ms=None, runs_ms=[],
                         error=err) for phase, b, n in keys]  # fmt: skip

    order = [i for i in IMPLS if i in impls]  # torch int4 last: it turns the model bf16
    for impl in order:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            prepare_how[impl] = prepare(impl, model, originals)
            torch.cuda.synchronize()
            prepare_s[impl] = time.perf_counter() - t0
            log(f"{impl}: {prepare_how[impl]} in {prepare_s[impl]:.1f} s")
        except Exception as e:
            err = _error(e)
            log(f"{impl}: failed to prepare ({err}): error rows")
            for mode in modes:
                rows += failed(impl, mode, f"prepare: {err}")
            restore(model, originals, lm_head)
            model.to(dtype)
            continue
        if model.lm_head is not lm_head:  # lm_head stays unquantized (as AWQ / GPTQ checkpoints keep it)
            model.lm_head = lm_head
        for mode in modes:
            try:
                if mode == "graphs":
                    _graphs_on(model)
            except Exception as e:
                rows += failed(impl, mode, f"setup: {_error(e)}")
                continue
            caches: dict[int, Any] | None = {} if mode == "graphs" else None
            try:
                for b in batches:
                    decode = functools.partial(decode_ms, model, b, new_tokens, caches)
                    rows.append(_measure(impl, mode, "decode", b, new_tokens, runs, decode, log))
                if prefill:
                    forward = functools.partial(prefill_ms, model, prefill)
                    rows.append(_measure(impl, mode, "prefill", 1, prefill, runs, forward, log))
            finally:
                if mode == "graphs":
                    _graphs_off(model)
        restore(model, originals, lm_head)
        model.to(dtype)  # after torch int4's bf16
        torch.cuda.empty_cache()
    return rows, prepare_s, prepare_how


def _measure(
    impl: str, mode: str, phase: Phase, batch: int, tokens: int, runs: int, fn: Callable[[], float], log: Any
) -> ModelRow:
    """One row: ``fn`` (ms per decode step, or per prefill) run ``runs`` times after a warm-up; its error if any."""
    try:
        times = _timed_runs(fn, runs)
    except Exception as e:  # a mode this transformers / torch cannot run: recorded, the other rows still measured
        err = _error(e)
        log(f"{impl} {mode} {phase} batch {batch}: failed ({err})")
        return ModelRow(impl=impl, mode=mode, phase=phase, batch=batch, tokens=tokens, tok_s=None, ms=None,
                        runs_ms=[], error=err)  # fmt: skip
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
