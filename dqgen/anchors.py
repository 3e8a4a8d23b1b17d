"""The best published conversion op counts per 8 outputs, for comparison in ``explain``.

Read from source by ../shared/research/anchors.md (FasterTransformer df4a7534, CUTLASS 7107b055,
Marlin 2f6d7c10, vLLM/Machete). These are yardsticks, not inputs: the solver never reads them.
"""

from __future__ import annotations

from .spec import Spec, SourceKind

# (bits, signed?, order, target) -> (ops per 8, who)
_PUBLISHED: dict[tuple[int, bool, tuple[int, ...], str], tuple[int, str]] = {
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


def published(spec: Spec) -> tuple[int, str] | None:
    key = (spec.source.bits, spec.source.kind is SourceKind.signed, tuple(spec.order), spec.target.value)
    return _PUBLISHED.get(key)
