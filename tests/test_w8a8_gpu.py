"""GPU tests of dqgen.w8a8.quantize_activations: every element and every row scale compared bitwise with the
numpy reference (dqgen.w8a8.reference), on rows with outliers, zero rows, .5 ties, non-finite elements, tails and
misaligned rows, both dtypes, with and without smoothing, dynamic and static; the op under torch.compile; the
one-line errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dqgen.w8a8 import reference

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

POISON = 0x5A


def _poison_allocator() -> None:
    """Fill the caching allocator's free blocks with a pattern, so an element the kernel never writes shows."""
    blob = torch.full((64 << 20,), POISON, dtype=torch.int8, device="cuda")
    del blob


def _host(t: Any) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def _inputs(rows: int, k: int, dtype: Any, seed: int) -> Any:
    """Random rows at mixed magnitudes with outlier channels, a zero row, a row of .5 ties (amax 127)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, k)) * rng.uniform(1e-3, 30, (rows, 1))
    x[:, rng.integers(0, k, max(1, k // 64))] *= 80  # SmoothQuant's outlier channels
    x = torch.from_numpy(x).to(dtype)
    if rows > 1:
        x[1] = 0
    if rows > 2:
        ties = torch.from_numpy(rng.integers(-126, 126, k) + 0.5).to(dtype)
        ties[rng.integers(0, k)] = -127.0
        x[2] = ties
    return x.cuda()


def _smooth(kind: str | None, k: int, dtype: Any, seed: int) -> Any:
    if kind is None:
        return None
    rng = np.random.default_rng(seed + 100)
    s = torch.from_numpy(rng.uniform(0.05, 20, k))
    return s.to(torch.float32 if kind == "fp32" else dtype).cuda()


def _compare(x: Any, smooth: Any, scale: float | None, placement: tuple[str, str] | None = None) -> None:
    """``placement``: (hold, smooth_in) forced instead of the defaults (through the op's launcher)."""
    from dqgen.w8a8 import quantize_activations
    from dqgen.w8a8.op import _launch

    _poison_allocator()
    if placement is None:
        q, s = quantize_activations(x, smooth, scale=scale)
    else:
        q, s = _launch(x, smooth, scale, *placement)
    torch.cuda.synchronize()
    want_q, want_s = reference.quantize(_host(x), None if smooth is None else _host(smooth), scale)
    got_q, got_s = q.cpu().numpy(), s.cpu().numpy()
    assert got_q.shape == want_q.shape and got_s.shape == want_s.shape
    bad = np.argwhere(got_q != want_q)
    assert bad.size == 0, (
        f"{len(bad)} codes differ, first at {bad[0].tolist()}: {got_q[tuple(bad[0])]} vs {want_q[tuple(bad[0])]}"
    )
    assert (got_s.view(np.int32) == want_s.view(np.int32)).all(), "row scales differ bitwise"


SHAPES = [(1, 4096), (37, 4104), (5, 4099), (3, 7), (64, 14336), (6, 40000), (300, 512), (4, 1)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("smooth", [None, "fp32", "x"])
@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize(("rows", "k"), SHAPES)
def test_bit_exact(rows: int, k: int, dtype: str, smooth: str | None, static: bool) -> None:
    dt = getattr(torch, dtype)
    x = _inputs(rows, k, dt, seed=rows * 7 + k)
    s = _smooth(smooth, k, dt, seed=k)
    # a static scale that saturates the outlier channels: both ends of the range get hit
    scale = float(x.float().abs().amax()) / 127 / 8 if static else None
    _compare(x, s, scale)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("offset", [1, 3, 8])
def test_misaligned_rows_and_strided_views(dtype: str, offset: int) -> None:
    # rows starting off 16-byte boundaries (a column slice of a wider tensor): the general variant's head/tail
    dt = getattr(torch, dtype)
    base = _inputs(23, 4096 + 16, dt, seed=offset)
    x = base[:, offset : offset + 4096]
    assert x.stride(0) == 4096 + 16
    s_base = _smooth("fp32", 4096 + 4, dt, seed=3)
    _compare(x, None, None)
    _compare(x, s_base[1:4097], None)  # a misaligned smoothing vector too


@pytest.mark.parametrize("hold", ["f32", "raw"])
@pytest.mark.parametrize("smooth_in", ["regs", "smem", "rcp"])
@pytest.mark.parametrize(("rows", "k"), [(33, 4096), (9, 14336), (5, 4104), (3, 40000)])
def test_bit_exact_every_placement(rows: int, k: int, hold: str, smooth_in: str) -> None:
    # every variant the defaults choose among (docs/bench/w8a8_act.json), whatever the row count, is exact too
    placement = (hold, smooth_in)
    for dtype, sk in ((torch.float16, "fp32"), (torch.bfloat16, "x")):
        x = _inputs(rows, k, dtype, seed=k + rows)
        s = _smooth(sk, k, dtype, seed=k)
        _compare(x, s, None, placement)
        _compare(x, s, float(x.float().abs().amax()) / 127 / 4, placement)
    _compare(_inputs(rows, k, torch.float16, seed=1), None, None, placement)


def test_non_finite_elements_follow_the_documented_rule() -> None:
    x = _inputs(4, 1000, torch.float16, seed=9)
    x[0, 5] = float("nan")
    x[3, 17] = float("inf")
    _compare(x, None, None)
    _compare(x, None, 0.01)


def test_empty_inputs() -> None:
    from dqgen.w8a8 import quantize_activations

    q, s = quantize_activations(torch.empty((0, 64), dtype=torch.float16, device="cuda"))
    assert q.shape == (0, 64) and s.shape == (0,)
    q, s = quantize_activations(torch.empty((3, 0), dtype=torch.float16, device="cuda"), scale=0.5)
    assert q.shape == (3, 0) and s.tolist() == [0.5, 0.5, 0.5]


def test_under_torch_compile_matches_eager() -> None:
    from dqgen.w8a8 import quantize_activations

    def f(x: Any, s: Any) -> Any:
        q, scale = quantize_activations(x, s)
        return q, scale * 2

    compiled = torch.compile(f, fullgraph=True)
    x = _inputs(50, 2048, torch.bfloat16, seed=11)
    s = _smooth("fp32", 2048, torch.bfloat16, seed=1)
    q0, s0 = f(x, s)
    q1, s1 = compiled(x, s)
    assert torch.equal(q0, q1) and torch.equal(s0, s1)
    x2 = _inputs(7, 2048, torch.bfloat16, seed=12)  # another M: a dynamic dim, same compiled graph
    assert torch.equal(compiled(x2, s)[0], f(x2, s)[0])


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: (torch.zeros(4, 8, dtype=torch.float16), None, None), "x: expected a CUDA tensor"),
        (lambda: (torch.zeros(4, 8, device="cuda"), None, None), "x: expected float16 or bfloat16"),
        (lambda: (torch.zeros(2, 4, 8, dtype=torch.float16, device="cuda"), None, None), "x: expected a 2-D"),
        (lambda: (torch.zeros(8, 4, dtype=torch.float16, device="cuda").t(), None, None), "x: expected contiguous"),
        (
            lambda: (torch.zeros(4, 8, dtype=torch.float16, device="cuda"), torch.ones(7, device="cuda"), None),
            r"smooth: expected shape \[K=8\]",
        ),
        (
            lambda: (
                torch.zeros(4, 8, dtype=torch.float16, device="cuda"),
                torch.ones(8, dtype=torch.bfloat16, device="cuda"),
                None,
            ),
            "smooth: expected float32 or x's dtype",
        ),
        (lambda: (torch.zeros(4, 8, dtype=torch.float16, device="cuda"), torch.ones(8), None), "smooth: expected x's"),
        (lambda: (torch.zeros(4, 8, dtype=torch.float16, device="cuda"), None, 0.0), "scale: expected a positive"),
        (lambda: (torch.zeros(4, 8, dtype=torch.float16, device="cuda"), None, float("nan")), "scale: expected a pos"),
        (lambda: (torch.zeros(4, 8, dtype=torch.float16, device="cuda"), None, 1e-45), "scale: expected a positive"),
    ],
)
def test_bad_input_is_one_line_naming_the_tensor(make: Any, match: str) -> None:
    from dqgen.w8a8 import quantize_activations

    x, s, scale = make()
    with pytest.raises(ValueError, match=match) as info:
        quantize_activations(x, s, scale=scale)
    assert "\n" not in str(info.value)


def test_repeated_calls_take_the_bound_launch_and_read_new_contents() -> None:
    """An eager call is checked and planned once per input signature: the same tensors again launch at once and
    still quantize their current contents; the same address with another dtype, a static scale (an int one is
    keyed as its float), another smoothing vector, or a bad scale is checked anew."""
    from dqgen.w8a8 import quantize_activations
    from dqgen.w8a8.op import _CALLS

    x = _inputs(40, 4096, torch.float16, seed=5)
    s = _smooth("fp32", 4096, torch.float16, seed=5)
    _CALLS.clear()
    _compare(x, s, None)
    assert len(_CALLS) == 1
    x.copy_(_inputs(40, 4096, torch.float16, seed=6))  # new contents at the same address
    s.mul_(3)
    _compare(x, s, None)
    assert len(_CALLS) == 1  # no new check or plan
    _compare(x, s, 0.05)  # a static scale: another signature
    assert len(_CALLS) == 2
    _compare(x, s, 2)  # an int scale: checked, then keyed as 2.0
    _compare(x, s, 2.0)
    assert len(_CALLS) == 3
    _compare(x, None, None)  # no smoothing: another signature
    _compare(x[1:], s, None)  # rows from another address, another shape
    assert len(_CALLS) == 5
    with pytest.raises(ValueError, match=r"^x: expected float16 or bfloat16, got torch\.int16"):
        quantize_activations(x.view(torch.int16), s)
    with pytest.raises(ValueError, match=r"^scale: expected a positive finite float32"):
        quantize_activations(x, s, scale=float("nan"))
    with pytest.raises(ValueError, match=r"^scale: expected a Python float"):
        quantize_activations(x, s, scale=[0.5])  # type: ignore[arg-type]  # unhashable: no signature key
    with pytest.raises(ValueError, match=r"^smooth: expected a tensor"):
        quantize_activations(x, [1.0] * 4096)  # type: ignore[arg-type]
    assert len(_CALLS) == 5


def test_cuda_graph_replays_after_the_cache_is_cleared() -> None:
    """A CUDA graph captured after warm-up replays on the inputs' new contents after the signature cache has been
    cleared and other signatures have run (the outputs are the graph's, from torch's caching allocator)."""
    from dqgen.w8a8 import quantize_activations
    from dqgen.w8a8.op import _CALLS

    x = _inputs(16, 4096, torch.float16, seed=7)
    s = _smooth("fp32", 4096, torch.float16, seed=7)
    quantize_activations(x, s)  # warm-up: checked, planned, bound
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q_graph, scale_graph = quantize_activations(x, s)
    _CALLS.clear()
    for rows in (1, 300, 4096):
        _compare(_inputs(rows, 4096, torch.float16, seed=rows), s, None)
    x.copy_(_inputs(16, 4096, torch.float16, seed=8))
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    want_q, want_s = reference.quantize(_host(x), _host(s), None)
    assert (q_graph.cpu().numpy() == want_q).all()
    assert (scale_graph.cpu().numpy().view(np.int32) == want_s.view(np.int32)).all()
