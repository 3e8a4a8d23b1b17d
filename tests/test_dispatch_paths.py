"""Kernel.matmul's dispatch (dqgen.run.dispatch.dispatch) on the CPU, with a stand-in torch: the weight-form errors
come first, whether traced or not; a traced call (decided once by the caller) becomes exactly one custom op, the
GEMM's dispatch op for specs the GEMM takes and the GEMV's op otherwise; an eager call runs the path the rule
picks, with the compiled spec's key owning the pack caches."""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

import pytest

from dqgen.run import dispatch
from dqgen.run.dispatch import DispatchRule, MatmulTarget
from dqgen.run.matmul import MatmulWeight


class Tensor:
    """What the dispatch reads of a torch tensor: rows, device, is_cuda; copy_ for an out."""

    def __init__(self, shape: tuple[int, ...], cuda: bool = True) -> None:
        self.shape, self.is_cuda = shape, cuda
        self.device = types.SimpleNamespace(index=0)
        self.copied: Any = None

    def dim(self) -> int:
        return len(self.shape)

    def copy_(self, src: Any) -> Tensor:
        self.copied = src
        return self


class Ops:
    """torch.ops.dqgen: records each op call by name."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.calls.append((name, args)) or f"y from {name}"


@pytest.fixture
def torch(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    fake = types.SimpleNamespace(Tensor=Tensor, ops=types.SimpleNamespace(dqgen=Ops()))
    monkeypatch.setitem(sys.modules, "torch", fake)
    return fake


def _target(gemm_ok: bool) -> MatmulTarget:
    artifact: Any = types.SimpleNamespace(spec=types.SimpleNamespace(name="awq"))
    return MatmulTarget(artifact, "awq-0123", gemm_ok, lambda *a, **kw: pytest.fail("no dense path here"))


def _weight() -> MatmulWeight:
    w = MatmulWeight(**{f.name: 0 for f in dataclasses.fields(MatmulWeight) if f.init and f.name not in ("flat",)})
    w.key = "awq-w7"
    return w


@pytest.mark.parametrize("traced", [False, True])
def test_the_weight_form_is_checked_first(torch, traced: bool) -> None:
    x = Tensor((4, 64))
    with pytest.raises(TypeError, match=r"^matmul: scales, zeros, g_idx and global_scale belong to pack_matmul"):
        dispatch.dispatch(_target(True), x, _weight(), scales=Tensor((1, 64)), traced=traced)
    with pytest.raises(TypeError, match=r"^matmul: pass a MatmulWeight \(from pack_matmul\), or qweight and scales$"):
        dispatch.dispatch(_target(True), x, Tensor((8, 64)), traced=traced)
    assert torch.ops.dqgen.calls == []


@pytest.mark.parametrize(
    ("gemm_ok", "packed", "op"),
    [
        (True, True, "matmul_dispatch"),
        (True, False, "matmul_dispatch_checkpoint"),
        (False, True, "matmul"),
        (False, False, "matmul_checkpoint"),
    ],
)
def test_a_traced_call_is_one_op(torch, gemm_ok: bool, packed: bool, op: str) -> None:
    x, bias = Tensor((4, 64)), Tensor((32,))
    args: tuple = (_weight(),) if packed else (Tensor((8, 32)), Tensor((1, 32)))
    y = dispatch.dispatch(_target(gemm_ok), x, *args, bias=bias, traced=True)
    assert y == f"y from {op}"
    ((name, op_args),) = torch.ops.dqgen.calls
    assert name == op and op_args[0] == "awq-0123" and op_args[-1] is bias
    assert op_args[1] == "awq-w7" if packed else op_args[2] is args[0]
    out = Tensor((4, 32))
    assert dispatch.dispatch(_target(gemm_ok), x, *args, out=out, traced=True) is out  # the op is functional
    assert out.copied == f"y from {op}"


def test_eager_calls_take_the_rules_path(torch, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple] = []
    monkeypatch.setattr(dispatch, "packed_gemv", lambda art, owner, *a, **kw: ("gemv weight", owner))
    monkeypatch.setattr(dispatch, "run_gemv", lambda art, x, w, **kw: ran.append(("gemv", w)) or "gemv y")
    monkeypatch.setattr(dispatch, "packed_gemm", lambda spec, owner, *a, **kw: ("gemm weight", owner))
    monkeypatch.setattr(dispatch, "run_gemm", lambda spec, x, w, **kw: ran.append(("gemm", w)) or "gemm y")
    monkeypatch.setattr(dispatch, "rule_for", lambda device: DispatchRule(gemm_min_m=17, dense_min_m=None))
    q, s = Tensor((8, 32)), Tensor((1, 32))
    assert dispatch.dispatch(_target(True), Tensor((16, 64)), q, s) == "gemv y"
    assert dispatch.dispatch(_target(True), Tensor((2, 10, 64)), q, s) == "gemm y"  # M = 20 rows
    assert dispatch.dispatch(_target(False), Tensor((300, 64)), q, s) == "gemv y"  # the GEMM does not take it
    assert ran == [
        ("gemv", ("gemv weight", "awq-0123")),
        ("gemm", ("gemm weight", "awq-0123")),
        ("gemv", ("gemv weight", "awq-0123")),
    ]
    assert torch.ops.dqgen.calls == []


def test_a_spec_with_the_hopper_gemm_alone_falls_back_to_the_gemv(torch, monkeypatch: pytest.MonkeyPatch) -> None:
    """A float / codebook spec (MatmulTarget.hopper_only: fp8, nf4, ...) runs the GEMM only where the Hopper kernel
    can take the call (an sm_90 GPU, x rows TMA can address), under the Hopper rule; elsewhere the GEMV at every M,
    never the sm_80 GEMM it has no kernel for. takes_gemv (the fast path's memory) agrees."""
    ran: list[str] = []
    monkeypatch.setattr(dispatch, "packed_gemv", lambda art, owner, *a, **kw: "gemv weight")
    monkeypatch.setattr(dispatch, "run_gemv", lambda art, x, w, **kw: ran.append("gemv") or "gemv y")
    monkeypatch.setattr(dispatch, "packed_gemm", lambda spec, owner, *a, **kw: "gemm weight")
    monkeypatch.setattr(dispatch, "run_gemm", lambda spec, x, w, **kw: ran.append("gemm") or "gemm y")
    monkeypatch.setattr(dispatch, "rule_for", lambda device: DispatchRule(gemm_min_m=4, dense_min_m=None))
    target = dataclasses.replace(_target(True), hopper_only=True)
    q, s, x = Tensor((8, 32)), Tensor((1, 32)), Tensor((300, 64))
    takes: dict[str, bool] = {}
    for hopper, can_take, want in ((False, False, "gemv"), (True, False, "gemv"), (True, True, "gemm")):
        monkeypatch.setattr(dispatch, "is_hopper", lambda device, h=hopper: h)
        monkeypatch.setattr(dispatch, "_hopper_can_take", lambda *a, c=can_take: c)
        assert dispatch.dispatch(target, x, q, s) == f"{want} y"
        takes[want] = dispatch.takes_gemv(target, Tensor((16, 64)), q, s, None, 16)
    assert ran == ["gemv", "gemv", "gemm"]
    assert takes == {"gemv": True, "gemm": False}
    # an integer spec on the same sm_90 GPU where the Hopper kernel cannot take the call: the sm_80 GEMM's rule
    monkeypatch.setattr(dispatch, "_hopper_can_take", lambda *a: False)
    assert dispatch.dispatch(_target(True), x, q, s) == "gemm y"


def test_nvfp4_takes_the_hopper_gemm_with_its_global_scale(torch, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVFP4 (e4m3 block scales in groups of 16, an fp32 global scale) is a spec the Hopper GEMM alone takes: on sm_90
    from the rule's M the checkpoint call packs the GEMM weight with its global scale and runs the GEMM, a packed
    weight runs the GEMM beside it; never dense + cuBLAS (its checkpoint tuple has no global scale), even under a
    rule that would; another GPU, and a spec without a global scale given one, the GEMV (which names the tensor)."""
    from dqgen.core.spec import load_spec
    from dqgen.kernels.gemm90 import hopper_only, refusal90

    spec = load_spec("nvfp4_fp16")
    assert refusal90(spec) == "" and hopper_only(spec)
    ran: list[tuple[str, Any]] = []
    monkeypatch.setattr(dispatch, "packed_gemv", lambda art, owner, *a, **kw: "gemv weight")
    monkeypatch.setattr(dispatch, "run_gemv", lambda art, x, w, **kw: ran.append(("gemv", w)) or "gemv y")
    monkeypatch.setattr(dispatch, "packed_gemm", lambda sp, owner, *a, **kw: ("gemm weight", kw["global_scale"]))
    monkeypatch.setattr(dispatch, "run_gemm", lambda sp, x, w, **kw: ran.append(("gemm", w)) or "gemm y")
    monkeypatch.setattr(dispatch, "rule_for", lambda device: DispatchRule(gemm_min_m=4, dense_min_m=100))
    monkeypatch.setattr(dispatch, "_hopper_can_take", lambda *a: True)
    monkeypatch.setattr(dispatch, "checkpoint_of", lambda w: pytest.fail("no dense path for a global scale"))
    target = MatmulTarget(
        types.SimpleNamespace(spec=spec), "nvfp4-0123", True, lambda *a, **kw: pytest.fail("no dense"), True, True
    )
    q, s, gs, x = Tensor((16, 256)), Tensor((8, 256)), Tensor((1,)), Tensor((300, 128))
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: True)
    assert dispatch.dispatch(target, x, q, s, global_scale=gs) == "gemm y"
    assert ran.pop() == ("gemm", ("gemm weight", gs))
    packed = _weight()
    gw = types.SimpleNamespace(N=256, k_tiles=2, gather=False)  # the GemmWeight beside it
    monkeypatch.setattr(dispatch, "beside", lambda w: gw)
    assert dispatch.dispatch(target, x, packed) == "gemm y" and ran.pop() == ("gemm", gw)
    assert dispatch.dispatch(target, Tensor((2, 128)), packed) == "gemv y"  # under the rule's 4 rows
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: False)
    assert dispatch.dispatch(target, x, q, s, global_scale=gs) == "gemv y"
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: True)
    mx = MatmulTarget(types.SimpleNamespace(spec=load_spec("mxfp4_bf16")), "mx", True, target.dequantize, True)
    assert dispatch.dispatch(mx, x, q, s, global_scale=gs) == "gemv y"
    assert [way for way, _ in ran] == ["gemv", "gemv", "gemv"]


class _X:
    """An aligned x [M, K]: what _hopper_can_take reads (shape, strides, address)."""

    def __init__(self, M: int, K: int) -> None:
        self.shape = (M, K)

    def dim(self) -> int:
        return 2

    def stride(self, d: int) -> int:
        return 1 if d == -1 else self.shape[1]

    def data_ptr(self) -> int:
        return 1 << 20


def test_checkpoint_groups_under_a_tile_take_the_hopper_gemm() -> None:
    """Checkpoint tensors (no packed weight yet): an integer spec's g_idx, or its groups of 32 (padded into gathered
    slots), take the Hopper GEMM through the gather of x with any x; fp4's groups of 32 stay in order (two scale
    rows a tile), so they need x rows TMA can address; whole-tile groups too."""
    from dqgen.core.spec import load_spec, with_group_size

    aligned, unaligned = _X(64, 4096), _X(64, 4096)
    unaligned.data_ptr = lambda: 1 << 20 | 8  # type: ignore[method-assign]  # 8-byte aligned rows: no tensor map
    groups32, groups128 = types.SimpleNamespace(shape=(128, 256)), types.SimpleNamespace(shape=(32, 256))

    def target(name: str, only90: bool) -> MatmulTarget:
        spec = load_spec(name) if only90 else with_group_size(load_spec(name), 32)
        return MatmulTarget(types.SimpleNamespace(spec=spec), "k", True, lambda *a, **kw: None, hopper_only=only90)

    awq, fp4 = target("awq_int4_fp16", False), target("fp4_e2m1_bf16", True)
    assert dispatch._hopper_can_take(None, unaligned, None, groups32, awq)  # gathered slots
    assert dispatch._hopper_can_take(None, unaligned, object(), groups128, awq)  # a g_idx: gathered
    assert not dispatch._hopper_can_take(None, unaligned, None, groups128, awq)  # whole tiles in order
    assert dispatch._hopper_can_take(None, aligned, None, groups128, awq)
    assert not dispatch._hopper_can_take(None, unaligned, None, groups32, fp4)  # in order: x by TMA
    assert dispatch._hopper_can_take(None, aligned, None, groups32, fp4)


def test_the_row_stride_is_judged_on_x_as_run_gemm_reads_it() -> None:
    """x [B, 1, K] with an unaligned batch stride: its rows (as [B, K]) are that stride apart, not K; a single row
    (all leading dimensions 1) is K apart."""

    class X3:
        shape: tuple[int, ...] = (4, 1, 4096)

        def dim(self) -> int:
            return 3

        def stride(self, d: int) -> int:
            return (4100, 4096, 1)[d]

        def data_ptr(self) -> int:
            return 1 << 20

    assert dispatch._row_stride(X3()) == 4100
    assert not dispatch._hopper_can_take(None, X3())  # 8200-byte rows: no tensor map
    one = X3()
    one.shape = (1, 1, 4096)
    assert dispatch._row_stride(one) == 4096 and dispatch._hopper_can_take(None, one)


def test_a_measured_shape_decides_small_m_only_for_in_order_weights(torch, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an sm_90 GPU whose rule timed 8192 x 28672 at small M (the GEMM at 1 and 8 rows, the GEMV at 4), dispatch
    and takes_gemv follow that choice for checkpoint tensors in group-128 order (as the sweep's weights were); groups
    of 32 (gathered, padded slots: a cost the sweep did not time) keep the rule's gemm_min_m (16) and its narrowing;
    an empty batch goes to the GEMV."""
    from dqgen.core.spec import load_spec

    spec = load_spec("awq_int4_fp16")
    ran: list[str] = []
    monkeypatch.setattr(dispatch, "packed_gemv", lambda art, owner, *a, **kw: "gemv weight")
    monkeypatch.setattr(dispatch, "run_gemv", lambda art, x, w, **kw: ran.append("gemv") or "gemv y")
    monkeypatch.setattr(dispatch, "packed_gemm", lambda sp, owner, *a, **kw: "gemm weight")
    monkeypatch.setattr(dispatch, "run_gemm", lambda sp, x, w, **kw: ran.append("gemm") or "gemm y")
    shape = dispatch.MeasuredShape(8192, 28672, (32,), (), (1, 4, 8, 16), (1, 8, 16))
    monkeypatch.setattr(dispatch, "rule_for", lambda device: DispatchRule(16, None, (shape,), "awq_int4_fp16", 132))
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: True)
    monkeypatch.setattr(dispatch, "hopper_pays", lambda n, k_tiles, M, device: True)
    target = MatmulTarget(types.SimpleNamespace(spec=spec), "awq-0123", True, lambda *a, **kw: pytest.fail("dense"))
    q = Tensor((8192, 28672 // 8))  # AWQ packs 8 codes a word along N
    g128, g32 = Tensor((64, 28672)), Tensor((256, 28672))

    class Rows(Tensor):  # a CUDA x [M, K] TMA can address
        def stride(self, d: int) -> int:
            return 1 if d == -1 else self.shape[1]

        def data_ptr(self) -> int:
            return 1 << 20

    def x(M: int) -> Any:
        return Rows((M, 8192))

    for scales, want in ((g128, ["gemm", "gemv", "gemm"]), (g32, ["gemv", "gemv", "gemv"])):
        ran.clear()
        for M in (1, 4, 8):
            dispatch.dispatch(target, x(M), q, scales)
            assert dispatch.takes_gemv(target, x(M), q, scales, None, M) == (ran[-1] == "gemv")
        assert ran == want, (scales.shape, ran)
    ran.clear()
    dispatch.dispatch(target, x(0), q, g128)
    assert ran == ["gemv"]
