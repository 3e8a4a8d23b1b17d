"""GPU: the per-call fast path of every eager entry point (dqgen.run.fastcall; the W8A8 ops' and layers' signature
tables) gives the same bits as the checked path, call after call, with a new x and a new output every call, M
changing (the GEMV's decode case and the GEMM's launches), bias on and off, x rows not 16-byte aligned; a bad tensor
on a cached signature still raises its one-line error; a checkpoint tensor written in place is repacked; a replaced
layer buffer is bound anew; another thread has its own entries; a CUDA graph captured after warm-up replays right
after later eager calls patched the same launches; torch.compile still traces the custom ops."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from dqgen.check.matmul_reference import matmul_inputs, random_x
from dqgen.core.spec import load_spec
from dqgen.run.dispatch import dispatch as _dispatch  # the function itself: the tests count calls of the name
from dqgen.run.gpucheck import to_torch
from dqgen.run.runtime import Kernel, ShapeError

pytestmark = pytest.mark.gpu

SPEC = load_spec("awq_int4_fp16")
K, N = 2048, 1448  # N: no whole 16-row tile


def _same(a: Any, b: Any) -> bool:
    """The same bits (NaN-safe: compared as integers)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    view = {1: torch.int8, 2: torch.int16, 4: torch.int32}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(view), b.contiguous().view(view)))


class _Misses:
    """Counts the calls that took a checked path (wrapping ``module.name``): a hit never gets there."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.count = 0
        real = getattr(module, name)

        def counting(*a: Any, **kw: Any) -> Any:
            self.count += 1
            return real(*a, **kw)

        monkeypatch.setattr(module, name, counting)


def _weights(seed: int = 11) -> tuple[Any, Any, Any]:
    (q, s, z, _, _), _ = matmul_inputs(SPEC, K, N, seed=seed, group_size=128)
    return to_torch(q), to_torch(s), to_torch(z)


def _x(M: int, seed: int, *, aligned: bool = True) -> Any:
    """A new x [M, K] every call (its own memory); ``aligned=False``: rows starting 2 bytes past a 16-byte
    boundary (a view one element into a larger buffer)."""
    x = to_torch(random_x(SPEC, M, K, seed=seed))
    if aligned:
        return x
    import torch

    buf = torch.empty(M * K + 8, dtype=x.dtype, device="cuda")
    view = buf[1 : 1 + M * K].view(M, K)
    view.copy_(x)
    assert view.data_ptr() % 16 == 2
    return view


def _checked_matmul(k: Kernel, x: Any, w: Any, *args: Any, bias: Any = None) -> Any:
    return _dispatch(k.target, x, w, *args, bias=bias)  # the checked path, no signature table


# --------------------------------------------------------------------------- Kernel.matmul


@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_packed_same_bits_with_new_x_and_out_every_call(with_bias: bool, monkeypatch) -> None:
    import torch

    from dqgen.run import dispatch

    k = Kernel(SPEC)
    q, s, z = _weights()
    w = k.pack_matmul(q, s, z)
    bias = torch.randn(N, device="cuda").half() if with_bias else None
    misses = _Misses(monkeypatch, dispatch, "dispatch")
    seed = 0
    # M changes; M <= 3: below every GPU's gemm_min_m (the H100's rule sends 4 tokens on to the Hopper GEMM), the
    # GEMV's decode case; 40 and 64: the GEMM (on an H100 / H200 the Hopper kernel, its x in a tensor map, bound per x
    # address; x not 16-byte aligned: the sm_80 kernel, x a pointer slot)
    for M in (1, 2, 1, 3, 40, 64, 1):
        before = misses.count
        for aligned in (True, False, True):
            for _ in range(3):
                seed += 1
                x = _x(M, seed, aligned=aligned)
                y = k.matmul(x, w, bias=bias)
                assert _same(y, _checked_matmul(k, x, w, bias=bias)), (M, aligned)
                out = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
                assert k.matmul(x, w, bias=bias, out=out) is out and _same(out, y)
        # one checked call per signature (x aligned or not, out given or not)
        assert misses.count - before <= 4, (M, misses.count - before)
    x3 = _x(6, 99).reshape(2, 3, K)  # leading dimensions: y keeps them
    for _ in range(2):
        y3 = k.matmul(x3, w, bias=bias)
        assert tuple(y3.shape) == (2, 3, N) and _same(y3, _checked_matmul(k, x3, w, bias=bias))


def test_bad_tensors_on_a_cached_signature_still_raise() -> None:
    import torch

    k = Kernel(SPEC)
    w = k.pack_matmul(*_weights())
    x = _x(1, 1)
    bias = torch.randn(N, device="cuda").half()
    k.matmul(x, w, bias=bias)
    k.matmul(_x(1, 2), w, bias=bias)  # cached
    with pytest.raises(ShapeError, match=r"^x: expected dtype fp16"):
        k.matmul(x.float(), w, bias=bias)
    with pytest.raises(ShapeError, match=r"^x: expected shape \[\.\.\., 2048\]"):
        k.matmul(x[:, :1024], w, bias=bias)
    with pytest.raises(ShapeError, match=r"^bias: "):
        k.matmul(x, w, bias=bias[:-8])
    with pytest.raises(ShapeError, match=r"^bias: "):
        k.matmul(x, w, bias=bias.float())
    with pytest.raises(ShapeError, match=r"^out: "):
        k.matmul(x, w, bias=bias, out=torch.empty((1, N), dtype=torch.float32, device="cuda"))
    with pytest.raises((ValueError, TypeError), match=r"^x: "):
        k.matmul(x.cpu(), w, bias=bias)
    assert _same(k.matmul(x, w, bias=bias), _checked_matmul(k, x, w, bias=bias))  # the signature still good


def test_checkpoint_form_written_in_place_is_repacked(monkeypatch) -> None:
    from dqgen.run import matmul as mm

    k = Kernel(SPEC)
    q, s, z = _weights(seed=21)
    q2, s2, z2 = _weights(seed=22)
    w2 = k.pack_matmul(q2, s2, z2)  # what q, s, z will hold
    packs = _Misses(monkeypatch, mm, "pack_gemv")
    ys = []
    for i in range(4):
        x = _x(1, 100 + i)
        ys.append(k.matmul(x, q, s, z))
        assert _same(ys[-1], _checked_matmul(k, x, q, s, z))
    assert packs.count == 1
    x = _x(1, 200)
    old = k.matmul(x, q, s, z)
    q.copy_(q2)  # in place: a new version of qweight
    y = k.matmul(x, q, s, z)
    assert packs.count == 2 and not _same(y, old)
    s.copy_(s2)
    z.copy_(z2)
    y = k.matmul(x, q, s, z)
    assert packs.count == 3
    assert _same(y, _checked_matmul(k, x, w2))  # the new weight's product
    assert _same(k.matmul(_x(1, 201), q, s, z), _checked_matmul(k, _x(1, 201), w2)) and packs.count == 3


def test_another_thread_runs_its_own_entries() -> None:
    k = Kernel(SPEC)
    w = k.pack_matmul(*_weights())
    k.matmul(_x(1, 1), w)
    got: list[bool] = []

    def run() -> None:
        for i in range(3):
            x = _x(1, 300 + i)
            got.append(_same(k.matmul(x, w), _checked_matmul(k, x, w)))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got == [True, True, True]


@pytest.mark.parametrize("M", [1, 64])
def test_cuda_graph_captured_after_warm_up_replays_after_later_patches(M: int) -> None:
    """The graph keeps the arguments of its capture; eager calls after it patch the same launch's slots with
    their own pointers (M = 64: the GEMM's launch, on an H100 / H200 one bound per x address), which the replay
    must not see."""
    import torch

    k = Kernel(SPEC)
    q, s, z = _weights()
    w = k.pack_matmul(q, s, z)
    static_x = _x(M, 1).clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on the capture's kind of stream: checked, remembered
        for _ in range(2):
            k.matmul(static_x, w)
            k.matmul(static_x, q, s, z)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ya = k.matmul(static_x, w)
        yb = k.matmul(static_x, q, s, z)
    for i in range(3):  # eager calls of the same signatures, other x and y pointers
        x = _x(M, 400 + i)
        assert _same(k.matmul(x, w), _checked_matmul(k, x, w))
        k.matmul(x, q, s, z)
    static_x.copy_(_x(M, 500))
    g.replay()
    torch.cuda.synchronize()
    want = _checked_matmul(k, static_x, w)
    assert _same(ya, want) and _same(yb, want)


# --------------------------------------------------------------------------- QuantLinear


def _quant_linear(bias: bool = True) -> Any:
    import torch

    from dqgen.nn.linear import QuantLinear

    torch.manual_seed(0)
    lin = torch.nn.Linear(K, N, bias=bias).to("cuda", torch.float16)
    return QuantLinear.from_linear(lin, SPEC, group_size=128)


@pytest.mark.parametrize("bias", [False, True])
def test_quant_linear_same_bits_and_repacks_after_load_state_dict(bias: bool, monkeypatch) -> None:
    import torch

    from dqgen.run import dispatch

    layer = _quant_linear(bias)
    misses = _Misses(monkeypatch, dispatch, "dispatch")
    for shape in ((1, K), (1, 1, K), (4, K), (1, K), (2, 3, K), (40, K)):
        for i in range(3):
            x = _x(int(np.prod(shape[:-1])), 600 + i).reshape(shape)
            y = layer(x)
            want = _checked_matmul(layer._kernel, x, layer._packed, bias=layer.bias)
            assert tuple(y.shape) == (*shape[:-1], N) and _same(y, want), shape
    assert misses.count == 4 + 1  # one per signature: the 4 decode ones (the GEMV's), M = 40's (the GEMM's launch)
    other = _quant_linear(bias)
    other.qweight.copy_(other.qweight.flip(0))
    other._repack()
    layer.load_state_dict(other.state_dict())  # in place, then repacked: a new MatmulWeight, a new key
    x = _x(1, 700)
    y = layer(x)
    assert _same(y, _checked_matmul(other._kernel, x, other._packed, bias=other.bias))
    if bias:
        layer.bias = torch.zeros_like(layer.bias)  # a replaced buffer: bound anew
        assert _same(layer(x), _checked_matmul(layer._kernel, x, layer._packed, bias=layer.bias))
    with pytest.raises(ValueError, match=r"^x: expected last dimension 2048"):
        layer(x[:, :1024])
    with pytest.raises(ShapeError, match=r"^x: expected dtype fp16"):
        layer(x.float())


def test_quant_linear_under_torch_compile_and_a_cuda_graph() -> None:
    import torch

    layer = _quant_linear(True)
    x = _x(1, 800)
    eager = layer(x)
    eager = layer(x)  # the fast path
    compiled = torch.compile(layer, fullgraph=True)
    assert _same(compiled(x), eager)
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer(static_x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = layer(static_x)
    layer(_x(1, 801))  # an eager call patches the same launch
    static_x.copy_(_x(1, 802))
    g.replay()
    torch.cuda.synchronize()
    assert _same(y, _checked_matmul(layer._kernel, static_x, layer._packed, bias=layer.bias))


# --------------------------------------------------------------------------- the dequantize call


def test_dequantize_into_new_outs_same_bits() -> None:
    import torch

    k = Kernel(SPEC)
    q, s, z = _weights()
    first = k(q, s, z)
    for _ in range(3):
        out = torch.full((K, N), float("nan"), dtype=torch.float16, device="cuda")
        assert k(q, s, z, out=out) is out and _same(out, first)
        assert _same(k(q, s, z, out=out), first)  # the cached signature


# --------------------------------------------------------------------------- W8A8


def _w8a8_checked(layer: Any, x: Any) -> Any:
    """W8A8Linear's forward on the per-call checked launches of both ops (no signature table)."""
    from dqgen.w8a8 import matmul_op, op

    x2 = x.reshape(-1, layer.in_features)
    q, s = op._launch(x2, layer.smooth, None)
    bias = None if layer.bias is None else layer.bias.to(x.dtype)
    y = matmul_op._launch(q, s, layer.weight, layer.weight_scale, bias, x.dtype)
    return y.reshape(*x.shape[:-1], layer.out_features)


def _w8a8_layer(bias: bool, smooth: bool, k: int = 1024, n: int = 512) -> Any:
    import torch

    from dqgen.nn.w8a8_linear import W8A8Linear

    torch.manual_seed(1)
    lin = torch.nn.Linear(k, n, bias=bias).to("cuda", torch.float16)
    absmax = torch.rand(k, device="cuda") * 4 + 0.1 if smooth else None
    return W8A8Linear.from_linear(lin, act_absmax=absmax)


@pytest.mark.parametrize(("bias", "smooth"), [(False, False), (True, True)])
def test_w8a8_linear_same_bits_with_new_x_every_call(bias: bool, smooth: bool) -> None:
    import torch

    layer = _w8a8_layer(bias, smooth)
    for shape in ((1, 1024), (7, 1024), (1, 1, 1024), (40, 1024), (1, 1024), (300, 1024)):
        for _ in range(3):
            x = torch.randn(shape, device="cuda").half()
            y = layer(x)
            assert tuple(y.shape) == (*shape[:-1], 512) and _same(y, _w8a8_checked(layer, x)), shape
    assert len(layer._fast) == 5  # the contiguous signatures were remembered
    x = torch.randn(3, 2048, device="cuda").half()[:, ::2]  # strided x: the checked path, every time
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^x: expected contiguous rows \(inner stride 1\)"):
            layer(x)
    with pytest.raises(ValueError, match=r"^x: expected last dimension 1024"):
        layer(torch.randn(1, 512, device="cuda").half())


def test_w8a8_linear_replaced_or_rewritten_buffers() -> None:
    import torch

    from dqgen.w8a8 import quantize_weight

    layer = _w8a8_layer(True, False)
    x = torch.randn(2, 1024, device="cuda").half()
    layer(x)
    layer(x)
    codes, scale = quantize_weight(torch.randn(512, 1024, device="cuda"))
    layer.weight.copy_(codes)  # rewritten in place: the bound pointer reads the new codes
    layer.weight_scale.copy_(scale)
    assert _same(layer(x), _w8a8_checked(layer, x))
    layer.weight = quantize_weight(torch.randn(512, 1024, device="cuda"))[0]  # replaced: checked and bound anew
    assert _same(layer(x), _w8a8_checked(layer, x))
    layer.bias = torch.randn(512, device="cuda")  # float32 bias on fp16 x: a cast copy, never cached
    for _ in range(2):
        assert _same(layer(x), _w8a8_checked(layer, x))


def test_w8a8_linear_cuda_graph_and_compile() -> None:
    import torch

    layer = _w8a8_layer(True, True)
    static_x = torch.randn(4, 1024, device="cuda").half()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            layer(static_x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = layer(static_x)
    for _ in range(2):
        layer(torch.randn(4, 1024, device="cuda").half())  # eager calls patch the same launches
    static_x.copy_(torch.randn(4, 1024, device="cuda").half())
    g.replay()
    torch.cuda.synchronize()
    assert _same(y, _w8a8_checked(layer, static_x))
    compiled = torch.compile(layer, fullgraph=True)
    assert _same(compiled(static_x), layer(static_x))


def _check_op_calls(fast: Callable[..., Any], checked: Callable[..., Any], make: Callable[[], tuple]) -> None:
    """Four calls, each on new inputs from ``make()``: the signature table's result and the checked launch's
    hold the same bits."""
    for _ in range(4):
        args = make()
        got, want = fast(*args), checked(*args)
        if isinstance(got, tuple):
            assert all(_same(a, b) for a, b in zip(got, want, strict=True))
        else:
            assert _same(got, want)


@pytest.mark.parametrize("rows", [1, 16, 300])
def test_w8a8_ops_same_bits_with_new_inputs_every_call(rows: int) -> None:
    import torch

    from dqgen.w8a8 import matmul_op, op
    from dqgen.w8a8.matmul_op import matmul
    from dqgen.w8a8.op import quantize_activations

    smooth = torch.rand(1024, device="cuda") + 0.5
    for sm in (None, smooth):
        _check_op_calls(
            lambda x, sm=sm: quantize_activations(x, sm),
            lambda x, sm=sm: op._launch(x, sm, None),
            lambda: (torch.randn(rows, 1024, device="cuda").half(),),
        )
    w = torch.randint(-128, 128, (512, 1024), dtype=torch.int8, device="cuda")
    w_scale = torch.rand(512, device="cuda") * 0.01
    bias = torch.randn(512, device="cuda").half()

    def new_x() -> tuple:
        xq = torch.randint(-128, 128, (rows, 1024), dtype=torch.int8, device="cuda")
        return xq, torch.rand(rows, device="cuda") * 0.01

    for b in (None, bias):
        _check_op_calls(
            lambda xq, xs, b=b: matmul(xq, xs, w, w_scale, b),
            lambda xq, xs, b=b: matmul_op._launch(xq, xs, w, w_scale, b, torch.float16),
            new_x,
        )
    # a split-K plan (its workspace patched per call)
    wk = torch.randint(-128, 128, (512, 8192), dtype=torch.int8, device="cuda")
    wks = torch.rand(512, device="cuda") * 0.01
    xs = torch.rand(16, device="cuda") * 0.01
    _check_op_calls(
        lambda xq: matmul(xq, xs, wk, wks),
        lambda xq: matmul_op._launch(xq, xs, wk, wks, None, torch.float16),
        lambda: (torch.randint(-128, 128, (16, 8192), dtype=torch.int8, device="cuda"),),
    )
    x = torch.randn(rows, 1024, device="cuda").half()
    quantize_activations(x)
    with pytest.raises(ValueError, match=r"^x: expected float16 or bfloat16"):
        quantize_activations(x.float())
    xq, xsc = quantize_activations(x)
    matmul(xq, xsc, w, w_scale)
    with pytest.raises(ValueError, match=r"^x_scale: expected float32"):
        matmul(xq, xsc.half(), w, w_scale)
