"""Host time of an eager `dqgen.w8a8.matmul` and `quantize_activations` call (the checks, plan and launch the
caller waits for), beside torch.mul and torch._int_mm on tensors of the same tiny shape, so that GPU time is
negligible: the median of 10^4 calls per implementation on a CPU timer, the GPU synchronized after each batch of 100."""

from __future__ import annotations

import statistics
import time

import torch

from dqgen.w8a8 import matmul, quantize_activations


def host_us(fn, calls: int = 10_000, batch: int = 100) -> float:
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


def main() -> None:
    m, n, k = 32, 128, 256
    x = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
    xs, ws = torch.rand(m, device="cuda"), torch.rand(n, device="cuda")
    a, b = torch.randn(m, n, device="cuda").half(), torch.randn(m, n, device="cuda").half()
    rows = {
        "dqgen.w8a8.matmul": host_us(lambda: matmul(x, xs, w, ws)),
        "torch._int_mm": host_us(lambda: torch._int_mm(x, w.t())),
        "quantize_activations": host_us(lambda: quantize_activations(a)),
        "torch.mul": host_us(lambda: torch.mul(a, b)),
    }
    for name, us in rows.items():
        print(f"{name:20s} {us:6.1f} us host time per call (M={m}, N={n}, K={k}; median of batches of 100)")


if __name__ == "__main__":
    main()
