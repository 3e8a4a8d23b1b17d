"""The s8 target (issue 24, W4A8): 4-bit integer codes -> int8 lanes, four per register, derived by the solver's
``bytes`` strategy and proven on every code (and zero point) at every lane. The expected words below are worked out
by hand from the formats, not read off the Plan."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from dqgen.check.prove import prove, quick_check
from dqgen.cli import app
from dqgen.core.spec import SpecError, load_spec, shipped_specs, w4a8_specs
from dqgen.emit.nvrtc import compile_source
from dqgen.emit.pipeline import compile_artifact
from dqgen.ir.isa import Const, Opcode
from dqgen.ir.plan import Plan
from dqgen.kernels import gemm
from dqgen.kernels.dequant import DequantConfig
from dqgen.kernels.gemv import GemvConfig
from dqgen.layout import gemm_trt
from dqgen.solve.solver import solve
from dqgen.tools.build import ptx_problems

PREPACKED = [0, 4, 1, 5, 2, 6, 3, 7]  # dqgen.layout.w4a8's order, written out: field 2b = element b, 2b+1 = 4+b


def _s8(source: dict, order: object = "sequential", axis: str = "K", zeros: str = "none", **extra: object) -> dict:
    return {
        "name": "t_s8",
        "source": source,
        "target": "s8",
        "packing": {"axis": axis, "order": order},
        "scales": {"group_size": 128, "dtype": "fp16"},
        "zeros": {"mode": zeros},
        "arch": "sm_90",
        **extra,
    }


U4 = {"bits": 4, "kind": "unsigned"}
U4B8 = {"bits": 4, "kind": "biased", "bias": 8}
S4 = {"bits": 4, "kind": "signed"}

#: (spec, convert ops per word): the prepacked order needs one shared shift, then AND | 0x80, add, XOR per register
#: (a mask alone for plain unsigned codes); a checkpoint order adds one PRMT per register.
CASES = {
    "u4b8_prepacked": (_s8(U4B8, PREPACKED), 7),
    "s4_prepacked": (_s8(S4, PREPACKED), 7),
    "u4_prepacked": (_s8(U4, PREPACKED), 3),
    "u4_zeros_prepacked": (_s8(U4, PREPACKED, zeros="integer"), 7),
    "u4_gptq_v1_prepacked": (_s8(U4, PREPACKED, zeros="gptq_v1"), 7),
    "u4b8_sequential": (_s8(U4B8), 9),
    "u4_awq_zeros": (_s8(U4, "awq", "N", "integer"), 9),
    "s4_reversed": (_s8(S4, [7, 6, 5, 4, 3, 2, 1, 0]), 9),
}


@pytest.mark.parametrize("key", sorted(CASES))
def test_bytes_plan_is_proven_at_its_cost(key: str) -> None:
    data, ops = CASES[key]
    spec = load_spec(data)
    plan = solve(spec)
    assert plan.strategy == "bytes" and plan.target == "s8"
    assert plan.count("convert") == ops
    assert plan.count("scale") == 0  # the scale is applied to the GEMM's int32 sums
    result = prove(plan, spec, n_random=200_000)
    assert result.ok, result.failures


@pytest.mark.parametrize("name", sorted(w4a8_specs()))
def test_shipped_s8_specs_prove(name: str) -> None:
    art = compile_artifact(load_spec(name), proof_words=200_000)
    assert art.plan.strategy == "bytes"
    assert art.proof is not None and art.proof.ok, art.proof


def test_s8_specs_stay_out_of_the_fp16_sweeps() -> None:
    """The shipped-spec sweeps render fp16 / bf16 kernels for every spec: the s8 specs live beside them."""
    assert set(w4a8_specs()) == {"awq_int4_s8", "gptq_int4_s8"}
    assert not set(w4a8_specs()) & set(shipped_specs())
    assert all(load_spec(n).target.value != "s8" for n in shipped_specs())


def _lanes(plan: Plan, word: int, zero: int | None = None) -> list[int]:
    env = {"w": np.array([word], dtype=np.uint32)}
    if zero is not None:
        env["z"] = np.array([zero], dtype=np.uint32)
    regs = plan.run(env, upto="convert")
    return [int(regs[o][0]) for o in plan.outputs]


def test_gptq_word_by_hand() -> None:
    """Sequential order, nibble j = j: element e has q = e, value e - 8: bytes F8 F9 FA FB, FC FD FE FF."""
    plan = solve(load_spec("gptq_int4_s8"))
    assert _lanes(plan, 0x76543210) == [0xFBFAF9F8, 0xFFFEFDFC]
    assert _lanes(plan, 0xFFFFFFFF) == [0x07070707, 0x07070707]  # q = 15: +7
    assert _lanes(plan, 0x00000000) == [0xF8F8F8F8, 0xF8F8F8F8]  # q = 0: -8


def test_awq_word_by_hand() -> None:
    """AWQ order: nibble j holds element [0,2,4,6,1,3,5,7][j], so word 0x76543210 gives elements 0..7 the codes
    0,4,1,5,2,6,3,7; zero 3 everywhere: -3,1,-2,2 | -1,3,0,4."""
    plan = solve(load_spec("awq_int4_s8"))
    assert _lanes(plan, 0x76543210, 0x33333333) == [0x02FE01FD, 0x040003FF]
    assert _lanes(plan, 0x00000000, 0xFFFFFFFF) == [0xF1F1F1F1, 0xF1F1F1F1]  # q - z = -15, the low end
    assert _lanes(plan, 0xFFFFFFFF, 0x00000000) == [0x0F0F0F0F, 0x0F0F0F0F]


def test_signed_word_by_hand() -> None:
    """Two's complement nibbles in the prepacked order: 0x8 is -8, 0x7 is 7, 0xF is -1."""
    plan = solve(load_spec(_s8(S4, PREPACKED)))
    # fields 0,2,4,6 = elements 0..3 = 8, 7, F, 0; fields 1,3,5,7 = elements 4..7 = 1, 9, E, 2
    word = sum(v << (4 * j) for j, v in enumerate([0x8, 0x1, 0x7, 0x9, 0xF, 0xE, 0x0, 0x2]))
    assert _lanes(plan, word) == [0x00FF07F8, 0x02FEF901]


def test_constants_carry_their_derivation() -> None:
    plan = solve(load_spec("gptq_int4_s8"))
    consts = {c.value: c.why for c in plan.constants()}
    assert set(consts) == {0x0F0F0F0F, 0x80808080, (-0x08080808) % 2**32}
    assert "no byte borrows" in " ".join(op.why for op in plan.ops if op.opcode is Opcode.ADD_U32)
    luts = {op.imm for op in plan.ops if op.opcode is Opcode.LOP3}
    assert luts == {(0xF0 & 0xCC) | 0xAA, 0xF0 ^ 0xCC}  # keep-and-set-bit-7, then XOR


def test_the_prover_catches_a_wrong_constant() -> None:
    spec = load_spec("gptq_int4_s8")
    plan = solve(spec)
    ops = [
        dataclasses.replace(op, args=(op.args[0], Const((-0x08080807) % 2**32, "off by one in byte 0")))
        if op.opcode is Opcode.ADD_U32
        else op
        for op in plan.ops
    ]
    broken = dataclasses.replace(plan, ops=ops)
    assert quick_check(broken, spec) is not None
    assert not prove(broken, spec, n_random=1000).ok


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_s8({"bits": 4, "kind": "float", "format": "e2m1"}), "[target]"),
        (_s8({"bits": 2, "kind": "unsigned"}), "[target]"),
        (_s8({"bits": 8, "kind": "signed"}), "[target]"),
        (_s8(U4, zeros="float"), "[zeros.mode]"),
        ({**_s8(U4B8), "scales": {"group_size": 128}}, "[scales.dtype]"),
        ({**_s8(U4B8), "scales": {"group_size": 32, "dtype": "e8m0"}}, "[scales.dtype]"),
    ],
)
def test_s8_specs_refused_with_the_field(data: dict, field: str) -> None:
    with pytest.raises(SpecError) as e:
        load_spec(data)
    assert field in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", sorted(w4a8_specs()))
def test_fp16_families_refuse_s8_specs(name: str) -> None:
    spec = load_spec(name)
    art = compile_artifact(spec)
    assert not DequantConfig.supports(spec) and not GemvConfig.supports(spec) and not gemm.supports(spec)
    for make in (lambda: DequantConfig(art), lambda: GemvConfig(art), lambda: gemm_trt.converter_spec(spec)):
        with pytest.raises(ValueError, match=r"^\[target\]"):
            make()


def test_build_refuses_and_explain_shows_the_plan() -> None:
    r = CliRunner().invoke(app, ["build", "gptq_int4_s8", "--out", "/nonexistent-dqgen-s8"])
    assert r.exit_code != 0 and "[target]" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["explain", "awq_int4_s8"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "Strategy bytes" in r.output and "s8( q - z )" in r.output
    assert "add.u32 y0, x0, zr0;" in r.output  # the zero point prepared once per group, one add per register


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(w4a8_specs()))
def test_s8_converter_compiles(name: str, arch: str) -> None:
    """The rendered converter alone, in a kernel that converts one word per thread: every Plan op in the PTX,
    ``convert`` writes kRegs s8x4 registers and there is no ``dequant`` (no scale stage)."""
    spec = load_spec(name)
    art = compile_artifact(spec)
    header = art.header
    assert "void dequant(" not in header and "constexpr int kRegs = 2;" in header
    ns = f"dqgen::{spec.name}"
    zr = ""
    body = ""
    if spec.zeros.packed:
        body = f"unsigned zr[{ns}::kZeroRegs]; {ns}::prepare_zeros(z[threadIdx.x], zr);"
        zr = "zr, "
    src = (
        header
        + f"""
extern "C" __global__ void s8_test(const unsigned* w, const unsigned* z, unsigned* out) {{
    (void)z; {body}
    {ns}::convert(w[threadIdx.x], {zr}out + threadIdx.x * {ns}::kRegs);
}}
"""
    )
    ptx = compile_source(src, arch=arch, want="ptx", name=f"{spec.name}_s8_test.cu").ptx
    assert ptx is not None and re.search(r"\.entry\s+s8_test\s*\(", ptx)
    assert ptx_problems(art.plan, ptx) == []
