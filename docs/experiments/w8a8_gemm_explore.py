"""Time W8A8 GEMM configurations side by side on one GPU (issue 15 item 5 speed work): the current template's
configurations (tile shapes, warps, stages, stage depth in K, tile order, forced split plans), the previous
template's sources rendered beforehand (``OLD_DIR/manifest.json``: label -> config fields and source file), and
torch's _int_mm / _scaled_mm / fp16 GEMMs, each checked against the exact reference before it is timed.

    python docs/experiments/w8a8_gemm_explore.py OUT.json [OLD_DIR]

Times: one call after an L2 flush, median (dqgen.run.timing.single_call_us, shorter budgets than the bench)."""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from dqgen.emit.nvrtc import compile_source
from dqgen.kernels.w8a8_gemm import W8A8GemmConfig, choose_splits, choose_w8a8_gemm, ktiles, render_w8a8_gemm
from dqgen.run import device as dev
from dqgen.run.timing import single_call_us
from dqgen.w8a8.gemm import launch_args
from dqgen.w8a8.gemm_bench import KN, _epilogue_torch
from dqgen.w8a8.matmul_op import quantize_activations_fp8, quantize_weight

WARMUP_MS, REP_MS = 5.0, 25.0
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "explore.json")
OLD_DIR = Path(sys.argv[2]) if len(sys.argv) > 2 else None
ROWS: list[dict[str, Any]] = []
SMS, SHARED = dev.sm_count(0), dev.max_shared_optin(0)
T0 = time.time()


class Variant:
    def __init__(self, cfg: W8A8GemmConfig, src: str | None = None) -> None:
        self.cfg = cfg
        res = compile_source(src or render_w8a8_gemm(cfg), arch=dev.device_arch(0), want="cubin", name="w8a8_gemm.cu")
        self.kern = dev.LoadedKernel(res.cubin, cfg.name, 0)
        if cfg.shared_bytes > 48 * 1024:
            self.kern.set_max_dynamic_shared(cfg.shared_bytes)
        self.per_sm = self.kern.max_active_blocks(cfg.threads, cfg.shared_bytes)
        self.resident = max(1, self.per_sm) * dev.sm_count(0)

    def plan(self, m: int, n: int, k: int, splits: int | None = None) -> tuple[int, int, int]:
        rows, cols = (n, m) if self.cfg.swap else (m, n)
        tiles = -(-rows // self.cfg.bm) * -(-cols // self.cfg.bn)
        if splits is None:
            s, per = choose_splits(tiles, k, self.resident, self.cfg.bk)
        else:
            kt = ktiles(k, self.cfg.bk)
            per = -(-kt // splits)
            s = -(-kt // per)
        return tiles, s, per

    def runner(self, x: Any, xs: Any, w: Any, ws: Any, y: Any, plan: tuple[int, int, int]) -> Any:
        tiles, splits, _ = plan
        m, k = x.shape
        n = w.shape[0]
        accs = self.cfg.accs * self.cfg.threads
        wsb = torch.empty(max(1, tiles * splits * accs if splits > 1 else 1), dtype=torch.int32, device="cuda")
        cnt = torch.zeros(max(tiles, 1), dtype=torch.int32, device="cuda")
        args = launch_args(
            self.cfg, m, n, k, x.data_ptr(), k, w.data_ptr(), k, xs.data_ptr(), ws.data_ptr(), 0,
            y.data_ptr(), wsb.data_ptr(), cnt.data_ptr(), plan,
        )  # fmt: skip
        shared = self.cfg.shared_bytes

        def go() -> None:
            stream = torch.cuda.current_stream().cuda_stream
            self.kern((tiles, splits), (self.cfg.threads,), args, stream=stream, shared_mem=shared)

        go.keep = (wsb, cnt)  # type: ignore[attr-defined]
        return go


def record(impl: str, m: int, k: int, n: int, fn: Any, ok: Any, **extra: Any) -> None:
    try:
        us = single_call_us(fn, WARMUP_MS, REP_MS)
    except Exception as e:  # a torch kernel refusing a shape
        print(f"{impl:44s} M={m:5d} {k}x{n}: n/a {str(e).splitlines()[0][:60]}", flush=True)
        return
    floor = n * k / 2967e3
    ROWS.append({"impl": impl, "M": m, "K": k, "N": n, "us": round(us, 2), "pct_floor": round(100 * floor / us, 1),
                 "ok": ok, **extra})  # fmt: skip
    print(f"{impl:44s} M={m:5d} {k:5d}x{n:5d} {us:9.2f} us {100 * floor / us:6.1f}%  ok={ok} {extra}", flush=True)


_CACHE: dict[Any, Variant] = {}


def variant(cfg: W8A8GemmConfig, src: str | None = None) -> Variant:
    key = (cfg, src is not None)
    if key not in _CACHE:
        _CACHE[key] = Variant(cfg, src)
    return _CACHE[key]


OLD: dict[str, tuple[W8A8GemmConfig, str]] = {}
if OLD_DIR is not None and (OLD_DIR / "manifest.json").exists():
    for label, (fields, fname) in json.loads((OLD_DIR / "manifest.json").read_text()).items():
        OLD[label] = (W8A8GemmConfig(*fields), (OLD_DIR / fname).read_text())


def C(*a: Any, **kw: Any) -> W8A8GemmConfig:
    return W8A8GemmConfig("s8", "f16", *a, **kw)


SMALL = {
    "B swap16 s3 k256": C(True, 128, 16, 4, 1, 3, 256),
    "A swap16 s4": C(True, 128, 16, 4, 1, 4),
    "B4 swap16 s4 k256": C(True, 128, 16, 4, 1, 4, 256),
    "B512 swap16 s2 k512": C(True, 128, 16, 4, 1, 2, 512),
    "Bw8 swap16 w8x1 s3 k256": C(True, 128, 16, 8, 1, 3, 256),
}
MID = {
    "E swap64 w4x2 s4": C(True, 128, 64, 4, 2, 4),
    "Cc swap32 s4": C(True, 128, 32, 4, 1, 4),
    "E3 swap64 w4x2 s3 k256": C(True, 128, 64, 4, 2, 3, 256),
    "E2 swap64 w4x2 s2 k256": C(True, 128, 64, 4, 2, 2, 256),
    "Cc3 swap32 s3 k256": C(True, 128, 32, 4, 1, 3, 256),
}
LARGE = {
    "Ta 128x128 w2x4 s3": C(False, 128, 128, 2, 4, 3),
    "Td 128x256 w2x4 s4": C(False, 128, 256, 2, 4, 4),
    "Tk 128x256 w2x4 s2 k256": C(False, 128, 256, 2, 4, 2, 256),
    "Tl 256x128 w4x2 s2 k256": C(False, 256, 128, 4, 2, 2, 256),
}


def old_for(m: int) -> tuple[W8A8GemmConfig, str] | None:
    label = "swap16" if m <= 16 else "swap32" if m <= 32 else "swap64" if m <= 64 else "tiles"
    return OLD.get(f"s8 {label}")


def _int_mm_scaled(x: Any, wt: Any, xs: Any, ws: Any) -> Any:
    return _epilogue_torch(torch._int_mm(x, wt), xs, ws, torch.float16)


def bench_int8(k: int, n: int, ms: tuple[int, ...]) -> None:
    g = torch.Generator(device="cuda").manual_seed(k + n)
    w16 = (torch.randn(n, k, device="cuda", generator=g) * 0.02).half()
    w, ws = quantize_weight(w16, "int8")
    wt = w.t()
    for m in ms:
        x16 = torch.randn(m, k, device="cuda", generator=g).half()
        x = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8, generator=g)
        xs = x16.float().abs().amax(1) / 127
        acc = torch.empty((m, n), dtype=torch.int64, device="cuda")
        wd = w.double()
        for r0 in range(0, m, 512):
            acc[r0 : r0 + 512] = (x[r0 : r0 + 512].double() @ wd.T).to(torch.int64)
        want = _epilogue_torch(acc, xs, ws, torch.float16)
        del acc
        todo: list[tuple[str, W8A8GemmConfig, str | None, int | None]] = []
        old = old_for(m)
        if old is not None:
            todo.append(("old " + old[0].name, old[0], old[1], None))
        table = SMALL if m <= 16 else MID if m <= 64 else LARGE
        todo.append(
            (
                "chosen " + choose_w8a8_gemm("s8", "f16", m, n, k, SMS, SHARED).name,
                choose_w8a8_gemm("s8", "f16", m, n, k, SMS, SHARED),
                None,
                None,
            )
        )
        for label, cfg in table.items():
            todo.append((label, cfg, None, None))
        if m <= 64:  # forced split plans around the default of the first new config
            first = next(iter(table.values()))
            base = variant(first).plan(m, n, k)[1]
            for s in sorted({1, 2, max(1, base // 2), base * 2, base + base // 2, 16} - {base}):
                todo.append((f"{next(iter(table))} splits={s}", first, None, s))
        for label, cfg, src, forced in todo:
            v = variant(cfg, src)
            plan = v.plan(m, n, k, forced)
            if forced is not None and plan[2] < 2:
                continue
            y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
            go = v.runner(x, xs, w, ws, y, plan)
            go()
            torch.cuda.synchronize()
            ok = bool(torch.equal(y, want))
            record(label, m, k, n, go, ok, splits=plan[1], tiles=plan[0], per_sm=v.per_sm)
        if m > 16:
            record("torch._int_mm", m, k, n, functools.partial(torch._int_mm, x, wt), None)
            record("torch._int_mm + scaling", m, k, n, functools.partial(_int_mm_scaled, x, wt, xs, ws), None)
        record("cuBLAS fp16 (dense W)", m, k, n, functools.partial(torch.matmul, x16, w16.T), None)
        torch.cuda.empty_cache()


def bench_fp8(k: int, n: int, ms: tuple[int, ...]) -> None:
    g = torch.Generator(device="cuda").manual_seed(k + n + 1)
    w16 = (torch.randn(n, k, device="cuda", generator=g) * 0.02).half()
    w8, ws8 = quantize_weight(w16, "fp8")
    w8t = w8.t()
    for m in ms:
        x8, xs8 = quantize_activations_fp8(torch.randn(m, k, device="cuda", generator=g).half())
        y64 = (x8.double() @ w8.double().T) * xs8.double()[:, None] * ws8.double()[None, :]
        swap = m <= 64
        chosen = choose_w8a8_gemm("e4m3", "bf16", m, n, k, SMS, SHARED)
        cfgs = {"fp8 chosen " + chosen.name: chosen}
        if not swap:
            cfgs["fp8 128x256 s4"] = W8A8GemmConfig("e4m3", "bf16", False, 128, 256, 2, 4, 4)
            cfgs["fp8 128x128 w2x2 s3"] = W8A8GemmConfig("e4m3", "bf16", False, 128, 128, 2, 2, 3)
            cfgs["fp8 128x128 w2x4 s3"] = W8A8GemmConfig("e4m3", "bf16", False, 128, 128, 2, 4, 3)
        todo = [(label, cfg, None) for label, cfg in cfgs.items()]
        old = OLD.get("e4m3 " + ("swap16" if m <= 16 else "swap64" if swap else "tiles"))
        if old is not None:
            todo.insert(0, ("fp8 old (ptxas converts)", old[0], old[1]))
        for label, cfg, src in todo:
            v = variant(cfg, src)
            plan = v.plan(m, n, k)
            y = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            go = v.runner(x8, xs8, w8, ws8, y, plan)
            go()
            torch.cuda.synchronize()
            ok = bool(((y.double() - y64).abs().max() <= 2e-3 * y64.abs().max() + 2**-9 * y64.abs().max()).item())
            record(label, m, k, n, go, ok, splits=plan[1], per_sm=v.per_sm)
        scaled = functools.partial(
            torch._scaled_mm, x8, w8t, scale_a=xs8[:, None], scale_b=ws8[None, :], out_dtype=torch.bfloat16
        )
        record("torch._scaled_mm fp8 rowwise", m, k, n, scaled, None)
        torch.cuda.empty_cache()


def save() -> None:
    OUT.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": ROWS}, indent=1) + "\n")


if __name__ == "__main__":
    torch.zeros(1, device="cuda")
    for k, n in KN:
        bench_int8(k, n, (1, 16, 64, 256, 1024, 4096))
        save()
        print(f"== {k}x{n} done at {time.time() - T0:.0f} s", flush=True)
    for k, n in ((8192, 28672), (4096, 6144)):
        bench_fp8(k, n, (1, 64, 256, 4096))
        save()
    print(f"== all done at {time.time() - T0:.0f} s", flush=True)
