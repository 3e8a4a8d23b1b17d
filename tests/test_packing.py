"""Tests of dqgen.packing: round trips, repacking, known answers computed by hand, error paths.

Known answers are written out from the layout rule (field j = bits [j*bits, (j+1)*bits) holds
element order[j] of the word's run), never taken from dqgen.packing itself.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dqgen.packing import (
    pack,
    pack_zeros,
    repack,
    unpack,
    unpack_zeros,
    zeros_from_stored,
    zeros_to_stored,
)
from dqgen.spec import Spec, load_spec

BITS = [1, 2, 4, 8]
FAST = settings(max_examples=60, deadline=None)


def make_spec(bits: int, axis: str, order: list[int] | str = "sequential", kind: str = "unsigned",
              zeros: str = "none", bias: int | None = None) -> Spec:
    source: dict = {"bits": bits, "kind": kind}
    if bias is not None:
        source["bias"] = bias
    return load_spec({
        "name": "t",
        "source": source,
        "target": "fp16",
        "packing": {"axis": axis, "order": order},
        "scales": {"group_size": -1},
        "zeros": {"mode": zeros},
    })


@st.composite
def spec_and_shape(draw: st.DrawFn) -> tuple[Spec, int, int]:
    """A spec with a random width, axis and permutation order, and W[K, N] with the packed axis a multiple of P."""
    bits = draw(st.sampled_from(BITS))
    p = 32 // bits
    axis = draw(st.sampled_from(["N", "K"]))
    order = draw(st.permutations(list(range(p))))
    words = draw(st.integers(0, 4))
    other = draw(st.integers(0, 9))
    k, n = (other, words * p) if axis == "N" else (words * p, other)
    return make_spec(bits, axis, list(order)), k, n


# ----------------------------------------------------------------------------------------------
# Round trips.
# ----------------------------------------------------------------------------------------------


@FAST
@given(data=st.data(), sks=spec_and_shape(), dtype=st.sampled_from([np.uint8, np.int16, np.int32, np.int64]))
def test_unpack_pack_round_trip(data: st.DataObject, sks: tuple[Spec, int, int], dtype: type) -> None:
    spec, k, n = sks
    top = (1 << spec.source.bits) - 1
    codes = data.draw(arrays(dtype, (k, n), elements=st.integers(0, top)))
    if codes.size:
        # Pin both ends of the range so every example exercises 0 and the maximum code.
        codes.flat[0] = top
        codes.flat[-1] = 0
    q = pack(codes, spec)
    p = spec.per_word
    assert q.dtype == np.int32
    assert q.shape == ((k, n // p) if spec.packing.axis == "N" else (k // p, n))
    back = unpack(q, spec)
    assert back.dtype == np.uint8 and back.shape == (k, n)
    np.testing.assert_array_equal(back, codes.astype(np.int64))


@FAST
@given(data=st.data(), sks=spec_and_shape())
def test_pack_unpack_round_trip_on_words(data: st.DataObject, sks: tuple[Spec, int, int]) -> None:
    spec, k, n = sks
    p = spec.per_word
    shape = (k, n // p) if spec.packing.axis == "N" else (k // p, n)
    words = data.draw(arrays(np.uint32, shape, elements=st.integers(0, 2**32 - 1)))
    if words.size:
        words.flat[0] = 0xFFFFFFFF  # every field at its maximum, sign bit set
    q = words.view(np.int32)
    np.testing.assert_array_equal(pack(unpack(q, spec), spec), q)
    # uint32 words are accepted and mean the same bits.
    np.testing.assert_array_equal(unpack(words, spec), unpack(q, spec))


@FAST
@given(data=st.data(), bits=st.sampled_from(BITS), axis=st.sampled_from(["N", "K"]))
def test_zeros_round_trip(data: st.DataObject, bits: int, axis: str) -> None:
    p = 32 // bits
    order = list(data.draw(st.permutations(list(range(p)))))
    spec = make_spec(bits, axis, order, zeros="integer")
    g, words = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 4))
    z = data.draw(arrays(np.int32, (g, words * p), elements=st.integers(0, (1 << bits) - 1)))
    qz = pack_zeros(z, spec)
    assert qz.dtype == np.int32 and qz.shape == (g, words)
    np.testing.assert_array_equal(unpack_zeros(qz, spec), z)
    np.testing.assert_array_equal(pack_zeros(unpack_zeros(qz, spec), spec), qz)


def test_zeros_use_zero_order() -> None:
    """qzeros follow the weights' order when packed along N, sequential when the weights go along K."""
    row = np.arange(8, dtype=np.int32)[None, :]
    awq = make_spec(4, "N", "awq", zeros="integer")
    gptq = make_spec(4, "K", [7, 6, 5, 4, 3, 2, 1, 0], zeros="gptq_v2")
    assert pack_zeros(row, awq).view(np.uint32)[0, 0] == 0x75316420
    assert pack_zeros(row, gptq).view(np.uint32)[0, 0] == 0x76543210


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("axis", ["N", "K"])
def test_every_code_at_every_field(bits: int, axis: str) -> None:
    """Each code value 0..2^bits-1 at each field position, with a reversed order, round trips."""
    p = 32 // bits
    spec = make_spec(bits, axis, list(range(p))[::-1])
    vals = np.arange(1 << bits)
    grid = (vals[:, None] + np.arange(p)[None, :]) % (1 << bits)  # rows: every code visits every field
    codes = grid if axis == "N" else grid.T.copy()
    np.testing.assert_array_equal(unpack(pack(codes, spec), spec), codes)


# ----------------------------------------------------------------------------------------------
# Known answers, written out by hand from the layout rule.
# ----------------------------------------------------------------------------------------------


def test_awq_known_answer() -> None:
    spec = make_spec(4, "N", "awq")
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    assert spec.order == order
    codes = np.arange(8, dtype=np.int64)[None, :]  # one row, element e has code e
    # Nibble j holds element order[j], whose code is order[j]: nibbles (MSB first) 7 5 3 1 6 4 2 0.
    expected = 0
    for j, e in enumerate(order):
        expected |= e << (4 * j)
    assert expected == 0x75316420
    q = pack(codes, spec)
    assert q.shape == (1, 1) and q.dtype == np.int32
    assert int(q.view(np.uint32)[0, 0]) == 0x75316420
    # The upper half of the codes sets the sign bit of the int32 word: 0xFDB9ECA8.
    q_hi = pack(codes + 8, spec)
    assert int(q_hi.view(np.uint32)[0, 0]) == 0xFDB9ECA8
    assert int(q_hi[0, 0]) == 0xFDB9ECA8 - 2**32


def test_gptq_known_answer() -> None:
    spec = make_spec(4, "K", "sequential", kind="biased", bias=8)
    codes = np.arange(8, dtype=np.int32)[:, None]  # one column along K, row k has code k
    q = pack(codes, spec)
    assert q.shape == (1, 1)
    assert int(q.view(np.uint32)[0, 0]) == 0x76543210


def test_ft_int8_known_answer() -> None:
    spec = make_spec(8, "N", "ft_int8", kind="biased", bias=128)
    codes = np.array([[0x10, 0x20, 0x30, 0x40]])
    # Byte j holds element [0, 2, 1, 3][j]: bytes 0x10, 0x30, 0x20, 0x40 from the LSB up.
    assert int(pack(codes, spec).view(np.uint32)[0, 0]) == 0x40203010


def test_signed_codes_store_twos_complement() -> None:
    spec = make_spec(4, "K", "sequential", kind="signed")
    values = np.array([-8, -1, 0, 1, 7, -2, 3, -5])[:, None]
    stored = values & 0xF
    q = pack(values, spec)
    np.testing.assert_array_equal(q, pack(stored, spec))  # values and stored fields pack alike
    np.testing.assert_array_equal(unpack(q, spec)[:, 0], stored[:, 0])  # unpack returns stored fields
    assert int(q.view(np.uint32)[0, 0]) == 0xB3E710F8


def test_agrees_with_reference_dequantizer() -> None:
    """The numba oracle, written independently, reads pack()'s words back as the same codes."""
    from dqgen.reference import dequantize_reference

    rng = np.random.default_rng(0)
    for bits, axis, order in [(4, "N", "awq"), (2, "K", list(range(16))[::-1]), (8, "N", "ft_int8")]:
        spec = make_spec(bits, axis, order)
        codes = rng.integers(0, 1 << bits, size=(32, 16))
        scales = np.ones((1, 16), dtype=np.float16)
        w = dequantize_reference(spec, pack(codes, spec), scales)
        np.testing.assert_array_equal(w.astype(np.int64), codes)


# ----------------------------------------------------------------------------------------------
# Repack.
# ----------------------------------------------------------------------------------------------

GPTQ = make_spec(4, "K", "sequential", zeros="gptq_v2")
AWQ = make_spec(4, "N", "awq", zeros="integer")


@FAST
@given(data=st.data(), kw=st.integers(0, 4), nw=st.integers(0, 4), g=st.integers(1, 3))
def test_repack_gptq_awq_identity(data: st.DataObject, kw: int, nw: int, g: int) -> None:
    k, n = kw * 8, nw * 8
    words = arrays(np.uint32, (k // 8, n), elements=st.integers(0, 2**32 - 1))
    q = data.draw(words).view(np.int32)
    qz = data.draw(arrays(np.uint32, (g, n // 8), elements=st.integers(0, 2**32 - 1))).view(np.int32)

    q_awq = repack(q, GPTQ, AWQ)
    assert q_awq.shape == (k, n // 8) and q_awq.dtype == np.int32
    np.testing.assert_array_equal(unpack(q_awq, AWQ), unpack(q, GPTQ))  # element for element
    np.testing.assert_array_equal(repack(q_awq, AWQ, GPTQ), q)

    q_awq2, qz_awq = repack(q, GPTQ, AWQ, qzeros=qz)
    np.testing.assert_array_equal(q_awq2, q_awq)
    np.testing.assert_array_equal(unpack_zeros(qz_awq, AWQ), unpack_zeros(qz, GPTQ))
    q_back, qz_back = repack(q_awq, AWQ, GPTQ, qzeros=qz_awq)
    np.testing.assert_array_equal(q_back, q)
    np.testing.assert_array_equal(qz_back, qz)


@FAST
@given(data=st.data(), a=spec_and_shape())
def test_repack_between_random_layouts(data: st.DataObject, a: tuple[Spec, int, int]) -> None:
    src, k, n = a
    p = src.per_word
    # A destination of the same width with its own axis and order; W must fit both packed axes.
    axis = data.draw(st.sampled_from(["N", "K"]))
    dst = make_spec(src.source.bits, axis, list(data.draw(st.permutations(list(range(p))))))
    k, n = -(-k // p) * p, -(-n // p) * p
    codes = data.draw(arrays(np.uint8, (k, n), elements=st.integers(0, (1 << src.source.bits) - 1)))
    q = pack(codes, src)
    np.testing.assert_array_equal(unpack(repack(q, src, dst), dst), codes)
    np.testing.assert_array_equal(repack(repack(q, src, dst), dst, src), q)


def test_repack_moves_stored_bits_across_kinds() -> None:
    """u4b8 -> s4: the stored fields move unchanged (repack does not re-bias)."""
    src = make_spec(4, "K", "sequential", kind="biased", bias=8)
    dst = make_spec(4, "N", "awq", kind="signed")
    codes = np.arange(16 * 8).reshape(16, 8) % 16
    out = repack(pack(codes, src), src, dst)
    np.testing.assert_array_equal(unpack(out, dst), codes)


def test_repack_converts_zero_convention() -> None:
    """gptq_v1 -> integer keeps the true zero point: stored z - 1 becomes stored z."""
    v1 = make_spec(4, "K", "sequential", zeros="gptq_v1")
    z = np.array([[1, 2, 3, 4, 5, 6, 7, 15]])
    qz_v1 = pack_zeros(zeros_to_stored(z, v1), v1)
    assert int(qz_v1.view(np.uint32)[0, 0]) == 0xE6543210
    q = pack(np.zeros((8, 8), dtype=np.uint8), v1)
    _, qz_awq = repack(q, v1, AWQ, qzeros=qz_v1)
    np.testing.assert_array_equal(zeros_from_stored(unpack_zeros(qz_awq, AWQ), AWQ), z)
    # v1's stored 15 means z = 16, which a 4-bit integer zero cannot hold.
    bad = pack_zeros(np.array([[15, 0, 0, 0, 0, 0, 0, 0]]), v1)
    with pytest.raises(ValueError, match=r"^qzeros:.*max 16"):
        repack(q, v1, AWQ, qzeros=bad)


# ----------------------------------------------------------------------------------------------
# Zero-point conventions.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["integer", "gptq_v1", "gptq_v2"])
@pytest.mark.parametrize("bits", BITS)
def test_zeros_stored_round_trip(mode: str, bits: int) -> None:
    spec = make_spec(bits, "N", zeros=mode)
    lo = 1 if mode == "gptq_v1" else 0
    z = np.arange(lo, lo + (1 << bits)).reshape(1, -1)  # every representable zero point
    stored = zeros_to_stored(z, spec)
    assert stored.min() == 0 and stored.max() == (1 << bits) - 1  # the full field range is used
    np.testing.assert_array_equal(stored, z - lo)
    back = zeros_from_stored(stored, spec)
    assert back.dtype == np.int32
    np.testing.assert_array_equal(back, z)
    if z.shape[1] % spec.per_word == 0:
        np.testing.assert_array_equal(unpack_zeros(pack_zeros(stored, spec), spec), stored)


def test_gptq_v1_zero_of_zero_raises() -> None:
    spec = make_spec(4, "K", zeros="gptq_v1")
    with pytest.raises(ValueError, match=r"^zeros:.*0 is not representable in gptq_v1.*gptq_v2"):
        zeros_to_stored(np.array([[0, 1, 2]]), spec)


def test_zeros_out_of_range() -> None:
    spec = make_spec(4, "N", zeros="integer")
    with pytest.raises(ValueError, match=r"^zeros:.*\[0, 16\).*max 16"):
        zeros_to_stored(np.array([3, 16]), spec)
    with pytest.raises(ValueError, match=r"^zeros:.*min -1"):
        zeros_from_stored(np.array([-1, 2]), spec)
    with pytest.raises(ValueError, match=r"^zeros:.*max 17"):
        zeros_to_stored(np.array([1, 17]), make_spec(4, "N", zeros="gptq_v1"))


# ----------------------------------------------------------------------------------------------
# Error paths: each ValueError starts with the tensor name or names the spec field.
# ----------------------------------------------------------------------------------------------


def test_codes_out_of_range() -> None:
    u4 = make_spec(4, "N", "awq")
    with pytest.raises(ValueError, match=r"^codes:.*\[0, 16\).*min 0, max 16"):
        pack(np.array([[0, 1, 2, 3, 4, 5, 6, 16]]), u4)
    with pytest.raises(ValueError, match=r"^codes:.*min -1, max 7"):
        pack(np.array([[-1, 1, 2, 3, 4, 5, 6, 7]]), u4)
    s4 = make_spec(4, "N", kind="signed")
    with pytest.raises(ValueError, match=r"^codes:.*\[-8, 16\).*min -9"):
        pack(np.array([[-9, 1, 2, 3, 4, 5, 6, 7]]), s4)
    u4b8 = make_spec(4, "K", kind="biased", bias=8)
    with pytest.raises(ValueError, match=r"^codes:.*min -8"):
        pack(np.full((8, 1), -8), u4b8)


def test_codes_wrong_shape_and_dtype() -> None:
    spec_n = make_spec(4, "N", "awq")
    spec_k = make_spec(4, "K")
    with pytest.raises(ValueError, match=r"^codes:.*N=10.*multiple of 8.*along N"):
        pack(np.zeros((2, 10), dtype=np.int32), spec_n)
    with pytest.raises(ValueError, match=r"^codes:.*K=12.*multiple of 8.*along K"):
        pack(np.zeros((12, 3), dtype=np.int32), spec_k)
    with pytest.raises(ValueError, match=r"^codes:.*2-D"):
        pack(np.zeros(8, dtype=np.int32), spec_n)
    with pytest.raises(ValueError, match=r"^codes:.*integer"):
        pack(np.zeros((1, 8), dtype=np.float32), spec_n)


def test_qweight_wrong_dtype_and_shape() -> None:
    spec = make_spec(4, "N", "awq")
    with pytest.raises(ValueError, match=r"^qweight:.*int32.*int64"):
        unpack(np.zeros((2, 2), dtype=np.int64), spec)
    with pytest.raises(ValueError, match=r"^qweight:.*float32"):
        unpack(np.zeros((2, 2), dtype=np.float32), spec)
    with pytest.raises(ValueError, match=r"^qweight:.*2-D"):
        unpack(np.zeros(4, dtype=np.int32), spec)
    with pytest.raises(ValueError, match=r"^qweight:"):
        repack(np.zeros((2, 2), dtype=np.int16), GPTQ, AWQ)


def test_zero_tensors_wrong() -> None:
    with pytest.raises(ValueError, match=r"^qzeros:.*int32"):
        unpack_zeros(np.zeros((1, 1), dtype=np.uint8), AWQ)
    with pytest.raises(ValueError, match=r"^zeros:.*N=7.*along N"):
        pack_zeros(np.zeros((1, 7), dtype=np.int32), AWQ)
    with pytest.raises(ValueError, match=r"^zeros:.*max 16"):
        pack_zeros(np.full((1, 8), 16), AWQ)
    none = make_spec(4, "N", "awq")
    with pytest.raises(ValueError, match=r"zeros\.mode"):
        pack_zeros(np.zeros((1, 8), dtype=np.int32), none)
    with pytest.raises(ValueError, match=r"zeros\.mode"):
        zeros_to_stored(np.zeros(3, dtype=np.int32), none)


def test_repack_errors() -> None:
    q = np.zeros((1, 8), dtype=np.int32)
    with pytest.raises(ValueError, match=r"source\.bits.*4-bit.*8-bit"):
        repack(q, GPTQ, make_spec(8, "N"))
    # GPTQ [1, 3] unpacks to W[8, 3]: N=3 cannot be packed along N.
    with pytest.raises(ValueError, match=r"^qweight:.*N=3.*along N"):
        repack(np.zeros((1, 3), dtype=np.int32), GPTQ, AWQ)
    with pytest.raises(ValueError, match=r"zeros\.mode \(to_spec\)"):
        repack(q, GPTQ, make_spec(4, "N", "awq"), qzeros=np.zeros((1, 1), dtype=np.int32))
    with pytest.raises(ValueError, match=r"^qzeros:.*N=16.*N=8"):
        repack(q, GPTQ, AWQ, qzeros=np.zeros((1, 2), dtype=np.int32))
    with pytest.raises(ValueError, match=r"^qzeros:.*int32"):
        repack(q, GPTQ, AWQ, qzeros=np.zeros((1, 1), dtype=np.float32))
