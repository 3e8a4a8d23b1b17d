"""W4A8 on Hopper: int8 per-token activations (dqgen.w8a8.quantize_activations) times int4 group-quantized weights
(AWQ / GPTQ checkpoints packed once into the W4A8 layout, dqgen.layout.w4a8), by the wgmma kernel of
dqgen.kernels.w4a8_gemm90. ``pack_w4a8_weight`` packs a checkpoint layer onto a device; ``w4a8_matmul`` runs
y = x_q @ W, rescaled per 128-k tile in the order of dqgen.check.w4a8_model (which the GPU tests hold it to).

The kernel and its launch (a tile or a split count may be forced); the torch custom op over it is dqgen.w8a8.w4a8_op,
the module dqgen.nn.W4A8Linear."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core.spec import Spec
from ..kernels.w4a8_gemm90 import W4A8Gemm90Config, W4A8Out, W4A8Tile, choose_w4a8_tile
from ..layout.w4a8 import RESCALE_K, W4A8Packed, pack_w4a8
from ..run import device as dev
from ..run.loader import load
from .gemm90 import operand_map
from .matmul_op import _counters  # the device's split-K tile counters, shared with the W8A8 GEMM

#: The entry points' parameters in order with their widths (tests/test_w4a8_gemm90.py holds this equal to the
#: rendered signature).
PARAMS: tuple[tuple[str, Any], ...] = (
    ("xmap", dev.TensorMapArg),
    *((name, np.uint64) for name in ("wq", "scales", "zeros", "x_scale", "bias", "y", "ws", "counters")),
    *((name, np.int32) for name in ("M", "N", "k_tiles", "x_tiles", "splits")),
)

#: Fewest 128-k tiles a split-K piece gets (its pipeline fill and the partials' round trip against the SMs it adds).
MIN_K_TILES_PER_SPLIT = 8


def choose_splits(tiles: int, k_tiles: int, resident: int) -> int:
    """Split-K pieces a tile: as many as fill the resident CTAs where the tiles do not, each at least
    MIN_K_TILES_PER_SPLIT tiles of K."""
    if tiles >= resident:
        return 1
    return max(1, min(resident // tiles, k_tiles // MIN_K_TILES_PER_SPLIT))


_OUTS: dict[torch.dtype, W4A8Out] = {torch.float16: "f16", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class W4A8Weight:
    """A layer's weights in the W4A8 layout on one device (dqgen.layout.w4a8's arrays as torch tensors)."""

    spec: Spec
    wq: torch.Tensor  # uint8 view of uint32 [N/64, K/64, 128, 4]
    scales: torch.Tensor  # float32 [N/64, K/128, 64]
    zeros: torch.Tensor | None  # int32 view of uint32 [N/64, K/128, 64]
    K: int
    N: int


def pack_w4a8_weight(
    spec: Spec, qweight: Any, scales: Any, qzeros: Any, group_size: int, device: Any = "cuda"
) -> W4A8Weight:
    """A checkpoint layer (``spec``'s qweight, scales [G, N], packed qzeros or None) packed into the W4A8 layout
    (on the host, once) and copied to ``device``. ValueError naming the tensor or the spec's field that does not fit."""

    def host(t: Any) -> np.ndarray | None:
        if t is None:
            return None
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu()
            if t.dtype == torch.bfloat16:
                t = t.float()
            return np.asarray(t.numpy())
        return np.asarray(t)

    packed: W4A8Packed = pack_w4a8(spec, host(qweight), host(scales), host(qzeros), group_size)  # type: ignore[arg-type]
    dev_ = torch.device(device)
    return W4A8Weight(
        spec,
        torch.from_numpy(np.ascontiguousarray(packed.wq).view(np.uint8).reshape(-1)).to(dev_),
        torch.from_numpy(np.ascontiguousarray(packed.scales, dtype=np.float32)).to(dev_),
        None if packed.zeros is None else torch.from_numpy(np.ascontiguousarray(packed.zeros).view(np.int32)).to(dev_),
        packed.K,
        packed.N,
    )


def _check(x_q: Any, x_scale: Any, w: W4A8Weight, bias: Any, out_dtype: Any) -> None:
    """One-line ValueErrors naming the argument, before anything launches."""
    if (w.zeros is not None) != w.spec.zeros.packed:
        raise ValueError(f"w: its zeros do not match spec {w.spec.name!r} (zeros.mode {w.spec.zeros.mode!r})")
    if w.wq.numel() != w.K * w.N // 2 or tuple(w.scales.shape) != (w.N // 64, w.K // RESCALE_K, 64):
        raise ValueError(f"w: expected the W4A8 layout of [K={w.K}, N={w.N}] (dqgen.layout.w4a8), got other shapes")
    if not isinstance(x_q, torch.Tensor) or x_q.dtype != torch.int8 or x_q.dim() != 2 or x_q.shape[1] != w.K:
        got = f"{x_q.dtype} {list(x_q.shape)}" if isinstance(x_q, torch.Tensor) else type(x_q).__name__
        raise ValueError(f"x_q: expected an int8 tensor [M, K={w.K}], got {got}")
    if x_q.device != w.wq.device:
        raise ValueError(f"x_q: expected the weight's device {w.wq.device}, got {x_q.device}")
    m = x_q.shape[0]
    if not x_q.is_contiguous() or x_q.data_ptr() % 16:
        raise ValueError("x_q: expected a contiguous tensor at a 16-byte aligned address (TMA reads its rows)")
    if not isinstance(x_scale, torch.Tensor) or x_scale.dtype != torch.float32 or tuple(x_scale.shape) != (m,):
        raise ValueError(f"x_scale: expected float32 [M={m}], got {getattr(x_scale, 'dtype', None)}")
    if x_scale.device != x_q.device or not x_scale.is_contiguous():
        raise ValueError(f"x_scale: expected a contiguous tensor on {x_q.device}")
    if out_dtype not in _OUTS:
        raise ValueError(f"out_dtype: expected torch.float16 or torch.bfloat16, got {out_dtype}")
    if bias is not None and (
        not isinstance(bias, torch.Tensor)
        or bias.dtype != out_dtype
        or tuple(bias.shape) != (w.N,)
        or bias.device != x_q.device
        or not bias.is_contiguous()
    ):
        raise ValueError(f"bias: expected a contiguous {out_dtype} tensor [N={w.N}] on {x_q.device}")


def w4a8_matmul(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w: W4A8Weight,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.float16,
    tile: W4A8Tile | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """y [M, N] (out_dtype) = sum over 128-k tiles t of f32(part_t * f32(w_scale[t, n] * x_scale[m])) (+ bias), part_t
    the exact int32 sums of x_q [M, K] (int8) and the converted int4 weights; ``tile``: a CTA shape other than the
    choice's (tests, tuning). Needs an sm_90 GPU."""
    _check(x_q, x_scale, w, bias, out_dtype)
    m = int(x_q.shape[0])
    y = torch.empty((m, w.N), dtype=out_dtype, device=x_q.device)
    if m == 0:
        return y
    ordinal = x_q.device.index if x_q.device.index is not None else torch.cuda.current_device()
    t = tile if tile is not None else choose_w4a8_tile(m)
    kc = W4A8Gemm90Config.one(w.spec, t, _OUTS[out_dtype])
    fn = load(kc, ordinal)
    x_tiles, w_tiles = -(-m // t.bn), -(-w.N // t.features)
    tiles, k_tiles = x_tiles * w_tiles, w.K // RESCALE_K
    smem = t.shared_bytes(w.spec.zeros.packed)  # the kernel's stages are the spec's (its zero words or none)
    if splits is None:
        splits = choose_splits(tiles, k_tiles, dev.sm_count(ordinal) * max(1, fn.max_active_blocks(t.threads, smem)))
    if not 1 <= splits <= k_tiles:
        raise ValueError(f"splits: expected 1..{k_tiles} (the 128-k tiles of K = {w.K}), got {splits}")
    ws = counters = None
    if splits > 1:
        ws = torch.empty(tiles * splits * (t.mw * t.bn // 2) * 128 * t.consumers, dtype=torch.float32, device=y.device)
        counters = _counters(y.device, tiles)
    values = {
        "xmap": operand_map(x_q.data_ptr(), m, w.K, w.K, t.bn),
        "wq": w.wq.data_ptr(),
        "scales": w.scales.data_ptr(),
        "zeros": 0 if w.zeros is None else w.zeros.data_ptr(),
        "x_scale": x_scale.data_ptr(),
        "bias": 0 if bias is None else bias.data_ptr(),
        "y": y.data_ptr(),
        "ws": 0 if ws is None else ws.data_ptr(),
        "counters": 0 if counters is None else counters.data_ptr(),
        "M": m,
        "N": w.N,
        "k_tiles": k_tiles,
        "x_tiles": x_tiles,
        "splits": splits,
    }
    args = [values[name] if typ is dev.TensorMapArg else typ(values[name]) for name, typ in PARAMS]
    stream = torch.cuda.current_stream(x_q.device).cuda_stream
    fn.bind((tiles * splits,), (t.threads,), args, shared_mem=smem)(stream)
    return y
