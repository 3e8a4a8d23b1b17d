"""Time one linear's shape as a model runs it: a CUDA graph of back-to-back calls, each on its own weight (enough copies
that their int4 bytes are three times the L2, dqgen.run.timing.graph_copies: every call reads its weight from memory,
as the next layer's linear does), one x (which a model keeps in L2). Per call µs = the graph's median replay /
copies; two rounds, the second in reverse order, the lower kept. The single-call bench (an L2 flush before each call)
adds several µs of flush write-back and launch to every implementation, which at 4096 x 1024 is most of the time:
this is the measure for small shapes' choices.

Implementations: ``fp16`` (cuBLAS on the dense weight), ``dqgen`` (QuantLinear: the dispatch), ``torch int4``
(aten._weight_int4pack_mm, bf16), ``humming``, and dqgen's GEMMs forced: ``--try`` Hopper configs
(bn:consumers:stages:blocks[:cluster:features]), each with ``--splits`` pieces a tile too (stream-K pieces added by
the tile's last CTA) and ``--ksplits`` (split-K clusters: the pieces added through distributed shared memory; also on
the tile the dispatch picks), ``sm80`` and ``gemv``
(M <= 16), with ``--gemv-try`` variants of it too (``splits=2+flat=off+unroll=8``: split-K blocks a tile and
dqgen.kernels.gemv.Tuning fields, on the same packed weights: dqgen.run.matmul.retuned). Every forced variant's
output is checked against the sm_80 GEMM's (relative error in the record).

    python devtools/linear_graph_bench.py --shapes 4096x4096,4096x1024 --ms 64,128,256 \
        --try 128:1:5:2:1:64,128:2:8:1 --splits 2,4,8 --out $OUT/graph.json
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

REPLAYS = 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x4096,4096x1024,4096x14336,14336x4096")
    ap.add_argument("--ms", default="1,16,64,128,256")
    ap.add_argument("--impls", default="fp16,dqgen,torch int4,humming,sm80,gemv")
    ap.add_argument("--try", dest="extra", default="")
    ap.add_argument("--splits", default="")
    ap.add_argument("--ksplits", default="")
    ap.add_argument("--gemv-try", dest="gemv_try", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import torch

    from dqgen.core.spec import load_spec
    from dqgen.kernels.gemm90 import Gemm90Config
    from dqgen.nn.linear import QuantLinear
    from dqgen.run import gemm
    from dqgen.run.inputs import make_inputs
    from dqgen.run.matmul import retuned, run_gemv
    from dqgen.run.runtime import Kernel
    from dqgen.run.timing import graph_copies
    from dqgen.tools.bench_linears import tinygemm_linear
    from dqgen.tools.bench_matmul import humming_installed, humming_layer

    spec_name = "awq_int4_fp16"
    spec = load_spec(spec_name)
    kernel: Any = Kernel(spec)
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    if "humming" in impls and not humming_installed():
        impls.remove("humming")
    tried = [Gemm90Config.parse(t) for t in filter(None, args.extra.split(","))]
    pieces = [int(v) for v in filter(None, args.splits.split(","))]
    cluster_pieces = [int(v) for v in filter(None, args.ksplits.split(","))]
    gemv_tried = {text: _gemv_variant(text) for text in filter(None, args.gemv_try.split(","))}
    gpu = torch.cuda.get_device_name(0)
    rows = []
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        int4_bytes = K * N // 2
        copies = graph_copies(int4_bytes, torch.cuda.get_device_properties(0).L2_cache_size)
        weights = []
        for c in range(copies):
            q, s, z = make_inputs(spec, K, N, 7000 + c)
            weights.append({"q": q, "s": s, "z": z, "W": kernel(q, s, z)})  # W [K, N] fp16
        per_impl: dict[str, list[Any]] = {}
        if "fp16" in impls:
            per_impl["fp16"] = [w["W"].t().contiguous() for w in weights]
        if "dqgen" in impls:
            per_impl["dqgen"] = [QuantLinear.from_checkpoint(spec_name, w["q"], w["s"], w["z"]) for w in weights]
        if "torch int4" in impls:
            per_impl["torch int4"] = [tinygemm_linear(w["W"].t().contiguous().to(torch.bfloat16))[0] for w in weights]
        if "humming" in impls:
            per_impl["humming"] = [humming_layer(w["W"].t().contiguous()) for w in weights]
        gws = [gemm.pack_gemm(spec, w["q"], w["s"], w["z"]) for w in weights]
        want_gemv = "gemv" in impls or gemv_tried
        mws = [kernel.pack_matmul(w["q"], w["s"], w["z"], gemm=False) for w in weights] if want_gemv else []
        variants = {
            text: [retuned(kernel.artifact, m, tuning, splits) for m in mws]
            for text, (tuning, splits) in gemv_tried.items()
        }
        for w in weights:
            del w["q"], w["s"], w["z"]
        print(f"{K}x{N}: {copies} copies", flush=True)
        for text, vs in [("", mws), *variants.items()] if mws else ():
            flat = [f"flat {f.blocks} blocks" if f else "tiles" for f in vs[0].flat]
            print(f"  gemv {text or 'as packed'}: splits {vs[0].splits}, 1-8 / 9-16 tokens: {', '.join(flat)}")
        for M in (int(v) for v in args.ms.split(",")):
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            xb = x.to(torch.bfloat16)
            ref = gemm.run_gemm(spec, x, gws[0], config=gemm.choose_config(M))
            calls: dict[str, list[Callable[[], Any]]] = {}
            lin = torch.nn.functional.linear
            if "fp16" in per_impl:
                calls["fp16"] = [functools.partial(lin, x, w) for w in per_impl["fp16"]]
            if "dqgen" in per_impl:
                calls["dqgen"] = [functools.partial(m, x) for m in per_impl["dqgen"]]
            if "torch int4" in per_impl:
                calls["torch int4"] = [functools.partial(f, xb) for f in per_impl["torch int4"]]
            if "humming" in per_impl:
                calls["humming"] = [functools.partial(h, x) for h in per_impl["humming"]]
            if "sm80" in impls:
                calls["sm80"] = [
                    functools.partial(gemm.run_gemm, spec, x, g, config=gemm.choose_config(M)) for g in gws
                ]
            if "gemv" in impls and M <= 16:
                calls["gemv"] = [functools.partial(run_gemv, kernel.artifact, x, m) for m in mws]
            for text, vs in variants.items() if M <= 16 else ():
                calls[f"gemv {text}"] = [functools.partial(run_gemv, kernel.artifact, x, v) for v in vs]
            for cfg in tried:
                calls[f"sm90 {cfg.tag}"] = [functools.partial(gemm.run_gemm, spec, x, g, config=cfg) for g in gws]
                for p in pieces if cfg.cluster == 1 else []:
                    calls[f"sm90 {cfg.tag} split{p}"] = [
                        functools.partial(gemm.run_gemm, spec, x, g, config=cfg, splits=p) for g in gws
                    ]
                for p in cluster_pieces if cfg.cluster == 1 else []:
                    calls[f"sm90 {cfg.tag} ks{p}"] = [
                        functools.partial(gemm.run_gemm, spec, x, g, config=cfg, cluster_splits=p) for g in gws
                    ]
            for p in cluster_pieces:
                calls[f"sm90 ks{p}"] = [functools.partial(gemm.run_gemm, spec, x, g, cluster_splits=p) for g in gws]
            errs, timers, keep = {}, [], []
            for name, fns in calls.items():
                try:
                    y = fns[0]()
                except (ValueError, RuntimeError) as e:  # a forced shape this launch refuses
                    print(f"  M={M} {name}: refused ({str(e)[:160]})", flush=True)
                    continue
                if name.startswith(("sm", "gemv", "dqgen")):
                    errs[name] = float((y.float() - ref.float()).norm() / ref.float().norm())
                try:
                    graph, timed = _graph(fns)
                except (ValueError, RuntimeError) as e:  # a call that cannot be captured: its row only
                    print(f"  M={M} {name}: capture failed ({str(e)[:160]})", flush=True)
                    continue
                keep.append(graph)
                timers.append((name, timed))
            rounds = [[t() for _, t in (timers if r == 0 else timers[::-1])] for r in range(2)]
            us = {}
            for i, (name, _) in enumerate(timers):
                pair = [rounds[0][i], rounds[1][len(timers) - 1 - i]]
                us[name] = min(pair) / copies
            rows.append({"K": K, "N": N, "M": M, "copies": copies, "us": us, "errs": errs, "gpu": gpu})
            best = min(us, key=us.__getitem__)
            print(
                f"{K}x{N} M={M:4d} | " + " | ".join(f"{n} {v:6.2f}" for n, v in us.items()) + f" | best {best}",
                flush=True,
            )
            del keep, timers, calls
        del per_impl, gws, mws, variants, weights
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"spec": spec_name, "gpu": gpu, "method": __doc__.split("\n\n")[0], "rows": rows}, f, indent=1)


def _gemv_variant(text: str) -> tuple[Any, int | None]:
    """``splits=2+flat=off+unroll=8`` -> (the Tuning with those fields, the split count or None). A split count
    without ``flat`` keeps the tile grid (flat=off): the default "waves" would put a GROUPED weight whose split tiles
    pass one wave on the flat grid, which has no splits."""
    import dataclasses

    from dqgen.kernels.gemv import Tuning

    fields = {f.name for f in dataclasses.fields(Tuning)}
    kw: dict[str, Any] = {}
    splits = None
    for part in text.split("+"):
        key, _, value = part.partition("=")
        if key == "splits":
            splits = int(value)
        elif key in fields:
            default = getattr(Tuning(), key)
            if isinstance(default, bool):
                if value not in ("0", "1"):
                    raise SystemExit(f"--gemv-try: {key} takes 0 or 1, got {value!r}")
                kw[key] = value == "1"
            else:
                kw[key] = type(default)(value)
        else:
            raise SystemExit(f"--gemv-try: {key!r} is neither splits nor a Tuning field ({', '.join(sorted(fields))})")
    if splits is not None:
        kw.setdefault("flat", "off")
    return Tuning(**kw), splits


def _graph(fns: list[Callable[[], Any]]) -> tuple[Any, Callable[[], float]]:
    """The calls in one CUDA graph and its timer (bench_linears.graph_replays_us: median replay, µs)."""
    from dqgen.tools.bench_linears import graph_replays_us

    def run() -> None:
        for f in fns:
            f()

    return graph_replays_us(run, REPLAYS)


if __name__ == "__main__":
    main()
