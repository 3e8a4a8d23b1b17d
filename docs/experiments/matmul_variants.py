"""One GPU call comparing the GEMV's code-shape variants (dqgen.kernels.gemv.Tuning) on one build, AWQ int4 g128
fp16 at the issue's shapes, side by side. Round 4's variants: ``r3`` (round 3's kept choice on this build: the tile
grid everywhere, 128 registers for the 16-token entry, which spills), ``mb3`` (the 16-token entries capped at 168
registers, 3 blocks an SM: no spill), ``flat`` / ``flat_mb3`` (every GROUPED weight on the flat grid of
run_flat, the tiles' chunks laid end to end), and ``kept`` (the defaults). Each variant is also checked against the
float64 reference at a shape with tails (M = 1, 3, 8, 9, 16; the same bits twice). Times: triton.testing.do_bench
(L2 flushed before each call, median), two rounds, the second in reverse order; the table prints both.
``--only=A,B``: those variants alone, no checks (with a tree whose Tuning lacks round 4's fields, ``kept`` is its
default: how the lead's main is timed in the same call). ``--ms=1,2,...``: the token counts (default 1, 8, 9, 16).
Every variant runs 4-warp blocks (Tuning's default ``warps``): since session 36 pack_gemv gives a weight of few tiles
wider blocks (dqgen.kernels.gemv.block_warps), which devtools/linear_graph_bench.py --gemv-try times.

Usage on the GPU machine (dqgen on PYTHONPATH):
python docs/experiments/matmul_variants.py OUTDIR [--only=A,B] [--ms=...]
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
from dqgen.kernels.gemv import GROUPED, Tuning
from dqgen.run import matmul as mm
from dqgen.run.gpucheck import to_torch
from dqgen.run.runtime import Kernel

SHAPES = [(4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192)]
KEPT = Tuning()
_FIELDS = {f.name for f in dataclasses.fields(Tuning)}


def _tuning(**kw: object) -> Tuning:
    return Tuning(**{k: v for k, v in kw.items() if k in _FIELDS})  # type: ignore[arg-type]


VARIANTS: dict[str, Tuning] = {
    "r3": _tuning(flat="off", mb16=0),
    "mb3": _tuning(flat="off", mb16=3),
    "flat": _tuning(flat="on", mb16=0),
    "flat_mb3": _tuning(flat="on", mb16=3),
    "kept": KEPT,
}


def variant(k: Kernel, w: mm.MatmulWeight, tuning: Tuning) -> mm.MatmulWeight:
    """A copy of w whose launches run the kernel rendered with ``tuning`` (bound on its first call)."""
    return mm.retuned(k.artifact, w, tuning)


def grid_of(v: mm.MatmulWeight, M: int) -> str:
    f = getattr(v, "flat", (None, None))[M > 8]
    return f"tiles {v.n_tiles}x{v.splits}" if f is None else f"flat {f.blocks} blocks, {f.per_worker} chunks a warp"


def bind(k: Kernel, v: mm.MatmulWeight, tuning: Tuning, x: torch.Tensor, y: torch.Tensor) -> None:
    """The first call renders, compiles and binds the variant's launch (kept in v._bound for the timing; v carries
    ``tuning``)."""
    assert v.tuning == tuning
    mm.run_gemv(k.artifact, x, v, out=y)
    torch.cuda.synchronize()


def check(spec_name: str, tuning: Tuning) -> dict:
    """The variant against the float64 reference at K = 4096 + 128, N = 1448 (tails), M = 1, 3, 8, 9, 16."""
    spec = with_group_size(load_spec(spec_name), 128)
    k = Kernel(spec)
    K, N = 4096 + 128, 1448
    (q, s, z, gi, gsc), W = matmul_inputs(spec, K, N, seed=K + N)
    w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gsc))
    v = variant(k, w, tuning)
    out: dict = {}
    for M in (1, 3, 8, 9, 16):
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
        out[f"m{M}"] = (float(f"{err:.3g}"), same, grid_of(v, M))
    return out


def time_us(k: Kernel, x: torch.Tensor, v: mm.MatmulWeight, y: torch.Tensor) -> float:
    return float(triton.testing.do_bench(lambda: mm.run_gemv(k.artifact, x, v, out=y), return_mode="median")) * 1e3


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")), None)
    ms = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--ms=")), ["1", "8", "9", "16"])
    if only:
        for name in [n for n in VARIANTS if n not in only]:
            del VARIANTS[name]
    else:
        checks = {name: check("awq_int4_fp16", t) for name, t in VARIANTS.items()}
        checks["kept_bf16"] = check("awq_int4_bf16", KEPT)
        (out / "variant_checks.json").write_text(json.dumps(checks, indent=1))
        for name, c in checks.items():
            print(f"check {name:10s} " + " ".join(f"{key}:{e}{'' if same else '!'}" for key, (e, same, _) in c.items()))
    spec = with_group_size(load_spec("awq_int4_fp16"), 128)
    k = Kernel(spec)
    rows = []
    for K, N in SHAPES:
        q, s, z, gi = random_inputs(spec, K, N, seed=0)
        floor_bytes = sum(a.nbytes for a in (q, s, z) if a is not None)
        w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), gemm=False)
        assert w.mode == GROUPED, w.mode
        vs = {name: variant(k, w, t) for name, t in VARIANTS.items()}
        for M in map(int, ms):
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            cases: dict[str, tuple[mm.MatmulWeight, torch.Tensor]] = {}
            for name, v in vs.items():
                y = torch.empty(M, N, dtype=torch.float16, device="cuda")
                bind(k, v, VARIANTS[name], x, y)
                cases[name] = (v, y)
            ref = next(iter(cases.values()))[1].float()
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
                row[name + "_grid"] = grid_of(v, M)
                row[name + "_err"] = float(f"{float((y.float() - ref).norm() / ref.norm()):.2g}")
            rows.append(row)
            del cases
        del w, vs
        torch.cuda.empty_cache()
    (out / "variants.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(f"{r['K']}x{r['N']} M={r['M']} floor {r['floor_us']}")
        for name in [n for n in r if isinstance(r[n], list)]:
            t = r[name]
            print(f"   {name:10s} {t[0]:8.2f} {t[1]:8.2f}  {r[name + '_grid']}  err {r[name + '_err']}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
