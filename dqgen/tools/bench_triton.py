"""The Triton baseline of ``dqgen bench``: the dequantizer a Triton user writes for speed.

Each program owns a 2-D tile of whole packed int32 words, loads them once, and unpacks every field
in registers with shifts (the format's field order, e.g. AWQ's [0, 2, 4, 6, 1, 3, 5, 7]); the tile's
scales and zero words are loaded once per tile when the tile lies in one group (the usual case: the
tile height divides the group size), else once per row. Tile sizes and warps are autotuned per
shape. Formats: integer codes (unsigned, signed, biased) in single words, packed along N or K, with
no zeros or packed integer zeros (the classic AWQ / GPTQ / int8 layouts). Needs torch and triton.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ..core.spec import SourceKind, Spec
from .baselines import field_shifts, triton_supported

_N_CONFIGS = [
    triton.Config({"BLOCK_K": bk, "BLOCK_W": bw}, num_warps=nw)
    for bk, bw, nw in [(16, 32, 4), (32, 32, 4), (32, 32, 8), (64, 32, 8), (32, 64, 8), (64, 16, 4), (16, 64, 4)]
]
_K_CONFIGS = [
    triton.Config({"BLOCK_KW": bkw, "BLOCK_N": bn}, num_warps=nw)
    for bkw, bn, nw in [(2, 128, 4), (4, 128, 4), (4, 256, 8), (8, 128, 8), (2, 256, 4), (8, 64, 4)]
]


@triton.jit
def _signed(codes, BITS: tl.constexpr, SIGNED: tl.constexpr, OFFSET: tl.constexpr):
    if SIGNED:
        codes = tl.where(codes >= (1 << (BITS - 1)), codes - (1 << BITS), codes)
    return codes - OFFSET


@triton.autotune(configs=_N_CONFIGS, key=["K", "N"])
@triton.jit
def _dequant_along_n(
    q_ptr,
    s_ptr,
    z_ptr,
    out_ptr,
    shift_ptr,
    K,
    N,
    W,
    GROUP: tl.constexpr,  # 0: one group (per-channel scales)
    BITS: tl.constexpr,
    P: tl.constexpr,
    SIGNED: tl.constexpr,
    OFFSET: tl.constexpr,
    HAS_Z: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    """qweight [K, W = N / P] int32; output [K, N]: a BLOCK_K x BLOCK_W tile of words per program."""
    pid_k, pid_w = tl.program_id(0), tl.program_id(1)
    rk = (pid_k * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.int64)
    rw = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    rn = pid_w * BLOCK_W * P + tl.arange(0, BLOCK_W * P)
    mk, mw, mn = rk < K, rw < W, rn < N
    mask = (1 << BITS) - 1
    sh = tl.load(shift_ptr + tl.arange(0, P))  # bit offset of element e of a word: the field order
    words = tl.load(q_ptr + rk[:, None] * W + rw[None, :], mask=mk[:, None] & mw[None, :], other=0)
    codes = tl.reshape((words[:, :, None] >> sh[None, None, :]) & mask, (BLOCK_K, BLOCK_W * P))
    codes = _signed(codes, BITS, SIGNED, OFFSET)
    if GROUP % BLOCK_K == 0:  # the tile lies in one group (GROUP 0: there is one): one row of scales / zeros
        g = pid_k * 0
        if GROUP != 0:
            g = (pid_k * BLOCK_K) // GROUP
        s = tl.load(s_ptr + g * N + rn, mask=mn, other=0).to(tl.float32)[None, :]
        if HAS_Z:
            zw = tl.load(z_ptr + g * W + rw, mask=mw, other=0)
            codes = codes - tl.reshape((zw[:, None] >> sh[None, :]) & mask, (BLOCK_W * P,))[None, :]
    else:
        g = rk // GROUP
        s = tl.load(s_ptr + g[:, None] * N + rn[None, :], mask=mk[:, None] & mn[None, :], other=0).to(tl.float32)
        if HAS_Z:
            zw = tl.load(z_ptr + g[:, None] * W + rw[None, :], mask=mk[:, None] & mw[None, :], other=0)
            codes = codes - tl.reshape((zw[:, :, None] >> sh[None, None, :]) & mask, (BLOCK_K, BLOCK_W * P))
    v = codes.to(tl.float32) * s  # exact in fp32 (small integer x 11/8-bit significand): one rounding below
    tl.store(out_ptr + rk[:, None] * N + rn[None, :], v.to(out_ptr.dtype.element_ty), mask=mk[:, None] & mn[None, :])


@triton.autotune(configs=_K_CONFIGS, key=["K", "N"])
@triton.jit
def _dequant_along_k(
    q_ptr,
    s_ptr,
    z_ptr,
    out_ptr,
    shift_ptr,
    K,
    N,
    GROUP: tl.constexpr,
    BITS: tl.constexpr,
    P: tl.constexpr,
    SIGNED: tl.constexpr,
    OFFSET: tl.constexpr,
    HAS_Z: tl.constexpr,
    BLOCK_KW: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """qweight [K / P, N] int32; output [K, N]: BLOCK_KW word-rows (BLOCK_KW * P rows of K) x BLOCK_N."""
    pid_k, pid_n = tl.program_id(0), tl.program_id(1)
    KW = K // P
    rkw = (pid_k * BLOCK_KW + tl.arange(0, BLOCK_KW)).to(tl.int64)
    rk = pid_k * BLOCK_KW * P + tl.arange(0, BLOCK_KW * P).to(tl.int64)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mk, mn = rk < K, rn < N
    mask = (1 << BITS) - 1
    sh = tl.load(shift_ptr + tl.arange(0, P))
    words = tl.load(q_ptr + rkw[:, None] * N + rn[None, :], mask=(rkw < KW)[:, None] & mn[None, :], other=0)
    codes = tl.reshape((words[:, None, :] >> sh[None, :, None]) & mask, (BLOCK_KW * P, BLOCK_N))
    codes = _signed(codes, BITS, SIGNED, OFFSET)
    if GROUP % (BLOCK_KW * P) == 0:
        g = pid_k * 0
        if GROUP != 0:
            g = (pid_k * BLOCK_KW * P) // GROUP
        s = tl.load(s_ptr + g * N + rn, mask=mn, other=0).to(tl.float32)[None, :]
        if HAS_Z:
            zw = tl.load(z_ptr + g * (N // P) + rn // P, mask=mn, other=0)
            codes = codes - ((zw >> tl.load(shift_ptr + rn % P)) & mask)[None, :]
    else:
        g = rk // GROUP
        s = tl.load(s_ptr + g[:, None] * N + rn[None, :], mask=mk[:, None] & mn[None, :], other=0).to(tl.float32)
        if HAS_Z:
            zw = tl.load(z_ptr + g[:, None] * (N // P) + (rn // P)[None, :], mask=mk[:, None] & mn[None, :], other=0)
            codes = codes - ((zw >> tl.load(shift_ptr + rn % P)[None, :]) & mask)
    v = codes.to(tl.float32) * s
    tl.store(out_ptr + rk[:, None] * N + rn[None, :], v.to(out_ptr.dtype.element_ty), mask=mk[:, None] & mn[None, :])


def triton_dequant(spec: Spec) -> Callable[[Any, Any, Any], Any] | None:
    """``fn(qweight, scales, zeros) -> out`` for ``spec``, or None where the format is not supported."""
    if not triton_supported(spec):
        return None
    b, P = spec.source.bits, spec.per_word
    shifts = torch.tensor(field_shifts(spec), dtype=torch.int32, device="cuda")
    along_n = spec.packing.axis == "N"
    flags = dict(
        BITS=b,
        P=P,
        SIGNED=spec.source.kind is SourceKind.signed,
        OFFSET=spec.source.offset,
    )

    def fn(q: Any, s: Any, z: Any) -> Any:
        K = q.shape[0] * (1 if along_n else P)
        N = q.shape[1] * (P if along_n else 1)
        G = s.shape[0]
        group = 0 if G == 1 else K // G
        out = torch.empty((K, N), dtype=s.dtype, device=q.device)
        zz = q if z is None else z
        if along_n:
            grid = lambda m: (triton.cdiv(K, m["BLOCK_K"]), triton.cdiv(N // P, m["BLOCK_W"]))  # noqa: E731
            _dequant_along_n[grid](q, s, zz, out, shifts, K, N, N // P, GROUP=group, HAS_Z=z is not None, **flags)
        else:
            grid = lambda m: (triton.cdiv(K, m["BLOCK_KW"] * P), triton.cdiv(N, m["BLOCK_N"]))  # noqa: E731
            _dequant_along_k[grid](q, s, zz, out, shifts, K, N, GROUP=group, HAS_Z=z is not None, **flags)
        return out

    return fn
