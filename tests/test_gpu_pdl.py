"""GPU: programmatic dependent launches (blocks/pdl.cuh.j2, dqgen.run.device.programmatic_launches). A chain of
matmuls, each reading the output the kernel before it wrote (a dqgen kernel or a torch one; each weight twice in a
row), gives the same bits as the same calls made with the host waiting after each (so that no kernel can start
before the one it reads has finished), eagerly and replayed as a CUDA graph, at a GEMV and a Hopper GEMM token
count; on sm_90 the launches carry the attribute. Skipped without a GPU."""

from __future__ import annotations

import os
from typing import Any

import pytest

import dqgen
from dqgen.run import device as dev
from dqgen.run.inputs import make_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.quick]
torch = pytest.importorskip("torch")

K = 4096  # square weights, so each output is the next input; 4096 x 4096 at M = 64 runs the Hopper GEMM on sm_90


def _chain(k: Any, ws: list[Any], x: Any, serialized: bool) -> list[Any]:
    """y_i = y_{i-1} @ W_i, scaled back to ~1 by torch after every second matmul (so dqgen kernels follow both dqgen
    and torch kernels); ``serialized``: the host waits for the GPU after every call."""
    outs, y = [], x
    for i, w in enumerate(ws):
        y = k.matmul(y, w)
        outs.append(y)
        if serialized:
            torch.cuda.synchronize()
        if i % 2 == 1:
            y = y / y.abs().amax().clamp_min(1)
            if serialized:
                torch.cuda.synchronize()
    return outs


@pytest.mark.parametrize("M", [1, 64])
def test_a_chain_of_dependent_matmuls_gives_the_serialized_bits(M: int) -> None:
    k = dqgen.compile("awq_int4_fp16")
    inputs = [make_inputs(k.spec, K, K, seed) for seed in range(3)]
    packed = [k.pack_matmul(q, s, z) for q, s, z in inputs]
    # each weight twice in a row: a launch reuses the split-K workspace and counters the launch before it left
    ws = [packed[i // 2] for i in range(6)]
    x = torch.randn((M, K), dtype=torch.float16, device="cuda")

    serialized = _chain(k, ws, x, serialized=True)
    # the chain means something: its first two products against float64 on the dequantized weight
    w0 = k(*inputs[0]).double()
    exact = x.double() @ w0 @ w0
    assert float((serialized[1].double() - exact).norm() / exact.norm()) < 1e-2

    eager = _chain(k, ws, x, serialized=False)
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(eager, serialized, strict=True)):
        assert torch.equal(a, b), f"eager chain, matmul {i}"

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # bound launches and workspaces made before capture
        _chain(k, ws, x, serialized=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _chain(k, ws, x, serialized=False)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        for i, (a, b) in enumerate(zip(captured, serialized, strict=True)):
            assert torch.equal(a, b), f"graph replay, matmul {i}"

    expected = dev.arch_sm(dev.device_arch(0)) >= 90 and os.environ.get(dev.PDL_ENV, "1") != "0"
    assert dev.programmatic_launches(0) == expected
    if M == 1:  # the GEMV's launches, bound per weight
        launches = [b for w in packed for bound in w._bound.values() for b in bound]
        assert launches and all(b.programmatic == expected for b in launches)
