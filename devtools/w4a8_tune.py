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

    import torch
    from w4a8_bench import graph_us, random_w4a8  # devtools/ (this script's folder, first on sys.path)

    from dqgen.kernels.w4a8_gemm90 import W4A8Tile
    from dqgen.w8a8.w4a8 import w4a8_matmul

    tiles = [W4A8Tile(*parse_tile(tag)) for tag in args.tiles.split(",")]

    rows = []
    for shape in args.shapes.split(","):
        k, n = map(int, shape.split("x"))
        w4 = random_w4a8(k, n)
        for m in map(int, args.ms.split(",")):
            xq = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            xs = torch.rand(m, device="cuda") * 1e-2
            line = [f"{k}x{n} M={m:5d}"]
            for t in tiles:
                us = graph_us(lambda: w4a8_matmul(xq, xs, w4, tile=t))  # noqa: B023
                rows.append({"tile": t.tag, "K": k, "N": n, "M": m, "us": round(us, 2)})
                line.append(f"{t.tag} {us:7.1f}")
            print(" | ".join(line), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
