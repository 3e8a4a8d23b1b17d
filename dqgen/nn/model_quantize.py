"""``quantize_model``: every eligible ``torch.nn.Linear`` of a model replaced by a ``QuantLinear`` quantized by
round-to-nearest on the weight's device (issue 26), with a report of what was replaced and why the rest was not."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from ..core.spec import SpecLike, load_spec
from .linear import QuantLinear
from .quantize import _check_shape, _group_size
from .quantize_torch import host_fallback_reason

__all__ = ["DEFAULT_SKIP", "QuantizeReport", "quantize_model"]

#: Skipped unless ``quantize_lm_head``: the output projection, which AWQ and GPTQ tools leave in full precision
#: (it is often tied to the embedding, and its error reaches every logit).
DEFAULT_SKIP = ("lm_head",)


class QuantizeReport(BaseModel):
    """What ``quantize_model`` did: the replaced layers (module names), the skipped ones with the reason, the
    seconds it took (the GPU synchronized), and notes (a dtype the kernel will not take as is, the numpy path)."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    group_size: int | None
    replaced: list[str]
    skipped: dict[str, str]
    notes: list[str]
    seconds: float


def _matches(name: str, patterns: Iterable[str]) -> str | None:
    """The first pattern that names this module: the full name, or a suffix of whole components, with fnmatch's
    wildcards (``lm_head``, ``mlp.down_proj``, ``layers.0.*``, ``*.q_proj``)."""
    for p in patterns:
        if fnmatchcase(name, p) or fnmatchcase(name, f"*.{p}"):
            return p
    return None


def _why_not(name: str, module: torch.nn.Module, spec: Any, group_size: int | None) -> str | None:
    """Why this Linear cannot be quantized to ``spec`` (None: it can)."""
    if type(module) is not torch.nn.Linear:
        return f"a {type(module).__name__} (a subclass of nn.Linear: its owner may read .weight directly)"
    w = module.weight
    if w.device.type == "meta":
        return "its weight is on the meta device (no values to quantize)"
    if not w.dtype.is_floating_point:
        return f"its weight is {w.dtype}, not a float"
    N, K = (int(d) for d in w.shape)
    try:
        _group_size(spec, group_size, K)
        _check_shape(spec, K, N)
    except ValueError as e:
        return f"in_features={K}, out_features={N}: {e}"
    return None


def quantize_model(
    model: torch.nn.Module,
    spec: SpecLike,
    group_size: int | None = None,
    skip: Iterable[str] | None = (),
    *,
    quantize_lm_head: bool = False,
) -> QuantizeReport:
    """Replace, in place, every ``torch.nn.Linear`` of ``model`` by a ``QuantLinear`` of ``spec`` (round-to-
    nearest, ``dqgen.quantize``'s rules, ``group_size`` None: the spec's or 128), quantized and packed on the
    weight's device (integer specs in torch: no host round trip; a CUDA model is ready to run).

    ``skip``: module names or fnmatch patterns, None for none (a full name or a suffix of whole components:
    ``"mlp.down_proj"``, ``"layers.0.*"``); ``lm_head`` is skipped too unless ``quantize_lm_head``. Layers the spec
    cannot take (in_features not a multiple of the group size or of the codes per block, out_features not a multiple
    of the codes per word), subclasses of nn.Linear and weights on the meta device are left as they are, each with
    its reason in the report. A module reached under several names is replaced under each."""
    sp = load_spec(spec)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    given = () if skip is None else (skip,) if isinstance(skip, str) else tuple(skip)
    patterns = given + (() if quantize_lm_head else DEFAULT_SKIP)
    for p in patterns:
        if not isinstance(p, str) or not p:
            raise ValueError(f"skip: expected module names or patterns (non-empty strings), got {p!r}")
    start = time.perf_counter()
    replaced: list[str] = []
    skipped: dict[str, str] = {}
    notes: list[str] = []
    done: dict[int, QuantLinear] = {}
    target = None
    reason = host_fallback_reason(sp)
    if reason:
        notes.append(reason)
    # every (parent, attribute) under which a Linear is reachable: a shared module is replaced everywhere
    sites: deque[tuple[str, torch.nn.Module, str, torch.nn.Linear]] = deque()
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        for child_name, child in parent.named_children():
            if isinstance(child, torch.nn.Linear):
                sites.append((f"{parent_name}.{child_name}" if parent_name else child_name, parent, child_name, child))
    devices: set[torch.device] = set()
    while sites:  # popped: a replaced Linear's weight is freed as the loop goes on (the model's peak memory)
        name, parent, child_name, child = sites.popleft()
        if id(child) in done:
            setattr(parent, child_name, done[id(child)])
            replaced.append(name)
            continue
        pattern = _matches(name, patterns)
        if pattern is not None:
            skipped[name] = (
                f"skip pattern {pattern!r}"
                if pattern in given
                else f"{pattern}: skipped by default, as AWQ / GPTQ tools do (quantize_lm_head=True takes it)"
            )
            continue
        why = _why_not(name, child, sp, group_size)
        if why is not None:
            skipped[name] = why
            continue
        if target is None:
            from ..core.formats import torch_dtype

            target = torch_dtype(sp.target_type, torch)
        if child.weight.dtype != target:
            notes.append(f"{name}: weight {child.weight.dtype}; the QuantLinear takes {target} inputs")
        q = QuantLinear.from_linear(child, sp, group_size=group_size)
        setattr(parent, child_name, q)
        done[id(child)] = q
        replaced.append(name)
        devices.add(child.weight.device)
        del child
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)
    return QuantizeReport(
        spec=sp.name,
        group_size=group_size,
        replaced=replaced,
        skipped=skipped,
        notes=notes,
        seconds=time.perf_counter() - start,
    )
