"""Every entry point of the Hopper W8A8 GEMM (dqgen.kernels.w8a8_gemm90: each swap-AB token tile, both channel tiles,
int8 and e4m3, the raw accumulators and the fp16 epilogue) launched on small shapes with tails, one tile a CTA and in
stream-K pieces (both partial slots), for `compute-sanitizer --tool memcheck`, `racecheck` and `synccheck` (TMA
stages recycled through mbarriers, consumers on a named barrier); each int8 output is also checked against the exact
product. Exit 1 when an output is off; exit 0 with a note on a GPU that is not sm_90."""

from __future__ import annotations

import sys


def main() -> int:
    import torch

    from dqgen.kernels.w8a8_gemm90 import all_configs
    from dqgen.w8a8.gemm90 import Plan90, loaded90
    from dqgen.w8a8.matmul_op import _counters

    if torch.cuda.get_device_capability(0) != (9, 0):
        print("not an sm_90 GPU: the Hopper W8A8 GEMM does not run here")
        return 0
    bad = []
    for elem, dtype in (("s8", torch.int8), ("e4m3", torch.float8_e4m3fn)):
        for out in ("acc", "f16"):
            for cfg in all_configs(elem, out):  # type: ignore[arg-type]
                x_rows, w_rows = (cfg.bn, cfg.bm) if cfg.swap else (cfg.bm, cfg.bn)
                m, n, k = x_rows + 3, w_rows + 24, 5 * 128 + 48
                x = torch.randint(-8, 8, (m, k), dtype=torch.int8, device="cuda")
                w = torch.randint(-8, 8, (n, k), dtype=torch.int8, device="cuda")
                xq, wq = (x, w) if elem == "s8" else (x.float().to(dtype), w.float().to(dtype))
                kern = loaded90(cfg, 0)
                auto = kern.plan(m, n, k)
                tiles, k_tiles = auto.tiles, auto.k_tiles
                # one tile each, persistent, stream-K, and whole tiles then a tail tile in 2 pieces (2 x 2 tiles)
                plans = [Plan90.of(tiles, c, k_tiles) for c in (tiles, max(1, tiles // 2), 3 * tiles + 1)]
                for plan in [*plans, Plan90(tiles, tiles - 1, k_tiles, tiles - 1, 2)]:
                    acc_dt = torch.int32 if elem == "s8" else torch.float32
                    y = torch.empty((m, n), dtype=acc_dt if out == "acc" else torch.float16, device="cuda")
                    ws = torch.empty(max(1, kern.workspace_elems(plan)), dtype=acc_dt, device="cuda")
                    ones_m, ones_n = torch.ones(m, device="cuda"), torch.ones(n, device="cuda")
                    cnt = _counters(y.device, tiles)
                    stream = torch.cuda.current_stream().cuda_stream
                    kern(
                        m, n, k, xq.data_ptr(), k, wq.data_ptr(), k, ones_m.data_ptr(), ones_n.data_ptr(), 0,
                        y.data_ptr(), ws.data_ptr(), cnt.data_ptr(), plan, stream=stream,
                    )  # fmt: skip
                    torch.cuda.synchronize()
                    # small codes: the sums are exact in int32 and fp32; the fp16 epilogue (scales 1) rounds once
                    want = x.double() @ w.double().T
                    if out == "f16":
                        want = want.half().double()
                    if not torch.equal(y.double(), want):
                        bad.append(f"{cfg.name} plan={plan}")
    print("\n".join(f"off: {b}" for b in bad) or "every entry point ran and matched the exact product")
    return 1 if bad else 0


if __name__ == "__main__":
    from dqgen.run.gpucheck import exact_allocations

    exact_allocations()
    sys.exit(main())
