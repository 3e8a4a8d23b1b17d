"""One GPU call for the fused GEMV: its GPU tests, then the speed table (JSON) at the issue's shapes.

Usage on the GPU machine (dqgen on PYTHONPATH): python docs/experiments/matmul_gpu.py OUTDIR [--no-tests] [--quick]
Times: triton.testing.do_bench (L2 flushed before each call, median); the floor is the checkpoint's packed
weights + scales + zeros bytes at the copy bandwidth measured in the same run (a 1 GiB torch copy: read + write).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import triton.testing

from dqgen.check.reference import random_inputs
from dqgen.core.spec import load_spec, with_group_size
from dqgen.run.gpucheck import to_torch
from dqgen.run.runtime import Kernel

SHAPES = [(4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192)]


def bench(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")) * 1e3  # us


_FLUSH: list = []


def bench_clean(fn, n: int = 100) -> float:
    """Median of n calls, each after a READ-only pass over 256 MB: L2 holds no weights and no dirty lines
    (do_bench's zero_() flush leaves up to 50 MB of dirty lines that the timed kernel must write back)."""
    if not _FLUSH:
        _FLUSH.append(torch.ones(1 << 26, dtype=torch.float32, device="cuda"))
    buf = _FLUSH[0]
    times = []
    for _ in range(n):
        buf.sum()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        times.append((a, b))
    torch.cuda.synchronize()
    return float(np.median([a.elapsed_time(b) for a, b in times])) * 1e3


def copy_gbps() -> float:
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = bench(lambda: b.copy_(a))
    return 2 * a.numel() / (t * 1e-6) / 1e9


def rows_for(name: str, shapes, ms, gbps: float, group: int | None, dense: bool) -> list[dict]:
    spec = load_spec(name)
    if group is not None:
        spec = with_group_size(spec, group)
    k = Kernel(spec)
    dt = torch.float16 if spec.target.value == "fp16" else torch.bfloat16
    rows = []
    for K, N in shapes:
        t0 = time.perf_counter()
        q, s, z, gi = random_inputs(spec, K, N, seed=0)
        ck_bytes = sum(a.nbytes for a in (q, s, z) if a is not None)
        w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi))
        pack_s = time.perf_counter() - t0
        floor = ck_bytes / (gbps * 1e3)  # us
        dense_w = torch.randn(K, N, dtype=dt, device="cuda") if dense else None
        for M in ms:
            x = (torch.randn(M, K, device="cuda") / K**0.5).to(dt)
            y = k.matmul(x, w)
            us = bench(lambda x=x, w=w, y=y: k.matmul(x, w, out=y))
            us_clean = bench_clean(lambda x=x, w=w, y=y: k.matmul(x, w, out=y))
            row = {
                "impl": "dqgen",
                "spec": spec.name,
                "dtype": spec.target.value,
                "M": M,
                "K": K,
                "N": N,
                "us": round(us, 2),
                "floor_us": round(floor, 2),
                "pct_floor": round(100 * floor / us, 1),
                "us_clean_flush": round(us_clean, 2),
                "pct_floor_clean": round(100 * floor / us_clean, 1),
                "ckpt_bytes": ck_bytes,
                "prepacked_bytes": w.nbytes,
                "splits": w.splits,
                "pack_s": round(pack_s, 2),
            }
            if dense_w is not None:
                row["cublas_dense_us"] = round(bench(lambda x=x, d=dense_w: torch.matmul(x, d)), 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if "--no-tests" not in sys.argv:
        t0 = time.time()
        p = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/test_gpu_matmul.py"],
            capture_output=True,
            text=True,
        )
        (out / "tests.log").write_text(p.stdout + p.stderr)
        result["tests_rc"] = p.returncode
        result["tests_s"] = round(time.time() - t0, 1)
        print(p.stdout[-3000:], p.stderr[-2000:], flush=True)
    gbps = copy_gbps()
    result["copy_gbps"] = round(gbps, 1)
    print("copy GB/s", gbps, flush=True)
    rows: list[dict] = []
    quick = "--quick" in sys.argv
    shapes = SHAPES[:2] if quick else SHAPES
    rows += rows_for("awq_int4_fp16", shapes, (1, 4, 16), gbps, 128, dense=True)
    if not quick:
        rows += rows_for("awq_int4_bf16", [SHAPES[0], SHAPES[3]], (1, 16), gbps, 128, dense=False)
        for name in ("int8_fp16", "fp8_e4m3_fp16", "nf4_bf16", "mxfp4_bf16", "gptq_int4_fp16"):
            rows += rows_for(name, [SHAPES[3]], (1,), gbps, 128 if name == "gptq_int4_fp16" else None, dense=False)
    result["rows"] = rows
    (out / "matmul_speed.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
