"""Measure Kernel.matmul's three paths on this GPU and (with --write-rule) store the dispatch rule it should use.

For each shape (SHAPES: the issue's and Llama-3-8B's) and M = 1 .. 4096: the GEMV (M <= 16 only: it launches 16 rows
at a time), the tensor-core GEMM (dqgen.run.gemm.run_gemm on a packed weight) and dequantize + cuBLAS (the dequantize
kernel into a buffer, then torch.matmul), with cuBLAS on the dense weight alone beside them; one call after an L2
flush, median
(dqgen.run.timing.single_call_us). With ``--graphs-up-to M`` the M up to that are timed as a model runs instead: a
CUDA graph of back-to-back calls, each on its own copy of the weight (dqgen.run.timing.graph_copies: enough copies
to pass 3x the L2), median replay / calls (timing.graph_us): the flush before a single call adds several µs that
reorder paths of 4-25 µs (docs/experiments/issue23.md, session 35). Every output is checked against float64 x @ W
first.

The rule (dqgen.run.dispatch_sweep.rule_from_sweep, a function of the times alone): ``gemm_min_m`` = the M (of the
list up to 16, or 17: the GEMV launches 16 rows at a time) from which the GEMM replaces the GEMV that costs the least
over the faster of the two at its worst M and shape (on sm_90 with the dispatch's narrowing below 16 rows: the Hopper
GEMM only where it pays);
``dense_min_m`` = the smallest M of the list from
which dequantize + cuBLAS is faster than the GEMM by more than 3% on every shape (None: never), for shapes the sweep
did not time; ``shapes`` = per shape timed, the M (> 16) where dequantize + cuBLAS ran more than 3% faster than the
GEMM (dispatch.MeasuredShape: a call takes the choice of the measured M nearest its own). Prints a table; writes
the rows as JSON to --json.

    python devtools/gemm_dispatch_rule.py [--spec awq_int4_fp16] [--json out.json] [--write-rule]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

MS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
#: The shapes of the shipped H100 rule: issue 13's five and Llama-3-8B's q / o, k / v and gate / up.
SHAPES = (
    (4096, 6144),
    (4096, 4096),
    (4096, 1024),
    (4096, 14336),
    (14336, 4096),
    (4096, 28672),
    (8192, 28672),
    (28672, 8192),
)


def main() -> int:
    import torch

    from dqgen.core.formats import torch_dtype
    from dqgen.core.spec import load_spec
    from dqgen.run import dispatch, gemm
    from dqgen.run.runtime import Kernel
    from dqgen.run.timing import graph_copies, graph_us, single_call_us

    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="awq_int4_fp16")
    ap.add_argument("--json", default=None)
    ap.add_argument("--write-rule", action="store_true")
    ap.add_argument(
        "--check",
        action="store_true",
        help="then time Kernel.matmul under the rule (this process follows it; --write-rule also stores it) against "
        "the best path",
    )
    ap.add_argument(
        "--graphs-up-to",
        type=int,
        default=0,
        help="time the M up to this as CUDA graphs of back-to-back calls on copies of the weight (see the module "
        "docstring); the others as single calls",
    )
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES))
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    a = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    ms = [int(m) for m in a.ms.split(",")]
    spec = load_spec(a.spec)
    k = Kernel(spec)
    dt = torch_dtype(spec.target_type, torch)
    rows = []
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    for K, N in shapes:
        copies = graph_copies(K * N * spec.source.bits // 8, l2) if a.graphs_up_to else 1
        sets = [_paths(k, gemm, dispatch, torch, K, N, seed) for seed in range(copies)]  # sets[0]: single calls
        W64 = sets[0]["W"].double()
        for M in ms:
            x = torch.randn((M, K), dtype=dt, device="cuda")
            ref = x.double() @ W64
            graphs = a.graphs_up_to >= M
            for name, fn in sets[0]["paths"].items():
                if name == "gemv" and M > dispatch.GEMV_MAX_M:
                    continue
                y = fn(x)
                err = float((y.double() - ref).norm() / ref.norm())
                if graphs:
                    us = graph_us(lambda i, name=name, x=x, sets=sets: sets[i]["paths"][name](x), copies, calls=copies)
                else:
                    us = single_call_us(lambda fn=fn, x=x: fn(x))
                flops = 2.0 * M * K * N / (us * 1e-6) / 1e12
                rows.append(
                    {
                        "impl": name,
                        "spec": spec.name,
                        "M": M,
                        "K": K,
                        "N": N,
                        "us": us,
                        "tflops": flops,
                        "rel_err": err,
                        "timing": f"graph of {copies} copies" if graphs else "single call",
                    }
                )
                print(f"{K}x{N} M={M} {name}: {us:.1f} us, {flops:.0f} TFLOP/s, rel_err {err:.1e}", flush=True)
        del sets, W64
        torch.cuda.empty_cache()

    def t(impl: str, M: int, K: int, N: int) -> float:
        return next(r["us"] for r in rows if (r["impl"], r["M"], r["K"], r["N"]) == (impl, M, K, N))

    print("\n| M | " + " | ".join(f"{K}x{N} gemv / gemm / dense / cublas (us)" for K, N in shapes) + " |")
    for M in ms:
        cells = [
            (f"{t('gemv', M, K, N):.1f} / " if M <= 16 else "- / ")
            + f"{t('gemm', M, K, N):.1f} / {t('dequant + cublas', M, K, N):.1f} / {t('cublas dense', M, K, N):.1f}"
            for K, N in shapes
        ]
        print(f"| {M} | " + " | ".join(cells) + " |")
    from dqgen.run import device as dev
    from dqgen.run.dispatch_sweep import regret, rule_from_sweep

    sms, hopper = dev.sm_count(0), dispatch.is_hopper(0)  # hopper: the dispatch's small-M narrowing on sm_90
    rule = rule_from_sweep(t, ms, shapes, spec.name, sms, hopper)
    worst = regret(t, rule.gemm_min_m, ms, shapes, sms if hopper else None)
    print(f"gemm_min_m {rule.gemm_min_m}: at most {worst:.3f}x the faster of GEMV and GEMM up to M = 16")
    print(f"rule for {torch.cuda.get_device_name(0)}: {rule}")
    if a.write_rule:
        print(f"written to {dispatch.save_rule(0, rule)}")
    elif a.check:  # this process alone follows it (the machine's rule file is left as it was)
        dispatch._RULES[dispatch.dev_name(0)] = rule
    checks = []
    if a.check:  # what a user pays under the rule: Kernel.matmul (the dispatch) over the best path measured above
        for K, N in shapes:
            # timed as the paths were: single calls, or graphs over as many copies (their q, s, z stay alive in
            # the sets: the dense path may dequantize them)
            copies = graph_copies(K * N * spec.source.bits // 8, l2) if a.graphs_up_to else 1
            sets = [_paths(k, gemm, dispatch, torch, K, N, seed) for seed in range(copies)]
            for M in ms:
                x = torch.randn((M, K), dtype=dt, device="cuda")
                if a.graphs_up_to >= M:
                    us = graph_us(lambda i, x=x, sets=sets: sets[i]["dispatch"](x), copies, calls=copies)
                else:
                    us = single_call_us(lambda x=x, sets=sets: sets[0]["dispatch"](x))
                best = min(
                    r["us"] for r in rows if (r["M"], r["K"], r["N"]) == (M, K, N) and r["impl"] != "cublas dense"
                )
                checks.append({"M": M, "K": K, "N": N, "dispatch_us": us, "best_us": best, "over_best": us / best})
                print(f"{K}x{N} M={M} Kernel.matmul: {us:.1f} us, {us / best:.3f}x the best path ({best:.1f})")
            del sets
            torch.cuda.empty_cache()
        worst = max(checks, key=lambda c: c["over_best"])
        print(f"worst: {worst['over_best']:.3f}x the best path at {worst['K']}x{worst['N']} M={worst['M']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "gpu": torch.cuda.get_device_name(0),
                    "spec": spec.name,
                    "rule": dispatch.rule_entry(rule),
                    "rows": rows,
                    "checks": checks,
                },
                f,
                indent=1,
            )
    bad = [r for r in rows if not r["rel_err"] <= (2e-3 if spec.target.value == "fp16" else 1e-2)]
    if bad:
        print(f"FAILED: {len(bad)} outputs off the reference, first {bad[0]}")
        return 1
    return 0


def _paths(k: Any, gemm: Any, dispatch: Any, torch: Any, K: int, N: int, seed: int) -> dict[str, Any]:
    """One copy of a K x N weight (inputs of ``seed``), the four paths' calls on it and the dispatch's:
    {"W", "paths", "dispatch"}."""
    from dqgen.run import matmul as mm
    from dqgen.run.inputs import make_g_idx, make_inputs

    q, s, z = make_inputs(k.spec, K, N, seed)
    gi = make_g_idx(k.spec, K, seed)
    W = k(q, s, z, g_idx=gi)
    buf = torch.empty_like(W)
    mw = k.pack_matmul(q, s, z, g_idx=gi)
    gw = dispatch.beside(mw)
    assert gw is not None
    return {
        "W": W,
        "dispatch": lambda x: k.matmul(x, mw),  # Kernel.matmul under the rule: what --check times
        "paths": {
            "gemv": lambda x: mm.run_gemv(k.artifact, x, mw),
            "gemm": lambda x: gemm.run_gemm(k.spec, x, gw),
            "dequant + cublas": lambda x: torch.matmul(x, k(q, s, z, g_idx=gi, out=buf)),
            "cublas dense": lambda x: torch.matmul(x, W),
        },
    }


if __name__ == "__main__":
    sys.exit(main())
