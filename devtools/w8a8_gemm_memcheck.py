"""Launch the W8A8 GEMM (both tile shapes, split and unsplit, tails, bias, fp8 where the GPU has it) on exactly
sized driver-API buffers, without torch, for `compute-sanitizer --tool memcheck` / `racecheck`; checks every
result against the references too (raw accumulators bit-exact, the fp16 epilogue bit-exact). Each case launches
twice, into a new y: through GemmKernel's call and through the launch the matmul's signature cache binds."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from dqgen.kernels.w8a8_gemm import W8A8GemmConfig, choose_w8a8_gemm
from dqgen.run import device as dev
from dqgen.w8a8 import gemm_reference as ref
from dqgen.w8a8.gemm import GemmKernel, launch_args

rng = np.random.default_rng(0)
major_minor = int(dev.device_arch(0)[3:].rstrip("af"))
SMS, SHARED = dev.sm_count(0), dev.max_shared_optin(0)
# (m, n, k, elem, out, forced splits or 0 for the default plan): the configuration choose_w8a8_gemm() picks on this GPU
CASES: list[tuple[int, int, int, str, str, int]] = [
    (5, 300, 1040, "s8", "acc", 0),
    (5, 300, 4112, "s8", "acc", 3),
    (40, 129, 272, "s8", "f16", 0),
    (50, 8000, 1040, "s8", "f16", 0),  # more channel strips: 64-token tiles
    (130, 257, 2064, "s8", "acc", 0),
    (130, 257, 2064, "s8", "bf16", 4),
]
# the 128 x 256 tiles, wherever the device fits them (shape-independent: forced)
EXTRA: list[tuple[int, int, int, str, str, int, W8A8GemmConfig]] = []
if SHARED >= 192 * 1024:
    EXTRA += [
        (130, 300, 2064, "s8", "f16", 3, W8A8GemmConfig("s8", "f16", False, 128, 256, 2, 4, 4)),
        (300, 520, 528, "s8", "acc", 0, W8A8GemmConfig("s8", "acc", False, 128, 256, 2, 4, 4)),
    ]
if major_minor >= 89:
    CASES += [(9, 200, 1024, "e4m3", "acc", 2), (100, 130, 512, "e4m3", "f16", 0)]
    if SHARED >= 192 * 1024:
        EXTRA.append((130, 300, 1040, "e4m3", "bf16", 2, W8A8GemmConfig("e4m3", "bf16", False, 128, 256, 2, 4, 3)))


def _buf(a: np.ndarray) -> dev.DeviceBuffer:
    return dev.DeviceBuffer.from_host(np.ascontiguousarray(a))


ALL = [(*case, choose_w8a8_gemm(case[3], case[4], case[0], case[1], case[2], SMS, SHARED)) for case in CASES] + EXTRA  # type: ignore[arg-type]
for m, n, k, elem, out, forced, cfg in ALL:
    kern = GemmKernel(cfg)
    if elem == "s8":
        x = rng.integers(-128, 128, (m, k)).astype(np.int8)
        w = rng.integers(-128, 128, (n, k)).astype(np.int8)
        acc = ref.int_product(x, w)
    else:
        x = (rng.standard_normal((m, k)) * 8).astype(ml_dtypes.float8_e4m3fn)
        w = (rng.standard_normal((n, k)) * 8).astype(ml_dtypes.float8_e4m3fn)
        acc = ref.fp8_product(x, w)
    xs = (rng.uniform(1e-4, 1e-3, m)).astype(np.float32)
    ws = (rng.uniform(1e-4, 1e-3, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float16 if out == "f16" else ml_dtypes.bfloat16) if out != "acc" else None
    tiles, splits, per = kern.plan(m, n, k)
    if forced:
        kt = -(-k // cfg.bk)
        per = -(-kt // forced)
        splits = -(-kt // per)
    y_item = 4 if out == "acc" else 2
    bx, bw, bxs, bws = _buf(x.view(np.int8)), _buf(w.view(np.int8)), _buf(xs), _buf(ws)
    bb = _buf(bias.view(np.int16)) if bias is not None else None
    bws_ = dev.DeviceBuffer(4 * kern.workspace_elems((tiles, splits, per)))
    bc = _buf(np.zeros(tiles, np.uint32))
    for via in ("call", "bound"):
        by = dev.DeviceBuffer(m * n * y_item)  # new and unwritten: a launch that writes nothing fails the check
        ptrs = (bx.ptr, k, bw.ptr, k, bxs.ptr, bws.ptr, 0 if bb is None else bb.ptr, by.ptr, bws_.ptr, bc.ptr)
        if via == "call":
            kern(m, n, k, *ptrs, (tiles, splits, per), stream=0)
        else:
            kern.bind((tiles, splits, per), launch_args(cfg, m, n, k, *ptrs, (tiles, splits, per)))(0)
        dev.synchronize()
        if out == "acc":
            got = dev.to_host(by.as_array((m, n), np.int32 if elem == "s8" else np.float32))
            ok = (got == acc).all() if elem == "s8" else np.allclose(got, acc, rtol=0, atol=2e-3 * np.abs(acc).max())
        else:
            got = dev.to_host(by.as_array((m, n), np.int16))
            want = ref.epilogue(acc.astype(np.float32) if elem == "e4m3" else acc, xs, ws, bias, out)
            if elem == "s8":
                ok = bool((got == want.view(np.int16)).all())
            else:  # fp8: within 2e-3 of the largest |y| (the GPU test's tolerance), plus a bf16 step in bf16
                y, y_want = got.view(ref.out_dtype(out)).astype(np.float64), want.astype(np.float64)
                slack = 2e-3 + (2.0**-8 if out == "bf16" else 0.0)
                ok = bool((np.abs(y - y_want) <= slack * np.abs(y_want).max()).all())
        counters_back = dev.to_host(bc.as_array((tiles,), np.uint32))
        assert ok and (counters_back == 0).all(), (m, n, k, elem, out, forced)
        print(f"memcheck launch ({via}) {kern.cfg.name} m={m} n={n} k={k} splits={splits}: correct, counters reset")
