"""One GPU call comparing the GEMV's code-shape variants (dqgen.emit.matmul.Tuning) on one build, AWQ int4 g128
fp16 at the issue's shapes, M = 1 and 16, side by side: the kernel before this round (weights through __ldcs, x
loaded per chunk), the weights through ld.global.nc.L1::no_allocate (alone, with x hoisted per batch, with an L2
256-byte prefetch), x hoisted alone, a lighter kernel (2 chunks a batch, 6 blocks per SM), the GROUPED entry at
M = 1, and the kept variant at every split-K count. Times: triton.testing.do_bench (L2 flushed before each call,
median), two rounds, the second in reverse order; the table prints both. ``--ncu``: one launch of the kept
variant at 8192x28672 and 4096x6144, M = 1 (run under ``ncu -k regex:dqgen_mm``).

Usage on the GPU machine (dqgen on PYTHONPATH): python scripts/matmul_variants.py OUTDIR [--ncu]
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
import triton.testing

from dqgen.check.reference import random_inputs
from dqgen.core.spec import load_spec, with_group_size
from dqgen.emit import matmul as emit_mm
from dqgen.emit.matmul import GROUPED, PAIRED, WARPS, MatmulEntry, Tuning
from dqgen.run import device as dev
from dqgen.run import matmul as mm
from dqgen.run.gpucheck import to_torch
from dqgen.run.runtime import Kernel

SHAPES = [(4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192)]
BEFORE = Tuning(wload="cs", xhoist=False)
KEPT = Tuning()
#: name -> (tuning, entry mode at 1..8 tokens)
VARIANTS: dict[str, tuple[Tuning, int]] = {
    "before": (BEFORE, PAIRED),
    "cs_x": (Tuning(wload="cs"), PAIRED),
    "na": (Tuning(xhoist=False), PAIRED),
    "na_x": (KEPT, PAIRED),
    "na256_x": (Tuning(wload="na256"), PAIRED),
    "na_x_u2mb6": (Tuning(unroll=2, min_blocks=6), PAIRED),
    "na_grouped": (KEPT, GROUPED),
}
M16 = ("before", "na_x", "na256_x")  # 16 tokens run the GROUPED entry: only the weight load differs


def variant(k: Kernel, w: mm.MatmulWeight, tuning: Tuning, mode: int, splits: int | None) -> mm.MatmulWeight:
    """A copy of w whose launches run the kernel rendered with ``tuning`` (bound on its first call)."""
    emit_mm.TUNING = tuning
    emit_mm._SOURCES.clear()
    fn = mm._function(k, MatmulEntry(False, PAIRED), w.device)  # every entry has the same register cap
    resident = dev.sm_count(w.device) * max(1, fn.max_active_blocks(WARPS * 32, 0))
    s = splits if splits is not None else mm.choose_splits(w.n_tiles, w.chunks, resident)
    return dataclasses.replace(
        w,
        splits=s,
        workspace=torch.empty(w.n_tiles * s * mm.PARTIAL, dtype=torch.float32, device=w.wq.device),
        counters=torch.zeros(w.n_tiles, dtype=torch.int32, device=w.wq.device),
        _bound={},
    )


def bind(k: Kernel, v: mm.MatmulWeight, tuning: Tuning, mode: int, x: torch.Tensor, y: torch.Tensor) -> None:
    """The first call renders, compiles and binds the variant's launch (kept in v._bound for the timing)."""
    emit_mm.TUNING = tuning
    emit_mm._SOURCES.clear()
    keep_entries, keep_launch = emit_mm.entries, mm.launch_mode
    if mode == GROUPED:  # a GROUPED entry for 1..8 tokens too
        emit_mm.entries = lambda spec: (*keep_entries(spec), MatmulEntry(False, GROUPED))
        mm.launch_mode = lambda m, tok16: m
    try:
        k.matmul(x, v, out=y)
        torch.cuda.synchronize()
    finally:
        emit_mm.entries, mm.launch_mode = keep_entries, keep_launch
        emit_mm.TUNING = KEPT
        emit_mm._SOURCES.clear()


def time_us(k: Kernel, x: torch.Tensor, v: mm.MatmulWeight, y: torch.Tensor) -> float:
    return float(triton.testing.do_bench(lambda: k.matmul(x, v, out=y), return_mode="median")) * 1e3


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ncu = "--ncu" in sys.argv
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
            v = variant(k, w, KEPT, PAIRED, None)
            bind(k, v, KEPT, PAIRED, x, torch.empty(1, N, dtype=torch.float16, device="cuda"))
            continue
        for M in (1, 16):
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            cases: dict[str, tuple[mm.MatmulWeight, torch.Tensor]] = {}
            names = list(VARIANTS) if M == 1 else list(M16)
            for name in names:
                tuning, mode = VARIANTS[name]
                v = variant(k, w, tuning, mode, None)
                y = torch.empty(M, N, dtype=torch.float16, device="cuda")
                bind(k, v, tuning, mode, x, y)
                cases[name] = (v, y)
            if M == 1:  # the kept kernel at every split count (the rule's pick is the na_x row)
                top = max(1, min(4, w.chunks // (2 * WARPS)))
                for sp in range(1, top + 1):
                    v = variant(k, w, KEPT, PAIRED, sp)
                    y = torch.empty(M, N, dtype=torch.float16, device="cuda")
                    bind(k, v, KEPT, PAIRED, x, y)
                    cases[f"na_x_s{sp}"] = (v, y)
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
