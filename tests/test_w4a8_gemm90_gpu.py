"""GPU (sm_90): the Hopper W4A8 GEMM against the numpy model of its arithmetic (dqgen.check.w4a8_model, which runs
the proven Plan on the same prepacked words): every CTA shape, AWQ (zero points) and GPTQ (q - 8), M and N tails,
an odd number of K tiles past twice the stages (every stage refilled); the outputs equal the model's bits (the same
fp32 operations in the same order, one rounding to fp16); split-K within one fp16 ulp; and against float64 of the
dequantized layer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dqgen.check.w4a8_model import w4a8_matmul as model_matmul
from dqgen.core.spec import load_spec
from dqgen.emit.pipeline import compile_artifact
from dqgen.kernels.w4a8_gemm90 import W4A8_TILES, W4A8Tile
from dqgen.layout.layout import Layout
from dqgen.layout.w4a8 import pack_w4a8, w4a8_converter_spec

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


def _hopper() -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the W4A8 kernel needs an sm_90 GPU")


def _layer(name: str, K: int, N: int, seed: int) -> tuple[Any, Any, Any, Any]:
    """(spec, qweight, scales fp16 [G, N], qzeros or None) of a random int4 layer, group 128."""
    spec = load_spec(name)
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (K, N)).astype(np.uint8)
    s16 = (rng.uniform(0.5, 2.0, (K // 128, N)) * 1e-2).astype(np.float16)
    lay = Layout.of(spec)
    qz = None
    if spec.zeros.packed:
        z = rng.integers(0, 16, (K // 128, N)).astype(np.uint8)
        qz = lay.pack_fields(z, lay.zero_order, "N")
    return spec, lay.pack_fields(codes), s16, qz


@pytest.mark.parametrize("tile", W4A8_TILES, ids=lambda t: t.tag)
@pytest.mark.parametrize("name", ["awq_int4_s8", "gptq_int4_s8"])
def test_every_tile_agrees_with_the_numpy_model(name: str, tile: W4A8Tile) -> None:
    _hopper()
    from dqgen.w8a8.w4a8 import pack_w4a8_weight, w4a8_matmul

    # 19 rescale tiles: past twice every tile's stages (the producer refills each stage after the consumers released
    # it), odd (the loop unrolled by two ends in its first half); 5 feature blocks: a partial CTA column
    K, N = 19 * 128, 64 * 5
    m = tile.bn + 3 if tile.bn < 128 else 150  # a partial token tile
    spec, qweight, s16, qz = _layer(name, K, N, seed=tile.bn)
    w = pack_w4a8_weight(spec, qweight, s16, qz, 128)
    rng = np.random.default_rng(7)
    xq = rng.integers(-128, 128, (m, K)).astype(np.int8)
    xs = rng.uniform(1e-3, 1e-2, m).astype(np.float32)
    xq_d, xs_d = torch.from_numpy(xq).cuda(), torch.from_numpy(xs).cuda()
    y = w4a8_matmul(xq_d, xs_d, w, out_dtype=torch.float16, tile=tile, splits=1)  # one piece a tile: the model's order
    torch.cuda.synchronize()
    plan = compile_artifact(w4a8_converter_spec(spec)).plan
    want = model_matmul(plan, pack_w4a8(spec, qweight, s16, qz, 128), xq, xs)  # float32, the kernel's order
    got = y.float().cpu().numpy()
    # the kernel's fp32 result is the model's (same operations, same order); one rounding to fp16 on top
    assert np.array_equal(got, want.astype(np.float16).astype(np.float32)), float(np.abs(got - want).max())


def test_bias_and_bf16() -> None:
    _hopper()
    from dqgen.w8a8.w4a8 import pack_w4a8_weight, w4a8_matmul

    K, N, m = 512, 128, 5
    spec, qweight, s16, qz = _layer("awq_int4_s8", K, N, seed=1)
    w = pack_w4a8_weight(spec, qweight, s16, qz, 128)
    xq = torch.randint(-128, 128, (m, K), dtype=torch.int8, device="cuda")
    xs = torch.rand(m, device="cuda") * 1e-2
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    y = w4a8_matmul(xq, xs, w, bias, torch.bfloat16)
    y0 = w4a8_matmul(xq, xs, w, None, torch.bfloat16)
    assert torch.allclose(y.float(), y0.float() + bias.float(), atol=0.05, rtol=1e-2)
    with pytest.raises(ValueError, match=r"^x_q:"):
        w4a8_matmul(xq[:, :-16].contiguous(), xs, w)
    with pytest.raises(ValueError, match=r"^x_scale:"):
        w4a8_matmul(xq, xs[:-1], w)


@pytest.mark.parametrize("splits", [2, 3, 8])
def test_split_k_within_fp32_ulps_of_the_model_and_deterministic(splits: int) -> None:
    """Split-K pieces added in split order: a few fp32 ulps from the model's K-order sum, before the output
    rounding (so within one fp16 ulp after it), the same bits on every run."""
    _hopper()
    from dqgen.w8a8.w4a8 import pack_w4a8_weight, w4a8_matmul

    K, N, m = 19 * 128, 64 * 3, 5  # 19 rescale tiles: pieces of odd lengths
    spec, qweight, s16, qz = _layer("awq_int4_s8", K, N, seed=splits)
    w = pack_w4a8_weight(spec, qweight, s16, qz, 128)
    rng = np.random.default_rng(3)
    xq = rng.integers(-128, 128, (m, K)).astype(np.int8)
    xs = rng.uniform(1e-3, 1e-2, m).astype(np.float32)
    xq_d, xs_d = torch.from_numpy(xq).cuda(), torch.from_numpy(xs).cuda()
    ys = [w4a8_matmul(xq_d, xs_d, w, out_dtype=torch.float16, splits=splits) for _ in range(3)]
    assert all(torch.equal(ys[0], y) for y in ys[1:])
    plan = compile_artifact(w4a8_converter_spec(spec)).plan
    want = model_matmul(plan, pack_w4a8(spec, qweight, s16, qz, 128), xq, xs)
    got = ys[0].float().cpu().numpy()
    ulp16 = np.spacing(np.abs(want).astype(np.float16)).astype(np.float32)
    assert (np.abs(got - want) <= ulp16).all(), float((np.abs(got - want) / ulp16).max())
    with pytest.raises(ValueError, match=r"^splits:"):
        w4a8_matmul(xq_d, xs_d, w, splits=K // 128 + 1)
