"""Where Kernel.matmul's dispatch rule comes from (dqgen.run.dispatch.rule_for): this machine's measurement, else
the rule measured for the release on a GPU of that name (shipped in the wheel), else the defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dqgen.run import dispatch, dispatch_sweep
from dqgen.run.dispatch import DispatchRule

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """rule_for on a pretend GPU whose name the test sets, with this machine's rule file under tmp_path."""
    names = {0: H100}
    asked: list[int] = []

    def dev_name(device: int) -> str:
        asked.append(device)
        return names[device]

    monkeypatch.setattr(dispatch, "dev_name", dev_name)
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: names[device].startswith("NVIDIA H"))
    monkeypatch.setattr(dispatch, "rule_path", lambda: tmp_path / "dispatch.json")
    # an H100 SXM's 132 SMs, the H100 PCIe's 114 (device 3 in the tests that name one)
    monkeypatch.setattr(dispatch.dev, "sm_count", lambda device: 114 if names[device] == "NVIDIA H100 PCIe" else 132)
    monkeypatch.setattr(dispatch, "_RULES", {})
    monkeypatch.setattr(dispatch, "_NAMES", {})
    return names, asked


def test_the_shipped_h100_rule_is_the_committed_measurement(gpu) -> None:
    # docs/bench/gemm_dispatch.json is what devtools/gemm_dispatch_rule.py printed on the H100: the wheel ships it
    measured = json.loads((Path(__file__).parents[1] / "docs/bench/gemm_dispatch.json").read_text())
    assert measured["gpu"] == H100
    assert dispatch.rule_entry(dispatch.rule_for(0)) == measured["rule"]


def test_this_machines_measurement_wins_and_unknown_gpus_get_the_defaults(gpu, tmp_path: Path) -> None:
    (tmp_path / "dispatch.json").write_text(json.dumps({H100: {"gemm_min_m": 17, "dense_min_m": None}}))
    assert dispatch.rule_for(0) == DispatchRule(17, None)
    names, asked = gpu
    names[1] = "Some Future GPU"
    assert dispatch.rule_for(1) == DispatchRule()
    assert dispatch.rule_for(0) == DispatchRule(17, None) and dispatch.rule_for(1) == DispatchRule()
    assert asked == [0, 1]  # the driver is asked each device's name once


def test_the_shipped_h200_rule_is_its_committed_measurement(gpu) -> None:
    # session 38's H200 sweep (split-K clusters on the Hopper GEMM): docs/bench/gemm_dispatch_h200_ksplit.json
    measured = json.loads((Path(__file__).parents[1] / "docs/bench/gemm_dispatch_h200_ksplit.json").read_text())
    names, _ = gpu
    names[2] = measured["gpu"]
    assert measured["gpu"] == "NVIDIA H200"
    assert dispatch.rule_entry(dispatch.rule_for(2)) == measured["rule"] != dispatch.rule_entry(dispatch.rule_for(0))


def test_an_sm90_gpu_without_a_rule_gets_the_hopper_rule(gpu) -> None:
    """An sm_90 GPU with no measurement of its own and none shipped (an H800 here) takes the H100's Hopper rule, not
    the sm_80 defaults: the defaults send M >= 512 to dequantize + cuBLAS, which the Hopper GEMM beats
    (docs/bench/gemm_dispatch.json)."""
    names, _ = gpu
    names[2] = "NVIDIA H800"
    shipped = json.loads(dispatch.SHIPPED_RULES.read_text())[H100]
    assert dispatch.rule_for(2) == dispatch.HOPPER_RULE
    assert dispatch.rule_entry(dispatch.HOPPER_RULE) == {k: v for k, v in shipped.items() if k != "measured"}
    assert DispatchRule() != dispatch.HOPPER_RULE


@pytest.mark.parametrize(
    "text", ["{not json", "[1, 2]", json.dumps({H100: "fast"}), json.dumps({H100: {"dense_min_m": "soon"}})]
)
def test_a_damaged_machine_rule_falls_back_to_the_shipped_one(gpu, tmp_path: Path, text: str) -> None:
    (tmp_path / "dispatch.json").write_text(text)
    shipped = json.loads(dispatch.SHIPPED_RULES.read_text())[H100]
    assert dispatch.rule_entry(dispatch.rule_for(0)) == {k: v for k, v in shipped.items() if k != "measured"}


def test_a_packed_weights_checkpoint_counts_only_while_alive_and_unchanged() -> None:
    """dispatch.checkpoint_of: the dense path may dequantize the tensors a weight was packed from only while they
    are alive and at the version packed; an inference-mode tensor (no version counter) never counts as unchanged."""
    import gc
    import weakref

    from .test_packcache import FakeTensor

    class Packed:  # stands in for a MatmulWeight (weak-referenceable, hashable)
        pass

    def beside(*tensors: FakeTensor | None) -> Packed:
        w = Packed()
        refs = tuple(None if t is None else (weakref.ref(t), dispatch.version(t)) for t in tensors)
        dispatch._BESIDE[w] = dispatch._Beside(None, refs)
        return w

    q, s = FakeTensor(0x1000), FakeTensor(0x2000)
    w = beside(q, s, None, None)
    assert dispatch.checkpoint_of(w) == (q, s, None, None)
    s.writes += 1  # written after packing
    assert dispatch.checkpoint_of(w) is None
    z = FakeTensor(0x3000)
    w2 = beside(q, z, None, None)
    del z
    gc.collect()
    assert dispatch.checkpoint_of(w2) is None  # freed
    assert dispatch.checkpoint_of(beside(q, FakeTensor(0x4000, inference=True), None, None)) is None
    assert dispatch.checkpoint_of(Packed()) is None  # packed with no record beside it


def test_measured_shapes_choose_by_the_nearest_measured_m() -> None:
    """A measured shape's choice at M is the one at the measured M nearest M on a log scale (the smaller on a tie);
    below the sweep, and for shapes it did not time, the rule's dense_min_m decides."""
    shape = dispatch.MeasuredShape(4096, 6144, (256, 512, 1024, 2048, 4096), (1024, 4096))
    rule = DispatchRule(4, None, (shape,))
    k_n = (4096, 6144)

    def way(M: int, k_n: tuple[int, int] | None = k_n, dense_ok: bool = True) -> str:
        return dispatch.pick(M, rule, gemm_ok=True, dense_ok=dense_ok, k_n=k_n)

    assert [way(M) for M in (256, 512, 1024, 2048, 4096)] == ["gemm", "gemm", "dense", "gemm", "dense"]
    # log2(1400 / 1024) = 0.45 < log2(2048 / 1400) = 0.55; 1500: 0.55 > 0.45; 3000 is nearer 4096 (0.45 vs 0.55)
    assert (way(1400), way(1500), way(3000), way(65536)) == ("dense", "gemm", "dense", "dense")
    assert way(200) == "gemm"  # below the sweep: dense_min_m (None: never)
    assert way(1024, k_n=(4096, 4096)) == "gemm" and way(1024, k_n=None) == "gemm"  # not measured
    assert way(1024, dense_ok=False) == "gemm"  # no checkpoint to dequantize
    assert dispatch.pick(1024, DispatchRule(4, 300, (shape,)), gemm_ok=True, dense_ok=True, k_n=(1, 1)) == "dense"
    assert dispatch.pick(200, DispatchRule(4, 100, (shape,)), gemm_ok=True, dense_ok=True, k_n=k_n) == "dense"
    tie = dispatch.MeasuredShape(1, 1, (512, 2048), (512,))
    assert tie.dense(1024) is True and tie.dense(511) is None  # 1024 is as near 512 as 2048: the smaller


def test_measured_shapes_from_a_sweep_and_back_through_the_rule_file(gpu, tmp_path: Path) -> None:
    times = {  # (path, M, K, N) -> us: dense more than 3% faster at (512, 1024 x 1024) only; 2.9% at 1024
        ("gemm", 512, 1024, 1024): 10.4, ("dequant + cublas", 512, 1024, 1024): 10.0,
        ("gemm", 1024, 1024, 1024): 10.29, ("dequant + cublas", 1024, 1024, 1024): 10.0,
        ("gemm", 512, 2048, 512): 5.0, ("dequant + cublas", 512, 2048, 512): 9.0,
        ("gemm", 1024, 2048, 512): 5.0, ("dequant + cublas", 1024, 2048, 512): 9.0,
        # up to 16 rows: the GEMM more than 3% faster than the GEMV at (8, 1024 x 1024) only; 2.9% at 16
        ("gemm", 8, 1024, 1024): 10.0, ("gemv", 8, 1024, 1024): 10.4,
        ("gemm", 16, 1024, 1024): 10.0, ("gemv", 16, 1024, 1024): 10.29,
        ("gemm", 8, 2048, 512): 9.0, ("gemv", 8, 2048, 512): 5.0,
        ("gemm", 16, 2048, 512): 9.0, ("gemv", 16, 2048, 512): 5.0,
    }  # fmt: skip
    shapes = dispatch_sweep.measured_shapes(
        lambda p, M, K, N: times[(p, M, K, N)], [8, 16, 512, 1024], [(1024, 1024), (2048, 512)]
    )
    assert shapes == (
        dispatch.MeasuredShape(1024, 1024, (512, 1024), (512,), (8, 16), (8,)),
        dispatch.MeasuredShape(2048, 512, (512, 1024), (), (8, 16), ()),
    )
    assert dispatch_sweep.measured_shapes(lambda *a: 1.0, [1, 8, 16], [(1024, 1024)]) == (
        dispatch.MeasuredShape(1024, 1024, (), (), (1, 8, 16), ()),
    )
    assert dispatch_sweep.measured_shapes(lambda *a: 1.0, [], [(1024, 1024)]) == ()
    rule = DispatchRule(4, None, shapes)
    assert dispatch.save_rule(0, rule) == tmp_path / "dispatch.json"
    assert dispatch.rule_for(0) == rule
    entry = json.loads((tmp_path / "dispatch.json").read_text())[H100]
    assert entry["shapes"][0] == {
        "k": 1024,
        "n": 1024,
        "ms": [512, 1024],
        "dense_ms": [512],
        "small_ms": [8, 16],
        "gemm_small_ms": [8],
    }
    entry["shapes"][0]["ms"] = "soon"  # hand-edited: as if there were no entry of this machine
    (tmp_path / "dispatch.json").write_text(json.dumps({H100: entry}))
    dispatch._RULES.clear()
    assert dispatch.rule_for(0) == dispatch._stored(dispatch.SHIPPED_RULES, H100)


def test_the_rule_from_a_sweep_models_the_small_m_narrowing() -> None:
    """gemm_min_m: the least worst ratio over the faster of GEMV and GEMM, with the dispatch's narrowing below 16 rows
    on sm_90 (the Hopper GEMM only where gemm90.pays90 holds). Here the GEMM is 10% faster at M = 4 and 8 on a wide
    weight that pays (8192 x 28672) and 20% slower on a small one that does not (4096 x 1024): with the narrowing,
    from 4 costs nothing; without it (another GPU), from 4 costs 1.2x and the GEMV up to 16 1.1x (no M = 16 row:
    from 16 rows the GEMM runs whatever the rule)."""
    from dqgen.run.gemm90 import pays90

    wide, small = (8192, 28672), (4096, 1024)
    assert pays90(28672, 128, 4, 132) and not pays90(1024, 64, 4, 132)
    gemv = {wide: 11.0, small: 10.0}
    gemm = {wide: {1: 12.0, 4: 10.0, 8: 10.0}, small: {1: 12.0, 4: 12.0, 8: 12.0}}

    def us(path: str, M: int, K: int, N: int) -> float:
        if path == "gemv":
            return gemv[(K, N)]
        if path == "gemm":
            return gemm[(K, N)][M] if M < 16 else 5.0
        return 100.0  # dequantize + cuBLAS: never faster

    ms, shapes = [1, 4, 8, 32], [wide, small]
    assert dispatch_sweep.regret(us, 4, ms, shapes, 132) == 1.0
    assert dispatch_sweep.regret(us, 4, ms, shapes, None) == pytest.approx(1.2)
    assert dispatch_sweep.regret(us, 17, ms, shapes, None) == pytest.approx(1.1)
    rule = dispatch_sweep.rule_from_sweep(us, ms, shapes, "awq_int4_fp16", 132, True)
    assert (rule.gemm_min_m, rule.dense_min_m, rule.sweep_spec, rule.sms) == (4, None, "awq_int4_fp16", 132)
    # each shape's own choice up to 16 rows: the GEMM where it ran more than 3% faster (the wide weight at 4 and 8)
    assert rule.shapes == (
        dispatch.MeasuredShape(*wide, (32,), (), (1, 4, 8), (4, 8)),
        dispatch.MeasuredShape(*small, (32,), (), (1, 4, 8), ()),
    )
    assert dispatch_sweep.rule_from_sweep(us, ms, shapes, "awq_int4_fp16", 132, False).gemm_min_m == 17  # 1.1 < 1.2


def test_the_shipped_rule_is_the_function_of_its_recorded_rows() -> None:
    """docs/bench/gemm_dispatch.json's rule is rule_from_sweep of its own rows (on the H100's 132 SMs)."""
    record = json.loads((Path(__file__).parents[1] / "docs/bench/gemm_dispatch.json").read_text())
    rows = record["rows"]

    def us(path: str, M: int, K: int, N: int) -> float:
        return next(r["us"] for r in rows if (r["impl"], r["M"], r["K"], r["N"]) == (path, M, K, N))

    ms = sorted({r["M"] for r in rows})
    shapes = list(dict.fromkeys((r["K"], r["N"]) for r in rows))
    rule = dispatch_sweep.rule_from_sweep(us, ms, shapes, record["spec"], 132, True)
    assert dispatch.rule_entry(rule) == record["rule"]


def test_measured_shapes_keep_to_their_sm_count_and_their_code_family(gpu) -> None:
    """The shipped H100 rule's per-shape choices come from its 132 SMs' partial waves and its int4 sweep: an sm_90
    GPU of another SM count gets the rule without them, and specs of another code family, act-order specs and the
    float specs only the Hopper GEMM takes never use them."""
    import types

    names, _ = gpu
    names[2], names[3] = "NVIDIA H200", "NVIDIA H100 PCIe"
    assert dispatch.rule_for(0).shapes and dispatch.rule_for(0).sms == 132
    assert dispatch.rule_for(2).shapes  # an H200: 132 SMs too
    pcie = dispatch.rule_for(3)
    assert not pcie.shapes and pcie.gemm_min_m == dispatch.HOPPER_RULE.gemm_min_m
    from dqgen.core.spec import load_spec

    rule = dispatch.rule_for(0)

    def target(name: str, hopper_only: bool = False) -> object:
        art = types.SimpleNamespace(spec=load_spec(name))
        return types.SimpleNamespace(artifact=art, hopper_only=hopper_only)

    assert dispatch.shapes_apply(rule, target("awq_int4_fp16"))
    assert dispatch.shapes_apply(rule, target("gptq_int4_fp16"))  # the same 4-bit integer codes
    assert not dispatch.shapes_apply(rule, target("int8_fp16"))  # 8-bit: not swept
    assert not dispatch.shapes_apply(rule, target("gptq_int4_asym_act_order_fp16"))
    assert not dispatch.shapes_apply(rule, target("fp4_e2m1_bf16", hopper_only=True))
    assert not dispatch.shapes_apply(dataclasses.replace(rule, shapes=()), target("awq_int4_fp16"))
    assert not dispatch.shapes_apply(dataclasses.replace(rule, sweep_spec="no_such_spec"), target("awq_int4_fp16"))
    assert not dispatch.shapes_apply(dataclasses.replace(rule, sweep_spec=None), target("awq_int4_fp16"))


@pytest.mark.parametrize("ms", [[0, 512], [-1], "32", [1.5], [True]])
@pytest.mark.parametrize("key", ["ms", "small_ms", "gemm_small_ms"])
def test_a_rule_file_with_bad_measured_ms_is_ignored(gpu, tmp_path: Path, ms: object, key: str) -> None:
    shape = {"k": 1, "n": 1, "ms": [32], "dense_ms": [], "small_ms": [1], "gemm_small_ms": [], key: ms}
    entry = {"gemm_min_m": 17, "dense_min_m": None, "shapes": [shape]}
    (tmp_path / "dispatch.json").write_text(json.dumps({H100: entry}))
    assert dispatch.rule_for(0) == dispatch._stored(dispatch.SHIPPED_RULES, H100)


@pytest.mark.parametrize(
    "bad",
    [
        {"ms": [16, 32]},  # a dense choice's M up to 16: the GEMV's range
        {"dense_ms": [64]},  # a dense M not among the measured
        {"small_ms": [1, 32]},  # a small-M choice above 16 would decide every M up to 16 from afar
        {"gemm_small_ms": [4]},  # a GEMM choice not among the measured small M
    ],
)
def test_a_rule_file_with_inconsistent_measured_ms_is_ignored(gpu, tmp_path: Path, bad: dict) -> None:
    shape = {"k": 1, "n": 1, "ms": [32], "dense_ms": [32], "small_ms": [1, 8], "gemm_small_ms": [8], **bad}
    entry = {"gemm_min_m": 17, "dense_min_m": None, "shapes": [shape]}
    (tmp_path / "dispatch.json").write_text(json.dumps({H100: entry}))
    assert dispatch.rule_for(0) == dispatch._stored(dispatch.SHIPPED_RULES, H100)


def test_a_measured_shape_decides_gemv_or_gemm_up_to_16_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to 16 rows a shape the sweep timed takes its own measured choice at the nearest measured M, over the
    rule's gemm_min_m and the Hopper narrowing (the sweep timed the very GEMM run_gemm picks); other shapes, and a
    call the Hopper GEMM cannot take (the sm_80 rule, no shapes), keep gemm_min_m and the narrowing."""
    monkeypatch.setattr(dispatch, "is_hopper", lambda device: True)
    monkeypatch.setattr(dispatch, "hopper_pays", lambda n, k_tiles, M, device: n >= 8192)
    wide = dispatch.MeasuredShape(8192, 28672, (32,), (), (1, 4, 8, 16), (1, 8, 16))
    small = dispatch.MeasuredShape(4096, 1024, (32,), (), (1, 4, 8, 16), ())
    rule = DispatchRule(16, None, (wide, small))

    def gemm(M: int, k_n: tuple[int, int] | None, hopper_ok: bool = True) -> bool:
        n_k = None if k_n is None else (k_n[1], k_n[0] // 64)
        return dispatch.gemm_for_small_m(M, rule, 0, hopper_ok, lambda: n_k, k_n)

    assert wide.gemm_small(0) is None and wide.gemm_small(17) is None  # an empty batch; past the GEMV's rows
    # only as far as measured: a sweep up to 4 rows does not decide 16 rows, nor one from 4 rows a single row
    assert dispatch.MeasuredShape(1, 1, (), (), (1, 4), (4,)).gemm_small(8) is None
    assert dispatch.MeasuredShape(1, 1, (), (), (4, 8), (4,)).gemm_small(1) is None
    # measured: 1 and 8 the GEMM, 4 the GEMV; 2 is as near 1 as 4 (the smaller), 3 nearer 4, 12 nearer 16
    assert [gemm(M, (8192, 28672)) for M in (1, 2, 3, 4, 8, 12, 16)] == [True, True, False, False, True, True, True]
    assert not any(gemm(M, (4096, 1024)) for M in (1, 4, 8, 16))  # the GEMV, 16 rows included
    # not measured: the rule (gemm_min_m 16) with the narrowing below it
    assert [gemm(M, (8192, 8192)) for M in (1, 8, 16)] == [False, False, True]
    assert [gemm(M, None) for M in (1, 8, 16)] == [False, False, True]
    low = dataclasses.replace(rule, gemm_min_m=4)
    assert dispatch.gemm_for_small_m(8, low, 0, True, lambda: (8192, 128), None)  # pays: the GEMM from 4
    assert not dispatch.gemm_for_small_m(8, low, 0, True, lambda: (1024, 64), None)  # does not pay: the GEMV
    assert not dispatch.gemm_for_small_m(8, low, 0, False, lambda: (8192, 128), None)  # the Hopper GEMM cannot run
    # dispatch hands the verdict to pick, over the rule's gemm_min_m either way
    assert dispatch.pick(8, DispatchRule(17), gemm_ok=True, dense_ok=False, small_gemm=True) == "gemm"
    assert dispatch.pick(16, DispatchRule(4), gemm_ok=True, dense_ok=False, small_gemm=False) == "gemv"
    assert dispatch.pick(8, DispatchRule(4), gemm_ok=False, dense_ok=False, small_gemm=True) == "gemv"
