"""CPU (torch): the torch packers (dqgen.layout.torch_pack) give the numpy packers' bytes, and the torch quantizer
(dqgen.nn.quantize_torch) gives dqgen.quantize's tensors, bit for bit: the GEMV layout for every shipped spec, the
GEMM layout for every spec a GEMM takes (the floats' groups of 32 in order, MXFP4's 1-byte scale codes), several
shapes (tails of N and K), groups that are no whole blocks or tiles, with and without act-order."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dqgen.check.reference import random_inputs  # noqa: E402
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec, with_group_size  # noqa: E402
from dqgen.kernels.gemm90 import Gemm90KernelConfig  # noqa: E402
from dqgen.layout import gemm as gemm_layout  # noqa: E402
from dqgen.layout import torch_pack  # noqa: E402
from dqgen.layout.layout import Layout, pack_fields, unpack_fields  # noqa: E402
from dqgen.layout.matmul import prepack  # noqa: E402
from dqgen.nn.quantize import quantize  # noqa: E402
from dqgen.nn.quantize_torch import on_device, quantize_tensors  # noqa: E402

SPECS = [load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))]
GEMM_SPECS = [s for s in SPECS if Gemm90KernelConfig.supports(s)]  # the integer specs, and the Hopper GEMM's floats
INT_SPECS = [s for s in SPECS if on_device(s)]


def _t(a: np.ndarray | None) -> object:
    """A numpy array as a CPU torch tensor of the same bytes (bf16 / fp8 through their raw bits)."""
    if a is None:
        return None
    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if a.dtype.name.startswith("float8") or a.dtype.name.startswith("float4"):
        return torch.from_numpy(a.view(np.uint8))
    if a.dtype == np.uint32:
        return torch.from_numpy(a.view(np.int32))
    return torch.from_numpy(a)


def _bytes(x: object) -> bytes:
    if x is None:
        return b""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x).tobytes()
    assert isinstance(x, torch.Tensor)
    return x.contiguous().view(torch.uint8).numpy().tobytes() if x.numel() else b""


def _shapes(spec: Spec) -> list[tuple[Spec, int, int, int]]:
    """(spec with a concrete group, K, N, group size): a tail of N (not a whole 16-row tile), a K that is no whole
    chunk, and a group that is no whole block of the GEMV where the format allows one."""
    lay = Layout.of(spec)
    g = spec.scales.group_size
    n_unit = lay.per_block if lay.axis == "N" or lay.zeros == "packed" else 1
    N = 56 if 56 % n_unit == 0 else 80
    out = []
    groups = [128, 2 * lay.per_block if lay.axis == "K" else 24] + ([] if spec.act_order else [-1])
    for gs in [g] if g != "auto" else groups:
        sp = spec if g != "auto" else with_group_size(spec, gs)
        K = (128 // gs + 1) * gs if gs > 0 else 128 + (lay.per_block if lay.axis == "K" else 3)
        out.append((sp, K, N, gs))
    return out


CASES = [c for s in SPECS for c in _shapes(s)]
IDS = [f"{c[0].name}-K{c[1]}-N{c[2]}-g{c[3]}" for c in CASES]


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("axis", ["N", "K"])
def test_fields_equal_numpy(bits: int, axis: str) -> None:
    if axis == "N" and bits in (3, 6):
        pytest.skip("3- and 6-bit codes straddle words: packed along K only")
    lay_words = 3 if bits in (3, 6) else 1
    p = 32 * lay_words // bits
    rng = np.random.default_rng(bits)
    order = tuple(int(i) for i in rng.permutation(p))
    shape = (3 * p, 5) if axis == "K" else (7, 4 * p)
    vals = rng.integers(0, 1 << bits, size=shape, dtype=np.uint8)
    words = pack_fields(vals, bits, order, axis)
    tw = torch_pack.torch_pack_fields(torch.from_numpy(vals), bits, order, axis)
    assert tw.dtype == torch.int32
    assert np.array_equal(tw.numpy(), words)
    back = torch_pack.torch_unpack_fields(tw, bits, order, axis)
    assert np.array_equal(back.numpy(), unpack_fields(words.view(np.uint32), bits, order, axis))
    assert np.array_equal(back.numpy(), vals)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gemv_prepack_equals_numpy(case: tuple[Spec, int, int, int]) -> None:
    sp, K, N, gs = case
    q, s, z, gi = random_inputs(sp, K, N, seed=K + N)
    group = gs if gs > 0 and s.shape[0] > 1 else -1
    ref = prepack(sp, q, s, z, gi, group)
    got = torch_pack.torch_prepack(sp, _t(q), _t(s), _t(z), gi, group)
    assert got.wq.shape == ref.wq.shape and got.wq.dtype == torch.int32
    assert _bytes(got.wq) == _bytes(ref.wq)
    assert _bytes(got.scales) == _bytes(ref.scales) and got.scales.shape == ref.scales.shape
    assert (got.zeros is None) == (ref.zeros is None)
    assert _bytes(got.zeros) == _bytes(ref.zeros)
    assert got.slots is not None and np.array_equal(got.slots.perm, ref.slots.perm)
    assert (got.N, got.groups, got.group_size) == (ref.N, ref.groups, ref.group_size)
    if sp.act_order:
        assert ref.slots.gather  # the act-order case is exercised


GEMM_CASES = [c for s in GEMM_SPECS for c in _shapes(s)] + [
    (with_group_size(load_spec("awq_int4_fp16"), 32), 224, 136, 32),  # groups of half a tile: gather slots
    (with_group_size(load_spec("int8_fp16"), 96), 288, 132, 96),
]


@pytest.mark.parametrize("case", GEMM_CASES, ids=[f"{c[0].name}-K{c[1]}-N{c[2]}-g{c[3]}" for c in GEMM_CASES])
def test_gemm_pack_equals_numpy(case: tuple[Spec, int, int, int]) -> None:
    sp, K, N, gs = case
    q, s, z, gi = random_inputs(sp, K, N, seed=K * 3 + N)
    group = gs if gs > 0 and s.shape[0] > 1 else -1
    ref = gemm_layout.pack_gemm(sp, q, s, z, gi, group)
    got = torch_pack.torch_pack_gemm(sp, _t(q), _t(s), _t(z), gi, group)
    assert got.wq.dtype == torch.uint8 and tuple(got.wq.shape) == ref.wq.shape
    assert _bytes(got.wq) == _bytes(ref.wq)
    assert _bytes(got.scales) == _bytes(ref.scales) and tuple(got.scales.shape) == ref.scales.shape
    assert _bytes(got.zeros) == _bytes(ref.zeros)
    assert (got.n_cols, got.groups, got.slots.gather) == (ref.n_cols, ref.groups, ref.slots.gather)


def _weight(K: int, N: int, seed: int, positive_rows: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((K, N)) * 0.05).astype(np.float16)
    w[0] = 0.0  # a group column with a zero and
    if positive_rows:
        w[: K // 2] = np.abs(w[: K // 2])  # groups of one sign (gptq_v1's clipped zero point)
    w[1, ::7] = 0.75  # large outliers
    return w


QUANT_CASES = [
    (s, gs, act)
    for s in INT_SPECS
    for gs in ([None, -1] if s.scales.group_size == "auto" and not s.act_order else [None])
    for act in ([False, True] if s.act_order else [False])
]


@pytest.mark.parametrize(
    "spec,group_size,act_order",
    QUANT_CASES,
    ids=[f"{s.name}-g{g}-{'act' if a else 'seq'}" for s, g, a in QUANT_CASES],
)
def test_torch_quantize_equals_numpy(spec: Spec, group_size: int | None, act_order: bool) -> None:
    K, N = 256, 96
    w = _weight(K, N, seed=K + len(spec.name), positive_rows=spec.zeros.mode != "none")
    ref = quantize(spec, w, group_size=group_size, act_order=act_order)
    got = quantize_tensors(spec, torch.from_numpy(w), group_size=group_size, act_order=act_order)
    assert set(got) == set(ref)
    for name, a in ref.items():
        t = got[name]
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu", name
        assert tuple(t.shape) == a.shape, name
        assert _bytes(t) == _bytes(a), name


def test_torch_quantize_takes_torch_orientation() -> None:
    """from_linear passes weight.t() (a transposed view): the result is the contiguous weight's."""
    w = _weight(128, 64, seed=3)
    lin = torch.from_numpy(np.ascontiguousarray(w.T))  # torch's [N, K]
    got = quantize_tensors("awq_int4_fp16", lin.t())
    ref = quantize("awq_int4_fp16", w)
    for name, a in ref.items():
        assert _bytes(got[name]) == _bytes(a), name


def test_torch_quantize_bf16_weight_and_errors() -> None:
    w = _weight(128, 64, seed=4).astype(np.float32)
    tb = torch.from_numpy(w).to(torch.bfloat16)
    ref = quantize("awq_int4_bf16", tb.to(torch.float32).numpy())
    got = quantize_tensors("awq_int4_bf16", tb)
    for name, a in ref.items():
        assert _bytes(got[name]) == _bytes(a), name
    bad = torch.from_numpy(w).clone()
    bad[5, 9] = float("nan")
    with pytest.raises(ValueError, match=r"^weight: every value must be finite, got nan at \[5, 9\]$"):
        quantize_tensors("awq_int4_fp16", bad)
    with pytest.raises(ValueError, match=r"^group_size: expected -1 or a positive divisor of K = 128, got 48$"):
        quantize_tensors("gptq_int4_fp16", torch.from_numpy(w), group_size=48)
    with pytest.raises(ValueError, match=r"^act_order: spec awq_int4_fp16 has no act-order"):
        quantize_tensors("awq_int4_fp16", torch.from_numpy(w), act_order=True)


def test_additive_zeros_round_like_numpy() -> None:
    """Additive zeros b = w_min - lo * s are the one value the quantizer rounds to the target: fp16 once
    (numpy's direct cast; torch's would go through float32), bf16 as ml_dtypes does."""
    for target in ("fp16", "bf16"):
        spec = load_spec(
            {
                "name": f"u4_add_{target}",
                "source": {"bits": 4, "kind": "unsigned"},
                "target": target,
                "packing": {"axis": "K", "order": "sequential"},
                "scales": {"group_size": 32},
                "zeros": {"mode": "additive"},
                "arch": "sm_80",
            }
        )
        w = (np.random.default_rng(7).standard_normal((256, 64)) * 3.3).astype(np.float32)
        ref = quantize(spec, w)
        got = quantize_tensors(spec, torch.from_numpy(w))
        for name, a in ref.items():
            assert _bytes(got[name]) == _bytes(a), (target, name)


def test_target_rounding_is_numpys_on_double_rounding_cases() -> None:
    """Values just above a tie of the target, whose float32 rounding lands on the tie: numpy rounds float64 to fp16
    once (up), torch's cast goes through float32 (to the even value below); ml_dtypes' bf16 goes through float32."""
    from dqgen.core.spec import load_spec as ls
    from dqgen.nn.quantize_torch import _to_target

    x = np.array([1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 1 + 2**-8 + 2**-30, 3.0, 2.0**-20 + 2**-60])
    fp16 = _to_target(ls("awq_int4_fp16"), torch.from_numpy(x))
    assert fp16.dtype == torch.float16
    assert np.array_equal(fp16.numpy().view(np.uint16), x.astype(np.float16).view(np.uint16))
    assert float(fp16[0]) == 1 + 2**-10  # the case torch's own cast gets wrong
    bf16 = _to_target(ls("awq_int4_bf16"), torch.from_numpy(x))
    assert np.array_equal(bf16.view(torch.int16).numpy(), x.astype(_bf16()).view(np.int16))


def _bf16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
