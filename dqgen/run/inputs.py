"""Random inputs for timing a kernel (tune and the bench share them): full-range packed words, scales of
ordinary size, zeros, act-order g_idx and the NVFP4 global scale, from a seed. The bench draws them on the GPU with
torch (make_inputs); the tuner draws the same distributions on the host with numpy (host_inputs) and uploads them
once through dqgen.run.device, so `dqgen build` tunes without torch."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.formats import numpy_dtype, torch_dtype
from ..core.spec import Spec
from ..layout.layout import Layout


def _torch():
    import torch

    return torch


#: Block-scale codes make_inputs draws from: scales of ordinary size (e8m0: 2^-10 .. 2^2; e4m3: 2^-2 .. 2^4).
_BLOCK_SCALE_CODES = {"e8m0": (117, 130), "e4m3": (0x28, 0x58)}


def make_inputs(spec: Spec, K: int, N: int, seed: int) -> tuple[Any, Any, Any]:
    """Full-range random packed words, random signed scales (block scales: uint8 codes), random zeros,
    on the GPU. Multi-word blocks (3-bit) give qweight [K * words / per_block, N]."""
    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(seed)
    from ..check.reference import example_group_size

    gs = example_group_size(spec, K)  # group_size auto: the usual 128 where it divides K
    G = K // gs if gs > 0 else 1
    shapes = Layout.of(spec).shapes(K, N, G)
    q = torch.randint(-(2**31), 2**31, shapes["qweight"], dtype=torch.int32, device="cuda", generator=g)
    tdt = torch_dtype(spec.target_type, torch)
    if spec.scales.block:
        assert spec.scales.dtype is not None, "ScaleSpec.block is true only when a block-scale dtype is set"
        lo, hi = _BLOCK_SCALE_CODES[spec.scales.dtype.value]
        s = torch.randint(lo, hi, (G, N), dtype=torch.uint8, device="cuda", generator=g)
    else:
        s = (torch.rand((G, N), device="cuda", generator=g) * 2 - 1).mul_(0.05).to(tdt)
    if spec.zeros.packed:
        z = torch.randint(-(2**31), 2**31, shapes["zeros"], dtype=torch.int32, device="cuda", generator=g)
    elif spec.zeros.dense:
        z = (torch.rand((G, N), device="cuda", generator=g) * (1 << spec.source.bits)).to(tdt)
    else:
        z = None
    return q, s, z


def make_global_scale(spec: Spec, seed: int) -> Any:
    """NVFP4's per-tensor fp32 global scale (a one-element tensor on the GPU), or None."""
    if not spec.scales.global_scale:
        return None
    from ..check.reference import random_global_scale

    return _torch().from_numpy(random_global_scale(spec, seed)).to("cuda")


def make_g_idx(spec: Spec, K: int, seed: int) -> Any:
    """An act-order g_idx as GPTQ desc_act makes it: each group id group_size times, shuffled."""
    torch = _torch()
    if not spec.act_order:
        return None
    g = torch.Generator(device="cuda").manual_seed(seed)
    from ..check.reference import example_group_size

    ids = torch.arange(K, device="cuda", dtype=torch.int32) // example_group_size(spec, K)
    return ids[torch.randperm(K, device="cuda", generator=g)].contiguous()


def host_inputs(
    spec: Spec, K: int, N: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """make_inputs' distributions drawn with numpy: ``(qweight, scales, zeros, g_idx, global_scale)`` as host
    arrays (zeros, g_idx and global_scale None where the spec has none)."""
    from ..check.reference import example_group_size, random_global_scale

    rng = np.random.default_rng(seed)
    gs = example_group_size(spec, K)  # group_size auto: the usual 128 where it divides K
    G = K // gs if gs > 0 else 1
    shapes = Layout.of(spec).shapes(K, N, G)
    q = rng.integers(-(2**31), 2**31, size=shapes["qweight"], dtype=np.int32)
    tdt = numpy_dtype(spec.target_type)
    if spec.scales.block:
        assert spec.scales.dtype is not None, "ScaleSpec.block is true only when a block-scale dtype is set"
        lo, hi = _BLOCK_SCALE_CODES[spec.scales.dtype.value]
        s = rng.integers(lo, hi, size=(G, N), dtype=np.uint8)
    else:
        s = ((rng.random((G, N), dtype=np.float32) * 2 - 1) * 0.05).astype(tdt)
    z: np.ndarray | None = None
    if spec.zeros.packed:
        z = rng.integers(-(2**31), 2**31, size=shapes["zeros"], dtype=np.int32)
    elif spec.zeros.dense:
        z = (rng.random((G, N), dtype=np.float32) * (1 << spec.source.bits)).astype(tdt)
    g_idx = (np.arange(K, dtype=np.int32) // gs)[rng.permutation(K)] if spec.act_order else None
    return q, s, z, g_idx, random_global_scale(spec, seed)
