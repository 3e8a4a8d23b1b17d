"""The s8 strategy ``bytes``: 4-bit integer codes -> int8 lanes, four per 32-bit register, for the W4A8 GEMM's
int8 x int8 ``wgmma`` (register A operand: one register holds four consecutive k of one row).

Each output register takes elements 4r..4r+3 of the word into bytes 0..3. The solver reads every element's field
position off the Layout and finds the cheapest way to bring each field to the bottom of its byte: a shared right
shift (``shift``: the fields already sit one per byte, in order) or one PRMT over the word and its shifted copy
(``prmt``: any order whose fields lie inside bytes). Then, per register:

1. one LOP3 keeps the field bits of every byte and sets bit 7 (``x = (t & 0x0F0F0F0F) | 0x80808080``): each byte is
   128 + u, u the field; a two's-complement code also gets its top bit flipped in the same LOP3 (XOR with
   0x88888888), which makes u = code + 8, offset binary;
2. one integer add of the negated offset (the bias, the 8 of offset binary, or the zero point prepared once per
   group as -(z + stored offset) in every byte): each byte becomes 128 + value with value in [-16, 15], so it stays
   in [112, 143] and no byte borrows from the next: one 32-bit add is four byte subtractions;
3. one LOP3 XOR 0x80808080 subtracts 128 in two's complement: each byte is the signed value.

Unsigned codes without a zero point need step 1 only, without bit 7 (the byte is the value). Every constant is
computed from the field width and the spec's offsets, with the range argument that makes it exact; the prover
checks the result on every code (and zero point) at every lane.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..core.spec import SourceKind, Spec
from ..ir.isa import Const, Opcode, lut_of, prmt_selector
from ..ir.plan import Input, Plan, Stage
from ..layout.layout import Layout
from .common import Emitter, shift_regs

#: bit 7 of every byte: 128 + u keeps every byte non-negative through the subtraction, XOR removes it again
BYTE_SIGN = 0x80808080
#: 2^32: an integer add of 2^32 - c is a subtraction of c
WORD = 1 << 32

_LUT_AND = lut_of(lambda a, b, c: a & b)
_LUT_AND_OR = lut_of(lambda a, b, c: (a & b) | c)
_LUT_AND_XOR = lut_of(lambda a, b, c: (a & b) ^ c)
_LUT_NAND = lut_of(lambda a, b, c: ~(a & b))
_LUT_XOR = lut_of(lambda a, b, c: a ^ b)
_LUT_WHY = {
    _LUT_AND: "immLut = 0xF0 & 0xCC: d = a & b",
    _LUT_AND_OR: "immLut = (0xF0 & 0xCC) | 0xAA: d = (a & b) | c",
    _LUT_AND_XOR: "immLut = (0xF0 & 0xCC) ^ 0xAA: d = (a & b) ^ c",
    _LUT_NAND: "immLut = ~(0xF0 & 0xCC): d = ~(a & b)",
    _LUT_XOR: "immLut = 0xF0 ^ 0xCC: d = a ^ b",
}


class NoBytesPlan(ValueError):
    """The spec's fields cannot be brought into bytes by this strategy."""


def every_byte(value: int) -> int:
    """``value`` (0..255) in each of the four bytes."""
    return value * 0x01010101


@dataclass(frozen=True)
class BytePlacement:
    """How the four fields of one output register reach the bottom of bytes 0..3."""

    kind: Literal["shift", "prmt"]
    shifts: tuple[int, ...]  # right shifts of the word that the placement reads (0: the word itself)
    picks: tuple[int, ...] = ()  # PRMT: source byte of each result byte (0-3 from shifts[0], 4-7 from shifts[-1])

    @property
    def cost(self) -> int:
        return 1 if self.kind == "prmt" else 0


def byte_placement(spec: Spec, elements: tuple[int, ...]) -> BytePlacement:
    """The cheapest placement of ``elements`` (byte b gets elements[b]) given their field positions."""
    lay, bits = Layout.of(spec), spec.source.bits
    slots = []
    for e in elements:
        k, o = divmod(lay.field_pos(e), 8)
        if o + bits > 8:
            raise NoBytesPlan(f"element {e}'s field (bit {lay.field_pos(e)}) crosses a byte boundary")
        slots.append((k, o))
    offsets = sorted({o for _, o in slots})
    if len(offsets) == 1 and all(k == b for b, (k, _) in enumerate(slots)):
        return BytePlacement("shift", (offsets[0],))
    if len(offsets) > 2:
        raise NoBytesPlan(f"elements {list(elements)} sit at {len(offsets)} different offsets within their bytes")
    lo, hi = offsets[0], offsets[-1]
    picks = tuple(k + (4 if o == hi and hi != lo else 0) for k, o in slots)
    return BytePlacement("prmt", (lo, hi), picks)


class _Builder(Emitter):
    def lop3(self, dst: str, args: tuple, lut: int, why: str, stage: Stage) -> str:
        return self.emit(Opcode.LOP3, dst, args, why, stage, lut, _LUT_WHY[lut])


def _shifted(B: _Builder, src: str, shifts: set[int], stage: Stage) -> dict[int, str]:
    return shift_regs(B, src, shifts - {0}, stage, "bring the fields at bit {s} of their bytes to bit 0")


def _place(B: _Builder, pl: BytePlacement, regs: dict[int, str], dst: str, stage: Stage) -> str:
    if pl.kind == "shift":
        return regs[pl.shifts[0]]
    a, b = regs[pl.shifts[0]], regs[pl.shifts[-1]]
    return B.emit(
        Opcode.PRMT,
        dst,
        (a, b),
        "move each element's byte to its lane: byte b of the result holds element 4r+b",
        stage,
        prmt_selector(list(pl.picks)),
        f"byte moves {list(pl.picks)} (result byte k <- source byte picks[k]; 0-3 = {a}, 4-7 = {b})",
    )


def build_bytes(spec: Spec) -> Plan:
    """The ``bytes`` Plan of a 4-bit integer spec with an s8 target (see the module docstring)."""
    bits, n = spec.source.bits, spec.per_word
    if spec.words != 1 or not spec.source.kind.integer:
        raise NoBytesPlan("needs one-word blocks of integer codes")
    regs_out = [tuple(range(4 * r, 4 * r + 4)) for r in range(n // 4)]
    placements = [byte_placement(spec, els) for els in regs_out]
    signed = spec.source.kind is SourceKind.signed
    flip = every_byte(1 << (bits - 1)) if signed else 0
    # what is subtracted from the (offset-binary) field u: the bias, or the 2^(bits-1) of offset binary
    offset = (1 << (bits - 1)) if signed else spec.source.offset
    zeros = spec.zeros.packed
    field = (1 << bits) - 1
    mask = Const(every_byte(field), f"the low {bits} bits of every byte: one field per byte")
    # the values: with zero points q - (z + stored offset), z a field too; else the code minus its offset
    lo_val, hi_val = (-(field + spec.zeros.stored_offset), field) if zeros else (-offset, field - offset)
    span = f"[{128 + lo_val}, {128 + hi_val}]"  # each byte after the subtraction: 128 + value
    B = _Builder()
    shifts = {s for pl in placements for s in pl.shifts}

    zregs: list[str] = []
    if zeros:
        # one zero per element, in the same fields as the weights: placed like them, then negated in every byte
        if 128 + lo_val < 0 or 128 + hi_val > 255:
            raise NoBytesPlan(f"zero points up to {-lo_val} would make a byte borrow")
        zsh = _shifted(B, "z", shifts, "zero")
        plus = spec.zeros.stored_offset
        one_minus = Const(
            (1 - every_byte(plus)) % WORD,
            f"1 - 0x{every_byte(plus):08X}: ~Z + 1 = -Z, and minus the stored offset {plus} in every byte"
            if plus
            else "1: ~Z + 1 = -Z (two's complement negation of the whole register)",
        )
        for r, pl in enumerate(placements):
            t = _place(B, pl, zsh, f"zp{r}", "zero")
            nz = B.lop3(f"zn{r}", (t, mask, mask), _LUT_NAND, "~Z: Z = the zero points of this lane's bytes", "zero")
            zregs.append(
                B.emit(
                    Opcode.ADD_U32,
                    f"zr{r}",
                    (nz, one_minus),
                    f"-(Z + 0x{every_byte(plus):08X}) mod 2^32: adding it subtracts every byte's z"
                    + (f" + {plus}" if plus else ""),
                    "zero",
                )
            )
    elif 128 + lo_val < 0 or 128 + hi_val > 255:
        raise NoBytesPlan(f"offset {offset} would make a byte borrow")

    wsh = _shifted(B, "w", shifts, "convert")
    outs = []
    for r, pl in enumerate(placements):
        t = _place(B, pl, wsh, f"p{r}", "convert")
        if not zeros and offset == 0:
            outs.append(
                B.lop3(f"v{r}", (t, mask, mask), _LUT_AND, "each byte = its field = the code value, exact", "convert")
            )
            continue
        top = Const(
            BYTE_SIGN | flip,
            "bit 7 of every byte (128 + u: no byte goes negative in the subtraction)"
            + (
                f"; XOR-ing each field's top bit 0x{flip & 0xFF:02X} turns two's complement into offset binary"
                if flip
                else ""
            ),
        )
        lut = _LUT_AND_XOR if flip else _LUT_AND_OR
        x = B.lop3(f"x{r}", (t, mask, top), lut, f"each byte = 128 + u, u in [0, {field}]", "convert")
        if zeros:
            sub: Const | str = zregs[r]
            what = "z" + (f" + {spec.zeros.stored_offset}" if spec.zeros.stored_offset else "")
        else:
            sub = Const(
                (WORD - every_byte(offset)) % WORD,
                f"2^32 - 0x{every_byte(offset):08X}: subtracts {offset} "
                + ("(offset binary)" if signed else "(the bias)")
                + " from every byte",
            )
            what = str(offset)
        y = B.emit(
            Opcode.ADD_U32,
            f"y{r}",
            (x, sub),
            f"each byte = 128 + u - {what}, in {span}: no byte borrows, so one add is four byte subtractions",
            "convert",
        )
        sign = Const(BYTE_SIGN, f"bit 7 of every byte: XOR subtracts 128 from a byte in {span} (two's complement)")
        outs.append(B.lop3(f"v{r}", (y, sign, sign), _LUT_XOR, "each byte = the value as a signed byte", "convert"))

    inputs = [
        Input("w", "word", f"one packed 32-bit word: {n} codes of {bits} bits, field j = element {spec.order}[j]")
    ]
    if zeros:
        inputs.append(Input("z", "zero_word", "a word holding each element's stored zero point in its field"))
    kinds = sorted({pl.kind for pl in placements})
    value = "q" + (" - z" if zeros else f" - {offset}" if offset and not signed else "")
    summary = (
        f"fields brought to bytes by {', '.join(kinds)}"
        + (f" with shared shifts {sorted(shifts - {0})}" if shifts - {0} else "")
        + (
            f"; 128 + u in each byte, one add subtracts {'the zero point' if zeros else offset}, XOR 0x80 gives {value}"
            if zeros or offset
            else "; one mask leaves the code in its byte"
        )
    )
    facts = [
        "s8: 8-bit two's complement; four lanes per 32-bit register, element 4r+b in byte b of register r",
        f"every value {value} lies in [{lo_val}, {hi_val}]: one byte holds it",
    ]
    return Plan(spec.name, "bytes", summary, "s8", spec.sm, n, inputs, B.ops, outs, facts)


def bytes_candidates(spec: Spec) -> tuple[list[Plan], list[str]]:
    if not spec.integer_target:
        return [], []
    try:
        return [build_bytes(spec)], []
    except NoBytesPlan as e:
        return [], [f"bytes: {e}"]
