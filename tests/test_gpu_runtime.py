"""GPU: the signature-cached call stays bit-exact (across repeated calls, new tensors, in-place writes and group
sizes from the scales), the dqgen custom op runs under torch.compile, the call is captured by CUDA graphs, and
`dqgen build`'s check runs on driver-API memory."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.check.reference import dequantize_reference, random_inputs
from dqgen.core.spec import load_spec, with_group_size
from dqgen.run.gpucheck import check_shape, to_numpy, to_torch
from dqgen.run.runtime import Kernel, ShapeError

pytestmark = pytest.mark.gpu

AWQ = load_spec("awq_int4_fp16")
GPTQ_ACT = load_spec("gptq_int4_asym_act_order_fp16")


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16)


def _inputs(spec, K: int, N: int, group: int, seed: int):
    q, s, z, gi = random_inputs(with_group_size(spec, group), K, N, seed)
    want = dequantize_reference(spec, q, s, z, gi)
    return (to_torch(q), to_torch(s), to_torch(z), to_torch(gi)), want


@pytest.mark.parametrize("group", [32, 64, 128, 4096])
def test_auto_group_size_bit_exact(group: int) -> None:
    import torch

    k = Kernel(AWQ)
    (q, s, z, _), want = _inputs(AWQ, 4096, 1440, group, seed=group)
    w = torch.empty((4096, 1440), dtype=torch.float16, device="cuda")
    for _ in range(3):  # the cached launch, again and again
        w.zero_()
        assert k(q, s, z, out=w) is w
        assert np.array_equal(_bits(to_numpy(w)), _bits(want))


def test_cached_call_follows_new_tensors_and_in_place_writes() -> None:
    import torch

    k = Kernel(AWQ)
    (q, s, z, _), want = _inputs(AWQ, 512, 1024, 128, seed=1)
    w = torch.empty((512, 1024), dtype=torch.float16, device="cuda")
    k(q, s, z, out=w)
    q2_np, s2_np, z2_np, _ = random_inputs(with_group_size(AWQ, 128), 512, 1024, 2)
    q.copy_(to_torch(q2_np))  # same pointers, new contents: the cached launch reads them
    s.copy_(to_torch(s2_np))
    z.copy_(to_torch(z2_np))
    k(q, s, z, out=w)
    assert np.array_equal(_bits(to_numpy(w)), _bits(dequantize_reference(AWQ, q2_np, s2_np, z2_np)))
    out = k(q, s, z)  # a new output each call
    assert out.data_ptr() != w.data_ptr() and torch.equal(out, w)
    assert not np.array_equal(_bits(to_numpy(w)), _bits(want))


def test_act_order_g_idx_rechecked_after_in_place_write() -> None:
    import torch

    k = Kernel(GPTQ_ACT)
    (q, s, z, gi), want = _inputs(GPTQ_ACT, 1024, 256, 128, seed=3)
    w = torch.empty((1024, 256), dtype=torch.float16, device="cuda")
    k(q, s, z, g_idx=gi, out=w)
    assert np.array_equal(_bits(to_numpy(w)), _bits(want))
    gi[5] = 8  # G = 8: out of range; torch bumps the tensor's version
    with pytest.raises(ShapeError, match=r"^g_idx: entry 5 is 8, outside \[0, 8\)"):
        k(q, s, z, g_idx=gi, out=w)


def test_custom_op_under_torch_compile() -> None:
    import torch

    k = Kernel(AWQ)
    (q, s, z, _), want = _inputs(AWQ, 256, 2048, 64, seed=4)

    def f(q, s, z):
        return k(q, s, z).float() * 2

    def g(q, s, z, w):
        k(q, s, z, out=w)
        return w + 1

    cf = torch.compile(f, fullgraph=True)
    got = cf(q, s, z)
    assert torch.equal(got, torch.from_numpy(want.astype(np.float32)).cuda() * 2)
    w = torch.empty((256, 2048), dtype=torch.float16, device="cuda")
    got2 = torch.compile(g, fullgraph=True)(q, s, z, w)
    assert np.array_equal(_bits(to_numpy(w)), _bits(want))
    assert torch.equal(got2, w + 1)


def test_call_inside_cuda_graph_capture() -> None:
    import torch

    k = Kernel(AWQ)
    (q, s, z, _), want = _inputs(AWQ, 1024, 1024, 128, seed=5)
    w = torch.zeros((1024, 1024), dtype=torch.float16, device="cuda")
    k(q, s, z, out=torch.empty_like(w))  # warm-up (module load) outside the capture, as torch asks
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        k(q, s, z, out=w)  # first seen while capturing: checked on the host, launched into the graph
    torch.cuda.synchronize()
    assert not w.any()  # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    assert np.array_equal(_bits(to_numpy(w)), _bits(want))


def test_cached_call_from_a_thread_without_a_current_context() -> None:
    """The fast path launches without a context check: from a new thread (no current context) the first launch
    fails, the primary context is made current, the kernel launched again; the output is right either way."""
    import threading

    import torch
    from cuda.bindings import driver

    k = Kernel(AWQ)
    (q, s, z, _), want = _inputs(AWQ, 512, 1024, 128, seed=8)
    w = torch.zeros((512, 1024), dtype=torch.float16, device="cuda")
    k(q, s, z, out=torch.empty_like(w))  # the signature of w differs: checked here, cached below
    k(q, s, z, out=w)
    torch.cuda.synchronize()
    w.zero_()
    torch.cuda.synchronize()
    seen: list[object] = []

    def call() -> None:
        try:
            err, ctx = driver.cuCtxGetCurrent()
            seen.append(int(ctx))  # 0: this thread has no current context
            k(q, s, z, out=w)
            (err,) = driver.cuCtxSynchronize()
            seen.append(err)
        except BaseException as e:  # reported by the main thread
            seen.append(e)

    t = threading.Thread(target=call)
    t.start()
    t.join()
    assert seen[0] == 0 and seen[1] == driver.CUresult.CUDA_SUCCESS, seen
    torch.cuda.synchronize()
    assert np.array_equal(_bits(to_numpy(w)), _bits(want))


def test_act_order_unchecked_g_idx_refused_while_capturing() -> None:
    import torch

    k = Kernel(GPTQ_ACT)
    (q, s, z, gi), _ = _inputs(GPTQ_ACT, 256, 256, 128, seed=6)
    w = torch.empty((256, 256), dtype=torch.float16, device="cuda")
    k(q, s, z, g_idx=gi.clone(), out=w)  # warm-up; the g_idx below is a tensor not seen before
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ShapeError, match=r"^g_idx: not checked yet"), torch.cuda.graph(graph):
        k(q, s, z, g_idx=gi, out=w)


def test_build_check_without_torch_tensors() -> None:
    for name in ("awq_int4_fp16", "gptq_int4_asym_act_order_fp16", "nvfp4_fp16"):
        r = check_shape(Kernel(load_spec(name)), 256, 1440 if name.startswith("awq") else 256, seed=7)
        assert r.ok, (name, r.detail)
