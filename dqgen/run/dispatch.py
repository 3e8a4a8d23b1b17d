"""``Kernel.matmul``: y = x @ dequant(W) by the fastest path for M, by a per-GPU ``DispatchRule``.

- M below the rule's ``gemm_min_m`` (17 by default; 16 on the H100, whose measured GEMM beats the GEMV at 16
  tokens): the fused GEMV (dqgen.run.matmul), up to 16 tokens a launch;
- from there, for 4- and 8-bit integer specs: the tensor-core GEMM (dqgen.run.gemm), on the GemmWeight packed
  beside the MatmulWeight by ``Kernel.pack_matmul`` or, for checkpoint tensors, packed once per tensor version
  (cached like the GEMV's);
- from the rule's ``dense_min_m`` on, where the checkpoint tensors are at hand (passed in the call, or alive and
  unchanged beside a packed weight): dequantize into a dense weight and ``torch.matmul`` (cuBLAS), where a
  compute-bound GEMM of fp16 weights beats mma.sync with a conversion in its loop;
- other specs (floats, codebooks, 2/3-bit) keep the GEMV for every M;
- under torch.compile, the custom ops of dqgen.run.gemm_op, which make the same choice when they run.

The rule of a GPU (by name, looked up once per device): this machine's measurement in ``<cache>/dispatch.json``
(``scripts/gemm_dispatch_rule.py --write-rule``), else the release's (``dispatch_rules.json`` beside this module,
measured on an H100), else the defaults below.
"""

from __future__ import annotations

import json
import math
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.formats import torch_dtype
from ..emit.nvrtc import default_cache_dir
from .gemm import GemmWeight, _check_call, _torch, pack, run
from .packcache import PackCache, version

if TYPE_CHECKING:
    from .runtime import Kernel

#: Rows of x the GEMV takes best (its two mma token tiles); the GEMM takes more.
GEMV_MAX_M = 16
#: Default of the dense rule where none was measured on this GPU: cuBLAS on dequantized weights from this M on
#: (the H100's measured rule, scripts/gemm_dispatch_rule.py: the GEMM's mma.sync loop reaches ~300 TFLOP/s, so
#: from M = 512 dequantize + cuBLAS is faster on every shape of the issue).
DEFAULT_DENSE_MIN_M = 512


_PACKED: PackCache[GemmWeight] = PackCache()


@dataclass
class _Beside:
    """What Kernel.pack_matmul keeps beside a MatmulWeight: the GEMM's layout, and weak references to the
    checkpoint tensors it was packed from (with their versions), so that very large M can dequantize + cuBLAS
    while the caller (e.g. QuantLinear's buffers) still holds them unchanged, at no extra memory."""

    weight: GemmWeight | None
    checkpoint: tuple[tuple[Callable[[], Any], int] | None, ...]


#: Per MatmulWeight (dies with it).
_BESIDE: weakref.WeakKeyDictionary[Any, _Beside] = weakref.WeakKeyDictionary()


def packed(kernel: Kernel, qweight: Any, scales: Any, zeros: Any = None, *, g_idx: Any = None) -> GemmWeight:
    """The GemmWeight of these checkpoint tensors: packed on first use and again when any of them changes
    (torch's in-place version counter) or is freed."""
    return _PACKED.get(
        kernel.op_key, (qweight, scales, zeros, g_idx), lambda: pack(kernel, qweight, scales, zeros, g_idx=g_idx)
    )


def attach(kernel: Kernel, matmul_weight: Any, qweight: Any, scales: Any, zeros: Any, g_idx: Any, gemm: bool) -> None:
    """Beside a MatmulWeight (Kernel.pack_matmul): the GEMM layout (``gemm`` and specs the GEMM takes) and weak
    references to its checkpoint tensors."""
    weight = pack(kernel, qweight, scales, zeros, g_idx=g_idx) if gemm and kernel.gemm_ok else None
    refs = tuple(None if t is None else (weakref.ref(t), version(t)) for t in (qweight, scales, zeros, g_idx))
    _BESIDE[matmul_weight] = _Beside(weight, refs)


def beside(matmul_weight: Any) -> GemmWeight | None:
    """The GemmWeight packed beside a MatmulWeight, if any."""
    hit = _BESIDE.get(matmul_weight)
    return None if hit is None else hit.weight


def checkpoint_of(matmul_weight: Any) -> tuple[Any, ...] | None:
    """(qweight, scales, zeros, g_idx) a MatmulWeight was packed from, if every one is still alive and unchanged
    (torch's version counter; an inference-mode tensor has none, so it never counts as unchanged); else None (the
    packed layouts are then the only truth)."""
    hit = _BESIDE.get(matmul_weight)
    if hit is None:
        return None
    out: list[Any] = []
    for ref in hit.checkpoint:
        if ref is None:
            out.append(None)
            continue
        t = ref[0]()
        if t is None or ref[1] < 0 or version(t) != ref[1]:  # an inference-mode tensor's writes are not counted
            return None
        out.append(t)
    return tuple(out)


@dataclass(frozen=True)
class DispatchRule:
    """Per GPU: from which M the GEMM replaces the GEMV, and from which M (None: never) dequantize + cuBLAS
    replaces the GEMM where the checkpoint tensors are at hand (passed, or alive beside a packed weight)."""

    gemm_min_m: int = GEMV_MAX_M + 1
    dense_min_m: int | None = DEFAULT_DENSE_MIN_M


def rule_path() -> Path:
    """This machine's measured rules (scripts/gemm_dispatch_rule.py --write-rule), by GPU name."""
    return default_cache_dir() / "dispatch.json"


#: The rules measured for dqgen's release, by GPU name (scripts/gemm_dispatch_rule.py on that GPU; shipped in
#: the wheel): what a GPU of that name gets before, or without, a measurement of its own.
SHIPPED_RULES = Path(__file__).with_name("dispatch_rules.json")

_RULES: dict[str, DispatchRule] = {}
#: Device ordinal -> GPU name.
_NAMES: dict[int, str] = {}


def _stored(path: Path, name: str) -> DispatchRule | None:
    try:
        entry = json.loads(path.read_text()).get(name)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(entry, dict):
        return None
    dense = entry.get("dense_min_m")
    try:
        return DispatchRule(int(entry.get("gemm_min_m", GEMV_MAX_M + 1)), None if dense is None else int(dense))
    except (TypeError, ValueError):  # a hand-edited value that is no number: as if there were no entry
        return None


def rule_for(device: int) -> DispatchRule:
    """The dispatch rule of this GPU (by name), looked up once: this machine's measurement (rule_path()), else
    the release's (SHIPPED_RULES), else the defaults."""
    name = _NAMES.get(device)
    if name is None:  # asking the driver for the name costs more than a launch: once per device
        name = _NAMES[device] = dev_name(device)
    hit = _RULES.get(name)
    if hit is None:
        hit = _stored(rule_path(), name) or _stored(SHIPPED_RULES, name) or DispatchRule()
        _RULES[name] = hit
    return hit


def save_rule(device: int, rule: DispatchRule) -> Path:
    """Store a measured rule for this GPU's name on this machine (scripts/gemm_dispatch_rule.py --write-rule)."""
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
    return math.prod(x.shape[:-1]) if x.dim() > 1 else 1


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
    rule = rule_for(x.device.index or 0)
    if is_packed:
        # the dense path needs the checkpoint tensors: alive and unchanged beside a packed weight, or passed
        checkpoint = checkpoint_of(w) if gemm_ok and rule.dense_min_m is not None and rule.dense_min_m <= M else None
        dense_ok = checkpoint is not None
    else:
        checkpoint = (w, scales, zeros, g_idx)
        dense_ok = scales is not None
    way = pick(M, rule, gemm_ok=gemm_ok, dense_ok=dense_ok)
    if way == "gemv":
        return mm.matmul(kernel, x, w, scales, zeros, g_idx=g_idx, global_scale=global_scale, bias=bias, out=out)
    if way == "dense":
        assert checkpoint is not None
        q, s, z, gi = checkpoint
        if gi is None:  # into a given out: the dequantize call's per-call fast path (its checks name a bad tensor)
            K, N = kernel.output_shape(tuple(q.shape))
            W = kernel(
                q, s, z, out=torch.empty((K, N), dtype=torch_dtype(kernel.spec.target_type, torch), device=q.device)
            )
        else:  # act-order: no out, so that the g_idx check is not redone for every new out address
            W = kernel(q, s, z, g_idx=gi)
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
