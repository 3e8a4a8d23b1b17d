"""OCP MX FP6 (e2m3, e3m2) with and without e8m0 block scales, to fp16 and bf16 (issue 12 item 6).

Expected values come from ml_dtypes' float6 types and from exact Fractions of the OCP Microscaling Formats
v1.0 definition written out here, never from dqgen's registry or plans. Blocks are built with Python integers
(code i at bits [6i, 6i+6) of a 96-bit block), not with dqgen's Layout."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from dqgen.check.prove import prove
from dqgen.core.formats import scalar_type
from dqgen.core.spec import SHIPPED_SPECS, SpecError, load_spec
from dqgen.layout.packing import pack, unpack
from dqgen.solve.solver import solve
from dqgen.tools.explain import render

from .test_new_formats import outputs

NP_TARGET = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}
ML6 = {"e2m3": ml_dtypes.float6_e2m3fn, "e3m2": ml_dtypes.float6_e3m2fn}
#: (exponent bits, mantissa bits, bias) from OCP MX v1.0 section 5.3.2; neither has inf or NaN
OCP = {"e2m3": (2, 3, 1), "e3m2": (3, 2, 3)}
SHIPPED = {
    "fp6_e2m3_fp16": ("e2m3", "fp16", False),
    "fp6_e3m2_bf16": ("e3m2", "bf16", False),
    "mxfp6_e2m3_bf16": ("e2m3", "bf16", True),
    "mxfp6_e3m2_fp16": ("e3m2", "fp16", True),
}


def ocp_value(fmt: str, code: int) -> Fraction:
    ebits, mbits, bias = OCP[fmt]
    sign = -1 if code >> 5 & 1 else 1
    e, m = (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    if e == 0:  # subnormal: 2^(1 - bias) * m / 2^mbits
        return sign * Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias)
    return sign * (1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias)


def blocks_every_code_every_lane(rng: np.random.Generator) -> np.ndarray:
    """[64 * 16, 16] codes: each of the 64 codes at each of the 16 lanes of a block, other lanes random."""
    codes = rng.integers(0, 64, size=(64 * 16, 16))
    for lane in range(16):
        codes[lane * 64 : (lane + 1) * 64, lane] = np.arange(64)
    return codes


def words_of(codes: np.ndarray) -> dict[str, np.ndarray]:
    blocks = [sum(int(c) << (6 * i) for i, c in enumerate(row)) for row in codes]
    return {f"w{k}": np.array([(b >> (32 * k)) & 0xFFFFFFFF for b in blocks], dtype=np.uint32) for k in range(3)}


def target_bits(values: np.ndarray, target: str) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).astype(NP_TARGET[target]).view(np.uint16).astype(np.uint32)


def fp6_spec(fmt: str, target: str, mx: bool) -> object:
    scales = {"group_size": 32, "dtype": "e8m0"} if mx else {"group_size": 32}
    return load_spec(
        {
            "name": "t",
            "source": {"bits": 6, "kind": "float", "format": fmt},
            "target": target,
            "packing": {"axis": "K", "order": "sequential", "words": 3},
            "scales": scales,
            "arch": "sm_80",
        }
    )


@pytest.mark.parametrize("fmt", ["e2m3", "e3m2"])
def test_registry_rows_equal_ml_dtypes_and_the_ocp_formula(fmt: str) -> None:
    t = scalar_type(fmt)
    assert t.canonical == ML6[fmt].__name__
    ml = np.arange(64, dtype=np.uint8).view(ML6[fmt]).astype(np.float64)
    for code in range(64):
        want = ocp_value(fmt, code)
        assert Fraction(float(ml[code])) == want, (fmt, code)
        assert t.decode(code) == want or (code == 32 and t.decode(code) == 0), (fmt, code)
    assert max(ocp_value(fmt, c) for c in range(64)) == {"e2m3": Fraction(15, 2), "e3m2": 28}[fmt]


def test_shipped_specs_are_the_four_fp6_ones() -> None:
    for name, (fmt, target, mx) in SHIPPED.items():
        spec = load_spec(SHIPPED_SPECS / f"{name}.yaml")
        assert (spec.source.format, spec.target.value, spec.scales.block) == (fmt, target, mx)
        assert spec.words == 3 and spec.per_word == 16


@pytest.mark.parametrize("mx", [False, True], ids=["plain", "mx"])
@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("fmt", ["e2m3", "e3m2"])
def test_every_code_every_lane_equals_ml_dtypes(fmt: str, target: str, mx: bool) -> None:
    plan = solve(fp6_spec(fmt, target, mx))
    assert plan.words == ["w0", "w1", "w2"] and plan.elements == 16
    codes = blocks_every_code_every_lane(np.random.default_rng(6))
    env = words_of(codes)
    if mx:
        env["sc"] = np.full(len(codes), 127, dtype=np.uint32)  # e8m0 127 = 2^0
    else:
        one = int(np.array(1.0, dtype=NP_TARGET[target]).view(np.uint16)) * 0x10001
        env.update({f"s{i}": np.full(len(codes), one, dtype=np.uint32) for i in range(8)})
    got = outputs(plan, env)
    want_ml = codes.astype(np.uint8).view(ML6[fmt]).astype(np.float64)
    # Fraction has no -0: the sign bit goes on separately (code 32 is -0)
    want_ocp = np.array(
        [[math.copysign(float(ocp_value(fmt, int(c))), 1 - 2 * (int(c) >> 5)) for c in row] for row in codes]
    )
    assert (got == target_bits(want_ml, target)).all()
    assert (got == target_bits(want_ocp, target)).all()
    neg_zero = codes == 32  # -0 keeps its sign
    assert (got[neg_zero] == 0x8000).all()


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("fmt", ["e2m3", "e3m2"])
def test_group_scale_is_one_rounding(fmt: str, target: str) -> None:
    plan = solve(fp6_spec(fmt, target, False))
    rng = np.random.default_rng(7)
    codes = blocks_every_code_every_lane(rng)
    s = rng.uniform(-3, 3, size=(len(codes), 8)).astype(NP_TARGET[target])
    sb = s.view(np.uint16).astype(np.uint32)
    env = words_of(codes) | {f"s{i}": sb[:, i] | sb[:, i] << 16 for i in range(8)}
    got = outputs(plan, env)
    vals = codes.astype(np.uint8).view(ML6[fmt]).astype(np.float64)
    want = vals * np.repeat(s.astype(np.float64), 2, axis=1)  # exact in float64; one rounding below
    assert (got == target_bits(want, target)).all()


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("fmt", ["e2m3", "e3m2"])
def test_mx_every_e8m0_code_equals_ml_dtypes(fmt: str, target: str) -> None:
    plan = solve(fp6_spec(fmt, target, True))
    codes = blocks_every_code_every_lane(np.random.default_rng(8))
    words = words_of(codes)
    sc = np.arange(256, dtype=np.uint32)
    env = {k: np.repeat(v, 256) for k, v in words.items()} | {"sc": np.tile(sc, len(codes))}
    got = outputs(plan, env)
    vals = np.repeat(codes, 256, axis=0).astype(np.uint8).view(ML6[fmt]).astype(np.float64)
    scale = env["sc"].astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want = (vals * scale[:, None]).astype(NP_TARGET[target])  # float64 product exact; one rounding
    g = got.astype(np.uint16).view(NP_TARGET[target]).astype(np.float32)
    nan = np.isnan(want.astype(np.float32))
    assert nan[env["sc"] == 0xFF].all() and not nan[env["sc"] != 0xFF].any()
    assert (np.isnan(g) == nan).all()
    assert (got[~nan] == want.view(np.uint16).astype(np.uint32)[~nan]).all()


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_fp6_specs_prove(name: str) -> None:
    spec = load_spec(SHIPPED_SPECS / f"{name}.yaml")
    r = prove(solve(spec), spec, n_random=20_000)
    assert r.ok, r.failures


@pytest.mark.parametrize("fmt", ["e2m3", "e3m2"])
def test_pack_unpack_ml_dtypes_array_round_trips(fmt: str) -> None:
    spec = fp6_spec(fmt, "fp16", True)
    rng = np.random.default_rng(9)
    codes = rng.integers(0, 64, size=(64, 5)).astype(np.uint8)
    q = pack(codes.view(ML6[fmt]), spec)
    assert q.shape == (64 * 3 // 16, 5)
    # code i of a block at bits [6i, 6i+6) of its 3 words, word 0 lowest
    for col in range(5):
        for b in range(4):
            block = sum(int(q[3 * b + k, col]) % 2**32 << (32 * k) for k in range(3))
            assert [(block >> (6 * i)) & 63 for i in range(16)] == list(codes[16 * b : 16 * b + 16, col])
    assert (unpack(q, spec) == codes).all()


def test_mx_fp6_rejects_e4m3_block_scales_in_one_line() -> None:
    with pytest.raises(SpecError) as e:
        load_spec(
            {
                "name": "t",
                "source": {"bits": 6, "kind": "float", "format": "e3m2"},
                "target": "fp16",
                "packing": {"axis": "K", "words": 3},
                "scales": {"group_size": 16, "dtype": "e4m3", "global_scale": True},
            }
        )
    assert "scales.dtype" in str(e.value) and "\n" not in str(e.value).strip()


@pytest.mark.parametrize(
    ("name", "k", "carrier_bias", "src_bias"),
    [("fp6_e2m3_fp16", 14, 15, 1), ("fp6_e3m2_bf16", 124, 127, 3), ("mxfp6_e3m2_fp16", 12, 15, 3)],
)
def test_explain_names_the_rebias_and_the_op_count(name: str, k: int, carrier_bias: int, src_bias: int) -> None:
    spec = load_spec(SHIPPED_SPECS / f"{name}.yaml")
    plan = solve(spec)
    text = render(spec, plan, None)
    assert plan.strategy == "bit_place"
    assert f"2^{k} = 2^({carrier_bias} - {src_bias})" in text
    assert "no inf or NaN" in text
    assert "16 per 3-word block" in text and "straddling two words" in text
    if name == "fp6_e2m3_fp16":
        # pair 0's diagram: element 0 (a) and 1 (b) each sign on top, 5 magnitude bits under the mantissa top
        # (fp16 bits 11..7), everything else zero: the bit placement, read off the emulated symbols
        assert "p0     = b000 bbbb b000 0000 | a000 aaaa a000 0000" in text
    n = len(plan.stage_ops("convert"))
    assert f"({n} ops per block, {float(Fraction(n * 8, 16)):g} per 8 outputs)" in text
