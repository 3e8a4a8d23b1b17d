"""The best published conversion op counts per 8 outputs, for comparison in ``explain``.

Read from source by ../shared/research/anchors.md (FasterTransformer df4a7534, CUTLASS 7107b055,
Marlin 2f6d7c10, vLLM/Machete). These are yardsticks, not inputs: the solver never reads them.
"""

from __future__ import annotations

from fractions import Fraction

from ..core.spec import SourceKind, Spec

_TRT_U2 = tuple(range(0, 16, 2)) + tuple(range(1, 16, 2))  # TRT-LLM's uint2 register order: pair k at bits 2k and 16+2k

# (bits, signed?, order, target) -> (ops per 8, who)
_PUBLISHED: dict[tuple[int, bool, tuple[int, ...], str], tuple[Fraction | int, str]] = {
    (2, False, _TRT_U2, "fp16"): (Fraction(17, 2), "TensorRT-LLM (17 per 16)"),
    (2, False, _TRT_U2, "bf16"): (Fraction(23, 2), "TensorRT-LLM (23 per 16)"),
    (2, False, tuple(range(16)), "fp16"): (Fraction(25, 2), "CUTLASS NumericArrayConverter (25 per 16)"),
    (2, True, tuple(range(16)), "fp16"): (Fraction(25, 2), "CUTLASS NumericArrayConverter (25 per 16)"),
    (2, False, tuple(range(16)), "bf16"): (Fraction(27, 2), "CUTLASS NumericArrayConverter (27 per 16)"),
    (2, True, tuple(range(16)), "bf16"): (Fraction(27, 2), "CUTLASS NumericArrayConverter (27 per 16)"),
    (4, False, (0, 2, 4, 6, 1, 3, 5, 7), "fp16"): (9, "FasterTransformer, Marlin"),
    (4, False, (0, 1, 2, 3, 4, 5, 6, 7), "fp16"): (12, "CUTLASS NumericArrayConverter"),
    (4, False, (0, 2, 4, 6, 1, 3, 5, 7), "bf16"): (11, "FasterTransformer, Machete"),
    (4, False, (0, 1, 2, 3, 4, 5, 6, 7), "bf16"): (13, "CUTLASS NumericArrayConverter"),
    (8, False, (0, 2, 1, 3), "fp16"): (8, "FasterTransformer"),
    (8, False, (0, 1, 2, 3), "fp16"): (8, "CUTLASS (unsigned)"),
    (8, True, (0, 1, 2, 3), "fp16"): (12, "CUTLASS NumericArrayConverter"),
    (8, True, (0, 2, 1, 3), "fp16"): (10, "CUTLASS shuffled"),
    (8, True, (0, 2, 1, 3), "bf16"): (14, "CUTLASS shuffled (2-LOP3)"),
    (8, True, (0, 1, 2, 3), "bf16"): (20, "FasterTransformer fp32 carrier"),
    (8, False, (0, 2, 1, 3), "bf16"): (20, "FasterTransformer fp32 carrier"),
}


# minifloats, natural order: (format, target, hardware cvt available?) -> (ops per 8, who)
_PUBLISHED_FLOAT: dict[tuple[str, str, bool], tuple[Fraction | int, str]] = {
    ("e4m3", "fp16", True): (4, "CUTLASS (cvt.rn.f16x2.e4m3x2)"),
    ("e5m2", "fp16", True): (4, "CUTLASS (cvt.rn.f16x2.e5m2x2)"),
    ("e4m3", "bf16", True): (16, "CUTLASS (cvt to f16, then via f32)"),
    ("e5m2", "bf16", True): (16, "CUTLASS (cvt to f16, then via f32)"),
    ("e4m3", "fp16", False): (
        22,
        "vLLM Marlin (shift + re-bias multiply, about 9 int + 2 mul per 4; NaN not kept: 0x7F comes out as 480)",
    ),
    ("e4m3", "bf16", False): (
        22,
        "vLLM Marlin (shift + re-bias multiply, about 9 int + 2 mul per 4; NaN not kept: 0x7F comes out as 480)",
    ),
    ("e2m1", "fp16", False): (16, "CUTLASS PRMT lookup (about 8 per 4)"),
    ("e2m1", "bf16", False): (16, "CUTLASS PRMT lookup (about 8 per 4)"),
    ("e2m1", "fp16", True): (16, "CUTLASS PRMT lookup (about 8 per 4)"),
    ("e2m1", "bf16", True): (16, "CUTLASS PRMT lookup (about 8 per 4)"),
}


def published(spec: Spec) -> tuple[Fraction | int, str] | None:
    """The best published conversion count for this spec's layout, if anyone publishes one. None for
    3-bit blocks and codebooks (no magic-number or PRMT-table decoder of those is published)."""
    kind = spec.source.kind
    if kind is SourceKind.float:
        if tuple(spec.order) != tuple(range(spec.per_word)):
            return None
        assert spec.source.format is not None, "the spec validator requires a format for kind 'float'"
        return _PUBLISHED_FLOAT.get((spec.source.format, spec.target.value, spec.sm >= 89))
    if kind is SourceKind.codebook or spec.words > 1:
        return None
    key = (spec.source.bits, kind is SourceKind.signed, tuple(spec.order), spec.target.value)
    return _PUBLISHED.get(key)
