"""Host time of an eager `dqgen.w8a8.matmul` and `quantize_activations` call (the checks, plan and launch the
caller waits for), beside torch.mul and torch._int_mm on tensors of the same tiny shape, so that GPU time is
negligible: the median of 10^4 calls per implementation on a CPU timer, the GPU synchronized after each batch of 100
(fewer launches than the driver's queue holds, so a kernel longer than the host time does not stall the host).

`python docs/experiments/w8a8_call_overhead.py [OUT.json]`: the rows printed and, with OUT.json, recorded. Only the
public API is called, so the same script times another tree (PYTHONPATH) for a before / after pair."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dqgen.w8a8 import matmul, quantize_activations


def host_us(fn: Callable[[], Any], calls: int = 10_000, batch: int = 100) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(calls // batch):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        per_call.append((time.perf_counter() - t0) / batch * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def main(out: Path | None) -> None:
    m, n, k = 32, 128, 256
    x = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
    xs, ws = torch.rand(m, device="cuda"), torch.rand(n, device="cuda")
    bias = torch.randn(n, device="cuda").half()
    a, b = torch.randn(m, n, device="cuda").half(), torch.randn(m, n, device="cuda").half()
    # a split-K plan (the workspace taken per call): M = 16, N = 512, K = 8192 on an H100
    xk = torch.randint(-128, 128, (16, 8192), dtype=torch.int8, device="cuda")
    wk = torch.randint(-128, 128, (512, 8192), dtype=torch.int8, device="cuda")
    xks, wks = torch.rand(16, device="cuda"), torch.rand(512, device="cuda")
    a1 = torch.randn(1, 4096, device="cuda").half()
    smooth = torch.rand(4096, device="cuda") + 0.5
    rows: dict[str, tuple[str, float]] = {
        "dqgen.w8a8.matmul": (f"M={m} N={n} K={k}", host_us(lambda: matmul(x, xs, w, ws))),
        "dqgen.w8a8.matmul + bias": (f"M={m} N={n} K={k}", host_us(lambda: matmul(x, xs, w, ws, bias))),
        "dqgen.w8a8.matmul split-K": ("M=16 N=512 K=8192", host_us(lambda: matmul(xk, xks, wk, wks))),
        "torch._int_mm": (f"M={m} N={n} K={k}", host_us(lambda: torch._int_mm(x, w.t()))),
        "quantize_activations": (f"M={m} K={n}", host_us(lambda: quantize_activations(a))),
        "quantize_activations M=1": ("M=1 K=4096", host_us(lambda: quantize_activations(a1))),
        "quantize_activations + smooth": ("M=1 K=4096", host_us(lambda: quantize_activations(a1, smooth))),
        "quantize_activations static": ("M=1 K=4096", host_us(lambda: quantize_activations(a1, scale=0.05))),
        "torch.mul": (f"M={m} N={n}", host_us(lambda: torch.mul(a, b))),
    }
    for name, (shape, us) in rows.items():
        print(f"{name:30s} {shape:18s} {us:6.1f} us host time per call (median of batches of 100)")
    if out is not None:
        import dqgen

        record = {
            "device": torch.cuda.get_device_name(),
            "tree": str(Path(dqgen.__file__).parent.parent),
            "method": "host time per call: median over 100 batches of 100 calls (CPU timer), synchronized per batch",
            "rows": [{"impl": name, "shape": shape, "host_us": round(us, 2)} for name, (shape, us) in rows.items()],
        }
        out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
