"""dqgen.core.formula: the value formula as data, against the formulas the spec's Zeros / Scales docstrings state."""

from __future__ import annotations

from typing import get_args

import pytest

from dqgen.core.formula import (
    ZERO_RULES,
    ValueFormula,
    expression,
    kernel_scale_formula,
    kernel_zeros_doc,
    prose,
)
from dqgen.core.spec import PACKED_ZERO_MODES, ZeroMode, load_spec

#: dqgen.core.spec.Zeros' docstring, mode by mode (q: code value, s: scale, z / b: zero point).
DOCUMENTED = {
    "none": "round(q * s)",
    "integer": "round((q - z) * s)",
    "gptq_v2": "round((q - z) * s)",
    "gptq_v1": "round((q - (stored + 1)) * s)",
    "float": "round(round(q - z) * s)",
    "additive": "round(q * s + b)",
}


def _formula(mode: str, **kw: object) -> ValueFormula:
    return ValueFormula(**{"target": "fp16", "code_kind": "integer", "code_bias": 0, "element": "",
                           "zero": ZERO_RULES[mode], "scale": "group", "global_scale": False, **kw})  # fmt: skip


def test_every_zero_mode_has_a_rule() -> None:
    assert list(ZERO_RULES) == list(get_args(ZeroMode))
    assert PACKED_ZERO_MODES == ("integer", "gptq_v1", "gptq_v2")
    assert {m for m, r in ZERO_RULES.items() if r.dense} == {"float", "additive"}


@pytest.mark.parametrize("mode", list(DOCUMENTED))
def test_expression_is_the_documented_formula(mode: str) -> None:
    assert expression(_formula(mode)) == DOCUMENTED[mode]


def test_kernel_comment_texts() -> None:
    """The kernels' d[i] already has integer zero points subtracted; dense zeros are f[i]."""
    assert kernel_scale_formula(_formula("integer")) == "round(d[i] * s[i])"
    assert kernel_scale_formula(_formula("float")) == "round(round(d[i] - f[i]) * s[i])"
    assert kernel_scale_formula(_formula("additive")) == "round(d[i] * s[i] + f[i])"
    assert kernel_zeros_doc(_formula("gptq_v1"), 8) == ", qzeros [G, N/8] int32 (gptq_v1)"
    assert kernel_zeros_doc(_formula("additive"), 8) == ", b [G, N] fp16"


def test_prose_of_specs() -> None:
    spec = {
        "name": "t",
        "source": {"bits": 4, "kind": "biased", "bias": 8},
        "target": "bf16",
        "packing": {"axis": "K"},
        "scales": {"group_size": 128},
        "zeros": {"mode": "float"},
    }
    assert prose(ValueFormula.of(load_spec(spec))) == (
        "bf16( bf16((q - 8) - z) * s ): two roundings, z a bf16 zero point (HQQ)"
    )
    mx = load_spec({**spec, "source": {"bits": 4, "kind": "float", "format": "e2m1"}, "zeros": {"mode": "none"},
                    "scales": {"group_size": 32, "dtype": "e8m0"}})  # fmt: skip
    assert prose(ValueFormula.of(mx)).startswith("bf16( e2m1(q) * 2^(E-127) ), one rounding")


def test_block_scaled_prose_names_the_element_format() -> None:
    """The element format is data: an MXFP6 formula names its own element, not e2m1."""
    f = _formula("none", code_kind="float", element="e2m3", scale="e8m0")
    assert prose(f).startswith("fp16( e2m3(q) * 2^(E-127) )")
