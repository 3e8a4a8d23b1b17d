"""GPU (sm_90): the Hopper W8A8 GEMM. Every configuration's int32 accumulators equal the int64 product on M, N and K
tails, with whole tiles a CTA and with stream-K plans (pieces of tiles added by the last arriver); the e4m3
accumulators within 2e-3 of float64; matmul dispatches to it on an sm_90 GPU and its eager calls (a launch bound per
x address) and CUDA-graph replays give the reference's bits. The epilogue's bit-exactness against numpy, the padding
paths and determinism are tests/test_w8a8_gemm_gpu.py's, which run this kernel through matmul on an sm_90 GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dqgen.kernels.w8a8_gemm90 import W8A8Gemm90Config, all_configs
from dqgen.w8a8 import gemm_reference as ref

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


def _hopper() -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the wgmma kernel needs an sm_90 GPU")


def _int8(rows: int, k: int, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(-128, 128, (rows, k), generator=g, dtype=torch.int8)
    if rows and k:
        t[0, :] = -128  # the extreme products
    return t.cuda()


def _fp8(rows: int, k: int, seed: int) -> Any:
    from dqgen.w8a8.matmul_op import quantize_activations_fp8

    g = torch.Generator().manual_seed(seed)
    return quantize_activations_fp8(torch.randn(rows, k, generator=g).half().cuda())[0]


def _e4m3(t: Any) -> np.ndarray:
    import ml_dtypes

    return t.view(torch.uint8).cpu().numpy().view(ml_dtypes.float8_e4m3fn)


def _raw_acc(x: Any, w: Any, cfg: Any, ctas: int | None = None, whole: int | None = None, q: int | None = None) -> Any:
    """The accumulators ("acc" output) of x [M, K] @ w [N, K].T by ``cfg``, with its default plan or ``ctas`` CTAs
    (``whole`` tiles run whole, the rest stream-K over the first ``q``; by default every tile where there are no more
    CTAs than tiles, and every CTA)."""
    from dqgen.w8a8.gemm90 import Plan90, loaded90
    from dqgen.w8a8.matmul_op import _counters

    m, k = x.shape
    n = w.shape[0]
    kern = loaded90(cfg, torch.cuda.current_device())
    plan = kern.plan(m, n, k)
    if ctas is not None:
        plan = Plan90.of(plan.tiles, ctas, plan.k_tiles, whole, q)
    acc_dtype = torch.int32 if x.dtype == torch.int8 else torch.float32
    y = torch.full((m, n), 7, dtype=acc_dtype, device="cuda")  # a value no output keeps
    ws = torch.empty(max(1, kern.workspace_elems(plan)), dtype=acc_dtype, device="cuda")
    ones_m, ones_n = torch.ones(m, device="cuda"), torch.ones(n, device="cuda")
    counters = _counters(y.device, plan[0])
    kern(
        m, n, k, x.data_ptr(), k, w.data_ptr(), k, ones_m.data_ptr(), ones_n.data_ptr(), 0, y.data_ptr(),
        ws.data_ptr(), counters.data_ptr(), plan, stream=torch.cuda.current_stream().cuda_stream,
    )  # fmt: skip
    torch.cuda.synchronize()
    assert int(counters[: plan[0]].abs().sum()) == 0  # the last arrivers reset their tiles' counters
    return y


S8 = list(all_configs("s8", "acc"))
E4M3 = list(all_configs("e4m3", "acc"))


def _shape(cfg: Any) -> tuple[int, int, int]:
    """M, N over two x tiles and three weight tiles with tails, K with a tail inside the last 128-byte tile."""
    if cfg.swap:
        return cfg.bn + 5, 2 * cfg.bm + 44, 20 * 128 + 48
    return cfg.bm + 37, 2 * cfg.bn + 24, 20 * 128 + 48


@pytest.mark.parametrize(
    "ctas", ["whole tiles", "persistent", "stream-K", "one unit a CTA", "whole then stream-K", "whole then split"]
)
@pytest.mark.parametrize("cfg", S8, ids=[c.name for c in S8])
def test_int32_accumulators_equal_the_int64_product(cfg: W8A8Gemm90Config, ctas: str) -> None:
    _hopper()
    m, n, k = _shape(cfg)
    x, w = _int8(m, k, seed=m), _int8(n, k, seed=n)
    tiles = (-(-m // (cfg.bn if cfg.swap else cfg.bm))) * (-(-n // (cfg.bm if cfg.swap else cfg.bn)))
    k_tiles = -(-k // 128)
    force = {"whole tiles": tiles, "persistent": 4, "stream-K": 2 * tiles + 3, "one unit a CTA": tiles * k_tiles}
    # 6 tiles on 4 CTAs: 3 whole (CTA 3 has none), then 3 tiles' 63 K tiles in ranges of 15-16, one crossing a tile;
    # 6 tiles on 5 CTAs: 5 whole, then the last tile in 3 pieces by CTAs 0-2 (as plan_for splits a short last wave)
    hybrid = {"whole then stream-K": (4, 3, None), "whole then split": (5, 5, 3)}
    acc = _raw_acc(x, w, cfg, *hybrid[ctas]) if ctas in hybrid else _raw_acc(x, w, cfg, force[ctas])
    got = acc.cpu().numpy()
    want = ref.int_product(x.cpu().numpy(), w.cpu().numpy())
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{cfg.name}: {len(bad)} accumulators differ, first at {bad[0].tolist()}"


@pytest.mark.parametrize("cfg", E4M3, ids=[c.name for c in E4M3])
def test_fp8_accumulators_within_2e3_of_float64(cfg: W8A8Gemm90Config) -> None:
    """At the K of a real layer (the wgmma's own e4m3 sums drift past 2e-3 there: the kernel promotes them)."""
    _hopper()
    m, n, _ = _shape(cfg)
    k = 8192 + 48
    xq, wq = _fp8(m, k, seed=m), _fp8(n, k, seed=n)
    tiles = (-(-m // (cfg.bn if cfg.swap else cfg.bm))) * (-(-n // (cfg.bm if cfg.swap else cfg.bn)))
    k_tiles = -(-k // 128)
    # the choice's grid, persistent (4 CTAs on 6 tiles), stream-K, one K tile a CTA (runs of one K tile), 3 whole
    # tiles then 3 stream-K ones on 4 CTAs, 5 whole then one in 3 pieces
    plans = ((None, None, None), (4, None, None), (2 * tiles + 3, None, None), (tiles * k_tiles, None, None))
    for ctas, whole, q in (*plans, (4, 3, None), (5, 5, 3)):
        acc = _raw_acc(xq, wq, cfg, ctas, whole, q).double().cpu().numpy()
        acc64 = ref.fp8_product(_e4m3(xq), _e4m3(wq))
        err = np.abs(acc - acc64) / np.abs(acc64).max(axis=1, keepdims=True)
        assert err.max() <= 2e-3, (cfg.name, float(err.max()))


def test_largest_k_accumulates_without_wrapping() -> None:
    _hopper()
    from dqgen.kernels.w8a8_gemm90 import MAX_K_S8

    k = MAX_K_S8 // 16 * 16
    x = torch.full((3, k), -128, dtype=torch.int8, device="cuda")
    w = torch.full((40, k), -128, dtype=torch.int8, device="cuda")
    assert (_raw_acc(x, w, S8[0]).cpu().numpy() == k * 16384).all()


@pytest.mark.parametrize("m", [1, 48, 300])
def test_matmul_dispatches_wgmma_and_eager_calls_follow_x(m: int) -> None:
    """Eager calls through the signature cache with x at new addresses (a launch bound per address), then replayed
    in a CUDA graph: the reference's bits each time."""
    _hopper()
    from dqgen.w8a8 import matmul
    from dqgen.w8a8.gemm90 import Gemm90Kernel
    from dqgen.w8a8.matmul_op import _prepared

    n, k = 1000, 4096
    assert isinstance(_prepared("s8", "f16", m, n, k, torch.cuda.current_device())[0], Gemm90Kernel)
    w = _int8(n, k, seed=5)
    wsc = torch.rand(n, device="cuda") * 1e-3
    xs_ = torch.rand(m, device="cuda") * 1e-3
    acc_w = w.cpu().numpy()
    for seed in range(4):
        x = _int8(m, k, seed=seed)
        y = matmul(x, xs_, w, wsc)
        want = ref.epilogue(ref.int_product(x.cpu().numpy(), acc_w), xs_.cpu().numpy(), wsc.cpu().numpy(), None, "f16")
        assert (y.cpu().numpy().view(np.int16) == want.view(np.int16)).all(), seed
    x_static = _int8(m, k, seed=11)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        matmul(x_static, xs_, w, wsc)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = matmul(x_static, xs_, w, wsc)
    x_static.copy_(_int8(m, k, seed=12))
    graph.replay()
    torch.cuda.synchronize()
    want = ref.epilogue(
        ref.int_product(x_static.cpu().numpy(), acc_w), xs_.cpu().numpy(), wsc.cpu().numpy(), None, "f16"
    )
    assert (y_static.cpu().numpy().view(np.int16) == want.view(np.int16)).all()


def test_x_at_an_address_the_first_launch_was_bound_with() -> None:
    """x at the address of the output buffer the signature's first launch was bound with (torch's caching allocator
    hands freed outputs back as activations): the launch bound for that x is told apart from its own per-call
    pointers (a model's decode once raised here)."""
    _hopper()
    from dqgen.w8a8 import matmul, matmul_op

    m, k = 16, 4096
    n = k // 2  # y1 [m, n] fp16 viewed as int8 is an x [m, k] of the first call's signature (shape and strides)
    w = _int8(n, k, seed=3)
    wsc = torch.rand(n, device="cuda") * 1e-3
    xs_ = torch.rand(m, device="cuda") * 1e-3
    outputs: list[int] = []
    real_empty = torch.empty

    def spy(*args: Any, **kwargs: Any) -> Any:
        t = real_empty(*args, **kwargs)
        if t.dtype == torch.float16 and tuple(t.shape) == (m, n):
            outputs.append(t.data_ptr())  # the output the signature's first launch is bound with
        return t

    mp = pytest.MonkeyPatch()
    mp.setattr(matmul_op.torch, "empty", spy)
    try:
        y1 = matmul(_int8(m, k, seed=4), xs_, w, wsc)  # y1 reuses the block the plan's own output took
    finally:
        mp.undo()
    if not outputs or y1.data_ptr() != outputs[0]:
        pytest.skip("torch's allocator did not hand the plan's output block back as y1")
    x2 = y1.view(torch.int8)
    x2.copy_(_int8(m, k, seed=5))
    y2 = matmul(x2, xs_, w, wsc)
    acc = ref.int_product(x2.cpu().numpy(), w.cpu().numpy())
    want = ref.epilogue(acc, xs_.cpu().numpy(), wsc.cpu().numpy(), None, "f16")
    assert (y2.cpu().numpy().view(np.int16) == want.view(np.int16)).all()


def test_more_x_addresses_than_bound_launches_re_address_the_oldest() -> None:
    """2 x X_BOUND_MAX activations alive at once (distinct addresses), each called twice in turn: past X_BOUND_MAX
    the oldest launch's x map is re-addressed in place (no new bind); every result the reference's bits."""
    _hopper()
    from dqgen.run.bound_x import X_BOUND_MAX
    from dqgen.w8a8 import matmul, matmul_op

    m, n, k = 16, 1000, 4096
    w = _int8(n, k, seed=5)
    wsc = torch.rand(n, device="cuda") * 1e-3
    xs_ = torch.rand(m, device="cuda") * 1e-3
    xs = [_int8(m, k, seed=100 + i) for i in range(2 * X_BOUND_MAX)]
    acc_w = w.cpu().numpy()
    for x in xs + xs:
        y = matmul(x, xs_, w, wsc)
        want = ref.epilogue(ref.int_product(x.cpu().numpy(), acc_w), xs_.cpu().numpy(), wsc.cpu().numpy(), None, "f16")
        assert (y.cpu().numpy().view(np.int16) == want.view(np.int16)).all()
    hits = [c for c in matmul_op._CALLS.values() if c.bind_x is not None and c.mn == (m, n)]
    assert hits and all(len(c.bind_x.by_x) == X_BOUND_MAX for c in hits)
