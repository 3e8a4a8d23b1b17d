"""GPU: the fused GEMV (Kernel.matmul) against a float64 reference of x @ W (W from the independent
dequantization), every shipped spec at M = 1, 3, 16 on shapes with tails; outputs poisoned with NaN before each
run, every element checked, the same bits twice; act-order, groups that are no whole blocks, bias, M > 16, the
checkpoint form, errors before launch, torch.compile(fullgraph) and CUDA-graph capture of the custom ops."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.check.matmul_reference import matmul_inputs, matmul_reference, random_x
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec, with_group_size
from dqgen.kernels.gemv import GROUPED, Tuning, grouped_spec
from dqgen.layout.layout import Layout
from dqgen.layout.matmul import MatmulLayout
from dqgen.run.gpucheck import to_torch
from dqgen.run.runtime import Kernel, ShapeError

from .matmul_checks import check, twice

pytestmark = pytest.mark.gpu

SPECS = [load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))]


def tail_shape(spec: Spec) -> tuple[int, int, int | None]:
    """(K, N, group size override): K = 4096 + the smallest tail the format allows, N = 1448 (not a whole
    16-row tile; 1440 where N must be whole 16-code words)."""
    lay = Layout.of(spec)
    g = spec.scales.group_size
    n_unit = lay.per_block if lay.axis == "N" or lay.zeros == "packed" else 1
    N = 1448 if 1448 % n_unit == 0 else 1440
    if g == "auto":  # groups of 32: a multiple of every block (3-bit: 32 rows), not of the 64-row chunk
        return 4096 + 32, N, 32
    return 4096 + (g if g > 0 else lay.per_block if lay.axis == "K" else 1), N, None


def _run(k: Kernel, x, w, y_shape, dtype, bias=None):
    return twice(lambda out: k.matmul(x, w, bias=bias, out=out), y_shape, dtype)


@pytest.mark.quick
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_every_spec_m_1_3_16_with_tails(spec: Spec) -> None:
    k = Kernel(spec)
    K, N, g = tail_shape(spec)
    (q, s, z, gi, gsc), W = matmul_inputs(spec, K, N, seed=K + N, group_size=g)
    # the GEMV's layout alone: on a GPU whose dispatch rule gives M = 16 to the tensor-core GEMM, M = 16 would
    # otherwise leave the GEMV's 16-token entries untested (the GEMM's own tests are tests/test_gpu_gemm.py)
    w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gsc), gemm=False)
    x_dtype = to_torch(np.zeros(1, W.dtype)).dtype
    for M in (1, 3, 16):
        x_np = random_x(spec, M, K, seed=M)
        y = _run(k, to_torch(x_np), w, (M, N), x_dtype)
        check(spec, y, matmul_reference(x_np, W))


GROUPED_SPECS = [s for s in SPECS if grouped_spec(s) and not s.act_order]


def _grouped_case(spec: Spec, seed_offset: int) -> tuple:
    """A GROUPED weight with a K tail (groups of two whole chunks, or one group with K inside the last chunk):
    ``(spec at that group size, kernel, K, N, W, the packed weight, x's torch dtype)``. The GEMV's layout alone: on
    a GPU whose dispatch rule gives M = 16 to the tensor-core GEMM, M = 16 would otherwise leave the GEMV's 16-token
    entries untested (the GEMM's own tests are tests/test_gpu_gemm.py)."""
    mm = MatmulLayout.of(spec)
    g = None if spec.scales.group_size == -1 else 2 * mm.chunk_k
    sp = spec if g is None else with_group_size(spec, g)
    k = Kernel(sp)
    K = 4096 + (mm.per_block if g is None else g)
    N = tail_shape(spec)[1]
    (q, s, z, gi, gsc), W = matmul_inputs(sp, K, N, seed=K + seed_offset)
    w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gsc), gemm=False)
    assert w.mode == GROUPED
    return sp, k, K, N, W, w, to_torch(np.zeros(1, W.dtype)).dtype


@pytest.mark.parametrize("spec", GROUPED_SPECS, ids=[s.name for s in GROUPED_SPECS])
def test_grouped_weights_scale_each_group_sum(spec: Spec) -> None:
    """Groups of whole chunks (or one group, with a K tail inside the last chunk), split along K: M = 16 runs the
    GROUPED entry (each group's fp32 partial sum times its scale), M = 1 and 3 its batched form for 1..8 tokens."""
    from dqgen.run import matmul

    sp, k, K, N, W, w, x_dtype = _grouped_case(spec, seed_offset=1)
    w = matmul.retuned(k.artifact, w, w.tuning, 3)  # its 91 tiles would run unsplit on wide blocks
    assert w.splits == 3
    for M in (1, 3, 16):
        x_np = random_x(sp, M, K, seed=M + 100)
        y = _run(k, to_torch(x_np), w, (M, N), x_dtype)
        check(sp, y, matmul_reference(x_np, W))


@pytest.mark.parametrize("spec", GROUPED_SPECS, ids=[s.name for s in GROUPED_SPECS])
def test_grouped_weights_with_x_rows_not_16_byte_aligned(spec: Spec) -> None:
    """x one element into a wider tensor (no row 16-byte aligned): every GROUPED entry takes its guarded x loads;
    the lean 9..16-token entry (run_lean) then runs its whole range through the guarded tail (xvec = 0), a path no
    aligned input reaches (every GROUPED spec's K is whole 8-element vectors)."""
    sp, k, K, N, W, w, x_dtype = _grouped_case(spec, seed_offset=2)
    for M in (1, 13, 16):
        wide = random_x(sp, M, K + 8, seed=M + 200)
        x = to_torch(wide)[:, 1 : K + 1]
        assert x.data_ptr() % 16 != 0 and x.stride(1) == 1
        y = _run(k, x, w, (M, N), x_dtype)
        check(sp, y, matmul_reference(np.ascontiguousarray(wide[:, 1 : K + 1]), W))


@pytest.mark.parametrize(
    ("name", "K", "group"),
    [("awq_int4_fp16", 4096 + 128, 128), ("awq_int4_bf16", 4096 + 128, 128), ("awq_int4_fp16", 4096 + 8, -1)],
)
def test_flat_grid(name: str, K: int, group: int) -> None:
    """GROUPED weights on the flat grid (run_flat; the default takes it only where the tile grid is more than one
    wave, so it is forced here): warp ranges that cross tiles, up to 18 warps a tile summed through the workspace,
    K and N tails (one group: K inside the last chunk, the guarded path), bias, 1..8, 9..16 and 17 tokens."""
    import torch

    from dqgen.run import matmul

    spec = load_spec(name)
    k = Kernel(spec)
    N = 1448
    (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=K + 7, group_size=group)
    w = matmul.pack_gemv(k.artifact, to_torch(q), to_torch(s), to_torch(z), tuning=Tuning(flat="on"))
    assert w.mode == GROUPED and w.flat[0] is not None and w.flat[1] is not None
    assert max(f.slots for f in w.flat if f is not None) > 2  # tiles shared by several warps
    rng = np.random.default_rng(K)
    bias_np = rng.standard_normal(N).astype(np.float32).astype(W.dtype)
    x_dtype = to_torch(np.zeros(1, W.dtype)).dtype
    for M in (1, 3, 9, 16, 17):
        x_np = random_x(spec, M, K, seed=M + 200)
        y = _run(k, to_torch(x_np), w, (M, N), x_dtype, bias=to_torch(bias_np))
        check(spec, y, matmul_reference(x_np, W, bias_np))
    assert int(w.counters.abs().sum()) == 0 and w.counters.dtype == torch.int32  # left ready for the next launch


@pytest.mark.quick
def test_few_tiles_take_wide_blocks() -> None:
    """The default pack gives a weight of few 16-row tiles wider blocks, unsplit (dqgen.kernels.gemv.block_warps,
    worked out for 132 SMs: 91 tiles of 66 chunks fit 132 blocks of 16 warps; 257 fit 264 of 8; 513 take 4-warp
    blocks) and a K-heavy weight of 4 tiles (160 chunks: 10 a warp of 16, most SMs idle) 4-warp blocks in 5 splits
    (choose_gemv_splits: 8 chunks a warp at most); every one within tolerance of the reference at 1 and 16 tokens."""
    from dqgen.run import device as dev
    from dqgen.run import matmul

    spec = load_spec("awq_int4_fp16")
    k = Kernel(spec)
    if dev.sm_count(0) != 132:
        pytest.skip("the widths worked out for the H100's 132 SMs")
    for K, N, warps, splits in (
        (4096 + 128, 1448, 16, 1),
        (1152, 4096 + 8, 8, 1),
        (1152, 8200, 4, 1),
        (10240, 56, 4, 5),
    ):
        (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=K + N, group_size=128)
        w = matmul.pack_gemv(k.artifact, to_torch(q), to_torch(s), to_torch(z))
        assert (w.tuning.warps, w.splits) == (warps, splits), (K, N)
        x_dtype = to_torch(np.zeros(1, W.dtype)).dtype
        for M in (1, 16):
            x_np = random_x(spec, M, K, seed=M + 400)
            check(spec, _run(k, to_torch(x_np), w, (M, N), x_dtype), matmul_reference(x_np, W))


def test_retuned_split_counts() -> None:
    """matmul.retuned (the tuning scripts' variants) on a packed weight with a K tail: split-K in 1, 3 and 32 blocks
    a tile of 4 warps (66 chunks: with 32, one chunk a warp, 2 chunks' worth of blocks left with none), 16-warp blocks
    in 3 splits (2 chunks a warp, some warps with none), the flat grid, 1..8 and 9..16 tokens; the packed weight
    itself keeps its own grid; a split count past the chunks and a block too wide for the registers are refused."""
    from dqgen.run import matmul

    spec = load_spec("awq_int4_fp16")
    k = Kernel(spec)
    K, N = 4096 + 128, 1448
    (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=K + 11, group_size=128)
    w = matmul.pack_gemv(k.artifact, to_torch(q), to_torch(s), to_torch(z))
    assert w.chunks == 66
    packed = (w.tuning, w.splits, w.flat, w.workspace)
    x_dtype = to_torch(np.zeros(1, W.dtype)).dtype
    for tuning, splits in (
        (Tuning(flat="off"), 1),
        (Tuning(flat="off"), 3),
        (Tuning(flat="off"), 32),
        (Tuning(flat="off", warps=16), 3),
        (Tuning(flat="on"), None),
    ):
        v = matmul.retuned(k.artifact, w, tuning, splits)
        assert v.wq is w.wq and (splits is None or v.splits == splits) and v.workspace is not w.workspace
        for M in (1, 9):
            x_np = random_x(spec, M, K, seed=M + 300)
            y = _run(k, to_torch(x_np), v, (M, N), x_dtype)
            check(spec, y, matmul_reference(x_np, W))
    assert (w.tuning, w.splits, w.flat, w.workspace) == packed  # the packed weight keeps its own grid
    with pytest.raises(ValueError, match=r"splits: expected an int in 1\.\.66"):
        matmul.retuned(k.artifact, w, Tuning(), 67)
    int3 = Kernel(load_spec("gptq_int3_fp16"))  # 2 blocks of 4 warps an SM: 8 warps a block at most
    (q3, s3, z3, _, _), _ = matmul_inputs(int3.spec, 32 * 36, 56, seed=3, group_size=32)
    w3 = matmul.pack_gemv(int3.artifact, to_torch(q3), to_torch(s3), to_torch(z3))
    with pytest.raises(ValueError, match=r"Tuning\.warps: 16 warps a block spill at gptq_int3_fp16's registers"):
        matmul.retuned(int3.artifact, w3, Tuning(warps=16))


def test_bias_and_many_tokens_and_leading_dims() -> None:
    import torch

    spec = load_spec("awq_int4_bf16")
    k = Kernel(spec)
    K, N = 4096, 56
    (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=3, group_size=128)
    # the GEMV's layout alone, so that M = 40 runs the GEMV's 16-token launches (the dispatch would send it to the
    # tensor-core GEMM, whose M > 16 cases are tests/test_gpu_gemm.py)
    w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), gemm=False)
    rng = np.random.default_rng(0)
    bias_np = rng.standard_normal(N).astype(np.float32).astype(W.dtype)
    for M in (40, 9):  # 3 launches of 16, 16, 8 tokens; one m16 launch
        x_np = random_x(spec, M, K, seed=M)
        x = to_torch(x_np)
        y = _run(k, x, w, (M, N), torch.bfloat16, bias=to_torch(bias_np))
        check(spec, y, matmul_reference(x_np, W, bias_np))
    x_np = random_x(spec, 6, K, seed=6)
    y = k.matmul(to_torch(x_np).reshape(2, 3, K), w)
    assert tuple(y.shape) == (2, 3, N)
    check(spec, y.reshape(6, N), matmul_reference(x_np, W))


@pytest.mark.parametrize("name,group", [("gptq_int4_asym_act_order_fp16", 128), ("awq_int4_fp16", 36)])
def test_act_order_and_groups_that_are_no_whole_blocks(name: str, group: int) -> None:
    spec = load_spec(name)
    k = Kernel(spec)
    K, N = group * 33, 48 + 8
    (q, s, z, gi, _), W = matmul_inputs(spec, K, N, seed=5, group_size=group)
    w = k.pack_matmul(to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), gemm=False)  # the GEMV alone
    assert w.gather
    for M in (1, 16):
        x_np = random_x(spec, M, K, seed=M)
        y = _run(k, to_torch(x_np), w, (M, N), to_torch(np.zeros(1, W.dtype)).dtype)
        check(spec, y, matmul_reference(x_np, W))


def test_checkpoint_form_packs_once_per_version_and_errors_name_the_tensor() -> None:
    spec = load_spec("gptq_int4_fp16")
    k = Kernel(spec)
    K, N = 1024, 256
    (q, s, _, _, _), W = matmul_inputs(spec, K, N, seed=7, group_size=128)
    qt, st = to_torch(q), to_torch(s)
    x_np = random_x(spec, 2, K, seed=2)
    x = to_torch(x_np)
    y1 = k.matmul(x, qt, st)
    check(spec, y1, matmul_reference(x_np, W))
    from dqgen.run import matmul as mm

    w1 = mm.packed_gemv(k.artifact, k.op_key, qt, st)
    assert mm.packed_gemv(k.artifact, k.op_key, qt, st) is w1  # cached
    (q2, s2, _, _, _), W2 = matmul_inputs(spec, K, N, seed=8, group_size=128)
    qt.copy_(to_torch(q2))  # in place: a new version, packed again
    st.copy_(to_torch(s2))
    y2 = k.matmul(x, qt, st)
    check(spec, y2, matmul_reference(x_np, W2))
    with pytest.raises(ShapeError, match=r"^x: expected shape \[\.\.\., 1024\]"):
        k.matmul(x[:, :512], qt, st)
    with pytest.raises(ShapeError, match=r"^scales: "):
        k.pack_matmul(qt, st[:, :100])
    with pytest.raises(ShapeError, match=r"^bias: "):
        k.matmul(x, qt, st, bias=to_torch(np.zeros(N + 1, np.float16)))
    with pytest.raises(ShapeError, match=r"^x: expected dtype fp16"):
        k.matmul(x.float(), qt, st)


def test_torch_compile_and_cuda_graph() -> None:
    import torch

    spec = load_spec("awq_int4_fp16")
    k = Kernel(spec)
    K, N = 2048, 1440
    (q, s, z, _, _), W = matmul_inputs(spec, K, N, seed=11, group_size=128)
    qt, st, zt = to_torch(q), to_torch(s), to_torch(z)
    w = k.pack_matmul(qt, st, zt)
    x_np = random_x(spec, 4, K, seed=4)
    x = to_torch(x_np)
    ref = matmul_reference(x_np, W)

    def packed_fn(x):
        return k.matmul(x, w) * 2

    def checkpoint_fn(x):
        return k.matmul(x, qt, st, zt) * 2

    for fn in (packed_fn, checkpoint_fn):
        eager = fn(x)
        compiled = torch.compile(fn, fullgraph=True)
        y = compiled(x)
        torch.cuda.synchronize()
        assert torch.equal(y, eager)
        check(spec, y / 2, ref)
    # graph capture of the packed call (the checkpoint form packed above, so it captures too)
    static_x = x.clone()
    k.matmul(static_x, w)
    g = torch.cuda.CUDAGraph()
    s_ = torch.cuda.Stream()
    s_.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s_):
        k.matmul(static_x, w)
        k.matmul(static_x, qt, st, zt)
    torch.cuda.current_stream().wait_stream(s_)
    with torch.cuda.graph(g):
        ya = k.matmul(static_x, w)
        yb = k.matmul(static_x, qt, st, zt)
    x2_np = random_x(spec, 4, K, seed=44)
    static_x.copy_(to_torch(x2_np))
    g.replay()
    torch.cuda.synchronize()
    ref2 = matmul_reference(x2_np, W)
    check(spec, ya, ref2)
    assert torch.equal(ya, yb)
