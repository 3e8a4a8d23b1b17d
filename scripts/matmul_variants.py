"""One GPU call comparing the GEMV's code-shape variants (dqgen.emit.matmul.Tuning) on one build, AWQ int4 g128
fp16 at the issue's shapes, M = 1 and 16, side by side: round 2's kernel (``before``: the batched GROUPED entry
run<_, 3> at 1..8 tokens, run_grouped at 9..16), the kept one (run_lean at 9..16 tokens), run_lean at 1..8 tokens
with one or two partial sums and with 1, 2 or 4 batches of weights fetched into L2 ahead (``lean*``), and the kept
kernel at every split-K count. Each variant is also checked against the float64 reference at a shape with tails
(M = 1, 3, 8, 16; the same bits twice). Times: triton.testing.do_bench (L2 flushed before each call, median), two
rounds, the second in reverse order; the table prints both. ``--ncu``: one launch of the kept variant at 8192x28672
and 4096x6144, M = 1 (run under ``ncu -k regex:dqgen_mm``). ``--only=A,B``: those variants alone, without the checks
and the split sweep.

Usage on the GPU machine (dqgen on PYTHONPATH): python scripts/matmul_variants.py OUTDIR [--ncu] [--only=A,B]
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
import triton.testing

from dqgen.check.matmul_reference import matmul_inputs, matmul_reference, random_x, relative_error
from dqgen.check.reference import random_inputs
from dqgen.core.spec import load_spec, with_group_size
from dqgen.emit import matmul as emit_mm
from dqgen.emit.matmul import GROUPED, PAIRED, WARPS, MatmulEntry, Tuning
from dqgen.run import device as dev
from dqgen.run import matmul as mm
from dqgen.run.gpucheck import to_torch
from dqgen.run.runtime import Kernel

SHAPES = [(4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192)]
KEPT = Tuning()
VARIANTS: dict[str, Tuning] = {
    "before": Tuning(lean16=False),  # round 2's kernel: run<_, 3> at 1..8 tokens, run_grouped at 9..16
    "kept": KEPT,  # run<_, 3> at 1..8 tokens, run_lean at 9..16
    "lean": Tuning(lean8=True, prefetch=0),  # run_lean at 1..8 too: 2 partial sums, scales 2 groups ahead
    "lean_a1": Tuning(lean8=True, accs=1),
    "lean_pf1": Tuning(lean8=True, prefetch=1),  # ... and the weights of 1, 2, 4 batches beyond the next in L2
    "lean_pf2": Tuning(lean8=True, prefetch=2),
    "lean_pf4": Tuning(lean8=True, prefetch=4),
    "lean16_pf2": Tuning(prefetch=2),
}
M1 = ("before", "kept", "lean", "lean_a1", "lean_pf1", "lean_pf2", "lean_pf4")
M16 = ("before", "kept", "lean16_pf2")


def variant(k: Kernel, w: mm.MatmulWeight, tuning: Tuning, splits: int | None) -> mm.MatmulWeight:
    """A copy of w whose launches run the kernel rendered with ``tuning`` (bound on its first call)."""
    emit_mm.TUNING = tuning
    emit_mm._SOURCES.clear()
    try:
        fn = mm._function(k, MatmulEntry(False, PAIRED), w.device)  # every entry has the same register cap
        resident = dev.sm_count(w.device) * max(1, fn.max_active_blocks(WARPS * 32, 0))
    finally:
        emit_mm.TUNING = KEPT
        emit_mm._SOURCES.clear()
    s = splits if splits is not None else mm.choose_splits(w.n_tiles, w.chunks, resident)
    return dataclasses.replace(
        w,
        splits=s,
        workspace=torch.empty(w.n_tiles * s * mm.PARTIAL, dtype=torch.float32, device=w.wq.device),
        counters=torch.zeros(w.n_tiles, dtype=torch.int32, device=w.wq.device),
        _bound={},
    )


def bind(k: Kernel, v: mm.MatmulWeight, tuning: Tuning, x: torch.Tensor, y: torch.Tensor) -> None:
    """The first call renders, compiles and binds the variant's launch (kept in v._bound for the timing)."""
    emit_mm.TUNING = tuning
    emit_mm._SOURCES.clear()
    try:
        k.matmul(x, v, out=y)
        torch.cuda.synchronize()
    finally:
        emit_mm.TUNING = KEPT
        emit_mm._SOURCES.clear()


def check(spec_name: str, tuning: Tuning) -> dict:
    """The variant against the float64 reference at K = 4096 + 128, N = 1448 (tails), M = 1, 3, 8, 16."""
    spec = with_group_size(load_spec(spec_name), 128)
    k = Kernel(spec)
    K, N = 4096 + 128, 1448
    (q, s, z, gi, gsc), W = matmul_inputs(spec, K, N, seed=K + N)
    w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gsc))
    out: dict = {}
    for splits in (None, 3):
        v = variant(k, w, tuning, splits)
        for M in (1, 3, 8, 16):
            x_np = random_x(spec, M, K, seed=M)
            x = to_torch(x_np)
            ys = []
            for _ in range(2):
                y = torch.full((M, N), float("nan"), dtype=x.dtype, device="cuda")
                bind(k, v, tuning, x, y)
                ys.append(y)
            same = bool(torch.equal(ys[0].view(torch.int16), ys[1].view(torch.int16)))
            got = ys[0].float().cpu().numpy().astype(np.float64)
            err = relative_error(got, matmul_reference(x_np, W)) if np.isfinite(got).all() else float("inf")
            out[f"s{v.splits}_m{M}"] = (float(f"{err:.3g}"), same)
    return out


def time_us(k: Kernel, x: torch.Tensor, v: mm.MatmulWeight, y: torch.Tensor) -> float:
    return float(triton.testing.do_bench(lambda: k.matmul(x, v, out=y), return_mode="median")) * 1e3


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ncu = "--ncu" in sys.argv
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), None)
    if only:  # a shorter call: these variants, no checks, no split sweep
        for name in [n for n in VARIANTS if n not in only]:
            del VARIANTS[name]
    if not ncu and not only:
        checks = {name: check("awq_int4_fp16", t) for name, t in VARIANTS.items()}
        checks["kept_bf16"] = check("awq_int4_bf16", KEPT)
        (out / "variant_checks.json").write_text(json.dumps(checks, indent=1))
        for name, c in checks.items():
            print(f"check {name:12s} " + " ".join(f"{key}:{e}{'' if same else '!'}" for key, (e, same) in c.items()))
    spec = with_group_size(load_spec("awq_int4_fp16"), 128)
    k = Kernel(spec)
    rows = []
    for K, N in [(8192, 28672), (4096, 6144)] if ncu else SHAPES:
        q, s, z, gi = random_inputs(spec, K, N, seed=0)
        floor_bytes = sum(a.nbytes for a in (q, s, z) if a is not None)
        w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi))
        assert w.mode == GROUPED, w.mode
        if ncu:
            x = (torch.randn(1, K, device="cuda") / K**0.5).half()
            v = variant(k, w, KEPT, None)
            bind(k, v, KEPT, x, torch.empty(1, N, dtype=torch.float16, device="cuda"))
            continue
        for M in (1, 16):
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            cases: dict[str, tuple[mm.MatmulWeight, torch.Tensor]] = {}
            names = [n for n in (M1 if M == 1 else M16) if n in VARIANTS]
            for name in names:
                v = variant(k, w, VARIANTS[name], None)
                y = torch.empty(M, N, dtype=torch.float16, device="cuda")
                bind(k, v, VARIANTS[name], x, y)
                cases[name] = (v, y)
            if M == 1 and not only:  # the kept kernel at every split count (the rule's pick is the sums8 row)
                top = max(1, min(3, w.chunks // (2 * WARPS)))
                for sp in range(1, top + 1):
                    v = variant(k, w, KEPT, sp)
                    y = torch.empty(M, N, dtype=torch.float16, device="cuda")
                    bind(k, v, KEPT, x, y)
                    cases[f"kept_s{sp}"] = (v, y)
            ref = cases["before"][1].float()
            row: dict = {"K": K, "N": N, "M": M, "floor_us": round(floor_bytes / 3005e3, 2)}
            order = list(cases)
            times: dict[str, list[float]] = {n: [] for n in order}
            for rnd in (order, order[::-1]):
                for name in rnd:
                    v, y = cases[name]
                    times[name].append(time_us(k, x, v, y))
            for name in order:
                v, y = cases[name]
                row[name] = [round(t, 2) for t in times[name]]
                row[name + "_splits"] = v.splits
                row[name + "_err"] = float(f"{float((y.float() - ref).norm() / ref.norm()):.2g}")
            rows.append(row)
            print(json.dumps(row), flush=True)
            del cases
        del w
        torch.cuda.empty_cache()
    if ncu:
        return
    (out / "variants.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(f"{r['K']}x{r['N']} M={r['M']} floor {r['floor_us']}")
        for name in [n for n in r if isinstance(r[n], list)]:
            t = r[name]
            print(f"   {name:12s} {t[0]:8.2f} {t[1]:8.2f}  splits {r[name + '_splits']}  err {r[name + '_err']}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
