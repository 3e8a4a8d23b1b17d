"""The W4A8 matmul as a torch custom op (``dqgen::w4a8_matmul``): int8 per-token activations (x_q, x_scale: what
dqgen.w8a8.quantize_activations gives) times int4 weights in the prepacked W4A8 layout (dqgen.layout.w4a8) on the
Hopper W4A8 GEMM (dqgen.kernels.w4a8_gemm90), fp16 / bf16 out, optional bias:

    y[m, n] = round(sum over 128-k tiles t of f32(acc_t[m, n] * f32(w_scale[t, n] * x_scale[m])) (+ bias[n]))

acc_t the exact int32 sum of the tile (dqgen.check.w4a8_model is the arithmetic, bit for bit without split-K).

The weight is three tensors (dqgen.nn.W4A8Linear holds them as buffers): ``w_q`` int32 [N/64, K/64, 128, 4] (the
layout's uint32 words), ``w_scale`` float32 [N/64, K/128, 64] and, for int4 codes with zero points (AWQ), ``w_zeros``
int32 [N/64, K/128, 64]; without zeros the codes are q - 8 (symmetric GPTQ). The checks run on the traced (fake)
tensors under torch.compile; the fake implementation only shapes the output. An eager call goes through a signature
cache: the kernel, its split-K plan and a launch bound per x address (x is read through a TMA tensor map), the
per-call pointers (x_scale, y, the split-K workspace) patched into it (the pattern of dqgen.w8a8.matmul_op)."""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

import numpy as np
import torch

from ..core.spec import Spec, load_spec
from ..kernels.w4a8_gemm90 import W4A8Gemm90Config, W4A8Out, W4A8Tile, choose_w4a8_tile
from ..layout.w4a8 import RESCALE_K, W4A8_TILE_K, W4A8_TILE_N
from ..run import device as dev
from ..run.bound_x import BoundPerX, launch_patched, markers
from ..run.calls import CALLS_MAX, remember
from ..run.loader import load
from .gemm90 import operand_map
from .matmul_op import _counters, check_epilogue_inputs
from .w4a8 import PARAMS, choose_splits

_OUTS: dict[torch.dtype, W4A8Out] = {torch.float16: "f16", torch.bfloat16: "bf16"}

#: The W4A8 spec of each kind of weight (the kernel's converter is the spec's proven s8 Plan): int4 codes with
#: integer zero points (AWQ's; GPTQ's asymmetric checkpoints are repacked to it), or stored q, value q - 8.
SPEC_WITH_ZEROS = "awq_int4_s8"
SPEC_SYMMETRIC = "gptq_int4_s8"


@functools.cache
def spec_for(zeros: bool) -> Spec:
    """The W4A8 spec whose kernel runs a weight with (``zeros``) or without zero points."""
    return load_spec(SPEC_WITH_ZEROS if zeros else SPEC_SYMMETRIC)


def weight_shape(w_scale: torch.Tensor) -> tuple[int, int]:
    """(K, N) of a W4A8 weight from its scales [N/64, K/128, 64]."""
    return int(w_scale.shape[1]) * RESCALE_K, int(w_scale.shape[0]) * W4A8_TILE_N


def check_inputs(
    x_q: Any, x_scale: Any, w_q: Any, w_scale: Any, w_zeros: Any, bias: Any, out_dtype: Any
) -> tuple[int, int]:
    """Raise a one-line ValueError naming the bad argument (nothing has run yet); (K, N) of the weight."""
    for name, t in (("x_q", x_q), ("x_scale", x_scale), ("w_q", w_q), ("w_scale", w_scale)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected a CUDA torch.Tensor, got {type(t).__name__}")
    if w_scale.dtype != torch.float32 or w_scale.dim() != 3 or w_scale.shape[2] != W4A8_TILE_N or 0 in w_scale.shape:
        got = f"{w_scale.dtype} {list(w_scale.shape)}"
        raise ValueError(f"w_scale: expected float32 [N/64, K/128, 64] (the W4A8 layout's scales), got {got}")
    k, n = weight_shape(w_scale)
    want_q = (n // W4A8_TILE_N, k // W4A8_TILE_K, 128, 4)
    if w_q.dtype != torch.int32 or tuple(w_q.shape) != want_q:
        raise ValueError(f"w_q: expected int32 {list(want_q)} (the layout's words of [K={k}, N={n}]), "
                         f"got {w_q.dtype} {list(w_q.shape)}")  # fmt: skip
    if w_zeros is not None:
        if not isinstance(w_zeros, torch.Tensor):
            raise ValueError(f"w_zeros: expected a tensor [N/64, K/128, 64] or None, got {type(w_zeros).__name__}")
        if w_zeros.dtype != torch.int32 or w_zeros.shape != w_scale.shape:
            got = f"{w_zeros.dtype} {list(w_zeros.shape)}"
            raise ValueError(f"w_zeros: expected int32 {list(w_scale.shape)} (w_scale's shape), got {got}")
    if x_q.dtype != torch.int8 or x_q.dim() != 2 or x_q.shape[1] != k:
        raise ValueError(f"x_q: expected int8 [M, K={k}], got {x_q.dtype} {list(x_q.shape)}")
    check_epilogue_inputs(x_scale, x_q.shape[0], bias, n, out_dtype)  # M symbolic under torch.compile
    named = (("x_q", x_q), ("x_scale", x_scale), ("w_q", w_q), ("w_scale", w_scale), ("w_zeros", w_zeros))
    for name, t in (*named, ("bias", bias)):
        if t is None:
            continue
        if t.device.type not in ("cuda", "meta"):  # meta: torch's own shape propagation
            raise ValueError(f"{name}: expected a CUDA tensor, got device {t.device}")
        if t.device != x_q.device:
            raise ValueError(f"{name}: expected x_q's device {x_q.device}, got {t.device}")
    for name, t in (("w_q", w_q), ("w_scale", w_scale), ("w_zeros", w_zeros), ("bias", bias)):
        if t is not None and not t.is_contiguous():  # the kernel streams them as laid out (the bias: N in a row)
            raise ValueError(f"{name}: expected a contiguous tensor (the W4A8 layout), got strides {list(t.stride())}")
    return k, n


@torch.library.custom_op("dqgen::w4a8_matmul", mutates_args=(), device_types="cuda")
def w4a8_matmul_op(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    w_zeros: torch.Tensor | None,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return _call(x_q, x_scale, w_q, w_scale, w_zeros, bias, out_dtype)  # checks a new signature: torch.ops too


@w4a8_matmul_op.register_fake
def _(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    w_zeros: torch.Tensor | None,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    return x_q.new_empty((x_q.shape[0], w_scale.shape[0] * W4A8_TILE_N), dtype=out_dtype)


def w4a8_matmul(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    w_zeros: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.float16,
) -> torch.Tensor:
    """y [M, N] (out_dtype) of int8 activations x_q [M, K] with per-token scales x_scale [M] (float32) and a W4A8
    weight (module docstring; dqgen.nn.W4A8Linear packs one), + bias [N] (out_dtype) when given. Needs an sm_90
    GPU."""
    if torch.compiler.is_compiling():  # traced: one custom op in the graph
        check_inputs(x_q, x_scale, w_q, w_scale, w_zeros, bias, out_dtype)
        return torch.ops.dqgen.w4a8_matmul(x_q, x_scale, w_q, w_scale, w_zeros, bias, out_dtype)
    return _call(x_q, x_scale, w_q, w_scale, w_zeros, bias, out_dtype)  # eager: the dispatcher's overhead skipped


@dataclasses.dataclass(slots=True)
class _Call:
    """What a call's input signature fixes, decided once: the checks passed, the kernel and its tile, the split-K
    plan and workspace, and launches bound per x address (x is in a TMA tensor map: opaque bytes), each with the
    slots of the per-call pointers x_scale, y and ws (-1: no workspace)."""

    bound_for: BoundPerX
    mn: tuple[int, int]
    ws_elems: int
    counters: torch.Tensor | None  # the split-K tile counters bound (the device's buffer: never freed)
    ordinal: int
    device: torch.device
    out_dtype: torch.dtype


_CALLS: dict[tuple, _Call] = {}
_raw_stream = dev.torch_raw_stream_fn(torch)
_ident = threading.get_ident
_empty = torch.empty


def _x_ready(x_q: torch.Tensor) -> torch.Tensor:
    """x_q as TMA reads it: contiguous at a 16-byte aligned address (K, a multiple of 128, aligns every row);
    otherwise a copy."""
    if x_q.is_contiguous() and not x_q.data_ptr() % 16:
        return x_q
    return x_q.clone(memory_format=torch.contiguous_format)


def _call(
    x_q: torch.Tensor,
    x_scale: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    w_zeros: torch.Tensor | None,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """An eager call through the signature cache. The key holds what the checks, the plan and the bound arguments
    depend on: x_q's and x_scale's shapes, strides, dtypes and devices and x_q's alignment (their pointers are per
    call), the weight's, the bias's pointers, shapes and dtypes (bound), out_dtype and the calling thread (the
    stream is read per call). A new signature is checked (the one-line errors) and planned first."""
    try:
        key = (
            x_q.shape, x_q.stride(), x_q.dtype, x_q.get_device(), not x_q.data_ptr() % 16,
            x_scale.shape, x_scale.stride(), x_scale.dtype, x_scale.get_device(),
            w_q.data_ptr(), w_q.shape, w_q.stride(), w_q.dtype,
            w_scale.data_ptr(), w_scale.shape, w_scale.stride(), w_scale.dtype,
            None if w_zeros is None else (w_zeros.data_ptr(), w_zeros.shape, w_zeros.stride(), w_zeros.dtype),
            None if bias is None else (bias.data_ptr(), bias.shape, bias.stride(), bias.dtype),
            out_dtype, _ident(),
        )  # fmt: skip
        hit = _CALLS.get(key)
    except (AttributeError, TypeError, RuntimeError):  # no tensors (or no storage): check_inputs names them
        check_inputs(x_q, x_scale, w_q, w_scale, w_zeros, bias, out_dtype)
        raise
    if hit is None:
        check_inputs(x_q, x_scale, w_q, w_scale, w_zeros, bias, out_dtype)
        hit = plan(x_q, w_q, w_scale, w_zeros, bias, out_dtype)
        if hit is None:  # M = 0
            return x_q.new_empty((0, weight_shape(w_scale)[1]), dtype=out_dtype)
        remember(_CALLS, key, hit, CALLS_MAX)
    x = _x_ready(x_q)
    xs = x_scale if x_scale.is_contiguous() else x_scale.contiguous()
    y = _empty(*hit.mn, dtype=hit.out_dtype, device=hit.device)
    ws = _empty(hit.ws_elems, dtype=torch.float32, device=hit.device) if hit.ws_elems else None
    per_call = (xs.data_ptr(), y.data_ptr(), 0 if ws is None else ws.data_ptr())
    launch_patched(hit.bound_for(x.data_ptr()), per_call, _raw_stream(hit.ordinal))
    return y  # x's copy, x_scale's and ws go back to the caching allocator after the launch, stream-ordered


@functools.lru_cache(maxsize=256)
def _prepared(zeros: bool, out: W4A8Out, m: int, n: int, k: int, ordinal: int) -> tuple[Any, W4A8Tile, int, int]:
    """(loaded kernel, tile, split-K pieces, shared bytes) of a call's shape, decided once."""
    spec = spec_for(zeros)
    tile = choose_w4a8_tile(m)
    fn = load(W4A8Gemm90Config.one(spec, tile, out), ordinal)
    smem = tile.shared_bytes(zeros)  # the kernel's stages are the spec's (its zero words or none)
    tiles = -(-m // tile.bn) * -(-n // tile.features)
    splits = choose_splits(
        tiles, k // RESCALE_K, dev.sm_count(ordinal) * max(1, fn.max_active_blocks(tile.threads, smem))
    )
    return fn, tile, splits, smem


def plan(
    x_q: torch.Tensor,
    w_q: torch.Tensor,
    w_scale: torch.Tensor,
    w_zeros: torch.Tensor | None,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
) -> _Call | None:
    """The _Call of checked inputs (None for M = 0): the kernel, the split-K plan and a binder of the launch for an
    x address, the per-call pointers bound as markers no device address equals, their slots found once."""
    m = int(x_q.shape[0])
    k, n = weight_shape(w_scale)
    if m == 0:
        return None
    ordinal = x_q.device.index if x_q.device.index is not None else torch.cuda.current_device()
    fn, tile, splits, smem = _prepared(w_zeros is not None, _OUTS[out_dtype], m, n, k, ordinal)
    x_tiles = -(-m // tile.bn)
    tiles = x_tiles * -(-n // tile.features)
    ws_elems = tiles * splits * (tile.mw * tile.bn // 2) * 128 * tile.consumers if splits > 1 else 0
    counters = _counters(x_q.device, tiles) if splits > 1 else None
    marks = markers((True, True, bool(ws_elems)))
    fixed = {
        "wq": w_q.data_ptr(),
        "scales": w_scale.data_ptr(),
        "zeros": 0 if w_zeros is None else w_zeros.data_ptr(),
        "x_scale": marks[0],
        "bias": 0 if bias is None else bias.data_ptr(),
        "y": marks[1],
        "ws": marks[2],
        "counters": 0 if counters is None else counters.data_ptr(),
        "M": m,
        "N": n,
        "k_tiles": k // RESCALE_K,
        "x_tiles": x_tiles,
        "splits": splits,
    }

    def bind(x_ptr: int) -> dev.BoundLaunch:
        values = {**fixed, "xmap": operand_map(x_ptr, m, k, k, tile.bn)}
        args = [values[name] if typ is dev.TensorMapArg else typ(values[name]) for name, typ in PARAMS]
        return fn.bind((tiles * splits,), (tile.threads,), args, shared_mem=smem)

    device = torch.device("cuda", ordinal)
    per_x = BoundPerX(bind, (marks[0], marks[1], marks[2]), "w4a8 matmul", [name for name, _ in PARAMS].index("xmap"))
    return _Call(per_x, (m, n), ws_elems, counters, ordinal, device, out_dtype)


def layout_tensors(wq: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None) -> tuple[Any, Any, Any]:
    """The op's weight tensors (int32 w_q, float32 w_scale, int32 w_zeros or None; on the host) of a
    dqgen.layout.w4a8.W4A8Packed's arrays (uint32 words viewed as int32: the same bits)."""
    w_q = torch.from_numpy(np.ascontiguousarray(wq, dtype=np.uint32).view(np.int32))
    w_scale = torch.from_numpy(np.ascontiguousarray(scales, dtype=np.float32))
    w_zeros = None if zeros is None else torch.from_numpy(np.ascontiguousarray(zeros, dtype=np.uint32).view(np.int32))
    return w_q, w_scale, w_zeros
