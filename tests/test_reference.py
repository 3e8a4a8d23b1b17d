"""Tests of the numba reference dequantizer against independent, test-side models.

Expected values here come from IEEE facts, numpy / ml_dtypes casts, exact ``Fraction``
arithmetic and a plain Python packer written below: never from dqgen.reference itself.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dqgen.reference import (
    _round_array,
    _round_bits,
    _sum_round_to_odd_array,
    dequantize_reference,
    element_value,
    random_inputs,
    shapes_for,
)
from dqgen.spec import Spec, load_spec

ROOT = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted((ROOT / "specs").glob("*.yaml"))
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


def _all_specs() -> list:
    # The layout/zero tests below model AWQ-style zeros and row // group groups; shipped specs with
    # other zero modes or act-order are covered by MODE_SPECS and the act-order tests further down.
    shipped = [load_spec(p) for p in SPEC_FILES]
    params = [pytest.param(s, id=s.name) for s in shipped if s.zeros.mode in ("none", "integer") and not s.act_order]
    params += [pytest.param(load_spec(d), id=name) for name, d in EXTRA_SPECS.items()]
    return params


ALL_SPECS = _all_specs()

ZERO_MODES = ["none", "integer", "gptq_v1", "gptq_v2", "float", "additive"]
PACKED = ("integer", "gptq_v1", "gptq_v2")


def _mspec(name: str, *, bits: int = 4, kind: str = "unsigned", bias: int | None = None, target: str = "fp16",
           axis: str = "N", order: str | list[int] = "sequential", gs: int = 16, mode: str = "none",
           act_order: bool = False) -> dict:
    source: dict = {"bits": bits, "kind": kind}
    if bias is not None:
        source["bias"] = bias
    return {
        "name": name, "source": source, "target": target, "packing": {"axis": axis, "order": order},
        "scales": {"group_size": gs}, "zeros": {"mode": mode}, "act_order": act_order,
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
    d["u2_k_perm_v1_act"] = _mspec("u2_k_perm_v1_act", bits=2, axis="K", order=[(5 * j) % 16 for j in range(16)],
                                   mode="gptq_v1", act_order=True, target="bf16")
    # Packed zeros along N with a custom order: qzeros use the same order (AWQ).
    d["u2_n_perm_v1"] = _mspec("u2_n_perm_v1", bits=2, axis="N", order=[(3 * j) % 16 for j in range(16)],
                               mode="gptq_v1", gs=32)
    d["u8_n_ft_v2_bf16"] = _mspec("u8_n_ft_v2_bf16", bits=8, axis="N", order="ft_int8", mode="gptq_v2", target="bf16")
    # Signed / biased codes with float and additive zeros, per-channel groups, 8-bit act_order.
    d["s4_n_float_bf16"] = _mspec("s4_n_float_bf16", kind="signed", mode="float", target="bf16", gs=-1)
    d["u4b8_k_additive_bf16"] = _mspec("u4b8_k_additive_bf16", kind="biased", bias=8, axis="K", mode="additive",
                                       target="bf16")
    d["u8b128_k_act_additive_fp16"] = _mspec("u8b128_k_act_additive_fp16", bits=8, kind="biased", bias=128,
                                             axis="K", mode="additive", act_order=True)
    d["s8_k_act_float_fp16"] = _mspec("s8_k_act_float_fp16", bits=8, kind="signed", axis="K", mode="float",
                                      act_order=True, gs=32)
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
    for k in (0.5, 1.5, 2.5, 3.5, 1.0, 2.0 ** mbits - 0.5, 2.0 ** mbits + 0.5):
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
        [0.0, -0.0, np.inf, -np.inf, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2.0**-133, 2.0**-134, 3 * 2.0**-134,
         np.finfo(np.float32).max, np.finfo(np.float32).tiny, 2.0**-149],
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
    for xi, gi in zip(x, got):
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
        1.0: 0x3C00, 1 + 2**-11: 0x3C00, 1 + 3 * 2**-11: 0x3C02, 65504.0: 0x7BFF, 65520.0: 0x7C00,
        65519.0: 0x7BFF, 2.0**-24: 0x0001, 2.0**-25: 0x0000, 3 * 2.0**-25: 0x0002, 2.0**-14: 0x0400,
        -0.0: 0x8000, -2.0: 0xC000, math.inf: 0x7C00, -1e9: 0xFC00, 2.0**-14 - 2.0**-25: 0x0400,
    }
    bf16 = {
        1.0: 0x3F80, 1 + 2**-8: 0x3F80, 1 + 3 * 2**-8: 0x3F82, 1 + 2**-8 + 2**-40: 0x3F81,
        -0.0: 0x8000, 2.0**-133: 0x0001, 2.0**-134: 0x0000, 2.0**-126: 0x0080,
        (2 - 2**-7) * 2.0**127: 0x7F7F, (2 - 2**-8) * 2.0**127: 0x7F80, -math.inf: 0xFF80,
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
    by = {p.stem: load_spec(p) for p in SPEC_FILES}
    assert shapes_for(by["awq_int4_fp16"], 4096, 4096) == {
        "qweight": (4096, 512), "scales": (32, 4096), "zeros": (32, 512)}
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
    return load_spec(ROOT / "specs" / f"{stem}.yaml")


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
        assert zeros is not None and zeros.dtype == np.int32 and zeros.shape == shapes["zeros"] == (G, N // spec.per_word)
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
        "codes": codes, "qweight": _pack_words(codes, spec, spec.packing.axis), "scales": scales,
        "zeros": zeros, "zval": zval, "g_idx": g_idx, "rows": rows,
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


@pytest.mark.parametrize("spec", MODE_SPECS)
def test_zero_modes_full_tensor_vectorized(spec: Spec) -> None:
    """A whole random_inputs tensor against a numpy model (test-side unpacking). float and additive
    use numpy's correctly rounded float64 -> float16 casts, so they are checked for fp16 only."""
    mode = spec.zeros.mode
    if spec.target.value == "bf16" and mode in ("float", "additive"):
        pytest.skip("no independent vectorized bf16 rounding from float64; covered element-wise above")
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
            z.reshape(zeros.shape[0], N // p, p)[:, :, np.asarray(_zero_order_model(spec))] = _unpack_fields(zeros, bits)
            vals = vals - (z + (1 if mode == "gptq_v1" else 0))[rows]
        if mode == "float":
            assert zeros is not None
            t = (vals - zeros.astype(np.float64)[rows]).astype(np.float16).astype(np.float64)  # exact difference
            want = (t * s).astype(np.float16).view(np.uint16)
        elif mode == "additive":
            assert zeros is not None
            want = (vals * s + zeros.astype(np.float64)[rows]).astype(np.float16).view(np.uint16)  # exact sum
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
    W = dequantize_reference(spec, np.zeros((1, 8), np.int32), np.full((1, 8), 0.5, np.float16),
                             np.array([[-1]], dtype=np.int32))
    np.testing.assert_array_equal(W.astype(np.float64), np.full((8, 8), -8.0))


@pytest.mark.parametrize("layout", ["awq", "gptq", "gptq_act"])
def test_gptq_v1_is_one_zero_step_below_v2(layout: str) -> None:
    kw: dict = {"awq": {"axis": "N", "order": "awq"}, "gptq": {"axis": "K"}, "gptq_act": {"axis": "K", "act_order": True}}[layout]
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
        zeros = np.repeat((np.arange(G, dtype=np.uint32) * np.uint32(0x11111111))[:, None], N // 8, axis=1).view(np.int32)
        value = lambda g: (9 - (g + 1)) * 2.0**g
    elif mode == "float":
        zeros = np.repeat(np.arange(G, dtype=np.float64)[:, None] / 2, N, axis=1).astype(np.float16)
        value = lambda g: (9 - g / 2) * 2.0**g
    elif mode == "additive":
        zeros = np.repeat(-(np.arange(G, dtype=np.float64) ** 2)[:, None], N, axis=1).astype(np.float16)
        value = lambda g: 9 * 2.0**g - g**2
    else:
        zeros = None
        value = lambda g: 9 * 2.0**g
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
    for ai, bi, ri in zip(a, b, r):
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
