"""The numpy model of the W4A8 product as the Hopper W4A8 GEMM is to compute it: the prepacked words
(``dqgen.layout.w4a8``) converted by the proven s8 Plan (run in the PTX emulator, not re-derived), int32 partial
sums per 128-k tile of the int8 weights times the int8 activations, each rescaled in fp32 and summed in K order:

    acc_t[m, n] = sum_{k in tile t} w8[k, n] * x8[m, k]                      int32, exact (|.| <= 128 * 15 * 128)
    out[m, n]   = sum_t  f32( f32(acc_t) * f32(w_scale[t, n] * x_scale[m]) ) fp32, tiles in K order, from 0

each product and each sum rounded once to fp32 (round to nearest even): the kernel's epilogue should use the same
unfused order (``__fmul_rn`` twice, ``__fadd_rn``) to agree bit for bit; an FFMA agrees to a few fp32 ulps.
"""

from __future__ import annotations

import numpy as np

from ..ir.plan import Plan
from ..layout.w4a8 import RESCALE_K, W4A8_TILE_K, W4A8Packed, element_map

F32 = np.float32


def int8_weights(plan: Plan, packed: W4A8Packed) -> np.ndarray:
    """The int8 weights [K, N] the GEMM feeds wgmma: every prepacked word converted by ``plan``, the proven Plan of
    ``dqgen.layout.w4a8.w4a8_converter_spec(spec)`` (``compile_artifact(w4a8_converter_spec(spec)).plan``), with
    its zero word where the spec has packed zeros."""
    if plan.target != "s8" or plan.words != ["w"]:
        raise ValueError(f"plan: expected the s8 Plan of a W4A8 converter spec, got {plan.strategy} -> {plan.target}")
    NT, KT = packed.wq.shape[:2]
    n_of, k_of = element_map()
    env = {"w": packed.wq.reshape(-1)}
    if packed.zeros is not None:
        # the zero word of each word: its row's zero in the 128-k tile that holds its k-tile
        rows = n_of[:, :, 0]  # [128, 4]
        per_tile = packed.zeros[:, (np.arange(KT) * W4A8_TILE_K) // RESCALE_K]  # [NT, KT, 64]
        env["z"] = per_tile[:, :, rows].reshape(-1)
    regs = plan.run(env, upto="convert")
    lanes = np.zeros((packed.wq.size, 8), dtype=np.int8)
    for out, elements in zip(plan.outputs, plan.lanes, strict=True):
        for lane, e in enumerate(elements):
            lanes[:, e] = ((regs[out] >> np.uint32(8 * lane)) & np.uint32(0xFF)).astype(np.uint8).view(np.int8)
    fields = lanes.reshape(NT, KT, 128, 4, 8)
    tiles = np.zeros((NT, KT, 64, W4A8_TILE_K), dtype=np.int8)
    tiles[:, :, n_of, k_of] = fields
    return tiles.transpose(1, 3, 0, 2).reshape(KT * W4A8_TILE_K, NT * 64)


def w4a8_matmul(plan: Plan, packed: W4A8Packed, xq: np.ndarray, x_scale: np.ndarray) -> np.ndarray:
    """out [M, N] float32 of int8 activations ``xq`` [M, K] with per-token scales ``x_scale`` [M] (float32) and
    the prepacked int4 weights converted by ``plan`` (see ``int8_weights``), in the kernel's order (module
    docstring)."""
    xq = np.asarray(xq)
    if xq.dtype != np.int8 or xq.ndim != 2 or xq.shape[1] != packed.K:
        raise ValueError(f"xq: expected int8 [M, K={packed.K}], got {xq.dtype} {list(xq.shape)}")
    xs = np.asarray(x_scale, dtype=np.float32).reshape(-1)
    if xs.shape != (xq.shape[0],):
        raise ValueError(f"x_scale: expected [M={xq.shape[0]}], got {list(np.shape(x_scale))}")
    w8 = int8_weights(plan, packed).astype(np.int64)
    x64 = xq.astype(np.int64)
    M, N = xq.shape[0], packed.N
    ws = packed.scales.transpose(1, 0, 2).reshape(packed.K // RESCALE_K, N)  # [tiles, N] fp32
    out = np.zeros((M, N), dtype=F32)
    for t in range(packed.K // RESCALE_K):
        ks = slice(t * RESCALE_K, (t + 1) * RESCALE_K)
        acc = x64[:, ks] @ w8[ks]
        assert np.abs(acc).max(initial=0) < 2**31  # an int32 partial sum never wraps
        scale = (ws[t][None, :] * xs[:, None]).astype(F32)  # one fp32 rounding
        out = (out + (acc.astype(F32) * scale).astype(F32)).astype(F32)
    return out
