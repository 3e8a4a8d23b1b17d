"""Tests of dqgen.layout.packing: round trips, repacking, known answers computed by hand, error paths.

Known answers are written out from the layout rule (field j = bits [j*bits, (j+1)*bits) holds
element order[j] of the word's run), never taken from dqgen.layout.packing itself.
"""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec
from dqgen.layout.packing import (
    pack,
    pack_zeros,
    repack,
    unpack,
    unpack_zeros,
    zeros_from_stored,
    zeros_to_stored,
)

BITS = [1, 2, 4, 8]
FAST = settings(max_examples=60, deadline=None)


def make_spec(
    bits: int,
    axis: str,
    order: list[int] | str = "sequential",
    kind: str = "unsigned",
    zeros: str = "none",
    bias: int | None = None,
) -> Spec:
    source: dict = {"bits": bits, "kind": kind}
    if bias is not None:
        source["bias"] = bias
    return load_spec(
        {
            "name": "t",
            "source": source,
            "target": "fp16",
            "packing": {"axis": axis, "order": order},
            "scales": {"group_size": -1},
            "zeros": {"mode": zeros},
        }
    )


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
    from dqgen.check.reference import dequantize_reference

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


# ----------------------------------------------------------------------------------------------
# Multi-word blocks (3-bit GPTQ and other widths that do not divide 32) and float / codebook codes.
# ----------------------------------------------------------------------------------------------

WIDE = [3]  # the only straddling width a spec accepts (dqgen.core.spec.SOLVED_BITS)


def wide_spec(bits: int, kind: str = "unsigned", bias: int | None = None) -> Spec:
    source: dict = {"bits": bits, "kind": kind}
    if bias is not None:
        source["bias"] = bias
    return load_spec(
        {"name": "w", "source": source, "target": "fp16", "packing": {"axis": "K"}, "scales": {"group_size": -1}}
    )


def src_spec(source: dict, axis: str = "K", target: str = "bf16") -> Spec:
    return load_spec(
        {"name": "f", "source": source, "target": target, "packing": {"axis": axis}, "scales": {"group_size": -1}}
    )


def _block_layout(bits: int) -> tuple[int, int]:
    """(words per block, codes per block) from the layout rule: bits / gcd(bits, 32) words."""
    words = bits // math.gcd(bits, 32)
    return words, 32 * words // bits


def _pack_bit_loop(codes: np.ndarray, bits: int) -> np.ndarray:
    """The slowest possible packer: bit t of code i of block b is bit bits*i + t of the block,
    i.e. bit (bits*i + t) % 32 of word (bits*i + t) // 32."""
    words, per = _block_layout(bits)
    K, N = codes.shape
    out = [[0] * N for _ in range(K // per * words)]
    for b in range(K // per):
        for n in range(N):
            for i in range(per):
                c = int(codes[b * per + i, n])
                for t in range(bits):
                    if (c >> t) & 1:
                        pos = bits * i + t
                        out[b * words + pos // 32][n] |= 1 << (pos % 32)
    return np.array(out, dtype=np.uint32).reshape(K // per * words, N).view(np.int32)


def test_three_bit_straddling_codes_known_answer() -> None:
    """docs/formats.md: code 10 = bits 30-31 of word 0 and bit 0 of word 1; code 21 = bit 31 of word 1
    and bits 0-1 of word 2."""
    spec = wide_spec(3)
    codes = np.zeros((32, 2), dtype=np.int64)
    codes[10, 0] = 0b101  # low bits 01 -> word 0 bits 30-31, high bit 1 -> word 1 bit 0
    codes[21, 1] = 0b011  # bit 0 (1) -> word 1 bit 31, bits 1-2 (01) -> word 2 bits 0-1
    q = pack(codes, spec)
    assert q.shape == (3, 2) and q.dtype == np.int32
    np.testing.assert_array_equal(q.view(np.uint32), [[0x40000000, 0], [0x00000001, 0x80000000], [0, 0x00000001]])
    np.testing.assert_array_equal(unpack(q, spec), codes)
    # Codes 0..31 mod 8 in order: the whole 96-bit block written out by hand, 3 bits per code.
    seq = (np.arange(32) % 8)[:, None]
    block = sum(int(c) << (3 * i) for i, c in enumerate(seq[:, 0]))
    want = [(block >> (32 * w)) & 0xFFFFFFFF for w in range(3)]
    assert want[0] & 0xF == 0b1000 and want[0] >> 30 == 0b10  # code 1 at bits 3-5, code 10 (=2) low bits
    np.testing.assert_array_equal(pack(seq, spec).view(np.uint32)[:, 0], want)


@pytest.mark.parametrize("bits", WIDE)
def test_multiword_pack_vs_bit_loop(bits: int) -> None:
    spec = wide_spec(bits)
    words, per = _block_layout(bits)
    assert (spec.words, spec.per_word) == (words, per)
    rng = np.random.default_rng(bits)
    K, N = per * 5, 7
    codes = rng.integers(0, 1 << bits, size=(K, N))
    codes[:, 0] = (1 << bits) - 1  # every field at its maximum, straddling ones included
    codes[:, 1] = 0
    q = pack(codes, spec)
    np.testing.assert_array_equal(q, _pack_bit_loop(codes, bits))
    assert q.shape == (K * words // per, N)
    np.testing.assert_array_equal(unpack(q, spec), codes)


@st.composite
def wide_spec_and_shape(draw: st.DrawFn) -> tuple[Spec, int, int]:
    bits = draw(st.sampled_from(WIDE))
    kind = draw(st.sampled_from(["unsigned", "signed", "biased"]))
    bias = draw(st.integers(0, (1 << bits) - 1)) if kind == "biased" else None
    return wide_spec(bits, kind, bias), draw(st.integers(0, 3)) * _block_layout(bits)[1], draw(st.integers(0, 6))


@FAST
@given(data=st.data(), sks=wide_spec_and_shape())
def test_multiword_round_trips(data: st.DataObject, sks: tuple[Spec, int, int]) -> None:
    spec, k, n = sks
    bits = spec.source.bits
    top = (1 << bits) - 1
    codes = data.draw(arrays(np.int64, (k, n), elements=st.integers(0, top)))
    if codes.size:
        codes.flat[0], codes.flat[-1] = top, 0
    q = pack(codes, spec)
    assert q.dtype == np.int32 and q.shape == (k * spec.words // spec.per_word, n)
    np.testing.assert_array_equal(unpack(q, spec), codes)
    # Every word pattern is a valid block: unpack then pack gives the words back.
    words = data.draw(arrays(np.uint32, q.shape, elements=st.integers(0, 2**32 - 1)))
    np.testing.assert_array_equal(pack(unpack(words, spec), spec), words.view(np.int32))
    # repack to another kind of the same width moves the bits unchanged.
    other = wide_spec(bits, "signed" if spec.source.kind.value != "signed" else "unsigned")
    np.testing.assert_array_equal(repack(q, spec, other), q)


def test_multiword_errors() -> None:
    spec = wide_spec(3)
    with pytest.raises(
        ValueError,
        match=r"^qweight: 4 rows \(qweight.shape\[0\]\) is not a multiple of 3.*"
        r"blocks of 3 int32 words holding 32 rows.*expected shape \(K \* 3 / 32, N\), "
        r"got \(4, 2\) int32",
    ):
        unpack(np.zeros((4, 2), dtype=np.int32), spec)
    with pytest.raises(ValueError, match=r"^qweight: 5 rows"):
        repack(np.zeros((5, 2), dtype=np.int32), spec, wide_spec(3, "signed"))
    with pytest.raises(
        ValueError,
        match=r"^codes: K=48 \(codes.shape\[0\]\) is not a multiple of 32.*block of 3 "
        r"32-bit words packed along K",
    ):
        pack(np.zeros((48, 2), dtype=np.int32), spec)
    with pytest.raises(ValueError, match=r"^codes:.*\[0, 8\).*max 8"):
        pack(np.full((32, 1), 8), spec)
    with pytest.raises(ValueError, match=r"source\.bits.*3-bit.*4-bit"):
        repack(np.zeros((3, 1), dtype=np.int32), spec, make_spec(4, "K"))
    with pytest.raises(ValueError, match=r"zeros\.mode"):
        pack_zeros(np.zeros((1, 32), dtype=np.int32), spec)


def test_multiword_agrees_with_reference_dequantizer() -> None:
    from dqgen.check.reference import dequantize_reference

    rng = np.random.default_rng(1)
    for bits in WIDE:
        spec = wide_spec(bits, "biased", bias=1 << (bits - 1))
        codes = rng.integers(0, 1 << bits, size=(spec.per_word * 2, 8))
        w = dequantize_reference(spec, pack(codes, spec), np.ones((1, 8), dtype=np.float16))
        np.testing.assert_array_equal(w.astype(np.int64), codes - (1 << (bits - 1)))


ML_FLOAT = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn}


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("axis", ["N", "K"])
def test_float_codes_are_raw_bit_patterns(fmt: str, axis: str) -> None:
    bits = 4 if fmt == "e2m1" else 8
    spec = src_spec({"bits": bits, "kind": "float", "format": fmt}, axis)
    p = 32 // bits
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 1 << bits, size=(p * 4, p * 4))
    codes[0, :] = np.arange(p * 4) % (1 << bits)
    q = pack(codes, spec)
    np.testing.assert_array_equal(unpack(q, spec), codes)
    # An ml_dtypes array of the spec's format is packed as its bits.
    as_ml = codes.astype(np.uint8).view(ML_FLOAT[fmt])
    np.testing.assert_array_equal(pack(as_ml, spec), q)
    # ... and means the same values to the reference (scale 1; NaN codes compare as NaN).
    from dqgen.check.reference import dequantize_reference

    w = dequantize_reference(spec, q, np.ones((1, codes.shape[1]), dtype=ml_dtypes.bfloat16)).astype(np.float64)
    np.testing.assert_array_equal(w, as_ml.astype(np.float64))


def test_e2m1_nibble_order_known_answer() -> None:
    """e2m1 along K, sequential: row k of a word's run is nibble k (no [hi|lo] swap)."""
    spec = src_spec({"bits": 4, "kind": "float", "format": "e2m1"}, "K")
    vals = np.array([0.5, -0.0, 6.0, -6.0, 1.5, 0.0, -1.0, 3.0], dtype=np.float32)[:, None]
    # OCP e2m1 codes: 0.5 = 0x1, -0 = 0x8, 6 = 0x7, -6 = 0xF, 1.5 = 0x3, 0 = 0x0, -1 = 0xA, 3 = 0x5.
    assert int(pack(vals.astype(ml_dtypes.float4_e2m1fn), spec).view(np.uint32)[0, 0]) == 0x5A03F781


def test_float_and_codebook_code_errors() -> None:
    e4m3 = src_spec({"bits": 8, "kind": "float", "format": "e4m3"}, "N")
    with pytest.raises(ValueError, match=r"^codes:.*\[0, 256\) \(raw 8-bit patterns of e4m3 codes\).*max 256"):
        pack(np.full((1, 4), 256), e4m3)
    with pytest.raises(ValueError, match=r"^codes:.*min -1"):
        pack(np.full((1, 4), -1), e4m3)
    with pytest.raises(ValueError, match=r"^codes: expected an integer array.*float8_e5m2"):
        pack(np.zeros((1, 4), dtype=ml_dtypes.float8_e5m2), e4m3)  # another format's floats
    with pytest.raises(ValueError, match=r"^codes: expected an integer array.*float32"):
        pack(np.zeros((1, 4), dtype=np.float32), e4m3)
    nf4 = src_spec({"bits": 4, "kind": "codebook", "codebook": "nf4"}, "K")
    with pytest.raises(ValueError, match=r"^codes:.*4-bit indices into the nf4 codebook.*max 16"):
        pack(np.full((8, 1), 16), nf4)
    np.testing.assert_array_equal(unpack(pack(np.arange(16).reshape(16, 1), nf4), nf4)[:, 0], np.arange(16))


def test_repack_float_codes_between_axes() -> None:
    k_spec = src_spec({"bits": 4, "kind": "float", "format": "e2m1"}, "K")
    n_spec = src_spec({"bits": 4, "kind": "float", "format": "e2m1"}, "N")
    codes = np.random.default_rng(3).integers(0, 16, size=(16, 24))
    out = repack(pack(codes, k_spec), k_spec, n_spec)
    assert out.shape == (16, 3)
    np.testing.assert_array_equal(unpack(out, n_spec), codes)
    np.testing.assert_array_equal(repack(out, n_spec, k_spec), pack(codes, k_spec))


# ---- issue 11 item 19: every public function takes what dqgen.load_spec takes -----------------------------------


def test_public_functions_take_spec_path_name_or_dict(tmp_path: Path) -> None:
    import dqgen

    path = SHIPPED_SPECS / "gptq_int4_fp16.yaml"
    as_dict = yaml.safe_load(path.read_text())
    spec = dqgen.load_spec(path)
    codes = np.random.default_rng(0).integers(0, 16, size=(64, 32))
    want = dqgen.pack(codes, spec)
    for form in (path, str(path), "gptq_int4_fp16", as_dict, path.read_text()):
        qweight = dqgen.pack(codes, form)
        np.testing.assert_array_equal(qweight, want)
        np.testing.assert_array_equal(dqgen.unpack(qweight, form), codes)
        np.testing.assert_array_equal(dqgen.repack(qweight, form, "awq_int4_fp16"), dqgen.pack(codes, "awq_int4_fp16"))
    awq = SHIPPED_SPECS / "awq_int4_fp16.yaml"  # packed zero points
    zeros = np.random.default_rng(1).integers(0, 16, size=(2, 32))
    want_z = dqgen.pack_zeros(zeros, dqgen.load_spec(awq))
    for form in (str(awq), "awq_int4_fp16", yaml.safe_load(awq.read_text())):
        np.testing.assert_array_equal(dqgen.pack_zeros(zeros, form), want_z)
        np.testing.assert_array_equal(dqgen.unpack_zeros(want_z, form), zeros)


def test_public_functions_name_a_bad_spec_argument(tmp_path: Path) -> None:
    import dqgen

    codes = np.zeros((64, 32), dtype=np.int64)
    with pytest.raises(dqgen.SpecError, match=r"^spec: .*nope.yaml: no such spec file"):
        dqgen.pack(codes, str(tmp_path / "nope.yaml"))
    with pytest.raises(dqgen.SpecError, match=r"^to_spec: \[source.bits\] got '4'"):
        dqgen.repack(
            dqgen.pack(codes, "int8_fp16"),
            "int8_fp16",
            {
                **yaml.safe_load((SHIPPED_SPECS / "int8_fp16.yaml").read_text()),
                "source": {"bits": "4", "kind": "signed"},
            },
        )
    with pytest.raises(TypeError, match=r"^spec: expected a dqgen Spec, .* got int$"):
        dqgen.unpack(codes, 5)  # type: ignore[arg-type]
