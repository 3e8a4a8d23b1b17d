"""Round-to-nearest quantization of a dense weight into a spec's checkpoint tensors (numpy; torch tensors in and out).

The weight is ``W[K, N]``: in-features x out-features, the way AWQ and GPTQ store it (torch.nn.Linear's ``weight``
is ``[N, K]``: transpose it, or use ``dqgen.nn.QuantLinear.from_linear``). Per group of rows along K and column n:

- integer codes with a zero point (packed ``integer`` / ``gptq_v1`` / ``gptq_v2``, dense ``float``): GPTQ's
  asymmetric rule: the range [min(w, 0), max(w, 0)] over the code range, scale rounded *up* to the target so the
  range stays covered, integer zero point rint(code_min - w_min / s); ``float`` zeros hold that integer exactly.
- ``additive`` zeros: scale (w_max - w_min) / (code_max - code_min), b = w_min - code_min * s in the target dtype.
- no zeros (signed, biased, unsigned codes; minifloat elements with a target-dtype scale; codebooks): the smallest
  scale of either sign whose code range covers the group (rounded up), so nothing is clipped by more than half a step.
- codes are the nearest value of the code grid to w / scale (integers: rint, ties to even; minifloats: the nearest
  finite value, ties to the even code; codebooks: the nearest entry as rounded to the target, ties to the lower value).
- e8m0 block scales (MX): 2^ceil(log2(amax / element_max)), the smallest power of two that clips nothing (the OCP MX
  spec's informative floor rule can clip the block maximum); e4m3 block scales (NVFP4): the fp32 global scale
  amax(W) / (6 * 448) rounded up, each block's e4m3 scale amax / (6 * global) rounded up to an e4m3 value.

So every element dequantizes within half a step of the code grid around it (times its scale), plus the target's own
rounding of the result. Groups are contiguous rows (``k // group_size``) unless act-order: then ``g_idx[k]``.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache
from typing import Any

import numpy as np

from ..core.formats import FP32, ScalarType, numpy_dtype, scalar_type
from ..core.spec import SourceKind, Spec, SpecLike, load_spec
from ..layout.packing import pack, pack_zeros, zeros_to_stored

__all__ = ["quantize"]

#: Rows converted to float64 at a time when choosing codes (bounds the working memory at large N).
_ROW_CHUNK = 256


def quantize(
    spec: SpecLike,
    weight: Any,
    *,
    group_size: int | None = None,
    act_order: bool = False,
    g_idx: Any = None,
) -> dict[str, Any]:
    """Quantize a dense float ``weight [K, N]`` (in-features x out-features, AWQ / GPTQ's orientation) to ``spec``
    by round-to-nearest, and return its checkpoint tensors under the names the kernel takes them:
    ``qweight``, ``scales``, and where the spec has them ``zeros`` (packed int32 qzeros, or a dense [G, N] tensor),
    ``g_idx`` (act-order specs) and ``global_scale`` (NVFP4). So ``k(**quantize(spec, W))`` dequantizes it.

    ``group_size``: rows per scale along K (-1: one per column); None takes the spec's, or 128 for a spec with
    ``group_size: auto``. A spec that fixes its group size (MX: 32, NVFP4: 16, nf4_bf16: 64) refuses another.
    ``act_order`` (act-order specs only): group rows out of order as GPTQ's desc_act does; without a Hessian the
    rows are ranked by their L2 norm, largest first. ``g_idx``: give the row -> group map yourself instead.
    An act-order spec quantized with neither stores the sequential map ``k // group_size``.

    numpy in, numpy out; a torch tensor in gives torch tensors back on its device. Every error is one line naming
    the argument (``weight``, ``group_size``, ``g_idx``) and what was expected.
    """
    spec = load_spec(spec)
    torch_device = None
    if type(weight).__module__.startswith("torch"):
        torch_device = weight.device
        # float64 holds every torch float exactly; an integer tensor is refused below with its dtype
        weight = weight.detach().cpu().double().numpy() if weight.dtype.is_floating_point else weight.cpu().numpy()
    w = _check_weight(weight)
    K, N = w.shape
    gs = _group_size(spec, group_size, K)
    G = 1 if gs == -1 else K // gs
    _check_shape(spec, K, N)
    gi = _row_groups(spec, w, gs, G, act_order, g_idx)
    out = _quantize(spec, w, gs, G, gi)
    if spec.act_order:
        out["g_idx"] = gi.astype(np.int32)
    return out if torch_device is None else _to_torch(out, torch_device)


# ----------------------------------------------------------------------------------------------- validation


def _check_weight(weight: Any) -> np.ndarray:
    arr = np.asarray(weight)
    if not (np.issubdtype(arr.dtype, np.floating) or arr.dtype.kind == "V" or "float" in arr.dtype.name):
        raise ValueError(f"weight: expected a float array [K, N], got {tuple(arr.shape)} {arr.dtype.name}")
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"weight: expected a non-empty 2-D array [K, N] (in x out features), got shape {arr.shape}")
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float32)  # fp16 / bf16 widen exactly
    if not np.isfinite(arr).all():
        k, n = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"weight: every value must be finite, got {arr[k, n]} at [{k}, {n}]")
    return arr


def _group_size(spec: Spec, group_size: int | None, K: int) -> int:
    fixed = spec.scales.group_size
    if group_size is not None and (not isinstance(group_size, int) or isinstance(group_size, bool)):
        raise ValueError(f"group_size: expected an int (-1 for one group per column) or None, got {group_size!r}")
    if fixed != "auto":
        if group_size is not None and group_size != fixed:
            raise ValueError(f"group_size: spec {spec.name} fixes scales.group_size {fixed}, got {group_size}")
        gs = fixed
    else:
        gs = 128 if group_size is None else group_size
    if gs == -1:
        return gs
    if gs <= 0 or K % gs:
        raise ValueError(f"group_size: expected -1 or a positive divisor of K = {K}, got {gs}")
    if spec.packing.axis == "K" and gs % spec.per_word:
        raise ValueError(
            f"group_size: {gs} is not a multiple of {spec.per_word}, the rows one packed block holds (packing along K)"
        )
    return gs


def _check_shape(spec: Spec, K: int, N: int) -> None:
    P = spec.per_word
    if spec.packing.axis == "N" and N % P:
        raise ValueError(f"weight: N = {N} (weight.shape[1]) is not a multiple of {P}, the codes per word along N")
    if spec.packing.axis == "K" and K % P:
        raise ValueError(f"weight: K = {K} (weight.shape[0]) is not a multiple of {P}, the codes per block along K")
    if spec.zeros.packed and N % P:
        raise ValueError(f"weight: N = {N} (weight.shape[1]) is not a multiple of {P}, the zero points per word")


def _row_groups(spec: Spec, w: np.ndarray, gs: int, G: int, act_order: bool, g_idx: Any) -> np.ndarray:
    """The group of every row: k // group_size, or act-order's map."""
    K = w.shape[0]
    if (act_order or g_idx is not None) and not spec.act_order:
        what = "act_order" if act_order else "g_idx"
        raise ValueError(f"{what}: spec {spec.name} has no act-order (its scales apply to contiguous rows)")
    if g_idx is not None:
        if act_order:
            raise ValueError("g_idx: give either act_order=True or a g_idx, not both")
        if type(g_idx).__module__.startswith("torch"):
            g_idx = g_idx.cpu().numpy()
        gi = np.asarray(g_idx)
        if not np.issubdtype(gi.dtype, np.integer) or gi.shape != (K,):
            raise ValueError(f"g_idx: expected an integer array of shape ({K},), got {gi.shape} {gi.dtype.name}")
        if gi.size and (gi.min() < 0 or gi.max() >= G):
            raise ValueError(f"g_idx: values must be in [0, {G}) (G = K / group_size), got [{gi.min()}, {gi.max()}]")
        return gi.astype(np.int64)
    rows = np.arange(K, dtype=np.int64)
    if not act_order:
        return rows // gs if gs > 0 else np.zeros(K, dtype=np.int64)
    # GPTQ's desc_act visits rows by the Hessian's diagonal, largest first; a row's norm stands in for it here
    norms = np.einsum("kn,kn->k", w, w, dtype=np.float64)
    order = np.argsort(-norms, kind="stable")
    gi = np.empty(K, dtype=np.int64)
    gi[order] = rows // gs
    return gi


# ----------------------------------------------------------------------------------------------- the code grids


def _code_range(spec: Spec) -> tuple[int, int]:
    """(lowest, highest) code value of an integer spec."""
    b = spec.source.bits
    if spec.source.kind is SourceKind.signed:
        return -(1 << (b - 1)), (1 << (b - 1)) - 1
    off = spec.source.offset
    return -off, (1 << b) - 1 - off


def _grid(spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, their stored codes) of a minifloat or codebook spec; one code per value, the one that
    round-to-nearest-even (minifloats) or the lowest index (codebooks) would pick on a tie."""
    kind = spec.source.kind
    codebook = tuple(spec.source.codebook_values) if kind is SourceKind.codebook else ()
    return _grid_of(kind, spec.source.format or "", codebook, spec.target.value)


@cache
def _grid_of(
    kind: SourceKind, element_name: str, codebook: tuple[float, ...], target_name: str
) -> tuple[np.ndarray, np.ndarray]:
    if kind is SourceKind.codebook:
        target = scalar_type(target_name)
        cb = np.asarray(codebook, dtype=np.float64)
        vals = target.values_of(target.round_from_f64(cb))  # the entries as the kernel holds them
        codes = np.arange(len(vals))
    else:
        element = scalar_type(element_name)
        decoded = [element.decode(c) for c in range(1 << element.width)]
        keep = [c for c, v in enumerate(decoded) if isinstance(v, Fraction) or (isinstance(v, float) and v == v)]
        keep = [c for c in keep if not (isinstance(decoded[c], float) and abs(decoded[c]) == float("inf"))]
        vals = np.array([float(decoded[c]) for c in keep], dtype=np.float64)
        # -0.0 == 0.0: the tie rule below keeps the even code, +0
        codes = np.array(keep)
    order = np.lexsort((codes % 2 if kind is SourceKind.float else codes, vals))
    vals, codes = vals[order], codes[order]
    first = np.concatenate(([True], np.diff(vals) > 0))  # one code per value: the first in the tie order
    return vals[first], codes[first].astype(np.int64)


def _nearest(x: np.ndarray, vals: np.ndarray, codes: np.ndarray, even_ties: bool) -> np.ndarray:
    """The code of the grid value nearest to each x (x within the grid's range, up to rounding)."""
    idx = np.clip(np.searchsorted(vals, x), 1, len(vals) - 1)
    lo, hi = vals[idx - 1], vals[idx]
    d_lo, d_hi = x - lo, hi - x
    tie_hi = (codes[idx] % 2 == 0) & (codes[idx - 1] % 2 == 1) if even_ties else np.zeros_like(d_lo, dtype=bool)
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & tie_hi)
    return np.where(take_hi, codes[idx], codes[idx - 1])


# ----------------------------------------------------------------------------------------------- scales


def _round_up(fmt: ScalarType, x: np.ndarray) -> np.ndarray:
    """The smallest value of ``fmt`` (fp16, bf16, fp32) >= each non-negative x, as float64."""
    bits = fmt.round_from_f64(x).astype(np.int64)
    below = fmt.values_of(bits) < x
    return fmt.values_of(np.where(below, bits + 1, bits))  # positive: the next pattern is the next value up


def _covering_scale(wmin: np.ndarray, wmax: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The signed scale of least magnitude whose code range [lo, hi] * s covers [min(wmin, 0), max(wmax, 0)];
    NaN where no scale does (codes of one sign, weights of both)."""
    pos, neg = np.maximum(wmax, 0.0), -np.minimum(wmin, 0.0)

    def need(amount: np.ndarray, reach: float) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(amount > 0, amount / reach if reach > 0 else np.inf, 0.0)

    plus = np.maximum(need(pos, hi), need(neg, -lo))  # s > 0: hi * s reaches up, lo * s down
    minus = np.maximum(need(pos, -lo), need(neg, hi))  # s < 0: lo * s reaches up
    s = np.where(minus < plus, -minus, plus)
    return np.where(np.isinf(np.abs(s)), np.nan, s)


def _target_scale(spec: Spec, s: np.ndarray, what: str) -> np.ndarray:
    """Signed float64 scales rounded away from zero to the target (a zero scale becomes 1: any will do)."""
    mag = np.abs(s)
    mag = np.where(mag == 0, 1.0, mag)
    up = _round_up(spec.target_type, mag)
    if np.isinf(up).any():
        g, n = np.argwhere(np.isinf(up))[0]
        raise ValueError(
            f"weight: group {g} of column {n} needs a {what} of {mag[g, n]:.4g}, beyond {spec.target.value}'s range"
        )
    return np.copysign(up, s)


def _group_stats(w: np.ndarray, gi: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """(min, max) over each group's rows, float64 [G, N] (a group without rows: 0, 0)."""
    N = w.shape[1]
    wmin, wmax = np.zeros((G, N)), np.zeros((G, N))
    order = np.argsort(gi, kind="stable")
    contiguous = bool((order == np.arange(len(gi))).all())
    ws = w if contiguous else w[order]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(gi, minlength=G))))
    for g in range(G):
        a, b = bounds[g], bounds[g + 1]
        if b > a:
            wmin[g], wmax[g] = ws[a:b].min(axis=0), ws[a:b].max(axis=0)
    return wmin, wmax


# ----------------------------------------------------------------------------------------------- the rules


def _quantize(spec: Spec, w: np.ndarray, gs: int, G: int, gi: np.ndarray) -> dict[str, Any]:
    wmin, wmax = _group_stats(w, gi, G)
    kind = spec.source.kind
    mode = spec.zeros.mode
    tdt = numpy_dtype(spec.target_type)
    out: dict[str, Any] = {}
    if kind in (SourceKind.float, SourceKind.codebook):
        codes, out = _quantize_grid(spec, w, gi, wmin, wmax)
    elif mode == "additive":
        lo, hi = _code_range(spec)
        s = _target_scale(spec, (wmax - wmin) / (hi - lo), "scale")
        b = (wmin - lo * s).astype(tdt)
        add = b.astype(np.float64)
        codes = _integer_codes(w, gi, s, -add / s, lo, hi)
        out = {"scales": s.astype(tdt), "zeros": b}
    elif mode == "none":
        lo, hi = _code_range(spec)
        s = _covering_scale(wmin, wmax, lo, hi)
        if np.isnan(s).any():
            g, n = np.argwhere(np.isnan(s))[0]
            raise ValueError(
                f"weight: group {g} of column {n} holds weights of both signs, but {spec.source.short} codes without "
                f"zero points are of one sign (values {lo}..{hi}); use a spec with zeros or signed codes"
            )
        s = _target_scale(spec, s, "scale")
        codes = _integer_codes(w, gi, s, np.zeros_like(s), lo, hi)
        out = {"scales": s.astype(tdt)}
    else:
        codes, out = _quantize_zero_point(spec, w, gi, wmin, wmax)
    stored = codes + spec.source.offset if kind is SourceKind.biased else codes
    return {"qweight": pack(stored, spec), **out}


def _quantize_zero_point(
    spec: Spec, w: np.ndarray, gi: np.ndarray, wmin: np.ndarray, wmax: np.ndarray
) -> tuple[np.ndarray, dict[str, Any]]:
    """value = (v - z) * s with an integer z: GPTQ's asymmetric rule (the range always includes 0)."""
    lo, hi = _code_range(spec)
    z_lo, z_hi = (lo + 1, hi + 1) if spec.zeros.mode == "gptq_v1" else (lo, hi)  # gptq_v1 stores z - 1
    w_lo, w_hi = np.minimum(wmin, 0.0), np.maximum(wmax, 0.0)
    s = _target_scale(spec, (w_hi - w_lo) / (hi - lo), "scale")
    z = np.rint(lo - w_lo / s)
    clipped = (z < z_lo) | (z > z_hi)
    if clipped.any():
        # gptq_v1 cannot hold z = 0: a group of non-negative weights takes z = 1 and a scale that still covers it
        z = np.clip(z, z_lo, z_hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            up = np.where(w_hi > 0, w_hi / (hi - z), 0.0)
            down = np.where(w_lo < 0, w_lo / (lo - z), 0.0)
        need = np.maximum(up, down)
        if (need[clipped] < 0).any() or not np.isfinite(need[clipped]).all():
            raise ValueError(f"weight: {spec.zeros.mode} zero points in [{z_lo}, {z_hi}] cannot cover a group")
        s = np.where(clipped, _target_scale(spec, np.where(clipped, need, 0.0), "scale"), s)
    codes = _integer_codes(w, gi, s, z, lo, hi)
    tdt = numpy_dtype(spec.target_type)
    out: dict[str, Any] = {"scales": s.astype(tdt)}
    if spec.zeros.packed:
        out["zeros"] = pack_zeros(zeros_to_stored(z.astype(np.int64), spec), spec)
    else:  # float zeros: the integer zero point, exact in the target
        out["zeros"] = z.astype(tdt)
    return codes, out


def _integer_codes(w: np.ndarray, gi: np.ndarray, s: np.ndarray, z: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """clip(rint(w / s + z), lo, hi) row chunk by row chunk (w / s + z: the code whose value is nearest w)."""
    K, N = w.shape
    codes = np.empty((K, N), dtype=np.int64)
    for r in range(0, K, _ROW_CHUNK):
        rows = gi[r : r + _ROW_CHUNK]
        x = w[r : r + _ROW_CHUNK].astype(np.float64) / s[rows] + z[rows]
        codes[r : r + _ROW_CHUNK] = np.clip(np.rint(x), lo, hi)
    return codes


def _quantize_grid(
    spec: Spec, w: np.ndarray, gi: np.ndarray, wmin: np.ndarray, wmax: np.ndarray
) -> tuple[np.ndarray, dict[str, Any]]:
    """Minifloat and codebook codes: a scale per group (target dtype, e8m0 or e4m3 x fp32 global), then the grid."""
    vals, grid_codes = _grid(spec)
    amax = np.maximum(np.abs(wmin), np.abs(wmax))
    out: dict[str, Any] = {}
    sd = spec.scales.dtype.value if spec.scales.block and spec.scales.dtype is not None else None
    if sd == "e8m0":
        ratio = amax / vals[-1]
        safe = np.where(ratio > 0, ratio, 1.0)
        m, e = np.frexp(safe)  # safe = m * 2^e, m in [0.5, 1): 2^e >= safe, 2^(e-1) when m == 0.5 exactly
        E = np.where(m == 0.5, e - 1, e)
        E = np.where(ratio > 0, E, -127)
        if E.max() > 127:
            raise ValueError("weight: a block needs an e8m0 scale above 2^127 (values too large for MX)")
        E = np.maximum(E, -127)
        s = np.ldexp(1.0, E)
        out["scales"] = (E + 127).astype(np.uint8)
    elif sd == "e4m3":
        e4m3 = scalar_type("e4m3")
        e4m3_max = float(max(v for v in (e4m3.decode(c) for c in range(128)) if isinstance(v, Fraction)))
        total = float(amax.max())
        g = _round_up(FP32, np.array([total / (vals[-1] * e4m3_max) if total > 0 else 1.0]))[0]
        block = amax / (vals[-1] * g)
        pos_vals = np.array(sorted({float(e4m3.decode(c)) for c in range(0x7F)}), dtype=np.float64)  # 0 .. 448
        idx = np.minimum(np.searchsorted(pos_vals, block), len(pos_vals) - 1)  # the first value >= block
        sb = pos_vals[idx]
        out["scales"] = e4m3.bits_of(sb).astype(np.uint8)
        out["global_scale"] = np.array([g], dtype=np.float32)
        s = sb * g
    else:
        lo, hi = float(vals[0]), float(vals[-1])
        s = _covering_scale(wmin, wmax, lo, hi)
        if np.isnan(s).any():
            gg, n = np.argwhere(np.isnan(s))[0]
            raise ValueError(f"weight: group {gg} of column {n} holds weights the {spec.source.short} grid cannot span")
        s = _target_scale(spec, s, "scale")
        out["scales"] = s.astype(numpy_dtype(spec.target_type))
    even = spec.source.kind is SourceKind.float
    K, N = w.shape
    codes = np.empty((K, N), dtype=np.int64)
    for r in range(0, K, _ROW_CHUNK):
        rows = gi[r : r + _ROW_CHUNK]
        sr = s[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(sr != 0, w[r : r + _ROW_CHUNK].astype(np.float64) / sr, 0.0)
        codes[r : r + _ROW_CHUNK] = _nearest(np.clip(x, vals[0], vals[-1]), vals, grid_codes, even)
    return codes, out


# ----------------------------------------------------------------------------------------------- torch


def _to_torch(out: dict[str, Any], device: Any) -> dict[str, Any]:
    import torch

    res = {}
    for name, a in out.items():
        if a.dtype.name == "bfloat16":  # torch has no numpy bfloat16: move the bits
            t = torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.ascontiguousarray(a))
        res[name] = t.to(device)
    return res
