"""The Hopper GEMM's main-loop rate and fixed cost, apart: by default one wave of whole tiles (one a resident CTA, no
stream-K pieces) at several K, timed as CUDA graphs of back-to-back calls (median µs a call), fitted as time = fixed +
K tiles x per-tile time. The per-tile time against the tensor pipe's time for the tile's wgmmas (at the measured
dense peak: cuBLAS fp16 on 8192^3) says how fast the loop runs; the fixed part is launch, pipeline fill, the pieces'
fixup and the epilogue. ``--n`` / ``--splits`` time a real shape's schedule instead (4096 features in 4 pieces a
tile: the fixup's cost in the fixed part), ``--serial-fixup`` with the last arriver adding every piece. AWQ int4 g128
fp16 weights.

    python devtools/gemm90_loop_rate.py --configs 128:2:8:1,256:2:5:1 --ks 2048,4096,8192,16384 --out $OUT/rate.json
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from typing import Any

TILE_K = 64
CALLS = 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="32:1:8:2,64:1:6:2,128:2:8:1,256:2:5:1")
    ap.add_argument("--ks", default="2048,4096,8192,16384")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--n", type=int, default=0, help="features (default: one whole tile a resident CTA)")
    ap.add_argument("--splits", type=int, default=1, help="stream-K pieces a tile")
    ap.add_argument("--ksplit", type=int, default=None, help="split-K clusters of this many CTAs")
    ap.add_argument("--serial-fixup", action="store_true", help="the last arriver adds every piece (no shares_for)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    import torch
    from gemm90_case import awq_weight  # a sibling script (devtools/ is the script's directory)

    from dqgen.kernels.gemm90 import Gemm90Config
    from dqgen.run import device as dev
    from dqgen.run import gemm, gemm90

    gemm90.SHARED_FIXUP = not a.serial_fixup

    sms = dev.sm_count(0)

    def time_us(fn: Any) -> float:
        """Median µs a call of CALLS back-to-back calls replayed as one CUDA graph (no host time in it)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # binds the launch (tensor maps, workspace) before the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(CALLS):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(a.reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graph.replay()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1) * 1e3 / CALLS)
        return statistics.median(ts)

    n = 8192
    xa = torch.randn(n, n, device="cuda", dtype=torch.float16)
    wa = torch.randn(n, n, device="cuda", dtype=torch.float16)
    peak = 2 * n**3 / time_us(functools.partial(torch.matmul, xa, wa)) / 1e6  # TFLOP/s
    rows: list[dict[str, Any]] = []
    for text in a.configs.split(","):
        cfg = Gemm90Config.parse(text)
        M, N = cfg.bn, a.n or cfg.features * sms * cfg.min_blocks  # default: one whole tile a resident CTA
        pts = []
        for K in (int(v) for v in a.ks.split(",")):
            k, gw = awq_weight(K, N)
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            run = functools.partial(gemm.run_gemm, k.spec, x, gw, config=cfg, splits=a.splits, cluster_splits=a.ksplit)
            us = time_us(run)
            dense = time_us(functools.partial(torch.matmul, x, torch.randn(K, N, device="cuda", dtype=torch.float16)))
            pts.append((K // TILE_K, us, dense))
            row = {"config": text, "splits": a.splits, "ksplit": a.ksplit, "shared_fixup": gemm90.SHARED_FIXUP}
            rows.append({**row, "M": M, "N": N, "K": K, "us": us, "cublas_fp16_us": dense})
        kt = [p[0] for p in pts]
        fit = statistics.linear_regression(kt, [p[1] for p in pts])
        fitd = statistics.linear_regression(kt, [p[2] for p in pts])
        # the tensor pipe's time for one K tile of every resident CTA's wgmmas at the measured peak
        ideal = 2 * M * N * TILE_K / (peak * 1e6)
        summary = {
            "config": text,
            "splits": a.splits,
            "ksplit": a.ksplit,
            "shared_fixup": gemm90.SHARED_FIXUP,
            "M": M,
            "N": N,
            "per_k_tile_us": fit.slope,
            "fixed_us": fit.intercept,
            "ideal_per_k_tile_us": ideal,
            "loop_fraction_of_peak": ideal / fit.slope,
            "cublas_per_k_tile_us": fitd.slope,
            "cublas_fixed_us": fitd.intercept,
        }
        rows.append(summary)
        print(json.dumps(summary), flush=True)
    print(json.dumps({"measured_peak_tflops": peak, "gpu": torch.cuda.get_device_name(0)}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "peak_tflops": peak, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
