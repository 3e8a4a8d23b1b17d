"""Where Kernel.matmul's dispatch rule comes from (dqgen.run.dispatch.rule_for): this machine's measurement, else
the rule measured for the release on a GPU of that name (shipped in the wheel), else the defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dqgen.run import dispatch
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
    monkeypatch.setattr(dispatch, "_RULES", {})
    monkeypatch.setattr(dispatch, "_NAMES", {})
    return names, asked


def test_the_shipped_h100_rule_is_the_committed_measurement(gpu) -> None:
    # docs/bench/gemm_dispatch.json is what devtools/gemm_dispatch_rule.py printed on the H100: the wheel ships it
    measured = json.loads((Path(__file__).parents[1] / "docs/bench/gemm_dispatch.json").read_text())
    assert measured["gpu"] == H100
    assert dispatch.rule_for(0) == DispatchRule(**measured["rule"])


def test_this_machines_measurement_wins_and_unknown_gpus_get_the_defaults(gpu, tmp_path: Path) -> None:
    (tmp_path / "dispatch.json").write_text(json.dumps({H100: {"gemm_min_m": 17, "dense_min_m": None}}))
    assert dispatch.rule_for(0) == DispatchRule(17, None)
    names, asked = gpu
    names[1] = "Some Future GPU"
    assert dispatch.rule_for(1) == DispatchRule()
    assert dispatch.rule_for(0) == DispatchRule(17, None) and dispatch.rule_for(1) == DispatchRule()
    assert asked == [0, 1]  # the driver is asked each device's name once


def test_an_sm90_gpu_without_a_rule_gets_the_hopper_rule(gpu) -> None:
    """An H200 (no measurement of its own, none shipped) takes the H100's Hopper rule, not the sm_80 defaults: the
    defaults send M >= 512 to dequantize + cuBLAS, which the Hopper GEMM beats (docs/bench/gemm_dispatch.json)."""
    names, _ = gpu
    names[2] = "NVIDIA H200"
    shipped = json.loads(dispatch.SHIPPED_RULES.read_text())[H100]
    assert dispatch.rule_for(2) == dispatch.HOPPER_RULE == DispatchRule(shipped["gemm_min_m"], shipped["dense_min_m"])
    assert DispatchRule() != dispatch.HOPPER_RULE


@pytest.mark.parametrize(
    "text", ["{not json", "[1, 2]", json.dumps({H100: "fast"}), json.dumps({H100: {"dense_min_m": "soon"}})]
)
def test_a_damaged_machine_rule_falls_back_to_the_shipped_one(gpu, tmp_path: Path, text: str) -> None:
    (tmp_path / "dispatch.json").write_text(text)
    shipped = json.loads(dispatch.SHIPPED_RULES.read_text())[H100]
    assert dispatch.rule_for(0) == DispatchRule(shipped["gemm_min_m"], shipped["dense_min_m"])


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
