"""dqgen.core.formats: exact encode/decode and the nearest-even rounding, against first principles,
numpy float16 / float32 casts and ml_dtypes bfloat16 casts (of float32-exact inputs only:
ml_dtypes rounds float64 through float32, which double-rounds)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from dqgen.check import reference
from dqgen.core.formats import (
    BF16,
    FP16,
    FP32,
    MINIFLOATS,
    SCALAR_TYPES,
    FloatFormat,
    ScalarType,
    numpy_dtype,
    scalar_type,
    torch_dtype_name,
)
from dqgen.core.spec import Target
from dqgen.ir.magic import magic_bits


def test_format_parameters() -> None:
    assert (FP16.ebits, FP16.mbits, FP16.bias, FP16.emin, FP16.emax, FP16.width) == (5, 10, 15, -14, 15, 16)
    assert (BF16.ebits, BF16.mbits, BF16.bias, BF16.emin, BF16.emax, BF16.width) == (8, 7, 127, -126, 127, 16)
    assert (FP32.ebits, FP32.mbits, FP32.bias, FP32.emin, FP32.emax, FP32.width) == (8, 23, 127, -126, 127, 32)


@pytest.mark.parametrize(
    "fmt,value,bits",
    [
        # magic numbers: exponent field = bias + mbits, mantissa 0
        (FP16, 1024, (15 + 10) << 10),  # 0x6400
        (BF16, 128, (127 + 7) << 7),  # 0x4300
        (FP32, 1 << 23, (127 + 23) << 23),  # 0x4B000000
        # published FT / CUTLASS / Marlin constants (anchors.md)
        (FP16, 1024, 0x6400),
        (BF16, 128, 0x4300),
        (FP32, 1 << 23, 0x4B000000),
        (FP16, Fraction(1, 16), 0x2C00),
        (FP16, -64, 0xD400),
        (FP16, -72, 0xD480),
        (FP16, 1032, 0x6408),
        (FP16, 1152, 0x6480),
        (FP16, -1024, 0xE400),
        (FP16, 1, 0x3C00),
        (BF16, 1, 0x3F80),
        (BF16, -136, 0xC308),
        (BF16, 136, 0x4308),
        (FP32, (1 << 23) + 128, 0x4B000080),  # 8388736.0
        # extremes
        (FP16, 65504, 0x7BFF),
        (FP16, Fraction(1, 1 << 24), 0x0001),  # smallest subnormal
        (FP16, Fraction(1023, 1 << 24), 0x03FF),  # largest subnormal
        (FP16, Fraction(1, 1 << 14), 0x0400),  # smallest normal
        (FP16, 0, 0x0000),
        (BF16, Fraction(1, 1 << 133), 0x0001),
        (FP32, Fraction(1, 1 << 149), 0x00000001),
    ],
)
def test_encode_exact_known(fmt: FloatFormat, value: Fraction | int, bits: int) -> None:
    assert fmt.encode_exact(value) == bits
    assert fmt.decode(bits) == Fraction(value)


def test_magic_bits_from_formats() -> None:
    assert magic_bits(FP16) == 0x6400
    assert magic_bits(BF16) == 0x4300
    assert magic_bits(FP32) == 0x4B000000


@pytest.mark.parametrize(
    "fmt,value",
    [
        (FP16, Fraction(2051, 2)),  # 1025.5: the fp16 ulp at 1024 is 1
        (FP16, 2049),  # ulp 2 above 2048
        (FP16, 65505),
        (FP16, 65536),  # overflow
        (FP16, -65536),
        (FP16, Fraction(1, 1 << 25)),  # below the smallest subnormal
        (FP16, Fraction(3, 1 << 25)),
        (FP16, Fraction(1, 3)),
        (FP16, 0.1),
        (BF16, 257),
        (BF16, Fraction(1, 1 << 134)),
        (BF16, 2**128),
        (FP32, (1 << 24) + 1),
        (FP32, Fraction(1, 1 << 150)),
    ],
)
def test_encode_exact_rejects(fmt: FloatFormat, value: Fraction | int | float) -> None:
    with pytest.raises(ValueError):
        fmt.encode_exact(value)


@pytest.mark.parametrize("fmt,np_dtype", [(FP16, np.float16), (BF16, ml_dtypes.bfloat16)], ids=["fp16", "bf16"])
def test_round_trip_16bit_patterns(fmt: FloatFormat, np_dtype: type) -> None:
    # every pattern of the lowest two and highest two exponent fields (subnormals, inf/nan,
    # the largest finite values), both signs, plus a random sample of the rest
    allp = np.arange(1 << 16, dtype=np.uint32)
    ef = (allp >> fmt.mbits) & ((1 << fmt.ebits) - 1)
    edge = (ef <= 1) | (ef >= (1 << fmt.ebits) - 2)
    rest = np.random.default_rng(5).choice(allp[~edge], size=6000, replace=False)
    pats = np.concatenate([allp[edge], rest])
    exp_all_ones = ((pats >> fmt.mbits) & ((1 << fmt.ebits) - 1)) == (1 << fmt.ebits) - 1
    with np.errstate(invalid="ignore"):
        vals = pats.astype(np.uint16).view(np_dtype).astype(np.float64)
    for p, v, special in zip(pats.tolist(), vals.tolist(), exp_all_ones.tolist(), strict=True):
        d = fmt.decode(p)
        if special:
            assert isinstance(d, float) and (np.isnan(d) if p & ((1 << fmt.mbits) - 1) else np.isinf(d))
            continue
        assert d == Fraction(v), hex(p)  # float64 holds every 16-bit value exactly
        if p == 0x8000:  # -0 decodes to the Fraction 0, which encodes as +0
            assert fmt.encode_exact(d) == 0
            continue
        assert fmt.encode_exact(d) == p, hex(p)


def test_round_trip_fp32_sample() -> None:
    rng = np.random.default_rng(3)
    pats = rng.integers(0, 1 << 32, size=8000, dtype=np.uint64).astype(np.uint32)
    pats = np.concatenate([pats, np.arange(0, 2048, dtype=np.uint32)])  # subnormals
    finite = ((pats >> 23) & 0xFF) != 0xFF
    pats = pats[finite & (pats != 0x80000000)]
    vals = pats.view(np.float32).astype(np.float64)
    for p, v in zip(pats.tolist(), vals.tolist(), strict=True):
        assert FP32.decode(p) == Fraction(v)
        assert FP32.encode_exact(Fraction(v)) == p


# ----------------------------------------------------------------------------- round_from_f64


def _interesting_f64(rng: np.random.Generator, fmt: FloatFormat, n: int) -> np.ndarray:
    """Random values over the whole range, subnormals, overflow, and exact ties / near ties."""
    e = rng.uniform(fmt.emin - fmt.mbits - 3, fmt.emax + 2, size=n)
    x = np.exp2(e) * np.where(rng.random(n) < 0.5, -1.0, 1.0)
    # exact midpoints between representable neighbours, and one float64 ulp either side
    k = rng.integers(0, 1 << (fmt.mbits + 1), size=n)
    ee = rng.integers(fmt.emin - fmt.mbits, fmt.emax - fmt.mbits + 1, size=n)
    mid = np.ldexp(k.astype(np.float64) + 0.5, ee.astype(np.int32))
    near = np.concatenate([mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)])
    edges = np.array(
        [
            0.0,
            -0.0,
            2.0 ** (fmt.emax + 1),
            float(fmt.decode((((1 << fmt.ebits) - 2) << fmt.mbits) | ((1 << fmt.mbits) - 1))),
        ]
    )
    return np.concatenate([x, near, -near, edges, np.array([np.inf, -np.inf])])


def test_round_from_f64_matches_numpy_float16() -> None:
    # numpy's float64 -> float16 cast is a single correct nearest-even rounding
    x = _interesting_f64(np.random.default_rng(1), FP16, 30000)
    got = FP16.round_from_f64(x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16).astype(np.uint32)
    assert np.array_equal(got, want), x[got != want][:5]


def test_round_from_f64_matches_float32_cast() -> None:
    x = _interesting_f64(np.random.default_rng(2), FP32, 30000)
    got = FP32.round_from_f64(x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float32).view(np.uint32)
    assert np.array_equal(got, want), x[got != want][:5]


def test_round_from_f64_matches_ml_dtypes_bf16() -> None:
    # float32-exact inputs: ml_dtypes' float32 -> bfloat16 cast is one nearest-even rounding
    rng = np.random.default_rng(4)
    with np.errstate(over="ignore"):
        x32 = _interesting_f64(rng, BF16, 30000).astype(np.float32)
    pats = rng.integers(0, 1 << 32, size=30000, dtype=np.uint64).astype(np.uint32)
    pats = pats[((pats >> 23) & 0xFF) != 0xFF]
    x32 = np.concatenate([x32, pats.view(np.float32)])
    got = BF16.round_from_f64(x32.astype(np.float64))
    want = x32.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    assert np.array_equal(got, want), x32[got != want][:5]


@pytest.mark.parametrize(
    "fmt,x,bits",
    [
        (FP16, 2049.0, 0x6800),  # tie -> even 2048
        (FP16, 2051.0, 0x6802),  # tie -> even 2052
        (FP16, 65519.0, 0x7BFF),
        (FP16, 65520.0, 0x7C00),  # tie with 2^16 -> inf
        (FP16, -65520.0, 0xFC00),
        (FP16, 2.0**-25, 0x0000),  # tie with 0 -> +0
        (FP16, -(2.0**-25), 0x8000),  # ... keeping the sign
        (FP16, 1 + 2.0**-11 + 2.0**-40, 0x3C01),  # just above a tie: a double rounding through fp32 would give 0x3C00
        (BF16, 1 + 2.0**-8 + 2.0**-40, 0x3F81),  # same for bf16
        (BF16, 257.0, 0x4380),  # tie 256|258 -> 256
        (BF16, 259.0, 0x4382),  # tie 258|260 -> 260
        (FP32, float(2**24 + 1), 0x4B800000),
    ],
)
def test_round_from_f64_hand_worked(fmt: FloatFormat, x: float, bits: int) -> None:
    assert int(fmt.round_from_f64(np.array([x]))[0]) == bits


# ----------------------------------------------------------------------------- the registry: one row per format


def _same(a: float, b: float) -> bool:
    """Equal float64 values, NaN equal to NaN and -0 distinct from +0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _codes(t: ScalarType) -> np.ndarray:
    """Every code of ``t``; for fp32 every exponent with a spread of mantissas and both signs."""
    if t.width <= 16:
        return np.arange(1 << t.width, dtype=np.int64)
    mant = np.array([0, 1, 2, 0x155555, 0x400000, 0x7FFFFE, 0x7FFFFF], dtype=np.int64)
    exps = np.arange(256, dtype=np.int64) << 23
    mags = (exps[:, None] | mant[None, :]).ravel()
    return np.concatenate([mags, mags | (1 << 31)])


def _reference_decoder(t: ScalarType) -> Callable[[int], float]:
    """The independent reference's own decoding of ``t``'s codes (its constants, not the registry's)."""
    if not t.is_float:
        kind = 1 if t.signed else (2 if t.bias else 0)
        return lambda c: float(reference._code_value(np.int64(c), t.width, kind, t.bias))
    if t.name == "e8m0":
        return lambda c: float(reference._decode_e8m0(np.int64(c)))
    if t.name in reference._MINIFLOATS:
        ebits, mbits, bias, special = reference._MINIFLOATS[t.name]
        return lambda c: float(reference._decode_minifloat(np.int64(c), ebits, mbits, bias, special))
    widths = {"fp16": reference._FORMAT_BITS[Target.fp16], "bf16": reference._FORMAT_BITS[Target.bf16]}
    widths["fp32"] = (reference._FP32_EBITS, reference._FP32_MBITS)
    ebits, mbits = widths[t.name]  # a new row with no reference decoding fails here
    return lambda c: float(reference._decode_bits(np.int64(c), ebits, mbits))


@pytest.mark.parametrize("name", list(SCALAR_TYPES))
def test_registry_and_reference_agree_on_every_code(name: str) -> None:
    """The registry (what the solver, prover and runtime use) and the reference (which decodes on its own, on
    purpose) give every code of every format the same value; so do ml_dtypes' dtypes derived from the row."""
    t = SCALAR_TYPES[name]
    ref = _reference_decoder(t)
    codes = _codes(t)
    ours = [float(t.decode(int(c))) for c in codes]
    theirs = [ref(int(c)) for c in codes]
    bad = [hex(int(c)) for c, a, b in zip(codes, ours, theirs, strict=True) if not _same(a, b)]
    assert not bad, f"{name}: registry and reference differ at codes {bad[:8]}"
    if t.is_float:
        dt = numpy_dtype(t)
        with np.errstate(invalid="ignore"):
            ml = codes.astype(np.uint32 if t.width > 16 else np.uint16).astype(_storage(t)).view(dt).astype(np.float64)
        bad = [hex(int(c)) for c, a, b in zip(codes, ours, ml, strict=True) if not _same(a, float(b))]
        assert not bad, f"{name}: registry and {dt} differ at codes {bad[:8]}"


def _storage(t: ScalarType) -> type:
    return np.uint8 if t.width <= 8 else np.uint16 if t.width <= 16 else np.uint32


def test_registry_rows_match_published_facts() -> None:
    """Canonical names (vLLM / ml_dtypes / torch spellings) and the published extremes of each format."""
    canon = {n: t.canonical for n, t in SCALAR_TYPES.items()}
    assert canon["fp16"] == "float16" and canon["bf16"] == "bfloat16" and canon["fp32"] == "float32"
    assert (canon["e4m3"], canon["e5m2"], canon["e2m1"], canon["e8m0"]) == (
        "float8_e4m3fn",
        "float8_e5m2",
        "float4_e2m1fn",
        "float8_e8m0fnu",
    )
    assert (canon["u4b8"], canon["u8b128"], canon["s4"], canon["u3"]) == ("uint4b8", "uint8b128", "int4", "uint3")
    biggest = {
        n: max(float(v) for v in map(t.decode, range(1 << t.width)) if math.isfinite(v)) for n, t in MINIFLOATS.items()
    }
    # OCP MX v1.0 tables 2 and 3: MXFP6 maxima 7.5 (E2M3) and 28 (E3M2)
    assert biggest == {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0, "e2m3": 7.5, "e3m2": 28.0, "e8m0": 2.0**127}
    assert (canon["e2m3"], canon["e3m2"]) == ("float6_e2m3fn", "float6_e3m2fn")
    assert (scalar_type("u4b8").decode(0), scalar_type("s4").decode(8), scalar_type("u2b1").decode(3)) == (-8, -8, 2)
    with pytest.raises(KeyError, match="e3m4"):
        scalar_type("e3m4")
    assert torch_dtype_name(SCALAR_TYPES["e2m1"]) is None and torch_dtype_name(SCALAR_TYPES["e8m0"]) == "float8_e8m0fnu"
