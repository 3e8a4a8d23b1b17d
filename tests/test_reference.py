"""Tests of the numba reference dequantizer against independent, test-side models.

Expected values here come from IEEE facts, numpy / ml_dtypes casts, exact ``Fraction``
arithmetic and a plain Python packer written below: never from dqgen.check.reference itself.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dqgen.check.reference import (
    _code_values,
    _decode_e8m0_array,
    _round_array,
    _round_bits,
    _round_to_bits_array,
    _sum_round_to_odd_array,
    dequantize_reference,
    element_value,
    random_global_scale,
    random_inputs,
    shapes_for,
)
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec, with_group_size

ROOT = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted(SHIPPED_SPECS.glob("*.yaml"))
BF16 = np.dtype(ml_dtypes.bfloat16)

# Widths and orders the shipped specs do not exercise: 1- and 2-bit codes, an explicit
# permutation, zero points on a non-AWQ layout, signed 1-bit codes.
EXTRA_SPECS: dict[str, dict] = {
    "u2_k_reversed": {
        "name": "u2_k_reversed",
        "source": {"bits": 2, "kind": "unsigned"},
        "target": "fp16",
        "packing": {"axis": "K", "order": list(range(15, -1, -1))},
        "scales": {"group_size": 128},
    },
    "u2_n_zeros_bf16": {
        "name": "u2_n_zeros_bf16",
        "source": {"bits": 2, "kind": "unsigned"},
        "target": "bf16",
        "packing": {"axis": "N", "order": [3, 0, 15, 1, 4, 2, 14, 5, 13, 6, 12, 7, 11, 8, 10, 9]},
        "scales": {"group_size": 64},
        "zeros": {"mode": "integer"},
    },
    "s1_n": {
        "name": "s1_n",
        "source": {"bits": 1, "kind": "signed"},
        "target": "bf16",
        "packing": {"axis": "N"},
        "scales": {"group_size": -1},
    },
    "u1b1_k": {
        "name": "u1b1_k",
        "source": {"bits": 1, "kind": "biased", "bias": 1},
        "target": "fp16",
        "packing": {"axis": "K", "order": [(7 * j) % 32 for j in range(32)]},
        "scales": {"group_size": 128},
    },
}


def _integer_single_word(s: Spec) -> bool:
    """Integer codes in single words with target-dtype scales: what sections 2-8 model. Minifloat,
    codebook, block-scaled and multi-word specs are modelled in section 9."""
    return s.source.kind.value in ("unsigned", "signed", "biased") and s.words == 1 and not s.scales.block


def _fixed(s: Spec) -> Spec:
    """A shipped spec; 'auto' group sizes fixed at 128, the explicit-size path these tests model."""
    return with_group_size(s, 128) if s.scales.group_size == "auto" else s


def _all_specs() -> list:
    # The layout/zero tests below model AWQ-style zeros and row // group groups; shipped specs with
    # other zero modes or act-order are covered by MODE_SPECS and the act-order tests further down.
    shipped = [_fixed(load_spec(p)) for p in SPEC_FILES]
    params = [
        pytest.param(s, id=s.name)
        for s in shipped
        if s.zeros.mode in ("none", "integer") and not s.act_order and _integer_single_word(s)
    ]
    params += [pytest.param(load_spec(d), id=name) for name, d in EXTRA_SPECS.items()]
    return params


ALL_SPECS = _all_specs()

ZERO_MODES = ["none", "integer", "gptq_v1", "gptq_v2", "float", "additive"]
PACKED = ("integer", "gptq_v1", "gptq_v2")


def _mspec(
    name: str,
    *,
    bits: int = 4,
    kind: str = "unsigned",
    bias: int | None = None,
    target: str = "fp16",
    axis: str = "N",
    order: str | list[int] = "sequential",
    gs: int = 16,
    mode: str = "none",
    act_order: bool = False,
) -> dict:
    source: dict = {"bits": bits, "kind": kind}
    if bias is not None:
        source["bias"] = bias
    return {
        "name": name,
        "source": source,
        "target": target,
        "packing": {"axis": axis, "order": order},
        "scales": {"group_size": gs},
        "zeros": {"mode": mode},
        "act_order": act_order,
    }


def _mode_spec_dicts() -> dict[str, dict]:
    """Small AWQ-like (packed along N, AWQ order) and GPTQ-like (packed along K) specs for every
    zero mode and target, GPTQ-like ones with act_order, and a few odd widths / orders / kinds."""
    d: dict[str, dict] = {}
    for mode in ZERO_MODES:
        for target in ("fp16", "bf16"):
            n = f"awq_{mode}_{target}"
            d[n] = _mspec(n, target=target, axis="N", order="awq", mode=mode)
            n = f"gptq_{mode}_{target}"
            d[n] = _mspec(n, target=target, axis="K", mode=mode)
        target = "bf16" if mode in ("gptq_v1", "float", "none") else "fp16"
        n = f"gptq_act_{mode}_{target}"
        d[n] = _mspec(n, target=target, axis="K", mode=mode, act_order=True)
    # Packed zeros with a non-sequential order along K: qzeros stay sequential (GPTQ).
    d["u4_k_rev_integer"] = _mspec("u4_k_rev_integer", axis="K", order=list(range(7, -1, -1)), mode="integer")
    d["u2_k_perm_v1_act"] = _mspec(
        "u2_k_perm_v1_act",
        bits=2,
        axis="K",
        order=[(5 * j) % 16 for j in range(16)],
        mode="gptq_v1",
        act_order=True,
        target="bf16",
    )
    # Packed zeros along N with a custom order: qzeros use the same order (AWQ).
    d["u2_n_perm_v1"] = _mspec(
        "u2_n_perm_v1", bits=2, axis="N", order=[(3 * j) % 16 for j in range(16)], mode="gptq_v1", gs=32
    )
    d["u8_n_ft_v2_bf16"] = _mspec("u8_n_ft_v2_bf16", bits=8, axis="N", order="ft_int8", mode="gptq_v2", target="bf16")
    # Signed / biased codes with float and additive zeros, per-channel groups, 8-bit act_order.
    d["s4_n_float_bf16"] = _mspec("s4_n_float_bf16", kind="signed", mode="float", target="bf16", gs=-1)
    d["u4b8_k_additive_bf16"] = _mspec(
        "u4b8_k_additive_bf16", kind="biased", bias=8, axis="K", mode="additive", target="bf16"
    )
    d["u8b128_k_act_additive_fp16"] = _mspec(
        "u8b128_k_act_additive_fp16", bits=8, kind="biased", bias=128, axis="K", mode="additive", act_order=True
    )
    d["s8_k_act_float_fp16"] = _mspec(
        "s8_k_act_float_fp16", bits=8, kind="signed", axis="K", mode="float", act_order=True, gs=32
    )
    return d


MODE_SPEC_DICTS = _mode_spec_dicts()
MODE_SPECS = [pytest.param(load_spec(v), id=k) for k, v in MODE_SPEC_DICTS.items()]


def test_specs_found() -> None:
    assert len(SPEC_FILES) >= 7


# ----------------------------------------------------------------------------------------------
# Test-side models.
# ----------------------------------------------------------------------------------------------


def _value(spec: Spec, q: int) -> int:
    """Code value from the spec's prose: unsigned q, two's complement, or q - bias."""
    bits = spec.source.bits
    kind = spec.source.kind.value
    if kind == "unsigned":
        return q
    if kind == "signed":
        return q if q < 2 ** (bits - 1) else q - 2**bits
    return q - spec.source.bias


def _pack_words(codes: np.ndarray, spec: Spec, axis: str, order: list[int] | None = None) -> np.ndarray:
    """Pack a 2-D array of unsigned codes into int32 words along ``axis``, one element at a time
    (field j of a word holds element ``order[j]`` of its run; the spec's order by default)."""
    bits = spec.source.bits
    p = 32 // bits
    order = spec.order if order is None else order
    rows, cols = codes.shape
    shape = (rows, cols // p) if axis == "N" else (rows // p, cols)
    out = np.zeros(shape, dtype=np.uint32)
    for a in range(shape[0]):
        for b in range(shape[1]):
            word = 0
            for j in range(p):
                if axis == "N":
                    code = int(codes[a, b * p + order[j]])
                else:
                    code = int(codes[a * p + order[j], b])
                assert 0 <= code < 2**bits
                word |= code << (bits * j)
            out[a, b] = word
    return out.view(np.int32)


def _target_dtype(spec: Spec) -> np.dtype:
    return np.dtype(np.float16) if spec.target.value == "fp16" else BF16


def _rne(x: Fraction, ebits: int, mbits: int) -> float:
    """Exact round-to-nearest-even of a rational into a binary format, as a float64 (zero: +0.0)."""
    if x == 0:
        return 0.0
    bias = 2 ** (ebits - 1) - 1
    emin = 1 - bias
    emax = 2**ebits - 2 - bias
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^e <= a < 2^(e+2)
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - mbits)
    n = round(a / quantum)  # Fraction.__round__ rounds halves to even
    v = n * quantum
    largest = (2 - Fraction(1, 2**mbits)) * Fraction(2) ** emax
    if v > largest:
        r = math.inf
    else:
        r = float(v)  # exact: v has at most mbits + 1 significant bits
    return -r if x < 0 else r


def _bf16_from_exact(v: np.ndarray) -> np.ndarray:
    """bf16 bits of float64 values that are exactly representable in bf16 (no rounding happens)."""
    return v.astype(np.float32).astype(BF16).view(np.uint16)


def _bits16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def _unpack_fields(words: np.ndarray, bits: int) -> np.ndarray:
    w = words.view(np.uint32).astype(np.uint64)
    shifts = np.arange(32 // bits, dtype=np.uint64) * np.uint64(bits)
    return ((w[..., None] >> shifts) & np.uint64(2**bits - 1)).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# 1. Rounding float64 -> fp16 / bf16 bits.
# ----------------------------------------------------------------------------------------------


def _wide_f64(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return sign * (1.0 + rng.random(n)) * np.exp2(rng.integers(lo, hi, n).astype(np.float64))


def _ties_and_neighbours(mbits: int, emin: int, emax: int) -> np.ndarray:
    vals: list[float] = []
    half_ulp_1 = 2.0 ** -(mbits + 1)
    for base in (1.0, 1.0 + 2.0**-mbits, 1.5, 2.0 - 2.0**-mbits):
        for e in (emin, emin + 1, -3, 0, 7, emax):
            vals.append(math.ldexp(base + half_ulp_1, e))  # a tie
    sub_q = 2.0 ** (emin - mbits)  # smallest subnormal
    for k in (0.5, 1.5, 2.5, 3.5, 1.0, 2.0**mbits - 0.5, 2.0**mbits + 0.5):
        vals.append(k * sub_q)
    largest = (2.0 - 2.0**-mbits) * 2.0**emax
    threshold = (2.0 - 2.0 ** -(mbits + 1)) * 2.0**emax  # ties to even = inf
    vals += [largest, threshold, 2.0 ** (emax + 1), 1e300, 5e-324, 2.0 ** (emin - mbits - 1)]
    vals = [v for v in vals] + [-v for v in vals]
    arr = np.array(vals, dtype=np.float64)
    # One float64 ulp either side of every tie and threshold breaks the tie.
    return np.concatenate([arr, np.nextafter(arr, np.inf), np.nextafter(arr, -np.inf)])


def test_round_fp16_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [
            _wide_f64(rng, 40000, -40, 18),  # subnormals, normals and overflow
            _ties_and_neighbours(10, -14, 15),
            np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, 65536.0]),
            # Random bit patterns: mantissas with every bit set somewhere.
            rng.integers(0x3E00_0000_0000_0000, 0x40F8_0000_0000_0000, 20000, dtype=np.uint64).view(np.float64),
        ]
    )
    got = _round_array(x, 5, 10)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_round_bf16_matches_ml_dtypes_on_float32_inputs() -> None:
    rng = np.random.default_rng(2)
    # Every finite float32 bit pattern is fair game; a float32 -> bf16 cast rounds once.
    f32 = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f32 = f32[np.isfinite(f32)]
    extra = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            1 + 2**-8,
            1 + 3 * 2**-8,
            -(1 + 2**-8),
            2.0**-133,
            2.0**-134,
            3 * 2.0**-134,
            np.finfo(np.float32).max,
            np.finfo(np.float32).tiny,
            2.0**-149,
        ],
        dtype=np.float32,
    )
    f32 = np.concatenate([f32, extra])
    got = _round_array(f32.astype(np.float64), 8, 7)
    want = f32.astype(BF16).view(np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(f32[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_round_matches_exact_fraction_model(fmt: str) -> None:
    """Values that are not float32 (so no ml_dtypes double rounding) against exact rationals."""
    ebits, mbits, emin, emax = (5, 10, -14, 15) if fmt == "fp16" else (8, 7, -126, 127)
    rng = np.random.default_rng(3)
    x = np.concatenate([_wide_f64(rng, 3000, emin - mbits - 3, emax + 2), _ties_and_neighbours(mbits, emin, emax)])
    got = _round_array(x, ebits, mbits)
    for xi, gi in zip(x, got, strict=True):
        r = _rne(Fraction(float(xi)), ebits, mbits)
        if r == 0.0:
            r = math.copysign(0.0, xi)
        if fmt == "fp16":
            want = int(np.array([r]).astype(np.float16).view(np.uint16)[0])
        else:
            want = int(_bf16_from_exact(np.array([r]))[0])
        assert int(gi) == want, (xi, hex(int(gi)), hex(want))


def test_round_known_bit_patterns() -> None:
    # IEEE facts, written down independently of any implementation.
    fp16 = {
        1.0: 0x3C00,
        1 + 2**-11: 0x3C00,
        1 + 3 * 2**-11: 0x3C02,
        65504.0: 0x7BFF,
        65520.0: 0x7C00,
        65519.0: 0x7BFF,
        2.0**-24: 0x0001,
        2.0**-25: 0x0000,
        3 * 2.0**-25: 0x0002,
        2.0**-14: 0x0400,
        -0.0: 0x8000,
        -2.0: 0xC000,
        math.inf: 0x7C00,
        -1e9: 0xFC00,
        2.0**-14 - 2.0**-25: 0x0400,
    }
    bf16 = {
        1.0: 0x3F80,
        1 + 2**-8: 0x3F80,
        1 + 3 * 2**-8: 0x3F82,
        1 + 2**-8 + 2**-40: 0x3F81,
        -0.0: 0x8000,
        2.0**-133: 0x0001,
        2.0**-134: 0x0000,
        2.0**-126: 0x0080,
        (2 - 2**-7) * 2.0**127: 0x7F7F,
        (2 - 2**-8) * 2.0**127: 0x7F80,
        -math.inf: 0xFF80,
    }
    for x, bits in fp16.items():
        assert int(_round_bits(x, 5, 10)) == bits, (x, hex(int(_round_bits(x, 5, 10))))
    for x, bits in bf16.items():
        assert int(_round_bits(x, 8, 7)) == bits, (x, hex(int(_round_bits(x, 8, 7))))


# ----------------------------------------------------------------------------------------------
# 2. Layout: known codes, scale 1, zero 0.
# ----------------------------------------------------------------------------------------------


def _shape_for_test(spec: Spec) -> tuple[int, int]:
    return 256, 64


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_layout_every_element(spec: Spec) -> None:
    K, N = _shape_for_test(spec)
    bits = spec.source.bits
    rng = np.random.default_rng(10)
    codes = rng.integers(0, 2**bits, size=(K, N))
    qweight = _pack_words(codes, spec, spec.packing.axis)
    G = 1 if spec.scales.group_size == -1 else K // spec.scales.group_size
    scales = np.ones((G, N), dtype=_target_dtype(spec))
    zeros = np.zeros((G, N // (32 // bits)), dtype=np.int32) if spec.zeros.mode == "integer" else None
    W = dequantize_reference(spec, qweight, scales, zeros)
    assert W.dtype == _target_dtype(spec) and W.shape == (K, N)
    want = np.vectorize(lambda q: _value(spec, int(q)))(codes).astype(np.float64)
    np.testing.assert_array_equal(W.astype(np.float64), want)
    # uint32 words are accepted and mean the same bits.
    W2 = dequantize_reference(spec, qweight.view(np.uint32), scales, zeros)
    np.testing.assert_array_equal(_bits16(W2), _bits16(W))


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_element_value_all_codes(spec: Spec) -> None:
    bits = spec.source.bits
    for q in range(2**bits):
        assert element_value(spec, q) == _value(spec, q)
        if spec.zeros.mode == "integer":
            for z in (0, 1, 2**bits - 1):
                assert element_value(spec, q, z) == _value(spec, q) - z


def test_shapes_for_known_layouts() -> None:
    by = {p.stem: _fixed(load_spec(p)) for p in SPEC_FILES}
    assert shapes_for(by["awq_int4_fp16"], 4096, 4096) == {
        "qweight": (4096, 512),
        "scales": (32, 4096),
        "zeros": (32, 512),
    }
    assert shapes_for(by["gptq_int4_fp16"], 4096, 11008) == {"qweight": (512, 11008), "scales": (32, 11008)}
    assert shapes_for(by["int8_fp16"], 4096, 4096) == {"qweight": (4096, 1024), "scales": (1, 4096)}
    with pytest.raises(ValueError, match="group_size"):
        shapes_for(by["awq_int4_fp16"], 200, 64)
    with pytest.raises(ValueError, match="multiple of 8"):
        shapes_for(by["awq_int4_fp16"], 256, 60)


# ----------------------------------------------------------------------------------------------
# 3. Scales, zeros and groups, against exact rationals.
# ----------------------------------------------------------------------------------------------


def _wide_scales(spec: Spec, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    # Spread wide enough to produce subnormal, zero (fp16 underflow) and overflowing products.
    lo, hi = (-27.0, 13.0) if spec.target.value == "fp16" else (-136.0, 126.0)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    s = (sign * 2.0 ** rng.uniform(lo, hi, size=shape)).astype(_target_dtype(spec))
    s[0, 0] = -s[0, 0] if s[0, 0] != 0 else -1.0  # make sure both a negative ...
    s[0, 1] = 0.0 * s[0, 1]  # ... and a signed zero scale are present
    return s


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_scales_zeros_groups_exact(spec: Spec) -> None:
    K, N = 256, 32
    bits = spec.source.bits
    p = 32 // bits
    N = max(N, p)
    rng = np.random.default_rng(20)
    codes = rng.integers(0, 2**bits, size=(K, N))
    gs = spec.scales.group_size
    G = 1 if gs == -1 else K // gs
    scales = _wide_scales(spec, (G, N), rng)
    zcodes = rng.integers(0, 2**bits, size=(G, N)) if spec.zeros.mode == "integer" else None
    qweight = _pack_words(codes, spec, spec.packing.axis)
    zeros = _pack_words(zcodes, spec, "N") if zcodes is not None else None
    W = _bits16(dequantize_reference(spec, qweight, scales, zeros))
    ebits, mbits = (5, 10) if spec.target.value == "fp16" else (8, 7)
    s64 = scales.astype(np.float64)
    for k in range(K):
        g = 0 if gs == -1 else k // gs
        for n in range(N):
            d = _value(spec, int(codes[k, n])) - (int(zcodes[g, n]) if zcodes is not None else 0)
            s = float(s64[g, n])
            exact = Fraction(d) * Fraction(s)
            if exact == 0:
                # IEEE product sign: negative iff exactly one factor is negative (d == 0 is +0).
                neg = (d < 0) != (math.copysign(1.0, s) < 0)
                want = 0x8000 if neg else 0x0000
            elif spec.target.value == "fp16":
                with np.errstate(over="ignore"):
                    want = int(np.array([float(exact)]).astype(np.float16).view(np.uint16)[0])
            else:
                want = int(_bf16_from_exact(np.array([_rne(exact, ebits, mbits)]))[0])
            assert int(W[k, n]) == want, (k, n, d, s, hex(int(W[k, n])), hex(want))


@pytest.mark.parametrize("spec", [p for p in ALL_SPECS if p.id in {s.stem for s in SPEC_FILES}])
def test_random_inputs_full_tensor_vectorized(spec: Spec) -> None:
    """A whole random tensor against a numpy model of the layout (test-side unpacking)."""
    K, N = 512, 256
    qweight, scales, zeros, g_idx = random_inputs(spec, K, N, seed=5)
    assert g_idx is None
    W = _bits16(dequantize_reference(spec, qweight, scales, zeros))
    bits, p, order = spec.source.bits, spec.per_word, np.asarray(spec.order)
    fields = _unpack_fields(qweight, bits)  # [..., j]
    codes = np.empty((K, N), dtype=np.int64)
    if spec.packing.axis == "N":
        codes.reshape(K, N // p, p)[:, :, order] = fields
    else:
        codes.reshape(K // p, p, N)[:, order, :] = fields.transpose(0, 2, 1)
    vals = np.vectorize(lambda q: _value(spec, int(q)))(np.arange(2**bits))[codes]
    gs = spec.scales.group_size
    rows = np.zeros(K, dtype=np.int64) if gs == -1 else np.arange(K) // gs
    if zeros is not None:
        z = np.empty((zeros.shape[0], N), dtype=np.int64)
        z.reshape(zeros.shape[0], N // p, p)[:, :, order] = _unpack_fields(zeros, bits)
        vals = vals - z[rows]
    prod = vals.astype(np.float64) * scales.astype(np.float64)[rows]  # exact: <= 20 significant bits
    with np.errstate(over="ignore"):
        if spec.target.value == "fp16":
            want = prod.astype(np.float16).view(np.uint16)
        else:
            want = prod.astype(np.float32).astype(BF16).view(np.uint16)  # float32 step is exact
    np.testing.assert_array_equal(W, want)


# ----------------------------------------------------------------------------------------------
# 4. Error paths: each names the offending tensor.
# ----------------------------------------------------------------------------------------------


def _spec(stem: str) -> Spec:
    return _fixed(load_spec(SHIPPED_SPECS / f"{stem}.yaml"))


def test_error_message_example() -> None:
    spec = _spec("awq_int4_fp16")
    q, s, z, _ = random_inputs(spec, 4096, 4096, 0)
    with pytest.raises(ValueError) as ei:
        dequantize_reference(spec, q[:, :511], s, z)
    msg = str(ei.value)
    assert msg.startswith("qweight:")
    assert "expected shape (4096, 512)" in msg and "got (4096, 511) int32" in msg
    assert "K=4096" in msg and "N=4096" in msg and "along N" in msg


def test_errors_name_the_tensor() -> None:
    awq = _spec("awq_int4_fp16")
    gptq = _spec("gptq_int4_fp16")
    i8 = _spec("int8_bf16")
    q, s, z, _ = random_inputs(awq, 256, 64, 0)
    gq, gs, _, _ = random_inputs(gptq, 256, 64, 0)
    iq, is_, _, _ = random_inputs(i8, 64, 64, 0)

    cases = [
        # wrong qweight shape (N side and K side)
        ("qweight", lambda: dequantize_reference(awq, q[:, :7], s, z)),
        ("qweight", lambda: dequantize_reference(gptq, gq[:, :63], gs, None)),
        ("qweight", lambda: dequantize_reference(awq, q.reshape(-1), s, z)),
        ("qweight", lambda: dequantize_reference(awq, q.tolist(), s, z)),
        # wrong qweight dtype
        ("qweight", lambda: dequantize_reference(awq, q.astype(np.int64), s, z)),
        ("qweight", lambda: dequantize_reference(awq, q.view(np.float32), s, z)),
        # wrong scales dtype (float32, and the other 16-bit target)
        ("scales", lambda: dequantize_reference(awq, q, s.astype(np.float32), z)),
        ("scales", lambda: dequantize_reference(awq, q, s.astype(BF16), z)),
        ("scales", lambda: dequantize_reference(i8, iq, is_.astype(np.float16), None)),
        # wrong scales shape
        ("scales", lambda: dequantize_reference(awq, q, s[:1], z)),
        ("scales", lambda: dequantize_reference(i8, iq, np.concatenate([is_, is_]), None)),
        ("scales", lambda: dequantize_reference(awq, q, s[:, :60], z)),
        # missing / unexpected / malformed zeros
        ("zeros", lambda: dequantize_reference(awq, q, s, None)),
        ("zeros", lambda: dequantize_reference(gptq, gq, gs, np.zeros((2, 8), np.int32))),
        ("zeros", lambda: dequantize_reference(awq, q, s, z.astype(np.float32))),
        ("zeros", lambda: dequantize_reference(awq, q, s, z[:1])),
        # K not a multiple of the group size (K inferred from qweight rows)
        ("qweight", lambda: dequantize_reference(awq, q[:200], s, z)),
        ("qweight", lambda: dequantize_reference(gptq, gq[:25], gs, None)),
    ]
    for i, (name, call) in enumerate(cases):
        with pytest.raises(ValueError) as ei:
            call()
        msg = str(ei.value)
        assert msg.startswith(f"{name}:"), (i, msg)
        assert "expected" in msg or "multiple of" in msg or "required" in msg or "none" in msg, (i, msg)
    # The group-size message says what is wrong.
    with pytest.raises(ValueError, match=r"qweight: K=200 .*group_size=128"):
        dequantize_reference(awq, q[:200], s, z)


# ----------------------------------------------------------------------------------------------
# 5. random_inputs reaches the whole code range, for every zero mode.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ALL_SPECS + MODE_SPECS)
def test_random_inputs_cover_code_range(spec: Spec) -> None:
    K, N = 512, 256
    qweight, scales, zeros, g_idx = random_inputs(spec, K, N, seed=7)
    bits = spec.source.bits
    shapes = shapes_for(spec, K, N)
    assert qweight.dtype == np.int32 and qweight.shape == shapes["qweight"]
    fields = _unpack_fields(qweight, bits)
    assert fields.min() == 0 and fields.max() == 2**bits - 1
    # The sign bit of the int32 words is used too (full 32-bit range).
    assert (qweight < 0).any() and (qweight > 0).any()
    assert scales.dtype == _target_dtype(spec) and scales.shape == shapes["scales"]
    s = scales.astype(np.float64)
    assert np.isfinite(s).all() and (s < 0).any() and (s > 0).any()
    mag = np.abs(s[s != 0])
    assert mag.max() / mag.min() > 2.0**8  # a spread of exponents
    mode = spec.zeros.mode
    G = shapes["scales"][0]
    if mode in PACKED:
        assert (
            zeros is not None and zeros.dtype == np.int32 and zeros.shape == shapes["zeros"] == (G, N // spec.per_word)
        )
        zf = _unpack_fields(zeros, bits)
        assert zf.min() == 0 and zf.max() == 2**bits - 1
    elif mode == "float":
        assert zeros is not None and zeros.dtype == _target_dtype(spec) and zeros.shape == shapes["zeros"] == (G, N)
        z = zeros.astype(np.float64)
        assert np.isfinite(z).all() and z.min() >= 0 and z.max() <= 2**bits
        assert z.max() > 2 ** (bits - 1) and (z != np.round(z)).mean() > 0.5  # spans the code range, mostly fractional
    elif mode == "additive":
        assert zeros is not None and zeros.dtype == _target_dtype(spec) and zeros.shape == shapes["zeros"] == (G, N)
        b = zeros.astype(np.float64)
        assert np.isfinite(b).all() and (b < 0).any() and (b > 0).any()
        # Of the magnitude of q * s: |b| <= 2^bits |s| (plus a rounding), and not all tiny.
        assert (np.abs(b) <= 2**bits * np.abs(s) * (1 + 2.0**-6)).all()
        assert (np.abs(b) > np.abs(s)).mean() > 0.5
    else:
        assert zeros is None and "zeros" not in shapes
    if spec.act_order:
        gs = spec.scales.group_size
        assert g_idx is not None and g_idx.dtype == np.int32 and g_idx.shape == shapes["g_idx"] == (K,)
        assert (np.bincount(g_idx, minlength=G) == gs).all() and g_idx.min() >= 0 and g_idx.max() < G
        assert not np.array_equal(g_idx, np.arange(K) // gs)  # shuffled
    else:
        assert g_idx is None and "g_idx" not in shapes
    # Deterministic per seed, different across seeds.
    q2, s2, z2, g2 = random_inputs(spec, K, N, seed=7)
    q3, _, _, g3 = random_inputs(spec, K, N, seed=8)
    assert np.array_equal(q2, qweight) and np.array_equal(_bits16(s2), _bits16(scales))
    if zeros is not None:
        assert z2 is not None and np.array_equal(z2.view(np.uint8), zeros.view(np.uint8))
    if g_idx is not None:
        assert np.array_equal(g2, g_idx) and not np.array_equal(g3, g_idx)
    assert not np.array_equal(q3, qweight)


# ----------------------------------------------------------------------------------------------
# 6. Zero modes and act_order, every element against exact rationals.
# ----------------------------------------------------------------------------------------------


def _zero_order_model(spec: Spec) -> list[int]:
    """From the ``Zeros`` docstring: qzeros use the weights' element order when those are packed
    along N (AWQ) and sequential order when they are packed along K (GPTQ)."""
    return list(spec.order) if spec.packing.axis == "N" else list(range(32 // spec.source.bits))


def _fmt(spec: Spec) -> tuple[int, int]:
    return (5, 10) if spec.target.value == "fp16" else (8, 7)


def _neg(x: float) -> bool:
    return math.copysign(1.0, x) < 0


def _target_bits(spec: Spec, exact: Fraction, neg_zero: bool) -> int:
    """Bits of the exact rational rounded to nearest-even in the target; an exact zero is -0 iff neg_zero."""
    if exact == 0:
        return 0x8000 if neg_zero else 0x0000
    r = _rne(exact, *_fmt(spec))  # underflow keeps the sign of ``exact``
    if spec.target.value == "fp16":
        return int(np.array([r]).astype(np.float16).view(np.uint16)[0])
    return int(_bf16_from_exact(np.array([r]))[0])


def _model_element(spec: Spec, v: int, s: float, z: float | None) -> int:
    """One element from the ``Zeros`` docstring. ``v`` is the code value, ``s`` the scale and ``z``
    the zero point (packed modes: stored + offset), the float zero or the additive b."""
    mode = spec.zeros.mode
    if mode == "none" or mode in PACKED:
        d = v - (0 if mode == "none" else int(z))  # exact integer
        return _target_bits(spec, Fraction(d) * Fraction(s), (d < 0) != _neg(s))
    if mode == "float":  # round(round(q - z) * s)
        diff = Fraction(v) - Fraction(float(z))
        t = 0.0 if diff == 0 else _rne(diff, *_fmt(spec))  # x - x is +0 when rounding to nearest
        assert math.isfinite(t)
        return _target_bits(spec, Fraction(t) * Fraction(s), _neg(t) != _neg(s))
    # additive: round(q * s + b), one rounding; an exact zero sum is -0 only as (-0) + (-0).
    prod = Fraction(v) * Fraction(s)
    prod_neg = (v < 0) != _neg(s)
    b = float(z)
    return _target_bits(spec, prod + Fraction(b), prod == 0 and prod_neg and b == 0 and _neg(b))


def _to_target(spec: Spec, x: np.ndarray) -> np.ndarray:
    """float64 -> target, clipped to the finite range first (the values are just test data)."""
    tdt = _target_dtype(spec)
    big = float(ml_dtypes.finfo(tdt).max) if tdt == BF16 else float(np.finfo(np.float16).max)
    return np.clip(x, -big, big).astype(np.float32).astype(tdt)


def _float_zeros(spec: Spec, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A mixture: fractional zeros in the code range, integer ones (q - z = 0, signed zeros),
    negative ones, huge ones (q - z needs more than 53 bits in bf16), +-0."""
    bits = spec.source.bits
    n = shape[0] * shape[1]
    kind = rng.integers(0, 6, n)
    ints = rng.integers(-(2 ** (bits - 1)), 2**bits, n).astype(np.float64)
    z = rng.uniform(0, 2**bits, n)
    z = np.where(kind == 1, ints, z)
    z = np.where(kind == 2, -rng.uniform(0, 2**bits, n), z)
    huge = 2.0 ** rng.uniform(20, 120, n) if spec.target.value == "bf16" else rng.uniform(1000, 60000, n)
    z = np.where(kind == 3, np.where(rng.random(n) < 0.5, -huge, huge), z)
    z = np.where(kind == 4, np.where(rng.random(n) < 0.5, -0.0, 0.0), z)
    z = np.where(kind == 5, ints + rng.integers(-8, 9, n) * 2.0 ** -rng.integers(1, 12, n), z)
    return _to_target(spec, z.reshape(shape))


def _additive_b(spec: Spec, scales: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A mixture: b like q * s, b far below half a float64 ulp of q * s (where rounding the
    float64 sum would double-round), b in between, b = -2^m s (exact cancellation), +-0."""
    bits = spec.source.bits
    s = scales.astype(np.float64).reshape(-1)
    n = s.size
    kind = rng.integers(0, 6, n)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    b = rng.uniform(-(2**bits), 2**bits, n) * s
    b = np.where(kind == 1, sign * np.abs(s) * 2.0 ** -rng.uniform(54, 90, n), b)
    b = np.where(kind == 2, sign * np.abs(s) * 2.0 ** -rng.uniform(8, 45, n), b)
    b = np.where(kind == 3, -(2.0 ** rng.integers(0, bits - 1, n)) * s, b)
    b = np.where(kind == 4, np.where(rng.random(n) < 0.5, -0.0, 0.0), b)
    return _to_target(spec, b.reshape(scales.shape))


def _exact_case(spec: Spec, K: int, N: int, seed: int) -> dict:
    """Test-side inputs for W[K, N]: codes, packed words, scales, zeros (and their values) and g_idx."""
    rng = np.random.default_rng(seed)
    bits = spec.source.bits
    gs = spec.scales.group_size
    G = 1 if gs == -1 else K // gs
    codes = rng.integers(0, 2**bits, size=(K, N))
    scales = _wide_scales(spec, (G, N), rng)
    mode = spec.zeros.mode
    zeros = zval = None
    if mode in PACKED:
        stored = rng.integers(0, 2**bits, size=(G, N))
        stored[0, 0] = stored[-1, -1] = 2**bits - 1  # gptq_v1: reads back as 2^bits, no wrap-around
        stored[0, 2] = 0
        zeros = _pack_words(stored, spec, "N", _zero_order_model(spec))
        zval = stored + (1 if mode == "gptq_v1" else 0)
    elif mode == "float":
        zeros = _float_zeros(spec, (G, N), rng)
        zval = zeros.astype(np.float64)
    elif mode == "additive":
        zeros = _additive_b(spec, scales, rng)
        zval = zeros.astype(np.float64)
    g_idx = None
    if spec.act_order:
        g_idx = rng.integers(0, G, size=K).astype(np.int32)  # any assignment, not only balanced ones
        g_idx[:2] = [G - 1, 0]
        rows = g_idx.astype(np.int64)
    else:
        rows = np.zeros(K, dtype=np.int64) if gs == -1 else np.arange(K) // gs
    return {
        "codes": codes,
        "qweight": _pack_words(codes, spec, spec.packing.axis),
        "scales": scales,
        "zeros": zeros,
        "zval": zval,
        "g_idx": g_idx,
        "rows": rows,
    }


def test_zero_order_model_matches_spec() -> None:
    for p in ALL_SPECS + MODE_SPECS:
        spec = p.values[0]
        assert spec.zero_order == _zero_order_model(spec), p.id


@pytest.mark.parametrize("spec", MODE_SPECS)
def test_zero_modes_every_element_exact(spec: Spec) -> None:
    K, N = 64, 32
    c = _exact_case(spec, K, N, seed=30)
    W = _bits16(dequantize_reference(spec, c["qweight"], c["scales"], c["zeros"], c["g_idx"]))
    assert W.shape == (K, N)
    s64 = c["scales"].astype(np.float64)
    mode = spec.zeros.mode
    bad = []
    differs_from_single_rounding = 0  # float: two roundings really differ from one somewhere
    differs_from_f64_sum = 0  # additive: rounding the float64 sum first really would double-round
    for k in range(K):
        g = int(c["rows"][k])
        for n in range(N):
            v = _value(spec, int(c["codes"][k, n]))
            s = float(s64[g, n])
            z = None if c["zval"] is None else c["zval"][g, n]
            want = _model_element(spec, v, s, z)
            if int(W[k, n]) != want:
                bad.append((k, n, g, v, s, z, hex(int(W[k, n])), hex(want)))
            if mode == "float":
                exact = (Fraction(v) - Fraction(float(z))) * Fraction(s)
                one = _target_bits(spec, exact, want == 0x8000)
                differs_from_single_rounding += one != want
            if mode == "additive":
                f64 = float(np.float64(v) * np.float64(s) + np.float64(z))
                naive = _target_bits(spec, Fraction(f64), _neg(f64))
                differs_from_f64_sum += naive != want
    assert not bad, (len(bad), bad[:5])
    if mode == "float":
        assert differs_from_single_rounding > 0
    if mode == "additive" and spec.target.value == "bf16":
        # (fp16 sums are multiples of 2^-24 below 2^25, always exact in float64.)
        assert differs_from_f64_sum > 0


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) with hi = fl(a + b) and hi + lo = a + b exactly (Knuth's TwoSum)."""
    hi = a + b
    bb = hi - a
    return hi, (a - (hi - bb)) + (b - bb)


def _model_round_bits(spec: Spec, hi: np.ndarray, lo: np.ndarray | None = None) -> np.ndarray:
    """The target's bits of hi + lo (exactly, |lo| below half an ulp of hi in float64), rounded once to nearest-even.
    fp16 uses numpy's correctly rounded float64 cast where lo is 0; bf16 scales to the target's quantum and uses
    rint, a route independent of the reference's (ml_dtypes goes through float32, which would round twice)."""
    lo = np.zeros_like(hi) if lo is None else lo
    mant, min_exp, max_exp, dt = (11, -14, 15, np.float16) if spec.target.value == "fp16" else (8, -126, 127, BF16)
    _, e = np.frexp(hi)  # hi = m * 2^e, 0.5 <= |m| < 1: the leading bit is 2^(e-1)
    quantum = np.exp2(np.maximum(e - 1, min_exp) - (mant - 1))  # subnormals share the smallest exponent's quantum
    scaled = hi / quantum  # exact: a power of two
    r = np.rint(scaled)
    tie = scaled - np.floor(scaled) == 0.5
    r = np.where(tie & (lo > 0), np.ceil(scaled), np.where(tie & (lo < 0), np.floor(scaled), r))
    value = np.copysign(r * quantum, hi)  # rint keeps the sign of a zero result
    value = np.where(np.abs(value) >= 2.0 ** (max_exp + 1), np.copysign(np.inf, hi), value)
    return value.astype(np.float32).astype(dt).view(np.uint16)  # exact: value already fits the target


def test_round_bits_matches_exact_rounding() -> None:
    """The vectorized model rounding against Fraction arithmetic, ties and tie-breaking sticky parts included."""
    rng = np.random.default_rng(3)
    for target in ("fp16", "bf16"):
        spec = load_spec(_mspec("r", target=target))
        big = 60000.0 if target == "fp16" else 2.0**120
        tiny = 2.0**-24 if target == "fp16" else 2.0**-133
        hi = np.concatenate(
            [
                rng.uniform(-big, big, 2000),
                rng.uniform(-1, 1, 2000) * tiny * 300,
                np.array([0.5, 1.5, 2.5]) * tiny,  # subnormal ties
                (1 + np.array([1, 3, 5]) / 2**11) * (1 if target == "fp16" else 2**-3),  # normal ties
            ]
        )
        # sticky parts far below hi's float64 ulp, as TwoSum leaves them
        lo = np.where(rng.random(hi.size) < 0.5, 0.0, hi * 2.0**-60 * np.sign(rng.random(hi.size) - 0.5))
        lo[-6:] = [tiny * 2**-40, -(tiny * 2**-40), 0.0, 1e-30, -1e-30, 0.0]
        got = _model_round_bits(spec, hi, lo)
        for h, l_, g in zip(hi, lo, got, strict=True):
            exact = Fraction(float(h)) + Fraction(float(l_))
            assert int(g) == _target_bits(spec, exact, _neg(float(h))), (target, h, l_)


@pytest.mark.parametrize("spec", MODE_SPECS)
def test_zero_modes_full_tensor_vectorized(spec: Spec) -> None:
    """A whole random_inputs tensor against a numpy model (test-side unpacking). float and additive
    round exact float64 values (or exact TwoSum pairs) once with ``_model_round_bits``."""
    mode = spec.zeros.mode
    K, N = 256, 128
    qweight, scales, zeros, g_idx = random_inputs(spec, K, N, seed=9)
    W = _bits16(dequantize_reference(spec, qweight, scales, zeros, g_idx))
    bits, p = spec.source.bits, spec.per_word
    fields = _unpack_fields(qweight, bits)
    codes = np.empty((K, N), dtype=np.int64)
    order = np.asarray(spec.order)
    if spec.packing.axis == "N":
        codes.reshape(K, N // p, p)[:, :, order] = fields
    else:
        codes.reshape(K // p, p, N)[:, order, :] = fields.transpose(0, 2, 1)
    vals = np.vectorize(lambda q: _value(spec, int(q)))(np.arange(2**bits))[codes].astype(np.float64)
    gs = spec.scales.group_size
    if g_idx is not None:
        rows = g_idx.astype(np.int64)
    else:
        rows = np.zeros(K, dtype=np.int64) if gs == -1 else np.arange(K) // gs
    s = scales.astype(np.float64)[rows]
    with np.errstate(over="ignore"):
        if mode in PACKED:
            assert zeros is not None
            z = np.empty((zeros.shape[0], N), dtype=np.int64)
            z.reshape(zeros.shape[0], N // p, p)[:, :, np.asarray(_zero_order_model(spec))] = _unpack_fields(
                zeros, bits
            )
            vals = vals - (z + (1 if mode == "gptq_v1" else 0))[rows]
        if mode == "float":
            assert zeros is not None
            hi, lo = _two_sum(vals, -zeros.astype(np.float64)[rows])
            t = _model_round_bits(spec, hi, lo).view(np.float16 if spec.target.value == "fp16" else BF16)
            want = _model_round_bits(spec, t.astype(np.float64) * s)  # a product of two 8/11-bit significands is exact
        elif mode == "additive":
            assert zeros is not None
            want = _model_round_bits(spec, *_two_sum(vals * s, zeros.astype(np.float64)[rows]))
        elif spec.target.value == "fp16":
            want = (vals * s).astype(np.float16).view(np.uint16)
        else:
            want = (vals * s).astype(np.float32).astype(BF16).view(np.uint16)  # float32 step is exact
    np.testing.assert_array_equal(W, want)


def test_packed_zero_field_order_hand_checked() -> None:
    one8 = np.ones((1, 8), dtype=np.float16)
    word = np.array([[0x76543210]], dtype=np.uint32).view(np.int32)  # field j holds j
    # GPTQ (packed along K): qzeros are sequential whatever the weights' order: column n has stored zero n.
    for order in ("sequential", list(range(7, -1, -1)), [1, 0, 3, 2, 5, 4, 7, 6]):
        for mode, off in (("integer", 0), ("gptq_v2", 0), ("gptq_v1", 1)):
            spec = load_spec(_mspec("h", axis="K", order=order, mode=mode, gs=8))
            qweight = np.full((1, 8), 0x88888888, dtype=np.uint32).view(np.int32)  # every code 8
            W = dequantize_reference(spec, qweight, one8, word).astype(np.float64)
            np.testing.assert_array_equal(W, np.tile([8.0 - n - off for n in range(8)], (8, 1)))
    # AWQ (packed along N, order [0,2,4,6,1,3,5,7]): field j holds column order[j].
    spec = load_spec(_mspec("h", axis="N", order="awq", mode="integer", gs=8))
    qweight = np.full((8, 1), 0x88888888, dtype=np.uint32).view(np.int32)
    W = dequantize_reference(spec, qweight, one8, word).astype(np.float64)
    np.testing.assert_array_equal(W, np.tile([8.0 - z for z in (0, 4, 1, 5, 2, 6, 3, 7)], (8, 1)))
    # gptq_v1 does not wrap: stored 15 is z = 16, so code 0 gives -16 * s.
    spec = load_spec(_mspec("h", axis="K", mode="gptq_v1", gs=8))
    W = dequantize_reference(
        spec, np.zeros((1, 8), np.int32), np.full((1, 8), 0.5, np.float16), np.array([[-1]], dtype=np.int32)
    )
    np.testing.assert_array_equal(W.astype(np.float64), np.full((8, 8), -8.0))


@pytest.mark.parametrize("layout", ["awq", "gptq", "gptq_act"])
def test_gptq_v1_is_one_zero_step_below_v2(layout: str) -> None:
    kw: dict = {
        "awq": {"axis": "N", "order": "awq"},
        "gptq": {"axis": "K"},
        "gptq_act": {"axis": "K", "act_order": True},
    }[layout]
    v1 = load_spec(_mspec("v1", mode="gptq_v1", **kw))
    v2 = load_spec(_mspec("v2", mode="gptq_v2", **kw))
    integer = load_spec(_mspec("i", mode="integer", **kw))
    K, N = 128, 64
    q, s, z, g = random_inputs(v2, K, N, seed=3)
    # Power-of-two scales keep every product exact, so the step shows as exactly one scale.
    rng = np.random.default_rng(3)
    s = (np.where(rng.random(s.shape) < 0.5, -1.0, 1.0) * 2.0 ** rng.integers(-8, 4, s.shape)).astype(np.float16)
    W1 = dequantize_reference(v1, q, s, z, g).astype(np.float64)
    W2 = dequantize_reference(v2, q, s, z, g).astype(np.float64)
    rows = g.astype(np.int64) if g is not None else np.arange(K) // 16
    np.testing.assert_array_equal(W2 - W1, s.astype(np.float64)[rows])
    # integer and gptq_v2 are the same thing.
    np.testing.assert_array_equal(_bits16(dequantize_reference(integer, q, s, z, g)), _bits16(W2.astype(np.float16)))
    # With any scales: v1 on stored zeros equals v2 on stored zeros + 1 (where no field is 15, adding
    # 1 to every 4-bit field is adding 0x11111111 to the word, whatever the field order).
    q, s, z, g = random_inputs(v2, K, N, seed=4)
    stored = rng.integers(0, 15, size=(z.shape[0], z.shape[1] * 8))
    z = _pack_words(stored, v2, "N", _zero_order_model(v2))
    z_plus = (z.view(np.uint32) + np.uint32(0x11111111)).view(np.int32)
    np.testing.assert_array_equal(
        _bits16(dequantize_reference(v1, q, s, z, g)), _bits16(dequantize_reference(v2, q, s, z_plus, g))
    )


@pytest.mark.parametrize("spec", MODE_SPECS)
def test_element_value_zero_points(spec: Spec) -> None:
    bits = spec.source.bits
    off = 1 if spec.zeros.mode == "gptq_v1" else 0
    for q in range(2**bits):
        assert element_value(spec, q) == _value(spec, q) - off
        if spec.zeros.mode in PACKED:
            for stored in (0, 1, 2**bits - 1):
                assert element_value(spec, q, stored) == _value(spec, q) - stored - off


@pytest.mark.parametrize("mode", ZERO_MODES)
def test_act_order_identity_g_idx_equals_act_order_off(mode: str) -> None:
    d = _mspec("a", axis="K", mode=mode, act_order=True, target="bf16", gs=32)
    on, off = load_spec(d), load_spec({**d, "act_order": False})
    K, N = 128, 64
    q, s, z, g = random_inputs(on, K, N, seed=4)
    ident = (np.arange(K) // 32).astype(np.int32)
    W_off = _bits16(dequantize_reference(off, q, s, z))
    np.testing.assert_array_equal(_bits16(dequantize_reference(on, q, s, z, ident)), W_off)
    np.testing.assert_array_equal(_bits16(dequantize_reference(on, q, s, z, ident.astype(np.int64))), W_off)
    # int64 and int32 g_idx mean the same; a shuffled g_idx gives a different tensor.
    W_g = _bits16(dequantize_reference(on, q, s, z, g))
    np.testing.assert_array_equal(_bits16(dequantize_reference(on, q, s, z, g.astype(np.int64))), W_g)
    assert not np.array_equal(W_g, W_off)


@pytest.mark.parametrize("mode", ["none", "gptq_v1", "float", "additive"])
def test_act_order_g_idx_selects_scale_and_zero_rows(mode: str) -> None:
    spec = load_spec(_mspec("a", axis="K", mode=mode, act_order=True, gs=16))
    K, N, G = 64, 32, 4
    qweight = np.full((K // 8, N), 0x99999999, dtype=np.uint32).view(np.int32)  # every code 9
    scales = np.repeat(2.0 ** np.arange(G)[:, None], N, axis=1).astype(np.float16)  # group g: scale 2^g
    if mode == "gptq_v1":
        zeros = np.repeat((np.arange(G, dtype=np.uint32) * np.uint32(0x11111111))[:, None], N // 8, axis=1).view(
            np.int32
        )

        def value(g: int) -> float:
            return (9 - (g + 1)) * 2.0**g

    elif mode == "float":
        zeros = np.repeat(np.arange(G, dtype=np.float64)[:, None] / 2, N, axis=1).astype(np.float16)

        def value(g: int) -> float:
            return (9 - g / 2) * 2.0**g

    elif mode == "additive":
        zeros = np.repeat(-(np.arange(G, dtype=np.float64) ** 2)[:, None], N, axis=1).astype(np.float16)

        def value(g: int) -> float:
            return 9 * 2.0**g - g**2

    else:
        zeros = None

        def value(g: int) -> float:
            return 9 * 2.0**g

    rng = np.random.default_rng(5)
    g_idx = rng.permutation(np.repeat(np.arange(G, dtype=np.int32), 16))
    W = dequantize_reference(spec, qweight, scales, zeros, g_idx).astype(np.float64)
    np.testing.assert_array_equal(W, np.array([value(int(g)) for g in g_idx])[:, None] * np.ones((1, N)))
    # Permuting g_idx moves which scale / zero rows each row k uses: with equal codes, W's rows move with it.
    perm = rng.permutation(K)
    g2 = g_idx[perm]
    assert not np.array_equal(g2, g_idx)
    W2 = dequantize_reference(spec, qweight, scales, zeros, g2).astype(np.float64)
    np.testing.assert_array_equal(W2, W[perm])
    assert not np.array_equal(W2, W)


# ----------------------------------------------------------------------------------------------
# 7. The float64 sum rounded to odd (the additive mode's single rounding).
# ----------------------------------------------------------------------------------------------


def _f64_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float64).view(np.uint64)[0])


def test_sum_round_to_odd_against_fractions() -> None:
    rng = np.random.default_rng(40)
    n = 6000
    a = _wide_f64(rng, n, -140, 135)
    kind = rng.integers(0, 4, n)
    rel = np.where(kind == 0, 2.0 ** -rng.uniform(0, 10, n), 2.0 ** -rng.uniform(40, 120, n))
    b = np.where(rng.random(n) < 0.5, -1.0, 1.0) * np.abs(a) * rel
    b = np.where(kind == 2, -a, b)  # exact cancellation
    b = np.where(kind == 3, np.round(b * 2.0**20) / 2.0**20, b)
    a = np.concatenate([a, [-0.0, -0.0, 0.0, 1.0, 1.0, 3.0]])
    b = np.concatenate([b, [-0.0, 0.0, -0.0, -1.0, 2.0**-60, -(2.0**-80)]])
    r = _sum_round_to_odd_array(a, b)
    inexact = 0
    for ai, bi, ri in zip(a, b, r, strict=True):
        exact = Fraction(float(ai)) + Fraction(float(bi))
        fr = Fraction(float(ri))
        if fr == exact:
            if exact == 0:
                # IEEE: -0 only as (-0) + (-0) when rounding to nearest.
                assert _neg(ri) == (_neg(ai) and _neg(bi)), (ai, bi, ri)
            continue
        inexact += 1
        assert _f64_bits(float(ri)) & 1 == 1, (ai, bi, ri)  # odd significand
        nb = float(np.nextafter(ri, math.inf if exact > fr else -math.inf))
        assert min(fr, Fraction(nb)) < exact < max(fr, Fraction(nb)), (ai, bi, ri)
    assert inexact > 1000
    assert r[-2] == math.nextafter(1.0, 2.0) and r[-1] == math.nextafter(3.0, 0.0)


# ----------------------------------------------------------------------------------------------
# 8. Error paths for zeros per mode and for g_idx.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("layout", ["awq", "gptq"])
@pytest.mark.parametrize("mode", ZERO_MODES)
def test_zeros_errors_per_mode(mode: str, layout: str, target: str) -> None:
    spec = load_spec(MODE_SPEC_DICTS[f"{layout}_{mode}_{target}"])
    K, N, G, P = 64, 32, 4, 8
    q, s, z, _ = random_inputs(spec, K, N, 0)
    tdt = _target_dtype(spec)
    other = BF16 if tdt == np.float16 else np.dtype(np.float16)

    def expect(pattern: str, zeros: object) -> None:
        with pytest.raises(ValueError, match=pattern):
            dequantize_reference(spec, q, s, zeros)

    if mode == "none":
        for bad in (np.zeros((G, N // P), np.int32), np.zeros((G, N), tdt)):
            expect(r"^zeros: spec has zeros.mode 'none' but zeros were given", bad)
        return
    expect(rf"^zeros: required for zeros.mode '{mode}'", None)
    assert z is not None
    if mode in PACKED:
        for bad in (z.astype(np.int64), z.view(np.float32), np.zeros((G, N), tdt), z.astype(np.int16)):
            expect(rf"^zeros: expected dtype int32 \(or uint32\) packed words for zeros.mode '{mode}'", bad)
        expect(rf"^zeros: expected shape \({G}, {N // P}\) int32 for zeros.mode '{mode}'", np.zeros((G, N), np.int32))
        expect(rf"^zeros: expected shape \({G}, {N // P}\) int32 .*got \(1, {N // P}\) int32", z[:1])
        np.testing.assert_array_equal(
            _bits16(dequantize_reference(spec, q, s, z.view(np.uint32))), _bits16(dequantize_reference(spec, q, s, z))
        )
    else:
        for bad in (z.astype(other), z.astype(np.float32), z.astype(np.float64), np.zeros((G, N // P), np.int32)):
            expect(rf"^zeros: expected dtype {tdt.name} \(the target {target}\) for zeros.mode '{mode}'", bad)
        expect(rf"^zeros: expected shape \({G}, {N}\) {tdt.name} for zeros.mode '{mode}'", z[:, : N // P])
        expect(rf"^zeros: expected shape \({G}, {N}\) {tdt.name}", z[:1])
        expect(r"^zeros: expected a 2-D array", z.reshape(-1))
        expect(r"^zeros: expected a numpy array", z.astype(np.float64).tolist())


def test_g_idx_errors() -> None:
    on = load_spec(MODE_SPEC_DICTS["gptq_act_integer_fp16"])
    off = load_spec(MODE_SPEC_DICTS["gptq_integer_fp16"])
    K, N = 64, 32
    q, s, z, g = random_inputs(on, K, N, 0)
    assert g is not None

    def expect(pattern: str, g_idx: object, spec: Spec = on) -> str:
        with pytest.raises(ValueError, match=pattern) as ei:
            dequantize_reference(spec, q, s, z, g_idx)
        return str(ei.value)

    expect(r"^g_idx: required for act_order \(int32 \[K=64\]", None)
    expect(r"^g_idx: expected shape \(64,\) int32 .*got \(63,\) int32", g[:-1])
    expect(r"^g_idx: expected shape \(64,\) int32 .*got \(72,\) int32", np.concatenate([g, g[:8]]))
    expect(r"^g_idx: expected a 1-D array, got shape \(8, 8\)", g.reshape(8, 8))
    expect(r"^g_idx: expected a numpy array", g.tolist())
    for dt in (np.float32, np.int16, np.uint32):
        expect(rf"^g_idx: expected dtype int32 \(or int64\), got \(64,\) {np.dtype(dt).name}", g.astype(dt))
    hi = g.copy()
    hi[5] = 4
    msg = expect(r"^g_idx: value 4 at index 5 is out of range", hi)
    assert "[0, 4)" in msg
    lo = g.astype(np.int64)
    lo[7] = -1
    lo[9] = 100
    msg = expect(r"^g_idx: value -1 at index 7 is out of range", lo)
    assert "2 such entries" in msg
    expect(r"^g_idx: spec has act_order false but g_idx was given", g, off)
    expect(r"^g_idx: spec has act_order false", np.arange(K, dtype=np.int32) // 16, off)


# ----------------------------------------------------------------------------------------------
# 9. Formats of issue #5 (docs/formats.md): minifloats, codebooks, block scales, global scale,
#    multi-word (3-bit GPTQ) packing. Expected values come from ml_dtypes, exact Fractions and a
#    plain Python big-integer packer.
# ----------------------------------------------------------------------------------------------

ML_SOURCE = {
    "e4m3": ml_dtypes.float8_e4m3fn,
    "e5m2": ml_dtypes.float8_e5m2,
    "e2m1": ml_dtypes.float4_e2m1fn,
    "e2m3": ml_dtypes.float6_e2m3fn,
    "e3m2": ml_dtypes.float6_e3m2fn,
}
E8M0 = ml_dtypes.float8_e8m0fnu
E4M3 = ml_dtypes.float8_e4m3fn


def _ml_values(dt: type, n: int) -> np.ndarray:
    """float64 values of the bit patterns 0..n-1 read as an ml_dtypes type."""
    return np.arange(n, dtype=np.uint8).view(dt).astype(np.float64)


def _nspec(
    name: str,
    source: dict,
    *,
    target: str = "fp16",
    axis: str = "K",
    gs: int = -1,
    sdtype: str | None = None,
    glob: bool = False,
    mode: str = "none",
    act_order: bool = False,
) -> Spec:
    scales: dict = {"group_size": gs}
    if sdtype is not None:
        scales["dtype"] = sdtype
    if glob:
        scales["global_scale"] = True
    return load_spec(
        {
            "name": name,
            "source": source,
            "target": target,
            "packing": {"axis": axis},
            "scales": scales,
            "zeros": {"mode": mode},
            "act_order": act_order,
        }
    )


def _fp(fmt: str) -> dict:
    return {"bits": {"e4m3": 8, "e5m2": 8, "e2m1": 4}[fmt], "kind": "float", "format": fmt}


E2M1 = {"bits": 4, "kind": "float", "format": "e2m1"}


def _mxfp4(target: str = "bf16") -> Spec:
    return _nspec(f"mxfp4_{target}", E2M1, target=target, gs=32, sdtype="e8m0")


def _nvfp4(target: str = "bf16") -> Spec:
    return _nspec(f"nvfp4_{target}", E2M1, target=target, gs=16, sdtype="e4m3", glob=True)


def _inf_bits(spec: Spec, neg: bool) -> int:
    # IEEE facts: fp16 inf is 0x7C00, bf16 inf is 0x7F80; the sign is the top bit.
    return (0x7C00 if spec.target.value == "fp16" else 0x7F80) | (0x8000 if neg else 0)


def _is_nan_bits(spec: Spec, b: int) -> bool:
    exp_mask, man_mask = (0x7C00, 0x03FF) if spec.target.value == "fp16" else (0x7F80, 0x007F)
    return (b & exp_mask) == exp_mask and (b & man_mask) != 0


def _model_product(spec: Spec, factors: list[float]) -> int | None:
    """round_target(prod(factors)) with one rounding, IEEE specials; None means NaN."""
    if any(math.isnan(f) for f in factors):
        return None
    p = 1.0
    for f in factors:
        p = p * f  # only for the IEEE special cases below (inf * 0 = NaN, signs)
    neg = sum(_neg(f) for f in factors) % 2 == 1
    if any(math.isinf(f) for f in factors):
        return None if math.isnan(p) else _inf_bits(spec, neg)
    exact = Fraction(1)
    for f in factors:
        exact *= Fraction(f)
    return _target_bits(spec, exact, neg)


def _model_nvfp4(spec: Spec, cv: float, s: float, g: float) -> int | None:
    """round_target(round_fp32(cv * s * g)), from docs/formats.md; None means NaN."""
    if math.isnan(cv) or math.isnan(s) or math.isnan(g):
        return None
    neg = (_neg(cv) + _neg(s) + _neg(g)) % 2 == 1
    exact = Fraction(cv) * Fraction(s) * Fraction(g)
    f32 = (-0.0 if neg else 0.0) if exact == 0 else _rne(exact, 8, 23)
    if math.isinf(f32):
        return _inf_bits(spec, f32 < 0)
    return _target_bits(spec, Fraction(f32), _neg(f32))


def _assert_bits(spec: Spec, W: np.ndarray, want: list | np.ndarray, where: str = "") -> None:
    got = _bits16(W).reshape(-1)
    want_l = list(np.asarray(want, dtype=object).reshape(-1))
    bad = []
    for i, (g, w) in enumerate(zip(got, want_l, strict=True)):
        if w is None:
            if not _is_nan_bits(spec, int(g)):
                bad.append((i, hex(int(g)), "NaN"))
        elif int(g) != int(w):
            bad.append((i, hex(int(g)), hex(int(w))))
    assert not bad, (where, len(bad), bad[:6])


def _pack_blocks_py(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack W[K, N] along K GPTQ-style with Python big integers: block b is the integer
    sum(code_i << bits*i) over its 32*words/bits rows, cut into little-endian 32-bit words."""
    words = bits // math.gcd(bits, 32)
    per = 32 * words // bits
    K, N = codes.shape
    out = np.zeros((K // per * words, N), dtype=np.uint32)
    for b in range(K // per):
        for n in range(N):
            block = 0
            for i in range(per):
                c = int(codes[b * per + i, n])
                assert 0 <= c < 2**bits
                block |= c << (bits * i)
            for w in range(words):
                out[b * words + w, n] = (block >> (32 * w)) & 0xFFFFFFFF
    return out.view(np.int32)


def _unpack_blocks_py(qweight: np.ndarray, bits: int) -> np.ndarray:
    words = bits // math.gcd(bits, 32)
    per = 32 * words // bits
    q = qweight.view(np.uint32)
    R, N = q.shape
    out = np.zeros((R // words * per, N), dtype=np.int64)
    for b in range(R // words):
        for n in range(N):
            block = sum(int(q[b * words + w, n]) << (32 * w) for w in range(words))
            for i in range(per):
                out[b * per + i, n] = (block >> (bits * i)) & (2**bits - 1)
    return out


# -- minifloat decoding, every code --------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_minifloat_code_values_every_code_vs_ml_dtypes(fmt: str) -> None:
    spec = _nspec(f"f_{fmt}", _fp(fmt))
    n = 2**spec.source.bits
    got = _code_values(spec)
    want = _ml_values(ML_SOURCE[fmt], n)
    assert got.shape == (n,)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok])
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # -0 included
    for q in range(n):
        v = element_value(spec, q)
        assert (math.isnan(v) and math.isnan(want[q])) or (v == want[q] and _neg(v) == _neg(want[q]))


def test_minifloat_known_facts() -> None:
    """Facts from the OCP OFP8 / MX specifications, independent of any implementation."""
    e4m3 = _code_values(_nspec("a", _fp("e4m3")))
    assert math.isnan(e4m3[0x7F]) and math.isnan(e4m3[0xFF])
    assert np.isnan(e4m3).sum() == 2  # no inf, only S.1111.111 is NaN
    assert e4m3[0x7E] == 448.0 and e4m3[0xFE] == -448.0
    assert e4m3[0x01] == 2.0**-9 and e4m3[0x07] == 7 * 2.0**-9 and e4m3[0x08] == 2.0**-6
    assert e4m3[0x38] == 1.0 and e4m3[0x80] == 0.0 and _neg(e4m3[0x80])
    e5m2 = _code_values(_nspec("b", _fp("e5m2")))
    assert e5m2[0x7C] == math.inf and e5m2[0xFC] == -math.inf
    assert all(math.isnan(e5m2[c]) for c in (0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF))
    assert e5m2[0x7B] == 57344.0 and e5m2[0x01] == 2.0**-16 and e5m2[0x3C] == 1.0
    e2m1 = _code_values(_nspec("c", E2M1))
    assert list(e2m1[:8]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert list(e2m1[8:]) == [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6] and _neg(e2m1[8])


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
@pytest.mark.parametrize("axis", ["N", "K"])
def test_minifloat_dequant_every_code_scale_one(fmt: str, target: str, axis: str) -> None:
    """All codes through the whole reference with scale 1: ml_dtypes' value, exact in the target;
    NaN codes give NaN; -0 keeps its sign (ROCm PR#11290: e2m1 0x8 came out as +32768)."""
    spec = _nspec(f"f_{fmt}", _fp(fmt), target=target, axis=axis)
    n = 2**spec.source.bits
    p = 32 // spec.source.bits
    codes = np.tile(np.arange(n), 2).reshape(1, -1) if axis == "N" else np.tile(np.arange(n), 2).reshape(-1, 1)
    if axis == "K":
        codes = np.repeat(codes, p, axis=1)  # a few columns, all the same
    qweight = _pack_words(codes, spec, axis)
    scales = np.ones((1, codes.shape[1]), dtype=_target_dtype(spec))
    W = dequantize_reference(spec, qweight, scales)
    assert W.shape == codes.shape and W.dtype == _target_dtype(spec)
    vals = _ml_values(ML_SOURCE[fmt], n)[codes]
    want = [
        None
        if math.isnan(v)
        else (_inf_bits(spec, v < 0) if math.isinf(v) else _target_bits(spec, Fraction(v), _neg(v)))
        for v in vals.reshape(-1)
    ]
    _assert_bits(spec, W, want, fmt)
    # The same, through numpy / ml_dtypes casts (exact: every code value fits the target).
    ok = ~np.isnan(vals)
    np.testing.assert_array_equal(
        _bits16(W)[ok], vals[ok].astype(np.float32).astype(_target_dtype(spec)).view(np.uint16)
    )


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_minifloat_times_target_scales_exact(fmt: str, target: str) -> None:
    """round_target(code_value * s), one rounding, against exact rationals: every code against wide,
    signed, zero and -0 scales (inf * 0 is NaN, inf * -s is -inf)."""
    spec = _nspec(f"f_{fmt}", _fp(fmt), target=target, axis="N", gs=16)
    n = 2**spec.source.bits
    K, N = 64, n
    rng = np.random.default_rng(50)
    codes = (np.arange(N)[None, :] + rng.integers(0, n, size=(K, 1))) % n  # every code in every row
    scales = _wide_scales(spec, (K // 16, N), rng)
    scales[1, :4] = np.array([0.0, -0.0, -1.0, 2.0**-20], dtype=np.float64).astype(_target_dtype(spec))
    W = dequantize_reference(spec, _pack_words(codes, spec, "N"), scales)
    cv = _ml_values(ML_SOURCE[fmt], n)
    s64 = scales.astype(np.float64)
    want = [
        [_model_product(spec, [float(cv[codes[k, c]]), float(s64[k // 16, c])]) for c in range(N)] for k in range(K)
    ]
    _assert_bits(spec, W, want, fmt)


# -- e8m0 block scales (MXFP4) -------------------------------------------------------------------


def test_e8m0_decode_every_code_vs_ml_dtypes() -> None:
    got = _decode_e8m0_array(np.arange(256, dtype=np.int64))
    want = _ml_values(E8M0, 256)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert math.isnan(got[0xFF]) and np.isnan(got).sum() == 1
    np.testing.assert_array_equal(got[:255], want[:255])
    assert got[0] == 2.0**-127 and got[127] == 1.0 and got[254] == 2.0**127  # 2^(E - 127)


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_mxfp4_every_scale_code_every_element_code(target: str) -> None:
    """One block row, 256 columns: column n has scale code n, and each column runs through all 16
    e2m1 codes twice. value = round_target(e2m1 * 2^(E - 127)) with one rounding; 0xFF is NaN."""
    spec = _mxfp4(target)
    K, N = 32, 256
    codes = (np.arange(K)[:, None] + np.arange(N)[None, :]) % 16
    qweight = _pack_words(codes, spec, "K")
    sc = np.arange(256, dtype=np.uint8).reshape(1, N)
    W = dequantize_reference(spec, qweight, sc)
    e2m1 = _ml_values(ML_SOURCE["e2m1"], 16)
    e8 = _ml_values(E8M0, 256)
    want = [[_model_product(spec, [float(e2m1[codes[k, n]]), float(e8[n])]) for n in range(N)] for k in range(K)]
    _assert_bits(spec, W, want, "mxfp4")
    if target == "bf16":
        # bf16 holds 2^-127 (subnormal) .. 6 * 2^127: nothing under- or overflows except 6 * 2^127, 4 * 2^127.
        assert (np.abs(W.astype(np.float64))[:, :255][codes[:, :255] % 8 != 0] > 0).all()
    # ml_dtypes float8_e8m0fnu scales are read as their bytes.
    W2 = dequantize_reference(spec, qweight, sc.view(E8M0))
    np.testing.assert_array_equal(_bits16(W2), _bits16(W))


# -- e4m3 block scales + fp32 global scale (NVFP4) ----------------------------------------------


def _nvfp4_every_scale_case(spec: Spec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """K = 256 rows (16 blocks of 16), N = 16: block (g, n) has e4m3 scale code 16g + n (all 256)."""
    K, N = 256, 16
    codes = rng.integers(0, 16, size=(K, N))
    codes[:16, :] = np.arange(16)[:, None]  # every element code in every column once
    return codes, _pack_words(codes, spec, "K"), np.arange(256, dtype=np.uint8).reshape(16, N)


GLOBALS = [
    2.0**-20 * (1 + 5 * 2.0**-23),
    2.0**-24,
    1.0,
    (1 + 2.0**-23) * 2.0**-3,
    2.0**-126,
    2.0**-140,
    1.5 * 2.0**127,
    -0.75,
]


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("g", GLOBALS)
def test_nvfp4_every_scale_code_exact(target: str, g: float) -> None:
    spec = _nvfp4(target)
    gs = np.array([g], dtype=np.float32)
    assert float(gs[0]) == g  # the test values are fp32 numbers
    codes, qweight, sc = _nvfp4_every_scale_case(spec, np.random.default_rng(60))
    W = dequantize_reference(spec, qweight, sc, global_scale=gs)
    e2m1 = _ml_values(ML_SOURCE["e2m1"], 16)
    e4 = _ml_values(E4M3, 256)
    s64 = e4[sc.astype(np.int64)]
    K, N = codes.shape
    want = [
        [_model_nvfp4(spec, float(e2m1[codes[k, n]]), float(s64[k // 16, n]), g) for n in range(N)] for k in range(K)
    ]
    _assert_bits(spec, W, want, f"nvfp4 g={g}")
    # ml_dtypes float8_e4m3fn scales and a 0-d global scale are accepted.
    W2 = dequantize_reference(spec, qweight, sc.view(E4M3), global_scale=gs.reshape(()))
    np.testing.assert_array_equal(_bits16(W2), _bits16(W))


def test_nvfp4_tiny_global_scale_bf16_does_not_underflow() -> None:
    """vllm PRs #37135 / #34577: with global scale 2^-20 the bf16 result is representable where
    e2m1 * e4m3 * g >= 2^-133, although e4m3(s) * g (or the whole product) underflows fp16. Every such
    element must be nonzero and equal the exactly computed double rounding."""
    spec = _nvfp4("bf16")
    rng = np.random.default_rng(61)
    codes, qweight, sc = _nvfp4_every_scale_case(spec, rng)
    g = float(np.float32(2.0**-20 * 1.2345678))
    W = dequantize_reference(spec, qweight, sc, global_scale=np.array([g], dtype=np.float32)).astype(np.float64)
    e2m1 = _ml_values(ML_SOURCE["e2m1"], 16)
    s64 = _ml_values(E4M3, 256)[sc.astype(np.int64)]
    exact = e2m1[codes] * np.repeat(s64, 16, axis=0) * g  # float64, exact (<= 30 significant bits)
    finite = ~np.isnan(exact)
    representable = finite & (np.abs(exact) >= 2.0**-133)
    assert representable.sum() > 3000
    assert (W[representable] != 0).all()
    # Where scaling in fp16 first would lose everything: e4m3(s) * g below half fp16's smallest subnormal.
    fp16_first = (np.repeat(s64, 16, axis=0) * g).astype(np.float16).astype(np.float64)
    lost = representable & (fp16_first == 0)
    assert lost.sum() > 100 and (W[lost] != 0).all()
    rel = np.abs(W[representable] - exact[representable]) / np.abs(exact[representable])
    normal = np.abs(exact[representable]) >= 2.0**-126
    assert (rel[normal] <= 2.0**-8 * (1 + 2.0**-16)).all()  # within half a bf16 ulp (plus the fp32 step)


def test_nvfp4_fp32_step_is_observable() -> None:
    """Cases where round_bf16(round_fp32(x)) != round_bf16(x): the fp32 rounding lands on a bf16 tie.
    Found by search (numpy's float64 -> float32 cast is correctly rounded), then checked one by one."""
    spec = _nvfp4("bf16")
    e2m1 = _ml_values(ML_SOURCE["e2m1"], 16)
    e4 = _ml_values(E4M3, 256)
    rng = np.random.default_rng(62)
    cs = [(q, s) for q in range(1, 8) for s in range(0x08, 0x7F)]  # positive normal scales
    g_all = rng.uniform(1.0, 2.0, 200_000).astype(np.float32).astype(np.float64)
    found: tuple[float, list[tuple[int, int]]] | None = None
    for q, s in cs:
        x = float(e2m1[q] * e4[s]) * g_all  # exact in float64
        f32 = x.astype(np.float32)
        tie = ((f32.view(np.uint32) & 0xFFFF) == 0x8000) & (f32.astype(np.float64) != x)
        for i in np.nonzero(tie)[0][:4]:
            g = float(g_all[i])
            single = _target_bits(spec, Fraction(float(e2m1[q])) * Fraction(float(e4[s])) * Fraction(g), False)
            if single != _model_nvfp4(spec, float(e2m1[q]), float(e4[s]), g):
                # Every (code, scale) pair that double-rounds differently with this g.
                keep = [
                    (q2, s2)
                    for q2, s2 in cs
                    if _model_nvfp4(spec, float(e2m1[q2]), float(e4[s2]), g)
                    != _target_bits(spec, Fraction(float(e2m1[q2])) * Fraction(float(e4[s2])) * Fraction(g), False)
                ]
                found = (g, keep)
                break
        if found:
            break
    assert found is not None
    g, keep = found
    N = len(keep)
    codes = np.zeros((16, N), dtype=np.int64)
    codes[0, :] = [q for q, _ in keep]
    sc = np.array([[s for _, s in keep]], dtype=np.uint8)
    W = dequantize_reference(spec, _pack_words(codes, spec, "K"), sc, global_scale=np.array([g], np.float32))
    for n, (q, s) in enumerate(keep):
        double = _model_nvfp4(spec, float(e2m1[q]), float(e4[s]), g)
        single = _target_bits(spec, Fraction(float(e2m1[q])) * Fraction(float(e4[s])) * Fraction(g), False)
        assert int(_bits16(W)[0, n]) == double != single


@pytest.mark.parametrize("target", ["fp16", "bf16"])
@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("seed", [0, 1, 2, 5])
def test_block_scaled_random_inputs_vectorized(fmt: str, target: str, seed: int) -> None:
    """A whole random_inputs tensor against a numpy model: test-side nibble unpacking, ml_dtypes
    decoding, float64 products (exact) and numpy's correctly rounded casts."""
    spec = _mxfp4(target) if fmt == "mxfp4" else _nvfp4(target)
    K, N = 512, 128
    q, s, z, gi = random_inputs(spec, K, N, seed)
    gsc = random_global_scale(spec, seed)
    assert z is None and gi is None
    assert (gsc is None) == (fmt == "mxfp4")
    W = _bits16(dequantize_reference(spec, q, s, global_scale=gsc))
    codes = _unpack_fields(q, 4).transpose(0, 2, 1).reshape(K, N)
    cv = _ml_values(ML_SOURCE["e2m1"], 16)[codes]
    gsz = spec.scales.group_size
    sv = np.repeat(_ml_values(E8M0 if fmt == "mxfp4" else E4M3, 256)[s.astype(np.int64)], gsz, axis=0)
    x = cv * sv
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt == "nvfp4":
            assert gsc is not None
            x = (x * float(gsc[0])).astype(np.float32).astype(np.float64)  # one fp32 rounding
        if target == "fp16":
            want = x.astype(np.float16).view(np.uint16)
        else:
            want = x.astype(np.float32).astype(BF16).view(np.uint16)  # float32 step exact (or inf both ways)
    nan = np.isnan(x)
    assert nan.any() and (~nan).any()
    np.testing.assert_array_equal(W[~nan], want[~nan])
    assert all(_is_nan_bits(spec, int(b)) for b in W[nan])


# -- random block scales and global scales -------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_random_block_scales_cover_codes_and_are_structured(fmt: str) -> None:
    spec = _mxfp4() if fmt == "mxfp4" else _nvfp4()
    K, N = 2048, 256
    q, s, _, _ = random_inputs(spec, K, N, seed=3)
    G = K // spec.scales.group_size
    assert s.dtype == np.uint8 and s.shape == (G, N) == shapes_for(spec, K, N)["scales"]
    assert set(np.unique(s).tolist()) == set(range(256))  # every code, the NaN ones included
    # Mostly realistic: e8m0 exponents near 2^0, e4m3 scales positive normal numbers.
    if fmt == "mxfp4":
        realistic = (s >= 127 - 12) & (s <= 127 + 4)
    else:
        realistic = (s >= 0x08) & (s < 0x78)
    assert realistic.mean() > 0.9
    # Neighbouring blocks along K and along N differ (random exponents would repeat).
    assert (s[1:, :] != s[:-1, :]).mean() > 0.95 and (s[:, 1:] != s[:, :-1]).mean() > 0.95
    # So a scale read from the neighbouring block changes most nonzero elements.
    gsc = random_global_scale(spec, 2)
    W = dequantize_reference(spec, q, s, global_scale=gsc).astype(np.float64)
    W_shift = dequantize_reference(spec, q, np.roll(s, 1, axis=0), global_scale=gsc).astype(np.float64)
    ok = np.isfinite(W) & np.isfinite(W_shift) & (W != 0)
    assert (W[ok] != W_shift[ok]).mean() > 0.9
    # Deterministic per seed.
    assert np.array_equal(random_inputs(spec, K, N, seed=3)[1], s)
    assert not np.array_equal(random_inputs(spec, K, N, seed=4)[1], s)


def test_random_global_scale() -> None:
    assert random_global_scale(_mxfp4(), 0) is None
    assert random_global_scale(_spec("gptq_int4_fp16"), 0) is None
    spec = _nvfp4()
    exps = set()
    for seed in range(14):
        g = random_global_scale(spec, seed)
        assert g is not None and g.dtype == np.float32 and g.shape == (1,)
        v = float(g[0])
        assert math.isfinite(v) and v > 0
        exps.add(math.frexp(v)[1])
        assert np.array_equal(random_global_scale(spec, seed), g)
    assert len(exps) >= 5
    assert min(exps) <= -19  # 2^-20 and below: fp16 casting before scaling would underflow
    assert max(exps) >= 1
    tiny = float(random_global_scale(spec, 0)[0])
    assert tiny * 2.0**-9 < 2.0**-25  # the smallest e4m3 scale times it underflows fp16 ...
    assert tiny * 2.0**-9 * 0.5 >= 2.0**-133  # ... but not bf16


# -- global scale / block scale errors ----------------------------------------------------------


def test_block_scale_and_global_scale_errors() -> None:
    nv, mx, plain = _nvfp4(), _mxfp4(), _spec("gptq_int4_fp16")
    q, s, _, _ = random_inputs(nv, 64, 32, 0)
    g = random_global_scale(nv, 0)
    mq, ms, _, _ = random_inputs(mx, 64, 32, 0)
    pq, ps, _, _ = random_inputs(plain, 128, 32, 0)

    def expect(pattern: str, call) -> None:
        with pytest.raises(ValueError, match=pattern):
            call()

    expect(r"^global_scale: required for scales.global_scale", lambda: dequantize_reference(nv, q, s))
    expect(
        r"^global_scale: expected a 1-element float32 array, got \(1,\) float64",
        lambda: dequantize_reference(nv, q, s, global_scale=g.astype(np.float64)),
    )
    expect(
        r"^global_scale: expected a 1-element float32 array, got \(2,\) float32",
        lambda: dequantize_reference(nv, q, s, global_scale=np.ones(2, np.float32)),
    )
    expect(
        r"^global_scale: expected a 1-element float32 numpy array, got float",
        lambda: dequantize_reference(nv, q, s, global_scale=0.5),
    )
    expect(
        r"^global_scale: spec has scales.global_scale false", lambda: dequantize_reference(mx, mq, ms, global_scale=g)
    )
    expect(
        r"^global_scale: spec has scales.global_scale false",
        lambda: dequantize_reference(plain, pq, ps, global_scale=g),
    )
    expect(
        r"^scales: expected uint8 e4m3 block-scale codes \(or ml_dtypes float8_e4m3fn\)",
        lambda: dequantize_reference(nv, q, s.astype(BF16), global_scale=g),
    )
    expect(r"^scales: expected uint8 e4m3", lambda: dequantize_reference(nv, q, s.view(E8M0), global_scale=g))
    expect(r"^scales: expected uint8 e8m0", lambda: dequantize_reference(mx, mq, ms.view(E4M3)))
    expect(r"^scales: expected uint8 e8m0", lambda: dequantize_reference(mx, mq, ms.view(np.int8)))
    expect(
        r"^scales: expected shape \(4, 32\) uint8 \(e4m3 codes\)",
        lambda: dequantize_reference(nv, q, s[:2], global_scale=g),
    )
    expect(
        r"^scales: expected dtype float16", lambda: dequantize_reference(plain, pq, ps.view(np.uint16).astype(np.uint8))
    )
    assert shapes_for(nv, 64, 32) == {"qweight": (8, 32), "scales": (4, 32), "global_scale": (1,)}
    assert shapes_for(mx, 64, 32) == {"qweight": (8, 32), "scales": (2, 32)}


# -- codebooks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_nf4_values_and_scaling(target: str) -> None:
    """nf4: each codebook value rounded once to the target, then the product with the scale rounded
    once more. The codebook is taken from the spec (the published QLoRA table); the rounding is exact
    rational arithmetic here."""
    spec = _nspec(f"nf4_{target}", {"bits": 4, "kind": "codebook", "codebook": "nf4"}, target=target, axis="N", gs=32)
    cb = spec.source.codebook_values
    assert len(cb) == 16 and cb[0] == -1.0 and cb[7] == 0.0 and cb[15] == 1.0
    ebits, mbits = _fmt(spec)
    cb_t = [_rne(Fraction(v), ebits, mbits) for v in cb]
    table = _code_values(spec)
    np.testing.assert_array_equal(table, np.array(cb_t))
    assert table[0] == -1.0 and table[7] == 0.0 and table[15] == 1.0
    for q in range(16):
        assert element_value(spec, q) == cb_t[q]
    K, N = 128, 64
    rng = np.random.default_rng(70)
    codes = rng.integers(0, 16, size=(K, N))
    scales = _wide_scales(spec, (K // 32, N), rng)
    W = dequantize_reference(spec, _pack_words(codes, spec, "N"), scales)
    s64 = scales.astype(np.float64)
    want = [[_model_product(spec, [cb_t[codes[k, n]], float(s64[k // 32, n])]) for n in range(N)] for k in range(K)]
    _assert_bits(spec, W, want, "nf4")
    # The two roundings are observable: rounding the unrounded codebook value times s once differs somewhere.
    single = [
        [
            _target_bits(
                spec,
                Fraction(cb[codes[k, n]]) * Fraction(float(s64[k // 32, n])),
                (cb[codes[k, n]] < 0) != _neg(float(s64[k // 32, n])),
            )
            for n in range(N)
        ]
        for k in range(K)
    ]
    assert (np.array(single, dtype=np.int64) != _bits16(W).astype(np.int64)).any()


@pytest.mark.parametrize(
    "book", [[-2.5, 0.1, 3.0, 1 / 3, -0.0, 7.77], [0.3, -1.7, 1e-3], [5.0], [0.1 * i for i in range(15)]]
)
def test_short_user_codebook(book: list[float]) -> None:
    """A user codebook with fewer than 2^bits entries: codes past the end are 0; -0.0 stays -0."""
    bits = 4
    spec_dict = {
        "name": "cb",
        "source": {"bits": bits, "kind": "codebook", "codebook": book},
        "target": "bf16",
        "packing": {"axis": "K"},
        "scales": {"group_size": -1},
    }
    spec = load_spec(spec_dict)
    n = 2**bits
    cb_t = [_rne(Fraction(v), 8, 7) if v != 0 else v for v in book] + [0.0] * (n - len(book))
    table = _code_values(spec)
    assert table.shape == (n,)
    np.testing.assert_array_equal(table, np.array(cb_t))
    np.testing.assert_array_equal(np.signbit(table), np.signbit(np.array(cb_t)))
    K = spec.per_word * spec.words * 4
    N = 8
    rng = np.random.default_rng(71)
    codes = rng.integers(0, n, size=(K, N))
    codes[:n, 0] = np.arange(n)
    qweight = _pack_words(codes, spec, "K")
    scales = np.array([[1.0, -1.0, 0.75, 2.0**-100, 3.0, -0.0, 1e30, 0.1]]).astype(BF16)
    W = dequantize_reference(spec, qweight, scales)
    s64 = scales.astype(np.float64)
    want = [[_model_product(spec, [cb_t[codes[k, c]], float(s64[0, c])]) for c in range(N)] for k in range(K)]
    _assert_bits(spec, W, want, "user codebook")
    assert (W.astype(np.float64)[codes >= len(book)] == 0).all()


# -- multi-word blocks (3-bit GPTQ and other widths) ------------------------------------------------


def _gptq3(
    target: str = "fp16",
    kind: str = "unsigned",
    bias: int | None = None,
    gs: int = 32,
    mode: str = "none",
    act_order: bool = False,
    bits: int = 3,
) -> Spec:
    src: dict = {"bits": bits, "kind": kind}
    if bias is not None:
        src["bias"] = bias
    return _nspec(f"g{bits}", src, target=target, gs=gs, mode=mode, act_order=act_order)


def test_three_bit_straddling_codes_by_hand() -> None:
    """docs/formats.md: 3-bit code 10 = bits 30-31 of word 0 and bit 0 of word 1; code 21 = bit 31 of
    word 1 and bits 0-1 of word 2."""
    spec = _gptq3()
    assert spec.words == 3 and spec.per_word == 32
    one = np.ones((1, 1), dtype=np.float16)
    # Code 10 = 0b101: low bits 01 at word-0 bits 30-31, high bit 1 at word-1 bit 0.
    q = np.array([[0x40000000], [0x00000001], [0]], dtype=np.uint32).view(np.int32)
    W = dequantize_reference(spec, q, one).astype(np.float64)[:, 0]
    assert W[10] == 5 and np.count_nonzero(W) == 1
    # Code 21 = 0b111: bit 0 at word-1 bit 31, bits 1-2 at word-2 bits 0-1.
    q = np.array([[0], [0x80000000], [0x00000003]], dtype=np.uint32).view(np.int32)
    W = dequantize_reference(spec, q, one).astype(np.float64)[:, 0]
    assert W[21] == 7 and np.count_nonzero(W) == 1
    # Code 21 = 0b110: only word 2 (bits 0-1 = 0b11), word 1 bit 31 clear.
    q = np.array([[0], [0], [0x00000003]], dtype=np.uint32).view(np.int32)
    W = dequantize_reference(spec, q, one).astype(np.float64)[:, 0]
    assert W[21] == 6 and np.count_nonzero(W) == 1
    # Every field 7: the whole 96-bit block set.
    q = np.full((3, 1), -1, dtype=np.int32)
    np.testing.assert_array_equal(dequantize_reference(spec, q, one).astype(np.float64)[:, 0], np.full(32, 7.0))
    # The Python packer agrees with the hand-written words.
    codes = np.zeros((32, 1), dtype=np.int64)
    codes[10, 0], codes[21, 0] = 5, 7
    np.testing.assert_array_equal(_pack_blocks_py(codes, 3).view(np.uint32)[:, 0], [0x40000000, 0x80000001, 0x3])


@pytest.mark.parametrize("bits", [3])
@pytest.mark.parametrize("kind,target", [("unsigned", "fp16"), ("signed", "bf16"), ("biased", "fp16")])
def test_multiword_every_element_vs_python_packer(bits: int, kind: str, target: str) -> None:
    spec = _gptq3(target, kind, bias=(2 ** (bits - 1) if kind == "biased" else None), gs=-1, bits=bits)
    per = spec.per_word
    assert spec.words == bits // math.gcd(bits, 32) and per == 32 * spec.words // bits
    K, N = per * 6, 12
    rng = np.random.default_rng(80 + bits)
    codes = rng.integers(0, 2**bits, size=(K, N))
    codes[0, 0], codes[1, 0] = 2**bits - 1, 0
    qweight = _pack_blocks_py(codes, bits)
    assert qweight.shape == shapes_for(spec, K, N)["qweight"] == (K * spec.words // per, N)
    scales = _wide_scales(spec, (1, N), rng)
    W = dequantize_reference(spec, qweight, scales)
    s64 = scales.astype(np.float64)
    want = [
        [_model_product(spec, [float(_value(spec, int(codes[k, n]))), float(s64[0, n])]) for n in range(N)]
        for k in range(K)
    ]
    _assert_bits(spec, W, want, f"{bits}-bit")


@pytest.mark.parametrize("mode", ["none", "float", "additive"])
def test_three_bit_groups_zero_modes_act_order(mode: str) -> None:
    """3-bit GPTQ with groups, the zero modes it allows, and act_order, against exact rationals."""
    for act in (False, True):
        spec = _gptq3("bf16" if act else "fp16", "unsigned", gs=32, mode=mode, act_order=act)
        K, N = 128, 16
        c = _exact_case(spec, K, N, seed=81)
        qweight = _pack_blocks_py(c["codes"], 3)
        W = _bits16(dequantize_reference(spec, qweight, c["scales"], c["zeros"], c["g_idx"]))
        s64 = c["scales"].astype(np.float64)
        for k in range(K):
            g = int(c["rows"][k])
            for n in range(N):
                z = None if c["zval"] is None else c["zval"][g, n]
                want = _model_element(spec, int(c["codes"][k, n]), float(s64[g, n]), z)
                assert int(W[k, n]) == want, (act, k, n)


def test_three_bit_shapes_and_errors() -> None:
    spec = _gptq3(gs=128)
    assert shapes_for(spec, 4096, 11008) == {"qweight": (384, 11008), "scales": (32, 11008)}
    with pytest.raises(ValueError, match=r"K=48 is not a multiple of 32 \(32 3-bit codes per 3-word block"):
        shapes_for(_gptq3(gs=-1), 48, 8)
    q, s, _, _ = random_inputs(spec, 256, 64, 0)
    assert q.shape == (24, 64) and q.dtype == np.int32
    with pytest.raises(
        ValueError,
        match=r"^qweight: 23 rows \(qweight.shape\[0\]\) is not a multiple of 3.*"
        r"expected shape \(K \* 3 / 32, N\), got \(23, 64\) int32",
    ):
        dequantize_reference(spec, q[:23], s)
    with pytest.raises(
        ValueError,
        match=r"^qweight: K=224 \(from qweight.shape\[0\] / 3 \* 32\) is not a multiple of "
        r"scales.group_size=128",
    ):
        dequantize_reference(spec, q[:21], s)
    with pytest.raises(ValueError, match=r"^qweight: expected shape \(24, 64\) int32 .*got \(24, 63\) int32"):
        dequantize_reference(spec, q[:, :63], s)
    with pytest.raises(ValueError, match=r"^scales: expected shape \(2, 64\) float16 for K=256"):
        dequantize_reference(spec, q, np.concatenate([s, s]))


def test_three_bit_random_inputs_cover_codes() -> None:
    spec = _gptq3(gs=64)
    K, N = 256, 32
    q, s, z, gi = random_inputs(spec, K, N, seed=7)
    assert z is None and gi is None
    assert q.shape == shapes_for(spec, K, N)["qweight"] == (24, 32)
    codes = _unpack_blocks_py(q, 3)
    assert codes.shape == (K, N)
    for i in (10, 21):  # the straddling codes take every value too
        assert set(codes[i::32].reshape(-1).tolist()) == set(range(8))
    W = dequantize_reference(spec, q, s).astype(np.float64)
    want = (codes * np.repeat(s.astype(np.float64), 64, axis=0)).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(W, want)


# -- fp32 rounding used by the global-scale step --------------------------------------------------


def test_round_fp32_matches_numpy() -> None:
    rng = np.random.default_rng(90)
    x = np.concatenate(
        [
            _wide_f64(rng, 30000, -160, 130),  # fp32 subnormals, normals and overflow
            _ties_and_neighbours(23, -126, 127),
            rng.integers(0x3600_0000_0000_0000, 0x47F0_0000_0000_0000, 20000, dtype=np.uint64).view(np.float64),
            np.array([0.0, -0.0, np.inf, -np.inf, 2.0**-149, 2.0**-150, 3 * 2.0**-151]),
        ]
    )
    got = _round_to_bits_array(x, 8, 23)
    with np.errstate(over="ignore"):
        want = x.astype(np.float32).view(np.uint32).astype(np.int64)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(x[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_independence_of_the_reference() -> None:
    """The oracle imports nothing from dqgen but the spec and the Layout, and of the Layout it reads tensor shapes
    only, never a field position or the bit movers (a shared bug would go unnoticed)."""
    import ast

    tree = ast.parse((ROOT / "dqgen" / "check" / "reference.py").read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mods.add(("." * node.level) + (node.module or ""))
        elif isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
    dq = {m for m in mods if m.startswith(("dqgen", "."))}
    assert dq == {"dqgen.core.spec", "dqgen.layout.layout"}, dq
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "of"
    }
    assert used == {"shapes", "k_of"}, used
    assert "ml_dtypes" in mods  # only for the bfloat16 dtype and for reading ml_dtypes scale arrays


# -- every shipped spec, whatever its format -----------------------------------------------------

SHIPPED = [pytest.param(load_spec(p), id=p.stem) for p in SPEC_FILES]


def _codes_generic(spec: Spec, qweight: np.ndarray, K: int, N: int) -> np.ndarray:
    """Test-side unpacking of any layout: big-integer blocks for multi-word specs, else fields."""
    if spec.words > 1:
        return _unpack_blocks_py(qweight, spec.source.bits)
    p, order = 32 // spec.source.bits, np.asarray(spec.order)
    fields = _unpack_fields(qweight, spec.source.bits)
    codes = np.empty((K, N), dtype=np.int64)
    if spec.packing.axis == "N":
        codes.reshape(K, N // p, p)[:, :, order] = fields
    else:
        codes.reshape(K // p, p, N)[:, order, :] = fields.transpose(0, 2, 1)
    return codes


def _code_value_generic(spec: Spec, q: int) -> float:
    kind = spec.source.kind.value
    if kind == "float":
        return float(_ml_values(ML_SOURCE[spec.source.format], 2**spec.source.bits)[q])
    if kind == "codebook":
        cb = spec.source.codebook_values
        if q >= len(cb):
            return 0.0
        return cb[q] if cb[q] == 0 else _rne(Fraction(cb[q]), *_fmt(spec))
    return float(_value(spec, q))


def _scale_values(spec: Spec, scales: np.ndarray) -> np.ndarray:
    if not spec.scales.block:
        return scales.astype(np.float64)
    dt = E8M0 if spec.scales.dtype.value == "e8m0" else E4M3
    return _ml_values(dt, 256)[scales.astype(np.int64)]


@pytest.mark.parametrize("spec", SHIPPED)
def test_shipped_spec_every_element(spec: Spec) -> None:
    """Every shipped spec on random_inputs (+ random_global_scale), element by element against the
    test-side models: exact rationals, ml_dtypes decoding, a big-integer unpacker for 3-bit blocks."""
    K, N = 256, 32
    q, s, z, gi = random_inputs(spec, K, N, seed=12)
    g = random_global_scale(spec, 0)
    assert q.shape == shapes_for(spec, K, N)["qweight"] and q.dtype == np.int32
    W = _bits16(dequantize_reference(spec, q, s, z, gi, g))
    codes = _codes_generic(spec, q, K, N)
    assert codes.min() == 0 and codes.max() == 2**spec.source.bits - 1
    # group_size auto: the reference takes the size from the scales' rows, as the model does here
    gs = K // s.shape[0] if spec.scales.group_size == "auto" else spec.scales.group_size
    rows = gi.astype(np.int64) if gi is not None else (np.zeros(K, np.int64) if gs == -1 else np.arange(K) // gs)
    sv = _scale_values(spec, s)
    mode = spec.zeros.mode
    zval = None
    if mode in PACKED:
        assert z is not None
        zval = np.empty((z.shape[0], N), dtype=np.int64)
        zval.reshape(z.shape[0], N // spec.per_word, spec.per_word)[:, :, np.asarray(_zero_order_model(spec))] = (
            _unpack_fields(z, spec.source.bits)
        )
        zval = zval + (1 if mode == "gptq_v1" else 0)
    elif mode != "none":
        assert z is not None
        zval = z.astype(np.float64)
    table = [_code_value_generic(spec, c) for c in range(2**spec.source.bits)]
    integer = spec.source.kind.value in ("unsigned", "signed", "biased")
    want = []
    for k in range(K):
        r = int(rows[k])
        for n in range(N):
            cv, sc = table[codes[k, n]], float(sv[r, n])
            if integer:
                want.append(_model_element(spec, int(cv), sc, None if zval is None else zval[r, n]))
            elif spec.scales.global_scale:
                assert g is not None
                want.append(_model_nvfp4(spec, cv, sc, float(g[0])))
            else:
                want.append(_model_product(spec, [cv, sc]))
    _assert_bits(spec, W.reshape(K, N), np.array(want, dtype=object).reshape(K, N), spec.name)
