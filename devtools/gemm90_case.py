"""One Hopper GEMM case run a few times (for ncu / compute-sanitizer): AWQ int4 g128 fp16 weights of K x N, M tokens.

    ncu --kernel-name regex:gemm90 --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
        python devtools/gemm90_case.py 8192 28672 1
    python devtools/gemm90_case.py 4096 4096 128 --ksplit 4    # the same shape in split-K clusters of 4
"""

from __future__ import annotations

import argparse
from typing import Any

from dqgen.run.gpucheck import exact_allocations


def awq_weight(K: int, N: int) -> tuple[Any, Any]:
    """The awq_int4_fp16 kernel and a random packed weight of K x N (random codes and zeros, scales 0.001-0.011, groups
    of 128) on the GPU: the shape alone matters to a timing or a sanitizer run."""
    import torch

    import dqgen
    from dqgen.run import gemm

    k = dqgen.compile("awq_int4_fp16")
    G = K // 128
    q = torch.randint(-(2**31), 2**31 - 1, (K, N // 8), dtype=torch.int32, device="cuda")
    z = torch.randint(-(2**31), 2**31 - 1, (G, N // 8), dtype=torch.int32, device="cuda")
    s = (torch.rand(G, N, device="cuda") * 0.01 + 0.001).half()
    return k, gemm.pack_gemm(k.spec, q, s, z)


def main() -> None:
    ap = argparse.ArgumentParser(description="one Hopper GEMM case, run 4 times")
    for name in ("K", "N", "M"):
        ap.add_argument(name, type=int)
    ap.add_argument(
        "--config", default="", help="bn:consumers:stages:blocks[:cluster:features] (default: the shape bind90 takes)"
    )
    ap.add_argument("--splits", type=int, default=None, help="split-K pieces a tile (default: bind90's schedule)")
    ap.add_argument("--ksplit", type=int, default=None, help="split-K clusters of this many CTAs (cluster_splits)")
    a = ap.parse_args()
    import torch

    from dqgen.kernels.gemm90 import Gemm90Config
    from dqgen.run import device as dev
    from dqgen.run import gemm
    from dqgen.run.gemm90 import config90_for

    K, N, M = a.K, a.N, a.M
    k, gw = awq_weight(K, N)
    x = (torch.randn(M, K, device="cuda") / K**0.5).half()
    # default: the CTA shape bind90 takes, on the Hopper kernel even where the dispatch would run the sm_80 one
    sms = dev.sm_count(gw.device)
    cfg = Gemm90Config.parse(a.config) if a.config else config90_for(M, N, gw.k_tiles, sms, k.spec)
    for _ in range(4):
        gemm.run_gemm(k.spec, x, gw, config=cfg, splits=a.splits, cluster_splits=a.ksplit)
    torch.cuda.synchronize()


if __name__ == "__main__":
    exact_allocations()  # under compute-sanitizer, each tensor's own end
    main()
