"""``dqgen explain``: the Plan, in words a newcomer can follow.

Besides the constants and their derivations, it draws every integer register bit by bit,
found by running the integer ops on *symbolic* bits: each bit is a constant, a bit of some
element's code (letter a = element 0, b = element 1, ...; upper case = that bit inverted), a
bit of the zero word (digit = element), or '.' (a bit that no later op looks at).
"""

from __future__ import annotations

from fractions import Fraction

from ..check.anchors import published
from ..check.prove import ProofResult
from ..core.formats import FORMATS, FloatFormat
from ..core.formula import ValueFormula, prose
from ..core.printable import printable
from ..core.spec import Spec
from ..ir.isa import Bit, Const, const_bits
from ..ir.magic import fmt_num
from ..ir.plan import STAGES, Op, Plan
from ..layout.layout import Layout


def _word_bits(spec: Spec, kind: str, word: int = 0) -> list[Bit]:
    lay = Layout.of(spec)
    return [(kind, lay.element_at(word, i), False) for i in range(32)]


def symbolic(plan: Plan, spec: Spec) -> dict[str, list[Bit] | None]:
    """Bits of every integer register; None for float-valued registers."""
    regs: dict[str, list[Bit] | None] = {"w": _word_bits(spec, "w"), "z": _word_bits(spec, "z")}
    for k, name in enumerate(plan.words):
        regs[name] = _word_bits(spec, "w", k)

    def get(a: str | Const) -> list[Bit] | None:
        return const_bits(a.value) if isinstance(a, Const) else regs.get(a)

    for op in plan.ops:
        form = op.opcode.row.symbolic  # None for arithmetic, table lookups and conversions: no bit diagram
        args = [bits for bits in map(get, op.args) if bits is not None]
        regs[op.dst] = form(args, op.imm) if form is not None and len(args) == len(op.args) else None
    return regs


def _bit_char(bit: Bit) -> str:
    if bit[0] == "c":
        return str(bit[1])
    if bit[0] == "?":
        return "."
    if bit[0] == "w":
        ch = "abcdefghijklmnopqrstuvwxyz[]{}<>"[bit[1]]
        return ch.upper() if bit[2] else ch
    return str(bit[1])


def diagram(bits: list[Bit]) -> str:
    """MSB first, in nibbles, the two 16-bit halves separated by '|'."""
    chars = [_bit_char(b) for b in reversed(bits)]
    nibbles = ["".join(chars[i : i + 4]) for i in range(0, 32, 4)]
    return " ".join(nibbles[:4]) + " | " + " ".join(nibbles[4:])


def const_text(c: Const, lane: FloatFormat | None) -> str:
    text = c.hex
    fmt = FORMATS.get(c.kind.removesuffix("x2")) if c.kind != "b32" else None
    if fmt is None and c.why.startswith("magic") and lane is not None:
        fmt = lane
    if fmt is not None and fmt.width == 16:
        lo, hi = fmt.decode(c.value & 0xFFFF), fmt.decode(c.value >> 16)
        lo_text = fmt_num(lo) if isinstance(lo, Fraction) else lo
        hi_text = fmt_num(hi) if isinstance(hi, Fraction) else hi
        text += f" = {fmt.name}x2 {{lo {lo_text}, hi {hi_text}}}"
    elif fmt is not None:
        v = fmt.decode(c.value)
        text += f" = {fmt.name} {fmt_num(v) if isinstance(v, Fraction) else v}"
    return f"{text}  ({c.why})"


def dec(x: Fraction | int) -> str:
    """A count per 8 outputs as a short decimal (8.5, 13.5)."""
    return f"{float(x):g}"


def _op_line(op: Op) -> str:
    args = [a if isinstance(a, str) else a.hex for a in op.args]
    return f"{op.opcode.ptx} {op.dst}, {', '.join(op.opcode.operand_text(args, op.imm))};"


STAGE_TITLES = {
    "zero": "once per zero-point word (per group of columns): zero points folded into the fix-up",
    "scale_prep": "once per block scale: the scale code decoded (shared by the block's elements)",
    "convert": "per weight {unit}: bits -> exact values in the target format",
    "convert_s8": "per weight {unit}: bits -> exact int8 values, four per register",
    "scale": "per weight {unit}: multiply by the group scale, one rounding",
}


def render(spec: Spec, plan: Plan, proof: ProofResult | None) -> str:
    fmt = FORMATS.get(plan.target)  # None for s8 lanes: their constants are bit patterns
    b = spec.source.bits
    lines: list[str] = []
    add = lines.append
    # the description is user text: no terminal escapes reach the screen
    add(f"dqgen explain: {spec.name}" + (f" - {printable(spec.description.strip())}" if spec.description else ""))
    add("")
    src = spec.source
    codebook = src.codebook if isinstance(src.codebook, str) else f"{len(src.codebook_values)} user values"
    what = {
        "float": f"{src.format if src.format else ''} minifloat",
        "codebook": f"codebook ({codebook})",
    }.get(src.kind.value, src.kind.value)
    layout = (
        f"{spec.per_word} per 32-bit word, packed along {spec.packing.axis}; field j holds element {spec.order}[j]"
        if spec.words == 1
        else f"{spec.per_word} per {spec.words}-word block (w0 lowest), packed along {spec.packing.axis}; "
        f"code i at block bits [{b}i, {b}i+{b}), some straddling two words"
    )
    add(
        f"Source   {src.short}: {b}-bit {what} codes"
        + (f", value = q - {src.bias}" if src.bias is not None else "")
        + f"; {layout}"
    )
    value = (
        f"s8( {'q - z' if spec.zeros.packed else ValueFormula.of(spec).code_text()} ), exact, four lanes per register; "
        "the group scale multiplies the W4A8 GEMM's int32 sums in fp32"
        if spec.integer_target
        else prose(ValueFormula.of(spec))
    )
    g = (
        "per-channel"
        if spec.scales.group_size == -1
        else "groups of K / (rows of scales) rows of K (group_size auto)"
        if spec.scales.group_size == "auto"
        else f"groups of {spec.scales.group_size} rows of K"
    )
    if spec.act_order:
        g += " chosen per row by g_idx (act-order)"
    add(f"Value    out = {value}; scales {g}; target arch {spec.arch}")
    add("")
    add("Integer-format facts used" if spec.integer_target else "Float-format facts used")
    for f in plan.facts:
        add(f"  - {f}")
    add("")
    add("How to read the bit diagrams: bit 31 on the left, '|' between the high and low 16-bit halves;")
    add(
        "  a, b, c.. = bits of element 0, 1, 2..'s code (upper case = inverted; elements 26-31: [ ] { } < >), "
        "0-7 in a zero word = that element's zero"
    )
    add("  bits, '.' = bits nobody reads; 0/1 = constant bits.")
    regs = symbolic(plan, spec)
    for name in plan.words:
        word_bits = regs[name]
        assert word_bits is not None  # input words are integer registers: symbolic() gives them bits
        add(f"  {name:<6} = {diagram(word_bits)}")
    if spec.zeros.packed:
        add(f"  z      = {diagram(_word_bits(spec, 'z'))}")
    add("")
    add(f"Strategy {plan.strategy}: {plan.summary}")
    for stage in STAGES:
        ops = plan.stage_ops(stage)
        if not ops:
            continue
        add("")
        unit = "word" if spec.words == 1 else "block"
        if stage == "scale_prep":
            add(
                f"Stage {stage} - {STAGE_TITLES[stage]} ({len(ops)} ops per block of {spec.scales.group_size} elements)"
            )
        else:
            title = "convert_s8" if stage == "convert" and spec.integer_target else stage
            add(
                f"Stage {stage} - {STAGE_TITLES[title].format(unit=unit)} "
                f"({len(ops)} ops per {unit}, {dec(plan.per8(stage))} per 8 outputs)"
            )
        for n, op in enumerate(ops, 1):
            add(f"  [{n}] {_op_line(op)}")
            add(f"       why: {op.why}")
            if op.imm_why:
                label = op.opcode.row.imm_label
                add(f"       {label}: {op.imm_why}")
            for c in op.consts:
                add(f"       const {const_text(c, op.opcode.lane_format or fmt)}")
            bits = regs.get(op.dst)
            if bits is not None:
                add(f"       {op.dst:<6} = {diagram(bits)}")
    add("")
    pub = published(spec)
    conv = dec(plan.per8("convert"))
    add(
        f"Ops per 8 outputs: convert {conv}"
        + (f" (best published: {dec(pub[0])}, {pub[1]})" if pub else " (no published figure)")
        + f"; scale {dec(plan.per8('scale'))}"
        + (
            f"; zero-point preparation {plan.count('zero')} per zero word, shared by a whole group"
            if plan.count("zero")
            else ""
        )
        + (
            f"; block-scale preparation {plan.count('scale_prep')} per block scale, "
            f"shared by its {spec.scales.group_size} elements"
            if plan.count("scale_prep")
            else ""
        )
    )
    if plan.rejected:
        add("Also considered:")
        for r in plan.rejected:
            add(f"  - {r}")
    if proof is not None:
        add("")
        add(f"Proof: {proof.line()}")
        for f in proof.failures:
            add(f"  ! {f}")
    return "\n".join(lines)
