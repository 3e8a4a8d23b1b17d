"""Render a Plan to CUDA C++ with inline PTX, through the Jinja templates in ``templates/``.

The templates receive only validated values: register names matching ``[a-z][a-z0-9_]*``,
integers (printed here as hex literals), opcodes from ``dqgen.ir.isa`` and spec fields that the
schema has already constrained. Comments are built from the Plan's derivations, with anything
that could end a comment or a line removed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import jinja2

from ..core.formula import ValueFormula, kernel_scale_formula, kernel_value_doc, kernel_zeros_doc
from ..core.spec import Spec
from ..ir.isa import Const, prmt_selector
from ..ir.magic import fmt_num, half_pair
from ..ir.plan import Plan
from ..layout.layout import Layout

#: Shipped inside the package (wheel and checkout alike).
TEMPLATES = Path(__file__).resolve().parent / "templates"
REG = re.compile(r"^[a-z][a-z0-9_]*$")
BLOCK = 256


@functools.lru_cache(maxsize=1)
def template_env() -> jinja2.Environment:
    """The one Jinja environment of the templates (dequant kernels and the GRU's)."""
    # One environment per process: Jinja caches parsed templates in it, so a second render skips the parse.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
    )


def _comment(text: str) -> str:
    return re.sub(r"[^\x20-\x7e]", " ", text).replace("*/", "* /").replace("\\", "/")


def _reg(name: str) -> str:
    if not REG.match(name):
        raise ValueError(f"invalid register name {name!r} in plan")
    return name


def _operand(a: str | Const) -> str:
    return _reg(a) if isinstance(a, str) else f"0x{a.value:08X}u"


@dataclass
class RenderedOp:
    dst: str
    stmt: str  # one C++ statement: the inline asm that computes dst
    comments: list[str]


def _render_op(op) -> RenderedOp:
    comments = [_comment(op.why)]
    for c in op.consts:
        comments.append(_comment(f"0x{c.value:08X}: {c.why}"))
    if op.imm_why:
        comments.append(_comment(op.imm_why))
    dst = _reg(op.dst)
    row = op.opcode.row
    ins = ", ".join(f'"f"(__uint_as_float({_operand(a)}))' if row.f32_src else f'"r"({_operand(a)})' for a in op.args)
    text = op.opcode.asm(None if op.imm is None else int(op.imm))
    if row.f32_dst:
        stmt = f'{dst} = __float_as_uint([&] {{ float r_; asm("{text}" : "=f"(r_) : {ins}); return r_; }}());'
    else:
        stmt = f'asm("{text}" : "=r"({dst}) : {ins});'
    return RenderedOp(dst, stmt, comments)


def _check_interface(spec: Spec, plan: Plan) -> None:
    """What the templates rely on beyond ``Plan.check``: the word inputs the spec's packing block
    needs, block-scale inputs exactly when the spec has block scales, and each stage reading only
    what its device function receives."""
    want_words = ["w"] if spec.words == 1 else [f"w{t}" for t in range(spec.words)]
    if plan.words != want_words:
        raise ValueError(
            f"plan {plan.strategy}: word inputs {plan.words}, expected {want_words} for {spec.words}-word blocks"
        )
    roles = {i.role for i in plan.inputs}
    block = spec.scales.block
    if block != ("scale_code" in roles) or spec.scales.global_scale != ("global_scale" in roles):
        raise ValueError(
            f"plan {plan.strategy}: inputs {sorted(roles)} do not match the spec's scales "
            f"(block scales: {block}, global scale: {spec.scales.global_scale})"
        )
    if not block and plan.stage_ops("scale_prep"):
        raise ValueError(f"plan {plan.strategy}: scale_prep ops without block scales")
    if (spec.words > 1 or block) and spec.packing.axis != "K":
        raise ValueError(f"{spec.name}: multi-word blocks and block scales are rendered along K only")
    prep = {i.name for i in plan.inputs if i.role in ("scale_code", "global_scale")} | {
        op.dst for op in plan.stage_ops("scale_prep")
    }
    for op in plan.ops:
        if op.stage in ("convert", "scale"):
            # the scale stage sees the prepared registers only; convert sees none of them
            hidden = prep - (set(plan.scale_regs) if op.stage == "scale" else set())
            bad = [r for r in op.reads if r in hidden or (op.stage == "convert" and r in plan.scale_regs)]
            if bad:
                raise ValueError(
                    f"plan {plan.strategy}: {op.stage} op {op.opcode.ptx} -> {op.dst} reads {bad}, "
                    f"which its device function does not receive"
                )


def context(spec: Spec, plan: Plan, variants: Sequence[Mapping[str, object]] = ()) -> dict:
    """Template values of the converter and of the kernels built around it; ``variants``: the dequantize kernel's
    entry points (vec, rows, aligned, stream, entry: dqgen.kernels.dequant), none for the converter alone."""
    _check_interface(spec, plan)
    ops = [_render_op(op) for op in plan.ops]
    by_stage = {
        s: [r for r, op in zip(ops, plan.ops, strict=True) if op.stage == s]
        for s in ("zero", "scale_prep", "convert", "scale")
    }
    zero_defs = [op.dst for op in plan.ops if op.stage == "zero"]
    later_reads = {a for op in plan.ops if op.stage != "zero" for a in op.reads}
    conv_defs = [op.dst for op in plan.ops if op.stage == "convert"]
    scale_reads = {a for op in plan.ops if op.stage == "scale" for a in op.reads}
    role = {i.role: i.name for i in plan.inputs}
    # Scales.block implies a dtype; the None check narrows the type
    sd = spec.scales.dtype.value if spec.scales.block and spec.scales.dtype is not None else spec.target.value
    formula = ValueFormula.of(spec)
    lay = Layout.of(spec)
    return {
        "name": spec.name,
        "source_short": spec.source.short,
        "target": spec.target.value,
        "bits": spec.source.bits,
        "per_word": lay.per_block,
        "pairs": lay.per_block // 2,
        "order": list(lay.order),
        "axis": lay.axis,
        "formula": "(q - z)" if spec.zeros.packed else "q",
        "integer_target": spec.integer_target,
        "has_zeros": spec.zeros.packed,
        "float_zeros": spec.zeros.dense,
        "zero_mode": spec.zeros.mode,
        "zeros_doc": kernel_zeros_doc(formula, lay.per_block),
        "scale_formula": kernel_scale_formula(formula),
        "act_order": spec.act_order,
        "zero_pos": [lay.zero_order.index(e) for e in range(lay.per_block)],
        "field_mask": f"0x{(1 << spec.source.bits) - 1:X}",
        "zero_rep": f"0x{sum(1 << (spec.source.bits * k) for k in range(spec.per_word)):08X}",
        "strategy": plan.strategy,
        "convert_per8": fmt_num(Fraction(plan.per8("convert"))),
        "zero_count": plan.count("zero"),
        "min_sm": plan.min_sm,
        "zero_ops": by_stage["zero"],
        "convert_ops": by_stage["convert"],
        "scale_ops": by_stage["scale"],
        "zero_regs": [_reg(r) for r in zero_defs if r in later_reads],
        "diffs": [_reg(r) for r in conv_defs if r in scale_reads],
        "outputs": [_reg(r) for r in plan.outputs],
        # multiplying a 16-bit value by this puts it in both halves of a pair register
        "broadcast_pair": f"0x{half_pair(1, 1):X}",
        "low_half_mask": f"0x{half_pair(0xFFFF, 0):X}",
        "sel_low_halves": f"0x{prmt_selector([0, 1, 4, 5]):X}",
        "sel_high_halves": f"0x{prmt_selector([2, 3, 6, 7]):X}",
        "block": BLOCK,
        # multi-word packing blocks (3-bit GPTQ: 32 codes in 3 words): the block's word inputs, low first
        "words": lay.words,
        "integer_codes": spec.source.kind.integer,
        "word_regs": [_reg(w) for w in plan.words],
        # block scales (MXFP4 / NVFP4): a scale byte per (group, column), decoded once by prepare_scales
        "block_scales": spec.scales.block,
        "scale_dtype": sd,
        "global_scale": spec.scales.global_scale,
        "scale_code_reg": _reg(role.get("scale_code", "sc")),
        "global_scale_reg": _reg(role.get("global_scale", "gs")),
        "scale_prep_ops": by_stage["scale_prep"],
        "scale_regs": [_reg(r) for r in plan.scale_regs],
        "group_size": spec.scales.group_size,
        "value_doc": kernel_value_doc(formula),
        "variants": list(variants),
    }


def render_converter(spec: Spec, plan: Plan) -> str:
    return template_env().get_template("converter.cuh.j2").render(**context(spec, plan))


def naive_source(spec: Spec) -> str:
    """The baseline kernel of ``dqgen bench`` (shifts + integer->float cvt), for the same layout."""
    b = spec.source.bits
    order = list(spec.order)
    # element index of field j, as a C expression over a small constant table
    order_expr = "kOrder[j]"
    return (
        template_env()
        .get_template("naive.cu.j2")
        .render(
            name=spec.name,
            source_short=spec.source.short,
            target=spec.target.value,
            target_ptx="f16" if spec.target.value == "fp16" else "bf16",
            axis=spec.packing.axis,
            per_word=spec.per_word,
            bits=b,
            mask=(1 << b) - 1,
            kind=spec.source.kind.value,
            offset=spec.source.offset,
            half_range=1 << (b - 1),
            full_range=1 << b,
            has_zeros=spec.zeros.packed,
            order_expr=order_expr,
            order=[int(e) for e in order],
        )
    )
