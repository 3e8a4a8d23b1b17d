"""dqgen.check.prove: every shipped plan proves; single-constant mutations are caught; the lane cases
cover every code at every lane; ``code_values`` / ``expected_bits`` agree with hand-worked words."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dqgen.check.prove import code_values, expected_bits, lane_cases, prove, quick_check, random_float_zeros
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec
from dqgen.ir.isa import Const, Opcode
from dqgen.ir.plan import Op, Plan
from dqgen.solve.solver import solve

from .test_solver import make as make_spec

ROOT = Path(__file__).resolve().parent.parent
SPECS = {p.stem: p for p in sorted(SHIPPED_SPECS.glob("*.yaml"))}


def make(
    bits: int, kind: str, target: str, order: Any, bias: int | None = None, zeros: str = "none", axis: str = "N"
) -> Spec:
    """test_solver's spec builder with packing along N unless told."""
    return make_spec(bits, kind, target, axis, order, bias, zeros)


_PLANS: dict[str, tuple[Spec, Plan]] = {}


def shipped(name: str) -> tuple[Spec, Plan]:
    if name not in _PLANS:
        spec = load_spec(SPECS[name])
        _PLANS[name] = (spec, solve(spec))
    return _PLANS[name]


# ----------------------------------------------------------------------------- proofs


@pytest.mark.parametrize("name", sorted(SPECS))
def test_shipped_specs_prove(name: str) -> None:
    spec, plan = shipped(name)
    r = prove(plan, spec, n_random=100_000)
    assert r.ok, r.failures
    assert not r.failures and r.words >= 100_000 + r.lane_words
    n_codes = (1 << spec.source.bits) ** (2 if spec.zeros.packed else 1)
    lane_blocks = n_codes * spec.per_word + (1 << spec.source.bits)
    if spec.scales.block:
        # every code at every lane plus the all-same-code blocks, each against all 256 scale codes
        assert r.lane_words == 256 * lane_blocks
    else:
        # every (code[, zero]) at every lane plus the all-same-code words, with scale 1 and random scales
        assert r.lane_words == 2 * lane_blocks
    assert "PROVEN" in r.line()


def test_full_proof_awq_int4_fp16() -> None:
    spec, plan = shipped("awq_int4_fp16")
    r = prove(plan, spec)
    assert r.ok, r.failures
    assert r.words - r.lane_words == 1_000_000


# ----------------------------------------------------------------------------- mutations


def replace_const(plan: Plan, pick: Callable[[Op], bool], old: int, new: int) -> Plan:
    """A copy of ``plan`` whose first op matching ``pick`` has constant ``old`` replaced by ``new``."""
    ops = list(plan.ops)
    for i, op in enumerate(ops):
        if pick(op) and old in [c.value for c in op.consts]:
            args = tuple(
                dataclasses.replace(a, value=new) if isinstance(a, Const) and a.value == old else a for a in op.args
            )
            ops[i] = dataclasses.replace(op, args=args)
            return dataclasses.replace(plan, ops=ops)
    raise AssertionError(f"no op with constant 0x{old:08X}")


def replace_imm(plan: Plan, opcode: Opcode, old: int, new: int) -> Plan:
    ops = list(plan.ops)
    for i, op in enumerate(ops):
        if op.opcode is opcode and op.imm == old:
            ops[i] = dataclasses.replace(op, imm=new)
            return dataclasses.replace(plan, ops=ops)
    raise AssertionError(f"no {opcode.name} with immediate 0x{old:X}")


def assert_caught(plan: Plan, spec: Spec, quick: bool = True) -> None:
    plan.check()  # still well formed: only the proof can tell
    if quick:
        bad = quick_check(plan, spec)
        assert bad is not None and "element" in bad and "word 0x" in bad, bad
    r = prove(plan, spec, n_random=20_000)
    assert not r.ok and r.failures
    assert "element" in r.failures[0] and "word 0x" in r.failures[0]
    assert "FAILED" in r.line()


def _conv(opcode: Opcode) -> Callable[[Op], bool]:
    return lambda op: op.opcode is opcode and op.stage == "convert"


def test_mutation_magic_off_by_one_ulp() -> None:
    spec, plan = shipped("awq_int4_fp16")
    assert_caught(replace_const(plan, _conv(Opcode.LOP3), 0x64006400, 0x64016401), spec)
    spec, plan = shipped("int8_bf16_shuffled")
    assert_caught(replace_const(plan, _conv(Opcode.LOP3), 0x43004300, 0x43014301), spec)


def test_mutation_fixup_off_by_one_ulp() -> None:
    spec, plan = shipped("ft_int8_fp16")
    assert_caught(replace_const(plan, _conv(Opcode.SUB_F16X2), 0x64806480, 0x64816481), spec)
    spec = make(4, "unsigned", "fp16", "awq")
    plan = solve(spec)
    assert_caught(replace_const(plan, _conv(Opcode.FMA_F16X2), 0xD400D400, 0xD401D401), spec)  # addend
    assert_caught(replace_const(plan, _conv(Opcode.FMA_F16X2), 0x2C002C00, 0x2C012C01), spec)  # 1/16 multiplier
    # only the high lane wrong
    assert_caught(replace_const(plan, _conv(Opcode.SUB_F16X2), 0x64006400, 0x64016400), spec)


def test_mutation_zero_stage_constant() -> None:
    spec, plan = shipped("awq_int4_fp16")
    muls = [op for op in plan.stage_ops("zero") if op.opcode is Opcode.MUL_F16X2]
    assert muls
    (c,) = muls[0].consts
    assert_caught(replace_const(plan, lambda op: op is muls[0], c.value, c.value + 0x00010001), spec)


def test_mutation_prmt_selector() -> None:
    spec, plan = shipped("ft_int8_fp16")
    assert_caught(replace_imm(plan, Opcode.PRMT, 0x5250, 0x5251), spec)
    spec, plan = shipped("gptq_int4_fp16")
    p = [op for op in plan.stage_ops("convert") if op.opcode is Opcode.PRMT][1]
    assert p.imm is not None
    # p1 = prmt(w, w, 0x1111) feeds a mask on bytes 0 and 2: point result byte 0 at another byte
    assert_caught(replace_imm(plan, Opcode.PRMT, p.imm, p.imm ^ 0x0001), spec)


def test_mutation_lop3_lut() -> None:
    spec, plan = shipped("awq_int4_fp16")
    assert_caught(replace_imm(plan, Opcode.LOP3, 0xEA, 0xE8), spec)


def test_mutation_shift_amount() -> None:
    spec, plan = shipped("awq_int4_fp16")
    assert_caught(replace_imm(plan, Opcode.SHR, 8, 4), spec)
    spec, plan = shipped("awq_int4_bf16")
    assert_caught(replace_imm(plan, Opcode.SHR, 4, 5), spec)


def test_mutation_scale_sign_of_zero() -> None:
    # bf16 on sm_80 multiplies by fma(d, s, -0): with +0 the product 0 * (negative scale) would
    # give +0 instead of -0. Scale 1 cannot see it; the random-scale lane cases must.
    spec, plan = shipped("int8_bf16")
    mutated = replace_const(plan, lambda op: op.stage == "scale", 0x80008000, 0x00000000)
    assert quick_check(mutated, spec) is None
    assert_caught(mutated, spec, quick=False)


# ----------------------------------------------------------------------------- lane cases


LANE_SPECS = [load_spec(p) for p in SPECS.values()] + [
    make(2, "unsigned", "fp16", "sequential"),
    make(1, "signed", "fp16", "sequential"),
    make(8, "unsigned", "fp16", "sequential", zeros="integer"),
]


@pytest.mark.parametrize("spec", LANE_SPECS, ids=[f"{s.name}_{s.source.short}_{s.target.value}" for s in LANE_SPECS])
def test_lane_cases_cover_every_code_at_every_lane(spec: Spec) -> None:
    words, zeros = lane_cases(spec, np.random.default_rng(9))
    b, n, W = spec.source.bits, spec.per_word, spec.words
    assert words.dtype == np.uint32 and (zeros is None) == (not spec.zeros.packed)
    assert words.shape[1:] == (() if W == 1 else (W,))
    top = (1 << b) - 1
    # each block as one integer, word 0 in the low bits, so a field may straddle two words
    blocks = words.reshape(len(words), W)
    ws = [sum(int(x) << (32 * k) for k, x in enumerate(row)) for row in blocks]
    zs = [int(z) for z in zeros] if zeros is not None else None
    for lane in range(n):
        codes = {(w >> (b * lane)) & top for w in ws}
        assert codes == set(range(1 << b)), lane
        assert top in codes
        if zs is not None:
            pairs = {((w >> (b * lane)) & top, (z >> (b * lane)) & top) for w, z in zip(ws, zs, strict=True)}
            assert pairs == {(q, z) for q in range(1 << b) for z in range(1 << b)}, lane
    # and a block holding the maximum code in every lane at once
    assert (1 << (32 * W)) - 1 in ws


# ----------------------------------------------------------------------------- expected values


def test_code_values_awq_order() -> None:
    # nibble j holds element [0,2,4,6,1,3,5,7][j]; with nibble j = j, element order[j] = j
    spec = make(4, "unsigned", "fp16", "awq")
    got = code_values(spec, np.array([0x76543210], dtype=np.uint32), None)
    assert got.tolist() == [[0, 4, 1, 5, 2, 6, 3, 7]]
    spec8 = make(4, "biased", "fp16", "awq", bias=8)
    assert code_values(spec8, np.array([0x76543210], dtype=np.uint32), None).tolist() == [
        [-8, -4, -7, -3, -6, -2, -5, -1]
    ]


def test_code_values_with_zeros() -> None:
    spec = make(4, "unsigned", "fp16", "awq", zeros="integer")
    w = np.array([0x76543210, 0xFFFFFFFF], dtype=np.uint32)
    z = np.array([0x11111111, 0x0000000F], dtype=np.uint32)  # second: zero 15 in nibble 0 = element 0
    assert code_values(spec, w, z).tolist() == [[-1, 3, 0, 4, 1, 5, 2, 6], [0, 15, 15, 15, 15, 15, 15, 15]]


def test_code_values_sequential_and_signed() -> None:
    s8 = make(8, "signed", "fp16", "sequential")
    w = np.array([0x80FF7F01], dtype=np.uint32)
    assert code_values(s8, w, None).tolist() == [[1, 127, -1, -128]]
    # FT int8: u8b128 in [0,2,1,3] order: fields 0x01, 0x7F, 0xFF, 0x80 are elements 0, 2, 1, 3
    ft = load_spec(SPECS["ft_int8_fp16"])
    assert code_values(ft, w, None).tolist() == [[1 - 128, 0xFF - 128, 0x7F - 128, 0x80 - 128]]
    u4seq = make(4, "unsigned", "fp16", "sequential", axis="K")
    assert code_values(u4seq, np.array([0xFEDCBA98], dtype=np.uint32), None).tolist() == [list(range(8, 16))]
    s1 = make(1, "signed", "fp16", "sequential")
    assert code_values(s1, np.array([0b101], dtype=np.uint32), None).tolist() == [[-1, 0, -1] + [0] * 29]


def test_expected_bits_hand_worked() -> None:
    s8 = make(8, "signed", "fp16", "sequential")
    w = np.array([0x80FF7F01], dtype=np.uint32)
    one = np.full((1, 4), 0x3C00, dtype=np.uint32)
    # fp16 of 1, 127, -1, -128: 127 = 2^6 * (1 + 1008/1024) -> (21 << 10) | 0x3F0
    assert expected_bits(s8, w, None, one).tolist() == [[0x3C00, (21 << 10) | 0x3F0, 0xBC00, 0x8000 | (22 << 10)]]
    # scale -0.5 (0xB800): -0.5, -63.5, 0.5, 64
    half = np.full((1, 4), 0xB800, dtype=np.uint32)
    assert expected_bits(s8, w, None, half).tolist() == [[0xB800, 0x8000 | (20 << 10) | 0x3F0, 0x3800, 21 << 10]]
    # zero code times a negative scale is -0
    assert expected_bits(s8, np.array([0], dtype=np.uint32), None, half).tolist() == [[0x8000] * 4]
    # bf16: 127 * 3 = 381 rounds to 380 (ulp 2 at 256..512, tie -> even mantissa 0x3E)
    i8b = make(8, "signed", "bf16", "sequential")
    three = np.full((1, 4), 0x4040, dtype=np.uint32)
    assert expected_bits(i8b, np.array([0x00007F00], dtype=np.uint32), None, three).tolist() == [
        [0, (135 << 7) | 0x3E, 0, 0]
    ]


def run_plan(plan: Plan, words: np.ndarray, zeros: np.ndarray | None, **scale_regs: np.ndarray) -> np.ndarray:
    """[n, outputs x 2] halves of the plan's output registers, element order from ``plan.pairs``."""
    blocks = words.reshape(len(words), -1)
    env = {name: blocks[:, k] for k, name in enumerate(plan.words)} | ({"z": zeros} if zeros is not None else {})
    regs = plan.run(env | scale_regs)
    got = np.empty((len(words), 2 * len(plan.outputs)), dtype=np.uint32)
    for o, (lo, hi) in zip(plan.outputs, plan.pairs, strict=True):
        got[:, lo], got[:, hi] = regs[o] & np.uint32(0xFFFF), regs[o] >> np.uint32(16)
    return got


TARGET_SCALED = sorted(n for n in SPECS if not load_spec(SPECS[n]).scales.block)
GLOBAL_SCALED = sorted(n for n in SPECS if load_spec(SPECS[n]).scales.global_scale)


@pytest.mark.parametrize("name", TARGET_SCALED)
def test_extreme_scales_match_formula(name: str) -> None:
    # The proof's random scales stay in the normal range; here scales are subnormal (results
    # underflow to subnormals / zero) or huge (results overflow to inf), both signs.
    spec, plan = shipped(name)
    rng = np.random.default_rng(11)
    words, zeros = lane_cases(spec, rng)
    n = len(words)
    fp16 = spec.target.value == "fp16"
    tiny = rng.integers(1, 0x400 if fp16 else 0x80, size=(n, spec.per_word))  # subnormal patterns
    big = (0x7BFF if fp16 else 0x7F7F) - rng.integers(0, 0x200, size=(n, spec.per_word))
    for mags in (tiny, big):
        scales = (mags | (rng.integers(0, 2, size=mags.shape) << 15)).astype(np.uint32)
        fz = random_float_zeros(rng, spec, scales.shape)
        pairs = {f"s{i}": scales[:, 2 * i] | (scales[:, 2 * i + 1] << np.uint32(16)) for i in range(spec.per_word // 2)}
        if fz is not None:
            pairs |= {f"f{i}": fz[:, 2 * i] | (fz[:, 2 * i + 1] << np.uint32(16)) for i in range(spec.per_word // 2)}
        assert np.array_equal(run_plan(plan, words, zeros, **pairs), expected_bits(spec, words, zeros, scales, fz))


@pytest.mark.parametrize("name", GLOBAL_SCALED)
def test_extreme_global_scales_match_formula(name: str) -> None:
    # NVFP4: fp32 global scales at both ends of fp32 (subnormal, near FLT_MAX), against every block
    # scale code, so that a product formed in the target format first would under- or overflow.
    spec, plan = shipped(name)
    rng = np.random.default_rng(12)
    words, _ = lane_cases(spec, rng)
    words = np.repeat(words, 256, axis=0)
    codes = np.tile(np.arange(256, dtype=np.uint32), len(words) // 256)
    for gs_bits in (
        rng.integers(1, 0x00800000, size=len(words)),
        0x7F7FFFFF - rng.integers(0, 1 << 26, size=len(words)),
        rng.integers(0x2A000000, 0x36000000, size=len(words)),
    ):  # 2^-43 .. 2^-19: the target's far range
        gs = (gs_bits | (rng.integers(0, 2, size=len(words)) << 31)).astype(np.uint32)
        want = expected_bits(spec, words, None, codes, gs=gs)
        assert np.array_equal(run_plan(plan, words, None, sc=codes, gs=gs), want)
        assert (
            0 < np.count_nonzero(np.isin(want & 0x7FFF, [0, 0x7C00, 0x7F80])) < want.size
        )  # some but not all saturate


def test_nan_products_compare_as_ptx_canonical_nan() -> None:
    """0 * inf is NaN: PTX writes 0x7FFF, and the expected value must use the same pattern."""
    from dqgen.check.prove import expected_bits

    spec = load_spec(
        {
            "name": "b1",
            "source": {"bits": 1, "kind": "unsigned"},
            "target": "fp16",
            "packing": {"axis": "N"},
            "scales": {"group_size": -1},
        }
    )
    words = np.zeros(1, dtype=np.uint32)  # every code 0
    scales = np.full((1, 32), 0x7C00, dtype=np.uint32)  # +inf
    assert (expected_bits(spec, words, None, scales) == 0x7FFF).all()
    plan = solve(spec)
    assert prove(plan, spec, n_random=1 << 20).ok
