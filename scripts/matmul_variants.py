"""One GPU call comparing the GEMV's variants on one build, AWQ int4 g128 fp16 at the issue's shapes, M = 1 and 16:
PAIRED (the scale applied to each weight, split-K filling the resident blocks once: the kernel before GROUPED) and
GROUPED (the scale applied to each group's fp32 partial sum, deeper loads in flight), each with both split-K rules.
GROUPED weights launch the PAIRED entry for 1..8 tokens (dqgen.emit.matmul.launch_mode), so at M = 1 the GROUPED
columns compare the split rules; the 2026-11-23 run (a GROUPED entry for 1..8 tokens too) is in
docs/performance.md. Times: triton.testing.do_bench (L2 flushed before each call, median). ``--ncu``: one launch
of each of three variants and nothing else (run under ``ncu -k regex:dqgen_mm``).

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
from dqgen.emit.matmul import GROUPED, PAIRED, WARPS, MatmulEntry
from dqgen.run import device as dev
from dqgen.run import matmul as mm
from dqgen.run.gpucheck import to_torch
from dqgen.run.runtime import Kernel

SHAPES = [(4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192)]


def old_splits(n_tiles: int, chunks: int, resident: int) -> int:
    """The split rule before this change: the fewest splits that fill the resident blocks at least once."""
    return max(1, min(-(-resident // n_tiles), chunks // (2 * WARPS)))


def variant(k: Kernel, w: mm.MatmulWeight, mode: int, rule: str) -> mm.MatmulWeight:
    fn = mm._function(k, MatmulEntry(False, mode), w.device)
    resident = dev.sm_count(w.device) * max(1, fn.max_active_blocks(WARPS * 32, 0))
    pick = old_splits if rule == "old" else mm.choose_splits
    splits = pick(w.n_tiles, w.chunks, resident)
    return dataclasses.replace(
        w,
        mode=mode,
        splits=splits,
        workspace=torch.empty(w.n_tiles * splits * mm.PARTIAL, dtype=torch.float32, device=w.wq.device),
        counters=torch.zeros(w.n_tiles, dtype=torch.int32, device=w.wq.device),
        _bound={},
    )


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ncu = "--ncu" in sys.argv
    spec = with_group_size(load_spec("awq_int4_fp16"), 128)
    k = Kernel(spec)
    rows = []
    shapes = [(8192, 28672), (4096, 6144)] if ncu else SHAPES
    for K, N in shapes:
        q, s, z, gi = random_inputs(spec, K, N, seed=0)
        floor_bytes = sum(a.nbytes for a in (q, s, z) if a is not None)
        w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi))
        assert w.mode == GROUPED, w.mode
        variants = {
            "paired_old": variant(k, w, PAIRED, "old"),
            "grouped_new": variant(k, w, GROUPED, "new"),
            "grouped_old": variant(k, w, GROUPED, "old"),
        }
        if ncu:  # one launch each: paired_old and grouped_new at the first shape, grouped_new at the second
            x = (torch.randn(1, K, device="cuda") / K**0.5).half()
            names = ["paired_old", "grouped_new"] if shapes[0] == (K, N) else ["grouped_new"]
            for name in names:
                k.matmul(x, variants[name])
            torch.cuda.synchronize()
            continue
        for M in (1, 16):
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            ref = k.matmul(x, variants["paired_old"]).float()
            row: dict = {"K": K, "N": N, "M": M, "floor_us": round(floor_bytes / 3005e3, 2)}
            for name, v in variants.items():
                y = k.matmul(x, v)
                err = float((y.float() - ref).norm() / ref.norm())
                us = float(triton.testing.do_bench(lambda x=x, v=v, y=y: k.matmul(x, v, out=y), return_mode="median"))
                row[name] = round(us * 1e3, 2)
                row[name + "_splits"] = v.splits
                row[name + "_err_vs_paired"] = float(f"{err:.2g}")
            # the same GROUPED kernel with half the chunks in flight (ring 3): does the depth matter?
            shallow = dataclasses.replace(variants["grouped_new"], _bound={})
            emit_mm.ring, default_ring = (lambda spec: 3), emit_mm.ring
            emit_mm._SOURCES.clear()
            y = k.matmul(x, shallow)
            us = float(triton.testing.do_bench(lambda x=x, v=shallow, y=y: k.matmul(x, v, out=y), return_mode="median"))
            row["grouped_ring_half"] = round(us * 1e3, 2)
            emit_mm.ring = default_ring
            emit_mm._SOURCES.clear()
            rows.append(row)
            print(json.dumps(row), flush=True)
        del variants, w
        torch.cuda.empty_cache()
    if not ncu:
        (out / "variants.json").write_text(json.dumps(rows, indent=1))
        print(f"{'K x N':>12} {'M':>3} {'floor':>6} {'paired_old':>11} {'grouped_new':>12} {'grouped_old':>12} ring/2")
        for r in rows:
            print(
                f"{r['K']:>5}x{r['N']:<6} {r['M']:>3} {r['floor_us']:>6} {r['paired_old']:>8}/{r['paired_old_splits']}"
                f" {r['grouped_new']:>9}/{r['grouped_new_splits']} {r['grouped_old']:>9}/{r['grouped_old_splits']}"
                f" {r['grouped_ring_half']:>7}"
            )


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
