"""Tests of the numba reference dequantizer against independent, test-side models.

Expected values here come from IEEE facts, numpy / ml_dtypes casts, exact ``Fraction``
arithmetic and a plain Python packer written below: never from dqgen.reference itself.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dqgen.reference import (
    _round_array,
    _round_bits,
    dequantize_reference,
    element_value,
    random_inputs,
    shapes_for,
)
from dqgen.spec import Spec, load_spec

ROOT = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted((ROOT / "specs").glob("*.yaml"))
BF16 = np.dtype(ml_dtypes.bfloat16)

# Widths and orders the shipped specs do not exercise: 1- and 2-bit codes, an explicit
# permutation, zero points on a non-AWQ layout, signed 1-bit codes.
EXTRA_SPECS: dict[str, dict] = {
    "u2_k_reversed": {
        "name": "u2_k_reversed",
        "source": {"bits": 2, "kind": "unsigned"},
        "target": "fp16",
        "packing": {"axis": "K", "order": list(range(15, -1, -1))},
        "scales": {"group_size": 128},
    },
    "u2_n_zeros_bf16": {
        "name": "u2_n_zeros_bf16",
        "source": {"bits": 2, "kind": "unsigned"},
        "target": "bf16",
        "packing": {"axis": "N", "order": [3, 0, 15, 1, 4, 2, 14, 5, 13, 6, 12, 7, 11, 8, 10, 9]},
        "scales": {"group_size": 64},
        "zeros": {"mode": "integer"},
    },
    "s1_n": {
        "name": "s1_n",
        "source": {"bits": 1, "kind": "signed"},
        "target": "bf16",
        "packing": {"axis": "N"},
        "scales": {"group_size": -1},
    },
    "u1b1_k": {
        "name": "u1b1_k",
        "source": {"bits": 1, "kind": "biased", "bias": 1},
        "target": "fp16",
        "packing": {"axis": "K", "order": [(7 * j) % 32 for j in range(32)]},
        "scales": {"group_size": 128},
    },
}


def _all_specs() -> list:
    params = [pytest.param(load_spec(p), id=p.stem) for p in SPEC_FILES]
    params += [pytest.param(load_spec(d), id=name) for name, d in EXTRA_SPECS.items()]
    return params


ALL_SPECS = _all_specs()


def test_specs_found() -> None:
    assert len(SPEC_FILES) >= 7


# ----------------------------------------------------------------------------------------------
# Test-side models.
# ----------------------------------------------------------------------------------------------


def _value(spec: Spec, q: int) -> int:
    """Code value from the spec's prose: unsigned q, two's complement, or q - bias."""
    bits = spec.source.bits
    kind = spec.source.kind.value
    if kind == "unsigned":
        return q
    if kind == "signed":
        return q if q < 2 ** (bits - 1) else q - 2**bits
    return q - spec.source.bias


def _pack_words(codes: np.ndarray, spec: Spec, axis: str) -> np.ndarray:
    """Pack a 2-D array of unsigned codes into int32 words along ``axis``, one element at a time."""
    bits = spec.source.bits
    p = 32 // bits
    order = spec.order
    rows, cols = codes.shape
    shape = (rows, cols // p) if axis == "N" else (rows // p, cols)
    out = np.zeros(shape, dtype=np.uint32)
    for a in range(shape[0]):
        for b in range(shape[1]):
            word = 0
            for j in range(p):
                if axis == "N":
                    code = int(codes[a, b * p + order[j]])
                else:
                    code = int(codes[a * p + order[j], b])
                assert 0 <= code < 2**bits
                word |= code << (bits * j)
            out[a, b] = word
    return out.view(np.int32)


def _target_dtype(spec: Spec) -> np.dtype:
    return np.dtype(np.float16) if spec.target.value == "fp16" else BF16


def _rne(x: Fraction, ebits: int, mbits: int) -> float:
    """Exact round-to-nearest-even of a rational into a binary format, as a float64 (zero: +0.0)."""
    if x == 0:
        return 0.0
    bias = 2 ** (ebits - 1) - 1
    emin = 1 - bias
    emax = 2**ebits - 2 - bias
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^e <= a < 2^(e+2)
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - mbits)
    n = round(a / quantum)  # Fraction.__round__ rounds halves to even
    v = n * quantum
    largest = (2 - Fraction(1, 2**mbits)) * Fraction(2) ** emax
    if v > largest:
        r = math.inf
    else:
        r = float(v)  # exact: v has at most mbits + 1 significant bits
    return -r if x < 0 else r


def _bf16_from_exact(v: np.ndarray) -> np.ndarray:
    """bf16 bits of float64 values that are exactly representable in bf16 (no rounding happens)."""
    return v.astype(np.float32).astype(BF16).view(np.uint16)


def _bits16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def _unpack_fields(words: np.ndarray, bits: int) -> np.ndarray:
    w = words.view(np.uint32).astype(np.uint64)
    shifts = np.arange(32 // bits, dtype=np.uint64) * np.uint64(bits)
    return ((w[..., None] >> shifts) & np.uint64(2**bits - 1)).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# 1. Rounding float64 -> fp16 / bf16 bits.
# ----------------------------------------------------------------------------------------------


def _wide_f64(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return sign * (1.0 + rng.random(n)) * np.exp2(rng.integers(lo, hi, n).astype(np.float64))


def _ties_and_neighbours(mbits: int, emin: int, emax: int) -> np.ndarray:
    vals: list[float] = []
    half_ulp_1 = 2.0 ** -(mbits + 1)
    for base in (1.0, 1.0 + 2.0**-mbits, 1.5, 2.0 - 2.0**-mbits):
        for e in (emin, emin + 1, -3, 0, 7, emax):
            vals.append(math.ldexp(base + half_ulp_1, e))  # a tie
    sub_q = 2.0 ** (emin - mbits)  # smallest subnormal
    for k in (0.5, 1.5, 2.5, 3.5, 1.0, 2.0 ** mbits - 0.5, 2.0 ** mbits + 0.5):
        vals.append(k * sub_q)
    largest = (2.0 - 2.0**-mbits) * 2.0**emax
    threshold = (2.0 - 2.0 ** -(mbits + 1)) * 2.0**emax  # ties to even = inf
    vals += [largest, threshold, 2.0 ** (emax + 1), 1e300, 5e-324, 2.0 ** (emin - mbits - 1)]
    vals = [v for v in vals] + [-v for v in vals]
    arr = np.array(vals, dtype=np.float64)
    # One float64 ulp either side of every tie and threshold breaks the tie.
    return np.concatenate([arr, np.nextafter(arr, np.inf), np.nextafter(arr, -np.inf)])


def test_round_fp16_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [
            _wide_f64(rng, 40000, -40, 18),  # subnormals, normals and overflow
            _ties_and_neighbours(10, -14, 15),
            np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, 65536.0]),
            # Random bit patterns: mantissas with every bit set somewhere.
            rng.integers(0x3E00_0000_0000_0000, 0x40F8_0000_0000_0000, 20000, dtype=np.uint64).view(np.float64),
        ]
    )
    got = _round_array(x, 5, 10)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_round_bf16_matches_ml_dtypes_on_float32_inputs() -> None:
    rng = np.random.default_rng(2)
    # Every finite float32 bit pattern is fair game; a float32 -> bf16 cast rounds once.
    f32 = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f32 = f32[np.isfinite(f32)]
    extra = np.array(
        [0.0, -0.0, np.inf, -np.inf, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2.0**-133, 2.0**-134, 3 * 2.0**-134,
         np.finfo(np.float32).max, np.finfo(np.float32).tiny, 2.0**-149],
        dtype=np.float32,
    )
    f32 = np.concatenate([f32, extra])
    got = _round_array(f32.astype(np.float64), 8, 7)
    want = f32.astype(BF16).view(np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(f32[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_round_matches_exact_fraction_model(fmt: str) -> None:
    """Values that are not float32 (so no ml_dtypes double rounding) against exact rationals."""
    ebits, mbits, emin, emax = (5, 10, -14, 15) if fmt == "fp16" else (8, 7, -126, 127)
    rng = np.random.default_rng(3)
    x = np.concatenate([_wide_f64(rng, 3000, emin - mbits - 3, emax + 2), _ties_and_neighbours(mbits, emin, emax)])
    got = _round_array(x, ebits, mbits)
    for xi, gi in zip(x, got):
        r = _rne(Fraction(float(xi)), ebits, mbits)
        if r == 0.0:
            r = math.copysign(0.0, xi)
        if fmt == "fp16":
            want = int(np.array([r]).astype(np.float16).view(np.uint16)[0])
        else:
            want = int(_bf16_from_exact(np.array([r]))[0])
        assert int(gi) == want, (xi, hex(int(gi)), hex(want))


def test_round_known_bit_patterns() -> None:
    # IEEE facts, written down independently of any implementation.
    fp16 = {
        1.0: 0x3C00, 1 + 2**-11: 0x3C00, 1 + 3 * 2**-11: 0x3C02, 65504.0: 0x7BFF, 65520.0: 0x7C00,
        65519.0: 0x7BFF, 2.0**-24: 0x0001, 2.0**-25: 0x0000, 3 * 2.0**-25: 0x0002, 2.0**-14: 0x0400,
        -0.0: 0x8000, -2.0: 0xC000, math.inf: 0x7C00, -1e9: 0xFC00, 2.0**-14 - 2.0**-25: 0x0400,
    }
    bf16 = {
        1.0: 0x3F80, 1 + 2**-8: 0x3F80, 1 + 3 * 2**-8: 0x3F82, 1 + 2**-8 + 2**-40: 0x3F81,
        -0.0: 0x8000, 2.0**-133: 0x0001, 2.0**-134: 0x0000, 2.0**-126: 0x0080,
        (2 - 2**-7) * 2.0**127: 0x7F7F, (2 - 2**-8) * 2.0**127: 0x7F80, -math.inf: 0xFF80,
    }
    for x, bits in fp16.items():
        assert int(_round_bits(x, 5, 10)) == bits, (x, hex(int(_round_bits(x, 5, 10))))
    for x, bits in bf16.items():
        assert int(_round_bits(x, 8, 7)) == bits, (x, hex(int(_round_bits(x, 8, 7))))


# ----------------------------------------------------------------------------------------------
# 2. Layout: known codes, scale 1, zero 0.
# ----------------------------------------------------------------------------------------------


def _shape_for_test(spec: Spec) -> tuple[int, int]:
    return 256, 64


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_layout_every_element(spec: Spec) -> None:
    K, N = _shape_for_test(spec)
    bits = spec.source.bits
    rng = np.random.default_rng(10)
    codes = rng.integers(0, 2**bits, size=(K, N))
    qweight = _pack_words(codes, spec, spec.packing.axis)
    G = 1 if spec.scales.group_size == -1 else K // spec.scales.group_size
    scales = np.ones((G, N), dtype=_target_dtype(spec))
    zeros = np.zeros((G, N // (32 // bits)), dtype=np.int32) if spec.zeros.mode == "integer" else None
    W = dequantize_reference(spec, qweight, scales, zeros)
    assert W.dtype == _target_dtype(spec) and W.shape == (K, N)
    want = np.vectorize(lambda q: _value(spec, int(q)))(codes).astype(np.float64)
    np.testing.assert_array_equal(W.astype(np.float64), want)
    # uint32 words are accepted and mean the same bits.
    W2 = dequantize_reference(spec, qweight.view(np.uint32), scales, zeros)
    np.testing.assert_array_equal(_bits16(W2), _bits16(W))


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_element_value_all_codes(spec: Spec) -> None:
    bits = spec.source.bits
    for q in range(2**bits):
        assert element_value(spec, q) == _value(spec, q)
        if spec.zeros.mode == "integer":
            for z in (0, 1, 2**bits - 1):
                assert element_value(spec, q, z) == _value(spec, q) - z


def test_shapes_for_known_layouts() -> None:
    by = {p.stem: load_spec(p) for p in SPEC_FILES}
    assert shapes_for(by["awq_int4_fp16"], 4096, 4096) == {
        "qweight": (4096, 512), "scales": (32, 4096), "zeros": (32, 512)}
    assert shapes_for(by["gptq_int4_fp16"], 4096, 11008) == {"qweight": (512, 11008), "scales": (32, 11008)}
    assert shapes_for(by["int8_fp16"], 4096, 4096) == {"qweight": (4096, 1024), "scales": (1, 4096)}
    with pytest.raises(ValueError, match="group_size"):
        shapes_for(by["awq_int4_fp16"], 200, 64)
    with pytest.raises(ValueError, match="multiple of 8"):
        shapes_for(by["awq_int4_fp16"], 256, 60)


# ----------------------------------------------------------------------------------------------
# 3. Scales, zeros and groups, against exact rationals.
# ----------------------------------------------------------------------------------------------


def _wide_scales(spec: Spec, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    # Spread wide enough to produce subnormal, zero (fp16 underflow) and overflowing products.
    lo, hi = (-27.0, 13.0) if spec.target.value == "fp16" else (-136.0, 126.0)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    s = (sign * 2.0 ** rng.uniform(lo, hi, size=shape)).astype(_target_dtype(spec))
    s[0, 0] = -s[0, 0] if s[0, 0] != 0 else -1.0  # make sure both a negative ...
    s[0, 1] = 0.0 * s[0, 1]  # ... and a signed zero scale are present
    return s


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_scales_zeros_groups_exact(spec: Spec) -> None:
    K, N = 256, 32
    bits = spec.source.bits
    p = 32 // bits
    N = max(N, p)
    rng = np.random.default_rng(20)
    codes = rng.integers(0, 2**bits, size=(K, N))
    gs = spec.scales.group_size
    G = 1 if gs == -1 else K // gs
    scales = _wide_scales(spec, (G, N), rng)
    zcodes = rng.integers(0, 2**bits, size=(G, N)) if spec.zeros.mode == "integer" else None
    qweight = _pack_words(codes, spec, spec.packing.axis)
    zeros = _pack_words(zcodes, spec, "N") if zcodes is not None else None
    W = _bits16(dequantize_reference(spec, qweight, scales, zeros))
    ebits, mbits = (5, 10) if spec.target.value == "fp16" else (8, 7)
    s64 = scales.astype(np.float64)
    for k in range(K):
        g = 0 if gs == -1 else k // gs
        for n in range(N):
            d = _value(spec, int(codes[k, n])) - (int(zcodes[g, n]) if zcodes is not None else 0)
            s = float(s64[g, n])
            exact = Fraction(d) * Fraction(s)
            if exact == 0:
                # IEEE product sign: negative iff exactly one factor is negative (d == 0 is +0).
                neg = (d < 0) != (math.copysign(1.0, s) < 0)
                want = 0x8000 if neg else 0x0000
            elif spec.target.value == "fp16":
                with np.errstate(over="ignore"):
                    want = int(np.array([float(exact)]).astype(np.float16).view(np.uint16)[0])
            else:
                want = int(_bf16_from_exact(np.array([_rne(exact, ebits, mbits)]))[0])
            assert int(W[k, n]) == want, (k, n, d, s, hex(int(W[k, n])), hex(want))


@pytest.mark.parametrize("spec", [p for p in ALL_SPECS if p.id in {s.stem for s in SPEC_FILES}])
def test_random_inputs_full_tensor_vectorized(spec: Spec) -> None:
    """A whole random tensor against a numpy model of the layout (test-side unpacking)."""
    K, N = 512, 256
    qweight, scales, zeros = random_inputs(spec, K, N, seed=5)
    W = _bits16(dequantize_reference(spec, qweight, scales, zeros))
    bits, p, order = spec.source.bits, spec.per_word, np.asarray(spec.order)
    fields = _unpack_fields(qweight, bits)  # [..., j]
    codes = np.empty((K, N), dtype=np.int64)
    if spec.packing.axis == "N":
        codes.reshape(K, N // p, p)[:, :, order] = fields
    else:
        codes.reshape(K // p, p, N)[:, order, :] = fields.transpose(0, 2, 1)
    vals = np.vectorize(lambda q: _value(spec, int(q)))(np.arange(2**bits))[codes]
    gs = spec.scales.group_size
    rows = np.zeros(K, dtype=np.int64) if gs == -1 else np.arange(K) // gs
    if zeros is not None:
        z = np.empty((zeros.shape[0], N), dtype=np.int64)
        z.reshape(zeros.shape[0], N // p, p)[:, :, order] = _unpack_fields(zeros, bits)
        vals = vals - z[rows]
    prod = vals.astype(np.float64) * scales.astype(np.float64)[rows]  # exact: <= 20 significant bits
    with np.errstate(over="ignore"):
        if spec.target.value == "fp16":
            want = prod.astype(np.float16).view(np.uint16)
        else:
            want = prod.astype(np.float32).astype(BF16).view(np.uint16)  # float32 step is exact
    np.testing.assert_array_equal(W, want)


# ----------------------------------------------------------------------------------------------
# 4. Error paths: each names the offending tensor.
# ----------------------------------------------------------------------------------------------


def _spec(stem: str) -> Spec:
    return load_spec(ROOT / "specs" / f"{stem}.yaml")


def test_error_message_example() -> None:
    spec = _spec("awq_int4_fp16")
    q, s, z = random_inputs(spec, 4096, 4096, 0)
    with pytest.raises(ValueError) as ei:
        dequantize_reference(spec, q[:, :511], s, z)
    msg = str(ei.value)
    assert msg.startswith("qweight:")
    assert "expected shape (4096, 512)" in msg and "got (4096, 511) int32" in msg
    assert "K=4096" in msg and "N=4096" in msg and "along N" in msg


def test_errors_name_the_tensor() -> None:
    awq = _spec("awq_int4_fp16")
    gptq = _spec("gptq_int4_fp16")
    i8 = _spec("int8_bf16")
    q, s, z = random_inputs(awq, 256, 64, 0)
    gq, gs, _ = random_inputs(gptq, 256, 64, 0)
    iq, is_, _ = random_inputs(i8, 64, 64, 0)

    cases = [
        # wrong qweight shape (N side and K side)
        ("qweight", lambda: dequantize_reference(awq, q[:, :7], s, z)),
        ("qweight", lambda: dequantize_reference(gptq, gq[:, :63], gs, None)),
        ("qweight", lambda: dequantize_reference(awq, q.reshape(-1), s, z)),
        ("qweight", lambda: dequantize_reference(awq, q.tolist(), s, z)),
        # wrong qweight dtype
        ("qweight", lambda: dequantize_reference(awq, q.astype(np.int64), s, z)),
        ("qweight", lambda: dequantize_reference(awq, q.view(np.float32), s, z)),
        # wrong scales dtype (float32, and the other 16-bit target)
        ("scales", lambda: dequantize_reference(awq, q, s.astype(np.float32), z)),
        ("scales", lambda: dequantize_reference(awq, q, s.astype(BF16), z)),
        ("scales", lambda: dequantize_reference(i8, iq, is_.astype(np.float16), None)),
        # wrong scales shape
        ("scales", lambda: dequantize_reference(awq, q, s[:1], z)),
        ("scales", lambda: dequantize_reference(i8, iq, np.concatenate([is_, is_]), None)),
        ("scales", lambda: dequantize_reference(awq, q, s[:, :60], z)),
        # missing / unexpected / malformed zeros
        ("zeros", lambda: dequantize_reference(awq, q, s, None)),
        ("zeros", lambda: dequantize_reference(gptq, gq, gs, np.zeros((2, 8), np.int32))),
        ("zeros", lambda: dequantize_reference(awq, q, s, z.astype(np.float32))),
        ("zeros", lambda: dequantize_reference(awq, q, s, z[:1])),
        # K not a multiple of the group size (K inferred from qweight rows)
        ("qweight", lambda: dequantize_reference(awq, q[:200], s, z)),
        ("qweight", lambda: dequantize_reference(gptq, gq[:25], gs, None)),
    ]
    for i, (name, call) in enumerate(cases):
        with pytest.raises(ValueError) as ei:
            call()
        msg = str(ei.value)
        assert msg.startswith(f"{name}:"), (i, msg)
        assert "expected" in msg or "multiple of" in msg or "required" in msg or "none" in msg, (i, msg)
    # The group-size message says what is wrong.
    with pytest.raises(ValueError, match=r"qweight: K=200 .*group_size=128"):
        dequantize_reference(awq, q[:200], s, z)


# ----------------------------------------------------------------------------------------------
# 5. random_inputs reaches the whole code range.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_random_inputs_cover_code_range(spec: Spec) -> None:
    K, N = 512, 256
    qweight, scales, zeros = random_inputs(spec, K, N, seed=7)
    bits = spec.source.bits
    shapes = shapes_for(spec, K, N)
    assert qweight.dtype == np.int32 and qweight.shape == shapes["qweight"]
    fields = _unpack_fields(qweight, bits)
    assert fields.min() == 0 and fields.max() == 2**bits - 1
    # The sign bit of the int32 words is used too (full 32-bit range).
    assert (qweight < 0).any() and (qweight > 0).any()
    assert scales.dtype == _target_dtype(spec) and scales.shape == shapes["scales"]
    s = scales.astype(np.float64)
    assert np.isfinite(s).all() and (s < 0).any() and (s > 0).any()
    mag = np.abs(s[s != 0])
    assert mag.max() / mag.min() > 2.0**8  # a spread of exponents
    if spec.zeros.mode == "integer":
        assert zeros is not None and zeros.dtype == np.int32 and zeros.shape == shapes["zeros"]
        zf = _unpack_fields(zeros, bits)
        assert zf.min() == 0 and zf.max() == 2**bits - 1
    else:
        assert zeros is None
    # Deterministic per seed, different across seeds.
    q2, s2, _ = random_inputs(spec, K, N, seed=7)
    q3, _, _ = random_inputs(spec, K, N, seed=8)
    assert np.array_equal(q2, qweight) and np.array_equal(_bits16(s2), _bits16(scales))
    assert not np.array_equal(q3, qweight)
