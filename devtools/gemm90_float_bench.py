"""Time the float-code specs on the Hopper GEMM (issue 23's float specs) against their path before it (the GEMV at
every M: Kernel.matmul on a weight packed without the GEMM's layout), cuBLAS on the dense dequantized weight, and the
AWQ int4 spec on the same kernel; one GPU, L2 flushed before each call (triton.testing.do_bench, median, µs).
Random codes and scales (a speed run: NaN codes may appear, the time does not depend on them); NVFP4's global scale
1.0. For the specs the Hopper GEMM alone takes, ``hopper`` is that GEMM at every M (run_gemm on the weight packed
beside, also below the dispatch rule's M). Writes JSON (--out).

    python devtools/gemm90_float_bench.py --out $OUT/float.json [--specs fp8_e4m3_fp16,nvfp4_fp16] [--ms 1,16,128]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dqgen.core.spec import Spec


def _checkpoint(torch: Any, spec: Spec, K: int, N: int) -> tuple[Any, Any, Any, Any]:
    """Random qweight, scales (16-bit in [0.001, 0.011], or one-byte block-scale codes 119..128), packed zeros and
    the global scale (1.0; None without one) of ``spec``."""
    per_word = 32 // spec.source.bits
    shape = (K // per_word, N) if spec.packing.axis == "K" else (K, N // per_word)
    q = torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32, device="cuda")
    gs = spec.scales.group_size
    G = 1 if gs == -1 else K // (128 if gs == "auto" else gs)
    if spec.scales.block:
        s = torch.randint(119, 129, (G, N), dtype=torch.uint8, device="cuda")
    else:
        dtype = torch.bfloat16 if spec.target.value == "bf16" else torch.float16
        s = (torch.rand(G, N, device="cuda") * 0.01 + 0.001).to(dtype)
    z = None
    if spec.zeros.packed:
        z = torch.randint(-(2**31), 2**31 - 1, (G, N // per_word), dtype=torch.int32, device="cuda")
    g = torch.ones(1, dtype=torch.float32, device="cuda") if spec.scales.global_scale else None
    return q, s, z, g


def _bench_spec(torch: Any, do_bench: Any, k: Any, K: int, N: int, ms: list[int], gpu: str) -> list[dict[str, Any]]:
    """The rows of one spec: each M, each path (its weights freed on return)."""
    from dqgen.run import dispatch, gemm

    spec = k.spec
    q, s, z, g = _checkpoint(torch, spec, K, N)
    w = k.pack_matmul(q, s, z, global_scale=g)  # the GEMM's layout beside: the dispatch (the H100 rule's gemm_min_m)
    w_gemv = k.pack_matmul(q, s, z, global_scale=g, gemm=False)  # the GEMV alone: the float specs' path before
    dense = k(q, s, z, global_scale=g)  # the dequantized weight, for cuBLAS
    gw = dispatch.beside(w)
    assert gw is not None
    rows = []
    for M in ms:
        x = (torch.randn(M, K, device="cuda") / K**0.5).to(dense.dtype)
        paths = {"dispatch": lambda: k.matmul(x, w), "cublas_dense": lambda: x @ dense}  # noqa: B023
        if k.target.hopper_only:
            paths["gemv_before"] = lambda: k.matmul(x, w_gemv)  # noqa: B023
            paths["hopper"] = lambda: gemm.run_gemm(spec, x, gw)  # noqa: B023
        res = {}
        for path, fn in paths.items():
            fn()
            torch.cuda.synchronize()
            res[path] = float(do_bench(fn, warmup=10, rep=40, return_mode="median")) * 1e3
            rows.append({"gpu": gpu, "spec": spec.name, "K": K, "N": N, "M": M, "path": path, "us": res[path]})
        print(f"{gpu} {spec.name} {K}x{N} M={M}: " + ", ".join(f"{p} {v:.1f} us" for p, v in res.items()), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--specs", default="fp8_e4m3_fp16,fp4_e2m1_bf16,mxfp4_bf16,awq_int4_fp16")
    ap.add_argument("--shape", default="8192x28672")
    ap.add_argument("--ms", default="16,128,1024")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import torch
    import triton.testing as tt

    import dqgen

    K, N = (int(v) for v in args.shape.split("x"))
    gpu = torch.cuda.get_device_name(0)
    rows: list[dict[str, Any]] = []
    torch.manual_seed(0)
    for name in args.specs.split(","):
        rows += _bench_spec(torch, tt.do_bench, dqgen.compile(name), K, N, [int(v) for v in args.ms.split(",")], gpu)
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
