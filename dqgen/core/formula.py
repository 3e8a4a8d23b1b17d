"""The value formula as data: how one element's value is formed, and the one renderer that writes it as prose.

Every spec dequantizes an element as ``round_to_target(combine(code_value, zero, scale))``. What varies is
data: the zero mode (how a zero point is stored and where it enters: ``ZeroRule``), the code's kind (integer,
minifloat, codebook entry), the scale (a group scale in the target dtype, or a block-scale code with or
without a global scale). ``ValueFormula.of(spec)`` resolves a spec into that description; ``expression``
and ``prose`` render it, for ``explain``, for the generated kernels' comments (``dqgen.emit.render``) and for
``dqgen list`` (``zero_mode_doc``). Nothing else writes a value formula.

This module does not import the spec (the spec imports it for the zero-mode table), not even for typing: it reads
a spec's fields through ``FormulaFields``, the Protocol of the few it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from .formats import scalar_type


class _Named(Protocol):
    """An enum member of the spec (Target, SourceKind, ScaleDtype): its name in the YAML."""

    @property
    def value(self) -> str: ...


class _SourceFields(Protocol):
    @property
    def kind(self) -> _Named: ...
    @property
    def offset(self) -> int: ...
    @property
    def format(self) -> str | None: ...


class _ScaleFields(Protocol):
    @property
    def block(self) -> bool: ...
    @property
    def dtype(self) -> _Named | None: ...
    @property
    def global_scale(self) -> bool: ...


class _ZeroFields(Protocol):
    @property
    def mode(self) -> str: ...


class FormulaFields(Protocol):
    """What ValueFormula.of reads of a spec (dqgen.core.spec.Spec has them all)."""

    @property
    def source(self) -> _SourceFields: ...
    @property
    def target(self) -> _Named: ...
    @property
    def scales(self) -> _ScaleFields: ...
    @property
    def zeros(self) -> _ZeroFields: ...


#: Where a zero point is stored: nowhere, packed bits-wide integers in int32 words [G, N/P] (along N), or
#: a [G, N] tensor in the target dtype.
ZeroStorage = Literal["none", "packed", "dense"]
#: Where it enters the value: not at all, an exact integer subtraction before the one rounding, a subtraction
#: rounded to the target before the scale (HQQ), or added after the scale in one fma (TensorRT-LLM).
ZeroCombine = Literal["none", "subtract", "subtract_rounded", "add_after_scale"]


@dataclass(frozen=True)
class ZeroRule:
    """One zero-point mode (``zeros.mode``)."""

    mode: str
    storage: ZeroStorage
    combine: ZeroCombine
    stored_offset: int  # added to a stored packed zero to get z (gptq_v1 stores z - 1)
    users: str  # who writes checkpoints this way, for ``dqgen list``
    note: str  # what the rounding means, after explain's formula ({t}: the target's name)

    @property
    def packed(self) -> bool:
        return self.storage == "packed"

    @property
    def dense(self) -> bool:
        """Zero points stored as a [G, N] tensor in the target dtype (float, additive)."""
        return self.storage == "dense"


ZERO_RULES: dict[str, ZeroRule] = {
    r.mode: r
    for r in (
        ZeroRule("none", "none", "none", 0, "symmetric", "rounded once to nearest-even"),
        ZeroRule(
            "integer",
            "packed",
            "subtract",
            0,
            "AWQ, GPTQ gptq_v2",
            "rounded once (z: packed integer zero point)",
        ),
        ZeroRule(
            "gptq_v1",
            "packed",
            "subtract",
            1,
            "GPTQ's original checkpoints",
            "rounded once (GPTQ v1 stores z - 1)",
        ),
        ZeroRule(
            "gptq_v2",
            "packed",
            "subtract",
            0,
            "GPTQ gptq_v2 (the same as integer, GPTQ's checkpoint_format name for it)",
            "rounded once (z: packed integer zero point, GPTQ v2)",
        ),
        ZeroRule("float", "dense", "subtract_rounded", 0, "HQQ", "two roundings, z a {t} zero point (HQQ)"),
        ZeroRule(
            "additive",
            "dense",
            "add_after_scale",
            0,
            "TensorRT-LLM fine-grained",
            "one rounding (fma), b a pre-scaled {t} zero",
        ),
    )
}


@dataclass(frozen=True)
class ValueFormula:
    """How one element of a spec becomes a value."""

    target: str  # fp16, bf16
    code_kind: Literal["integer", "float", "codebook"]
    code_bias: int  # integer codes: the value is q - code_bias
    element: str  # float codes: the minifloat's name (e4m3, e2m1)
    zero: ZeroRule
    scale: str  # "group" (a target-dtype scale) or the block-scale code's format (e8m0, e4m3)
    global_scale: bool

    @staticmethod
    def of(spec: FormulaFields) -> ValueFormula:
        kind = spec.source.kind.value
        code_kind: Literal["integer", "float", "codebook"] = (
            "float" if kind == "float" else "codebook" if kind == "codebook" else "integer"
        )
        return ValueFormula(
            spec.target.value,
            code_kind,
            spec.source.offset,
            spec.source.format or "",
            ZERO_RULES[spec.zeros.mode],
            spec.scales.dtype.value if spec.scales.block and spec.scales.dtype is not None else "group",
            spec.scales.global_scale,
        )

    def code_text(self) -> str:
        """The code's value: q, (q - 8), e4m3(q), fp16(codebook[q])."""
        if self.code_kind == "float":
            return f"{self.element}(q)"
        if self.code_kind == "codebook":
            return f"{self.target}(codebook[q])"
        return f"(q - {self.code_bias})" if self.code_bias else "q"


def expression(
    f: ValueFormula,
    *,
    rnd: str = "round",
    q: str = "q",
    s: str = "s",
    z: str = "z",
    b: str = "b",
    pad: bool = False,
    zero_folded: bool = False,
) -> str:
    """The value as an expression: ``rnd(...)`` is the one rounding to the target (``pad``: with spaces inside
    its parentheses), ``q`` the code value, ``s`` the scale, ``z`` / ``b`` the zero point. ``zero_folded``: an
    integer zero point is already subtracted from ``q`` (the kernels' d[i])."""
    zr = f.zero
    if zr.combine == "subtract" and not zero_folded:
        zt = f"(stored + {zr.stored_offset})" if zr.stored_offset else z
        inner = f"({q} - {zt}) * {s}"
    elif zr.combine == "subtract_rounded":
        inner = f"{rnd}({q} - {z}) * {s}"
    elif zr.combine == "add_after_scale":
        inner = f"{q} * {s} + {b}"
    else:
        inner = f"{q} * {s}"
    return f"{rnd}( {inner} )" if pad else f"{rnd}({inner})"


def _e8m0_bias() -> int:
    return scalar_type("e8m0").bias


def prose(f: ValueFormula) -> str:
    """The value formula as ``dqgen explain`` prints it: the expression, then what its roundings mean."""
    t = f.target
    if f.scale == "e8m0":
        return (
            f"{t}( {f.code_text()} * 2^(E-{_e8m0_bias()}) ), one rounding, no intermediate under/overflow "
            f"(E = the block's e8m0 scale; 0x{(1 << scalar_type('e8m0').width) - 1:X} is NaN)"
        )
    if f.scale == "e4m3":
        c = f.code_text()
        return (
            f"{t}( fp32( {c} * e4m3(s) * g ) ): {c.removesuffix('(q)')} * e4m3 exact, times the fp32 global scale g "
            f"rounded to fp32, then once to {t}"
        )
    expr = expression(f, rnd=t, q=f.code_text(), pad=True)
    if f.code_kind == "float":
        return f"{expr}, rounded once to nearest-even ({f.code_text()} is exact in {t})"
    if f.code_kind == "codebook":
        return f"{expr}: the entry rounded once to {t} when the kernel is built, the product once more"
    note = f.zero.note.format(t=t)
    return f"{expr}{':' if f.zero.combine == 'subtract_rounded' else ','} {note}"


def kernel_scale_formula(f: ValueFormula) -> str:
    """The scale stage as the generated converter's comment writes it (d[i]: the converted code, integer zero
    points already subtracted; f[i]: a dense zero)."""
    return expression(f, q="d[i]", s="s[i]", z="f[i]", b="f[i]", zero_folded=True)


def kernel_value_doc(f: ValueFormula) -> str:
    """The value formula of block-scaled specs, for the converter's header comment ('' otherwise)."""
    t = f.target
    if f.scale == "e8m0":
        return (
            f"value = {t}( q * 2^(E - {_e8m0_bias()}) ), E the block's e8m0 scale byte (0xFF: NaN), "
            "rounded once to nearest-even."
        )
    if f.scale == "e4m3":
        g = " * g" if f.global_scale else ""
        return (
            f"value = {t}( fp32( q * e4m3(s){g} ) ): q * e4m3(s) exact"
            f"{', the fp32 global scale g applied in fp32' if g else ''}, then one rounding to nearest-even {t}."
        )
    return ""


def kernel_zeros_doc(f: ValueFormula, per_word: int) -> str:
    """The zero-point tensor as the generated kernel's signature comment names it."""
    zr = f.zero
    if zr.storage == "none":
        return ""
    if zr.storage == "packed":
        return f", qzeros [G, N/{per_word}] int32 ({zr.mode})"
    return f", {'zeros' if zr.combine == 'subtract_rounded' else 'b'} [G, N] {f.target}"


def zero_mode_doc(rule: ZeroRule) -> str:
    """One line per zero mode for ``dqgen list``: who uses it, how it is stored, the formula."""
    f = ValueFormula("target", "integer", 0, "", rule, "group", False)
    storage = {
        "none": "no zero points",
        "packed": "unsigned bits-wide zero codes packed along N (qzeros [G, N/P] int32)"
        + (f", stored z - {rule.stored_offset}" if rule.stored_offset else ""),
        "dense": ("pre-scaled zeros b" if rule.combine == "add_after_scale" else "zeros z")
        + " [G, N] in the target dtype",
    }[rule.storage]
    only = "; the only mode for float and codebook sources" if rule.storage == "none" else ""
    return f"{rule.users}: {storage}, {expression(f)}{only}"
