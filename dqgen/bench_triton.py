"""A Triton dequantizer for the same layouts, written as a Triton user would (shift, mask, cast):
one of the baselines of ``dqgen bench``. Needs triton (present on GPU machines with torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from .spec import SourceKind, Spec


@triton.jit
def _dequant(
    q_ptr,
    s_ptr,
    z_ptr,
    out_ptr,
    shift_ptr,
    K,
    N,
    W,
    group,
    BITS: tl.constexpr,
    P: tl.constexpr,
    ALONG_N: tl.constexpr,
    SIGNED: tl.constexpr,
    OFFSET: tl.constexpr,
    HAS_Z: tl.constexpr,
    BF16: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rk = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = (rk < K)[:, None] & (rn < N)[None, :]
    rk64 = rk.to(tl.int64)
    mask = (1 << BITS) - 1
    if ALONG_N:
        words = tl.load(q_ptr + rk64[:, None] * W + (rn // P)[None, :], mask=m, other=0)
        sh = tl.load(shift_ptr + rn % P)[None, :]
    else:
        words = tl.load(q_ptr + (rk64 // P)[:, None] * N + rn[None, :], mask=m, other=0)
        sh = tl.load(shift_ptr + rk % P)[:, None]
    codes = (words >> sh) & mask
    if SIGNED:
        codes = tl.where(codes >= (1 << (BITS - 1)), codes - (1 << BITS), codes)
    codes = codes - OFFSET
    g = (rk // group).to(tl.int64)
    if HAS_Z:
        zw = tl.load(z_ptr + g[:, None] * W + (rn // P)[None, :], mask=m, other=0)
        codes = codes - ((zw >> sh) & mask)
    s = tl.load(s_ptr + g[:, None] * N + rn[None, :], mask=m, other=0).to(tl.float32)
    v = codes.to(tl.float32) * s  # exact: one rounding below
    if BF16:
        tl.store(out_ptr + rk64[:, None] * N + rn[None, :], v.to(tl.bfloat16), mask=m)
    else:
        tl.store(out_ptr + rk64[:, None] * N + rn[None, :], v.to(tl.float16), mask=m)


def triton_dequant(spec: Spec) -> Callable[[Any, Any, Any], Any]:
    b, P = spec.source.bits, spec.per_word
    shifts = torch.tensor([b * spec.order.index(e) for e in range(P)], dtype=torch.int32, device="cuda")
    along_n = spec.packing.axis == "N"

    def fn(q: Any, s: Any, z: Any) -> Any:
        K = q.shape[0] * (1 if along_n else P)
        N = q.shape[1] * (P if along_n else 1)
        group = spec.scales.group_size if spec.scales.group_size > 0 else K
        out = torch.empty((K, N), dtype=s.dtype, device="cuda")
        BK, BN = 32, 128
        grid = (triton.cdiv(K, BK), triton.cdiv(N, BN))
        _dequant[grid](
            q,
            s,
            q if z is None else z,
            out,
            shifts,
            K,
            N,
            N // P if along_n else N,
            group,
            BITS=b,
            P=P,
            ALONG_N=along_n,
            SIGNED=spec.source.kind is SourceKind.signed,
            OFFSET=spec.source.offset,
            HAS_Z=z is not None,
            BF16=spec.target.value == "bf16",
            BLOCK_K=BK,
            BLOCK_N=BN,
        )
        return out

    return fn
