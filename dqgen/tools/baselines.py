"""Which formats the bench's other implementations of a dequantizer (torch eager, static_cast CUDA, Triton)
handle, and the field shifts they unpack by. Apart from bench and bench_triton so that neither imports the
other (bench_triton needs triton at import; bench loads it only when a row asks for it)."""

from __future__ import annotations

from ..core.spec import Spec
from ..layout.layout import Layout


def classic(spec: Spec) -> bool:
    """Formats the other implementations (torch eager, static_cast CUDA, Triton) know: integer codes
    in single words with target-dtype scales."""
    return spec.words == 1 and not spec.scales.block and spec.source.kind.integer


def triton_supported(spec: Spec) -> bool:
    """Formats dqgen.tools.bench_triton handles: integer codes in single words with target-dtype scales,
    no zeros or packed integer zeros."""
    return (
        spec.words == 1
        and not spec.scales.block
        and not spec.act_order
        and spec.source.kind.integer
        and spec.zeros.mode in ("none", "integer")
    )


def field_shifts(spec: Spec) -> list[int]:
    """Bit offset of element e of a packed word, for e in 0..P-1 (the spec's field order)."""
    lay = Layout.of(spec)
    return [lay.field_pos(e) for e in range(lay.per_block)]
