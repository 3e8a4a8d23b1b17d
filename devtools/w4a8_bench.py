"""Time the Hopper W4A8 GEMM (dqgen.w8a8.w4a8) beside dqgen's W4A16 (QuantLinear, awq_int4_fp16 g128) and int8
W8A8 GEMMs, torch._int_mm and cuBLAS fp16 on dense weights, on one GPU: each call captured in a CUDA graph, its
replays after an L2 flush, median µs (triton.testing.do_bench). The floor: the int4 weights (N x K / 2 bytes) read
once at the measured copy bandwidth.

    python devtools/w4a8_bench.py [--out FILE.json] [--shapes 8192x28672,28672x8192] [--ms 1,16,128,1024]
"""

from __future__ import annotations

import argparse
import json


def graph_us(fn: object) -> float:
    """The call captured in a CUDA graph and its replays timed after an L2 flush, median µs (what servers run: no
    host time in it)."""
    import torch
    import triton.testing as tt

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # type: ignore[operator]
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()  # type: ignore[operator]
    return float(tt.do_bench(graph.replay, warmup=10, rep=50, return_mode="median")) * 1e3


def random_w4a8(k: int, n: int) -> object:
    """An AWQ-style int4 g128 weight with zero points, random codes, scales and zeros (seeded by the shape), packed
    for the W4A8 GEMM."""
    import numpy as np

    from dqgen.core.spec import load_spec
    from dqgen.layout.layout import Layout
    from dqgen.w8a8.w4a8 import pack_w4a8_weight

    spec = load_spec("awq_int4_s8")
    lay = Layout.of(spec)
    rng = np.random.default_rng(k + n)
    codes = rng.integers(0, 16, (k, n)).astype(np.uint8)
    s16 = (rng.uniform(0.5, 2, (k // 128, n)) * 1e-2).astype(np.float16)
    z = rng.integers(0, 16, (k // 128, n)).astype(np.uint8)
    return pack_w4a8_weight(spec, lay.pack_fields(codes), s16, lay.pack_fields(z, lay.zero_order, "N"), 128)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8192x28672,28672x8192,4096x14336")
    ap.add_argument("--ms", default="1,16,64,128,256,1024")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import torch

    from dqgen.nn import QuantLinear
    from dqgen.tools.bench import copy_bandwidth
    from dqgen.w8a8 import matmul, quantize_weight
    from dqgen.w8a8.w4a8 import w4a8_matmul

    copy = copy_bandwidth()
    rows = []
    for shape in args.shapes.split(","):
        k, n = map(int, shape.split("x"))
        w4 = random_w4a8(k, n)
        dense = torch.nn.Linear(k, n, bias=False, dtype=torch.float16, device="cuda")
        q16 = QuantLinear.from_linear(dense, "awq_int4_fp16", group_size=128)
        w8, ws8 = quantize_weight(dense.weight, "int8")
        floor = n * k / 2 / (copy * 1e3)
        for m in map(int, args.ms.split(",")):
            x16 = torch.randn(m, k, device="cuda", dtype=torch.float16)
            xq = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            xs = torch.rand(m, device="cuda") * 1e-2
            impls = {
                "dqgen w4a8": lambda: w4a8_matmul(xq, xs, w4),  # noqa: B023
                "dqgen w4a16": lambda: q16(x16),  # noqa: B023
                "dqgen int8": lambda: matmul(xq, xs, w8, ws8),  # noqa: B023
                "cuBLAS fp16 (dense W)": lambda: dense(x16),  # noqa: B023
            }
            if m > 16:
                impls["torch._int_mm"] = lambda: torch._int_mm(xq, w8.t())  # noqa: B023
            line = [f"{k}x{n} M={m:5d} floor {floor:6.1f}"]
            for name, fn in impls.items():
                us = graph_us(fn)
                rows.append({"impl": name, "K": k, "N": n, "M": m, "us": round(us, 2), "floor_us": round(floor, 2)})
                line.append(f"{name} {us:8.1f}")
            print(" | ".join(line), flush=True)
    if args.out:
        doc = {"gpu": torch.cuda.get_device_name(), "copy_GBps": round(copy, 1), "rows": rows}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
