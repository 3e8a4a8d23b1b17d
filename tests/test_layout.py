"""dqgen.layout.layout.Layout: field positions, blocks, shapes and K / N inference, against hand-worked
positions from docs/formats.md and the published AWQ / GPTQ layouts (not against the code's own formulas)."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.core.spec import load_spec
from dqgen.layout.layout import Layout


def _spec(bits: int, axis: str, order: str = "sequential", zeros: str = "none", **extra: object) -> dict:
    return {
        "name": "t",
        "source": {"bits": bits, "kind": "unsigned"},
        "target": "fp16",
        "packing": {"axis": axis, "order": order},
        "scales": {"group_size": 128},
        "zeros": {"mode": zeros},
        **extra,
    }


def test_of_is_cached_per_layout() -> None:
    a = Layout.of(load_spec(_spec(4, "N", "awq")))
    assert a is Layout.of(load_spec({**_spec(4, "N", "awq"), "name": "other"}))
    assert a is not Layout.of(load_spec(_spec(4, "N")))


def test_awq_field_positions() -> None:
    """AutoAWQ's AWQ_ORDER: nibble j holds element [0, 2, 4, 6, 1, 3, 5, 7][j]."""
    lay = Layout.of(load_spec(_spec(4, "N", "awq")))
    assert (lay.words, lay.per_block) == (1, 8)
    assert [lay.field_pos(e) for e in range(8)] == [0, 16, 4, 20, 8, 24, 12, 28]
    assert [lay.element_at(0, bit) for bit in (0, 3, 4, 16, 31)] == [0, 0, 2, 1, 7]
    assert not any(lay.straddles(e) for e in range(8))


def test_three_bit_blocks_straddle_where_documented() -> None:
    """docs/formats.md: 3-bit code 10 is bits 30-31 of word 0 and bit 0 of word 1; code 21 bit 31 of word 1."""
    lay = Layout.of(load_spec(_spec(3, "K")))
    assert (lay.words, lay.per_block) == (3, 32)
    assert lay.field(10) == (0, 30) and lay.straddles(10)
    assert lay.field(21) == (1, 31) and lay.straddles(21)
    assert lay.field(11) == (1, 1) and not lay.straddles(11)
    assert [e for e in range(32) if lay.straddles(e)] == [10, 21]


def test_six_bit_blocks_for_fp6() -> None:
    """The rule FP6 will use: 6-bit codes fill 3-word blocks of 16 (OCP MX FP6 packing)."""
    lay = Layout(6, "K", tuple(range(16)), tuple(range(16)), 3)
    assert lay.per_block == 16
    assert [e for e in range(16) if lay.straddles(e)] == [5, 10]
    assert lay.field(5) == (0, 30) and lay.field(10) == (1, 28) and lay.field(15) == (2, 26)
    vals = np.arange(16 * 4, dtype=np.uint32).reshape(16, 4) % 64  # 16 rows = one block along K
    words = lay.pack_fields(vals)
    assert words.shape == (3, 4)
    assert (lay.block_codes(words.view(np.uint32).T) == vals.T).all()  # block_codes: [n blocks, words] -> codes
    assert (lay.unpack_fields(words.view(np.uint32)) == vals).all()


@pytest.mark.parametrize(
    "data,K,N,G,expected",
    [
        # AWQ: qweight [K, N/8], qzeros [G, N/8], scales [G, N]
        (_spec(4, "N", "awq", "integer"), 256, 64, 2, {"qweight": (256, 8), "scales": (2, 64), "zeros": (2, 8)}),
        # GPTQ act_order: qweight [K/8, N], g_idx [K]
        (
            _spec(4, "K", zeros="gptq_v1", act_order=True),
            256,
            64,
            2,
            {"qweight": (32, 64), "scales": (2, 64), "zeros": (2, 8), "g_idx": (256,)},
        ),
        # 3-bit GPTQ: qweight [3K/32, N]
        (_spec(3, "K"), 256, 64, 2, {"qweight": (24, 64), "scales": (2, 64)}),
        # HQQ-style float zeros: dense [G, N]
        (_spec(8, "N", zeros="float"), 128, 16, 1, {"qweight": (128, 4), "scales": (1, 16), "zeros": (1, 16)}),
    ],
)
def test_shapes(data: dict, K: int, N: int, G: int, expected: dict) -> None:
    lay = Layout.of(load_spec(data))
    assert lay.shapes(K, N, G) == {**expected, "out": (K, N)}
    assert lay.kn_of(expected["qweight"]) == (K, N)


def test_kn_of_names_qweight_when_rows_are_no_whole_block() -> None:
    lay = Layout.of(load_spec(_spec(3, "K")))
    with pytest.raises(ValueError, match=r"^qweight: 25 rows .* not a multiple of 3"):
        lay.kn_of((25, 64))
