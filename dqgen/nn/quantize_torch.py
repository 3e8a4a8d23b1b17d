"""``dqgen.quantize``'s round-to-nearest on torch tensors, on their own device (issue 26: a GPU quantizes a layer
in milliseconds, where the numpy path copies it to the host and works in float64 there for about a second).

The same rules as dqgen.nn.quantize (its docstring), step for step in float64 (a GPU's float64 division and
rounding are IEEE's, as numpy's are), so the checkpoint tensors are the numpy path's bit for bit:
tests/test_quantize_model_pack.py holds them equal. Integer codes only (zero points of every mode, additive
zeros, no zeros); minifloat and codebook specs (a grid search per element, e8m0 / e4m3 block scales) go through
the numpy path (``quantize_tensors`` says which path it took).
"""

from __future__ import annotations

from typing import Any

from ..core.formats import ScalarType, torch_dtype
from ..core.spec import SourceKind, Spec, SpecLike, load_spec
from ..layout import torch_pack
from ..layout.layout import Layout
from .quantize import _check_shape, _code_range, _group_size, quantize

__all__ = ["on_device", "quantize_tensors"]


def on_device(spec: Spec) -> bool:
    """Whether ``quantize_tensors`` quantizes this spec in torch on the weight's device (integer codes)."""
    return spec.source.kind.integer


def quantize_tensors(
    spec: SpecLike, weight: Any, *, group_size: int | None = None, act_order: bool = False, g_idx: Any = None
) -> dict[str, Any]:
    """``dqgen.quantize(spec, weight, ...)`` for a torch ``weight [K, N]``: the checkpoint tensors on its device,
    computed there for integer specs (``on_device``), through the numpy path otherwise."""
    import torch

    spec = load_spec(spec)
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight: expected a torch.Tensor [K, N], got {type(weight).__name__}")
    if not on_device(spec) or g_idx is not None:
        return quantize(spec, weight, group_size=group_size, act_order=act_order, g_idx=g_idx)
    if not weight.dtype.is_floating_point:
        raise ValueError(f"weight: expected a float array [K, N], got {tuple(weight.shape)} {weight.dtype}")
    if weight.dim() != 2 or 0 in weight.shape:
        raise ValueError(
            f"weight: expected a non-empty 2-D array [K, N] (in x out features), got shape {tuple(weight.shape)}"
        )
    if act_order and not spec.act_order:
        raise ValueError(f"act_order: spec {spec.name} has no act-order (its scales apply to contiguous rows)")
    K, N = (int(d) for d in weight.shape)
    gs = _group_size(spec, group_size, K)
    G = 1 if gs == -1 else K // gs
    _check_shape(spec, K, N)
    # one pass into a contiguous float64 [K, N] (the weight is often torch's [N, K] transposed)
    w = torch.empty((K, N), dtype=torch.float64, device=weight.device).copy_(weight.detach())
    finite = torch.isfinite(w)
    if not bool(finite.all()):
        k, n = (int(i) for i in torch.nonzero(~finite)[0])
        raise ValueError(f"weight: every value must be finite, got {float(w[k, n])} at [{k}, {n}]")
    del finite
    gi = _row_groups(w, gs, G, act_order)
    out = _quantize(spec, w, gs, G, gi)
    if spec.act_order:
        rows = torch.arange(K, device=w.device) // gs if gi is None and gs > 0 else gi
        out["g_idx"] = (torch.zeros(K, dtype=torch.int32, device=w.device) if rows is None else rows).to(torch.int32)
    return out


def _row_groups(w: Any, gs: int, G: int, act_order: bool) -> Any:
    """None for contiguous groups (k // gs), else each row's group (act-order: rows ranked by their L2 norm)."""
    import torch

    if not act_order:
        return None
    K = w.shape[0]
    norms = (w * w).sum(dim=1)
    # numpy's argsort(-norms, kind="stable"): ties keep the lower row first
    order = torch.sort(-norms, stable=True).indices
    gi = torch.empty(K, dtype=torch.int64, device=w.device)
    gi[order] = torch.arange(K, device=w.device) // gs if gs > 0 else torch.zeros(K, dtype=torch.int64, device=w.device)
    return gi


def _group_stats(w: Any, gs: int, G: int, gi: Any) -> tuple[Any, Any]:
    """(min, max) over each group's rows, float64 [G, N]."""
    import torch

    K, N = w.shape
    if gi is None:
        rows = K if gs == -1 else gs
        g = w.reshape(G, rows, N)
        return g.amin(dim=1), g.amax(dim=1)
    idx = gi[:, None].expand(K, N)
    wmin = torch.full((G, N), float("inf"), dtype=w.dtype, device=w.device).scatter_reduce(0, idx, w, "amin")
    wmax = torch.full((G, N), float("-inf"), dtype=w.dtype, device=w.device).scatter_reduce(0, idx, w, "amax")
    empty = torch.bincount(gi, minlength=G) == 0
    return wmin.masked_fill(empty[:, None], 0.0), wmax.masked_fill(empty[:, None], 0.0)


def _round_up(target: ScalarType, x: Any) -> Any:
    """The smallest value of the target (fp16, bf16, fp32) >= each non-negative x, float64. torch's cast may
    round twice (float64 -> float32 -> the target), but lands on one of the two values around x either way."""
    import torch

    dt = torch_dtype(target, torch)
    t = x.to(dt)
    below = t.to(torch.float64) < x
    ints = {2: torch.int16, 4: torch.int32}[t.element_size()]
    bits = t.view(ints)
    return torch.where(below, bits + 1, bits).view(dt).to(torch.float64)


def _target_scale(spec: Spec, s: Any, what: str) -> Any:
    """Signed float64 scales rounded away from zero to the target (a zero scale becomes 1)."""
    import torch

    mag = s.abs()
    mag = torch.where(mag == 0, torch.ones_like(mag), mag)
    up = _round_up(spec.target_type, mag)
    inf = torch.isinf(up)
    if bool(inf.any()):
        g, n = (int(i) for i in torch.nonzero(inf)[0])
        raise ValueError(
            f"weight: group {g} of column {n} needs a {what} of {float(mag[g, n]):.4g}, beyond "
            f"{spec.target.value}'s range"
        )
    return torch.copysign(up, s)


def _to_target(spec: Spec, x: Any) -> Any:
    """float64 -> the target dtype as numpy rounds it (``astype``): fp16 once, to nearest even (through float32
    rounded to odd, which then rounds correctly); bf16 through float32 (ml_dtypes' cast)."""
    import torch

    dt = torch_dtype(spec.target_type, torch)
    if dt == torch.bfloat16:
        return x.to(torch.float32).to(dt)
    if dt == torch.float32:
        return x.to(dt)
    f = x.to(torch.float32)
    fd = f.to(torch.float64)
    inexact = fd != x
    bits = f.view(torch.int32)
    # round to odd: the float32 value toward zero from x, with its last bit set when x was not exact
    bits = torch.where(inexact & (fd.abs() > x.abs()), bits - 1, bits)
    bits = torch.where(inexact, bits | 1, bits)
    return bits.view(torch.float32).to(dt)


def _covering_scale(wmin: Any, wmax: Any, lo: float, hi: float) -> Any:
    """quantize._covering_scale in torch (NaN where no scale of either sign covers the group)."""
    import torch

    pos, neg = wmax.clamp(min=0.0), -wmin.clamp(max=0.0)

    def need(amount: Any, reach: float) -> Any:
        full = amount / reach if reach > 0 else torch.full_like(amount, float("inf"))
        return torch.where(amount > 0, full, torch.zeros_like(amount))

    plus = torch.maximum(need(pos, hi), need(neg, -lo))
    minus = torch.maximum(need(pos, -lo), need(neg, hi))
    s = torch.where(minus < plus, -minus, plus)
    return torch.where(torch.isinf(s.abs()), torch.full_like(s, float("nan")), s)


def _codes(w: Any, s: Any, z: Any, gs: int, gi: Any, lo: int, hi: int) -> Any:
    """clip(rint(w / s + z), lo, hi) per row's group as int16 (torch.round: half to even, as np.rint); s, z
    [G, N] broadcast over contiguous groups, gathered per row for act-order."""
    import torch

    K, N = w.shape
    if gi is not None:
        x = w / s.index_select(0, gi)
        if z is not None:
            x += z.index_select(0, gi)
    else:
        G = s.shape[0]
        x = w.reshape(G, K // G, N) / s[:, None, :]
        if z is not None:
            x += z[:, None, :]
        x = x.reshape(K, N)
    return x.round_().clamp_(lo, hi).to(torch.int16)


def _quantize(spec: Spec, w: Any, gs: int, G: int, gi: Any) -> dict[str, Any]:
    import torch

    wmin, wmax = _group_stats(w, gs, G, gi)
    tdt = torch_dtype(spec.target_type, torch)
    lo, hi = _code_range(spec)
    mode = spec.zeros.mode
    out: dict[str, Any] = {}
    if mode == "additive":
        s = _target_scale(spec, (wmax - wmin) / (hi - lo), "scale")
        b = _to_target(spec, wmin - lo * s)
        z = -b.to(torch.float64) / s
        codes = _codes(w, s, z, gs, gi, lo, hi)
        out = {"scales": s.to(tdt), "zeros": b}
    elif mode == "none":
        s = _covering_scale(wmin, wmax, lo, hi)
        nan = torch.isnan(s)
        if bool(nan.any()):
            g, n = (int(i) for i in torch.nonzero(nan)[0])
            raise ValueError(
                f"weight: group {g} of column {n} holds weights of both signs, but {spec.source.short} codes without "
                f"zero points are of one sign (values {lo}..{hi}); use a spec with zeros or signed codes"
            )
        s = _target_scale(spec, s, "scale")
        codes = _codes(w, s, None, gs, gi, lo, hi)
        out = {"scales": s.to(tdt)}
    else:
        z_lo, z_hi = (lo + 1, hi + 1) if mode == "gptq_v1" else (lo, hi)
        w_lo, w_hi = wmin.clamp(max=0.0), wmax.clamp(min=0.0)
        s = _target_scale(spec, (w_hi - w_lo) / (hi - lo), "scale")
        z = (lo - w_lo / s).round()
        clipped = (z < z_lo) | (z > z_hi)
        if bool(clipped.any()):
            z = z.clamp(z_lo, z_hi)
            zero = torch.zeros_like(w_hi)
            up = torch.where(w_hi > 0, w_hi / (hi - z), zero)
            down = torch.where(w_lo < 0, w_lo / (lo - z), zero)
            need = torch.maximum(up, down)
            bad = need[clipped]
            if bool((bad < 0).any()) or not bool(torch.isfinite(bad).all()):
                raise ValueError(f"weight: {mode} zero points in [{z_lo}, {z_hi}] cannot cover a group")
            s = torch.where(clipped, _target_scale(spec, torch.where(clipped, need, zero), "scale"), s)
        codes = _codes(w, s, z, gs, gi, lo, hi)
        out = {"scales": s.to(tdt)}
        if spec.zeros.packed:
            lay = Layout.of(spec)
            stored = (z.to(torch.int64) - spec.zeros.stored_offset).to(torch.uint8)
            out["zeros"] = torch_pack.torch_pack_fields(stored, lay.bits, lay.zero_order, "N")
        else:  # float zeros: the integer zero point, exact in the target
            out["zeros"] = z.to(tdt)
    bits = spec.source.bits
    if spec.source.kind is SourceKind.biased:
        codes = codes + spec.source.offset
    # stored fields: two's complement bits of signed codes (pack's mask)
    fields = (codes & ((1 << bits) - 1)).to(torch.uint8)
    lay = Layout.of(spec)
    out = {"qweight": torch_pack.torch_pack_fields(fields, lay.bits, lay.order, lay.axis), **out}
    return out


def host_fallback_reason(spec: Spec) -> str | None:
    """Why ``quantize_tensors`` takes the numpy path for ``spec`` (None: it quantizes on the device)."""
    if on_device(spec):
        return None
    return f"{spec.source.kind.value} codes are quantized by the numpy path (grid search; host round trip)"
