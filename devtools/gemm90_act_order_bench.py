"""Time a GPTQ act-order (desc_act) layer on the Hopper path (the gather of x into slot order, then the Hopper GEMM)
beside the same weight in order (g_idx = arange(K) // group: no gather) on the Hopper GEMM and beside the sm_80
GEMM's gather entry on the act-order weight, L2 flushed before each call (triton.testing.do_bench, median µs); the
gather kernel alone too. Checks the act-order Hopper output against the sm_80 gather entry's (relative error).
``--diagnose`` also times the Hopper GEMM alone on a gathered x' (bound once), the act-order call replayed as a CUDA
graph (no host time), the host time of an eager call (a loop of calls, then one synchronize), and counts the
launches bound (w._bound entries): what tells host time from GPU time in the eager figure.

    python devtools/gemm90_act_order_bench.py [--shape 8192x28672] [--ms 1,16,128] [--out $OUT/act_order.json]
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8192x28672")
    ap.add_argument("--ms", default="1,16,128")
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--out", default="")
    ap.add_argument("--diagnose", action="store_true")
    args = ap.parse_args()

    import torch
    import triton.testing as tt

    from dqgen.core.spec import load_spec
    from dqgen.run import gemm, gemm90
    from dqgen.run.gemm import choose_config

    spec = load_spec("gptq_int4_asym_act_order_fp16")
    K, N = (int(v) for v in args.shape.split("x"))
    G = K // args.group
    gen = torch.Generator(device="cuda").manual_seed(0)
    cuda = torch.device("cuda")
    q = torch.randint(-(2**31), 2**31 - 1, (K // 8, N), dtype=torch.int32, device=cuda, generator=gen)
    s = (torch.rand((G, N), device=cuda, generator=gen) * 0.02 + 0.001).to(torch.float16)
    z = torch.randint(-(2**31), 2**31 - 1, (G, N // 8), dtype=torch.int32, device=cuda, generator=gen)
    in_order = (torch.arange(K, device=cuda) // args.group).to(torch.int32)
    act_order = in_order[torch.randperm(K, device=cuda, generator=gen)].contiguous()  # desc_act: rows shuffled
    w_act = gemm.pack_gemm(spec, q, s, z, g_idx=act_order)
    w_in = gemm.pack_gemm(spec, q, s, z, g_idx=in_order)
    assert w_act.gather and not w_in.gather
    dev_name = torch.cuda.get_device_name(0)
    rows = []
    print(f"{dev_name}: {spec.name} K x N = {K} x {N}, group {args.group}, median us (L2 flushed)")
    print("M | act-order Hopper (gather + GEMM) | gather alone | in-order Hopper | act-order sm_80 gather | rel err")
    for M in (int(m) for m in args.ms.split(",")):
        x = (torch.randn((M, K), device=cuda, generator=gen) * 0.5).to(torch.float16)
        assert not gemm90.hopper_ineligible(w_act, x.data_ptr(), K) and gemm90.hopper_pays(N, w_act.k_tiles, M, 0)
        y_h = gemm.run_gemm(spec, x, w_act)
        y_80 = gemm.run_gemm(spec, x, w_act, config=choose_config(M))
        torch.cuda.synchronize()
        err = float((y_h.double() - y_80.double()).norm() / y_80.double().norm())
        xp = torch.empty(M * w_act.slots, dtype=torch.int16, device=cuda)
        gather = gemm90.bind_gather(w_act, x.data_ptr(), K, M, xp.data_ptr())
        stream = torch.cuda.current_stream().cuda_stream
        t = {
            "act_order_hopper": tt.do_bench(lambda: gemm.run_gemm(spec, x, w_act), return_mode="median"),  # noqa: B023
            "gather": tt.do_bench(lambda: gather(stream), return_mode="median"),  # noqa: B023
            "in_order_hopper": tt.do_bench(lambda: gemm.run_gemm(spec, x, w_in), return_mode="median"),  # noqa: B023
            "act_order_sm80": tt.do_bench(
                lambda: gemm.run_gemm(spec, x, w_act, config=choose_config(M)),  # noqa: B023
                return_mode="median",
            ),
        }
        if args.diagnose:
            import time

            out = torch.empty((M, N), dtype=torch.float16, device=cuda)
            gather(stream)
            gemm_alone = gemm90.bind90(
                spec, w_act, xp.data_ptr(), w_act.slots, M, None, out, None, None, x_cols=w_act.slots
            )
            t["gemm_alone_on_x_prime"] = tt.do_bench(lambda: gemm_alone(stream), return_mode="median")  # noqa: B023
            static_out = torch.empty((M, N), dtype=torch.float16, device=cuda)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                gemm.run_gemm(spec, x, w_act, out=static_out)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                gemm.run_gemm(spec, x, w_act, out=static_out)
            t["act_order_graph_replay"] = tt.do_bench(g.replay, return_mode="median")
            for name, wt in (("act_order", w_act), ("in_order", w_in)):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    gemm.run_gemm(spec, x, wt)
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t[f"host_{name}_per_call"] = (t1 - t0) / 200 * 1000  # ms, like do_bench's figures
            gathered = sum(isinstance(v, gemm90.GatheredLaunch) for v in w_act._bound.values())
            print(f"  bound: {len(w_act._bound)} launches of the act-order weight ({gathered} gathered)")
        us = {k: round(v * 1000, 1) for k, v in t.items()}
        if args.diagnose:
            print("  " + ", ".join(f"{k} {v}" for k, v in us.items()))
        print(
            f"{M} | {us['act_order_hopper']} | {us['gather']} | {us['in_order_hopper']} | {us['act_order_sm80']} | "
            f"{err:.2e}"
        )
        rows.append({"gpu": dev_name, "K": K, "N": N, "M": M, "rel_err_vs_sm80": err, **us})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
