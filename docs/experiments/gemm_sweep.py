"""Time the tensor-core GEMM's tile configs and split counts side by side on this GPU (tuning choose_config and
choose_gemm_splits): for each shape and M, every candidate tile with the automatic split count, the automatic tile
with forced split counts, and cuBLAS on the dense weight; one call after an L2 flush, median
(dqgen.run.timing.single_call_us). Every output is checked against float64 x @ W first.

    python docs/experiments/gemm_sweep.py [--spec awq_int4_fp16] [--json out.json] [--shapes 4096x6144,...] [--ms 16,64]
"""

from __future__ import annotations

import argparse
import json
import sys

MS = (16, 32, 64, 128, 256, 512, 1024, 4096)
SHAPES = ((4096, 6144), (4096, 28672), (14336, 4096), (8192, 28672), (28672, 8192))


def main() -> int:
    import torch

    from dqgen.core.formats import torch_dtype
    from dqgen.core.spec import load_spec
    from dqgen.kernels.gemm import CONFIGS, GemmConfig
    from dqgen.layout.gemm import TILE_N
    from dqgen.run import dispatch, gemm
    from dqgen.run.inputs import make_g_idx, make_inputs
    from dqgen.run.runtime import Kernel
    from dqgen.run.timing import single_call_us

    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="awq_int4_fp16")
    ap.add_argument("--json", default=None)
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES))
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--extra", default="", help="more tiles, bm:wm:wn:stages:min_blocks,...")
    ap.add_argument("--splits", default="1,2,4,8")
    a = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    ms = [int(m) for m in a.ms.split(",")]
    extra = [GemmConfig(*(int(v) for v in e.split(":"))) for e in a.extra.split(",") if e]
    forced = [int(s) for s in a.splits.split(",") if s]
    spec = load_spec(a.spec)
    k = Kernel(spec)
    dt = torch_dtype(spec.target_type, torch)
    tol = 2e-3 if spec.target.value == "fp16" else 1e-2
    rows, bad = [], []
    for K, N in shapes:
        q, s, z = make_inputs(spec, K, N, 0)
        gi = make_g_idx(spec, K, 0)
        W = k(q, s, z, g_idx=gi)
        W64 = W.double()
        mw = k.pack_matmul(q, s, z, g_idx=gi)
        gw = dispatch.beside(mw)
        assert gw is not None
        for M in ms:
            x = torch.randn((M, K), dtype=dt, device="cuda")
            ref = x.double() @ W64
            auto = gemm.choose_config(M)
            variants: list[tuple[str, GemmConfig | None, int | None]] = [("auto", None, None)]
            for cfg in (*CONFIGS, *extra):
                if cfg != auto and cfg.bm <= max(64, 4 * M) and (cfg.bm >= 64 or 4 * cfg.bm >= M):
                    variants.append((f"{cfg.tag}", cfg, None))
            m_tiles = -(-M // auto.bm)
            for sp in forced:
                if m_tiles * (-(-N // TILE_N)) * sp <= 8 * 132 * 6:
                    variants.append((f"{auto.tag} splits={sp}", auto, sp))
            for name, cfg, sp in variants:

                def fn(x=x, cfg=cfg, sp=sp, gw=gw):
                    return gemm.run_gemm(k.spec, x, gw, config=cfg, splits=sp)

                y = fn()
                err = float((y.double() - ref).norm() / ref.norm())
                if not err <= tol:
                    bad.append((K, N, M, name, err))
                us = single_call_us(fn)
                rows.append({"impl": "gemm", "variant": name, "M": M, "K": K, "N": N, "us": us, "rel_err": err})
            us = single_call_us(lambda x=x, W=W: torch.matmul(x, W))
            rows.append({"impl": "cublas dense", "variant": "", "M": M, "K": K, "N": N, "us": us, "rel_err": 0.0})
            line = " ".join(f"{r['variant']}={r['us']:.1f}" for r in rows if (r["K"], r["N"], r["M"]) == (K, N, M))
            print(f"{K}x{N} M={M}: {line}", flush=True)
        del W, W64, mw, gw
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "spec": spec.name, "rows": rows}, f, indent=1)
    if bad:
        print(f"FAILED: {len(bad)} outputs off the reference: {bad[:5]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
