"""The PTX instructions a Plan may use: their syntax, the oldest arch that has them, and their
bit-exact semantics on the CPU (numpy, vectorised over many 32-bit registers at once).

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


class Opcode(Enum):
    # value: (ptx mnemonic, number of register/const operands, oldest sm, lane format)
    SHR = ("shr.u32", 1, 50, None)
    SHL = ("shl.b32", 1, 50, None)
    SHF_R = ("shf.r.clamp.b32", 2, 50, None)  # (a = low word, b = high word) >> imm, low 32 bits
    ADD_U32 = ("add.u32", 2, 50, None)
    SET_EQ = ("set.eq.u32.u32", 2, 50, None)  # all ones if a == b, else 0
    PRMT = ("prmt.b32", 2, 50, None)
    PRMT_R = ("prmt.b32", 3, 50, None)  # selector from a register: a table lookup, 4 byte indices per op
    LOP3 = ("lop3.b32", 3, 50, None)
    SUB_F16X2 = ("sub.rn.f16x2", 2, 53, "fp16")
    FMA_F16X2 = ("fma.rn.f16x2", 3, 53, "fp16")
    MUL_F16X2 = ("mul.rn.f16x2", 2, 53, "fp16")
    SUB_BF16X2 = ("sub.rn.bf16x2", 2, 90, "bf16")
    FMA_BF16X2 = ("fma.rn.bf16x2", 3, 80, "bf16")
    MUL_BF16X2 = ("mul.rn.bf16x2", 2, 90, "bf16")
    SUB_F32 = ("sub.rn.f32", 2, 20, "fp32")
    MUL_F32 = ("mul.rn.f32", 2, 20, "fp32")
    # conversions; imm selects the 16-bit half of the source register (0 low, 1 high)
    CVT_F16X2_E4M3X2 = ("cvt.rn.f16x2.e4m3x2", 1, 89, None)
    CVT_F16X2_E5M2X2 = ("cvt.rn.f16x2.e5m2x2", 1, 89, None)
    CVT_F32_F16 = ("cvt.f32.f16", 1, 53, None)
    CVT_F32_BF16 = ("cvt.f32.bf16", 1, 90, None)
    # two fp32 (a -> low half, b -> high half) rounded to nearest-even into one 16-bit pair
    CVT_F16X2_F32 = ("cvt.rn.f16x2.f32", 2, 80, None)
    CVT_BF16X2_F32 = ("cvt.rn.bf16x2.f32", 2, 80, None)

    @property
    def ptx(self) -> str:
        return self.value[0]

    @property
    def arity(self) -> int:
        return self.value[1]

    @property
    def min_sm(self) -> int:
        return self.value[2]

    @property
    def lane_format(self) -> FloatFormat | None:
        name = self.value[3]
        return {"fp16": FP16, "bf16": BF16, "fp32": FP32}.get(name) if name else None

    @property
    def has_imm(self) -> bool:
        return self in (Opcode.SHR, Opcode.SHL, Opcode.SHF_R, Opcode.PRMT, Opcode.LOP3) or self.half_source

    @property
    def half_source(self) -> bool:
        """Reads one 16-bit half of its register (the immediate picks which)."""
        return self in (Opcode.CVT_F16X2_E4M3X2, Opcode.CVT_F16X2_E5M2X2, Opcode.CVT_F32_F16, Opcode.CVT_F32_BF16)

    @property
    def is_float(self) -> bool:
        return self.lane_format is not None

    @property
    def f32_operands(self) -> tuple[bool, list[bool]]:
        """Whether the destination and each source are fp32 registers (inline-asm constraint "f")."""
        if self.lane_format is FP32:
            return True, [True] * self.arity
        if self in (Opcode.CVT_F32_F16, Opcode.CVT_F32_BF16):
            return True, [False]
        if self in (Opcode.CVT_F16X2_F32, Opcode.CVT_BF16X2_F32):
            return False, [True, True]
        return False, [False] * self.arity

    def asm(self, imm: int | None) -> str:
        """The PTX text, with %0 the destination and %1.. the operands in Plan order."""
        ops = ", ".join(f"%{i + 1}" for i in range(self.arity))
        if self.half_source:
            part = "lo_" if not imm else "hi_"
            return f"{{ .reg .b16 lo_, hi_; mov.b32 {{lo_, hi_}}, %1; {self.ptx} %0, {part}; }}"
        if self in (Opcode.CVT_F16X2_F32, Opcode.CVT_BF16X2_F32):
            return f"{self.ptx} %0, %2, %1;"  # PTX puts its first source in the upper half
        if self.has_imm:
            return f"{self.ptx} %0, {ops}, {imm if self in (Opcode.SHR, Opcode.SHL, Opcode.SHF_R) else f'0x{imm:X}'};"
        return f"{self.ptx} %0, {ops};"


def arith_ops(fmt: FloatFormat) -> dict[str, Opcode]:
    """The paired-lane arithmetic opcodes of a 16-bit target format."""
    if fmt is FP16:
        return {"sub": Opcode.SUB_F16X2, "fma": Opcode.FMA_F16X2, "mul": Opcode.MUL_F16X2}
    if fmt is BF16:
        return {"sub": Opcode.SUB_BF16X2, "fma": Opcode.FMA_BF16X2, "mul": Opcode.MUL_BF16X2}
    raise ValueError(f"no paired arithmetic for {fmt.name}")


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


def emulate(op: Opcode, args: list[np.ndarray], imm: int | None) -> np.ndarray:
    if op is Opcode.SHR:
        return emu_shr(args[0], imm or 0)
    if op is Opcode.SHL:
        return (
            (args[0].astype(np.uint64) << np.uint64(imm or 0)).astype(np.uint64).__and__(np.uint64(MASK32)).astype(U32)
        )
    if op is Opcode.SHF_R:
        n = min(imm or 0, 32)
        wide = args[0].astype(np.uint64) | (args[1].astype(np.uint64) << np.uint64(32))
        return ((wide >> np.uint64(n)) & np.uint64(MASK32)).astype(U32)
    if op is Opcode.ADD_U32:
        return ((args[0].astype(np.uint64) + args[1].astype(np.uint64)) & np.uint64(MASK32)).astype(U32)
    if op is Opcode.SET_EQ:
        return np.where(args[0] == args[1], U32(MASK32), U32(0)).astype(U32)
    if op.half_source:
        half = (args[0] >> U32(16 * (imm or 0))) & U32(0xFFFF)
        if op in (Opcode.CVT_F16X2_E4M3X2, Opcode.CVT_F16X2_E5M2X2):
            t = _fp8_to_f16_table("e4m3" if op is Opcode.CVT_F16X2_E4M3X2 else "e5m2")
            return (t[half & U32(0xFF)] | (t[half >> U32(8)] << U32(16))).astype(U32)
        return _f16_to_f32(half, FP16 if op is Opcode.CVT_F32_F16 else BF16)
    if op in (Opcode.CVT_F16X2_F32, Opcode.CVT_BF16X2_F32):
        return _cvt_pack(FP16 if op is Opcode.CVT_F16X2_F32 else BF16, args[0], args[1])
    if op is Opcode.PRMT:
        assert imm is not None
        return emu_prmt(args[0], args[1], imm)
    if op is Opcode.PRMT_R:
        return emu_prmt_r(args[0], args[1], args[2])
    if op is Opcode.LOP3:
        assert imm is not None
        return emu_lop3(args[0], args[1], args[2], imm)
    kind = op.name.split("_")[0].lower()
    fmt = op.lane_format
    assert fmt is not None
    if fmt is FP32:
        return _float_op(kind, FP32, *args)
    return _paired(kind, fmt, *args)
