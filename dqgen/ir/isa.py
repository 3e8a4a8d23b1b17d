"""The PTX instructions a Plan may use, as one table: each ``Opcode`` is a row (``OpRow``) holding its PTX
mnemonic, arity, the oldest arch that has it, its immediate kind, which operands are fp32 registers, its
bit-exact semantics on the CPU (numpy, vectorised over many 32-bit registers at once) and its symbolic
bit-level form for ``explain``. The renderer, the emulator and ``explain`` read the row and nothing else,
so adding an opcode is one row (plus its emulation test in tests/test_isa.py).

Float arithmetic is emulated exactly as PTX defines it for ``.rn``: the exact result rounded
once to nearest-even. The exact result is formed in float64 (products of two <=24-bit
significands are exact there) and a sum's rounding error is recovered with TwoSum, so the
float64 intermediate is rounded *to odd*; rounding that to a format with at most 24
significant bits is then the correctly rounded result (round-to-odd needs p' >= p + 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Literal

import numpy as np

from ..core.formats import BF16, FP16, FP32, FloatFormat

U32 = np.uint32
MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Const:
    """A 32-bit immediate and where it comes from."""

    value: int
    why: str
    kind: str = "b32"  # how to display it: b32 | f16x2 | bf16x2 | f32

    def __post_init__(self) -> None:
        if not 0 <= self.value <= MASK32:
            raise ValueError(f"constant 0x{self.value:x} does not fit 32 bits")

    @property
    def hex(self) -> str:
        return f"0x{self.value:08X}"


Operand = str | Const


# ----------------------------------------------------------------------------- derivations


def lut_of(fn: Callable[[int, int, int], int]) -> int:
    """LOP3's immLut: the boolean function evaluated on the canonical inputs a=0xF0, b=0xCC, c=0xAA."""
    return fn(0xF0, 0xCC, 0xAA) & 0xFF


def prmt_selector(picks: list[int]) -> int:
    """PRMT selector from the wanted byte moves: ``picks[k]`` is the source byte (0-3 from a,
    4-7 from b, +8 to replicate that byte's sign bit) for result byte k."""
    assert len(picks) == 4 and all(0 <= p < 16 for p in picks)
    return sum(p << (4 * k) for k, p in enumerate(picks))


# ----------------------------------------------------------------------------- integer semantics


def _u32(x: np.ndarray | int) -> np.ndarray:
    return np.asarray(x, dtype=np.uint64).astype(U32) if not isinstance(x, np.ndarray) else x.astype(U32, copy=False)


def emu_shr(a: np.ndarray, n: int) -> np.ndarray:
    return (a >> U32(n)) if n < 32 else np.zeros_like(a)


def emu_prmt(a: np.ndarray, b: np.ndarray, sel: int) -> np.ndarray:
    src = [(a >> U32(8 * k)) & U32(0xFF) for k in range(4)] + [(b >> U32(8 * k)) & U32(0xFF) for k in range(4)]
    out = np.zeros(np.broadcast(a, b).shape, dtype=U32)
    for k in range(4):
        s = (sel >> (4 * k)) & 0xF
        byte = src[s & 7]
        if s & 8:  # replicate the selected byte's sign bit
            byte = np.where(byte & U32(0x80), U32(0xFF), U32(0))
        out |= (byte.astype(U32) << U32(8 * k)).astype(U32)
    return out


def emu_prmt_r(a: np.ndarray, b: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """PRMT with a per-register selector (its low 16 bits: 4 nibbles)."""
    a, b, sel = np.broadcast_arrays(a, b, sel)
    src = [(a >> U32(8 * k)) & U32(0xFF) for k in range(4)] + [(b >> U32(8 * k)) & U32(0xFF) for k in range(4)]
    stack = np.stack(src)  # [8, ...]
    out = np.zeros(a.shape, dtype=U32)
    for k in range(4):
        s = (sel >> U32(4 * k)) & U32(0xF)
        byte = np.take_along_axis(stack, (s & U32(7)).astype(np.int64)[None], axis=0)[0]
        byte = np.where(s & U32(8), np.where(byte & U32(0x80), U32(0xFF), U32(0)), byte)
        out |= (byte.astype(U32) << U32(8 * k)).astype(U32)
    return out


def emu_lop3(a: np.ndarray, b: np.ndarray, c: np.ndarray, lut: int) -> np.ndarray:
    out = np.zeros(np.broadcast(a, b, c).shape, dtype=U32)
    na, nb, nc = ~a, ~b, ~c
    for i in range(8):
        if (lut >> i) & 1:
            out |= (a if i & 4 else na) & (b if i & 2 else nb) & (c if i & 1 else nc)
    return out.astype(U32)


# ----------------------------------------------------------------------------- float semantics


def _round_to_odd_sum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    s = x + y
    bp = s - x
    err = (x - (s - bp)) + (y - bp)  # TwoSum: s + err == x + y exactly
    finite = np.isfinite(s)
    even = (s.view(np.int64) & 1) == 0
    fix = finite & (err != 0) & even
    toward = np.where(err > 0, np.nextafter(s, np.inf), np.nextafter(s, -np.inf))
    return np.where(fix, toward, s)


def _canonical_nan(bits: np.ndarray, vals: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    nan = {16: 0x7FFF, 32: 0x7FFFFFFF}[fmt.width]
    return np.where(np.isnan(vals), U32(nan), bits).astype(U32)


def _float_op(kind: str, fmt: FloatFormat, *xs: np.ndarray) -> np.ndarray:
    vals = [fmt.values_of(x) for x in xs]
    with np.errstate(all="ignore"):
        if kind == "sub":
            r = _round_to_odd_sum(vals[0], -vals[1])
        elif kind == "mul":
            r = vals[0] * vals[1]  # exact: <= 48 significant bits
        elif kind == "fma":
            r = _round_to_odd_sum(vals[0] * vals[1], vals[2])
        else:
            raise ValueError(kind)
        return _canonical_nan(fmt.round_from_f64(r), r, fmt)


def _paired(kind: str, fmt: FloatFormat, *regs: np.ndarray) -> np.ndarray:
    lo = _float_op(kind, fmt, *[r & U32(0xFFFF) for r in regs])
    hi = _float_op(kind, fmt, *[r >> U32(16) for r in regs])
    return (lo | (hi << U32(16))).astype(U32)


def _table(fn: Callable[[int], int], n: int) -> np.ndarray:
    return np.array([fn(c) for c in range(n)], dtype=U32)


@cache
def _fp8_to_f16_table(name: str) -> np.ndarray:
    from ..core.formats import MINIFLOATS, exact_bits

    mf = MINIFLOATS[name]
    return _table(lambda c: exact_bits(FP16, mf.decode(c)), 256)


def _f16_to_f32(bits: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    vals = fmt.values_of(bits)
    out = FP32.bits_of(vals)  # exact widening
    return _canonical_nan(out, vals, FP32)


def _cvt_pack(fmt: FloatFormat, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    a, b = FP32.values_of(lo), FP32.values_of(hi)
    ra = _canonical_nan(fmt.round_from_f64(a), a, fmt)
    rb = _canonical_nan(fmt.round_from_f64(b), b, fmt)
    return (ra | (rb << U32(16))).astype(U32)


# ----------------------------------------------------------------------------- the remaining semantics


def _shl(args: list[np.ndarray], imm: int | None) -> np.ndarray:
    wide = args[0].astype(np.uint64) << np.uint64(imm or 0)
    return (wide & np.uint64(MASK32)).astype(U32)


def _shf_r(args: list[np.ndarray], imm: int | None) -> np.ndarray:
    n = min(imm or 0, 32)
    wide = args[0].astype(np.uint64) | (args[1].astype(np.uint64) << np.uint64(32))
    return ((wide >> np.uint64(n)) & np.uint64(MASK32)).astype(U32)


def _add_u32(args: list[np.ndarray], imm: int | None) -> np.ndarray:
    return ((args[0].astype(np.uint64) + args[1].astype(np.uint64)) & np.uint64(MASK32)).astype(U32)


def _set_eq(args: list[np.ndarray], imm: int | None) -> np.ndarray:
    return np.where(args[0] == args[1], U32(MASK32), U32(0)).astype(U32)


def _half(args: list[np.ndarray], imm: int | None) -> np.ndarray:
    """The 16-bit half of the source register that the immediate picks (0 low, 1 high)."""
    return (args[0] >> U32(16 * (imm or 0))) & U32(0xFFFF)


def _cvt_fp8x2(name: str) -> Emulation:
    def run(args: list[np.ndarray], imm: int | None) -> np.ndarray:
        t, half = _fp8_to_f16_table(name), _half(args, imm)
        return (t[half & U32(0xFF)] | (t[half >> U32(8)] << U32(16))).astype(U32)

    return run


def _cvt_widen(fmt: FloatFormat) -> Emulation:
    return lambda args, imm: _f16_to_f32(_half(args, imm), fmt)


def _cvt_narrow_pair(fmt: FloatFormat) -> Emulation:
    return lambda args, imm: _cvt_pack(fmt, args[0], args[1])


def _arith(kind: str, fmt: FloatFormat) -> Emulation:
    if fmt is FP32:
        return lambda args, imm: _float_op(kind, FP32, *args)
    return lambda args, imm: _paired(kind, fmt, *args)


def _need_imm(imm: int | None) -> int:
    assert imm is not None
    return imm


# ----------------------------------------------------------------------------- symbolic bits (explain)

#: One bit of a register seen symbolically: ("c", 0|1) a constant; (kind, element, inverted) a bit of an
#: element's code (kind "w") or of its zero point (kind "z"); ("?",) a bit no simple form describes.
Bit = tuple
Bits = list[Bit]


def const_bits(value: int) -> Bits:
    return [("c", (value >> i) & 1) for i in range(32)]


def _lop3_bit(a: Bit, b: Bit, c: Bit, lut: int) -> Bit:
    ins = [a, b, c]
    sym = [i for i, x in enumerate(ins) if x[0] != "c"]

    def g(vals: list[int]) -> int:
        return (lut >> ((vals[0] << 2) | (vals[1] << 1) | vals[2])) & 1

    def table(k: int) -> list[int]:
        """The output for every assignment of the symbolic inputs, input ``k`` varying fastest."""
        others = [i for i in sym if i != k]
        out = []
        for rest in range(1 << len(others)):
            for v in (0, 1):
                vals = [x[1] if x[0] == "c" else 0 for x in ins]
                for j, i in enumerate(others):
                    vals[i] = rest >> j & 1
                vals[k] = v
                out.append(g(vals))
        return out

    # the inputs the bit depends on, given the constant bits (a mask constant often makes one register moot)
    live = [k for k in sym if any(t[0] != t[1] for t in zip(table(k)[::2], table(k)[1::2], strict=True))]
    if len(live) > 1:
        return ("?",)
    if not live:
        return ("c", g([x[1] if x[0] == "c" else 0 for x in ins]))
    k = live[0]
    lo = table(k)[0]  # k is the only live input: its value 0 gives the bit (1 gives the other)
    s = ins[k]
    if s[0] == "?":
        return s
    return (s[0], s[1], (not s[2]) if lo == 1 else s[2])


def _sym_shr(args: list[Bits], imm: int | None) -> Bits:
    n = imm or 0
    return [args[0][i + n] if i + n < 32 else ("c", 0) for i in range(32)]


def _sym_shl(args: list[Bits], imm: int | None) -> Bits:
    n = imm or 0
    return [args[0][i - n] if i >= n else ("c", 0) for i in range(32)]


def _sym_shf_r(args: list[Bits], imm: int | None) -> Bits:
    n, wide = imm or 0, args[0] + args[1]
    return [wide[i + n] for i in range(32)]


def _sym_prmt(args: list[Bits], imm: int | None) -> Bits:
    src, out = args[0] + args[1], []
    for k in range(4):
        s = ((imm or 0) >> (4 * k)) & 0xF
        byte = src[8 * (s & 7) : 8 * (s & 7) + 8]
        out += [byte[7]] * 8 if s & 8 else byte
    return out


def _sym_lop3(args: list[Bits], imm: int | None) -> Bits:
    return [_lop3_bit(args[0][i], args[1][i], args[2][i], imm or 0) for i in range(32)]


# ----------------------------------------------------------------------------- the table

Emulation = Callable[[list[np.ndarray], "int | None"], np.ndarray]
Symbolic = Callable[[list[Bits], "int | None"], Bits]
#: none: no immediate; shift: a bit count, printed in decimal; hex: a selector or truth table, printed in hex;
#: half: picks the 16-bit half of the (only) source register, 0 low, 1 high.
ImmKind = Literal["none", "shift", "hex", "half"]


@dataclass(frozen=True)
class OpRow:
    """Every fact about one PTX instruction that dqgen uses."""

    ptx: str  # mnemonic with its type suffixes
    arity: int  # register/constant operands, in Plan order
    min_sm: int  # oldest arch that has it
    imm: ImmKind
    emulate: Emulation  # bit-exact semantics on uint32 arrays
    lane: FloatFormat | None = None  # the float format of its arithmetic lanes; None: not float arithmetic
    f32_dst: bool = False  # destination is an fp32 register (inline-asm constraint "f")
    f32_src: bool = False  # every source is an fp32 register
    swap_sources: bool = False  # PTX takes the two sources in the reverse of the Plan's (lo, hi) order
    symbolic: Symbolic | None = None  # bit-level form for explain's diagrams; None: no diagram
    imm_label: str = "operand"  # what explain calls the immediate


class Opcode(Enum):
    SHR = OpRow("shr.u32", 1, 50, "shift", lambda a, i: emu_shr(a[0], i or 0), symbolic=_sym_shr, imm_label="amount")
    SHL = OpRow("shl.b32", 1, 50, "shift", _shl, symbolic=_sym_shl, imm_label="amount")
    # (a = low word, b = high word) >> imm, low 32 bits
    SHF_R = OpRow("shf.r.clamp.b32", 2, 50, "shift", _shf_r, symbolic=_sym_shf_r, imm_label="amount")
    ADD_U32 = OpRow("add.u32", 2, 50, "none", _add_u32)
    SET_EQ = OpRow("set.eq.u32.u32", 2, 50, "none", _set_eq)  # all ones if a == b, else 0
    PRMT = OpRow(
        "prmt.b32",
        2,
        50,
        "hex",
        lambda a, i: emu_prmt(a[0], a[1], _need_imm(i)),
        symbolic=_sym_prmt,
        imm_label="selector",
    )
    # selector from a register: a table lookup, 4 byte indices per op
    PRMT_R = OpRow("prmt.b32", 3, 50, "none", lambda a, i: emu_prmt_r(a[0], a[1], a[2]))
    LOP3 = OpRow(
        "lop3.b32",
        3,
        50,
        "hex",
        lambda a, i: emu_lop3(a[0], a[1], a[2], _need_imm(i)),
        symbolic=_sym_lop3,
        imm_label="immLut",
    )
    SUB_F16X2 = OpRow("sub.rn.f16x2", 2, 53, "none", _arith("sub", FP16), lane=FP16)
    FMA_F16X2 = OpRow("fma.rn.f16x2", 3, 53, "none", _arith("fma", FP16), lane=FP16)
    MUL_F16X2 = OpRow("mul.rn.f16x2", 2, 53, "none", _arith("mul", FP16), lane=FP16)
    SUB_BF16X2 = OpRow("sub.rn.bf16x2", 2, 90, "none", _arith("sub", BF16), lane=BF16)
    FMA_BF16X2 = OpRow("fma.rn.bf16x2", 3, 80, "none", _arith("fma", BF16), lane=BF16)
    MUL_BF16X2 = OpRow("mul.rn.bf16x2", 2, 90, "none", _arith("mul", BF16), lane=BF16)
    SUB_F32 = OpRow("sub.rn.f32", 2, 20, "none", _arith("sub", FP32), lane=FP32, f32_dst=True, f32_src=True)
    MUL_F32 = OpRow("mul.rn.f32", 2, 20, "none", _arith("mul", FP32), lane=FP32, f32_dst=True, f32_src=True)
    # conversions of one 16-bit half of the source register
    CVT_F16X2_E4M3X2 = OpRow("cvt.rn.f16x2.e4m3x2", 1, 89, "half", _cvt_fp8x2("e4m3"))
    CVT_F16X2_E5M2X2 = OpRow("cvt.rn.f16x2.e5m2x2", 1, 89, "half", _cvt_fp8x2("e5m2"))
    CVT_F32_F16 = OpRow("cvt.f32.f16", 1, 53, "half", _cvt_widen(FP16), f32_dst=True)
    CVT_F32_BF16 = OpRow("cvt.f32.bf16", 1, 90, "half", _cvt_widen(BF16), f32_dst=True)
    # two fp32 (Plan order: low half, high half) rounded to nearest-even into one 16-bit pair; PTX puts its
    # first source in the upper half
    CVT_F16X2_F32 = OpRow("cvt.rn.f16x2.f32", 2, 80, "none", _cvt_narrow_pair(FP16), f32_src=True, swap_sources=True)
    CVT_BF16X2_F32 = OpRow("cvt.rn.bf16x2.f32", 2, 80, "none", _cvt_narrow_pair(BF16), f32_src=True, swap_sources=True)

    @property
    def row(self) -> OpRow:
        return self.value

    @property
    def ptx(self) -> str:
        return self.row.ptx

    @property
    def arity(self) -> int:
        return self.row.arity

    @property
    def min_sm(self) -> int:
        return self.row.min_sm

    @property
    def lane_format(self) -> FloatFormat | None:
        return self.row.lane

    @property
    def has_imm(self) -> bool:
        return self.row.imm != "none"

    @property
    def is_float(self) -> bool:
        return self.row.lane is not None

    def operand_text(self, args: list[str], imm: int | None) -> list[str]:
        """The sources as PTX lists them (PTX order, the half a cvt reads, the immediate last); explain
        prints this and ``asm`` renders it, so the two cannot disagree."""
        row = self.row
        out = list(reversed(args)) if row.swap_sources else list(args)
        if row.imm == "half":
            out[0] += ".hi" if imm else ".lo"
        elif row.imm == "shift":
            out.append(f"{imm}")
        elif row.imm == "hex":
            out.append(f"0x{_need_imm(imm):X}")
        return out

    def asm(self, imm: int | None) -> str:
        """The PTX text, with %0 the destination and %1.. the operands in Plan order."""
        regs = [f"%{i + 1}" for i in range(self.arity)]
        if self.row.imm == "half":
            # PTX cvt reads a .b16 register: split the 32-bit one and name the half the immediate picks
            part = "hi_" if imm else "lo_"
            return f"{{ .reg .b16 lo_, hi_; mov.b32 {{lo_, hi_}}, %1; {self.ptx} %0, {part}; }}"
        return f"{self.ptx} %0, {', '.join(self.operand_text(regs, imm))};"


def emulate(op: Opcode, args: list[np.ndarray], imm: int | None) -> np.ndarray:
    return op.row.emulate(args, imm)


def arith_ops(fmt: FloatFormat) -> dict[str, Opcode]:
    """The paired-lane arithmetic opcodes of a 16-bit target format, by operation (sub, fma, mul): read off the
    table's rows whose lanes are in ``fmt``."""
    ops = {op.ptx.split(".")[0]: op for op in Opcode if op.row.lane is fmt and fmt.width == 16}
    if not ops:
        raise ValueError(f"no paired arithmetic for {fmt.name}")
    return ops
