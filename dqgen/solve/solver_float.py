"""Strategies for non-integer codes: minifloats (fp8 e4m3/e5m2, fp4 e2m1) and codebooks (nf4, user
tables), and the block-scale stage of MXFP4 / NVFP4.

- ``cvt``: the hardware conversion ``cvt.rn.f16x2.{e4m3,e5m2}x2`` (sm_89+), one op per pair; to
  bf16 through fp32 (two exact widenings and one exact narrowing).
- ``bit_place``: the code's sign goes to the target's sign bit and its exponent and mantissa bits
  right below the target's exponent field's top, shifted so that mantissa tops align. The target
  then reads 2^(bias_target - bias_source) times the code's value, normal or subnormal alike, and
  one exact multiply by that power of two re-biases it. Codes the source reserves for NaN / inf
  would read as large finite numbers; an integer add that carries out of the magnitude field
  exactly for those codes marks them, and the mark is spread over the target's exponent field.
- ``lut``: a PRMT table lookup. Each 16-bit table value is two bytes; a register selector indexes
  8 bytes (two registers) at a time with the code's low 3 bits, and code bit 3 picks between the
  tables of codes 0-7 and 8-15 (by a byte mask, or by a sign flip when the table is symmetric).

Each op says why; every constant is computed from the formats and the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from ..core.formats import BF16, FP16, FP32, MINIFLOATS, FloatFormat, NanRepr, ScalarType, exact_bits
from ..core.spec import CONTAINER_BITS, SourceKind, Spec
from ..ir.isa import Const, Opcode, Operand, lut_of, prmt_selector
from ..ir.magic import half_pair, pair_const
from ..ir.plan import Plan, Stage
from ..layout.layout import Layout
from .common import Builder, plan_inputs, scale_stage, target_format, word_names

LUT_KEEP_SIGN = lut_of(lambda a, b, c: (a & c) | b)
LUT_OR_MASKED = lut_of(lambda a, b, c: a | (b & c))
LUT_AND = lut_of(lambda a, b, c: a & b)
LUT_XOR_AND = lut_of(lambda a, b, c: (a ^ b) & c)
LUT_MUX = lut_of(lambda a, b, c: (a & ~c) | (b & c))
LUT_XOR_MASKED = lut_of(lambda a, b, c: a ^ (b & c))
WHY = {
    LUT_KEEP_SIGN: "immLut = (0xF0 & 0xAA) | 0xCC: d = (a & c) | b",
    LUT_OR_MASKED: "immLut = 0xF0 | (0xCC & 0xAA): d = a | (b & c)",
    LUT_AND: "immLut = 0xF0 & 0xCC: d = a & b",
    LUT_XOR_AND: "immLut = (0xF0 ^ 0xCC) & 0xAA: d = (a ^ b) & c",
    LUT_MUX: "immLut = (0xF0 & ~0xAA) | (0xCC & 0xAA): d = c ? b : a, bit by bit",
    LUT_XOR_MASKED: "immLut = 0xF0 ^ (0xCC & 0xAA): d = a ^ (b & c)",
}
ZERO = Const(0, "zero bytes")


def minifloat(spec: Spec) -> ScalarType:
    mf = spec.source.scalar_type
    assert mf is not None and mf.is_float, "kind 'float' has a minifloat format"
    return mf


def _pow2_pair(fmt: FloatFormat, k: int, why: str) -> Const:
    return pair_const(fmt, Fraction(2) ** k, Fraction(2) ** k, why)


# ----------------------------------------------------------------------------- bit placement


def _top_aligned(
    B: Builder, src: str, shifted: dict[int, str], P_lo: int, P_hi: int, b: int, name: str, zero_low: bool
) -> str:
    """A register whose low half has the field at ``P_lo`` in its top ``b`` bits (sign at bit 15) and
    whose high half has the field at ``P_hi`` at bits 31 down (PRMT from ``src`` or ``src << (8 - b)``)."""
    if P_lo == 16 - b and P_hi == 32 - b and not zero_low:
        return src

    def byte_of(P: int) -> tuple[str, int]:
        L = (8 - b) - P % 8  # left shift that puts the field at the top of its byte
        if L and L not in shifted:
            shifted[L] = B.emit(
                Opcode.SHL,
                f"{src}_l{L}",
                (src,),
                f"move every {b}-bit field to the top of its byte",
                "convert",
                L,
                f"shift by {L}",
            )
        return (shifted[L] if L else src), (P + L) // 8

    (ra, ka), (rb, kb) = byte_of(P_lo), byte_of(P_hi)
    bb: Operand  # the second PRMT source: a register, or the zero constant
    if zero_low:
        assert ra == rb
        picks, a, bb = [4, ka, 4, kb], ra, ZERO
    elif ra == rb:
        picks, a, bb = [ka, ka, kb, kb], ra, ra
    else:
        picks, a, bb = [ka, ka, 4 + kb, 4 + kb], ra, rb
    why = f"byte moves {picks} (0-3 = {a}, 4-7 = {'zero' if bb is ZERO else bb})"
    return B.emit(
        Opcode.PRMT,
        name,
        (a, bb),
        "each code's byte to the top of its half: code sign on the half's sign bit",
        "convert",
        prmt_selector(picks),
        why,
    )


def place_pair(B: Builder, mf: ScalarType, carrier: FloatFormat, r: str, i: int, stage: Stage = "convert") -> str:
    """From a top-aligned pair register to the exact values in ``carrier`` (bit placement + re-bias)."""
    b = mf.width
    shift = carrier.ebits - mf.ebits
    k = carrier.bias - mf.bias
    sign = Const(half_pair(0x8000, 0x8000), "the sign bit of each half")
    mag = ((1 << (b - 1)) - 1) << (16 - b)
    if shift == 0 and k == 0 and mf.nan is NanRepr.ieee:
        # the code is the top of the carrier's bit pattern (e5m2 = the high byte of fp16)
        return B.emit(
            Opcode.LOP3,
            f"v{i}",
            (
                r,
                Const(
                    half_pair(0xFFFF << (16 - b) & 0xFFFF, 0xFFFF << (16 - b) & 0xFFFF),
                    f"the {b}-bit code at the top of each half, lower bits cleared",
                ),
                ZERO,
            ),
            f"{mf.name} is the top {b} bits of {carrier.name}: same exponent width and bias",
            stage,
            LUT_AND,
            WHY[LUT_AND],
        )
    magc = Const(half_pair(mag, mag), f"the code's {mf.ebits} exponent and {mf.mbits} mantissa bits, under the sign")
    x = B.emit(Opcode.LOP3, f"m{i}", (r, magc, ZERO), "the magnitude bits of each code", stage, LUT_AND, WHY[LUT_AND])
    expmask_bits = ((1 << shift) - 1) << (15 - shift)
    spread = None
    if mf.nan is not NanRepr.none:
        fn = mf.nan is NanRepr.max
        ulp = 1 << (16 - b) if fn else 1 << (16 - b + mf.mbits)
        what = "all-ones magnitude (NaN)" if fn else "all-ones exponent (inf / NaN)"
        a = B.emit(
            Opcode.ADD_U32,
            f"c{i}",
            (x, Const(half_pair(ulp, ulp), f"one unit of the {'last' if fn else 'exponent'} bit")),
            f"carries into bit 15 of a half exactly for the {what} codes",
            stage,
        )
        if shift == 1:
            x = B.emit(
                Opcode.LOP3,
                f"n{i}",
                (x, a, sign),
                f"add the carry above the magnitude: after the shift it fills the {carrier.name} exponent's top bit",
                stage,
                LUT_OR_MASKED,
                WHY[LUT_OR_MASKED],
            )
        else:
            spread = B.emit(
                Opcode.PRMT,
                f"f{i}",
                (a, ZERO),
                "0xFF in the high byte of a half exactly where the carry (bit 15) is set",
                stage,
                prmt_selector([4, 9, 4, 11]),
                "byte moves [4, 9, 4, 11]: bytes 1 and 3 replicate their sign bit; 0 and 2 are zero",
            )
    t = (
        B.emit(
            Opcode.SHR,
            f"t{i}",
            (x,),
            f"exponent and mantissa to their {carrier.name} places: mantissa tops aligned",
            stage,
            shift,
            f"shift by {carrier.ebits} - {mf.ebits} = {shift}",
        )
        if shift
        else x
    )
    v = B.emit(
        Opcode.LOP3, f"p{i}", (r, t, sign), "the code's sign back on top", stage, LUT_KEEP_SIGN, WHY[LUT_KEEP_SIGN]
    )
    if spread is not None:
        em = Const(
            half_pair(expmask_bits, expmask_bits), f"the {shift} {carrier.name} exponent bits above the placed exponent"
        )
        v = B.emit(
            Opcode.LOP3,
            f"q{i}",
            (v, spread, em),
            f"NaN / inf codes: all {carrier.name} exponent bits set (the mantissa keeps inf vs NaN)",
            stage,
            LUT_OR_MASKED,
            WHY[LUT_OR_MASKED],
        )
    if k == 0:
        return v
    rebias = _pow2_pair(
        carrier,
        k,
        f"2^{k} = 2^({carrier.bias} - {mf.bias}): the {carrier.name} and {mf.name} exponent biases differ by {k}",
    )
    return B.mul(
        f"d{i}",
        v,
        rebias,
        f"exact re-bias: the placed bits read 2^-{k} times the code's value (normal and subnormal alike)",
        stage,
    )


def _sources(spec: Spec, pair: int) -> tuple[int, int]:
    return Layout.of(spec).field_pos(2 * pair), Layout.of(spec).field_pos(2 * pair + 1)


def _window(B: Builder, words: list[str], start: int, made: dict[int, str]) -> str:
    """A register holding block bits [start, start + 32) (below bit 0 and above the block: zeros)."""
    if start in made:
        return made[start]
    k, sh = divmod(start, CONTAINER_BITS)
    if start < 0:
        reg = B.emit(
            Opcode.SHL,
            f"v{start + CONTAINER_BITS}m",
            (words[0],),
            f"block bits {start}..{start + 31}: word 0 moved up, zeros below the block",
            "convert",
            -start,
            f"shift by {-start}",
        )
    elif sh == 0:
        reg = words[k]
    elif k + 1 < len(words):
        reg = B.emit(
            Opcode.SHF_R,
            f"v{start}",
            (words[k], words[k + 1]),
            f"block bits {start}..{start + 31}, across words {k} and {k + 1}",
            "convert",
            sh,
            f"funnel shift of ({words[k + 1]}:{words[k]}) by {sh}",
        )
    else:
        reg = B.emit(
            Opcode.SHR,
            f"v{start}",
            (words[k],),
            f"block bits {start}.. of the last word",
            "convert",
            sh,
            f"shift by {sh}",
        )
    made[start] = reg
    return reg


def _top_byte(B: Builder, words: list[str], byte: int, made: dict[int, str]) -> tuple[str, int]:
    """A register and byte index holding block bits [byte, byte + 8): a window made already (or a word) when one
    holds them byte-aligned, else a new window starting at ``byte``. A window's 4 bytes serve every code whose
    top byte it holds: 6-bit codes 4 apart (24 bits) share one, so a 3-word block needs 6 windows, not 16."""
    free = {CONTAINER_BITS * k: w for k, w in enumerate(words)}
    for start in (byte, byte - 8, byte - 16, byte - 24):
        if start in made or start in free:
            return _window(B, words, start, made), (byte - start) // 8
    return _window(B, words, byte, made), 0


def _top_aligned_multiword(B: Builder, spec: Spec, words: list[str], made: dict[int, str], i: int) -> str:
    """Pair ``i`` of a multi-word block (codes straddle words): its low code at the top of the low half
    and its high code at the top of the high half, gathered by one PRMT of the byte whose top bits are the code
    (the byte below it is don't-care: the magnitude mask clears it)."""
    b = minifloat(spec).width
    P_lo, P_hi = _sources(spec, i)
    (ra, ka), (rb, kb) = _top_byte(B, words, P_lo + b - 8, made), _top_byte(B, words, P_hi + b - 8, made)
    if ra == rb:
        picks, second = [ka, ka, kb, kb], ra
    else:
        picks, second = [ka, ka, 4 + kb, 4 + kb], rb
    return B.emit(
        Opcode.PRMT,
        f"r{i}",
        (ra, second),
        "each code of the pair at the top of its half (code sign on the half's sign bit), lower bits don't care",
        "convert",
        prmt_selector(picks),
        f"byte moves {picks} (0-3 = {ra}, 4-7 = {second}): each code's top byte into the high byte of its half",
    )


def place_all(B: Builder, spec: Spec, carrier: FloatFormat, src: str = "w") -> list[str]:
    mf = minifloat(spec)
    if spec.words > 1:
        words, made = word_names(spec), dict[int, str]()
        return [
            place_pair(B, mf, carrier, _top_aligned_multiword(B, spec, words, made, i), i)
            for i in range(spec.per_word // 2)
        ]
    shifted: dict[int, str] = {}
    zero_low = carrier.ebits == mf.ebits and carrier.bias == mf.bias and mf.width == 8
    out = []
    for i in range(spec.per_word // 2):
        P_lo, P_hi = _sources(spec, i)
        r = _top_aligned(B, src, shifted, P_lo, P_hi, mf.width, f"r{i}", zero_low)
        if zero_low:
            out.append(r)  # the PRMT already zeroed the low bytes: the pattern is the carrier's
        else:
            out.append(place_pair(B, mf, carrier, r, i))
    return out


# ----------------------------------------------------------------------------- hardware cvt


def cvt_all(B: Builder, spec: Spec, carrier: FloatFormat, src: str = "w") -> list[str]:
    mf = minifloat(spec)
    op = Opcode.CVT_F16X2_E4M3X2 if mf.name == "e4m3" else Opcode.CVT_F16X2_E5M2X2
    out = []
    for i in range(spec.per_word // 2):
        P_lo, P_hi = _sources(spec, i)
        if P_hi == P_lo + 8 and P_lo % 16 == 0:
            reg, half = src, P_lo // 16
        else:
            picks = [P_lo // 8, P_hi // 8, P_lo // 8, P_hi // 8]
            reg, half = (
                B.emit(
                    Opcode.PRMT,
                    f"b{i}",
                    (src, src),
                    "the pair's two bytes side by side, low element first",
                    "convert",
                    prmt_selector(picks),
                    f"byte moves {picks}",
                ),
                0,
            )
        h = B.emit(
            op,
            f"h{i}",
            (reg,),
            f"hardware {mf.name} -> fp16 conversion of two codes (exact: fp16 holds every {mf.name} value)",
            "convert",
            half,
            f"the {'high' if half else 'low'} 16 bits",
        )
        out.append(h if carrier is FP16 else _f16_to_bf16(B, h, i))
    return out


def _f16_to_bf16(B: Builder, h: str, i: int) -> str:
    lo = B.emit(Opcode.CVT_F32_F16, f"hl{i}", (h,), "low fp16 -> fp32, exact", "convert", 0, "the low half")
    hi = B.emit(Opcode.CVT_F32_F16, f"hh{i}", (h,), "high fp16 -> fp32, exact", "convert", 1, "the high half")
    return B.emit(
        Opcode.CVT_BF16X2_F32,
        f"bf{i}",
        (lo, hi),
        "fp32 -> bf16x2: exact, every fp16 value of a code fits bf16",
        "convert",
    )


# ----------------------------------------------------------------------------- PRMT table lookup


def table_bits(values: Sequence[Fraction | float], fmt: FloatFormat) -> list[int]:
    """16-bit patterns of the table entries in ``fmt``, each rounded once to nearest-even."""
    import numpy as np

    out = []
    for v in values:
        if isinstance(v, float) and (
            v != v or v in (float("inf"), float("-inf")) or (v == 0 and str(v).startswith("-"))
        ):
            out.append(exact_bits(fmt, v))
        else:
            out.append(int(fmt.round_from_f64(np.array([float(v)]))[0]))
    return out


def lut_all(B: Builder, spec: Spec, entries: list[int], carrier: FloatFormat, what: str, src: str = "w") -> list[str]:
    """Four-element PRMT lookups of 16-bit ``entries`` (16 of them, code = index)."""
    lo_bytes = [e & 0xFF for e in entries]
    hi_bytes = [e >> 8 for e in entries]
    symmetric = all(lo_bytes[c + 8] == lo_bytes[c] and hi_bytes[c + 8] == hi_bytes[c] ^ 0x80 for c in range(8))
    no_lo = all(x == 0 for x in lo_bytes)
    n = spec.per_word

    def table(bs: list[int], which: str) -> tuple[Const, Const]:
        return (
            Const(sum(x << (8 * k) for k, x in enumerate(bs[:4])), f"{which} of {what} entries {{0..3}}"),
            Const(sum(x << (8 * k) for k, x in enumerate(bs[4:8])), f"{which} of {what} entries {{4..7}}"),
        )

    sel = B.emit(
        Opcode.LOP3,
        "sel",
        (src, Const(0x77777777, "the low 3 bits of every 4-bit code"), ZERO),
        "PRMT selectors: a code's low 3 bits index 8 table bytes; "
        "bit 3 would mean 'replicate the sign', so it is cleared",
        "convert",
        LUT_AND,
        WHY[LUT_AND],
    )
    h3 = B.emit(
        Opcode.SHR, "top3", (src,), "every code's bit 3 down to bit 0 of its nibble", "convert", 3, "shift by 3"
    )
    top = B.emit(
        Opcode.LOP3,
        "top",
        (h3, Const(0x11111111, "bit 0 of every nibble"), ZERO),
        "per code: 1 if it indexes entries 8..15",
        "convert",
        LUT_AND,
        WHY[LUT_AND],
    )
    mark = 0x80 if symmetric else 0xFF
    mask_table = Const(
        mark << 8, f"byte 0 = 0x00, byte 1 = 0x{mark:02X}: the PRMT turns each 0/1 nibble into a byte mask"
    )
    quads: dict[int, tuple[str, str | None]] = {}
    for q in range(n // 4):
        s = (
            sel
            if q == 0
            else B.emit(
                Opcode.SHR,
                f"sel{q}",
                (sel,),
                f"selectors of codes {4 * q}..{4 * q + 3} into the low 16 bits (PRMT reads only those)",
                "convert",
                16 * q,
                f"shift by {16 * q}",
            )
        )
        t = (
            top
            if q == 0
            else B.emit(
                Opcode.SHR,
                f"top{q}",
                (top,),
                f"bit 3 of codes {4 * q}..{4 * q + 3} into the low 16 bits",
                "convert",
                16 * q,
                f"shift by {16 * q}",
            )
        )
        m = B.emit(
            Opcode.PRMT_R,
            f"msk{q}",
            (mask_table, ZERO, t),
            f"per code: 0x{mark:02X} if its code is 8..15, else 0",
            "convert",
        )
        regs: list[str | None] = []  # None: the low bytes are all zero and need no lookup
        for which, bs in (("high bytes", hi_bytes), ("low bytes", lo_bytes)):
            if which == "low bytes" and no_lo:
                regs.append(None)
                continue
            ta = table(bs, which)
            a = B.emit(
                Opcode.PRMT_R,
                f"{which[0]}a{q}",
                (ta[0], ta[1], s),
                f"{which} of entries (code & 7) for 4 codes",
                "convert",
            )
            if symmetric:
                if which == "high bytes":
                    a = B.emit(
                        Opcode.LOP3,
                        f"{which[0]}s{q}",
                        (a, m, Const(0x80808080, "the sign bit of every byte")),
                        "codes 8..15 are codes 0..7 negated: flip the sign bit",
                        "convert",
                        LUT_XOR_MASKED,
                        WHY[LUT_XOR_MASKED],
                    )
                regs.append(a)
                continue
            tb = table(bs[8:], which.replace("of", "of"))
            tb = (
                Const(tb[0].value, f"{which} of {what} entries {{8..11}}"),
                Const(tb[1].value, f"{which} of {what} entries {{12..15}}"),
            )
            bsel = B.emit(
                Opcode.PRMT_R,
                f"{which[0]}b{q}",
                (tb[0], tb[1], s),
                f"{which} of entries 8 + (code & 7) for 4 codes",
                "convert",
            )
            regs.append(
                B.emit(
                    Opcode.LOP3,
                    f"{which[0]}{q}",
                    (a, bsel, m),
                    "per code: the entry 0..7 or 8..15 by its bit 3",
                    "convert",
                    LUT_MUX,
                    WHY[LUT_MUX],
                )
            )
        hi_reg, lo_reg = regs
        assert hi_reg is not None, "only the low bytes are ever skipped"
        quads[q] = (hi_reg, lo_reg)
    outs = []
    for i in range(n // 2):
        p0, p1 = Layout.of(spec).field_pos(2 * i) // 4, Layout.of(spec).field_pos(2 * i + 1) // 4
        qa, qb = p0 // 4, p1 // 4
        if qa != qb:
            ha, la = quads[qa]
            hb, lb = quads[qb]
            hi2 = B.emit(
                Opcode.PRMT,
                f"hx{i}",
                (ha, hb),
                "the pair's high bytes, from two lookups",
                "convert",
                prmt_selector([p0 % 4, 4 + p1 % 4, 0, 0]),
                "byte moves",
            )
            lo2 = (
                B.emit(
                    Opcode.PRMT,
                    f"lx{i}",
                    (la, lb),
                    "the pair's low bytes",
                    "convert",
                    prmt_selector([p0 % 4, 4 + p1 % 4, 0, 0]),
                    "byte moves",
                )
                if la
                else None
            )
            hreg, lreg, k0, k1 = hi2, lo2, 0, 1
        else:
            hreg, lreg = quads[qa]
            k0, k1 = p0 % 4, p1 % 4
        if lreg is None:
            picks = [4, k0, 4, k1]
            outs.append(
                B.emit(
                    Opcode.PRMT,
                    f"d{i}",
                    (hreg, ZERO),
                    f"{carrier.name}x2 pair: high bytes from the lookup, low bytes zero (every entry's low byte is 0)",
                    "convert",
                    prmt_selector(picks),
                    f"byte moves {picks}",
                )
            )
        else:
            picks = [4 + k0, k0, 4 + k1, k1]
            outs.append(
                B.emit(
                    Opcode.PRMT,
                    f"d{i}",
                    (hreg, lreg),
                    f"{carrier.name}x2 pair: each element's low and high table byte side by side",
                    "convert",
                    prmt_selector(picks),
                    f"byte moves {picks}",
                )
            )
    return outs


# ----------------------------------------------------------------------------- block scales


def _block_scale_stage(B: Builder, pairs16: list[str]) -> tuple[list[str], list[str]]:
    """MXFP4 / NVFP4: the elements (exact, as fp16 pairs) times the block scale, in fp32, rounded once
    to the target (and, for NVFP4, once to fp32 before). Returns (outputs, scale registers)."""
    spec = B.spec
    tfmt = target_format(spec)
    pack = Opcode.CVT_F16X2_F32 if tfmt is FP16 else Opcode.CVT_BF16X2_F32
    dtype = spec.scales.dtype
    # _finish calls this only when ScaleSpec.block is true, which needs a block-scale dtype
    assert dtype is not None, "block-scale stage without a scale dtype"
    outs = []
    if dtype.value == "e8m0":
        t = B.emit(
            Opcode.SHR,
            "sc_h",
            ("sc",),
            "the scale code shifted by one, to compare neighbouring bits",
            "scale_prep",
            1,
            "shift by 1",
        )
        u = B.emit(
            Opcode.LOP3,
            "sc_d",
            ("sc", t, Const(0x7F, "the code's 8 bits compared pairwise")),
            "0 exactly when all 8 bits are equal: E = 0x00 or 0xFF",
            "scale_prep",
            LUT_XOR_AND,
            WHY[LUT_XOR_AND],
        )
        f = B.emit(
            Opcode.SET_EQ,
            "sc_f",
            (u, ZERO),
            "all ones for E = 0x00 (2^-127, an fp32 subnormal) and E = 0xFF (NaN)",
            "scale_prep",
        )
        e = B.emit(
            Opcode.SHL,
            "sc_e",
            ("sc",),
            "E into the fp32 exponent field: 2^(E-127) for 1 <= E <= 254",
            "scale_prep",
            FP32.mbits,
            f"shift by {FP32.mbits}",
        )
        S = B.emit(
            Opcode.LOP3,
            "scale",
            (e, f, Const(1 << (FP32.mbits - 1), "the top fp32 mantissa bit: 0 -> 2^-127, inf -> NaN")),
            "2^(E-127) as fp32, NaN for 0xFF",
            "scale_prep",
            LUT_OR_MASKED,
            WHY[LUT_OR_MASKED],
        )
        regs = [S]
    else:
        # NVFP4: the e4m3 block scale as an fp16 pair (exact), and the fp32 global scale as given
        mf = MINIFLOATS[dtype.value]
        if B.has(Opcode.CVT_F16X2_E4M3X2):
            h = B.emit(
                Opcode.CVT_F16X2_E4M3X2,
                "sc16",
                ("sc",),
                "hardware e4m3 -> fp16 of the scale byte (exact)",
                "scale_prep",
                0,
                "the low 16 bits",
            )
            S = B.emit(
                Opcode.PRMT,
                "scale",
                (h, h),
                "the fp16 scale in both halves",
                "scale_prep",
                prmt_selector([0, 1, 0, 1]),
                "byte moves [0, 1, 0, 1]",
            )
        else:
            r = B.emit(
                Opcode.PRMT,
                "sc_t",
                ("sc", ZERO),
                "the scale byte at the top of both halves",
                "scale_prep",
                prmt_selector([4, 0, 4, 0]),
                "byte moves [4, 0, 4, 0]",
            )
            S = place_pair(B, mf, FP16, r, 99, "scale_prep")
        regs = [S, "gs"]
    for i, d in enumerate(pairs16):
        if dtype.value == "e4m3":
            d = B.emit(
                Opcode.MUL_F16X2,
                f"e{i}",
                (d, regs[0]),
                "element times e4m3 block scale: exact in fp16 (<= 6 significant bits, |x| <= 2688, >= 2^-10)",
                "scale",
            )
            mul_by, what = "gs", "times the fp32 global scale, rounded to fp32"
        else:
            mul_by, what = regs[0], "times 2^(E-127): exact in fp32"
        lo = B.emit(Opcode.CVT_F32_F16, f"el{i}", (d,), "low element to fp32, exact", "scale", 0, "the low half")
        hi = B.emit(Opcode.CVT_F32_F16, f"eh{i}", (d,), "high element to fp32, exact", "scale", 1, "the high half")
        lo = B.emit(Opcode.MUL_F32, f"gl{i}", (lo, mul_by), what, "scale")
        hi = B.emit(Opcode.MUL_F32, f"gh{i}", (hi, mul_by), what, "scale")
        outs.append(B.emit(pack, f"out{i}", (lo, hi), f"one rounding to nearest-even {tfmt.name}", "scale"))
    return outs, regs


# ----------------------------------------------------------------------------- strategies


def _finish(B: Builder, spec: Spec, strategy: str, summary: str, converted: list[str], facts: list[str]) -> Plan:
    scale_regs: list[str] = []
    if spec.scales.block:
        outs, scale_regs = _block_scale_stage(B, converted)
    else:
        outs = scale_stage(B, converted)
    return Plan(
        spec.name,
        strategy,
        summary,
        target_format(spec).name,
        spec.sm,
        spec.per_word,
        plan_inputs(spec, spec.per_word // 2),
        B.ops,
        outs,
        facts,
        scale_regs=scale_regs,
    )


def _carrier(spec: Spec) -> FloatFormat:
    # block-scaled elements are formed in fp16 (exact for e2m1) and scaled in fp32
    return FP16 if spec.scales.block else target_format(spec)


def _mf_facts(spec: Spec, carrier: FloatFormat) -> list[str]:
    mf = minifloat(spec)
    return [mf.describe(), carrier.describe() + f"; a normal value is 2^(E-{carrier.bias}) * (1 + m/2^{carrier.mbits})"]


def minifloat_candidates(spec: Spec) -> tuple[list[Plan], list[str]]:
    if spec.source.kind is not SourceKind.float:
        return [], []
    carrier = _carrier(spec)
    plans, notes = [], []
    mf = minifloat(spec)
    B = Builder(spec, carrier)
    conv = place_all(B, spec, carrier)
    k = carrier.bias - mf.bias
    plans.append(
        _finish(
            B,
            spec,
            "bit_place",
            f"{mf.name} bits placed under the {carrier.name} sign and exponent (shift {carrier.ebits - mf.ebits}), "
            + (f"re-biased by one exact multiply by 2^{k}" if k else "no re-bias needed"),
            conv,
            _mf_facts(spec, carrier),
        )
    )
    if mf.name in ("e4m3", "e5m2"):
        if spec.sm >= Opcode.CVT_F16X2_E4M3X2.min_sm:
            B = Builder(spec, carrier)
            conv = cvt_all(B, spec, carrier)
            plans.append(
                _finish(
                    B,
                    spec,
                    "cvt",
                    f"hardware cvt.rn.f16x2.{mf.name}x2, one per pair"
                    + ("" if carrier is FP16 else "; to bf16 through fp32 (exact)"),
                    conv,
                    _mf_facts(spec, carrier),
                )
            )
        else:
            notes.append(f"cvt: cvt.rn.f16x2.{mf.name}x2 needs sm_89, spec targets sm_{spec.sm}")
    if carrier is BF16 and mf.width == 8:
        # fp16 holds every fp8 value: convert to fp16 by bit placement, then widen and narrow through fp32
        B = Builder(spec, FP16)
        conv = place_all(B, spec, FP16)
        Bt = Builder(spec, carrier)
        Bt.ops = B.ops
        conv = [_f16_to_bf16(Bt, h, i) for i, h in enumerate(conv)]
        plans.append(
            _finish(
                Bt,
                spec,
                "bit_place",
                f"{mf.name} -> fp16 by bit placement, then to bf16 through fp32 (exact)",
                conv,
                _mf_facts(spec, FP16),
            )
        )
    if mf.width == 4:
        entries = table_bits([mf.decode(c) for c in range(16)], carrier)
        B = Builder(spec, carrier)
        conv = lut_all(B, spec, entries, carrier, f"{mf.name}->{carrier.name}")
        plans.append(
            _finish(
                B,
                spec,
                "lut",
                f"PRMT table lookup of the 16 {mf.name} values in {carrier.name}",
                conv,
                _mf_facts(spec, carrier),
            )
        )
    return plans, notes


def codebook_candidates(spec: Spec) -> tuple[list[Plan], list[str]]:
    if spec.source.kind is not SourceKind.codebook:
        return [], []
    fmt = target_format(spec)
    vals = spec.source.codebook_values
    values = list(vals) + [0.0] * (16 - len(vals))  # floats, not Fractions: a -0.0 entry keeps its sign
    entries = table_bits(values, fmt)
    B = Builder(spec, fmt)
    conv = lut_all(B, spec, entries, fmt, "codebook")
    name = spec.source.codebook if isinstance(spec.source.codebook, str) else "user"
    facts = [
        f"codebook ({name}, {len(vals)} entries) rounded once to {fmt.name}: "
        + ", ".join(f"{i}: 0x{e:04X}" for i, e in enumerate(entries))
    ]
    return [
        _finish(
            B,
            spec,
            "lut",
            f"PRMT table lookup of the {len(vals)}-entry codebook, rounded once to {fmt.name}",
            conv,
            facts,
        )
    ], []
