"""What every strategy builds with: the op builder (arith ops of the target format, sub / mul lowered to
fma before sm_90), the Plan's inputs for a spec, and the scale stage with the spec's roundings. Shared by
solver (integer strategies) and solver_float (minifloats, codebooks) so neither imports the other's privates."""

from __future__ import annotations

from collections.abc import Iterable

from ..core.formats import FloatFormat
from ..core.spec import Spec
from ..ir.isa import Const, Opcode, arith_ops
from ..ir.magic import half_pair, pair_const
from ..ir.plan import Input, Op, Stage


def target_format(spec: Spec) -> FloatFormat:
    return spec.target_type


class Emitter:
    """A Plan's ops in emission order; ``emit`` appends one and returns its destination register."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def emit(
        self, opcode: Opcode, dst: str, args: tuple, why: str, stage: Stage, imm: int | None = None, imm_why: str = ""
    ) -> str:
        self.ops.append(Op(opcode, dst, tuple(args), why, stage, imm, imm_why))
        return dst


def shift_regs(B: Emitter, src: str, shifts: Iterable[int], stage: Stage, why: str) -> dict[int, str]:
    """{0: src} and, for each shift s in ``shifts``, the register src >> s (one SHR each, ``why`` its reason)."""
    regs = {0: src}
    for s in sorted(shifts):
        regs[s] = B.emit(Opcode.SHR, f"{src}_s{s}", (src,), why.format(s=s), stage, s, f"shift by {s}")
    return regs


class Builder(Emitter):
    """The float strategies' emitter: the target format's arithmetic, lowered where the arch lacks an op."""

    def __init__(self, spec: Spec, fmt: FloatFormat) -> None:
        super().__init__()
        self.spec, self.fmt = spec, fmt
        self.ar = arith_ops(fmt)

    def has(self, opcode: Opcode) -> bool:
        return opcode.min_sm <= self.spec.sm

    def sub(self, dst: str, a: str, b: str | Const, why: str, stage: Stage) -> str:
        """a - b, as sub where the arch has it, else as fma (bf16x2 sub starts at sm_90)."""
        if self.has(self.ar["sub"]):
            return self.emit(self.ar["sub"], dst, (a, b), why, stage)
        one = pair_const(
            self.fmt, 1, 1, f"1.0 in both halves ({self.ar['sub'].ptx} needs sm_90; fma(x, 1, -c) is the same rounding)"
        )
        if isinstance(b, Const):
            neg = pair_const(
                self.fmt, -self.fmt.decode(b.value & 0xFFFF), -self.fmt.decode(b.value >> 16), "minus " + b.why
            )
            return self.emit(self.ar["fma"], dst, (a, one, neg), why, stage)
        minus_one = pair_const(self.fmt, -1, -1, "-1.0: fma(b, -1, a) = a - b, exact here")
        return self.emit(self.ar["fma"], dst, (b, minus_one, a), why, stage)

    def mul(self, dst: str, a: str, b: str | Const, why: str, stage: Stage) -> str:
        if self.has(self.ar["mul"]):
            return self.emit(self.ar["mul"], dst, (a, b), why, stage)
        neg_zero = Const(
            half_pair(1 << 15, 1 << 15),
            "-0.0 in both halves: fma(a, b, -0) = a*b with one rounding, and keeps the sign of a zero product",
            f"{self.fmt.name}x2",
        )
        return self.emit(self.ar["fma"], dst, (a, b, neg_zero), why + f" ({self.ar['mul'].ptx} needs sm_90)", stage)


def word_names(spec: Spec) -> list[str]:
    return ["w"] if spec.words == 1 else [f"w{k}" for k in range(spec.words)]


def plan_inputs(spec: Spec, pairs: int) -> list[Input]:
    if spec.words == 1:
        ins = [
            Input(
                "w",
                "word",
                f"one packed 32-bit word: {spec.per_word} codes of {spec.source.bits} bits, "
                f"field j = element {spec.order}[j]",
            )
        ]
    else:
        ins = [
            Input(
                n,
                "word",
                f"word {k} of a {spec.words}-word block: {spec.per_word} codes of {spec.source.bits} bits, "
                f"code i at bits [{spec.source.bits}i, {spec.source.bits}i+{spec.source.bits}) of the block",
            )
            for k, n in enumerate(word_names(spec))
        ]
    if spec.zeros.packed:
        doc = (
            "the packed zero-point word of the same columns, same layout"
            if spec.packing.axis == "N"
            else "a word holding each element's stored zero point in its field "
            "(the kernel replicates the column's zero)"
        )
        ins.append(Input("z", "zero_word", doc))
    if spec.scales.block:
        dtype = spec.scales.dtype
        assert dtype is not None, "ScaleSpec.block is true only when a block-scale dtype is set"
        ins.append(Input("sc", "scale_code", f"the block's {dtype.value} scale code (one byte, zero-extended)"))
        if spec.scales.global_scale:
            ins.append(Input("gs", "global_scale", "the tensor's fp32 global scale (its bits)"))
    else:
        ins += [
            Input(f"s{i}", "scale", f"scales of elements {2 * i} and {2 * i + 1} ({spec.target.value}x2)")
            for i in range(pairs)
        ]
    if spec.zeros.dense:
        what = "float zero points" if spec.zeros.mode == "float" else "additive (pre-scaled) zeros"
        ins += [
            Input(f"f{i}", "zero_float", f"{what} of elements {2 * i} and {2 * i + 1} ({spec.target.value}x2)")
            for i in range(pairs)
        ]
    return ins


def scale_stage(B: Builder, diffs: list[str]) -> list[str]:
    """Apply scale (and a float or additive zero) with exactly the roundings the spec documents."""
    mode, fmt = B.spec.zeros.mode, B.fmt.name
    outs = []
    for i, d in enumerate(diffs):
        if mode == "float":
            t = B.sub(
                f"t{i}",
                d,
                f"f{i}",
                f"q - z for a float zero point, rounded to {fmt} (the first of two roundings)",
                "scale",
            )
            outs.append(
                B.mul(f"out{i}", t, f"s{i}", f"(q - z) * scale, rounded to {fmt} (the second rounding)", "scale")
            )
        elif mode == "additive":
            outs.append(
                B.emit(
                    B.ar["fma"],
                    f"out{i}",
                    (d, f"s{i}", f"f{i}"),
                    f"q * scale + b, one rounding to nearest-even {fmt} (fma)",
                    "scale",
                )
            )
        else:
            outs.append(
                B.mul(f"out{i}", d, f"s{i}", f"(code - zero) * scale, rounded once to nearest-even {fmt}", "scale")
            )
    return outs
