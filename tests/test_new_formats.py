"""Plans for issue #5's formats, checked against ml_dtypes (not against dqgen's own formulas):
every fp8 code at every lane, every e2m1 code, every e8m0 scale code, NVFP4's global scale, 3-bit
codes that straddle words, and codebook rounding. Every candidate plan (cvt, bit placement, lookup)
is checked, not only the cheapest."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from dqgen.check.prove import prove, quick_check
from dqgen.core.spec import NF4_CODEBOOK, SHIPPED_SPECS, Spec, load_spec
from dqgen.ir.isa import Const
from dqgen.ir.plan import Op, Plan
from dqgen.solve.solver import candidates, solve

NP_TARGET = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}
ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn}


def spec_of(source: dict, target: str, arch: str = "sm_80", scales: dict | None = None, axis: str = "K") -> Spec:
    return load_spec(
        {
            "name": "t",
            "source": source,
            "target": target,
            "packing": {"axis": axis},
            "scales": scales or {"group_size": 128},
            "arch": arch,
        }
    )


def outputs(plan: Plan, env: dict[str, np.ndarray]) -> np.ndarray:
    """[n, elements] 16-bit results of the plan, element order."""
    regs = plan.run({k: np.asarray(v, dtype=np.uint32) for k, v in env.items()})
    n = next(iter(env.values())).shape[0]
    out = np.empty((n, plan.elements), dtype=np.uint32)
    for o, (lo, hi) in zip(plan.outputs, plan.pairs, strict=True):
        out[:, lo] = regs[o] & 0xFFFF
        out[:, hi] = regs[o] >> 16
    return out


def same_bits(got: np.ndarray, want: np.ndarray, target: str) -> np.ndarray:
    """Bitwise equality, any NaN equal to any NaN."""
    g = got.astype(np.uint16).view(NP_TARGET[target]).astype(np.float32)
    w = np.asarray(want).astype(np.float32)
    return (got == want.view(np.uint16).astype(np.uint32)) | (np.isnan(g) & np.isnan(w))


def lane_words(bits: int, per_word: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Every code at every lane (others random): words and the [n, per_word] codes they hold."""
    codes = np.arange(1 << bits, dtype=np.uint32)
    words = []
    for lane in range(per_word):
        bg = rng.integers(0, 1 << 32, size=codes.size, dtype=np.uint64).astype(np.uint32)
        w = (bg & np.uint32(~(((1 << bits) - 1) << (bits * lane)) & 0xFFFFFFFF)) | (codes << np.uint32(bits * lane))
        words.append(w)
    w = np.concatenate(words)
    f = np.stack([(w >> np.uint32(bits * j)) & np.uint32((1 << bits) - 1) for j in range(per_word)], axis=1)
    return w, f


def unit_scales(plan: Plan, target: str) -> dict[str, np.ndarray]:
    one = int(np.array(1.0, dtype=NP_TARGET[target]).view(np.uint16))
    return {name: np.uint32(one * 0x10001) for name in plan.scale_regs}


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_minifloat_every_code_every_lane_equals_ml_dtypes(fmt: str, target: str, arch: str) -> None:
    bits = 4 if fmt == "e2m1" else 8
    spec = spec_of({"bits": bits, "kind": "float", "format": fmt}, target, arch)
    plans, notes = candidates(spec)
    assert plans, notes
    strategies = {p.strategy for p in plans}
    assert ("cvt" in strategies) == (fmt != "e2m1" and spec.sm >= 89)
    w, f = lane_words(bits, spec.per_word, np.random.default_rng(3))
    want = f.astype(np.uint8).view(ML[fmt]).astype(np.float32).astype(NP_TARGET[target])  # exact: fits both targets
    for plan in plans:
        got = outputs(
            plan, {"w": w[:, None][:, 0], **{k: np.full(w.size, v) for k, v in unit_scales(plan, target).items()}}
        )
        ok = same_bits(got, want, target)
        assert ok.all(), f"{plan.strategy}: code 0x{int(f[~ok][0]):02X} -> 0x{int(got[~ok][0]):04X}"


def test_minifloat_negative_zero_and_nan_survive_scaling() -> None:
    spec = spec_of({"bits": 8, "kind": "float", "format": "e4m3"}, "bf16", "sm_80")
    plan = solve(spec)
    w = np.array([0x7F80FF00], dtype=np.uint32)  # codes +0, NaN, -0, NaN
    two = int(np.array(2.0, dtype=ml_dtypes.bfloat16).view(np.uint16)) * 0x10001
    got = outputs(plan, {"w": w, "s0": np.array([two]), "s1": np.array([two])})[0]
    assert got[0] == 0x0000 and got[2] == 0x8000
    assert np.isnan(got[[1, 3]].astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)).all()


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_mxfp4_every_scale_code_equals_ml_dtypes(target: str) -> None:
    spec = spec_of({"bits": 4, "kind": "float", "format": "e2m1"}, target, scales={"group_size": 32, "dtype": "e8m0"})
    rng = np.random.default_rng(5)
    w, f = lane_words(4, 8, rng)
    sc = np.arange(256, dtype=np.uint32)
    W, S = np.repeat(w, 256), np.tile(sc, w.size)
    F = np.repeat(f, 256, axis=0)
    vals = F.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    scale = S.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    with np.errstate(over="ignore"):
        want = (vals * scale[:, None]).astype(NP_TARGET[target])  # float64 product exact; one rounding
    for plan in candidates(spec)[0]:
        got = outputs(plan, {"w": W, "sc": S})
        ok = same_bits(got, want, target)
        assert ok.all(), f"{plan.strategy}: scale 0x{int(S[~ok.all(1)][0]):02X}"
    assert np.isnan(want[S == 0xFF]).all()  # e8m0 0xFF is NaN


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_nvfp4_tiny_global_scale_does_not_underflow(target: str, arch: str) -> None:
    spec = spec_of(
        {"bits": 4, "kind": "float", "format": "e2m1"},
        target,
        arch,
        scales={"group_size": 16, "dtype": "e4m3", "global_scale": True},
    )
    plan = solve(spec)
    assert plan.scale_regs[-1] == "gs"
    rng = np.random.default_rng(8)
    n = 4096
    w = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    sc = rng.integers(0, 256, size=n).astype(np.uint32)
    # tiny global scales: casting g to fp16 first (the bug class of vllm PR#37135) would flush it to 0
    g = np.float32(2.0) ** rng.integers(-40, -20, size=n).astype(np.float32) * rng.uniform(1, 2, size=n).astype(
        np.float32
    )
    got = outputs(plan, {"w": w, "sc": sc, "gs": g.view(np.uint32)})
    f = np.stack([(w >> np.uint32(4 * j)) & np.uint32(15) for j in range(8)], axis=1)
    vals = f.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    s = sc.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    want = ((vals * s[:, None]) * g.astype(np.float64)[:, None]).astype(np.float32).astype(NP_TARGET[target])
    assert same_bits(got, want, target).all()
    if target == "bf16":  # representable results stay nonzero
        nz = (vals * s[:, None] != 0) & ~np.isnan(s)[:, None]
        assert (got[nz] & 0x7FFF != 0).all()


def test_three_bit_codes_straddling_words() -> None:
    spec = spec_of({"bits": 3, "kind": "unsigned"}, "fp16")
    plan = solve(spec)
    assert plan.words == ["w0", "w1", "w2"] and plan.elements == 32
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 8, size=(4096, 32))
    codes[:, 10] = np.arange(4096) % 8  # code 10: bits 30-31 of w0 and bit 0 of w1
    codes[:, 21] = (np.arange(4096) // 8) % 8  # code 21: bit 31 of w1 and bits 0-1 of w2
    block = sum(codes[:, i].astype(object) << (3 * i) for i in range(32))
    words = [np.array([(int(b) >> (32 * k)) & 0xFFFFFFFF for b in block], dtype=np.uint32) for k in range(3)]
    one = 0x3C003C00
    got = outputs(
        plan,
        {
            "w0": words[0],
            "w1": words[1],
            "w2": words[2],
            **{r: np.full(4096, one, dtype=np.uint32) for r in plan.scale_regs},
        },
    )
    assert (got.astype(np.uint16).view(np.float16).astype(np.int64) == codes).all()


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_nf4_lookup_gives_the_published_values_rounded_once(target: str) -> None:
    spec = spec_of({"bits": 4, "kind": "codebook", "codebook": "nf4"}, target)
    plan = solve(spec)
    w, f = lane_words(4, 8, np.random.default_rng(4))
    got = outputs(plan, {"w": w, **{k: np.full(w.size, v) for k, v in unit_scales(plan, target).items()}})
    table = np.array(NF4_CODEBOOK, dtype=np.float64).astype(NP_TARGET[target])
    assert same_bits(got, table[f], target).all()
    assert NF4_CODEBOOK[0] == -1.0 and NF4_CODEBOOK[7] == 0.0 and NF4_CODEBOOK[15] == 1.0 and len(NF4_CODEBOOK) == 16


def test_nf4_table_is_the_qlora_construction() -> None:
    """NF4 derived as QLoRA / bitsandbytes build it, not read from dqgen: normal quantiles of 8
    positive and 7 negative evenly spaced probabilities (offset 0.9677083), a zero, divided by the
    largest. Each published entry is that value as float32."""
    from statistics import NormalDist

    ppf, off = NormalDist().inv_cdf, 0.9677083
    pos = [ppf(float(p)) for p in np.linspace(off, 0.5, 9, dtype=np.float32)[:-1]]
    neg = [-ppf(float(p)) for p in np.linspace(off, 0.5, 8, dtype=np.float32)[:-1]]
    vals = sorted([*pos, 0.0, *neg])
    derived = np.array(vals) / max(vals)
    table = np.array(NF4_CODEBOOK)
    assert len(table) == 16 and np.all(np.diff(table) > 0)
    np.testing.assert_allclose(table, derived, rtol=0, atol=3e-7)
    assert np.array_equal(table.astype(np.float32).astype(np.float64), table)  # published as float32 values


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_codebook_negative_zero_entry_keeps_its_sign(target: str) -> None:
    spec = spec_of({"bits": 4, "kind": "codebook", "codebook": [-0.0, 1.0, -2.5, 0.0]}, target)
    plan = solve(spec)
    w = np.array([0x00003210], dtype=np.uint32)
    got = outputs(plan, {"w": w, **{k: np.full(1, v) for k, v in unit_scales(plan, target).items()}})
    want = np.array([-0.0, 1.0, -2.5, 0.0], dtype=np.float64).astype(NP_TARGET[target]).view(np.uint16)
    assert got[0, :4].tolist() == want.tolist() and got[0, 0] == 0x8000
    assert prove(plan, spec, n_random=20_000).ok


def test_short_codebook_leaves_unused_codes_zero() -> None:
    spec = spec_of({"bits": 4, "kind": "codebook", "codebook": [0.1, -0.3, 7.0]}, "bf16")
    plan = solve(spec)
    w = np.array([0xFEDCBA98, 0x76543210], dtype=np.uint32)
    got = outputs(plan, {"w": w, **{k: np.full(2, v) for k, v in unit_scales(plan, "bf16").items()}})
    table = np.array([0.1, -0.3, 7.0] + [0.0] * 13).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert got[1].tolist() == table[:8].tolist() and got[0].tolist() == table[8:].tolist()


@pytest.mark.parametrize("const_why", ["one unit of the last bit", "the top fp32 mantissa bit"])
def test_mutating_a_special_value_constant_is_caught(const_why: str) -> None:
    """The NaN marking of e4m3 (bit placement) and the 0x00 / 0xFF fix of e8m0 scales are load-bearing."""
    if const_why.startswith("one unit"):
        spec = spec_of({"bits": 8, "kind": "float", "format": "e4m3"}, "fp16", "sm_80")
    else:
        spec = spec_of(
            {"bits": 4, "kind": "float", "format": "e2m1"}, "fp16", scales={"group_size": 32, "dtype": "e8m0"}
        )
    plan = solve(spec)
    ops = list(plan.ops)
    hits = [i for i, op in enumerate(ops) if any(c.why.startswith(const_why) for c in op.consts)]
    assert hits
    i = hits[0]
    op = ops[i]
    args = tuple(
        Const(a.value ^ (a.value & -a.value), a.why, a.kind)
        if isinstance(a, Const) and a.why.startswith(const_why)
        else a
        for a in op.args
    )
    ops[i] = Op(op.opcode, op.dst, args, op.why, op.stage, op.imm, op.imm_why)
    mutated = Plan(
        plan.spec_name,
        plan.strategy,
        plan.summary,
        plan.target,
        plan.sm,
        plan.elements,
        plan.inputs,
        ops,
        plan.outputs,
        scale_regs=plan.scale_regs,
    )
    assert quick_check(plan, spec) is None
    assert quick_check(mutated, spec) is not None


@pytest.mark.parametrize("name", ["mxfp4_bf16", "nvfp4_fp16", "gptq_int3_fp16", "fp8_e4m3_bf16_sm80", "nf4_bf16"])
def test_new_shipped_specs_prove(name: str) -> None:

    spec = load_spec(SHIPPED_SPECS / f"{name}.yaml")
    r = prove(solve(spec), spec, n_random=50_000)
    assert r.ok, r.failures


def test_ops_per_8_are_fractions_of_the_block() -> None:
    plan = solve(spec_of({"bits": 3, "kind": "biased", "bias": 4}, "fp16"))
    assert plan.per8("convert") == Fraction(len(plan.stage_ops("convert")) * 8, 32)
