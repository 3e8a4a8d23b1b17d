"""dqgen.nn.W4A8Linear and the dqgen::w4a8_matmul op on the host (torch on the CPU, no GPU): int4 quantization of a
float layer, AWQ / GPTQ checkpoint import packed once into the W4A8 layout, the one-line errors, the op's fake
implementation, and the accuracy of the numpy model of forward (tests/w4a8_module_model.py, which the GPU tests hold
the kernel to bit for bit) against float64: of the dequantized operands, and of the float layer / MLP. The figures
in docs/w8a8.md come from these tests (-s prints)."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pytest

from dqgen.core.spec import load_spec
from dqgen.layout.layout import Layout
from dqgen.layout.w4a8 import unpack_codes

torch = pytest.importorskip("torch")

from dqgen.nn import W4A8Linear  # noqa: E402
from dqgen.w8a8.w4a8_op import check_inputs  # noqa: E402
from tests.w4a8_module_model import model_forward  # noqa: E402

AWQ, GPTQ = Layout.of(load_spec("awq_int4_s8")), Layout.of(load_spec("gptq_int4_s8"))


def _codes_and_zeros(layer: Any) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(codes [K, N], zeros [K/128, N] or None, scales [K/128, N]) held by a layer's buffers."""
    packed = layer.packed()
    codes = unpack_codes(packed.wq)
    per_tile = packed.scales.transpose(1, 0, 2).reshape(packed.K // 128, packed.N)
    zeros = None
    if packed.zeros is not None:
        words = packed.zeros.transpose(1, 0, 2).reshape(packed.K // 128, packed.N)
        assert (words == (words & 0xF) * 0x11111111).all()  # the zero replicated into every field
        zeros = (words & 0xF).astype(np.int64)
    return codes, zeros, per_tile


def _dequantized(layer: Any) -> np.ndarray:
    """The layer's int4 weight in float64 [N, K] (without its smoothing)."""
    codes, zeros, scales = _codes_and_zeros(layer)
    z = 8 if zeros is None else np.repeat(zeros, 128, axis=0)
    return ((codes.astype(np.float64) - z) * np.repeat(scales.astype(np.float64), 128, axis=0)).T


def _rel(a: Any, b: Any) -> float:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a64 - b64) / np.linalg.norm(b64))


def _checkpoint(K: int, N: int, group: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes uint8 [K, N], zeros uint8 [G, N] in 1..15, scales fp16 [G, N]) of a random int4 layer."""
    rng = np.random.default_rng(seed)
    G = 1 if group == -1 else K // group
    codes = rng.integers(0, 16, (K, N)).astype(np.uint8)
    zeros = rng.integers(1, 16, (G, N)).astype(np.uint8)
    scales = (rng.uniform(0.5, 2.0, (G, N)) * 1e-2).astype(np.float16)
    return codes, zeros, scales


def _i32(a: np.ndarray) -> Any:
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int32))


# ----------------------------------------------------------------------------------------------- from_linear


@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("group", [128, 256, -1])
def test_from_linear_rounds_each_weight_to_the_nearest_code(zero_point: bool, group: int) -> None:
    """Every dequantized weight within half a code step (its group's scale) of the float weight, zero points in
    0..15 (AWQ-style) or none (q - 8), and the same buffers as packing dqgen.quantize's checkpoint of the layer."""
    torch.manual_seed(group + zero_point)
    lin = torch.nn.Linear(512, 192)
    layer = W4A8Linear.from_linear(lin, group_size=group, zero_point=zero_point)
    assert (layer.w_zeros is not None) == zero_point and layer.group_size == group
    _, _, scales = _codes_and_zeros(layer)
    step = np.abs(np.repeat(scales.astype(np.float64), 128, axis=0).T)  # [N, K] (a symmetric scale may be < 0)
    err = np.abs(_dequantized(layer) - lin.weight.detach().double().numpy())
    assert (err <= 0.5 * step * (1 + 1e-6)).all(), float((err / step).max())
    if group != -1 and group > 128:  # a group's 128-k tiles share its scale
        assert np.array_equal(scales[0::2], scales[1::2])
    from dqgen.nn.quantize import quantize
    from dqgen.nn.w4a8_linear import _float_twin
    from dqgen.w8a8.w4a8_op import spec_for

    spec = spec_for(zero_point)
    ck = quantize(_float_twin(spec), lin.weight.detach().double().numpy().T, group_size=group)
    want = unpack_codes(layer.packed().wq)
    assert np.array_equal(Layout.of(spec).unpack_fields(ck["qweight"].view(np.uint32)), want)


def test_from_linear_smoothing_divides_the_input_and_scales_the_weight() -> None:
    torch.manual_seed(1)
    lin = torch.nn.Linear(256, 128)
    absmax = torch.rand(256) * 10 + 0.1
    layer = W4A8Linear.from_linear(lin, act_absmax=absmax, alpha=0.5)
    assert layer.smooth is not None and layer.smooth.dtype == torch.float32
    from dqgen.w8a8 import smooth_factors

    assert torch.equal(layer.smooth, smooth_factors(absmax, lin.weight.detach().float(), 0.5))
    given = W4A8Linear.from_linear(lin, smooth=layer.smooth)
    assert torch.equal(given.w_q, layer.w_q) and torch.equal(given.w_scale, layer.w_scale)
    # the smoothed weight W * s is what is quantized: dividing its columns by s gives back W within the int4 error
    w = _dequantized(layer) / layer.smooth.double().numpy()[None, :]
    assert _rel(w, lin.weight.detach().double().numpy()) < 0.15


# ----------------------------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("group", [128, -1])
def test_awq_checkpoint_holds_its_codes_zeros_and_scales(group: int) -> None:
    K, N = 512, 128
    codes, zeros, s16 = _checkpoint(K, N, group, seed=5)
    layer = W4A8Linear.from_checkpoint(
        "awq", _i32(AWQ.pack_fields(codes)), torch.from_numpy(s16), _i32(AWQ.pack_fields(zeros, AWQ.zero_order, "N"))
    )
    got_codes, got_zeros, got_scales = _codes_and_zeros(layer)
    rows = np.arange(K // 128) * 128 // (K if group == -1 else group)
    assert np.array_equal(got_codes, codes)
    assert got_zeros is not None and np.array_equal(got_zeros, zeros[rows])
    assert np.array_equal(got_scales, s16[rows].astype(np.float32))
    assert layer.group_size == group


def test_gptq_checkpoints_symmetric_and_with_zero_points() -> None:
    """sym=True (every zero point 8, stored 7): the symmetric kernel on qweight as stored; other zero points: the
    same buffers as the AWQ checkpoint of the same codes, zeros and scales."""
    K, N = 256, 64
    codes, zeros, s16 = _checkpoint(K, N, 128, seed=9)
    qweight = _i32(GPTQ.pack_fields(codes))
    seq = Layout.of(load_spec("gptq_int4_asym_act_order_fp16"))  # GPTQ's qzeros: sequential along N, z - 1

    def qzeros(z: np.ndarray) -> Any:
        return _i32(seq.pack_fields((z - 1).astype(np.uint8), seq.zero_order, "N"))

    g_idx = torch.arange(K, dtype=torch.int32) // 128
    sym = W4A8Linear.from_checkpoint("gptq", qweight, torch.from_numpy(s16), qzeros(np.full_like(zeros, 8)), g_idx)
    assert sym.w_zeros is None
    got, _, _ = _codes_and_zeros(sym)
    assert np.array_equal(got, codes)
    plain = W4A8Linear.from_checkpoint("gptq", qweight, torch.from_numpy(s16))
    assert torch.equal(plain.w_q, sym.w_q) and torch.equal(plain.w_scale, sym.w_scale)

    asym = W4A8Linear.from_checkpoint("gptq", qweight, torch.from_numpy(s16), qzeros(zeros))
    awq = W4A8Linear.from_checkpoint(
        "awq", _i32(AWQ.pack_fields(codes)), torch.from_numpy(s16), _i32(AWQ.pack_fields(zeros, AWQ.zero_order, "N"))
    )
    assert asym.w_zeros is not None and awq.w_zeros is not None
    assert torch.equal(asym.w_q, awq.w_q) and torch.equal(asym.w_zeros, awq.w_zeros)
    assert torch.equal(asym.w_scale, awq.w_scale)


def _pack_autogptq(q: np.ndarray, stored_zeros: np.ndarray) -> tuple[Any, Any]:
    """AutoGPTQ's packing written out here, independently of dqgen's Layout: qweight int32 [K/8, N] with row k's
    code in bits 4 (k % 8) of word k // 8; qzeros int32 [G, N/8] with column n's stored zero in bits 4 (n % 8)."""
    k, n = q.shape
    qw = np.zeros((k // 8, n), np.uint32)
    for j in range(8):
        qw |= q[j::8].astype(np.uint32) << np.uint32(4 * j)
    g = stored_zeros.shape[0]
    qz = np.zeros((g, n // 8), np.uint32)
    for j in range(8):
        qz |= stored_zeros[:, j::8].astype(np.uint32) << np.uint32(4 * j)
    return torch.from_numpy(qw.view(np.int32)), torch.from_numpy(qz.view(np.int32))


@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
def test_gptq_v1_and_v2_zero_points_from_an_independent_packer(fmt: str) -> None:
    """AutoGPTQ (v1) stores z - 1, GPTQModel (v2) stores z: the layer's dequantized weight is scale x (q - z) either
    way, and a symmetric v2 checkpoint (every stored zero 8) takes the symmetric kernel."""
    K, N = 256, 64
    rng = np.random.default_rng(11)
    q = rng.integers(0, 16, (K, N))
    z = rng.integers(1, 16, (K // 128, N))  # v1 cannot store z = 0 (it stores z - 1 in 4 bits)
    s = (rng.uniform(0.5, 2.0, (K // 128, N)) * 1e-2).astype(np.float16)
    qweight, qzeros = _pack_autogptq(q, z - 1 if fmt == "gptq" else z)
    layer = W4A8Linear.from_checkpoint("gptq", qweight, torch.from_numpy(s), qzeros, checkpoint_format=fmt)  # type: ignore[arg-type]
    want = s.astype(np.float64).repeat(128, axis=0) * (q - z.repeat(128, axis=0))  # [K, N]; exact in float64
    assert np.array_equal(_dequantized(layer), want.T)
    sym_q, sym_z = _pack_autogptq(q, np.full_like(z, 8 - (1 if fmt == "gptq" else 0)))
    sym = W4A8Linear.from_checkpoint("gptq", sym_q, torch.from_numpy(s), sym_z, checkpoint_format=fmt)  # type: ignore[arg-type]
    assert sym.w_zeros is None


def test_from_checkpoint_moves_the_bias_and_smoothing_with_the_weight() -> None:
    qweight, scales = _gptq()
    layer = W4A8Linear.from_checkpoint(
        "gptq", qweight, scales, bias=torch.ones(64, dtype=torch.float16), smooth=torch.ones(256), device="meta"
    )
    assert {t.device.type for t in (layer.w_q, layer.bias, layer.smooth)} == {"meta"}


def test_a_bias_cast_under_inference_mode() -> None:
    """A layer built under torch.inference_mode (no version counter on its buffers) casts its bias for another dtype."""
    with torch.inference_mode():
        layer = W4A8Linear.from_checkpoint("gptq", *_gptq(), bias=torch.ones(64, dtype=torch.float16))
        cast = layer._bias_for(torch.bfloat16)
        assert cast is not None and cast.dtype == torch.bfloat16 and layer._bias_for(torch.bfloat16) is cast


def _gptq(K: int = 256, N: int = 64) -> tuple[Any, Any]:
    codes, _, s16 = _checkpoint(K, N, 128, seed=2)
    return _i32(GPTQ.pack_fields(codes)), torch.from_numpy(s16)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda: W4A8Linear.from_checkpoint("gptq", *_gptq(), g_idx=torch.arange(256).flip(0) // 128),
            r"^g_idx: an act-order",
        ),
        (lambda: W4A8Linear.from_checkpoint("marlin", *_gptq()), r"^kind: expected 'awq' or 'gptq'"),  # type: ignore[arg-type]
        (lambda: W4A8Linear.from_checkpoint("awq", *_gptq()), r"^qzeros: an AWQ checkpoint"),
        (lambda: W4A8Linear.from_checkpoint("gptq", _gptq()[0].float(), _gptq()[1]), r"^qweight: expected int32"),
        (lambda: W4A8Linear.from_checkpoint("gptq", _gptq()[0], _gptq()[1][:, :32]), r"^scales: expected \[G, N=64\]"),
        (lambda: W4A8Linear.from_checkpoint("gptq", *_gptq(K=192)), r"^qweight: K = 192; the W4A8 layout needs K"),
        (
            lambda: W4A8Linear.from_checkpoint("gptq", _gptq()[0], torch.ones(3, 64, dtype=torch.float16)),
            r"^scales: expected \[G, N\] with G dividing K = 256",
        ),
        (lambda: W4A8Linear.from_checkpoint("gptq", *_gptq(N=32)), r"^qweight: N = 32"),
        (lambda: W4A8Linear.from_linear(torch.nn.Linear(200, 64)), r"^linear: in_features 200"),
        (lambda: W4A8Linear.from_linear(torch.nn.Linear(256, 64), group_size=64), r"^group_size: expected -1 or"),
        (lambda: W4A8Linear.from_linear(torch.nn.Conv1d(1, 1, 1)), r"^linear: expected a torch.nn.Linear"),  # type: ignore[arg-type]
        (
            lambda: W4A8Linear.from_linear(
                torch.nn.Linear(256, 64), act_absmax=torch.ones(256), smooth=torch.ones(256)
            ),
            r"^smooth: give either",
        ),
        (
            lambda: W4A8Linear.from_linear(torch.nn.Linear(256, 64), smooth=-torch.ones(256)),
            r"^smooth: expected positive",
        ),
        (
            lambda: W4A8Linear.from_checkpoint("gptq", *_gptq(), smooth=torch.zeros(256)),  # x / 0
            r"^smooth: expected positive finite",
        ),
        (
            lambda: W4A8Linear.from_checkpoint("gptq", *_gptq(), checkpoint_format="v3"),  # type: ignore[arg-type]
            r"^checkpoint_format: expected 'gptq' or 'gptq_v2'",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_argument(build: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match) as e:
        build()
    assert "\n" not in str(e.value)


def test_module_constructor_checks_the_layout_tensors() -> None:
    w_q = torch.zeros(2, 4, 128, 4, dtype=torch.int32)
    s = torch.ones(2, 2, 64)
    with pytest.raises(ValueError, match=r"^w_scale: expected float32 \[N/64, K/128, 64\]"):
        W4A8Linear(w_q, s.half())
    with pytest.raises(ValueError, match=r"^w_q: expected int32 \[2, 4, 128, 4\]"):
        W4A8Linear(w_q[:, :2], s)
    with pytest.raises(ValueError, match=r"^w_zeros: expected int32 \[2, 2, 64\]"):
        W4A8Linear(w_q, s, torch.zeros(2, 2, 64, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"^bias: expected \[N=128\]"):
        W4A8Linear(w_q, s, bias=torch.zeros(64))
    with pytest.raises(ValueError, match=r"^group_size: expected -1 or a multiple of 128 dividing K = 256"):
        W4A8Linear(w_q, s, group_size=512)


# ----------------------------------------------------------------------------------------------- the op, traced


def _meta_operands(m: int = 5, k: int = 256, n: int = 128, dev: str = "meta") -> dict[str, Any]:
    return {
        "x_q": torch.empty(m, k, dtype=torch.int8, device=dev),
        "x_scale": torch.empty(m, device=dev),
        "w_q": torch.empty(n // 64, k // 64, 128, 4, dtype=torch.int32, device=dev),
        "w_scale": torch.empty(n // 64, k // 128, 64, device=dev),
        "w_zeros": None,
        "bias": None,
        "out_dtype": torch.bfloat16,
    }


def test_fake_implementation_shapes_the_output() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = _meta_operands(m=7, k=384, n=192)
    y = torch.ops.dqgen.w4a8_matmul(*args.values())
    assert (tuple(y.shape), y.dtype, y.device.type) == ((7, 192), torch.bfloat16, "meta")
    with FakeTensorMode():
        args = _meta_operands(m=3, k=256, n=64, dev="cuda")
        args["out_dtype"] = torch.float16
        y = torch.ops.dqgen.w4a8_matmul(*args.values())
        assert (tuple(y.shape), y.dtype, y.device.type) == ((3, 64), torch.float16, "cuda")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"x_q": torch.empty(5, 128, dtype=torch.int8, device="meta")}, r"^x_q: expected int8 \[M, K=256\]"),
        ({"x_q": torch.empty(5, 256, dtype=torch.int16, device="meta")}, r"^x_q: expected int8"),
        ({"x_scale": torch.empty(4, device="meta")}, r"^x_scale: expected float32 \[M=5\]"),
        (
            {"w_q": torch.empty(2, 4, 128, 4, dtype=torch.int64, device="meta")},
            r"^w_q: expected int32 \[2, 4, 128, 4\]",
        ),
        ({"w_scale": torch.empty(2, 2, 32, device="meta")}, r"^w_scale: expected float32 \[N/64, K/128, 64\]"),
        (
            {"w_zeros": torch.empty(2, 2, 64, dtype=torch.uint8, device="meta")},
            r"^w_zeros: expected int32 \[2, 2, 64\]",
        ),
        ({"bias": torch.empty(128, dtype=torch.float16, device="meta")}, r"^bias: expected torch.bfloat16 \[N=128\]"),
        ({"out_dtype": torch.float32}, r"^out_dtype: expected torch.float16 or torch.bfloat16"),
        ({"x_q": np.zeros((5, 256), np.int8)}, r"^x_q: expected a CUDA torch.Tensor"),
        ({"x_scale": torch.empty(5)}, r"^x_scale: expected a CUDA tensor, got device cpu"),
        (
            {"bias": torch.empty(256, dtype=torch.bfloat16, device="meta")[::2]},  # every second value: strided
            r"^bias: expected a contiguous tensor",
        ),
    ],
)
def test_op_checks_are_one_line_naming_the_tensor(change: dict[str, Any], match: str) -> None:
    args = {**_meta_operands(), **change}
    with pytest.raises(ValueError, match=match) as e:
        check_inputs(*args.values())
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------------------------- save / load


def test_state_dict_and_pickle_round_trip_and_dtype_casts_leave_buffers() -> None:
    torch.manual_seed(3)
    lin = torch.nn.Linear(256, 128)
    layer = W4A8Linear.from_linear(lin, act_absmax=torch.rand(256) + 0.5)
    other = W4A8Linear.from_linear(torch.nn.Linear(256, 128), act_absmax=torch.rand(256) + 0.5)
    other.load_state_dict(layer.state_dict())
    x = torch.randn(3, 256).half()
    assert torch.equal(model_forward(other, x), model_forward(layer, x))
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(model_forward(loaded, x), model_forward(layer, x))
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    layer.half()
    assert all(torch.equal(before[k], v) and before[k].dtype == v.dtype for k, v in layer.state_dict().items())
    assert "group_size=128, zero_point=True, smoothed=True, bias=True" in repr(layer)


def test_the_bias_cast_is_kept_until_the_buffer_changes() -> None:
    layer = W4A8Linear.from_linear(torch.nn.Linear(256, 64))
    assert layer.bias is not None and layer.bias.dtype == torch.float32
    first = layer._bias_for(torch.float16)
    assert first is not None and first.dtype == torch.float16 and layer._bias_for(torch.float16) is first
    assert layer._bias_for(torch.float32) is layer.bias
    with torch.no_grad():
        layer.bias.add_(1.0)  # a new version: cast again
    again = layer._bias_for(torch.float16)
    assert again is not first and torch.equal(again, layer.bias.half())


# ----------------------------------------------------------------------------------------------- accuracy

#: ||y - ref|| / ||ref|| of model_forward against float64 of the same dequantized int4 weights and int8 tokens:
#: the fp32 rescale per 128-k tile and the one rounding to fp16 (2^-11 relative) of the output.
PRODUCT_TOLERANCE_FP16 = 1e-3


@pytest.mark.parametrize(
    ("zero_point", "group", "M", "K", "N"),
    [(True, 128, 1, 1024, 256), (True, -1, 16, 512, 192), (False, 128, 7, 768, 128), (False, 256, 33, 1024, 64)],
)
def test_random_layer_against_float64(zero_point: bool, group: int, M: int, K: int, N: int) -> None:
    torch.manual_seed(M + K + N)
    lin = torch.nn.Linear(K, N)
    layer = W4A8Linear.from_linear(lin, group_size=group, zero_point=zero_point)
    x = torch.randn(M, K).half()
    y = model_forward(layer, x).double().numpy()
    from dqgen.w8a8.reference import quantize

    xq, xs = quantize(x.float().numpy())
    operands = (xq.astype(np.float64) * xs.astype(np.float64)[:, None]) @ _dequantized(layer).T
    ref = operands + lin.bias.detach().half().double().numpy()
    float_layer = x.double().numpy() @ lin.weight.detach().double().numpy().T + lin.bias.detach().double().numpy()
    e_ops, e_float = _rel(y, ref), _rel(y, float_layer)
    print(
        f"zp={zero_point} g{group} M={M} K={K} N={N}: vs float64 of its operands {e_ops:.2e}, "
        f"of the layer {e_float:.3f}"
    )
    assert e_ops <= PRODUCT_TOLERANCE_FP16
    # int4 round-to-nearest of uniform weights with int8 tokens: measured 0.06-0.08
    assert e_float <= 0.1


#: The W8A8 tests' outlier channels (tests/test_w8a8_gemm_gpu.py): 50x activations, 50x smaller weights.
OUTLIERS = (3, 100, 257, 511)


def smoothquant_mlp(k: int = 512, hidden: int = 1024, seed: int = 0) -> Any:
    """fc1 -> GELU -> fc2 with SmoothQuant's outlier channels (float32 on the CPU)."""
    torch.manual_seed(seed)
    mlp = torch.nn.Sequential(torch.nn.Linear(k, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, k))
    with torch.no_grad():
        mlp[0].weight[:, list(OUTLIERS)] /= 50
    return mlp


def outlier_activations(m: int, k: int, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    x[:, list(OUTLIERS)] *= 50
    return x.half()


def convert(mlp: Any, calib: Any, smoothing: bool, zero_point: bool = True) -> tuple[Any, Any]:
    """The MLP's two layers as W4A8Linear (smoothed with alpha 0.5 from ``calib`` when asked)."""
    fc1, act, fc2 = mlp
    a1 = calib.abs().amax(0).float() if smoothing else None
    q1 = W4A8Linear.from_linear(fc1, act_absmax=a1, zero_point=zero_point)
    with torch.no_grad():
        h = act(fc1(calib.float()))
    a2 = h.abs().amax(0).float() if smoothing else None
    return q1, W4A8Linear.from_linear(fc2, act_absmax=a2, zero_point=zero_point)


def test_smoothquant_mlp_model_against_float64() -> None:
    """The W4A8 MLP's numpy model (exactly what the kernel computes) against float64 of the float MLP: within the
    int4 quantization error, smoothing keeping the outlier channels from dominating it."""
    mlp = smoothquant_mlp()
    calib, x = outlier_activations(64, 512, seed=1), outlier_activations(32, 512, seed=2)
    fc1, _, fc2 = mlp
    with torch.no_grad():
        w1, b1 = fc1.weight.double(), fc1.bias.double()
        w2, b2 = fc2.weight.double(), fc2.bias.double()
        h64 = x.double() @ w1.T + b1
        want = (0.5 * h64 * (1 + torch.erf(h64 / math.sqrt(2)))) @ w2.T + b2
    errors = {}
    for smoothing in (True, False):
        q1, q2 = convert(mlp, calib, smoothing)
        h = torch.nn.functional.gelu(model_forward(q1, x).float()).half()
        errors[smoothing] = _rel(model_forward(q2, h), want)
        print(f"W4A8 MLP (model) vs float64: smoothing {smoothing}: {errors[smoothing]:.4f}")
    # measured 0.107 smoothed, 0.221 unsmoothed (round-to-nearest int4 g128, int8 tokens; W8A8 gets 0.018)
    assert errors[True] <= 0.2
    assert errors[True] < 0.7 * errors[False]


# ----------------------------------------------------------------------------------------------- the bench's rows


def test_bench_weight_and_its_torch_model_are_the_numpy_model() -> None:
    """dqgen bench --w8a8's W4A8 rows: its int4 weight packed into the layout holds the int8 weights it checks
    against, and its torch version of the model equals dqgen.check.w4a8_model bit for bit (so its "exact" means
    what it says); one fp16 ulp is the bar, two are refused."""
    from dqgen.check.w4a8_model import int8_weights
    from dqgen.check.w4a8_model import w4a8_matmul as model_matmul
    from dqgen.emit.pipeline import compile_artifact
    from dqgen.layout.w4a8 import W4A8Packed, w4a8_converter_spec
    from dqgen.w8a8.gemm_bench import w4a8_close, w4a8_model_torch, w4a8_weight
    from dqgen.w8a8.reference import quantize

    K, N = 512, 192
    w16 = (torch.randn(N, K, generator=torch.Generator().manual_seed(4)) * 0.02).half()
    (w_q, w_scale, w_zeros), w8, s = w4a8_weight(w16)
    assert w_zeros is not None
    packed = W4A8Packed(w_q.numpy().view(np.uint32), w_scale.numpy(), w_zeros.numpy().view(np.uint32), K, N)
    plan = compile_artifact(w4a8_converter_spec(load_spec("awq_int4_s8"))).plan
    assert np.array_equal(int8_weights(plan, packed), w8.numpy())
    dequantized = w8.double() * s.double().repeat_interleave(128, 0)
    assert _rel(dequantized.T.numpy(), w16.double().numpy()) < 0.15  # int4 of a gaussian weight
    xq, xs = quantize(np.random.default_rng(5).standard_normal((9, K)).astype(np.float16))
    want = model_matmul(plan, packed, xq, xs)
    got, magnitude = w4a8_model_torch(torch.from_numpy(xq), torch.from_numpy(xs), w8, s)
    assert np.array_equal(got.numpy(), want)
    assert w4a8_close(got.half(), got, magnitude, K // 128)
    h = got.half()
    up = torch.nextafter(h[0, 0:1], torch.full((1,), np.inf, dtype=torch.float16))
    bumped = h.clone()
    bumped[0, 0] = h[0, 0].float() + 2 * (up[0].float() - h[0, 0].float())  # two fp16 ulps off
    assert not w4a8_close(bumped, got, torch.zeros_like(magnitude), K // 128)


def test_split_k_order_is_within_the_bench_bound_and_can_pass_one_ulp() -> None:
    """The kernel's split-K adds contiguous pieces of K in split order: against the model's K order that is more
    than one fp16 ulp where the output cancels to near 0 (the H100 bench found it at 4096x6144, M = 16, 4 splits),
    and within w4a8_close's bound everywhere."""
    from dqgen.w8a8.gemm_bench import w4a8_close, w4a8_model_torch, w4a8_weight
    from dqgen.w8a8.reference import quantize

    K, N, M, splits = 4096, 6144, 16, 4  # the bench's shape and plan
    g = torch.Generator().manual_seed(0)
    _, w8, s = w4a8_weight((torch.randn(N, K, generator=g) * 0.02).half())
    xq, xs = (torch.from_numpy(a) for a in quantize(torch.randn(M, K, generator=g).half().float().numpy()))
    want, magnitude = w4a8_model_torch(xq, xs, w8, s)
    piece, tiles = K // splits, K // 128 // splits
    total = torch.zeros_like(want)
    for sp in range(splits):  # each piece in K order from 0, then the pieces added in split order
        ks = slice(sp * piece, (sp + 1) * piece)
        total = total + w4a8_model_torch(xq[:, ks], xs, w8[ks], s[sp * tiles : (sp + 1) * tiles])[0]
    y = total.half()
    assert not w4a8_close(y, want, torch.zeros_like(magnitude), K // 128)  # one ulp alone refuses it
    assert w4a8_close(y, want, magnitude, K // 128)
