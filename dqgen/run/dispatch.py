"""``Kernel.matmul``: y = x @ dequant(W) by the fastest path for M.

- M <= 16 (decode): the fused GEMV (dqgen.run.matmul), unchanged;
- else, for 4- and 8-bit integer specs: the tensor-core GEMM (dqgen.run.gemm), on the GemmWeight packed beside the
  MatmulWeight by ``Kernel.pack_matmul`` or, for checkpoint tensors, packed once per tensor version (cached like
  the GEMV's);
- for checkpoint tensors and M at or past the GPU's ``dense_min_m`` (``DispatchRule``): dequantize into a dense
  weight and ``torch.matmul`` (cuBLAS), where a compute-bound GEMM of fp16 weights beats mma.sync with a
  conversion in its loop. The rule is read once per GPU name from ``<cache>/dispatch.json`` (written by
  ``scripts/gemm_dispatch_rule.py --write-rule`` after timing the three paths on that GPU); without an entry the
  defaults below apply. Other specs (floats, codebooks, 2/3-bit) keep the GEMV for every M;
- under torch.compile, the custom ops of dqgen.run.gemm_op, which make the same choice when they run.
"""

from __future__ import annotations

import json
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..emit.nvrtc import default_cache_dir
from .gemm import GemmWeight, _check_call, _torch, pack, run

if TYPE_CHECKING:
    from .runtime import Kernel

#: Rows of x the GEMV takes best (its two mma token tiles); the GEMM takes more.
GEMV_MAX_M = 16
#: Default of the dense rule where none was measured on this GPU: cuBLAS on dequantized weights from this M on
#: (the H100's measured rule, scripts/gemm_dispatch_rule.py: the GEMM's mma.sync loop reaches ~300 TFLOP/s, so
#: from M = 512 dequantize + cuBLAS is faster on every shape of the issue).
DEFAULT_DENSE_MIN_M = 512


@dataclass
class _Packed:
    weight: GemmWeight
    refs: tuple[Callable[[], Any] | None, ...]


_PACKED: dict[tuple, _Packed] = {}
_PACKED_MAX = 256
#: The GemmWeight that Kernel.pack_matmul made beside each MatmulWeight (dies with it).
_BESIDE: weakref.WeakKeyDictionary[Any, GemmWeight] = weakref.WeakKeyDictionary()


def _sig(t: Any) -> tuple | None:
    if t is None:
        return None
    try:
        version = t._version
    except RuntimeError:  # an inference-mode tensor has no version counter
        version = -1
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, version)


def packed(kernel: Kernel, qweight: Any, scales: Any, zeros: Any = None, *, g_idx: Any = None) -> GemmWeight:
    """The GemmWeight of these checkpoint tensors: packed on first use and again when any of them changes
    (torch's in-place version counter) or is freed."""
    tensors = (qweight, scales, zeros, g_idx)
    key = (kernel.op_key, *(_sig(t) for t in tensors))
    hit = _PACKED.get(key)
    if hit is not None and all(
        (r is None) == (t is None) and (r is None or r() is not None) for r, t in zip(hit.refs, tensors, strict=True)
    ):
        return hit.weight
    w = pack(kernel, qweight, scales, zeros, g_idx=g_idx)
    if len(_PACKED) >= _PACKED_MAX:
        _PACKED.clear()
    _PACKED[key] = _Packed(w, tuple(None if t is None else weakref.ref(t) for t in tensors))
    return w


def attach(kernel: Kernel, matmul_weight: Any, qweight: Any, scales: Any, zeros: Any, g_idx: Any) -> None:
    """Pack the GEMM layout beside a MatmulWeight (Kernel.pack_matmul), for specs the GEMM takes."""
    if kernel.gemm_ok:
        _BESIDE[matmul_weight] = pack(kernel, qweight, scales, zeros, g_idx=g_idx)


def beside(matmul_weight: Any) -> GemmWeight | None:
    """The GemmWeight packed beside a MatmulWeight, if any."""
    return _BESIDE.get(matmul_weight)


@dataclass(frozen=True)
class DispatchRule:
    """Per GPU: from which M the GEMM replaces the GEMV, and from which M (None: never) dequantize + cuBLAS
    replaces the GEMM on checkpoint tensors."""

    gemm_min_m: int = GEMV_MAX_M + 1
    dense_min_m: int | None = DEFAULT_DENSE_MIN_M


def rule_path() -> Path:
    return default_cache_dir() / "dispatch.json"


_RULES: dict[str, DispatchRule] = {}


def rule_for(device: int) -> DispatchRule:
    """The dispatch rule of this GPU (by name), read once from rule_path(); the defaults where none is stored."""
    name = dev_name(device)
    hit = _RULES.get(name)
    if hit is None:
        hit = DispatchRule()
        try:
            stored = json.loads(rule_path().read_text()).get(name)
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict):
            hit = DispatchRule(int(stored.get("gemm_min_m", hit.gemm_min_m)), stored.get("dense_min_m"))
        _RULES[name] = hit
    return hit


def save_rule(device: int, rule: DispatchRule) -> Path:
    """Store a measured rule for this GPU's name (scripts/gemm_bench.py --write-rule)."""
    path = rule_path()
    try:
        rules = json.loads(path.read_text())
    except (OSError, ValueError):
        rules = {}
    rules[dev_name(device)] = {"gemm_min_m": rule.gemm_min_m, "dense_min_m": rule.dense_min_m}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rules, indent=1, sort_keys=True))
    tmp.replace(path)
    _RULES.pop(dev_name(device), None)
    return path


def dev_name(device: int) -> str:
    torch = _torch()
    return str(torch.cuda.get_device_name(device))


def pick(M: int, rule: DispatchRule, *, gemm_ok: bool, dense_ok: bool) -> str:
    """'gemv', 'gemm' or 'dense' for M rows under ``rule`` (what dispatch runs; a pure function for the tests)."""
    if not gemm_ok or rule.gemm_min_m > M:
        return "gemv"
    if dense_ok and rule.dense_min_m is not None and rule.dense_min_m <= M:
        return "dense"
    return "gemm"


def _rows(x: Any) -> int:
    return int(np.prod(x.shape[:-1])) if x.dim() > 1 else 1


def dispatch(
    kernel: Kernel,
    x: Any,
    w: Any,
    scales: Any = None,
    zeros: Any = None,
    *,
    g_idx: Any = None,
    global_scale: Any = None,
    bias: Any = None,
    out: Any = None,
) -> Any:
    """``Kernel.matmul``: y = x @ W (+ bias) by the fastest path for M (module docstring)."""
    from . import matmul as mm

    torch = sys.modules.get("torch")
    if torch is not None and torch.compiler.is_compiling() and kernel.gemm_ok:
        # traced: one custom op that makes this choice when it runs (M may be symbolic here; dqgen.run.gemm_op)
        if isinstance(w, mm.MatmulWeight):
            if scales is not None or zeros is not None or g_idx is not None or global_scale is not None:
                raise TypeError(
                    "matmul: scales, zeros, g_idx and global_scale belong to pack_matmul when w is a MatmulWeight"
                )
            y = torch.ops.dqgen.matmul_dispatch(kernel.op_key, w.key, x, bias)
        elif scales is None:
            raise TypeError("matmul: pass a MatmulWeight (from pack_matmul), or qweight and scales")
        else:
            y = torch.ops.dqgen.matmul_dispatch_checkpoint(
                kernel.op_key, x, w, scales, zeros, g_idx, global_scale, bias
            )
        if out is None:
            return y
        out.copy_(y)
        return out
    if torch is None or torch.compiler.is_compiling() or not isinstance(x, torch.Tensor) or not x.is_cuda:
        # traced (specs the GEMM does not take): the GEMV's custom ops; bad x: the GEMV path's one-line errors
        return mm.matmul(kernel, x, w, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias, out=out)
    M = _rows(x)
    is_packed = isinstance(w, mm.MatmulWeight)
    gw = beside(w) if is_packed else None
    gemm_ok = kernel.gemm_ok and (gw is not None or not is_packed) and global_scale is None
    way = pick(M, rule_for(x.device.index or 0), gemm_ok=gemm_ok, dense_ok=not is_packed and scales is not None)
    if way == "gemv":
        return mm.matmul(kernel, x, w, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias, out=out)
    if way == "dense":
        W = kernel(w, scales, zeros, g_idx=g_idx)  # the dequantize call's checks name the bad tensor
        K, N = (int(d) for d in W.shape)
        x2, y = _check_call(torch, kernel.spec, x, K, N, x.device.index or 0, bias, out)
        y2 = y.view(-1, N)
        if bias is not None:
            torch.addmm(bias, x2, W, out=y2)
        else:
            torch.matmul(x2, W, out=y2)
        return y
    if gw is None:
        if scales is None:
            raise TypeError("matmul: pass a MatmulWeight (from pack_matmul), or qweight and scales")
        gw = packed(kernel, w, scales, zeros, g_idx=g_idx)
    return run(kernel, x, gw, bias=bias, out=out)
