"""Rendering (CPU only): the committed generated/ files are up to date, every kernel and converter
compiles with NVRTC to PTX and cubin, and the PTX carries the Plan's instructions and nothing slow."""

from __future__ import annotations

import re

import pytest

from dqgen.core.spec import SHIPPED_SPECS, load_spec
from dqgen.emit.nvrtc import compile_source
from dqgen.emit.render import context, render_converter
from dqgen.kernels.dequant import kernel_name, render_kernel, variants
from dqgen.solve.solver import solve
from dqgen.tools.build import ptx_problems

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
    hint = f"generated/{spec.name} is stale: run `dqgen build {path.stem}`"
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


def _arch_sm(arch: str) -> int:
    return int(arch[3:].rstrip("af"))


def _build_arch(spec) -> str:
    """The oldest of ARCHS the spec runs on (sm_80 unless the spec needs more, e.g. fp8 cvt: sm_90)."""
    return next(a for a in ARCHS if _arch_sm(a) >= spec.sm)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("path", SPECS, **_ids)
def test_kernel_compiles_ptx_and_cubin(path, arch, solved, compiled):
    spec, plan, _, _ = solved(path)
    if _arch_sm(arch) < spec.sm:
        pytest.skip(f"{spec.name} targets {spec.arch}")
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
    ptx, _ = compiled(path, _build_arch(spec))
    entries = set(re.findall(r"\.entry\s+(\w+)\s*\(", ptx))
    want = {kernel_name(spec, v) for v in variants(spec)}
    assert want == entries
    for name in want:
        assert name.startswith(f"dqgen_{spec.name}_v")
        assert f" {name}(" in source


# --------------------------------------------------------------------------- NVRTC: converter header alone


def _converter_test_kernel(spec, converter: str) -> str:
    """A kernel that uses the header the way a user's kernel would: a packing block's words (one, or
    spec.words for 3-bit codes), prepared zero points, scale pairs or prepared block scales."""
    ns = f"dqgen::{spec.name}"
    words = (
        "w[threadIdx.x], "
        if spec.words == 1
        else "".join(f"w[{spec.words} * threadIdx.x + {t}], " for t in range(spec.words))
    )
    body = ""
    zr = ""
    if spec.zeros.packed:
        body += f"""
    unsigned zr[{ns}::kZeroRegs];
    {ns}::prepare_zeros(z[threadIdx.x], zr);"""
        zr = "zr, "
    if spec.scales.block:
        gs = "__float_as_uint(*g), " if spec.scales.global_scale else ""
        body += f"""
    unsigned sr[{ns}::kScaleRegs];
    {ns}::prepare_scales(s[threadIdx.x] & 0xFFu, {gs}sr);"""
        scales = "sr, "
    else:
        scales = f"s + threadIdx.x * {ns}::kPairs, "
    fz = f"z + threadIdx.x * {ns}::kPairs, " if spec.zeros.mode in ("float", "additive") else ""
    body += f"""
    {ns}::dequant({words}{zr}{scales}{fz}out + threadIdx.x * {ns}::kPairs);"""
    return (
        converter
        + f"""
extern "C" __global__ void converter_test(const unsigned* w, const unsigned* z, const unsigned* s, const float* g,
                                          unsigned* out) {{
    (void)z; (void)g;{body}
}}
"""
    )


@pytest.mark.parametrize("path", SPECS, **_ids)
def test_converter_header_compiles_alone(path, solved):
    spec, plan, _, converter = solved(path)
    src = _converter_test_kernel(spec, converter)
    ptx = compile_source(src, arch=_build_arch(spec), want="ptx", name=f"{spec.name}_converter_test.cu").ptx
    assert ptx is not None
    assert re.search(r"\.entry\s+converter_test\s*\(", ptx)
    assert ptx_problems(plan, ptx) == []  # every op of the Plan, zero / scale preparation included
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
    path = SHIPPED_SPECS / "awq_int4_fp16.yaml"
    _, plan, _, _ = solved(path)
    mnemonics = sorted({op.opcode.ptx for op in plan.ops})
    assert "lop3.b32" in mnemonics
    full = "\n".join(f"\t{m} %r1, %r2, %r3;" for m in mnemonics)
    assert ptx_problems(plan, full) == []
    missing = "\n".join(f"\t{m} %r1, %r2, %r3;" for m in mnemonics if m != "lop3.b32")
    assert ptx_problems(plan, missing) == ["PTX lacks lop3.b32"]
    assert len(ptx_problems(plan, "")) == len(mnemonics)


@pytest.mark.parametrize(
    "cvt", ["cvt.rn.f16.s32", "cvt.rn.f32.s32", "cvt.rn.f32.u32", "cvt.rn.bf16.s8", "cvt.rn.f16.u16"]
)
def test_ptx_problems_reports_int_to_float_cvt(solved, cvt):
    path = SHIPPED_SPECS / "awq_int4_fp16.yaml"
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
        assert emitted or not plan_values, "no 32-bit constants emitted"  # (a plain cvt plan has none)
        assert emitted <= plan_values, f"constants not in the Plan: {sorted(hex(v) for v in emitted - plan_values)}"
        assert emitted == plan_values, f"Plan constants never emitted: {sorted(hex(v) for v in plan_values - emitted)}"


# --------------------------------------------------------------------------- issue #5: multi-word blocks, block scales

_K = dict(packing=dict(axis="K"))
NEW_FORMATS = {
    # 3-bit GPTQ: 32 codes in 3 words (w0, w1, w2); fp16 and bf16, grouped and per-channel, float zeros
    "u3b4_fp16": dict(source=dict(bits=3, kind="biased", bias=4), target="fp16", scales=dict(group_size=128)),
    "s3_bf16": dict(source=dict(bits=3, kind="signed"), target="bf16", scales=dict(group_size=32)),
    "u3_fp16_hqq": dict(
        source=dict(bits=3, kind="unsigned"), target="fp16", scales=dict(group_size=64), zeros=dict(mode="float")
    ),
    # MXFP4: e2m1 + e8m0 scale byte per 32 along K
    "mxfp4_fp16": dict(
        source=dict(bits=4, kind="float", format="e2m1"), target="fp16", scales=dict(group_size=32, dtype="e8m0")
    ),
    "mxfp4_bf16": dict(
        source=dict(bits=4, kind="float", format="e2m1"), target="bf16", scales=dict(group_size=32, dtype="e8m0")
    ),
    # NVFP4: e2m1 + e4m3 scale byte per 16 + fp32 global scale
    "nvfp4_fp16": dict(
        source=dict(bits=4, kind="float", format="e2m1"),
        target="fp16",
        scales=dict(group_size=16, dtype="e4m3", global_scale=True),
    ),
    "nvfp4_bf16": dict(
        source=dict(bits=4, kind="float", format="e2m1"),
        target="bf16",
        scales=dict(group_size=16, dtype="e4m3", global_scale=True),
    ),
}


@pytest.fixture(scope="module")
def new_format():
    cache: dict = {}

    def get(key):
        if key not in cache:
            spec = load_spec(dict(name=f"t_{key}", **_K, **NEW_FORMATS[key]))
            plan = solve(spec)
            cache[key] = (spec, plan, render_kernel(spec, plan), render_converter(spec, plan))
        return cache[key]

    return get


def _entry_params(ptx: str, entry: str) -> int:
    m = re.search(rf"\.entry\s+{entry}\s*\((.*?)\)", ptx, re.S)
    assert m, entry
    return len(re.findall(r"\.param\s", m.group(1)))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("key", sorted(NEW_FORMATS))
def test_new_format_kernel_compiles(key, arch, new_format):
    """Kernel: PTX and cubin for sm_80 and sm_90, every variant an entry point, every Plan op in the PTX;
    entry points take `const float* global_scale` (9 parameters) exactly when the spec has one."""
    spec, plan, source, _ = new_format(key)
    name = f"{spec.name}.cu"
    ptx = compile_source(source, arch=arch, want="ptx", name=name).ptx
    cubin = compile_source(source, arch=arch, want="cubin", name=name).cubin
    assert ptx is not None and cubin is not None and cubin.startswith(b"\x7fELF")
    assert ptx_problems(plan, ptx) == []
    entries = set(re.findall(r"\.entry\s+(\w+)\s*\(", ptx))
    assert entries == {kernel_name(spec, v) for v in variants(spec)}
    for e in entries:
        assert _entry_params(ptx, e) == (9 if spec.scales.global_scale else 8)
    assert ("const float* __restrict__ global_scale" in source) == spec.scales.global_scale


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("key", sorted(NEW_FORMATS))
def test_new_format_converter_compiles_alone(key, arch, new_format):
    spec, plan, _, converter = new_format(key)
    src = _converter_test_kernel(spec, converter)
    for want in ("ptx", "cubin"):
        r = compile_source(src, arch=arch, want=want, name=f"{spec.name}_converter_test.cu")
        assert r.ptx if want == "ptx" else r.cubin
    assert (
        ptx_problems(plan, compile_source(src, arch=arch, want="ptx", name=f"{spec.name}_converter_test.cu").ptx) == []
    )


def test_multi_word_interface(new_format):
    """3-bit: convert/dequant take the block's three words; the kernel loads them per block-row
    (rows 3i..3i+2 of qweight) and 4 columns per thread."""
    spec, plan, source, converter = new_format("u3b4_fp16")
    assert spec.words == 3 and spec.per_word == 32 and plan.words == ["w0", "w1", "w2"]
    assert "void convert(unsigned w0, unsigned w1, unsigned w2, unsigned* d)" in converter
    assert "void dequant(unsigned w0, unsigned w1, unsigned w2, const unsigned* s, unsigned* out)" in converter
    assert "convert(w0, w1, w2, d);" in converter
    assert "constexpr int kWords = 3;" in converter and "constexpr int kPairs = 16;" in converter
    assert "prepare_scales" not in converter and "kScaleRegs" not in converter
    assert "qweight + ((i0 + r) * kWords + t) * N + n0" in source
    assert "dequant(q[r][0][j], q[r][1][j], q[r][2][j], s[j], o[j]);" in source
    assert {v.vec for v in variants(spec)} == {4}
    # float zeros ride along: f[i] next to s[i]
    spec, plan, _, converter = new_format("u3_fp16_hqq")
    assert (
        "void dequant(unsigned w0, unsigned w1, unsigned w2, const unsigned* s, const unsigned* f, unsigned* out)"
        in converter
    )
    assert "const unsigned f15 = f[15];" in converter


@pytest.mark.parametrize("key", ["mxfp4_fp16", "mxfp4_bf16", "nvfp4_fp16", "nvfp4_bf16"])
def test_block_scale_interface(key, new_format):
    """Block scales: prepare_scales(sc[, gs], sr) from the scale_prep ops fills len(plan.scale_regs)
    registers; dequant reads them from s; the kernel loads one scale byte per (group, column)."""
    spec, plan, source, converter = new_format(key)
    ctx = context(spec, plan)
    assert ctx["block_scales"] and ctx["scale_regs"] == plan.scale_regs
    gs = "unsigned gs, " if spec.scales.global_scale else ""
    assert f"void prepare_scales(unsigned sc, {gs}unsigned* sr)" in converter
    assert f"constexpr int kScaleRegs = {len(plan.scale_regs)};" in converter
    for i, r in enumerate(plan.scale_regs):
        assert f"sr[{i}] = {r};" in converter
        assert f"const unsigned {r} = s[{i}];" in converter
    for op in plan.stage_ops("scale_prep"):
        assert f"({op.dst})" in converter.split("void prepare_scales", 1)[1].split("void convert", 1)[0]
    assert "void dequant(unsigned w, const unsigned* s, unsigned* out)" in converter
    assert "unsigned s[VEC][kScaleRegs];" in source
    assert "scales8 + g * N + n0" in source
    assert ("__ldg(global_scale)" in source) == spec.scales.global_scale


def test_interface_mismatch_is_an_error(new_format):
    """A Plan whose inputs do not match the spec's packing block or scales is refused by render."""
    import dataclasses

    spec, plan, _, _ = new_format("u3b4_fp16")
    bad = dataclasses.replace(plan, inputs=[i for i in plan.inputs if i.name != "w2"])
    with pytest.raises(ValueError, match="word inputs"):
        context(spec, bad)
    spec_mx, _, _, _ = new_format("mxfp4_fp16")
    with pytest.raises(ValueError, match="do not match the spec's scales"):
        context(
            spec_mx,
            solve(
                load_spec(
                    dict(
                        name="plain",
                        **_K,
                        source=dict(bits=4, kind="float", format="e2m1"),
                        target="fp16",
                        scales=dict(group_size=32),
                    )
                )
            ),
        )
