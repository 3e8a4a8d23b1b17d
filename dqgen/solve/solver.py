"""The solver: from a spec to the cheapest proven Plan.

It builds every candidate Plan that each strategy can make for the spec's layout, target and
arch, checks each candidate on every code at every lane (``prove.quick``), and keeps the
cheapest valid one. Strategies:

- ``lanes``: place each output pair's two fields in the two 16-bit halves (by a shared right
  shift, by a PRMT byte move, or - for whole bytes - by a PRMT that also inserts the magic
  exponent byte), LOP3 the fields into the mantissa of the magic number (a two's-complement
  sign is flipped by XOR in the same LOP3), then one sub or fma removes the magic, the bias or
  zero point and, for fields above bit 0, the 2^p scale (the fp16 "high nibble" trick: an fma
  by 1/16 replaces a shift). Needs fields no wider than the target's mantissa.
- ``sign_split``: for fields one bit wider than the mantissa (int8 -> bf16): the low bits and
  the top bit go through two LOP3s into two magic floats; their difference is the value.
- ``fp32_carrier``: for bytes -> bf16: PRMT each byte under the fp32 magic 2^23, subtract in
  fp32, and keep the upper 16 bits of two fp32 results with one PRMT (exact for integers).

Every constant is computed from the formats (``magic``) and the layout; none is typed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Literal

from ..core.formats import BF16, FP32, FloatFormat
from ..core.spec import SourceKind, Spec
from ..ir.isa import Const, Opcode, lut_of, prmt_selector
from ..ir.magic import (
    field_mask,
    fmt_num,
    half_pair,
    magic_bits,
    magic_exponent,
    magic_fact,
    magic_pair,
    magic_value,
    pair_const,
)
from ..ir.plan import Plan, Stage
from ..layout.layout import Layout
from .common import Builder, plan_inputs, scale_stage, shift_regs, target_format, word_names
from .solver_float import codebook_candidates, minifloat_candidates
from .solver_int import bytes_candidates

LUT_AND_OR = lut_of(lambda a, b, c: (a & b) | c)
LUT_AND_XOR = lut_of(lambda a, b, c: (a & b) ^ c)
LUT_XOR = lut_of(lambda a, b, c: a ^ b)
LUT_WHY = {
    LUT_AND_OR: "immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c",
    LUT_AND_XOR: "immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c",
    LUT_XOR: "immLut = 0xF0 ^ 0xCC: d = a ^ b",
}


class NoPlanError(ValueError):
    """No strategy can convert this spec exactly."""


def code_offset(spec: Spec) -> int:
    """What the fix-up subtracts from the unsigned field value, once signs are offset-binary."""
    if spec.source.kind is SourceKind.signed:
        return 1 << (spec.source.bits - 1)
    return spec.source.offset


# ----------------------------------------------------------------------------- placements


@dataclass(frozen=True)
class Placement:
    """How one output pair's two fields reach the two 16-bit halves of a register."""

    kind: Literal["shift", "prmt", "prmt_magic"]
    src_lo: int  # right shift of the source word that provides the low element
    src_hi: int
    p_lo: int  # bit of the low element's field within the low half
    p_hi: int
    picks: tuple[int, ...] = ()

    @property
    def cost(self) -> int:  # ops per pair, before the fix-up; shared shifts counted separately
        return 2 if self.kind == "prmt" else 1

    @property
    def shifts(self) -> set[int]:
        return {s for s in (self.src_lo, self.src_hi) if s}

    @property
    def rank(self) -> tuple:
        # Fewest ops; then no 2^p scale (a sub, one constant); then on ties a PRMT that inserts
        # the magic byte itself (no mask constant), then a plain shift, then PRMT + LOP3.
        order = {"prmt_magic": 0, "shift": 1, "prmt": 2}
        return (self.cost, self.p_lo != 0 or self.p_hi != 0, order[self.kind], self.src_lo + self.src_hi)


def _byte_slot(pos: int, bits: int) -> tuple[int, int] | None:
    """(byte index, offset in byte) of a field at bit ``pos``, if it lies inside one byte."""
    if pos < 0:
        return None
    k, o = divmod(pos, 8)
    return (k, o) if o + bits <= 8 else None


def placements(
    spec: Spec, pair: int, room: int, whole_bytes_magic: bool, pos: dict[int, int] | None = None
) -> list[Placement]:
    """All ways to put pair ``pair``'s fields at bits [0, room] of each half (``pos``: each element's
    bit in the source register, when that is not the spec's word)."""
    b = spec.source.bits
    where = (lambda e: pos[e]) if pos is not None else (lambda e: Layout.of(spec).field_pos(e))
    P_lo, P_hi = where(2 * pair), where(2 * pair + 1)
    out: list[Placement] = []
    for s in range(32):
        p_lo, p_hi = P_lo - s, P_hi - 16 - s
        if 0 <= p_lo <= room and 0 <= p_hi <= room:
            out.append(Placement("shift", s, s, p_lo, p_hi))
    sub_byte_shifts = range(0, 8, b) if b < 8 else (0,)
    for sx in sub_byte_shifts:
        for sy in sub_byte_shifts:
            lo, hi = _byte_slot(P_lo - sx, b), _byte_slot(P_hi - sy, b)
            if lo is None or hi is None:
                continue
            b_hi = hi[0] + (4 if sy != sx else 0)  # PRMT operand b holds the second source
            for pos_lo in (0, 1):
                for pos_hi in (0, 1):
                    p_lo, p_hi = 8 * pos_lo + lo[1], 8 * pos_hi + hi[1]
                    if p_lo <= room and p_hi <= room:
                        picks = [lo[0], lo[0], b_hi, b_hi]
                        out.append(Placement("prmt", sx, sy, p_lo, p_hi, tuple(picks)))
    if whole_bytes_magic and b == 8:
        # PRMT takes the magic's exponent byte from operand b (byte 5: the high byte of its low half)
        out.append(Placement("prmt_magic", 0, 0, 0, 0, (P_lo // 8, 5, P_hi // 8, 5)))
    return out


def choose_placements(
    options: list[list[Placement]], max_shifts: int = 3
) -> list[tuple[frozenset[int], list[Placement]]]:
    """For each small set of shared shifts, the best placement per pair; cheapest sets first."""
    all_shifts = sorted({s for opts in options for p in opts for s in p.shifts})
    results = []
    for k in range(0, max_shifts + 1):
        for S in combinations(all_shifts, k):
            allowed = set(S)
            chosen = []
            for opts in options:
                ok = [p for p in opts if p.shifts <= allowed]
                if not ok:
                    break
                chosen.append(min(ok, key=lambda p: p.rank))
            else:
                used = frozenset(s for p in chosen for s in p.shifts)
                if used == frozenset(S):  # a set with unused shifts is a duplicate of a smaller one
                    results.append((used, chosen))
    results.sort(key=lambda r: (len(r[0]) + sum(p.cost for p in r[1]), sum(p.rank[1] for p in r[1]), sorted(r[0])))
    return results[:4]


# ----------------------------------------------------------------------------- plan building


def _flip_signs(B: Builder) -> str:
    """One LOP3 per word that XORs every field's top bit: two's complement -> offset binary."""
    b, n = B.spec.source.bits, B.spec.per_word
    signs = Const(sum(1 << (b * j + b - 1) for j in range(n)), f"the top bit of each of the {n} {b}-bit fields")
    return B.emit(
        Opcode.LOP3,
        "wx",
        ("w", signs, signs),
        f"flip every field's sign bit: two's complement -> offset binary (value + {1 << (b - 1)})",
        "convert",
        LUT_XOR,
        LUT_WHY[LUT_XOR],
    )


def _shift_regs(B: Builder, src: str, shifts: frozenset[int], stage: Stage) -> dict[int, str]:
    return shift_regs(B, src, shifts, stage, "bring fields {s} bits down, to where a mask can reach them")


def _place(B: Builder, pl: Placement, regs: dict[int, str], name: str, stage: Stage) -> str:
    """Emit the PRMT of a ``prmt`` placement; returns the register holding the pair's fields."""
    if pl.kind == "shift":
        return regs[pl.src_lo]
    a, b = regs[pl.src_lo], regs[pl.src_hi]
    sel = prmt_selector(list(pl.picks))
    why = f"byte moves {list(pl.picks)} (result byte k <- source byte picks[k]; 0-3 = {a}, 4-7 = {b})"
    return B.emit(
        Opcode.PRMT,
        name,
        (a, b),
        "put the low element's byte in the low half and the high element's in the high half",
        stage,
        sel,
        why,
    )


def _fixup(B: Builder, x: str, pl: Placement, off: int, zreg: str | None, i: int) -> str:
    """Remove the magic (and bias / zero) and the 2^p field scale: one sub or one fma."""
    fmt, A = B.fmt, magic_value(B.fmt)
    d = f"d{i}"
    if pl.p_lo == 0 and pl.p_hi == 0:
        if zreg is not None:
            return B.sub(
                d,
                x,
                zreg,
                f"({A} + q) - ({A} + z) = q - z, exact (the zero point is folded into the magic subtraction)",
                "convert",
            )
        c = pair_const(fmt, A + off, A + off, f"{A} (magic) + {off} (offset) in both halves")
        return B.sub(d, x, c, f"({A} + field) - {A + off} = code value, exact", "convert")
    inv = pair_const(
        fmt,
        Fraction(1, 1 << pl.p_lo),
        Fraction(1, 1 << pl.p_hi),
        f"{{{fmt_num(Fraction(1, 1 << pl.p_lo))}, {fmt_num(Fraction(1, 1 << pl.p_hi))}}}: "
        "undo the field's position 2^p in each half",
    )
    if zreg is not None:
        return B.emit(B.ar["fma"], d, (x, inv, zreg), f"({A} + q*2^p)/2^p - ({A}/2^p + z) = q - z, exact", "convert")
    add = pair_const(
        fmt,
        -(Fraction(A, 1 << pl.p_lo) + off),
        -(Fraction(A, 1 << pl.p_hi) + off),
        f"-({A}/2^p + {off}) per half: the magic after the 1/2^p scaling, plus the offset",
    )
    return B.emit(
        B.ar["fma"], d, (x, inv, add), f"({A} + field*2^p)/2^p - ({A}/2^p + {off}) = code value, exact", "convert"
    )


def _zero_regs(
    B: Builder, chosen: list[Placement], shifts: frozenset[int], magic_whole_byte: Const | None
) -> list[str]:
    """Zero stage: extract the zero word exactly like the weights (unsigned, no sign flip)."""
    fmt, b, A = B.fmt, B.spec.source.bits, magic_value(B.fmt)
    regs = _shift_regs(B, "z", shifts, "zero")
    out = []
    for i, pl in enumerate(chosen):
        if pl.kind == "prmt_magic":
            assert magic_whole_byte is not None
            zr = B.emit(
                Opcode.PRMT,
                f"zr{i}",
                ("z", magic_whole_byte),
                f"{A} + z in each half",
                "zero",
                prmt_selector(list(pl.picks)),
                f"byte moves {list(pl.picks)}",
            )
        else:
            src = _place(B, pl, regs, f"zp{i}", "zero")
            zr = B.emit(
                Opcode.LOP3,
                f"zr{i}",
                (src, field_mask(b, pl.p_lo, pl.p_hi), magic_pair(fmt)),
                f"{A} + z*2^p in each half",
                "zero",
                LUT_AND_OR,
                LUT_WHY[LUT_AND_OR],
            )
        plus = B.spec.zeros.stored_offset  # gptq_v1 stores z - 1
        if pl.p_lo or pl.p_hi:
            neg = pair_const(fmt, -Fraction(1, 1 << pl.p_lo), -Fraction(1, 1 << pl.p_hi), "-1/2^p per half")
            if plus:
                minus = pair_const(fmt, -plus, -plus, f"-{plus}: GPTQ v1 stores z - {plus}")
                zr = B.emit(
                    B.ar["fma"],
                    f"zc{i}",
                    (zr, neg, minus),
                    f"-({A}/2^p + stored + {plus}): the fma addend that removes magic and zero at once (exact)",
                    "zero",
                )
            else:
                zr = B.mul(
                    f"zc{i}",
                    zr,
                    neg,
                    f"-({A}/2^p + z): the fma addend that removes magic and zero at once (exact)",
                    "zero",
                )
        elif plus:
            minus = pair_const(fmt, -plus, -plus, f"-{plus}: GPTQ v1 stores z - {plus}")
            zr = B.sub(
                f"zv{i}", zr, minus, f"{A} + stored + {plus} = {A} + z (GPTQ v1 stores z - {plus}), exact", "zero"
            )
        out.append(zr)
    return out


def build_lanes(spec: Spec, prexor: bool, shifts: frozenset[int], chosen: list[Placement]) -> Plan:
    fmt, b = target_format(spec), spec.source.bits
    B = Builder(spec, fmt)
    A = magic_value(fmt)
    signed = spec.source.kind is SourceKind.signed
    off = code_offset(spec)
    M8 = None
    if any(p.kind == "prmt_magic" for p in chosen):
        mb = magic_bits(fmt) >> 8
        M8 = Const(
            mb * 0x01010101, f"magic exponent byte 0x{mb:02X} (the high byte of {fmt.name} {A}.0) in every byte", "b32"
        )
    zregs = _zero_regs(B, chosen, shifts, M8) if spec.zeros.packed else [None] * len(chosen)
    src = "w"
    if prexor:
        src = _flip_signs(B)
    regs = _shift_regs(B, src, shifts, "convert")
    diffs = []
    for i, pl in enumerate(chosen):
        if pl.kind == "prmt_magic":
            assert M8 is not None
            x = B.emit(
                Opcode.PRMT,
                f"x{i}",
                (src, M8),
                f"{A} + code in each half: the byte lands in the mantissa under the magic exponent byte",
                "convert",
                prmt_selector(list(pl.picks)),
                f"byte moves {list(pl.picks)}: result byte k <- picks[k] (0-3 = {src}, 4-7 = magic)",
            )
        else:
            t = _place(B, pl, regs, f"p{i}", "convert")
            flip = (1 << (pl.p_lo + b - 1), 1 << (pl.p_hi + b - 1)) if (signed and not prexor) else (0, 0)
            lut = LUT_AND_XOR if any(flip) else LUT_AND_OR
            x = B.emit(
                Opcode.LOP3,
                f"x{i}",
                (t, field_mask(b, pl.p_lo, pl.p_hi), magic_pair(fmt, flip)),
                f"{A} + field*2^p in each half (p = {pl.p_lo}, {pl.p_hi})",
                "convert",
                lut,
                LUT_WHY[lut],
            )
        diffs.append(_fixup(B, x, pl, off, zregs[i], i))
    outs = scale_stage(B, diffs)
    kinds = sorted({p.kind for p in chosen})
    summary = (
        f"fields placed by {', '.join(kinds)}"
        + (f" with shared shifts {sorted(shifts)}" if shifts else "")
        + (", sign bits flipped once per word" if prexor else "")
        + f"; each pair OR-ed under the {fmt.name} magic {A} and fixed up by one sub/fma"
    )
    return Plan(
        spec.name,
        "lanes",
        summary,
        fmt.name,
        spec.sm,
        spec.per_word,
        plan_inputs(spec, len(chosen)),
        B.ops,
        outs,
        _facts(fmt),
    )


def _facts(*fmts: FloatFormat) -> list[str]:
    facts = [f.describe() + f"; a normal value is 2^(E-{f.bias}) * (1 + m/2^{f.mbits})" for f in fmts]
    return facts + [magic_fact(f) for f in fmts]


def block_views(spec: Spec) -> list[tuple[int, list[int]]]:
    """For codes that straddle words: 32-bit windows of the block (start bit, pairs inside) that
    together hold every output pair whole. Each window starts at its first pair's low code."""
    b, n = spec.source.bits, spec.per_word
    views, pair = [], 0
    while pair < n // 2:
        start = b * 2 * pair
        inside = []
        while pair < n // 2 and b * (2 * pair + 2) <= start + 32:
            inside.append(pair)
            pair += 1
        views.append((start, inside))
    return views


def build_lanes_multiword(spec: Spec) -> Plan:
    """Multi-word blocks: a funnel shift (one op) brings each window of the block into one register,
    then every pair of the window is placed and fixed up as in ``lanes``."""
    fmt, b = target_format(spec), spec.source.bits
    B = Builder(spec, fmt)
    A = magic_value(fmt)
    signed = spec.source.kind is SourceKind.signed
    off = code_offset(spec)
    room = fmt.mbits - b
    names = word_names(spec)
    diffs: list[str] = []
    kinds: set[str] = set()
    for start, pairs in block_views(spec):
        k, sh = divmod(start, 32)
        if sh == 0:
            src = names[k]
        elif k + 1 < len(names):
            src = B.emit(
                Opcode.SHF_R,
                f"v{start}",
                (names[k], names[k + 1]),
                f"block bits {start}..{start + 31}: codes of pairs {pairs[0]}..{pairs[-1]}, straddling ones whole",
                "convert",
                sh,
                f"funnel shift of ({names[k + 1]}:{names[k]}) by {sh}",
            )
        else:
            src = B.emit(
                Opcode.SHR,
                f"v{start}",
                (names[k],),
                f"block bits {start}.. of the last word",
                "convert",
                sh,
                f"shift by {sh}",
            )
        pos = {e: b * e - start for p in pairs for e in (2 * p, 2 * p + 1)}
        opts = [placements(spec, p, room, False, pos) for p in pairs]
        best = choose_placements(opts)
        if not best:
            raise NoPlanError(f"{spec.name}: pairs {pairs} of the window at bit {start} cannot be placed")
        shifts, chosen = best[0]
        regs = _shift_regs(B, src, shifts, "convert")
        for p, pl in zip(pairs, chosen, strict=True):  # one placement per pair
            kinds.add(pl.kind)
            t = _place(B, pl, regs, f"p{p}", "convert")
            flip = (1 << (pl.p_lo + b - 1), 1 << (pl.p_hi + b - 1)) if signed else (0, 0)
            lut = LUT_AND_XOR if any(flip) else LUT_AND_OR
            x = B.emit(
                Opcode.LOP3,
                f"x{p}",
                (t, field_mask(b, pl.p_lo, pl.p_hi), magic_pair(fmt, flip)),
                f"{A} + field*2^p in each half (p = {pl.p_lo}, {pl.p_hi})",
                "convert",
                lut,
                LUT_WHY[lut],
            )
            diffs.append(_fixup(B, x, pl, off, None, p))
    outs = scale_stage(B, diffs)
    summary = (
        f"{spec.words}-word blocks cut into 32-bit windows by funnel shifts; "
        f"fields placed by {', '.join(sorted(kinds))}, "
        f"OR-ed under the {fmt.name} magic {A} and fixed up by one sub/fma"
    )
    return Plan(
        spec.name,
        "lanes",
        summary,
        fmt.name,
        spec.sm,
        spec.per_word,
        plan_inputs(spec, spec.per_word // 2),
        B.ops,
        outs,
        _facts(fmt),
    )


def lanes_candidates(spec: Spec) -> tuple[list[Plan], list[str]]:
    if not _integer(spec):
        return [], []
    if spec.words > 1:
        try:
            return [build_lanes_multiword(spec)], []
        except NoPlanError as e:
            return [], [f"lanes: {e}"]
    fmt, b = target_format(spec), spec.source.bits
    room = fmt.mbits - b
    if room < 0:
        return [], [f"lanes: a {b}-bit field does not fit the {fmt.mbits}-bit {fmt.name} mantissa"]
    pairs = spec.per_word // 2
    signed = spec.source.kind is SourceKind.signed
    whole_byte_ok = fmt.mbits >= 8 and magic_bits(fmt) & 0xFF == 0
    plans, notes = [], []
    for prexor in [False, True] if signed else [False]:
        opts = [
            [p for p in placements(spec, i, room, whole_byte_ok) if p.kind != "prmt_magic" or not signed or prexor]
            for i in range(pairs)
        ]
        for shifts, chosen in choose_placements(opts):
            plans.append(build_lanes(spec, prexor, shifts, chosen))
        if not plans:
            notes.append("lanes: some pair's fields cannot be placed in the two halves")
    return plans, notes


def build_sign_split(spec: Spec, shifts: frozenset[int], chosen: list[Placement]) -> Plan:
    fmt, b = target_format(spec), spec.source.bits
    B = Builder(spec, fmt)
    A = magic_value(fmt)
    regs = _shift_regs(B, "w", shifts, "convert")
    flip = spec.source.kind is not SourceKind.signed  # u8b128: the top bit counts +128, so subtract (1 - top)
    lo_mask = Const(half_pair((1 << (b - 1)) - 1, (1 << (b - 1)) - 1), f"the low {b - 1} bits of each half's field")
    top = 1 << (b - 1)
    top_mask = Const(
        half_pair(top, top), f"the top bit (bit {b - 1}) of each half's field: it lands on the exponent's lowest bit"
    )
    magic = magic_pair(fmt)
    top_magic = (
        Const(magic.value | half_pair(top, top), magic.why + f"; with bit {b - 1} set, to flip the top bit")
        if flip
        else magic
    )
    diffs = []
    for i, pl in enumerate(chosen):
        t = _place(B, pl, regs, f"p{i}", "convert")
        t0 = B.emit(
            Opcode.LOP3,
            f"lo{i}",
            (t, lo_mask, magic),
            f"{A} + low {b - 1} bits, exact",
            "convert",
            LUT_AND_OR,
            LUT_WHY[LUT_AND_OR],
        )
        lut = LUT_AND_XOR if flip else LUT_AND_OR
        what = "1 - top" if flip else "top"
        t1 = B.emit(
            Opcode.LOP3,
            f"hi{i}",
            (t, top_mask, top_magic),
            f"{A} * 2^({what}) = {A} + {A}*({what}): the bit doubles the magic through the exponent",
            "convert",
            lut,
            LUT_WHY[lut],
        )
        diffs.append(B.sub(f"d{i}", t0, t1, f"({A} + low) - ({A} + {A}*({what})) = code value, exact", "convert"))
    outs = scale_stage(B, diffs)
    summary = (
        f"each {b}-bit field split in two LOP3s: low {b - 1} bits into the {fmt.name} mantissa under {A}, "
        f"the top bit into the exponent's lowest bit (x2 = +{A}); one subtraction"
    )
    return Plan(
        spec.name,
        "sign_split",
        summary,
        fmt.name,
        spec.sm,
        spec.per_word,
        plan_inputs(spec, len(chosen)),
        B.ops,
        outs,
        _facts(fmt),
    )


def sign_split_candidates(spec: Spec) -> tuple[list[Plan], list[str]]:
    if not _integer(spec):
        return [], []
    fmt, b = target_format(spec), spec.source.bits
    if b - 1 != fmt.mbits:
        return [], [f"sign_split: needs fields exactly one bit wider than the mantissa ({fmt.mbits + 1} bits), not {b}"]
    if spec.zeros.packed:
        return [], ["sign_split: no zero-point folding"]
    off = code_offset(spec)
    if off != 1 << (b - 1):
        return [], [
            f"sign_split: the top bit can only stand for -{1 << (b - 1)} (signed) "
            f"or +{1 << (b - 1)} with bias {1 << (b - 1)}; offset {off} needs another op"
        ]
    opts = [
        [p for p in placements(spec, i, 0, False) if p.p_lo == 0 and p.p_hi == 0 and p.kind != "prmt_magic"]
        for i in range(spec.per_word // 2)
    ]
    return [build_sign_split(spec, s, c) for s, c in choose_placements(opts)], []


def fp32_carrier_candidates(spec: Spec) -> tuple[list[Plan], list[str]]:
    if not _integer(spec):
        return [], []
    fmt, b = target_format(spec), spec.source.bits
    if fmt is not BF16 or b != 8:
        return [], ["fp32_carrier: bytes -> bf16 only (bf16 is the upper half of fp32)"]
    B = Builder(spec, fmt)
    m32 = magic_bits(FP32)
    M = Const(
        m32,
        f"fp32 magic 2^{FP32.mbits} = {magic_value(FP32)}.0: "
        f"exponent {magic_exponent(FP32)} = {FP32.bias}+{FP32.mbits}, mantissa unit 1",
        "f32",
    )

    def picks_for(e: int) -> list[int]:
        return [Layout.of(spec).field_pos(e) // 8, 5, 6, 7]

    zregs: list[str | None] = [None] * spec.per_word
    if spec.zeros.packed:
        plus = spec.zeros.stored_offset
        sub_one = Const(FP32.encode_exact(-plus), f"-{plus}: GPTQ v1 stores z - {plus}", "f32") if plus else None
        for e in range(spec.per_word):
            zr = B.emit(
                Opcode.PRMT,
                f"zr{e}",
                ("z", M),
                f"fp32 {magic_value(FP32)} + stored zero of element {e}",
                "zero",
                prmt_selector(picks_for(e)),
                f"byte moves {picks_for(e)}",
            )
            if sub_one is not None:
                zr = B.emit(
                    Opcode.SUB_F32,
                    f"zv{e}",
                    (zr, sub_one),
                    f"{magic_value(FP32)} + z (GPTQ v1 stores z - {plus}), exact",
                    "zero",
                )
            zregs[e] = zr
    src = "w"
    if spec.source.kind is SourceKind.signed:
        src = _flip_signs(B)
    off = code_offset(spec)
    sub_c = Const(
        FP32.encode_exact(magic_value(FP32) + off),
        f"{magic_value(FP32)} + {off} = {magic_value(FP32) + off}.0 (magic plus offset)",
        "f32",
    )
    f32 = []
    for e in range(spec.per_word):
        t = B.emit(
            Opcode.PRMT,
            f"c{e}",
            (src, M),
            f"fp32 {magic_value(FP32)} + byte of element {e}",
            "convert",
            prmt_selector(picks_for(e)),
            f"byte moves {picks_for(e)}: byte {picks_for(e)[0]} of {src} into the mantissa, "
            "bytes 1-3 of the magic above it",
        )
        zreg = zregs[e]
        f32.append(
            B.emit(
                Opcode.SUB_F32,
                f"v{e}",
                (t, zreg if zreg is not None else sub_c),
                "exact integer value in fp32"
                + (" (the zero point folded into the magic subtraction)" if zreg is not None else ""),
                "convert",
            )
        )
    diffs = []
    for i in range(spec.per_word // 2):
        picks = [2, 3, 6, 7]
        diffs.append(
            B.emit(
                Opcode.PRMT,
                f"d{i}",
                (f32[2 * i], f32[2 * i + 1]),
                "upper 16 bits of both fp32 values = their bf16 (exact: integers below 2^8)",
                "convert",
                prmt_selector(picks),
                f"byte moves {picks}: the high halves of a and b",
            )
        )
    outs = scale_stage(B, diffs)
    summary = (
        "each byte PRMT-ed under the fp32 magic 2^23, one fp32 subtraction each, "
        "then two fp32 packed to bf16x2 by taking their upper halves"
    )
    return [
        Plan(
            spec.name,
            "fp32_carrier",
            summary,
            fmt.name,
            spec.sm,
            spec.per_word,
            plan_inputs(spec, spec.per_word // 2),
            B.ops,
            outs,
            _facts(fmt, FP32),
        )
    ], []


def _integer(spec: Spec) -> bool:
    return spec.source.kind.integer


STRATEGIES = {
    "lanes": lanes_candidates,
    "sign_split": sign_split_candidates,
    "fp32_carrier": fp32_carrier_candidates,
    "minifloat": minifloat_candidates,
    "codebook": codebook_candidates,
}
#: The strategies of an integer (s8) target: the float strategies build fp16 / bf16 arithmetic and do not apply.
INT_STRATEGIES = {"bytes": bytes_candidates}
#: the names plans carry (``Plan.strategy``), for ``solve(strategy=...)``
PLAN_STRATEGIES = ("lanes", "sign_split", "fp32_carrier", "bit_place", "cvt", "lut", "bytes")


def plan_key(plan: Plan) -> tuple:
    """Cheapest conversion first; ties: one magic word (one shared register, the FT/CUTLASS
    convention), fewer distinct constants, then cheaper per-group zero preparation."""
    return (plan.per8("convert"), len(plan.magic_words()), len(plan.constants()), plan.count("zero"))


def candidates(spec: Spec) -> tuple[list[Plan], list[str]]:
    """Every candidate plan (checked on every code at every lane) and notes on what failed."""
    from ..check.prove import quick_check

    plans, notes = [], []
    for name, fn in (INT_STRATEGIES if spec.integer_target else STRATEGIES).items():
        ps, ns = fn(spec)
        notes += ns
        for p in ps:
            try:
                p.check()
            except ValueError as e:
                notes.append(f"{name}: {e}")
                continue
            bad = quick_check(p, spec)
            if bad:
                notes.append(f"{name}: rejected by the lane check: {bad}")
            else:
                plans.append(p)
    plans.sort(key=plan_key)
    return plans, notes


def solve(spec: Spec, strategy: str | None = None) -> Plan:
    plans, notes = candidates(spec)
    if strategy is not None:
        if strategy not in PLAN_STRATEGIES:
            raise NoPlanError(f"[strategy] got {strategy!r}; expected one of {sorted(PLAN_STRATEGIES)}")
        plans = [p for p in plans if p.strategy == strategy]
    if not plans:
        raise NoPlanError(
            f"{spec.name}: no exact plan for {spec.source.short} -> {spec.target.value}: " + "; ".join(notes)
        )
    best = plans[0]
    best.rejected = [
        f"{p.strategy} ({p.summary}): {fmt_num(p.per8())} ops per 8"
        for p in plans[1:]
        if p.strategy != best.strategy or p.per8() != best.per8()
    ][:6] + notes
    return best
