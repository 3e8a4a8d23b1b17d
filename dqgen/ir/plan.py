"""The Plan: dqgen's one intermediate representation.

A straight-line program over 32-bit registers that turns one packed 32-bit word into its
dequantized elements, as pairs of target values (``out0`` = elements 0 and 1 of the word's
run, low half first, ...). The solver writes it, ``emulate`` runs it, the templates render
it and ``explain`` prints it. Every op carries its constants and the reason for them.

Ops are grouped in stages, because they run at different rates in a kernel:
- ``zero``: once per (group, word of columns): turns the packed zero word into the registers
  that replace the magic subtraction's constant (the zero folded into the fix-up);
- ``scale_prep``: once per block scale (block-scaled formats only): decodes the scale code (and
  the global scale) into the registers ``scale_regs`` that the scale stage multiplies by;
- ``convert``: per weight word: bits -> exact integer (code - offset - zero) in the target;
- ``scale``: per weight word: one rounding of (integer * scale) to the target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np

from .isa import Const, Opcode, Operand, emulate

Stage = Literal["zero", "scale_prep", "convert", "scale"]
STAGES: tuple[Stage, ...] = ("zero", "scale_prep", "convert", "scale")


@dataclass(frozen=True)
class Op:
    opcode: Opcode
    dst: str
    args: tuple[Operand, ...]
    why: str
    stage: Stage = "convert"
    imm: int | None = None
    imm_why: str = ""

    def __post_init__(self) -> None:
        if len(self.args) != self.opcode.arity:
            raise ValueError(f"{self.opcode.ptx} takes {self.opcode.arity} operands, got {len(self.args)}")
        if self.opcode.has_imm != (self.imm is not None):
            raise ValueError(f"{self.opcode.ptx}: immediate {'missing' if self.opcode.has_imm else 'not allowed'}")

    @property
    def consts(self) -> list[Const]:
        return [a for a in self.args if isinstance(a, Const)]

    @property
    def reads(self) -> list[str]:
        return [a for a in self.args if isinstance(a, str)]


@dataclass(frozen=True)
class Input:
    name: str
    role: Literal["word", "zero_word", "scale", "zero_float", "scale_code", "global_scale"]
    doc: str


@dataclass
class Plan:
    spec_name: str
    strategy: str
    summary: str
    target: str
    sm: int
    elements: int  # elements produced per packing block (one word unless codes straddle words)
    inputs: list[Input]
    ops: list[Op]
    outputs: list[str]  # pair registers, natural element order
    facts: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # other strategies considered, and why they lost
    scale_regs: list[str] = field(default_factory=list)  # what the scale stage multiplies by; [] = the s* inputs

    def __post_init__(self) -> None:
        if not self.scale_regs:
            self.scale_regs = [i.name for i in self.inputs if i.role == "scale"]

    @property
    def words(self) -> list[str]:
        """The input word registers, low word first."""
        return [i.name for i in self.inputs if i.role == "word"]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """Elements (low half, high half) of each output register (16-bit targets)."""
        return [(2 * i, 2 * i + 1) for i in range(len(self.outputs))]

    @property
    def lane_bits(self) -> int:
        """Bits of one output lane: 16 (fp16 / bf16: a pair per register) or 8 (s8: four per register)."""
        return 8 if self.target == "s8" else 16

    @property
    def lanes(self) -> list[tuple[int, ...]]:
        """Elements of each output register, lowest lane first: ``pairs`` for 16-bit targets, and for s8
        elements 4i..4i+3 in bytes 0..3 (the four consecutive k of one wgmma A-fragment register)."""
        per = 32 // self.lane_bits
        return [tuple(range(per * i, per * i + per)) for i in range(len(self.outputs))]

    def stage_ops(self, stage: Stage) -> list[Op]:
        return [op for op in self.ops if op.stage == stage]

    def count(self, stage: Stage) -> int:
        return len(self.stage_ops(stage))

    def per8(self, stage: Stage = "convert") -> Fraction:
        """Instructions per 8 output elements for one stage."""
        return Fraction(self.count(stage) * 8, self.elements)

    @property
    def min_sm(self) -> int:
        return max((op.opcode.min_sm for op in self.ops), default=0)

    def constants(self) -> list[Const]:
        seen: dict[tuple[int, str], Const] = {}
        for op in self.ops:
            for c in op.consts:
                seen.setdefault((c.value, c.kind), c)
        return list(seen.values())

    def magic_words(self) -> set[int]:
        return {c.value for op in self.ops for c in op.consts if c.why.startswith("magic")}

    def check(self) -> None:
        """Every register is written once before it is read; outputs exist; arch allows every op."""
        defined = {i.name for i in self.inputs}
        for op in self.ops:
            for r in op.reads:
                if r not in defined:
                    raise ValueError(f"plan {self.strategy}: {op.opcode.ptx} reads undefined register {r}")
            if op.dst in defined:
                raise ValueError(f"plan {self.strategy}: register {op.dst} written twice")
            defined.add(op.dst)
            if op.opcode.min_sm > self.sm:
                raise ValueError(
                    f"plan {self.strategy}: {op.opcode.ptx} needs sm_{op.opcode.min_sm}, spec targets sm_{self.sm}"
                )
        for o in self.outputs:
            if o not in defined:
                raise ValueError(f"plan {self.strategy}: output {o} is never written")

    def run(self, env: dict[str, np.ndarray], upto: Stage = "scale") -> dict[str, np.ndarray]:
        """Emulate the plan. ``env`` maps input names to uint32 arrays (broadcastable)."""
        regs = {k: np.asarray(v, dtype=np.uint32) for k, v in env.items()}
        last = STAGES.index(upto)
        for op in self.ops:
            if STAGES.index(op.stage) > last:
                continue
            args = [regs[a] if isinstance(a, str) else np.uint32(a.value) for a in op.args]
            args = [np.broadcast_to(a, np.broadcast(*args).shape) if a.ndim == 0 else a for a in map(np.asarray, args)]
            regs[op.dst] = emulate(op.opcode, [np.asarray(a, dtype=np.uint32) for a in args], op.imm)
        return regs

    def to_json(self) -> dict:
        def operand(a: Operand) -> object:
            return a if isinstance(a, str) else {"const": a.hex, "kind": a.kind, "why": a.why}

        return {
            "spec": self.spec_name,
            "strategy": self.strategy,
            "summary": self.summary,
            "target": self.target,
            "sm": self.sm,
            "elements_per_word": self.elements,
            "words": self.words,
            "scale_regs": self.scale_regs,
            "inputs": [{"name": i.name, "role": i.role, "doc": i.doc} for i in self.inputs],
            "ops": [
                {
                    "stage": op.stage,
                    "ptx": op.opcode.ptx,
                    "dst": op.dst,
                    "args": [operand(a) for a in op.args],
                    "imm": None if op.imm is None else f"0x{op.imm:X}",
                    "imm_why": op.imm_why,
                    "why": op.why,
                }
                for op in self.ops
            ],
            "outputs": self.outputs,
            "ops_per_8": {s: float(self.per8(s)) for s in STAGES},
            "facts": self.facts,
            "rejected": self.rejected,
        }
