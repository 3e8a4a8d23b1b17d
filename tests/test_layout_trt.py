"""Tests of dqgen.layout.gemm_trt: TensorRT-LLM's mixed-GEMM weight layout (seed 002).

Expectations come from outside the module under test: the permutations as published (the seed, TensorRT-LLM's
``cutlass_preprocessors.cpp`` comments), a step-by-step re-statement of TensorRT-LLM's four preprocessing steps
written here from their description (``trt_reference``), the PTX ``mma.m16n8k16`` B-fragment table, and bytes
worked out by hand in docstrings.
"""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.core.spec import ORDER_PRESETS, load_spec
from dqgen.layout import gemm_trt
from dqgen.layout.gemm_trt import (
    checkpoint_from_trt,
    columns_interleaved,
    converter_spec,
    element_slots,
    from_trt_layout,
    interleave_index,
    ldsm_positions,
    ldsm_row_permutation,
    register_order,
    repack_checkpoint,
    threadblock_k,
    to_trt_layout,
)
from dqgen.layout.packing import pack, pack_zeros, unpack_zeros, zeros_to_stored

# Seed 002 (../shared/seeds/002_f745d4c2fb167bef.txt), line 152: after the int4 re-arrangement "一个线程就能直接load到
# ... 018916172425" (thread 0's word holds rows 0 1 8 9 16 17 24 25); line 156: int8 puts "0189" in 4 bytes.
# The full sequences, per 32 (int4) and 16 (int8) rows, as TensorRT-LLM's get_permutation_map comment publishes
# them (and issue 14 / research/gemm.md quote them):
SEED_INT4_THREAD0 = (0, 1, 8, 9, 16, 17, 24, 25)
SEED_INT8_THREAD0 = (0, 1, 8, 9)
PUBLISHED_INT8 = (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)
PUBLISHED_INT4 = (
    0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19, 26, 27,
    4, 5, 12, 13, 20, 21, 28, 29, 6, 7, 14, 15, 22, 23, 30, 31,
)  # fmt: skip
# TensorRT-LLM's W4_AFP8 map (fp8 activations, mma k32), same source: the activation width is a real parameter.
PUBLISHED_INT4_FP8 = (
    0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23,
    8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31,
)  # fmt: skip
# add_bias_and_interleave_*: "[elt_7 elt_5 elt_3 elt_1 elt_6 elt_4 elt_2 elt_0]" and "[elt_3 elt_1 elt_2 elt_0]",
# written MSB first; read from bit 0 up they are these field -> element orders.
PUBLISHED_REG_INT4 = (0, 2, 4, 6, 1, 3, 5, 7)
PUBLISHED_REG_INT8 = (0, 2, 1, 3)


# -- the published permutations ----------------------------------------------------------------------------


def test_ldsm_permutation_matches_the_seed_and_the_published_maps() -> None:
    assert ldsm_row_permutation(4) == PUBLISHED_INT4
    assert ldsm_row_permutation(8) == PUBLISHED_INT8
    assert ldsm_row_permutation(4)[:8] == SEED_INT4_THREAD0
    assert ldsm_row_permutation(8)[:4] == SEED_INT8_THREAD0
    assert ldsm_row_permutation(4, activation_bits=8) == PUBLISHED_INT4_FP8
    # same width on both sides: ldmatrix already hands each thread its fragment, nothing to permute
    assert ldsm_row_permutation(8, activation_bits=8) == tuple(range(16))


def test_column_interleave_and_threadblock_k_match_the_seed() -> None:
    """Seed 002: ThreadblockK = 64 = 128-byte line / fp16 (128 for fp8); 4 columns interleaved for int4, 2 for
    int8 (TensorRT-LLM's ColumnMajorTileInterleave<64, 4> / <64, 2>)."""
    assert threadblock_k(16) == 64
    assert threadblock_k(8) == 128
    assert (columns_interleaved(4), columns_interleaved(8)) == (4, 2)
    assert (columns_interleaved(4, 8), columns_interleaved(8, 8)) == (2, 1)


def test_register_order_matches_the_published_interleave_and_dqgen_presets() -> None:
    assert register_order(4) == PUBLISHED_REG_INT4
    assert register_order(8) == PUBLISHED_REG_INT8
    # dqgen's converter orders for the matching specs: AWQ's order, FasterTransformer's int8, trtllm_u2b2's
    assert list(register_order(4)) == ORDER_PRESETS["awq"][4]
    assert list(register_order(8)) == ORDER_PRESETS["ft_int8"][8]
    assert list(register_order(2)) == load_spec("trtllm_u2b2_fp16").order
    assert gemm_trt.bias(4) == 8 and gemm_trt.bias(8) == 128


# -- bijections -----------------------------------------------------------------------------------------------

SHAPES = [(64, 1), (64, 4), (128, 8), (192, 12), (448, 24)]  # N in multiples of the interleave below


def _is_permutation(a: np.ndarray, n: int) -> bool:
    return bool(np.array_equal(np.sort(np.asarray(a).reshape(-1)), np.arange(n)))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("activation_bits", [16, 8])
def test_every_transform_is_a_bijection(bits: int, activation_bits: int) -> None:
    assert _is_permutation(np.array(ldsm_row_permutation(bits, activation_bits)), 4 * 32 // bits)
    assert _is_permutation(np.array(register_order(bits)), 32 // bits)
    cols = columns_interleaved(bits, activation_bits)
    tk = threadblock_k(activation_bits)
    for k_tiles, n_groups in [(1, 1), (2, 3), (5, 2)]:
        K, N = k_tiles * tk, n_groups * cols
        assert _is_permutation(ldsm_positions(K, bits, activation_bits), K)
        assert _is_permutation(interleave_index(K, N, bits, activation_bits), K * N)
        assert _is_permutation(element_slots(K, N, bits, activation_bits), K * N)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("K", "n_groups"), [(64, 1), (64, 3), (192, 2), (448, 5)])
def test_round_trip_is_exact(bits: int, K: int, n_groups: int) -> None:
    rng = np.random.default_rng(bits * 1000 + K + n_groups)
    N = n_groups * columns_interleaved(bits)
    codes = rng.integers(0, 1 << bits, size=(K, N), dtype=np.uint8)
    packed = to_trt_layout(codes, bits)
    assert packed.dtype == np.uint8 and packed.shape == (N // columns_interleaved(bits), K * 16 // 8)
    assert np.array_equal(from_trt_layout(packed, bits), codes)
    signed = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), size=(K, N)).astype(np.int8)
    assert np.array_equal(from_trt_layout(to_trt_layout(signed, bits, signed=True), bits, signed=True), signed)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("activation_bits", [16, 8])
def test_to_trt_layout_scatters_through_element_slots(bits: int, activation_bits: int) -> None:
    """to_trt_layout (gathers and a transpose) and the composed index map element_slots are the same map."""
    K, N = 2 * threadblock_k(activation_bits), 3 * columns_interleaved(bits, activation_bits)
    codes = np.random.default_rng(bits + activation_bits).integers(0, 1 << bits, size=(K, N), dtype=np.uint8)
    fields = np.empty(K * N, dtype=np.uint8)
    fields[element_slots(K, N, bits, activation_bits).reshape(-1)] = codes.reshape(-1)
    got = to_trt_layout(codes, bits, activation_bits=activation_bits).reshape(-1)
    if bits == 4:
        got = np.stack([got & 0xF, got >> 4], axis=1).reshape(-1)  # slot 2i = low nibble of byte i
    assert np.array_equal(got, fields)
    back = from_trt_layout(
        to_trt_layout(codes, bits, activation_bits=activation_bits), bits, activation_bits=activation_bits
    )
    assert np.array_equal(back, codes)


# -- TensorRT-LLM's preprocessing, step by step -------------------------------------------------------------


def trt_reference(signed_codes: np.ndarray, bits: int) -> np.ndarray:
    """TensorRT-LLM's preprocess_weights_for_mixed_gemm for sm80 and fp16 activations, re-stated as its four
    steps on whole elements with the published tables (not with the module's derivations):
    (1) permute rows of W[K, N] in blocks of 16 (int8) / 32 (int4) with the published map;
    (2) transpose to column-major (per column n, K codes, k ascending, low nibble first for int4);
    (3) ColumnMajorTileInterleave<64, I>: column n's tile of rows [64 t, 64 t + 64) goes to output column n // I
        at offset (t * I + n % I) * 64;
    (4) per 32-bit word, add the bias (+8 / +128) and store element order[f] in field f."""
    K, N = signed_codes.shape
    table = PUBLISHED_INT4 if bits == 4 else PUBLISHED_INT8
    rows = len(table)
    inter = 4 if bits == 4 else 2
    step1 = np.empty_like(signed_codes)
    for base in range(0, K, rows):
        for r in range(rows):
            step1[base + r] = signed_codes[base + table[r]]
    step2 = step1.T  # [N, K]
    stream = np.empty(K * N, dtype=np.int64)
    for n in range(N):
        for t in range(K // 64):
            start = (n // inter) * K * inter + (t * inter + n % inter) * 64
            stream[start : start + 64] = step2[n, 64 * t : 64 * t + 64]
    biased = stream + (8 if bits == 4 else 128)
    order = PUBLISHED_REG_INT4 if bits == 4 else PUBLISHED_REG_INT8
    per_word = len(order)
    words = biased.reshape(-1, per_word)[:, list(order)]  # field f holds element order[f]
    fields = words.reshape(-1).astype(np.uint8)
    if bits == 4:
        fields = fields[0::2] | (fields[1::2] << 4)
    return fields


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("K", "N"), [(64, 4), (128, 8), (192, 12), (320, 16)])
def test_to_trt_layout_equals_tensorrt_llm_steps(bits: int, K: int, N: int) -> None:
    rng = np.random.default_rng(K * N + bits)
    signed = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), size=(K, N)).astype(np.int8)
    got = to_trt_layout(signed, bits, signed=True)
    assert np.array_equal(got.reshape(-1), trt_reference(signed, bits))


def test_hand_checked_int8_64x4() -> None:
    """K = 64, N = 4, int8, codes[k, n] = k + 64 n (every byte value once; unsigned fields, no bias).

    I = 2, so the result is 2 rows of 128 bytes: row r holds columns 2r and 2r + 1, one 64-row tile each
    (K = 64 is one ThreadblockK tile): bytes [0, 64) column 2r, [64, 128) column 2r + 1.
    Within a column, the LDSM map per 16 rows stores k = 0 1 8 9 | 2 3 10 11 | 4 5 12 13 | 6 7 14 15; then each
    4-byte word (a0 a1 a2 a3) is stored in field order [0 2 1 3], i.e. as (a0 a2 a1 a3): (0 8 1 9), (2 10 3 11),
    (4 12 5 13), (6 14 7 15). So byte 2i of a 16-row block holds k = i and byte 2i + 1 holds k = i + 8: column
    0 starts 0 8 1 9 2 10 ... 7 15 16 24 17 25 ...; column 1 is the same plus 64; row 1 the same plus 128."""
    K, N = 64, 4
    codes = (np.arange(K)[:, None] + 64 * np.arange(N)[None, :]).astype(np.uint8)
    packed = to_trt_layout(codes, 8)
    assert packed.shape == (2, 128)
    assert packed[0, :16].tolist() == [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    assert packed[0, 16:20].tolist() == [16, 24, 17, 25]
    assert packed[0, 64:68].tolist() == [64, 72, 65, 73]
    assert packed[1, :4].tolist() == [128, 136, 129, 137]
    expected = [
        [64 * (2 * r + c) + 16 * b + i + 8 * h for c in range(2) for b in range(4) for i in range(8) for h in range(2)]
        for r in range(2)
    ]
    assert packed.tolist() == expected
    # signed: the same layout, each byte s + 128 (TensorRT-LLM's bias)
    signed = (codes.astype(np.int16) - 128).astype(np.int8)
    assert np.array_equal(to_trt_layout(signed, 8, signed=True), packed)


def test_hand_checked_int4_64x4() -> None:
    """K = 64, N = 4, int4: I = 4, one row of 128 bytes, column n's 64 codes in bytes [32 n, 32 n + 32).
    Column 0 holds codes k % 16, columns 1, 2, 3 the constants 0xA, 0xB, 0xC (bytes 0xAA, 0xBB, 0xCC).
    LDSM map: thread t's word holds k = 2t + (0 1 8 9 16 17 24 25); field order [0 2 4 6 1 3 5 7] puts those
    as fields (k: 2t, 2t+8, 2t+16, 2t+24, 2t+1, 2t+9, 2t+17, 2t+25), codes mod 16 (2t, 2t+8, 2t, 2t+8, 2t+1,
    2t+9, 2t+1, 2t+9); byte i = field 2i | field 2i+1 << 4. Word 0: 0x80 0x80 0x91 0x91; word 1 (t = 1): 0xA2
    0xA2 0xB3 0xB3; words 4..7 (rows 32..63, the same codes mod 16) repeat words 0..3."""
    K, N = 64, 4
    codes = np.empty((K, N), dtype=np.uint8)
    codes[:, 0] = np.arange(K) % 16
    codes[:, 1:] = [0xA, 0xB, 0xC]
    packed = to_trt_layout(codes, 4)
    assert packed.shape == (1, 128)
    col0 = [0x80, 0x80, 0x91, 0x91, 0xA2, 0xA2, 0xB3, 0xB3, 0xC4, 0xC4, 0xD5, 0xD5, 0xE6, 0xE6, 0xF7, 0xF7]
    assert packed[0, :32].tolist() == col0 + col0
    assert packed[0, 32:].tolist() == [0xAA] * 32 + [0xBB] * 32 + [0xCC] * 32


# -- the converter: dqgen's proven Plan reads the words as the mma needs them --------------------------------


def _word_fragments(K: int, N: int, bits: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """For each 32-bit word of the packed stream: its column n and, per fp16x2 output pair h, the k rows the
    mma.m16n8k16 B fragment wants there (PTX: thread t = lane % 4 holds rows 2t + (i & 1) + 8 (i >= 2) of
    column lane / 4; registers b0 = rows (2t, 2t+1), b1 = (2t+8, 2t+9); the next k16 step 16 rows on).
    The word's place follows ColumnMajorTileInterleave<64, I> and ldmatrix (4 words per 16-byte tile row,
    word t to thread t)."""
    per_word, inter = 32 // bits, 16 // bits
    words_per_tile = 64 // per_word  # one column's 64-row tile
    words_per_row = K * inter // per_word
    out = []
    for w in range(N // inter * words_per_row):
        r, wr = divmod(w, words_per_row)
        tile, within = divmod(wr, inter * words_per_tile)
        sub, wt = divmod(within, words_per_tile)
        wcol = tile * words_per_tile + wt  # word index down column n
        block, t = divmod(wcol, 4)  # a block of 4 words = one 16-byte ldmatrix row = 4 E rows
        pairs = []
        for h in range(per_word // 2):
            k = block * 4 * per_word + 16 * (h // 2) + 8 * (h % 2) + 2 * t
            pairs.append((k, k + 1))
        out.append((r * inter + sub, pairs))
    return out


def _fp16_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(np.float16).view(np.uint16).astype(np.uint32)


CHECKPOINTS = ["awq_int4_fp16", "gptq_int4_fp16", "int8_fp16", "gptq_int4_asym_act_order_fp16"]


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_checkpoint_round_trip_and_plan_reads_mma_fragments(name: str) -> None:
    """A checkpoint layer -> repack_checkpoint -> each TRT word through the converter spec's solved Plan gives
    the dequantized values of exactly the (k, n) the mma fragment wants, pair by pair; and back to the
    checkpoint's qweight (and qzeros) unchanged."""
    from dqgen.solve.solver import solve

    spec = load_spec(name)
    bits = spec.source.bits
    K, N, group = 192, 16, 64
    G = K // group
    rng = np.random.default_rng(len(name))
    if spec.source.kind.value == "signed":
        codes = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), size=(K, N))
        values = codes.astype(np.float64)
    else:
        codes = rng.integers(0, 1 << bits, size=(K, N))
        values = codes - (spec.source.offset if spec.source.kind.value == "biased" else 0)
    qweight = pack(codes, spec)
    g_idx = rng.permutation(np.arange(K) // group) if spec.act_order else np.arange(K) // group
    scales = np.float16(rng.uniform(0.5, 2.0, size=(G, N)) * rng.choice([-1, 1], size=(G, N)))
    if spec.scales.group_size == -1:
        g_idx = np.zeros(K, dtype=np.int64)
        scales = scales[:1]
    zero_of = np.zeros((G, N), dtype=np.int64)
    qzeros = None
    if spec.zeros.packed:
        lo = 1 if spec.zeros.mode == "gptq_v1" else 0
        zero_of = rng.integers(lo, (1 << bits) + lo, size=(G, N))
        qzeros = pack_zeros(zeros_to_stored(zero_of, spec), spec)
        packed, new_qzeros = repack_checkpoint(spec, qweight, qzeros=qzeros)  # type: ignore[misc]
        conv = converter_spec(spec)
        # the repacked zeros read back (by dqgen's own unpacker, in the converter spec's zero order) as stored
        assert np.array_equal(unpack_zeros(new_qzeros, conv), zeros_to_stored(zero_of, spec))
    else:
        packed = repack_checkpoint(spec, qweight)
        conv = converter_spec(spec)
    assert np.array_equal(checkpoint_from_trt(spec, packed), qweight)

    plan = solve(conv)
    words = np.frombuffer(packed.tobytes(), dtype="<u4")
    frags = _word_fragments(K, N, bits)
    assert len(frags) == words.size
    cols = np.array([n for n, _ in frags])
    pairs = np.array([p for _, p in frags])  # [words, E/2, 2]
    g = g_idx[pairs]  # the group of every wanted element
    env: dict[str, np.ndarray] = {"w": words.astype(np.uint32)}
    s_bits = scales.view(np.uint16).astype(np.uint32)
    for h in range(pairs.shape[1]):
        env[f"s{h}"] = s_bits[g[:, h, 0], cols] | (s_bits[g[:, h, 1], cols] << np.uint32(16))
    if spec.zeros.packed:
        # one zero word per weight word: every field the stored zero of the word's (group, column); a word's rows
        # share a group when the groups are whole 32-row blocks (not so under act-order: element by element)
        stored = np.asarray(unpack_zeros(new_qzeros, conv), dtype=np.uint32)
        z = np.zeros(words.size, dtype=np.uint32)
        field_of = {e: f for f, e in enumerate(conv.order)}
        for h in range(pairs.shape[1]):
            for half in range(2):
                f = field_of[2 * h + half]
                z |= stored[g[:, h, half], cols] << np.uint32(bits * f)
        env["z"] = z
    regs = plan.run(env)
    for h in range(pairs.shape[1]):
        k_lo, k_hi = pairs[:, h, 0], pairs[:, h, 1]
        for half, k in ((0, k_lo), (1, k_hi)):
            expect = (values[k, cols] - zero_of[g[:, h, half], cols]) * scales[g[:, h, half], cols].astype(np.float64)
            got = (regs[plan.outputs[h]] >> np.uint32(16 * half)) & np.uint32(0xFFFF)
            assert np.array_equal(got, _fp16_bits(expect)), (name, h, half)


def test_derived_register_order_is_what_makes_the_int4_converter_cheap() -> None:
    """dqgen's solver, given the derived order, needs 9 convert instructions per int4 word; given the plain
    sequential order (pairs of fields 4 bits apart, not 16) it needs more. For int8 PRMT picks any byte, so the
    order costs nothing either way, as TensorRT-LLM's own comment says of its int8 interleave."""
    from dqgen.solve.solver import solve

    def cost(bits: int, order: list[int] | str, kind: dict) -> int:
        spec = load_spec(
            {
                "name": "t",
                "source": kind,
                "target": "fp16",
                "packing": {"axis": "K", "order": order},
                "scales": {"group_size": 128},
            }
        )
        return solve(spec).count("convert")

    u4b8 = {"bits": 4, "kind": "biased", "bias": 8}
    u8b128 = {"bits": 8, "kind": "biased", "bias": 128}
    derived4 = cost(4, list(register_order(4)), u4b8)
    assert derived4 < cost(4, "sequential", u4b8)
    assert derived4 <= cost(4, [1, 3, 5, 7, 0, 2, 4, 6], u4b8)
    assert cost(8, list(register_order(8)), u8b128) == cost(8, "sequential", u8b128)


# -- bad input ----------------------------------------------------------------------------------------------


def test_bad_input_is_one_line_naming_the_argument() -> None:
    ok = np.zeros((64, 4), dtype=np.uint8)
    cases = [
        (lambda: to_trt_layout(np.zeros((48, 4), np.uint8), 4), "codes: K=48"),
        (lambda: to_trt_layout(np.zeros((64, 6), np.uint8), 4), "codes: N=6"),
        (lambda: to_trt_layout(ok + 16, 4), "codes: 4-bit stored unsigned fields"),
        (lambda: to_trt_layout(ok.astype(np.int8) - 9, 4, signed=True), "codes: 4-bit signed values"),
        (lambda: to_trt_layout(ok.astype(np.float32), 4), "codes: expected a 2-D integer array"),
        (lambda: to_trt_layout(ok, 3), "bits:"),
        (lambda: to_trt_layout(ok, 8, activation_bits=4), "activation_bits:"),
        (lambda: from_trt_layout(np.zeros((2, 100), np.uint8), 8), "packed: a row of 100 bytes"),
        (lambda: from_trt_layout(np.zeros((2, 129), np.uint8), 4), "packed: a row of 129 bytes"),
        (lambda: from_trt_layout(np.zeros((2, 128), np.int32), 8), "packed: expected a 2-D uint8"),
        (lambda: repack_checkpoint("awq_int4_s8", np.zeros((8, 4), np.int32)), "[target]"),
        (lambda: repack_checkpoint("gptq_int3_fp16", np.zeros((6, 4), np.int32)), "[source.bits]"),
        (lambda: repack_checkpoint("gptq_int4_fp16", np.zeros((4, 4), np.int32)), "qweight: K=32"),
        (
            lambda: repack_checkpoint("gptq_int4_fp16", np.zeros((8, 4), np.int32), qzeros=np.zeros((1, 1), np.int32)),
            "qzeros: given",
        ),
    ]
    for call, start in cases:
        with pytest.raises(ValueError) as e:
            call()
        msg = str(e.value)
        assert msg.startswith(start) and "\n" not in msg, msg
