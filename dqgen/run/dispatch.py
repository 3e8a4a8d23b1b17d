"""``Kernel.matmul``: y = x @ dequant(W) by the fastest path for M, by a per-GPU ``DispatchRule``.

- M below the rule's ``gemm_min_m`` (17 by default; 16 on the H100 and other sm_90 GPUs, measured; a rule from
  under 16 sends those rows to the Hopper GEMM only where it pays): the fused GEMV (dqgen.run.matmul), up to 16
  tokens a launch; for a weight shape the rule's sweep timed at up to 16 rows, the GEMV or the GEMM as measured
  there (on the H100 the widest weights take the GEMM from one row: ``MeasuredShape.gemm_small_ms``);
- from there, for 4- and 8-bit integer specs: the tensor-core GEMM (dqgen.run.gemm; on sm_90 its wgmma main
  loop, dqgen.run.gemm90), on the GemmWeight packed beside the MatmulWeight by ``Kernel.pack_matmul`` or, for
  checkpoint tensors, packed once per tensor version (cached like the GEMV's); for the 4- and 8-bit float and
  codebook specs the Hopper GEMM takes (fp8, nf4, ...: ``MatmulTarget.hopper_only``), that GEMM on an sm_90 GPU
  where it can take the call, under the same rule, and the GEMV wherever it cannot (no sm_80 GEMM of theirs);
- from the rule's ``dense_min_m`` on (512 by default; never on sm_90), and for a weight shape of the rule's sweep
  (``DispatchRule.shapes``) at the M where it measured faster (on the H100: small N, e.g. 4096x1024 from 64 tokens,
  where the GEMM's 128-feature tiles leave SMs idle), where the checkpoint tensors are at hand (passed in the call,
  or alive and unchanged beside a packed weight): dequantize into a dense weight and ``torch.matmul`` (cuBLAS);
  never for NVFP4, whose fp32 global scale goes with the packed GEMM weight into the Hopper GEMM's launch;
- other specs (2-, 3- and 6-bit codes: gemm90.refusal90 says why) keep the GEMV for every M;
- under torch.compile, one custom op of dqgen.run.torch_op (``dqgen::matmul_dispatch*``; ``dqgen::matmul*`` for
  specs the GEMM does not take), which makes the same choice when it runs.

The paths take a ``MatmulTarget`` (the compiled spec, its key, whether the GEMM takes it, and the dense path's
dequantize call), built once by ``Kernel``; whether the call is traced is decided once, by the caller.

The rule of a GPU (by name, looked up once per device): this machine's measurement in ``<cache>/dispatch.json``
(``devtools/gemm_dispatch_rule.py --write-rule``), else the release's (``dispatch_rules.json`` beside this module,
measured on an H100 and an H200), else the defaults below.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.formats import torch_dtype
from ..core.spec import Spec
from ..emit.nvrtc import default_cache_dir
from ..emit.pipeline import Artifact
from ..layout.gemm import TILE_K
from . import device as dev
from .errors import imported_torch as _torch
from .gemm import GemmWeight, pack_gemm, packed_gemm, run_gemm
from .gemm90 import hopper_pays, is_hopper, x_ineligible
from .matmul import MatmulWeight, packed_gemv, run_gemv
from .operands import check_activation
from .packcache import version
from .problem import Dequantizer, output_shape

#: Rows of x the GEMV takes best (its two mma token tiles); the GEMM takes more.
GEMV_MAX_M = 16
#: Default of the dense rule where none was measured on this GPU: cuBLAS on dequantized weights from this M on
#: (the H100's measured rule, devtools/gemm_dispatch_rule.py: the GEMM's mma.sync loop reaches ~300 TFLOP/s, so
#: from M = 512 dequantize + cuBLAS is faster on every shape of the issue).
DEFAULT_DENSE_MIN_M = 512


@dataclass(frozen=True, eq=False)
class MatmulTarget:
    """What the matmul paths take of a compiled spec, fixed when its Kernel is made."""

    artifact: Artifact
    key: str  # the spec's key (Kernel.op_key): names it in the custom ops and keys the pack caches
    #: Whether the tensor-core GEMM takes this spec: decided once, so that the dispatch reads a constant when
    #: torch.compile traces it (dynamo cannot trace the spec's properties).
    gemm_ok: bool
    dequantize: Dequantizer  # the dense path's dequantize call (the Kernel itself)
    #: The Hopper GEMM is the spec's only GEMM (a float / codebook spec: gemm90.hopper_only): where it cannot take
    #: a call (another GPU, x rows TMA cannot address) the GEMV runs, not the sm_80 GEMM nor dequantize + cuBLAS.
    hopper_only: bool = False
    #: The spec has an fp32 global scale (NVFP4): it goes with the GEMM's weight, and the dense path (whose
    #: checkpoint tuple holds none) is not taken.
    global_scale: bool = False


@dataclass
class _Beside:
    """What Kernel.pack_matmul keeps beside a MatmulWeight: the GEMM's layout, and weak references to the
    checkpoint tensors it was packed from (with their versions), so that very large M can dequantize + cuBLAS
    while the caller (e.g. QuantLinear's buffers) still holds them unchanged, at no extra memory."""

    weight: GemmWeight | None
    checkpoint: tuple[tuple[Callable[[], Any], int] | None, ...]


#: Per MatmulWeight (dies with it).
_BESIDE: weakref.WeakKeyDictionary[Any, _Beside] = weakref.WeakKeyDictionary()


def attach(
    target: MatmulTarget,
    matmul_weight: Any,
    qweight: Any,
    scales: Any,
    zeros: Any,
    g_idx: Any,
    gemm: bool,
    global_scale: Any = None,
) -> None:
    """Beside a MatmulWeight (Kernel.pack_matmul): the GEMM layout (``gemm`` and specs the GEMM takes; with the
    global scale, NVFP4) and weak references to its checkpoint tensors."""
    spec = target.artifact.spec
    gemm = gemm and target.gemm_ok and (not target.hopper_only or is_hopper(matmul_weight.device))
    weight = pack_gemm(spec, qweight, scales, zeros, g_idx=g_idx, global_scale=global_scale) if gemm else None
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


#: How much faster dequantize + cuBLAS must have run than the GEMM at a measured (K, N, M) for the rule to send that
#: point to it: the issue's bound on what a user may pay over the best path (3%).
DENSE_MARGIN = 1.03


@dataclass(frozen=True)
class MeasuredShape:
    """One weight shape (K x N) of a GPU's rule sweep: the M (> GEMV_MAX_M) it was timed at and those of them where
    dequantize + cuBLAS ran more than DENSE_MARGIN faster than the GEMM (on the H100: small N, where the GEMM's tiles
    leave a partial wave and cuBLAS's smaller ones do not; docs/experiments/issue23.md, session 32); the M up to
    GEMV_MAX_M it was timed at (``small_ms``) and those where the GEMM ran more than DENSE_MARGIN faster than the GEMV
    (``gemm_small_ms``: on the H100 the widest weights, where the Hopper GEMM's deeper pipeline wins from 1 row)."""

    k: int
    n: int
    ms: tuple[int, ...]
    dense_ms: tuple[int, ...] = ()
    small_ms: tuple[int, ...] = ()
    gemm_small_ms: tuple[int, ...] = ()

    def dense(self, M: int) -> bool | None:
        """Whether M rows go to dequantize + cuBLAS: the choice at the measured M nearest M (on a log scale; the
        smaller on a tie), None below the smallest (not measured: the rule's dense_min_m decides)."""
        if not self.ms or min(self.ms) > M:
            return None
        return _nearest(self.ms, M) in self.dense_ms

    def gemm_small(self, M: int) -> bool | None:
        """Whether M (1..GEMV_MAX_M) rows go to the GEMM rather than the GEMV: the choice at the measured small M
        nearest M (as ``dense``), None outside the measured range (the rule's gemm_min_m decides; an empty batch
        the GEMV returns at once)."""
        if not self.small_ms or not min(self.small_ms) <= M <= min(GEMV_MAX_M, max(self.small_ms)):
            return None
        return _nearest(self.small_ms, M) in self.gemm_small_ms


def _nearest(ms: tuple[int, ...], M: int) -> int:
    """The measured M nearest M on a log scale (the smaller on a tie)."""
    return min(ms, key=lambda m: (abs(math.log2(m / M)), m))


@dataclass(frozen=True)
class DispatchRule:
    """Per GPU: from which M the GEMM replaces the GEMV, and from which M (None: never) dequantize + cuBLAS
    replaces the GEMM where the checkpoint tensors are at hand (passed, or alive beside a packed weight); for the
    weight shapes of its sweep (``shapes``), the M where dequantize + cuBLAS measured faster instead: for specs of
    the sweep's spec's code family (``sweep_spec``: its bits and code kind, in-order K) on GPUs of its SM count
    (``sms``: the partial waves behind those choices move with it)."""

    gemm_min_m: int = GEMV_MAX_M + 1
    dense_min_m: int | None = DEFAULT_DENSE_MIN_M
    shapes: tuple[MeasuredShape, ...] = ()
    sweep_spec: str | None = None
    sms: int | None = None

    def measured(self, k_n: tuple[int, int] | None) -> MeasuredShape | None:
        """The sweep's entry for a K x N weight (``k_n``; None: unknown), None where the sweep did not time it."""
        return next((shape for shape in self.shapes if (shape.k, shape.n) == k_n), None)

    def gemm_small(self, M: int, k_n: tuple[int, int] | None) -> bool | None:
        """The measured choice for M (<= GEMV_MAX_M) rows of a K x N weight of the sweep: the GEMM (True) or the GEMV
        (False); None where the sweep did not time this shape at small M (gemm_min_m decides)."""
        shape = self.measured(k_n)
        return None if shape is None else shape.gemm_small(M)

    def dense(self, M: int, k_n: tuple[int, int] | None = None) -> bool:
        """Whether M rows of a K x N weight (``k_n``; None: unknown) go to dequantize + cuBLAS under this rule."""
        shape = self.measured(k_n)
        here = None if shape is None else shape.dense(M)
        if here is not None:
            return here
        return self.dense_min_m is not None and self.dense_min_m <= M


#: The GPU whose measured rule an sm_90 GPU without one of its own follows (dispatch_rules.json).
HOPPER_REFERENCE_GPU = "NVIDIA H100 80GB HBM3"
#: What an sm_90 GPU follows where the Hopper GEMM cannot take the call and the sm_80 GEMM runs (x rows not 16-byte
#: aligned on a weight whose K slots are in order: its gather entry): the H100's rule for the sm_80 GEMM, measured
#: 2026-11-24 (issue 14; the shipped rule before the Hopper GEMM): the GEMM from 16 tokens, dequantize + cuBLAS
#: from 512.
SM80_ON_HOPPER_RULE = DispatchRule(gemm_min_m=16, dense_min_m=512)


def rule_path() -> Path:
    """This machine's measured rules (devtools/gemm_dispatch_rule.py --write-rule), by GPU name."""
    return default_cache_dir() / "dispatch.json"


#: The rules measured for dqgen's release, by GPU name (devtools/gemm_dispatch_rule.py on that GPU; shipped in
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
        measured = tuple(_measured_shape(m) for m in entry.get("shapes", ()))
        sweep_spec, sms = entry.get("sweep_spec"), entry.get("sms")
        return DispatchRule(
            int(entry.get("gemm_min_m", GEMV_MAX_M + 1)),
            None if dense is None else int(dense),
            measured,
            None if sweep_spec is None else str(sweep_spec),
            None if sms is None else int(sms),
        )
    except (TypeError, ValueError, KeyError, AttributeError):  # a hand-edited entry: as if there were none
        return None


def _measured_shape(m: dict[str, Any]) -> MeasuredShape:
    """A rule file's measured shape, else ValueError (the entry is then ignored): its M lists positive ints, the
    dense choices among its M above GEMV_MAX_M, the GEMM choices among its M up to GEMV_MAX_M."""
    ms, dense_ms = _positive_ints(m["ms"]), _positive_ints(m.get("dense_ms", []))
    small_ms, gemm_small_ms = _positive_ints(m.get("small_ms", [])), _positive_ints(m.get("gemm_small_ms", []))
    if any(M <= GEMV_MAX_M for M in ms) or not set(dense_ms) <= set(ms):
        raise ValueError(f"ms: expected M above {GEMV_MAX_M}, dense_ms among them, got {ms}, {dense_ms}")
    if any(M > GEMV_MAX_M for M in small_ms) or not set(gemm_small_ms) <= set(small_ms):
        raise ValueError(f"small_ms: expected M up to {GEMV_MAX_M}, gemm_small_ms among them, got {small_ms}")
    return MeasuredShape(int(m["k"]), int(m["n"]), ms, dense_ms, small_ms, gemm_small_ms)


def _positive_ints(values: Any) -> tuple[int, ...]:
    """A rule file's list of M: positive ints (not booleans), else ValueError (the entry is then ignored)."""
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values
    ):
        raise ValueError(f"expected a list of positive ints, got {values!r}")
    return tuple(values)


#: The rule of an sm_90 GPU with no measurement of its own (an H800, an H100 of another name): the H100's measured
#: rule with the Hopper GEMM (dispatch_rules.json: dequantize + cuBLAS at the shapes and M where it measured faster;
#: the same 132 SMs, so the same partial waves), else the GEMM from 4 tokens and never dequantize + cuBLAS.
HOPPER_RULE = _stored(SHIPPED_RULES, HOPPER_REFERENCE_GPU) or DispatchRule(gemm_min_m=4, dense_min_m=None)


def rule_for(device: int) -> DispatchRule:
    """The dispatch rule of this GPU (by name), looked up once: this machine's measurement (rule_path()), else
    the release's (SHIPPED_RULES), else the defaults."""
    name = _NAMES.get(device)
    if name is None:  # asking the driver for the name costs more than a launch: once per device
        name = _NAMES[device] = dev_name(device)
    hit = _RULES.get(name)
    if hit is None:
        hit = _stored(rule_path(), name) or _stored(SHIPPED_RULES, name)
        if hit is None:
            hit = HOPPER_RULE if is_hopper(device) else DispatchRule()
        if hit.shapes and hit.sms is not None and hit.sms != dev.sm_count(device):
            hit = replace(hit, shapes=())  # its per-shape choices are another SM count's partial waves
        _RULES[name] = hit
    return hit


def save_rule(device: int, rule: DispatchRule) -> Path:
    """Store a measured rule for this GPU's name on this machine (devtools/gemm_dispatch_rule.py --write-rule)."""
    path = rule_path()
    try:
        rules = json.loads(path.read_text())
    except (OSError, ValueError):
        rules = {}
    rules[dev_name(device)] = rule_entry(rule)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rules, indent=1, sort_keys=True))
    tmp.replace(path)
    _RULES.pop(dev_name(device), None)
    return path


def rule_entry(rule: DispatchRule) -> dict[str, Any]:
    """A rule as dispatch.json / dispatch_rules.json hold it (what _stored reads back)."""
    entry: dict[str, Any] = {"gemm_min_m": rule.gemm_min_m, "dense_min_m": rule.dense_min_m}
    if rule.shapes:
        entry["shapes"] = [
            {
                "k": m.k,
                "n": m.n,
                "ms": list(m.ms),
                "dense_ms": list(m.dense_ms),
                "small_ms": list(m.small_ms),
                "gemm_small_ms": list(m.gemm_small_ms),
            }
            for m in rule.shapes
        ]
        entry["sweep_spec"], entry["sms"] = rule.sweep_spec, rule.sms
    return entry


def code_family(spec: Spec) -> tuple[int, str]:
    """(bits, "integer" / "float" / "codebook"): specs of one family run the same GEMM main loop and dequantize at
    the same cost (unsigned, signed and biased integers differ by a constant the conversion folds in)."""
    kind = spec.source.kind
    integer = kind.integer
    return spec.source.bits, "integer" if integer else kind.value


@functools.cache
def _sweep_family(spec_name: str) -> tuple[int, str] | None:
    """code_family of a rule's sweep spec by name, None where no such spec exists here."""
    from ..core.spec import load_spec

    try:
        spec = load_spec(spec_name)
    except Exception:  # a rule from a newer dqgen may name a spec this one lacks: its shapes then apply to none
        return None
    return code_family(spec)


def shapes_apply(rule: DispatchRule, target: MatmulTarget) -> bool:
    """Whether the rule's measured shapes decide for this spec: one of the sweep spec's code_family, K in order
    (act-order's dense path checks g_idx, the GEMM gathers), and a spec the sm_80 GEMM also takes (not hopper_only:
    its float codes were not swept). A rule that does not name its sweep spec (a hand-written entry) decides for
    none: whose costs its shapes hold is unknown."""
    if not rule.shapes or target.hopper_only:
        return False
    spec = target.artifact.spec
    if spec.act_order:
        return False
    return rule.sweep_spec is not None and _sweep_family(rule.sweep_spec) == code_family(spec)


def dev_name(device: int) -> str:
    torch = _torch()
    return str(torch.cuda.get_device_name(device))


def pick(
    M: int,
    rule: DispatchRule,
    *,
    gemm_ok: bool,
    dense_ok: bool,
    k_n: tuple[int, int] | None = None,
    small_gemm: bool | None = None,
) -> str:
    """'gemv', 'gemm' or 'dense' for M rows of a K x N weight (``k_n``) under ``rule`` (what dispatch runs; a pure
    function for the tests). ``small_gemm``: up to GEMV_MAX_M rows, gemm_for_small_m's verdict over gemm_min_m."""
    if not gemm_ok or not (rule.gemm_min_m <= M if small_gemm is None else small_gemm):
        return "gemv"
    if dense_ok and rule.dense(M, k_n):
        return "dense"
    return "gemm"


def _rows(x: Any) -> int:
    return math.prod(x.shape[:-1]) if x.dim() > 1 else 1


_PACKED_EXTRAS = "matmul: scales, zeros, g_idx and global_scale belong to pack_matmul when w is a MatmulWeight"
_NO_WEIGHT = "matmul: pass a MatmulWeight (from pack_matmul), or qweight and scales"


def dispatch(
    target: MatmulTarget,
    x: Any,
    w: Any,
    scales: Any = None,
    zeros: Any = None,
    *,
    g_idx: Any = None,
    global_scale: Any = None,
    bias: Any = None,
    out: Any = None,
    traced: bool = False,
) -> Any:
    """``Kernel.matmul``: y = x @ W (+ bias) by the fastest path for M (module docstring). ``traced``: the caller
    runs under torch.compile (decided once per call, at the entry): the call becomes one custom op."""
    is_packed = isinstance(w, MatmulWeight)
    if is_packed:
        if scales is not None or zeros is not None or g_idx is not None or global_scale is not None:
            raise TypeError(_PACKED_EXTRAS)
    elif scales is None:
        raise TypeError(_NO_WEIGHT)
    if traced:
        return _traced(target, x, w, is_packed, scales, zeros, g_idx, global_scale, bias, out)
    torch = sys.modules.get("torch")
    if torch is None or not target.gemm_ok or not isinstance(x, torch.Tensor) or not x.is_cuda:
        # specs the GEMM does not take: the GEMV for every M; bad x: the GEMV path's one-line errors
        return _gemv(target, x, w, is_packed, scales, zeros, g_idx, global_scale, bias, out)
    M = _rows(x)
    gw = beside(w) if is_packed else None
    # a global scale goes with the GEMM's weight where the spec has one (NVFP4); elsewhere the GEMV names it
    gemm_ok = (gw is not None or not is_packed) and (global_scale is None or target.global_scale)
    device = x.device.index or 0
    hopper_ok, rule, k_n = _route(target, x, w, gw, scales, g_idx, gemm_ok)
    if target.hopper_only and not hopper_ok:  # its only GEMM cannot run this call
        return _gemv(target, x, w, is_packed, scales, zeros, g_idx, global_scale, bias, out)
    # the dense path's checkpoint holds no global scale (NVFP4): the GEMM it would replace runs
    dense_spec = not target.global_scale
    if is_packed:
        # the dense path needs the checkpoint tensors: alive and unchanged beside a packed weight, or passed
        dense_m = rule.dense(M, k_n)
        checkpoint = checkpoint_of(w) if gemm_ok and dense_spec and dense_m else None
        dense_ok = checkpoint is not None
    else:
        checkpoint = (w, scales, zeros, g_idx)
        dense_ok = dense_spec
    small_gemm = None
    if gemm_ok and M <= GEMV_MAX_M:  # the GEMV or the GEMM, by the measured shape or the rule's small-M narrowing
        small_gemm = gemm_for_small_m(
            M, rule, device, hopper_ok, functools.partial(_weight_dims, w, gw, scales, target), k_n
        )
    way = pick(M, rule, gemm_ok=gemm_ok, dense_ok=dense_ok, k_n=k_n, small_gemm=small_gemm)
    if way == "gemv":
        return _gemv(target, x, w, is_packed, scales, zeros, g_idx, global_scale, bias, out)
    spec = target.artifact.spec
    if way == "dense":
        assert checkpoint is not None
        return _dense(torch, target, x, checkpoint, bias, out)
    if gw is None:
        gw = packed_gemm(spec, target.key, w, scales, zeros, g_idx=g_idx, global_scale=global_scale)
    return run_gemm(spec, x, gw, bias=bias, out=out)


def narrowed_gemm(M: int, gemm_min_m: int, hopper_pays_here: Callable[[], bool] | None) -> bool:
    """Whether M (<= GEMV_MAX_M) rows go to the GEMM by ``gemm_min_m`` alone: from it; below GEMV_MAX_M on an sm_90
    GPU (``hopper_pays_here`` given) only where the GEMM that would run is the Hopper kernel and pays for this
    weight (it is asked only then). The sm_80 kernel beats the GEMV only from 16 tokens on the H100 (issue 14). A
    pure function: the rule's sweep (dispatch_sweep.regret) models the dispatch with it."""
    if gemm_min_m > M:
        return False
    return M >= GEMV_MAX_M or hopper_pays_here is None or hopper_pays_here()


def gemm_for_small_m(
    M: int,
    rule: DispatchRule,
    device: int,
    hopper_ok: bool,
    n_k: Callable[[], tuple[int, int] | None],
    k_n: tuple[int, int] | None,
) -> bool:
    """Whether M <= GEMV_MAX_M rows go to the GEMM, not the GEMV: where the rule's sweep timed this weight's shape
    (``k_n``, given where its measured shapes apply) at small M, its choice at the nearest measured M (the sweep
    timed the very paths this call would take: the GEMM run_gemm picks, the GEMV); else narrowed_gemm, on an sm_90
    GPU with ``hopper_ok`` (the Hopper GEMM can take the call) and gemm90.hopper_pays for the weight's N and K tiles
    (``n_k``, asked for only then)."""
    measured = rule.gemm_small(M, k_n)
    if measured is not None:
        return measured

    def pays() -> bool:
        dims = n_k() if hopper_ok else None
        return dims is not None and hopper_pays(dims[0], dims[1], M, device)

    return narrowed_gemm(M, rule.gemm_min_m, pays if is_hopper(device) else None)


def effective_rule(device: int, hopper_ok: bool) -> DispatchRule:
    """The rule a call follows: this GPU's (rule_for), but on an sm_90 GPU where the Hopper GEMM cannot take the
    call (``hopper_ok`` False) the sm_80 GEMM's (SM80_ON_HOPPER_RULE)."""
    return SM80_ON_HOPPER_RULE if not hopper_ok and is_hopper(device) else rule_for(device)


def takes_gemv(target: MatmulTarget, x: Any, w: Any, scales: Any, g_idx: Any, M: int) -> bool:
    """Whether ``dispatch`` gives these M <= 16 rows of a spec the GEMM takes to the GEMV (what the fast path
    remembers): the same rule, Hopper check and small-M narrowing as the dispatch."""
    device = x.device.index or 0
    gw = beside(w) if isinstance(w, MatmulWeight) else None
    hopper_ok, rule, k_n = _route(target, x, w, gw, scales, g_idx, True)
    if target.hopper_only and not hopper_ok:
        return True
    return not gemm_for_small_m(M, rule, device, hopper_ok, functools.partial(_weight_dims, w, gw, scales, target), k_n)


def _route(
    target: MatmulTarget, x: Any, w: Any, gw: GemmWeight | None, scales: Any, g_idx: Any, gemm_ok: bool
) -> tuple[bool, DispatchRule, tuple[int, int] | None]:
    """What dispatch and takes_gemv decide by: whether the Hopper GEMM can take the call, the rule it follows
    (effective_rule), and the weight's (K, N) where the rule's measured shapes decide it, else None: a spec of the
    sweep's family (shapes_apply) and K slots in order, as the sweep's weights were (gathered slots read x through
    the gather kernel and the padded slots too: another cost the sweep did not time)."""
    device = x.device.index or 0
    hopper_ok = gemm_ok and is_hopper(device) and _hopper_can_take(gw, x, g_idx, scales, target)
    rule = effective_rule(device, hopper_ok)
    if not shapes_apply(rule, target) or _slots_gathered(gw, int(x.shape[-1]), g_idx, scales, target):
        return hopper_ok, rule, None
    return hopper_ok, rule, _k_n(w, gw, scales, target)


def _slots_gathered(gw: GemmWeight | None, K: int, g_idx: Any, scales: Any, target: MatmulTarget | None) -> bool:
    """Whether the weight's GEMM reads gathered K slots (act-order, groups of no whole 64-k tiles): the packed
    weight's flag; in the checkpoint form a g_idx, or an integer spec's groups of no whole 64-k tiles (a float spec's
    small groups stay in order)."""
    if gw is not None:
        return bool(gw.gather)
    if target is not None and target.hopper_only:
        return False
    groups = int(scales.shape[0]) if scales is not None and hasattr(scales, "shape") and scales.shape else 1
    return g_idx is not None or bool(groups > 1 and (K // groups) % TILE_K)


def _k_n(w: Any, gw: GemmWeight | None, scales: Any, target: MatmulTarget) -> tuple[int, int] | None:
    """(K, N) of the weight a call multiplies by (what the rule's measured shapes are keyed by): the packed GEMM
    weight's, or the checkpoint tensors'."""
    if gw is not None:
        return gw.K, gw.N
    if scales is not None and hasattr(w, "shape"):
        return output_shape(target.artifact.spec, tuple(w.shape))
    return None


def _weight_dims(w: Any, gw: GemmWeight | None, scales: Any, target: MatmulTarget) -> tuple[int, int] | None:
    """(N, K tiles of the GEMM layout) of the weight a call multiplies by: the packed GEMM weight's, or the
    checkpoint tensors' (before they are packed)."""
    if gw is not None:
        return gw.N, gw.k_tiles  # its K slots, padded where gathered
    k_n = _k_n(w, None, scales, target)
    return None if k_n is None else (k_n[1], -(-k_n[0] // TILE_K))


def _hopper_can_take(
    gw: GemmWeight | None, x: Any, g_idx: Any = None, scales: Any = None, target: MatmulTarget | None = None
) -> bool:
    """Whether the Hopper GEMM could run this call (gemm90.hopper_ineligible's conditions): a weight with gathered
    K slots (act-order, groups of no whole 64-k tiles) with any x, which the gather kernel puts into slot order
    first; in-order slots with x rows TMA can address (16-byte aligned, unit inner stride), judged on the rows
    run_gemm reads (x as [M, K]). In the checkpoint form (no packed weight yet) a g_idx, or an integer spec's groups
    of no whole 64-k tiles, mean gathered slots; a float spec's small groups stay in order. The GPU is checked by
    the caller."""
    if _slots_gathered(gw, int(x.shape[-1]), g_idx, scales, target):
        return True
    return x.stride(-1) == 1 and not x_ineligible(x.data_ptr(), _row_stride(x), int(x.shape[-1]))


def _row_stride(x: Any) -> int:
    """The row stride of x as [M, K] (run_gemm's x.reshape(-1, K) where that is a view): the stride of the innermost
    leading dimension of more than one element, K where there is one row."""
    for d in range(x.dim() - 2, -1, -1):
        if x.shape[d] > 1:
            return int(x.stride(d))
    return int(x.shape[-1])


def _gemv(
    target: MatmulTarget,
    x: Any,
    w: Any,
    is_packed: bool,
    scales: Any,
    zeros: Any,
    g_idx: Any,
    global_scale: Any,
    bias: Any,
    out: Any,
) -> Any:
    """The eager GEMV on a packed weight, or on the checkpoint tensors packed once per version."""
    if not is_packed:
        w = packed_gemv(target.artifact, target.key, w, scales, zeros, g_idx=g_idx, global_scale=global_scale)
    return run_gemv(target.artifact, x, w, bias=bias, out=out)


def _dense(torch: Any, target: MatmulTarget, x: Any, checkpoint: tuple[Any, ...], bias: Any, out: Any) -> Any:
    """Dequantize the checkpoint tensors into a dense weight and multiply with torch (cuBLAS)."""
    spec = target.artifact.spec
    q, s, z, gi = checkpoint
    if gi is None:  # into a given out: the dequantize call's per-call fast path (its checks name a bad tensor)
        K, N = output_shape(spec, tuple(q.shape))
        W = target.dequantize(
            q, s, z, out=torch.empty((K, N), dtype=torch_dtype(spec.target_type, torch), device=q.device)
        )
    else:  # act-order: no out, so that the g_idx check is not redone for every new out address
        W = target.dequantize(q, s, z, g_idx=gi)
        K, N = (int(d) for d in W.shape)
    x2, y = check_activation(torch, spec, x, K, N, x.device.index or 0, bias, out)
    y2 = y.view(-1, N)
    if bias is not None:
        torch.addmm(bias, x2, W, out=y2)
    else:
        torch.matmul(x2, W, out=y2)
    return y


def _traced(
    target: MatmulTarget,
    x: Any,
    w: Any,
    is_packed: bool,
    scales: Any,
    zeros: Any,
    g_idx: Any,
    global_scale: Any,
    bias: Any,
    out: Any,
) -> Any:
    """Under torch.compile: one custom op that runs the eager call when the graph runs (M may be symbolic here):
    ``dqgen::matmul_dispatch*`` for specs the GEMM takes, else the GEMV's ``dqgen::matmul*`` (dqgen.run.torch_op)."""
    ops = sys.modules["torch"].ops.dqgen  # traced: torch is imported, and Kernel.matmul registered the ops
    if target.gemm_ok:
        if is_packed:
            y = ops.matmul_dispatch(target.key, w.key, x, bias)
        else:
            y = ops.matmul_dispatch_checkpoint(target.key, x, w, scales, zeros, g_idx, global_scale, bias)
    elif is_packed:
        y = ops.matmul(target.key, w.key, x, bias)
    else:
        y = ops.matmul_checkpoint(target.key, x, w, scales, zeros, g_idx, global_scale, bias)
    if out is None:
        return y
    out.copy_(y)  # the ops are functional: a new y
    return out
