"""Launch the activation-quantization kernel (aligned and general variants) on exactly sized driver-API buffers,
without torch, for `compute-sanitizer --tool memcheck`; checks the results against the reference too. Each case
launches twice, into new outputs: through ActQuantKernel's call and through the launch quantize_activations'
signature cache binds (ActQuantKernel.bind)."""

from __future__ import annotations

import numpy as np

from dqgen.kernels.act_quant import ActQuantConfig
from dqgen.run import device as dev
from dqgen.w8a8 import reference
from dqgen.w8a8.kernel import ActQuantKernel

rng = np.random.default_rng(0)
CASES = (
    (4096, True, False, "raw", "smem"),
    (4096, True, False, "f32", "regs"),
    (4099, False, False, "raw", "rcp"),
    (40000, True, False, "raw", "rcp"),
    (14336, True, True, "raw", "smem"),
    (4099, False, True, "f32", "rcp"),
)
for k, aligned, static, hold, smooth_in in CASES:
    rows = 7
    x = (rng.standard_normal((rows, k)) * 5).astype(np.float16)
    s = rng.uniform(0.5, 2, k).astype(np.float32)
    scale = 0.02 if static else None
    kern = ActQuantKernel(ActQuantConfig("fp16", k, "fp32", static, aligned, hold, smooth_in))
    xb, sb = dev.DeviceBuffer.from_host(x), dev.DeviceBuffer.from_host(s)
    for via in ("call", "bound"):
        qb, rb = dev.DeviceBuffer(rows * k), dev.DeviceBuffer(4 * rows)  # new and unwritten
        if via == "call":
            kern(xb.ptr, k, rows, sb.ptr, scale, qb.ptr, rb.ptr, 0)
        else:
            kern.bind(xb.ptr, k, rows, sb.ptr, scale, qb.ptr, rb.ptr)(0)
        dev.synchronize()
        q, r = dev.to_host(qb.as_array((rows, k), np.int8)), dev.to_host(rb.as_array((rows,), np.float32))
        wq, wr = reference.quantize(x, s, scale)
        ok = (q == wq).all() and (r.view(np.int32) == wr.view(np.int32)).all()
        assert ok, (via, k, aligned, static, hold, smooth_in)
        print(f"memcheck launch ({via}) {kern.variant.name}: bit-exact")

# The fused producers (issue 24): RMSNorm and SiLU-and-mul in front of the quantizer, exactly sized buffers (the
# silu input [rows, 2K]), more rows than a few blocks so the rows loop and its reduction slots run under the tool.
for prologue, k, rows in (("rmsnorm", 2048, 300), ("rmsnorm", 40000, 3), ("silu_mul", 2048, 300)):
    width = 2 * k if prologue == "silu_mul" else k
    x = (rng.standard_normal((rows, width)) * 3).astype(np.float16)
    gamma = (1 + 0.2 * rng.standard_normal(k)).astype(np.float16)
    kern = ActQuantKernel(ActQuantConfig("fp16", k, None, False, True, prologue=prologue))  # type: ignore[arg-type]
    kern.max_blocks = min(kern.max_blocks, 64)  # a block loops over rows
    xb, gb = dev.DeviceBuffer.from_host(x), dev.DeviceBuffer.from_host(gamma)
    qb, rb = dev.DeviceBuffer(rows * k), dev.DeviceBuffer(4 * rows)
    kern(xb.ptr, width, rows, None, None, qb.ptr, rb.ptr, 0, gamma_ptr=gb.ptr, eps=1e-5)
    dev.synchronize()
    q, r = dev.to_host(qb.as_array((rows, k), np.int8)), dev.to_host(rb.as_array((rows,), np.float32))
    if prologue == "rmsnorm":
        wq, wr = reference.dynamic(reference.rmsnorm(x, gamma, 1e-5, kern.variant.threads))
        assert (q == wq).all() and (r.view(np.int32) == wr.view(np.int32)).all(), (prologue, k)
    else:
        wq, wr = reference.dynamic(reference.silu_mul(x))
        assert np.abs(q.astype(np.int32) - wq).max() <= 1, (prologue, k)
    print(f"memcheck launch {kern.variant.name} ({rows} rows on {min(rows, kern.max_blocks)} blocks): checked")
