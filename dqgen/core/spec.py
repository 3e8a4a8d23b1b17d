"""The spec: a declarative description of one packed weight format and its dequantized target.

These pydantic models are the schema and its documentation. A weight tensor is logically
``W[K, N]`` (K = input features, the reduction axis of the GEMM; N = output features). Its
integer codes are packed into 32-bit words along one axis; each element dequantizes to

    value = round_to_target( (code_value - zero) * scale )

where ``code_value`` depends on ``source.kind`` (see ``Source``), ``zero`` on ``zeros`` (0 when
there are none) and ``scale`` is the element's group scale. The subtraction is exact (small
integers), so there is exactly one rounding, to nearest-even in the target format.
"""

from __future__ import annotations

import math
import os
import re
import stat
from enum import Enum
from pathlib import Path
from typing import Any, Literal, TypeAlias

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .formats import ScalarType, integer, numpy_dtype, scalar_type, with_role
from .formula import ZERO_RULES, ZeroRule, zero_mode_doc
from .printable import printable

CONTAINER_BITS = 32
INTEGER_BITS = (1, 2, 3, 4, 8)  # integer code widths with a solver strategy (3: multi-word blocks)
SOLVED_BITS = (1, 2, 3, 4, 6, 8)  # every solved width: 6 is the FP6 minifloats (e2m3, e3m2) in 3-word blocks

#: Named element orders. ``order[j]`` is the element stored in field ``j`` of a word, field 0
#: being the least significant ``bits`` bits.
ORDER_PRESETS: dict[str, dict[int, list[int]]] = {
    # Element j in field j: GPTQ's qweight along K, plain little-endian packing.
    "sequential": {b: list(range(CONTAINER_BITS // b)) for b in (1, 2, 4, 8)},
    # AutoAWQ's AWQ_ORDER (awq/utils/packing_utils.py): nibble j holds element [0,2,4,6,1,3,5,7][j],
    # which is FasterTransformer's interleaved register order [e7 e5 e3 e1 e6 e4 e2 e0].
    "awq": {4: [0, 2, 4, 6, 1, 3, 5, 7]},
    # FasterTransformer's int8 register order, written MSB-first as [e3 e1 e2 e0] (CUTLASS: "[3120]").
    "ft_int8": {8: [0, 2, 1, 3]},
}

#: One line per order preset, for ``dqgen list``.
ORDER_PRESET_DOCS: dict[str, str] = {
    "sequential": "element j in field j, plain little-endian packing (GPTQ's qweight along K); codes that straddle "
    "words (3 bits): code i is bits [bits*i, bits*i + bits) of a run of packing.words words",
    "awq": "AutoAWQ's AWQ_ORDER (awq/utils/packing_utils.py): FasterTransformer's interleaved register order "
    "[e7 e5 e3 e1 e6 e4 e2 e0]",
    "ft_int8": 'FasterTransformer\'s int8 register order, written MSB-first as [e3 e1 e2 e0] (CUTLASS: "[3120]")',
}


def block_words(bits: int) -> int:
    """32-bit words per packing block of ``bits``-bit codes: 1 when ``bits`` divides 32, else ``bits / gcd(bits,
    32)`` (3-bit and 6-bit: 3). The spec validates against it; ``dqgen.layout.Layout`` owns everything built on it."""
    return bits // math.gcd(bits, CONTAINER_BITS)


class SpecError(ValueError):
    """An invalid spec: one line naming the field, the value and what is allowed."""


#: How much of a bad value an error message echoes: a value can be megabytes (or an alias bomb's expansion).
SHOWN_VALUE_CHARS = 80


def shown(value: object) -> str:
    """``repr(value)`` cut to ``SHOWN_VALUE_CHARS`` characters (with an ellipsis), for error messages."""
    text = _bounded_repr(value)
    return _cut(text, SHOWN_VALUE_CHARS)


def _bounded_repr(value: object, depth: int = 0) -> str:
    """repr that stops early (nested containers past a few levels or items show as ``...``): a plain repr of an
    alias-shared container is built in full, exponentially large, before it could be cut."""
    if isinstance(value, (list, tuple)):
        if depth > 3:
            return "[...]"
        items = [_bounded_repr(v, depth + 1) for v in list(value)[:8]]
        return "[" + ", ".join(items) + (", ...]" if len(value) > 8 else "]")
    if isinstance(value, dict):
        if depth > 3:
            return "{...}"
        items = [f"{_bounded_repr(k, depth + 1)}: {_bounded_repr(v, depth + 1)}" for k, v in list(value.items())[:8]]
        return "{" + ", ".join(items) + (", ...}" if len(value) > 8 else "}")
    if isinstance(value, str) and len(value) > 4 * SHOWN_VALUE_CHARS:
        value = value[: 4 * SHOWN_VALUE_CHARS]
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<a {value.bit_length()}-bit integer>"  # repr of a huge int is slow, past 4300 digits an error
    return repr(value)


class Target(str, Enum):
    fp16 = "fp16"
    bf16 = "bf16"
    # int8 lanes (4 per 32-bit word) for the W4A8 GEMM's int8 x int8 wgmma: the exact integer code - offset - zero
    # as a two's-complement byte; the group scale is applied later, in fp32, to the int32 sums (docs/formats.md)
    s8 = "s8"


#: The source kinds and widths an s8 target converts: 4-bit integer codes (every value q - offset - zero lies in
#: [-15, 15], so a byte holds it and the byte-wise arithmetic of the s8 plan never borrows across bytes).
S8_SOURCE_BITS = (4,)
#: The 16-bit scale dtypes an s8 spec may name (the checkpoint's; the W4A8 GEMM reads them as fp32).
S8_SCALE_DTYPES = ("fp16", "bf16")


class SourceKind(str, Enum):
    unsigned = "unsigned"  # code_value = q
    signed = "signed"  # code_value = two's-complement value of q
    biased = "biased"  # code_value = q - bias (GPTQ u4b8: bias 8; u8b128: bias 128)
    float = "float"  # code_value = the minifloat whose bits are q (e4m3, e5m2, e2m1)
    codebook = "codebook"  # code_value = codebook[q], rounded to the target once

    @property
    def integer(self) -> bool:
        """An integer code (q, its two's complement or q - bias): what the integer GEMMs and W4A8 take, and what
        one code family shares in cost."""
        return self in (SourceKind.unsigned, SourceKind.signed, SourceKind.biased)


#: The minifloat element formats a spec may name in ``source.format`` (rows of ``dqgen.core.formats``; each row
#: says its bits, its NaN / inf convention, its one-line doc for ``dqgen list`` and the block scales it takes).
ELEMENT_FORMATS: dict[str, ScalarType] = with_role("element")

#: QLoRA's NF4 (bitsandbytes ``get_4bit_type('nf4')`` / the QLoRA paper, appendix E): 16 values, as published.
NF4_CODEBOOK: list[float] = [
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
]
CODEBOOK_PRESETS: dict[str, list[float]] = {"nf4": NF4_CODEBOOK}
#: One line per codebook preset, for ``dqgen list``.
CODEBOOK_PRESET_DOCS: dict[str, str] = {
    "nf4": "QLoRA's NormalFloat4 (bitsandbytes get_4bit_type('nf4'), the QLoRA paper's appendix E), as published; "
    "each entry is rounded once to the target, then the product with the scale once more (bitsandbytes multiplies "
    "in fp32 and rounds once, and packs the first code in the high nibble: its outputs differ in the last bit)",
}


class Source(BaseModel):
    """The stored integer code of one element: ``bits`` wide, read as ``kind`` says.

    - ``unsigned``: value q in [0, 2^bits).
    - ``signed``: two's complement, value in [-2^(bits-1), 2^(bits-1)).
    - ``biased``: stored q in [0, 2^bits), value q - ``bias`` (vLLM's u4b8 / u8b128).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    bits: int = Field(
        description="Width of one code in bits: 1, 2, 3, 4, 6 or 8. 3-bit codes straddle words "
        "(GPTQ: 32 codes in 3 words), as do 6-bit FP6 codes (16 in 3 words): see ``Packing.words``."
    )
    # Enums stay lax (strict would take Enum instances only, not the strings YAML gives); lax enums coerce nothing else.
    kind: SourceKind = Field(strict=False, description="How a code's bits map to a value.")
    bias: int | None = Field(
        default=None, description="For kind 'biased' only: the value is q - bias, 0 <= bias < 2^bits."
    )
    format: str | None = Field(
        default=None,
        description="For kind 'float' only: the minifloat format of each code (e4m3, e5m2: 8 bits; e2m1: 4 bits).",
        json_schema_extra={"enum": list(ELEMENT_FORMATS)},
    )
    codebook: str | list[float] | None = Field(
        default=None,
        description="For kind 'codebook' only: a preset name ('nf4') or 1 to 16 values (4-bit codes); "
        "code q means codebook[q]. Each value is rounded once to the target (nearest-even) when the kernel is "
        "built; the product with the scale is rounded once more.",
    )

    @field_validator("codebook", mode="before")
    @classmethod
    def _codebook_type(cls, v: Any) -> Any:
        # one message for every wrong shape (pydantic would report each branch of the Union separately)
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            return [float(x) for x in v]
        raise ValueError(
            "expected a preset name ('nf4') or a list of 1 to 16 numbers"
            + (f", got {shown(v)}" if isinstance(v, dict) else "")
        )

    @field_validator("format")
    @classmethod
    def _format(cls, v: str | None) -> str | None:
        if v is not None and v not in ELEMENT_FORMATS:
            raise ValueError(f"must be one of {', '.join(ELEMENT_FORMATS)}, got {shown(v)}")
        return v

    @field_validator("bits")
    @classmethod
    def _bits(cls, v: int) -> int:
        if v not in SOLVED_BITS:
            # 5-7 bits would straddle words in 5-7-word blocks; no solver strategy places those windows yet
            raise ValueError(f"must be one of {', '.join(map(str, SOLVED_BITS))}, got {shown(v)}")
        return v

    @property
    def scalar_type(self) -> ScalarType | None:
        """The number format of one code (a registry row: e4m3, u4b8, s4); None for codebook codes."""
        if self.kind is SourceKind.codebook:
            return None
        if self.kind is SourceKind.float:
            return ELEMENT_FORMATS[self.format] if self.format else None
        return integer(self.bits, self.kind is SourceKind.signed, self.offset)

    @property
    def codebook_values(self) -> list[float]:
        if isinstance(self.codebook, str):
            return list(CODEBOOK_PRESETS[self.codebook])
        return list(self.codebook or [])

    @model_validator(mode="after")
    def _kind_fields(self) -> Source:
        if self.kind is not SourceKind.float and self.format is not None:
            raise ValueError(
                f"[source.format] ({self.format}) is only allowed with kind 'float', not '{self.kind.value}'"
            )
        if self.kind is not SourceKind.codebook and self.codebook is not None:
            raise ValueError(f"[source.codebook] is only allowed with kind 'codebook', not '{self.kind.value}'")
        if self.kind not in (SourceKind.float, SourceKind.codebook) and self.bits not in INTEGER_BITS:
            fp = " / ".join(n for n, t in ELEMENT_FORMATS.items() if t.width == self.bits)
            raise ValueError(
                f"[source.bits] {self.bits}-bit codes are solved for kind 'float' only (format {fp}); "
                f"{self.kind.value} codes take {', '.join(map(str, INTEGER_BITS))} bits"
            )
        if self.kind is SourceKind.float:
            if self.format is None:
                raise ValueError(
                    "[source.format] kind 'float' needs 'format': one of "
                    + ", ".join(f"{n} ({t.width} bits)" for n, t in ELEMENT_FORMATS.items())
                )
            width = ELEMENT_FORMATS[self.format].width
            if self.bits != width:
                raise ValueError(f"[source.bits] format {self.format} is {width} bits wide, but bits is {self.bits}")
        if self.kind is SourceKind.codebook:
            if self.codebook is None:
                raise ValueError(
                    "[source.codebook] kind 'codebook' needs 'codebook': 'nf4' or a list of 1 to 16 values"
                )
            if isinstance(self.codebook, str) and self.codebook not in CODEBOOK_PRESETS:
                raise ValueError(
                    f"[source.codebook] {shown(self.codebook)} is not a preset; presets: {sorted(CODEBOOK_PRESETS)} "
                    "(or give a list of values)"
                )
            vals = self.codebook_values
            if self.bits != 4:
                raise ValueError(
                    f"[source.bits] codebook codes are 4 bits wide (a 16-entry PRMT lookup; a shorter codebook "
                    f"leaves codes unused), got bits {self.bits}"
                )
            if not 1 <= len(vals) <= 1 << self.bits:
                raise ValueError(
                    f"[source.codebook] a {self.bits}-bit codebook has 1 to {1 << self.bits} entries, got {len(vals)}"
                )
            bad = [v for v in vals if not math.isfinite(v)]
            if bad:
                raise ValueError(
                    f"[source.codebook] values must be finite numbers, got {bad[0]} (entry {vals.index(bad[0])})"
                )
        if self.kind is SourceKind.biased:
            if self.bias is None:
                raise ValueError("kind 'biased' needs 'bias' (e.g. 8 for u4b8, 128 for u8b128)")
            if not 0 <= self.bias < (1 << self.bits):
                raise ValueError(f"bias must be in [0, {1 << self.bits}) for {self.bits}-bit codes, got {self.bias}")
        elif self.bias is not None:
            raise ValueError(f"'bias' ({self.bias}) is only allowed with kind 'biased', not '{self.kind.value}'")
        return self

    @property
    def offset(self) -> int:
        """The constant subtracted from the unsigned field value (bias); 0 otherwise."""
        return self.bias if self.kind is SourceKind.biased and self.bias is not None else 0

    @property
    def short(self) -> str:
        if self.kind is SourceKind.float:
            return self.format or "float"
        if self.kind is SourceKind.codebook:
            return self.codebook if isinstance(self.codebook, str) else f"cb{self.bits}"
        if self.kind is SourceKind.signed:
            return f"s{self.bits}"
        if self.kind is SourceKind.biased:
            return f"u{self.bits}b{self.bias}"
        return f"u{self.bits}"


class Packing(BaseModel):
    """How codes sit in 32-bit words.

    ``axis`` is the logical axis along which consecutive elements share a word: ``N`` (AWQ:
    qweight is [K, N/8] int32) or ``K`` (GPTQ: qweight is [K/8, N] int32). ``order[j]`` is the
    index (within the word's run of 32/bits consecutive elements) of the element whose bits are
    ``[j*bits, (j+1)*bits)`` of the word. A preset name or an explicit permutation.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    container: Literal[32] = Field(default=32, description="Word width in bits; 32 is the only one.")
    axis: Literal["N", "K"] = Field(description="Logical axis packed into a word.")
    order: str | list[int] = Field(default="sequential", description="Preset name or permutation.")
    words: int | None = Field(
        default=None,
        description="32-bit words per packing block: bits / gcd(bits, 32). 1 for 1/2/4/8-bit codes; for 3-bit "
        "codes GPTQ packs 32 codes into 3 words (code i at bits [3i, 3i+3) of the 96-bit little-endian run, some "
        "codes straddling two words), 6-bit FP6 codes 16 into 3. Derived when omitted; a stated value must match.",
    )

    @field_validator("container", mode="before")
    @classmethod
    def _container_int(cls, v: Any) -> Any:
        # Literal[32] compares by ==, so strict mode alone would let 32.0 through
        if type(v) is not int:
            raise ValueError(f"expected the integer 32, got {shown(v)}")
        return v

    def block_words(self, bits: int) -> int:
        return block_words(bits)

    def resolved_order(self, bits: int) -> list[int]:
        if isinstance(self.order, str):
            if self.order == "sequential":
                return list(range(CONTAINER_BITS * self.block_words(bits) // bits))
            return ORDER_PRESETS[self.order][bits]
        return list(self.order)


class ScaleDtype(str, Enum):
    fp16 = "fp16"
    bf16 = "bf16"
    e8m0 = "e8m0"  # MX block scale: byte E means 2^(E - 127); 0xFF is NaN
    e4m3 = "e4m3"  # NVFP4 block scale: an OCP e4m3fn byte (with a per-tensor fp32 global scale)


#: The scale dtypes that are one-byte block-scale codes (the registry's ``block_scale`` rows).
BLOCK_SCALE_DTYPES = tuple(with_role("block_scale"))

#: The most rows or columns a tensor may have: the kernels index them with 32-bit signed integers.
MAX_ROWS = 2**31 - 1

#: One line per block-scale dtype, for ``dqgen list``.
BLOCK_SCALE_DOCS: dict[str, str] = {
    "e8m0": "MXFP4 / MXFP6: a byte E per block of e2m1 / e2m3 / e3m2 codes along K (32 in MX) meaning 2^(E - 127), "
    "0xFF NaN; no global scale",
    "e4m3": "NVFP4: an OCP e4m3fn byte per block of e2m1 codes along K (16 in NVFP4), times a per-tensor fp32 "
    "global scale (global_scale: true)",
}


class Scales(BaseModel):
    """One scale per (group of ``group_size`` rows along K, output column n).

    ``group_size = -1`` means one group spanning all of K (per-channel). Scales are stored
    ``[K/group_size, N]`` in ``dtype``: the target dtype, or a one-byte block-scale code
    (``e8m0`` for MXFP4, ``e4m3`` for NVFP4, stored as uint8 / float8_e4m3fn). With
    ``global_scale`` the kernel also takes one fp32 number per tensor (NVFP4's second-level
    scale). Block-scaled values are formed without intermediate under- or overflow:

    - ``e8m0``: ``round_to_target(code_value * 2^(E-127))``, one rounding (E = 0xFF gives NaN);
    - ``e4m3`` + global scale: ``round_to_target(round_fp32(code_value * e4m3(s) * global))``: the
      product of the element and its e4m3 scale is exact, the global scale is applied in fp32
      (one fp32 rounding), then one rounding to the target. ``global`` multiplies: it is ModelOpt's
      ``weight_scale_2``. compressed-tensors' ``weight_global_scale`` (and vLLM's / FlashInfer's
      ``global_scale`` argument) is its reciprocal: pass ``1 / weight_global_scale``. Their references
      compute ``x * fp32(s / G)``, which rounds differently from this in about 1e-5 of fp16 outputs.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    group_size: int | Literal["auto"] = Field(
        description="Rows of K sharing a scale; -1 for per-channel; 'auto': K / rows of scales, per call."
    )
    dtype: ScaleDtype | None = Field(default=None, strict=False, description="Scale dtype; defaults to the target.")
    global_scale: bool = Field(
        default=False, description="One fp32 scale per tensor on top of the block scales (NVFP4)."
    )

    @property
    def block(self) -> bool:
        return self.dtype is not None and self.dtype.value in BLOCK_SCALE_DTYPES

    @field_validator("group_size", mode="before")
    @classmethod
    def _group_type(cls, v: Any) -> Any:
        # One message for the union (pydantic would report each member's failure separately).
        if v != "auto" and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError("expected a whole number of rows, -1 (per-channel) or 'auto'")
        return v

    @field_validator("group_size")
    @classmethod
    def _group_bounded(cls, v: Any) -> Any:
        if isinstance(v, int) and v > MAX_ROWS:
            raise ValueError(
                f"must be at most {MAX_ROWS} rows (kernels index rows with 32-bit integers), got {shown(v)}"
            )
        return v

    @field_validator("group_size")
    @classmethod
    def _group(cls, v: int | str) -> int | str:
        if v == "auto":
            return v
        if not isinstance(v, int) or v == 0 or v < -1:
            raise ValueError(f"must be -1 (per-channel) or a positive number of rows, got {v}")
        return v


ZeroMode = Literal["none", "integer", "gptq_v1", "gptq_v2", "float", "additive"]
#: The modes whose zero points are packed integer words (``dqgen.core.formula.ZERO_RULES`` says each mode's rule).
PACKED_ZERO_MODES = tuple(m for m, r in ZERO_RULES.items() if r.packed)

#: One line per zero-point mode, for ``dqgen list`` (``Zeros`` documents the rounding of each).
ZERO_MODE_DOCS: dict[str, str] = {m: zero_mode_doc(r) for m, r in ZERO_RULES.items()}


class Zeros(BaseModel):
    """Zero points, one per (group, output column n). ``q`` below is the element's code value
    (see ``Source``) and ``s`` its scale; every mode rounds exactly where it says.

    - ``none``: symmetric: ``round(q * s)`` (a fixed bias lives in ``source``).
    - ``integer`` (AWQ, and GPTQ ``checkpoint_format: gptq_v2``): unsigned ``bits``-wide zero codes
      ``z`` packed into 32-bit words along N, qzeros ``[G, N/P]`` int32, in the weights' element order
      when the weights are packed along N (AWQ) and in sequential order when they are packed along K
      (GPTQ): ``round((q - z) * s)``. Exact integer subtraction, one rounding; dqgen folds ``z`` into
      the magic subtraction, so it costs no op per element.
    - ``gptq_v2``: the same as ``integer`` (GPTQ's name for it).
    - ``gptq_v1``: GPTQ's original convention, stored zero = z - 1: ``round((q - (stored + 1)) * s)``.
      A zero point of 0 cannot be stored this way: it wraps to 2^bits - 1, which reads back as 2^bits.
    - ``float`` (HQQ): zeros ``[G, N]`` in the target dtype: ``round(round(q - z) * s)``, the two
      roundings of doing it in target-precision arithmetic.
    - ``additive`` (TensorRT-LLM fine-grained, pre-scaled zeros): ``b`` ``[G, N]`` in the target dtype:
      ``round(q * s + b)``, one rounding (an fma).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    mode: ZeroMode = "none"

    @property
    def rule(self) -> ZeroRule:
        return ZERO_RULES[self.mode]

    @property
    def packed(self) -> bool:
        return self.rule.packed

    @property
    def dense(self) -> bool:
        """Zero points given as a [G, N] tensor in the target dtype (float, additive)."""
        return self.rule.dense

    @property
    def stored_offset(self) -> int:
        """What is added to a stored packed zero to get z."""
        return self.rule.stored_offset


#: ``sm_<number>[a|f]``, matched in full (``re.fullmatch``; ASCII digits only, no trailing newline).
ARCH_RE = re.compile(r"sm_([0-9]{1,4})([af]?)")

#: The real architectures NVRTC 13 compiles for (``nvrtcGetSupportedArchs``; tests/test_spec.py compares the two
#: where cuda-bindings is installed). Fixed here so that a spec's validity does not depend on the machine.
NVRTC_ARCHS = (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)


def arch_problem(arch: str) -> str | None:
    """Why ``arch`` is no architecture dqgen can compile for, or None when it is one."""
    m = ARCH_RE.fullmatch(arch)
    if not m:
        return "must look like 'sm_80', 'sm_90' or 'sm_90a' (sm_, ASCII digits, an optional a or f)"
    sm, suffix = int(m.group(1)), m.group(2)
    if sm < NVRTC_ARCHS[0]:
        return f"{arch} is older than sm_75, the oldest NVRTC 13 targets"
    if sm not in NVRTC_ARCHS:
        return f"{arch} is not an architecture NVRTC 13 targets (sm_{', sm_'.join(map(str, NVRTC_ARCHS))})"
    if (suffix == "a" and sm < 90) or (suffix == "f" and sm < 100):
        return f"{arch}: the 'a' suffix exists from sm_90 on and 'f' from sm_100 on"
    return None


#: C and C++ keywords (C23, C++23 and the alternative operator tokens): a spec name becomes a C++ namespace.
C_KEYWORDS = frozenset(
    [
        "alignas",
        "alignof",
        "and",
        "and_eq",
        "asm",
        "atomic_cancel",
        "atomic_commit",
        "atomic_noexcept",
        "auto",
        "bitand",
        "bitor",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "char8_t",
        "char16_t",
        "char32_t",
        "class",
        "compl",
        "concept",
        "const",
        "consteval",
        "constexpr",
        "constinit",
        "const_cast",
        "continue",
        "co_await",
        "co_return",
        "co_yield",
        "decltype",
        "default",
        "delete",
        "do",
        "double",
        "dynamic_cast",
        "else",
        "enum",
        "explicit",
        "export",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "not",
        "not_eq",
        "nullptr",
        "operator",
        "or",
        "or_eq",
        "private",
        "protected",
        "public",
        "reflexpr",
        "register",
        "reinterpret_cast",
        "requires",
        "restrict",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "static_assert",
        "static_cast",
        "struct",
        "switch",
        "synchronized",
        "template",
        "this",
        "thread_local",
        "throw",
        "true",
        "try",
        "typedef",
        "typeid",
        "typename",
        "typeof",
        "typeof_unqual",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "wchar_t",
        "while",
        "xor",
        "xor_eq",
        "_Alignas",
        "_Alignof",
        "_Atomic",
        "_BitInt",
        "_Bool",
        "_Complex",
        "_Decimal32",
        "_Decimal64",
        "_Decimal128",
        "_Generic",
        "_Imaginary",
        "_Noreturn",
        "_Static_assert",
        "_Thread_local",
    ]
)
#: CUDA's built-in variables: any kernel of the spec refers to them from inside the spec's namespace.
CUDA_BUILTIN_VARIABLES = ("threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize")
#: CUDA's vector types (vector_types.h) and their make_ functions.
_VECTOR_BASES = ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "longlong", "ulonglong")
CUDA_VECTOR_TYPES = (*(f"{base}{n}" for base in (*_VECTOR_BASES, "float", "double") for n in (1, 2, 3, 4)), "dim3")
#: Device functions and types that CUDA declares at global scope without a leading double underscore (those are
#: reserved already): atomics, the float math the kernels use or may use, fixed-width integers, fp16 / bf16 types.
CUDA_GLOBAL_NAMES = (
    *(f"atomic{op}" for op in ("Add", "Sub", "Exch", "Min", "Max", "Inc", "Dec", "CAS", "And", "Or", "Xor")),
    *("fmaf", "fminf", "fmaxf", "fabsf", "rintf", "roundf", "truncf", "floorf", "ceilf", "sqrtf", "rsqrtf"),
    *("expf", "exp2f", "logf", "log2f", "tanhf", "fma", "fmin", "fmax", "fabs", "rint", "sqrt", "exp", "log"),
    *("min", "max", "abs", "isnan", "isinf", "isfinite", "printf", "assert", "malloc", "free", "memcpy", "memset"),
    *("clock", "clock64", "size_t", "ptrdiff_t", "intptr_t", "uintptr_t"),
    *(f"{u}int{b}_t" for u in ("", "u") for b in (8, 16, 32, 64)),
    *("half", "half2", "nv_bfloat16", "nv_bfloat162"),
)
#: Names that CUDA declares at global scope and the generated code uses unqualified inside the spec's C++ namespace
#: (``dqgen::<name>``): a spec named after one hides it there, and NVRTC fails after the build wrote ``.cu`` /
#: ``.cuh`` files. tests/test_defects_spec_names.py compiles every shipped spec's sources with every other name
#: they use declared beside the spec's namespace, so that a template using a new global name fails there first.
CUDA_RESERVED_NAMES = frozenset(CUDA_BUILTIN_VARIABLES + CUDA_VECTOR_TYPES)
CUDA_RESERVED_NAMES |= {f"make_{t}" for t in CUDA_VECTOR_TYPES if t != "dim3"} | set(CUDA_GLOBAL_NAMES)

#: The longest spec name: it names files and C++ identifiers (``dqgen_<name>_v4_r2_u``), well inside file-name limits.
MAX_NAME_CHARS = 64


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a spec (a C++ namespace and file names), or None when it can."""
    if len(name) > MAX_NAME_CHARS:
        return f"must be at most {MAX_NAME_CHARS} characters, got {len(name)}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return "must be a C identifier (ASCII letters, digits and _, not starting with a digit)"
    if name in C_KEYWORDS:
        return "a C/C++ keyword cannot name the generated C++ namespace"
    if name in CUDA_RESERVED_NAMES:
        kind = "built-in variable" if name in CUDA_BUILTIN_VARIABLES else "global name"
        return f"a CUDA {kind} the generated kernels use: as their C++ namespace the spec's name would hide it"
    if "__" in name or re.match(r"_[A-Z]", name):
        # reserved for the implementation (C++ [lex.name]); CUDA's __global__, __device__ ... are among them
        return "reserved in C++ (names with a double underscore, or starting with _ and a capital letter)"
    return None


class Spec(BaseModel):
    """A dequantization spec: one YAML file. See the module docstring for the value formula."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(
        description="C identifier (at most 64 characters) used for generated file names and namespaces: no C/C++ "
        "keyword, reserved name or CUDA global the kernels use (threadIdx, uint4, ...: CUDA_RESERVED_NAMES)."
    )
    description: str = ""
    source: Source
    target: Target = Field(strict=False)
    packing: Packing
    scales: Scales
    zeros: Zeros = Zeros()
    act_order: bool = Field(
        default=False,
        description="GPTQ desc_act: row k uses group g_idx[k] (an int32 [K] tensor given at call time) "
        "instead of k // group_size. Packing along K only.",
    )
    arch: str = Field(default="sm_80", description="Minimum compute capability, e.g. sm_80, sm_90.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: str) -> str:
        problem = arch_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @property
    def sm(self) -> int:
        m = ARCH_RE.fullmatch(self.arch)
        assert m
        return int(m.group(1))

    @property
    def target_type(self) -> ScalarType:
        """The target's number format (the registry row fp16 or bf16; the integer format s8)."""
        return scalar_type(self.target.value)

    @property
    def integer_target(self) -> bool:
        """Whether the target is int8 lanes (s8: the W4A8 GEMM's operand) rather than a 16-bit float."""
        return self.target is Target.s8

    @property
    def words(self) -> int:
        """32-bit words per packing block (1 unless codes straddle words)."""
        return self.packing.block_words(self.source.bits)

    @property
    def per_word(self) -> int:
        """Codes per packing block (a single word unless ``words`` > 1)."""
        return CONTAINER_BITS * self.words // self.source.bits

    @property
    def order(self) -> list[int]:
        return self.packing.resolved_order(self.source.bits)

    @property
    def zero_order(self) -> list[int]:
        """Element order of packed zero words (always packed along N): the weights' order when they are
        packed along N too (AWQ's qzeros), sequential otherwise (GPTQ's qzeros)."""
        return self.order if self.packing.axis == "N" else list(range(self.per_word))

    @model_validator(mode="after")
    def _cross(self) -> Spec:
        bits = self.source.bits
        words = self.packing.block_words(bits)
        if self.packing.words is not None and self.packing.words != words:
            raise _field_error(
                "packing.words",
                self.packing.words,
                f"{words}: {bits}-bit codes fill whole 32-bit words only in runs of {words} "
                f"word{'s' if words > 1 else ''} "
                f"({CONTAINER_BITS * words // bits} codes)",
            )
        n = CONTAINER_BITS * words // bits
        if words > 1:
            if self.packing.axis != "K":
                raise _field_error(
                    "packing.axis",
                    self.packing.axis,
                    f"'K' for {bits}-bit codes: codes that straddle words are packed along K (GPTQ's layout)",
                )
            if self.packing.order != "sequential":
                raise _field_error(
                    "packing.order",
                    self.packing.order,
                    f"'sequential' for {bits}-bit codes (code i at bits [{bits}i, {bits}i+{bits}) of the "
                    f"{words}-word run)",
                )
            if self.zeros.packed:
                raise _field_error(
                    "zeros.mode",
                    self.zeros.mode,
                    f"'none', 'float' or 'additive' for {bits}-bit codes (packed {bits}-bit zero points straddle "
                    "words; not supported)",
                )
        order = self.packing.order
        if isinstance(order, str):
            if order not in ORDER_PRESETS:
                raise _field_error("packing.order", order, f"one of {sorted(ORDER_PRESETS)} or a permutation")
            if bits not in ORDER_PRESETS[order] and not (order == "sequential" and words > 1):
                fits = sorted(ORDER_PRESETS[order])
                raise _field_error(
                    "packing.order", order, f"a preset defined for {bits}-bit codes ({order!r} is for {fits}-bit)"
                )
        elif sorted(order) != list(range(n)):
            raise _field_error(
                "packing.order", order, f"a permutation of 0..{n - 1} ({n} fields of {bits} bits per word)"
            )
        sd = self.scales.dtype
        kind = self.source.kind
        if self.target is Target.s8:
            self._check_s8()
        elif sd is not None and not self.scales.block and sd.value != self.target.value:
            raise _field_error(
                "scales.dtype", sd.value, f"the target dtype {self.target.value!r}, or a block-scale code (e8m0, e4m3)"
            )
        if self.scales.block:
            assert sd is not None  # block means a block-scale dtype
            element = self.source.scalar_type
            if element is None or sd.value not in element.block_scales:
                takers = " or ".join(n for n, t in ELEMENT_FORMATS.items() if sd.value in t.block_scales)
                raise _field_error(
                    "scales.dtype",
                    sd.value,
                    f"the target dtype {self.target.value!r} for {self.source.short} codes: "
                    f"{sd.value} block scales go with {takers} codes "
                    "(MXFP4: e8m0 per 32, NVFP4: e4m3 per 16)",
                )
            if self.packing.axis != "K":
                raise _field_error(
                    "packing.axis", self.packing.axis, f"'K' with {sd.value} block scales (blocks run along K)"
                )
            if self.scales.group_size == "auto" or self.scales.group_size <= 0:
                raise _field_error(
                    "scales.group_size",
                    self.scales.group_size,
                    f"a positive block size with {sd.value} scales (MXFP4: 32, NVFP4: 16)",
                )
            if sd.value == "e4m3" and not self.scales.global_scale:
                raise _field_error(
                    "scales.global_scale",
                    False,
                    "true with e4m3 block scales: NVFP4's e4m3 scales (max 448) only cover a tensor's range together "
                    "with its fp32 global scale",
                )
            if sd.value == "e8m0" and self.scales.global_scale:
                raise _field_error(
                    "scales.global_scale", True, "false with e8m0 block scales (MXFP4 has no global scale)"
                )
        elif self.scales.global_scale:
            raise _field_error("scales.global_scale", True, "false unless scales.dtype is e4m3 (NVFP4)")
        if kind in (SourceKind.float, SourceKind.codebook) and self.zeros.mode != "none":
            raise _field_error(
                "zeros.mode",
                self.zeros.mode,
                f"'none' for {kind.value} codes ({self.source.short}): zero points shift integer codes; "
                + (
                    "a minifloat code is already a signed value"
                    if kind is SourceKind.float
                    else "a codebook entry is already the value"
                ),
            )
        if kind is SourceKind.codebook:
            import numpy as np

            dt = numpy_dtype(self.target_type)
            with np.errstate(over="ignore"):
                big = [v for v in self.source.codebook_values if np.isinf(np.array(v, dtype=np.float64).astype(dt))]
            if big:
                raise _field_error(
                    "source.codebook", big[0], f"values within the {self.target.value} range: this one rounds to inf"
                )
        if self.act_order and self.scales.block:
            raise _field_error("act_order", True, "false with block scales (blocks are contiguous along K)")
        if self.target is Target.bf16 and self.sm < 80:
            raise _field_error("arch", self.arch, "sm_80 or newer for bf16 (bf16x2 arithmetic starts at sm_80)")
        g = self.scales.group_size
        # 'auto' is resolved per call from the scales' rows (run.problem.infer_problem, reference._validate check it)
        if self.packing.axis == "K" and g != "auto" and g != -1 and g % n:
            raise _field_error(
                "scales.group_size",
                g,
                f"-1 or a multiple of {n}: with packing along K a {'word' if words == 1 else f'{words}-word block'} "
                f"holds {n} rows",
            )
        if self.zeros.packed and self.source.kind is not SourceKind.unsigned:
            raise _field_error(
                "zeros.mode",
                self.zeros.mode,
                f"'none', 'float' or 'additive' for {self.source.kind.value} codes (packed integer zero points need "
                "kind 'unsigned')",
            )
        if self.act_order and self.packing.axis != "K":
            raise _field_error(
                "act_order", True, "false with packing along N (g_idx permutes rows of K; GPTQ packs along K)"
            )
        if self.act_order and g != "auto" and g <= 0:
            raise _field_error("act_order", True, "a positive scales.group_size (g_idx maps rows to groups)")
        return self

    def _check_s8(self) -> None:
        """An s8 target takes 4-bit integer codes, integer (or no) zero points and 16-bit group scales."""
        kind, bits = self.source.kind, self.source.bits
        if not kind.integer or bits not in S8_SOURCE_BITS:
            raise _field_error(
                "target",
                "s8",
                f"fp16 or bf16 for {self.source.short} codes: s8 lanes take "
                f"{'/'.join(map(str, S8_SOURCE_BITS))}-bit integer codes (unsigned, signed or biased)",
            )
        if self.zeros.dense:
            raise _field_error(
                "zeros.mode",
                self.zeros.mode,
                "'none', 'integer', 'gptq_v1' or 'gptq_v2' with target s8 (a float zero point has no int8 value)",
            )
        sd = self.scales.dtype
        if sd is None or sd.value not in S8_SCALE_DTYPES:
            raise _field_error(
                "scales.dtype",
                None if sd is None else sd.value,
                f"one of {', '.join(S8_SCALE_DTYPES)} with target s8 (the checkpoint's scale dtype: the W4A8 GEMM "
                "rescales each group's int32 sum in fp32)",
            )


def resolve_group_size(spec: Spec, K: int, rows: int) -> int:
    """The group size of a call: the spec's, or with ``group_size: auto`` K / ``rows`` (the rows of ``scales``),
    which must divide K into whole groups (and, packing along K, whole words). ValueError names ``scales``."""
    g = spec.scales.group_size
    if g != "auto":
        return g
    if rows <= 0 or K % rows:
        raise ValueError(
            f"scales: {rows} rows, but with scales.group_size 'auto' the rows must divide K = {K} "
            f"(group size = K / rows of scales)"
        )
    g = K // rows
    if spec.packing.axis == "K" and g % spec.per_word:
        raise ValueError(
            f"scales: {rows} rows give group size K / rows = {K} / {rows} = {g}, not a multiple of {spec.per_word} "
            f"(packing along K, a {'word' if spec.words == 1 else f'{spec.words}-word block'} holds {spec.per_word} "
            "rows)"
        )
    return g


def with_group_size(spec: Spec, group_size: int) -> Spec:
    """``spec`` with a fixed group size (an 'auto' spec resolved for one shape)."""
    if spec.scales.group_size == group_size:
        return spec
    data = spec.model_dump(mode="json")
    data["scales"]["group_size"] = group_size
    return Spec.model_validate(data)


def _field_error(field: str, value: object, allowed: str) -> ValueError:
    return ValueError(f"[{field}] got {shown(value)}; expected {allowed}")


def _format_validation_error(err: ValidationError, origin: str) -> SpecError:
    parts = []
    for e in err.errors():
        loc = printable(shown_text(".".join(str(p) for p in e["loc"]), SHOWN_VALUE_CHARS))  # keys are input too
        msg = e["msg"].removeprefix("Value error, ")
        if msg.startswith("["):  # cross-field errors carry their own field name
            parts.append(msg)
        elif e["type"] in ("missing",):
            parts.append(f"[{loc}] is required")
        elif e["type"] == "extra_forbidden":
            parts.append(f"[{loc}] is not a known field")
        else:
            given = e.get("input")
            given_s = "" if isinstance(given, dict) else f"got {shown(given)}; "
            parts.append(f"[{loc}] {given_s}{msg}")
    return SpecError(f"{origin}: " + "; ".join(parts))


#: The largest spec file or text read: a spec is a few hundred bytes; this refuses /dev/zero and the like.
MAX_SPEC_BYTES = 1 << 20
#: The most YAML nodes a spec may expand to, every alias counted as a full copy: shipped specs have under 100,
#: a 700-byte "billion laughs" alias bomb expands to billions.
MAX_SPEC_NODES = 10_000


class _SpecLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses duplicate keys and documents whose aliases expand past ``MAX_SPEC_NODES``."""

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        _count_nodes(node, {}, set())
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {shown(key_node.value)} on line {line} (first on line {seen[key]})",
                        None,  # the line is in the message; a mark would append the source line to it
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _count_nodes(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """The node count of ``node`` with every alias expanded (memoized per node, so linear in the document)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:
        raise yaml.YAMLError("a recursive alias (a node that contains itself) is not a spec")
    open_nodes.add(id(node))
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_count_nodes(child, sizes, open_nodes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total += sum(_count_nodes(k, sizes, open_nodes) + _count_nodes(v, sizes, open_nodes) for k, v in node.value)
    if total > MAX_SPEC_NODES:
        raise yaml.YAMLError(f"expands to more than {MAX_SPEC_NODES} nodes (anchors and aliases counted in full)")
    open_nodes.discard(id(node))
    sizes[id(node)] = total
    return total


def _parse_yaml(text: str, origin: str) -> Any:
    try:
        return yaml.load(text, Loader=_SpecLoader)
    except yaml.YAMLError as e:
        raise SpecError(f"{origin}: not valid YAML: {shown_text(str(e))}") from None
    except RecursionError:
        raise SpecError(f"{origin}: not valid YAML: nested too deeply") from None


def shown_text(text: str, limit: int = 4 * SHOWN_VALUE_CHARS) -> str:
    """One line of at most ``limit`` characters (a parser's message quotes the input it choked on)."""
    return _cut(" ".join(text.split()), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


#: A path in an error message is cut to this many characters (a 5000-character "path" is a bad value too).
MAX_SHOWN_PATH_CHARS = 256


def _read_spec_file(p: Path) -> tuple[str, str]:
    """(origin, text) of spec file ``p``: a regular file of at most ``MAX_SPEC_BYTES``, or a SpecError."""
    origin = printable(_cut(str(p), MAX_SHOWN_PATH_CHARS), newlines=False)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise SpecError(f"{origin}: no such spec file (nor a shipped spec: `dqgen list` shows them)") from None
    except (OSError, ValueError) as e:
        raise SpecError(f"{origin}: cannot read the spec: {getattr(e, 'strerror', None) or e}") from None
    # stat first: opening a FIFO blocks, and /dev/zero never ends
    if stat.S_ISDIR(st.st_mode):
        raise SpecError(
            f"{origin}: not a regular file but a folder (expected a YAML spec file or a shipped spec's name)"
        )
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"{origin}: not a regular file (expected a YAML spec file)")
    if st.st_size > MAX_SPEC_BYTES:
        raise SpecError(f"{origin}: {st.st_size} bytes; a spec file has at most {MAX_SPEC_BYTES} bytes")
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{origin}: cannot read the spec: {e.strerror or e}") from None
    if len(data) > MAX_SPEC_BYTES:  # grew since the stat
        raise SpecError(f"{origin}: more than {MAX_SPEC_BYTES} bytes; a spec file has at most {MAX_SPEC_BYTES} bytes")
    try:
        return origin, data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{origin}: not a text file (expected UTF-8 YAML)") from None


#: The specs shipped with dqgen (inside the package, so an installed wheel has them too).
SHIPPED_SPECS = Path(__file__).resolve().parent.parent / "specs"


def shipped_specs() -> dict[str, Path]:
    """Every shipped spec by name (its file stem): ``awq_int4_fp16`` -> ``.../dqgen/specs/awq_int4_fp16.yaml``."""
    return {p.stem: p for p in sorted(SHIPPED_SPECS.glob("*.yaml"))}


#: The shipped specs with an s8 target (the W4A8 GEMM's int4 -> int8 converters). A folder of their own: the
#: shipped-spec sweeps (tests, the GPU tiers, the PTX hashes) render fp16 / bf16 kernel families for every spec in
#: ``SHIPPED_SPECS``, which an s8 spec has none of until the W4A8 GEMM lands; ``load_spec`` finds them by name.
W4A8_SPECS = SHIPPED_SPECS / "w4a8"


def w4a8_specs() -> dict[str, Path]:
    """The shipped s8-target specs by name: ``awq_int4_s8``, ``gptq_int4_s8``."""
    return {p.stem: p for p in sorted(W4A8_SPECS.glob("*.yaml"))}


def _shipped_path(name: str) -> Path | None:
    """A bare name (no folder, no suffix) that is no file here names a shipped spec. A folder of that name does not
    hide it (a folder is never a spec; `dqgen build awq_int4_fp16 --out awq_int4_fp16` makes one); a file does: a
    spec file in the working directory is what its name means there."""
    if not re.fullmatch(r"[A-Za-z0-9_]{1,64}", name):
        return None
    if os.path.lexists(name) and not os.path.isdir(name):
        return None
    return shipped_specs().get(name) or w4a8_specs().get(name)


#: What every public function taking a spec accepts (``load_spec`` resolves it).
SpecLike: TypeAlias = "Spec | str | Path | dict[str, Any]"


def load_spec(source: SpecLike) -> Spec:
    """Load and validate a spec from a Spec, a shipped spec's name (``awq_int4_fp16``, see ``dqgen list``), a path,
    YAML text (several lines, or one {...} mapping) or a dict. Raises ``SpecError`` with one line naming the field."""
    if isinstance(source, Spec):
        return source
    if not isinstance(source, (str, Path, dict)):
        raise TypeError(
            "spec: expected a dqgen Spec, a shipped spec's name, a path, YAML text or a dict, "
            f"got {type(source).__name__}"
        )
    origin = "spec"
    if isinstance(source, dict):
        data = source
    else:
        shipped = _shipped_path(source) if isinstance(source, str) else None
        p = shipped or Path(source)
        # One line that is not a flow mapping is a path; YAML text spans lines (or is a {...} mapping).
        text_like = "\n" in str(source) or str(source).lstrip().startswith("{")
        if isinstance(source, Path) or not text_like:
            origin, text = _read_spec_file(p)
        else:
            text = str(source)
            if len(text) > MAX_SPEC_BYTES:
                raise SpecError(f"{origin}: {len(text)} characters of YAML; a spec has at most {MAX_SPEC_BYTES}")
        data = _parse_yaml(text, origin)
        if not isinstance(data, dict):
            raise SpecError(f"{origin}: expected a mapping of spec fields, got {type(data).__name__}")
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        raise _format_validation_error(e, origin) from None
