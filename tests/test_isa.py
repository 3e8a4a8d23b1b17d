"""The emulator's semantics (dqgen.ir.isa), checked against independent test-side models.

LOP3 against a per-bit truth-table evaluation, PRMT against hand-worked PTX ISA examples and a
plain-Python byte permute, and the float ops against exact ``Fraction`` arithmetic rounded by a
nearest-even rounding written here (subnormals, overflow to inf, IEEE signed zeros).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dqgen.ir.isa import Opcode, emu_lop3, emu_prmt, emu_shr, emulate, lut_of, prmt_selector

RNG_SEED = 12345

# (ebits, mbits) of the three formats, from IEEE 754 / the bfloat16 definition.
FMT = {"fp16": (5, 10), "bf16": (8, 7), "fp32": (8, 23)}


# ----------------------------------------------------------------------------- LOP3


def lop3_ref(a: int, b: int, c: int, lut: int) -> int:
    out = 0
    for i in range(32):
        idx = (((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1)
        out |= ((lut >> idx) & 1) << i
    return out


def test_lut_of_published() -> None:
    assert lut_of(lambda a, b, c: (a & b) | c) == 0xEA
    assert lut_of(lambda a, b, c: (a & b) ^ c) == 0x6A
    assert lut_of(lambda a, b, c: a) == 0xF0
    assert lut_of(lambda a, b, c: b) == 0xCC
    assert lut_of(lambda a, b, c: c) == 0xAA


@pytest.mark.parametrize("lut", [0x00, 0xFF, 0xEA, 0x6A, 0x3C, 0x96, 0xE8, 0xF8, 0x01, 0x80, 0x5A, 0xCA])
def test_lop3_truth_table(lut: int) -> None:
    rng = np.random.default_rng(RNG_SEED + lut)
    a, b, c = (rng.integers(0, 1 << 32, size=200, dtype=np.uint64).astype(np.uint32) for _ in range(3))
    got = emu_lop3(a, b, c, lut)
    assert got.dtype == np.uint32
    want = [lop3_ref(int(x), int(y), int(z), lut) for x, y, z in zip(a, b, c, strict=True)]
    assert [int(g) for g in got] == want


def test_lop3_random_luts() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for lut in rng.integers(0, 256, size=20):
        a, b, c = (rng.integers(0, 1 << 32, size=50, dtype=np.uint64).astype(np.uint32) for _ in range(3))
        got = emu_lop3(a, b, c, int(lut))
        assert [int(g) for g in got] == [
            lop3_ref(int(x), int(y), int(z), int(lut)) for x, y, z in zip(a, b, c, strict=True)
        ]


# ----------------------------------------------------------------------------- PRMT / SHR


def prmt_ref(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32 default mode: bytes {b, a} numbered 0-7 (a = 0-3); a selector nibble with
    its msb set replicates the sign bit of the selected byte."""
    src = [(a >> (8 * k)) & 0xFF for k in range(4)] + [(b >> (8 * k)) & 0xFF for k in range(4)]
    out = 0
    for k in range(4):
        s = (sel >> (4 * k)) & 0xF
        byte = src[s & 7]
        if s & 8:
            byte = 0xFF if byte & 0x80 else 0x00
        out |= byte << (8 * k)
    return out


def prmt1(a: int, b: int, sel: int) -> int:
    return int(emu_prmt(np.array([a], dtype=np.uint32), np.array([b], dtype=np.uint32), sel)[0])


@pytest.mark.parametrize(
    "a,b,sel,want",
    [
        (0x11223344, 0x55667788, 0x5410, 0x77883344),  # bytes a0 a1 b4 b5
        (0x11223344, 0x55667788, 0x3210, 0x11223344),  # identity on a
        (0x11223344, 0x55667788, 0x7654, 0x55667788),  # b
        (0x11223344, 0x55667788, 0x0123, 0x44332211),  # byte reverse of a
        (0x11223344, 0x55667788, 0x4567, 0x88776655),  # byte reverse of b
        (0x11223344, 0x55667788, 0x0000, 0x44444444),  # broadcast byte 0
        (0x11223344, 0x55667788, 0x7632, 0x55661122),  # upper halves of a and b
        (0x12F07F80, 0x00000000, 0x89AB, 0xFF00FF00),  # sign replicate of bytes 3, 2, 1, 0
        (0x00007F80, 0x00007F80, 0x9180, 0x007FFF80),  # s8 -> s16 sign extension (CUTLASS)
        # nibbles 4 (b4 = 0x01), 0 (a0 = 0x00), C (sign of b4 -> 0x00), F (sign of b7 = 0x80 -> 0xFF)
        (0x00000000, 0x80000001, 0xFC04, 0xFF000001),
    ],
)
def test_prmt_hand_worked(a: int, b: int, sel: int, want: int) -> None:
    assert prmt_ref(a, b, sel) == want
    assert prmt1(a, b, sel) == want


def test_prmt_random_against_reference() -> None:
    rng = np.random.default_rng(RNG_SEED)
    a = rng.integers(0, 1 << 32, size=64, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, size=64, dtype=np.uint64).astype(np.uint32)
    for sel in [int(s) for s in rng.integers(0, 1 << 16, size=40)] + [0x5250, 0x5351, 0x5150, 0x5352, 0x7650, 0x7632]:
        got = emu_prmt(a, b, sel)
        assert [int(g) for g in got] == [prmt_ref(int(x), int(y), sel) for x, y in zip(a, b, strict=True)]


def test_prmt_selector_builds_nibbles() -> None:
    assert prmt_selector([0, 5, 2, 5]) == 0x5250
    assert prmt_selector([0, 1, 4, 5]) == 0x5410
    assert prmt_selector([2, 3, 6, 7]) == 0x7632


def test_shr() -> None:
    a = np.array([0xF00000FF, 0x80000000, 0x12345678], dtype=np.uint32)
    assert [int(x) for x in emu_shr(a, 8)] == [0x00F00000, 0x00800000, 0x00123456]
    assert [int(x) for x in emu_shr(a, 0)] == [int(x) for x in a]
    assert [int(x) for x in emulate(Opcode.SHR, [a], 31)] == [1, 1, 0]


# ----------------------------------------------------------------------------- exact float model


def decode(bits: int, ebits: int, mbits: int) -> tuple[int, Fraction]:
    """(sign, exact magnitude) of a finite pattern."""
    bias = (1 << (ebits - 1)) - 1
    s = (bits >> (ebits + mbits)) & 1
    e = (bits >> mbits) & ((1 << ebits) - 1)
    m = bits & ((1 << mbits) - 1)
    assert e != (1 << ebits) - 1, "test operands are finite"
    if e == 0:
        return s, Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias)
    return s, (1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias)


def signed(s: int, mag: Fraction) -> Fraction:
    return -mag if s else mag


def round_rne(v: Fraction, ebits: int, mbits: int, zero_sign: int) -> int:
    """Bit pattern of v rounded to nearest-even (subnormals, overflow to inf). ``zero_sign`` is
    the sign used when v is exactly zero."""
    width = 1 + ebits + mbits
    if v == 0:
        return zero_sign << (width - 1)
    bias = (1 << (ebits - 1)) - 1
    emin, emax = 1 - bias, bias
    s = 1 if v < 0 else 0
    a = -v if s else v
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    q = Fraction(2) ** (e - mbits)
    n = a / q
    N = n.numerator // n.denominator
    r = n - N
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and N & 1):
        N += 1
    sign = s << (width - 1)
    if N == 0:
        return sign  # underflow keeps the sign of the exact result
    if 1 << (mbits + 1) == N:
        N, e = N >> 1, e + 1
    if e > emax:
        return sign | (((1 << ebits) - 1) << mbits)
    if 1 << mbits > N:
        return sign | N  # subnormal
    return sign | ((e + bias) << mbits) | (N - (1 << mbits))


def ref_op(kind: str, fmt: str, ops: list[int]) -> int:
    eb, mb = FMT[fmt]
    d = [decode(x, eb, mb) for x in ops]
    if kind == "sub":
        (sx, x), (sy, y) = d
        exact = signed(sx, x) - signed(sy, y)
        zs = 1 if (x == 0 and y == 0 and sx == 1 and sy == 0) else 0  # (-0) + (-0) only
        return round_rne(exact, eb, mb, zs)
    if kind == "mul":
        (sx, x), (sy, y) = d
        return round_rne(signed(sx, x) * signed(sy, y), eb, mb, sx ^ sy)
    if kind == "fma":
        (sa, a), (sb, b), (sc, c) = d
        p = signed(sa ^ sb, a * b)
        zs = 1 if (a * b == 0 and c == 0 and (sa ^ sb) == 1 and sc == 1) else 0
        return round_rne(p + signed(sc, c), eb, mb, zs)
    raise ValueError(kind)


def test_round_rne_self_check() -> None:
    # Hand-worked fp16 facts that the test-side rounding must reproduce.
    assert round_rne(Fraction(1024), 5, 10, 0) == 0x6400
    assert round_rne(Fraction(2049), 5, 10, 0) == 0x6800  # tie 2048|2050 -> even 2048
    assert round_rne(Fraction(2051), 5, 10, 0) == 0x6802  # tie 2050|2052 -> even 2052
    assert round_rne(Fraction(65504), 5, 10, 0) == 0x7BFF
    assert round_rne(Fraction(65519), 5, 10, 0) == 0x7BFF
    assert round_rne(Fraction(65520), 5, 10, 0) == 0x7C00  # tie to the (even) next binade -> inf
    assert round_rne(Fraction(1, 1 << 24), 5, 10, 0) == 0x0001  # smallest subnormal
    assert round_rne(Fraction(1, 1 << 25), 5, 10, 0) == 0x0000  # tie with 0 -> even 0
    assert round_rne(-Fraction(3, 1 << 26), 5, 10, 0) == 0x8001
    assert round_rne(-Fraction(1, 1 << 26), 5, 10, 0) == 0x8000
    assert round_rne(Fraction(1023, 1 << 24), 5, 10, 0) == 0x03FF
    assert round_rne(Fraction(2047, 1 << 25), 5, 10, 0) == 0x0400  # rounds up into the normal range
    assert round_rne(Fraction(-136), 8, 7, 0) == 0xC308  # bf16 -136 (FT constant)
    assert round_rne(Fraction((1 << 23) + 128), 8, 23, 0) == 0x4B000080


# ----------------------------------------------------------------------------- operand generation


def _pattern(rng: np.random.Generator, n: int, ebits: int, mbits: int, exps: np.ndarray | None = None) -> np.ndarray:
    emax_field = (1 << ebits) - 2
    if exps is None:
        exps = rng.integers(0, emax_field + 1, size=n)
    exps = np.clip(exps, 0, emax_field).astype(np.int64)
    s = rng.integers(0, 2, size=n).astype(np.int64)
    m = rng.integers(0, 1 << mbits, size=n).astype(np.int64)
    # sparse mantissas make exact ties and exact cancellations frequent
    sparse = rng.random(n) < 0.3
    m = np.where(sparse, m & ~((1 << (mbits - 3)) - 1), m)  # keep only the top 3 mantissa bits
    return (s << (ebits + mbits)) | (exps << mbits) | m


def operands(kind: str, fmt: str, n: int, seed: int) -> list[np.ndarray]:
    """n operand tuples mixing: uniform, close exponents (ties, cancellation), subnormals,
    extreme exponents, signed zeros and exact-zero results."""
    eb, mb = FMT[fmt]
    bias = (1 << (eb - 1)) - 1
    rng = np.random.default_rng(seed)
    arity = 3 if kind == "fma" else 2
    k = n // 6
    cols: list[list[np.ndarray]] = [[] for _ in range(arity)]

    def add(*xs: np.ndarray) -> None:
        for c, x in zip(cols, xs, strict=True):  # one column per operand
            c.append(x.astype(np.int64))

    # 1. uniform finite patterns
    add(*(_pattern(rng, k, eb, mb) for _ in range(arity)))
    # 2. close exponents: ties and partial cancellation
    base = rng.integers(0, (1 << eb) - 1, size=k)
    d = mb + 3
    if kind == "fma":
        ea = rng.integers(bias - 8, bias + 8, size=k)
        eb_ = base - ea + bias
        add(
            _pattern(rng, k, eb, mb, ea),
            _pattern(rng, k, eb, mb, eb_),
            _pattern(rng, k, eb, mb, base + rng.integers(-d, d + 1, size=k)),
        )
    else:
        add(_pattern(rng, k, eb, mb, base), _pattern(rng, k, eb, mb, base + rng.integers(-d, d + 1, size=k)))
    # 3. subnormals and the smallest normals
    add(*(_pattern(rng, k, eb, mb, rng.integers(0, 3, size=k)) for _ in range(arity)))

    # 4. extreme exponents (overflow to inf, underflow to subnormal / zero)
    def ext() -> np.ndarray:
        return np.where(
            rng.random(k) < 0.5, rng.integers(0, 4, size=k), rng.integers((1 << eb) - 5, (1 << eb) - 1, size=k)
        )

    add(*(_pattern(rng, k, eb, mb, ext()) for _ in range(arity)))

    # 5. signed zeros mixed with anything
    def zero() -> np.ndarray:
        return (rng.integers(0, 2, size=k) << (eb + mb)).astype(np.int64)

    mix = [np.where(rng.random(k) < 0.6, zero(), _pattern(rng, k, eb, mb)) for _ in range(arity)]
    add(*mix)
    # 6. exact-zero results: x - x, or a*1 + (-a)
    x = _pattern(rng, k, eb, mb)
    signbit = 1 << (eb + mb)
    if kind == "sub":
        add(x, x)
    elif kind == "mul":
        add(x, zero())
    else:
        one = (bias << mb) | (rng.integers(0, 2, size=k) << (eb + mb))
        prod_sign = ((x >> (eb + mb)) ^ (one >> (eb + mb))) & 1
        c = (x & (signbit - 1)) | ((prod_sign ^ 1) << (eb + mb))
        add(x, one, c)
    return [np.concatenate(c) for c in cols]


# ----------------------------------------------------------------------------- float ops


PAIRED = [
    (Opcode.SUB_F16X2, "sub", "fp16"),
    (Opcode.FMA_F16X2, "fma", "fp16"),
    (Opcode.MUL_F16X2, "mul", "fp16"),
    (Opcode.SUB_BF16X2, "sub", "bf16"),
    (Opcode.FMA_BF16X2, "fma", "bf16"),
    (Opcode.MUL_BF16X2, "mul", "bf16"),
]


@pytest.mark.parametrize("opcode,kind,fmt", PAIRED, ids=[o.name for o, _, _ in PAIRED])
def test_paired_float_ops_exact(opcode: Opcode, kind: str, fmt: str) -> None:
    n = 6000
    ops = operands(kind, fmt, n, seed=sum(map(ord, kind + fmt)))
    n = ops[0].size
    half = n // 2
    # lane 0 (low half) and lane 1 (high half) get independent operands
    regs = [np.asarray((x[:half] & 0xFFFF) | ((x[half : 2 * half] & 0xFFFF) << 16), dtype=np.uint32) for x in ops]
    got = emulate(opcode, regs, None)
    assert got.dtype == np.uint32
    bad = []
    for i in range(half):
        for lane, j in ((0, i), (1, half + i)):
            args = [int(x[j]) for x in ops]
            want = ref_op(kind, fmt, args)
            g = (int(got[i]) >> (16 * lane)) & 0xFFFF
            if g != want:
                bad.append(f"{opcode.ptx}{tuple(hex(a) for a in args)}: got 0x{g:04X}, want 0x{want:04X}")
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def test_f32_sub_exact() -> None:
    ops = operands("sub", "fp32", 12000, seed=7)
    a, b = (x.astype(np.uint32) for x in ops)
    got = emulate(Opcode.SUB_F32, [a, b], None)
    bad = []
    for x, y, g in zip(a, b, got, strict=True):
        want = ref_op("sub", "fp32", [int(x), int(y)])
        if int(g) != want:
            bad.append(f"sub.f32(0x{int(x):08X}, 0x{int(y):08X}): got 0x{int(g):08X}, want 0x{want:08X}")
    assert not bad, f"{len(bad)} mismatches, e.g. {bad[:5]}"


def _r(*halves: int) -> np.ndarray:
    return np.array([(halves[0] & 0xFFFF) | (halves[1] << 16)], dtype=np.uint32)


def _halves(r: np.ndarray) -> tuple[int, int]:
    v = int(r[0])
    return v & 0xFFFF, v >> 16


@pytest.mark.parametrize(
    "fmt,sub,fma,mul",
    [
        ("fp16", Opcode.SUB_F16X2, Opcode.FMA_F16X2, Opcode.MUL_F16X2),
        ("bf16", Opcode.SUB_BF16X2, Opcode.FMA_BF16X2, Opcode.MUL_BF16X2),
    ],
)
def test_signed_zero_rules(fmt: str, sub: Opcode, fma: Opcode, mul: Opcode) -> None:
    one = 0x3C00 if fmt == "fp16" else 0x3F80
    x = 0x4248 if fmt == "fp16" else 0x4049  # 3.140625 / 3.140625
    nx = x | 0x8000
    # x - x = +0 ; (-x) - (-x) = +0 ; (-0) - (+0) = -0 ; (+0) - (-0) = +0 ; (-0) - (-0) = +0
    assert _halves(emulate(sub, [_r(x, nx), _r(x, nx)], None)) == (0x0000, 0x0000)
    assert _halves(emulate(sub, [_r(0x8000, 0x0000), _r(0x0000, 0x8000)], None)) == (0x8000, 0x0000)
    assert _halves(emulate(sub, [_r(0x8000, 0x8000), _r(0x8000, 0x0000)], None)) == (0x0000, 0x8000)
    # fma: x*1 + (-x) = +0 ; (-x)*1 + x = +0 ; (+0)*(-1) + (-0) = -0 ; (+0)*(-1) + (+0) = +0
    assert _halves(emulate(fma, [_r(x, nx), _r(one, one), _r(nx, x)], None)) == (0x0000, 0x0000)
    assert _halves(emulate(fma, [_r(0x0000, 0x0000), _r(one | 0x8000, one | 0x8000), _r(0x8000, 0x0000)], None)) == (
        0x8000,
        0x0000,
    )
    # the scale stage's idiom: fma(a, b, -0) keeps the sign of a zero product
    assert _halves(emulate(fma, [_r(0x0000, 0x8000), _r(x, x), _r(0x8000, 0x8000)], None)) == (0x0000, 0x8000)
    # mul: sign is the xor of the signs, also for zeros
    assert _halves(emulate(mul, [_r(0x0000, 0x8000), _r(nx, nx)], None)) == (0x8000, 0x0000)


def test_overflow_to_inf_and_nan() -> None:
    # fp16: 65504 + 16 = 65520 is the tie with 65536 -> inf; 65504 - (-8) rounds back to 65504
    r = emulate(Opcode.SUB_F16X2, [_r(0x7BFF, 0x7BFF), _r(0xCC00, 0xC800)], None)  # -16, -8
    assert _halves(r) == (0x7C00, 0x7BFF)
    # inf - inf is a NaN
    r = emulate(Opcode.SUB_F16X2, [_r(0x7C00, 0xFC00), _r(0x7C00, 0xFC00)], None)
    lo, hi = _halves(r)
    assert (lo & 0x7C00) == 0x7C00 and lo & 0x3FF and (hi & 0x7C00) == 0x7C00 and hi & 0x3FF
    # f32: (2^128 - 2^104) - (-2^103) is the tie between FLT_MAX and 2^128 -> even -> inf;
    # (2^128 - 2^104) - (-2^102) rounds back to FLT_MAX
    a = np.array([0x7F7FFFFF, 0x7F7FFFFF], dtype=np.uint32)
    r = emulate(Opcode.SUB_F32, [a, np.array([0xF3000000, 0xF2800000], dtype=np.uint32)], None)
    assert [int(v) for v in r] == [0x7F800000, 0x7F7FFFFF]


# ----------------------------------------------------------------------------- the opcode table

U = np.uint32

#: One hand-worked case per opcode (values from the PTX ISA and the IEEE / OCP encodings, worked out by hand):
#: (sources, immediate, expected destination). A new row in Opcode needs a case here, or
#: test_every_opcode_row_has_an_emulation_case fails.
EMULATION_CASES: dict[Opcode, list[tuple[list[int], int | None, int]]] = {
    Opcode.SHR: [([0xF00000FF], 8, 0x00F00000), ([0x80000000], 31, 1)],
    Opcode.SHL: [([0x0000F00F], 4, 0x000F00F0), ([0x80000001], 1, 0x00000002)],
    # (low word, high word) >> n; the amount clamps at 32 (the high word)
    Opcode.SHF_R: [([0x89ABCDEF, 0x01234567], 8, 0x6789ABCD), ([0x89ABCDEF, 0x01234567], 40, 0x01234567)],
    Opcode.ADD_U32: [([0xFFFFFFFF, 2], None, 1), ([0x10, 0x20], None, 0x30)],
    Opcode.SET_EQ: [([5, 5], None, 0xFFFFFFFF), ([5, 6], None, 0)],
    Opcode.PRMT: [([0x11223344, 0x55667788], 0x5410, 0x77883344)],
    Opcode.PRMT_R: [([0x11223344, 0x55667788, 0x5410], None, 0x77883344), ([0x11223344, 0, 0x0123], None, 0x44332211)],
    Opcode.LOP3: [([0xF0F0F0F0, 0xFF00FF00, 0x0000000F], 0xEA, 0xF000F00F)],  # (a & b) | c
    # fp16 pairs: 2 - 1 = 1 (high), 1 - 0.5 = 0.5 (low); 2 * 3 + 1 = 7; 1.5 * 2 = 3
    Opcode.SUB_F16X2: [([0x40003C00, 0x3C003800], None, 0x3C003800)],
    Opcode.FMA_F16X2: [([0x40004000, 0x42004200, 0x3C003C00], None, 0x47004700)],
    Opcode.MUL_F16X2: [([0x3E003E00, 0x40004000], None, 0x42004200)],
    Opcode.SUB_BF16X2: [([0x40003F80, 0x3F803F00], None, 0x3F803F00)],
    Opcode.FMA_BF16X2: [([0x40004000, 0x40404040, 0x3F803F80], None, 0x40E040E0)],
    Opcode.MUL_BF16X2: [([0x3FC03FC0, 0x40004000], None, 0x40404040)],
    Opcode.SUB_F32: [([0x3F800000, 0x3F000000], None, 0x3F000000)],
    Opcode.MUL_F32: [([0x3FC00000, 0x40000000], None, 0x40400000)],
    # e4m3 0x38 = 1.0, 0x40 = 2.0 (bias 7); the immediate picks the register's half
    Opcode.CVT_F16X2_E4M3X2: [([0x00004038], 0, 0x40003C00), ([0x40380000], 1, 0x40003C00)],
    # e5m2 is the high byte of fp16; byte 0 of the half goes to the low result
    Opcode.CVT_F16X2_E5M2X2: [([0xC4003C40], 0, 0x3C004000), ([0x403CC400], 1, 0x40003C00)],
    Opcode.CVT_F32_F16: [([0x3C00C000], 1, 0x3F800000), ([0x3C00C000], 0, 0xC0000000)],
    Opcode.CVT_F32_BF16: [([0x3FC00000], 1, 0x3FC00000), ([0x00003F80], 0, 0x3F800000)],
    # (low, high) fp32 -> one pair; 1 + 2^-11 ties to even 1.0, 1 + 3 * 2^-11 ties to even 1 + 2^-9
    Opcode.CVT_F16X2_F32: [([0x3F800000, 0x40000000], None, 0x40003C00), ([0x3F801000, 0x3F803000], None, 0x3C023C00)],
    Opcode.CVT_BF16X2_F32: [([0x3F808000, 0x3F818000], None, 0x3F823F80)],
}


def test_every_opcode_row_has_an_emulation_case() -> None:
    assert set(EMULATION_CASES) == set(Opcode), f"rows without a case: {set(Opcode) - set(EMULATION_CASES)}"


@pytest.mark.parametrize("opcode", list(EMULATION_CASES), ids=[o.name for o in EMULATION_CASES])
def test_emulation_case(opcode: Opcode) -> None:
    for sources, imm, want in EMULATION_CASES[opcode]:
        assert len(sources) == opcode.arity and opcode.has_imm == (imm is not None)
        got = emulate(opcode, [np.array([s], dtype=U) for s in sources], imm)
        assert got.dtype == np.uint32
        assert int(got[0]) == want, f"{opcode.name}{[hex(s) for s in sources]} imm {imm}: got 0x{int(got[0]):08X}"


def test_asm_and_explain_and_render_read_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Change a row and the PTX text, explain's line and the inline-asm constraints all follow it."""
    import dataclasses

    from dqgen.emit.render import _render_op
    from dqgen.ir.plan import Op
    from dqgen.tools.explain import _op_line

    op = Op(Opcode.CVT_F16X2_F32, "p", ("lo", "hi"), "test")
    assert Opcode.CVT_F16X2_F32.asm(None) == "cvt.rn.f16x2.f32 %0, %2, %1;"
    assert _op_line(op) == "cvt.rn.f16x2.f32 p, hi, lo;"
    assert '"f"(__uint_as_float(lo))' in _render_op(op).stmt

    real = Opcode.row.fget
    rows = {
        Opcode.CVT_F16X2_F32: dataclasses.replace(
            real(Opcode.CVT_F16X2_F32), ptx="x.y", swap_sources=False, f32_src=False
        )
    }
    monkeypatch.setattr(Opcode, "row", property(lambda self: rows.get(self) or real(self)))
    assert Opcode.CVT_F16X2_F32.asm(None) == "x.y %0, %1, %2;"
    assert _op_line(op) == "x.y p, lo, hi;"
    stmt = _render_op(op).stmt
    assert '"r"(lo)' in stmt and "__uint_as_float" not in stmt and "x.y %0, %1, %2;" in stmt


def test_half_source_text_in_asm_and_explain() -> None:
    from dqgen.ir.plan import Op
    from dqgen.tools.explain import _op_line

    assert Opcode.CVT_F32_F16.asm(1).endswith("cvt.f32.f16 %0, hi_; }")
    assert _op_line(Op(Opcode.CVT_F32_F16, "f", ("w",), "test", imm=1)) == "cvt.f32.f16 f, w.hi;"
    assert _op_line(Op(Opcode.SHR, "t", ("w",), "test", imm=4)) == "shr.u32 t, w, 4;"
    assert _op_line(Op(Opcode.LOP3, "t", ("a", "b", "c"), "test", imm=0xEA)) == "lop3.b32 t, a, b, c, 0xEA;"
