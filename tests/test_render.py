"""Rendering (CPU only): the committed generated/ files are up to date, every kernel and converter
compiles with NVRTC to PTX and cubin, and the PTX carries the Plan's instructions and nothing slow."""

from __future__ import annotations

import re

import pytest

from dqgen.build import ptx_problems
from dqgen.nvrtc import compile_source
from dqgen.render import VARIANTS_K, VARIANTS_N, context, kernel_name, render_converter, render_kernel
from dqgen.solver import solve
from dqgen.spec import load_spec

from .conftest import ROOT, SPECS

ARCHS = ["sm_80", "sm_90"]
# Integer -> float conversions (cvt.rn.f16.s32, cvt.rn.f32.u8, ...): the slow path the magic numbers avoid.
INT_TO_FLOAT = re.compile(r"cvt(\.\w+)*\.(f16|bf16|f32)(x2)?\.[su](8|16|32)\b")
HEX_CONST = re.compile(r"0x[0-9A-F]{8}u")

_ids = dict(ids=lambda p: p.stem)


@pytest.fixture(scope="module")
def solved():
    """Spec + Plan + rendered sources per spec file, solved once for the module."""
    cache: dict = {}

    def get(path):
        if path not in cache:
            spec = load_spec(path)
            plan = solve(spec)
            cache[path] = (spec, plan, render_kernel(spec, plan), render_converter(spec, plan))
        return cache[path]

    return get


@pytest.fixture(scope="module")
def compiled(solved):
    """(PTX text, cubin bytes) of each spec's kernel per arch, compiled once for the module."""
    cache: dict = {}

    def get(path, arch):
        key = (path, arch)
        if key not in cache:
            spec, _, source, _ = solved(path)
            name = f"{spec.name}.cu"
            ptx = compile_source(source, arch=arch, want="ptx", name=name)
            cubin = compile_source(source, arch=arch, want="cubin", name=name)
            assert ptx.ptx is not None and ptx.cubin is None
            assert cubin.cubin is not None and cubin.ptx is None
            cache[key] = (ptx.ptx, cubin.cubin)
        return cache[key]

    return get


def test_specs_found():
    assert len(SPECS) >= 7
    assert {p.stem for p in SPECS} >= {"awq_int4_fp16", "gptq_int4_fp16", "int8_fp16"}


# --------------------------------------------------------------------------- staleness


@pytest.mark.parametrize("path", SPECS, **_ids)
def test_generated_files_are_up_to_date(path, solved):
    spec, _, kernel, converter = solved(path)
    hint = f"generated/{spec.name} is stale: run `dqgen build specs/{path.name}`"
    cu, cuh = ROOT / "generated" / f"{spec.name}.cu", ROOT / "generated" / f"{spec.name}.cuh"
    assert cu.exists() and cuh.exists(), hint
    assert cu.read_bytes() == kernel.encode("utf-8"), hint
    assert cuh.read_bytes() == converter.encode("utf-8"), hint


@pytest.mark.parametrize("path", SPECS, **_ids)
def test_rendering_is_deterministic(path, solved):
    spec, plan, kernel, converter = solved(path)
    assert render_kernel(spec, plan) == kernel
    assert render_converter(spec, plan) == converter
    # The kernel embeds the converter verbatim (templates/kernel.cu.j2 includes converter.cuh.j2).
    body = converter.split("#pragma once", 1)[1]
    assert body in kernel


# --------------------------------------------------------------------------- NVRTC: kernel


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("path", SPECS, **_ids)
def test_kernel_compiles_ptx_and_cubin(path, arch, solved, compiled):
    _, plan, _, _ = solved(path)
    ptx, cubin = compiled(path, arch)
    assert cubin.startswith(b"\x7fELF")
    assert f".target {arch}" in ptx
    assert ptx_problems(plan, ptx) == []
    for op in plan.ops:
        assert op.opcode.ptx in ptx
    bad = sorted({m.group(0) for m in INT_TO_FLOAT.finditer(ptx)})
    assert not bad, f"integer->float conversions in the PTX: {bad}"


@pytest.mark.parametrize("path", SPECS, **_ids)
def test_kernel_entry_points(path, solved, compiled):
    spec, _, source, _ = solved(path)
    ptx, _ = compiled(path, "sm_80")
    variants = VARIANTS_N if spec.packing.axis == "N" else VARIANTS_K
    entries = set(re.findall(r"\.entry\s+(\w+)\s*\(", ptx))
    want = {kernel_name(spec, v) for v in variants}
    assert want == entries
    for name in want:
        assert name.startswith(f"dqgen_{spec.name}_v")
        assert f" {name}(" in source


# --------------------------------------------------------------------------- NVRTC: converter header alone


def _converter_test_kernel(spec, converter: str) -> str:
    ns = f"dqgen::{spec.name}"
    if spec.zeros.packed:
        body = f"""
    unsigned zr[{ns}::kZeroRegs];
    {ns}::prepare_zeros(z[threadIdx.x], zr);
    {ns}::dequant(w[threadIdx.x], zr, s + threadIdx.x * {ns}::kPairs, out + threadIdx.x * {ns}::kPairs);"""
    else:
        body = f"""
    {ns}::dequant(w[threadIdx.x], s + threadIdx.x * {ns}::kPairs, out + threadIdx.x * {ns}::kPairs);"""
    return (
        converter
        + f"""
extern "C" __global__ void converter_test(const unsigned* w, const unsigned* z, const unsigned* s, unsigned* out) {{
    (void)z;{body}
}}
"""
    )


@pytest.mark.parametrize("path", SPECS, **_ids)
def test_converter_header_compiles_alone(path, solved):
    spec, plan, _, converter = solved(path)
    src = _converter_test_kernel(spec, converter)
    ptx = compile_source(src, arch="sm_80", want="ptx", name=f"{spec.name}_converter_test.cu").ptx
    assert ptx is not None
    assert re.search(r"\.entry\s+converter_test\s*\(", ptx)
    assert "lop3.b32" in ptx or "prmt.b32" in ptx
    assert ptx_problems(plan, ptx) == []
    assert not INT_TO_FLOAT.search(ptx)


@pytest.mark.parametrize("path", SPECS, **_ids)
def test_zero_registers_fit_the_kernels_buffer(path, solved):
    """The kernel gives prepare_zeros kPairs registers per word: the plan must not need more."""
    spec, plan, _, converter = solved(path)
    ctx = context(spec, plan)
    assert len(ctx["zero_regs"]) <= ctx["pairs"]
    assert f"constexpr int kZeroRegs = {len(ctx['zero_regs'])};" in converter
    assert f"constexpr int kPairs = {spec.per_word // 2};" in converter
    if spec.zeros.packed:
        assert "prepare_zeros" in converter and len(ctx["zero_regs"]) > 0
    else:
        assert "prepare_zeros" not in converter and ctx["zero_regs"] == []


# --------------------------------------------------------------------------- ptx_problems


def test_ptx_problems_reports_missing_instruction(solved):
    path = ROOT / "specs" / "awq_int4_fp16.yaml"
    _, plan, _, _ = solved(path)
    mnemonics = sorted({op.opcode.ptx for op in plan.ops})
    assert "lop3.b32" in mnemonics
    full = "\n".join(f"\t{m} %r1, %r2, %r3;" for m in mnemonics)
    assert ptx_problems(plan, full) == []
    missing = "\n".join(f"\t{m} %r1, %r2, %r3;" for m in mnemonics if m != "lop3.b32")
    assert ptx_problems(plan, missing) == ["PTX lacks lop3.b32"]
    assert len(ptx_problems(plan, "")) == len(mnemonics)


@pytest.mark.parametrize("cvt", ["cvt.rn.f16.s32", "cvt.rn.f32.s32", "cvt.rn.f32.u32", "cvt.rn.bf16.s8", "cvt.rn.f16.u16"])
def test_ptx_problems_reports_int_to_float_cvt(solved, cvt):
    path = ROOT / "specs" / "awq_int4_fp16.yaml"
    _, plan, _, _ = solved(path)
    mnemonics = sorted({op.opcode.ptx for op in plan.ops})
    ptx = "\n".join(f"\t{m} %r1, %r2, %r3;" for m in mnemonics) + f"\n\t{cvt} %h1, %r4;\n"
    problems = ptx_problems(plan, ptx)
    assert len(problems) == 1 and cvt in problems[0] and "integer->float" in problems[0]
    # Conversions that are not integer -> float are fine.
    benign = ptx.replace(cvt, "cvt.u32.u64") + "\tcvt.f32.f16 %f1, %h1;\n"
    assert ptx_problems(plan, benign) == []


# --------------------------------------------------------------------------- constants


@pytest.mark.parametrize("path", SPECS, **_ids)
def test_emitted_constants_come_from_the_plan(path, solved):
    spec, plan, _, converter = solved(path)
    plan_values = {c.value for c in plan.constants()}
    for text in (converter, (ROOT / "generated" / f"{spec.name}.cuh").read_text()):
        emitted = {int(h[2:-1], 16) for h in HEX_CONST.findall(text)}
        assert emitted, "no 32-bit constants emitted"
        assert emitted <= plan_values, f"constants not in the Plan: {sorted(hex(v) for v in emitted - plan_values)}"
        assert emitted == plan_values, f"Plan constants never emitted: {sorted(hex(v) for v in plan_values - emitted)}"
