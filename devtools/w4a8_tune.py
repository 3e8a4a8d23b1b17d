"""Time the Hopper W4A8 GEMM (dqgen.w8a8.w4a8) at each of several CTA shapes (W4A8Tile tags such as n128c2m1s8b1),
one row per (shape, M, tile), to choose dqgen.kernels.w4a8_gemm90's W4A8_TILES and choose_w4a8_tile: each call
captured in a CUDA graph, its replays after an L2 flush, median µs (as devtools/w4a8_bench.py).

    python devtools/w4a8_tune.py --tiles n64c2m1s8b1,n128c2m1s8b1 [--shapes 8192x28672] [--ms 128,256] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import re


def parse_tile(tag: str) -> tuple[int, int, int, int, int]:
    """(bn, consumers, mw, stages, min_blocks) of a tag n{bn}c{consumers}m{mw}s{stages}b{min_blocks}."""
    found = re.fullmatch(r"n(\d+)c(\d+)m(\d+)s(\d+)b(\d+)", tag)
    if found is None:
        raise SystemExit(f"--tiles: expected tags like n128c2m1s8b1, got {tag!r}")
    bn, consumers, mw, stages, blocks = map(int, found.groups())
    return bn, consumers, mw, stages, blocks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", required=True)
    ap.add_argument("--shapes", default="4096x28672,14336x4096,8192x28672,28672x8192")
    ap.add_argument("--ms", default="64,128,256")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import numpy as np
    import torch
    import triton.testing as tt

    from dqgen.core.spec import load_spec
    from dqgen.kernels.w4a8_gemm90 import W4A8Tile
    from dqgen.layout.layout import Layout
    from dqgen.w8a8.w4a8 import pack_w4a8_weight, w4a8_matmul

    tiles = [W4A8Tile(*parse_tile(tag)) for tag in args.tiles.split(",")]

    def bench(fn: object) -> float:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()  # type: ignore[operator]
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()  # type: ignore[operator]
        return float(tt.do_bench(graph.replay, warmup=10, rep=50, return_mode="median")) * 1e3

    rows = []
    spec = load_spec("awq_int4_s8")
    lay = Layout.of(spec)
    for shape in args.shapes.split(","):
        k, n = map(int, shape.split("x"))
        rng = np.random.default_rng(k + n)
        codes = rng.integers(0, 16, (k, n)).astype(np.uint8)
        s16 = (rng.uniform(0.5, 2, (k // 128, n)) * 1e-2).astype(np.float16)
        z = rng.integers(0, 16, (k // 128, n)).astype(np.uint8)
        w4 = pack_w4a8_weight(spec, lay.pack_fields(codes), s16, lay.pack_fields(z, lay.zero_order, "N"), 128)
        for m in map(int, args.ms.split(",")):
            xq = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            xs = torch.rand(m, device="cuda") * 1e-2
            line = [f"{k}x{n} M={m:5d}"]
            for t in tiles:
                us = bench(lambda: w4a8_matmul(xq, xs, w4, tile=t))  # noqa: B023
                rows.append({"tile": t.tag, "K": k, "N": n, "M": m, "us": round(us, 2)})
                line.append(f"{t.tag} {us:7.1f}")
            print(" | ".join(line), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
