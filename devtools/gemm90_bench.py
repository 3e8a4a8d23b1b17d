"""Time the Hopper GEMM (dqgen.run.gemm90) beside the sm_80 GEMM, the GEMV and cuBLAS on dense fp16 weights, on one
GPU, L2 flushed before each call (triton.testing.do_bench, median), AWQ int4 g128 fp16 by default. Prints a table
and writes JSON (--out). Also checks the Hopper output against the sm_80 kernel's on every case (relative error).

    python devtools/gemm90_bench.py --out $OUT/gemm90.json [--shapes 4096x6144,8192x28672] [--ms 1,16,64,256]

``--cluster``: the 2-CTA cluster entry of M's token tile (x multicast, dqgen.kernels.gemm90.CLUSTER_CONFIGS90) beside
the one-CTA launch ("sm90 gemm": the schedule bind90 picks; "sm90 1/tile": one whole tile a CTA, the cluster's
schedule) and cuBLAS, and only those (its error against the one-CTA entry is recorded too):

    python devtools/gemm90_bench.py --cluster --shapes 8192x28672,28672x8192,4096x28672,14336x4096 \
        --ms 128,256,512,1024,4096 --out docs/bench/gemm90_cluster_h100.json
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="awq_int4_fp16")
    ap.add_argument("--shapes", default="4096x6144,8192x28672,28672x8192,4096x28672,14336x4096")
    ap.add_argument("--ms", default="1,8,16,32,64,128,256,512,1024")
    ap.add_argument("--out", default="")
    ap.add_argument("--configs", action="store_true", help="also time every Hopper token tile that holds M")
    ap.add_argument(
        "--try", dest="extra", default="", help="more Hopper configs at every M: bn:consumers:stages:blocks[:cluster"
        ":features],... (a tile under M runs several token tiles)",
    )  # fmt: skip
    ap.add_argument(
        "--splits", default="", help="also time the chosen Hopper tile and each --try config split-K in these many "
        "pieces a tile (comma-separated)",
    )  # fmt: skip
    ap.add_argument(
        "--torch-int4", action="store_true", help="also time torch's int4 kernel (aten._weight_int4pack_mm, bf16 x) "
        "on the same dense weight",
    )  # fmt: skip
    ap.add_argument(
        "--schedules", action="store_true", help="also time the chosen tile's schedules: one tile a CTA, persistent, "
        "whole waves then the tail in stream-K over every resident CTA or in 2-4 lockstep pieces a tile",
    )  # fmt: skip
    ap.add_argument("--cluster", action="store_true", help="the 2-CTA cluster entry vs one-CTA vs cuBLAS only")
    ap.add_argument("--narrow", action="store_true", help="also time the 64-feature tile holding M")
    ap.add_argument("--humming", action="store_true", help="also time humming's W4A16 layer on the same dense weight")
    args = ap.parse_args()

    import torch
    import triton.testing as tt

    import dqgen
    from dqgen.kernels.gemm90 import CONFIGS90, NARROW_CONFIGS90, Gemm90Config, choose_config90, cluster_config90
    from dqgen.run import gemm
    from dqgen.run.device import sm_count
    from dqgen.run.gemm90 import config90_for
    from dqgen.run.matmul import run_gemv

    k = dqgen.compile(args.spec)
    spec = k.spec
    dev_name = torch.cuda.get_device_name(0)
    rows = []
    torch.manual_seed(0)
    for shape in args.shapes.split(","):
        K, N = (int(v) for v in shape.split("x"))
        G = K // 128
        qweight = torch.randint(-(2**31), 2**31 - 1, (K, N // 8), dtype=torch.int32, device="cuda")
        qzeros = torch.randint(-(2**31), 2**31 - 1, (G, N // 8), dtype=torch.int32, device="cuda")
        scales = (torch.rand(G, N, device="cuda") * 0.01 + 0.001).half()
        t0 = time.time()
        w = k.pack_matmul(qweight, scales, qzeros)
        gw = gemm.pack_gemm(spec, qweight, scales, qzeros)
        pack_s = time.time() - t0
        W = k(qweight, scales, qzeros)
        if args.humming:
            from dqgen.tools.bench_matmul import humming_layer

            hum = humming_layer(W.t().contiguous())
        if args.torch_int4:
            from dqgen.tools.bench_linears import tinygemm_linear

            tiny = tinygemm_linear(W.t().contiguous().to(torch.bfloat16))[0]
        floor_us = (K * N / 2 + G * N * 2 + G * N / 2) / 3.0e12 * 1e6
        for M in (int(v) for v in args.ms.split(",")):
            x = (torch.randn(M, K, device="cuda") / K**0.5).half()
            tile90 = config90_for(M, N, gw.k_tiles, sm_count(0), spec)  # the CTA shape bind90 launches
            cl = cluster_config90(choose_config90(M))
            if args.cluster and cl is None:
                continue
            y80 = gemm.run_gemm(spec, x, gw, config=choose_config90(M) if args.cluster else gemm.choose_config(M))
            y90 = gemm.run_gemm(spec, x, gw, config=cl if args.cluster else tile90)
            torch.cuda.synchronize()
            err = float((y90.float() - y80.float()).norm() / y80.float().norm())
            cands = {
                "sm80 gemm": lambda: gemm.run_gemm(spec, x, gw, config=gemm.choose_config(M)),  # noqa: B023
                "sm90 gemm": lambda: gemm.run_gemm(spec, x, gw, config=tile90),  # noqa: B023
                "sm90 1/tile": lambda: gemm.run_gemm(spec, x, gw, config=tile90, splits=1),  # noqa: B023
                "cuBLAS fp16": lambda: torch.matmul(x, W),  # noqa: B023
            }
            if args.cluster:
                del cands["sm80 gemm"]
                cands["sm90 cluster"] = lambda c=cl: gemm.run_gemm(spec, x, gw, config=c)  # noqa: B023
            if M <= 16 and not args.cluster:
                cands["gemv"] = lambda: run_gemv(k.artifact, x, w)  # noqa: B023
            tried = [Gemm90Config.parse(t) for t in filter(None, args.extra.split(","))]
            for cfg in tried:
                cands[f"sm90 {cfg.tag}"] = lambda c=cfg: gemm.run_gemm(spec, x, gw, config=c)  # noqa: B023
            for pieces in (int(v) for v in filter(None, args.splits.split(","))):
                for cfg in (tile90, *tried):
                    if cfg.cluster == 1:
                        cands[f"sm90 {cfg.tag} split{pieces}"] = functools.partial(
                            gemm.run_gemm, spec, x, gw, config=cfg, splits=pieces
                        )
            if args.torch_int4:
                xb = x.to(torch.bfloat16)
                cands["torch int4"] = lambda: tiny(xb)  # noqa: B023
            if args.schedules:
                cands.update(_schedules(spec, x, gw, M, tile90))
            if args.narrow:
                cfg = next((c for c in NARROW_CONFIGS90 if c.bn >= M), NARROW_CONFIGS90[-1])
                cands[f"sm90 {cfg.tag}"] = lambda c=cfg: gemm.run_gemm(spec, x, gw, config=c)  # noqa: B023
                y64 = gemm.run_gemm(spec, x, gw, config=cfg)
                torch.cuda.synchronize()
                err = max(err, float((y64.float() - y80.float()).norm() / y80.float().norm()))
            if args.humming:
                cands["humming"] = lambda: hum(x)  # noqa: B023
            if args.configs:
                for cfg in CONFIGS90:
                    if cfg.bn >= M and cfg != tile90:
                        cands[f"sm90 n{cfg.bn}"] = lambda c=cfg: gemm.run_gemm(spec, x, gw, config=c)  # noqa: B023
            res, errs = {}, {}
            for name, fn in cands.items():
                try:
                    y = fn()
                except (ValueError, RuntimeError) as e:  # a --try / --splits shape this launch refuses
                    print(f"  {K}x{N} M={M} {name}: refused ({str(e)[:160]})", flush=True)
                    continue
                if name.startswith("sm") and isinstance(y, torch.Tensor):  # every dqgen GEMM variant against sm80
                    errs[name] = float((y.float() - y80.float()).norm() / y80.float().norm())
                res[name] = float(tt.do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e3
            flops = 2 * M * K * N
            err_key = "err_cluster_vs_one_cta" if args.cluster else "err_90_vs_80"
            row = {"K": K, "N": N, "M": M, "floor_us": floor_us, err_key: err, "errs": errs, "us": res, "gpu": dev_name}
            rows.append(row)
            best = min(res, key=res.get)  # type: ignore[arg-type]
            print(
                f"{K}x{N} M={M:5d} floor {floor_us:6.1f} | "
                + " | ".join(f"{n} {v:7.1f}" for n, v in res.items())
                + f" | sm90 {flops / res['sm90 gemm'] / 1e6:6.1f} TF/s  err {err:.1e}  best {best}"
                + (f"  cluster/one-CTA {res['sm90 cluster'] / res['sm90 gemm']:.3f}" if args.cluster else ""),
                flush=True,
            )
        print(f"  (packed in {pack_s:.1f} s)", flush=True)
        if args.humming:
            del hum
        if args.torch_int4:
            del tiny
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"spec": args.spec, "gpu": rows[0]["gpu"] if rows else "", "rows": rows}, f, indent=1)


def _schedules(spec: object, x: object, gw: object, M: int, cfg: Any) -> dict[str, object]:
    """name -> launch of the chosen Hopper tile ``cfg`` with each schedule (dqgen.run.gemm90.Plan90) of a partial
    last wave."""
    import torch

    from dqgen.run import device as dev
    from dqgen.run.gemm90 import Plan90, bind90

    tiles = cfg.tiles(M, gw.N)  # type: ignore[attr-defined]
    k_tiles = gw.k_tiles  # type: ignore[attr-defined]
    P = dev.sm_count(0) * cfg.min_blocks
    waves, tail = divmod(tiles, P)
    plans = {"1/tile": Plan90.of(tiles, tiles, k_tiles)}
    if tiles * k_tiles >= P:  # stream-K over every resident CTA, no whole tiles: the same work on every SM
        plans["stream-K all"] = Plan90(tiles, P, k_tiles, 0, P)
    if waves and tail:
        plans["persistent"] = Plan90.of(tiles, P, k_tiles)
        if tail * k_tiles >= P:  # each CTA at least one K tile of the tail (Plan90.check)
            plans["tail over all"] = Plan90(tiles, P, k_tiles, waves * P, P)
        plans.update(
            {f"tail in {s}": Plan90(tiles, P, k_tiles, waves * P, tail * s) for s in (2, 3, 4) if tail * s <= P}
        )
    out = torch.empty(M, gw.N, dtype=torch.float16, device="cuda")  # type: ignore[attr-defined]
    x2 = x  # contiguous [M, K]
    launches = {}
    for name, plan in plans.items():
        fn = bind90(spec, gw, x2.data_ptr(), gw.K, M, None, out, cfg, None, plan)  # type: ignore[arg-type, attr-defined]
        launches[f"sm90 {name}"] = lambda fn=fn: fn(torch.cuda.current_stream().cuda_stream)
    return launches


if __name__ == "__main__":
    main()
