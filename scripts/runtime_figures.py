"""Call-overhead and compile-time figures of the runtime (issue 10, items 3 and 4), as JSON on stdout.

    python scripts/runtime_figures.py overhead      # host us per call, L2-flushed call vs prepared launch
    python scripts/runtime_figures.py first-call    # a fresh process: compile() and first-call seconds
    python scripts/runtime_figures.py build SPEC    # `dqgen build SPEC --json` wall seconds and its breakdown

Cold / warm is the caller's choice of DQGEN_CACHE_DIR and NUMBA_CACHE_DIR (empty folders = cold)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time


def overhead() -> dict:
    import torch
    import triton.testing

    import dqgen
    from dqgen.run.inputs import make_inputs

    k = dqgen.compile("awq_int4_fp16")
    res: dict = {"gpu": torch.cuda.get_device_name(0)}
    q, s, z = make_inputs(k.spec, 128, 64, 0)  # tiny: the GPU work is far below the host time
    w = torch.empty((128, 64), dtype=torch.float16, device="cuda")
    launch = k.prepare(q, s, z, out=w)
    a = torch.zeros(64, device="cuda")

    def per_call(fn, n: int = 10_000) -> float:
        """Median host ns of one call; a synchronize every 32 calls (untimed) keeps the launch queue from filling,
        which would make the CPU wait on the GPU and time the GPU instead."""
        for _ in range(200):
            fn()
        ts = []
        for i in range(n):
            if i % 32 == 0:
                torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            fn()
            ts.append(time.perf_counter_ns() - t0)
        torch.cuda.synchronize()
        return statistics.median(ts) / 1e3

    res["host_us_call_out"] = per_call(lambda: k(q, s, z, out=w))
    res["host_us_call_new_out"] = per_call(lambda: k(q, s, z))
    res["host_us_prepared_launch"] = per_call(launch)
    res["host_us_torch_add_out"] = per_call(lambda: torch.add(a, 1.0, out=a))
    qa = make_inputs(load_act(), 4096, 4096, 0)
    gi = torch.randperm(4096, device="cuda").to(torch.int32) // 128
    ka = dqgen.compile("gptq_int4_asym_act_order_fp16")
    wa = torch.empty((4096, 4096), dtype=torch.float16, device="cuda")
    res["host_us_act_order_call_out"] = per_call(lambda: ka(*qa, g_idx=gi, out=wa), 2000)
    for K, N in ((4096, 4096), (4096, 11008)):
        q, s, z = make_inputs(k.spec, K, N, 1)
        w = torch.empty((K, N), dtype=torch.float16, device="cuda")
        launch = k.prepare(q, s, z, out=w)
        call_us = (
            triton.testing.do_bench(
                lambda q=q, s=s, z=z, w=w: k(q, s, z, out=w), warmup=50, rep=300, return_mode="median"
            )
            * 1e3
        )
        prep_us = triton.testing.do_bench(launch, warmup=50, rep=300, return_mode="median") * 1e3
        res[f"l2flushed_us_{K}x{N}"] = {"call": call_us, "prepared": prep_us, "ratio": call_us / prep_us}
    return res


def load_act():
    from dqgen.core.spec import load_spec

    return load_spec("gptq_int4_asym_act_order_fp16")


def first_call() -> dict:
    t0 = time.perf_counter()
    import torch

    torch.zeros(1, device="cuda")
    t1 = time.perf_counter()
    import dqgen
    from dqgen.run.inputs import make_inputs

    t2 = time.perf_counter()
    k = dqgen.compile("awq_int4_fp16")
    t3 = time.perf_counter()
    q, s, z = make_inputs(k.spec, 4096, 4096, 0)
    w = torch.empty((4096, 4096), dtype=torch.float16, device="cuda")
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    k(q, s, z, out=w)
    t5 = time.perf_counter()
    torch.cuda.synchronize()
    return {
        "torch_init_s": t1 - t0,
        "import_dqgen_s": t2 - t1,
        "compile_s": t3 - t2,
        "first_call_s": t5 - t4,
        "compiled": k.compiled,
    }


def build(spec: str) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "dqgen", "build", spec, "--json", "--out", "/tmp/rtfig-gen"],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    rep = json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr[-2000:]}
    return {"wall_s": wall, "ok": rep.get("ok"), "seconds": rep.get("seconds"), "gpu": rep.get("steps", {}).get("gpu")}


if __name__ == "__main__":
    what = sys.argv[1]
    out = overhead() if what == "overhead" else first_call() if what == "first-call" else build(sys.argv[2])
    print(json.dumps(out, indent=1, default=str))
