"""dqgen.spec: valid specs load; every invalid one raises SpecError with one line naming the
field and the offending value."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dqgen.spec import SourceKind, Spec, SpecError, Target, load_spec

ROOT = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted((ROOT / "specs").glob("*.yaml"))

BASE: dict[str, Any] = {
    "name": "t",
    "source": {"bits": 4, "kind": "unsigned"},
    "target": "fp16",
    "packing": {"axis": "N", "order": "awq"},
    "scales": {"group_size": 128},
}


def spec_with(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path changes, e.g. spec_with(**{"source.bits": 3})."""
    d = copy.deepcopy(BASE)
    for path, value in changes.items():
        *head, last = path.split(".")
        cur = d
        for k in head:
            cur = cur.setdefault(k, {})
        cur[last] = value
    return d


def test_shipped_specs_load() -> None:
    assert len(SPEC_FILES) >= 8
    for f in SPEC_FILES:
        s = load_spec(f)
        assert isinstance(s, Spec) and s.name == f.stem
        assert load_spec(str(f)).model_dump() == s.model_dump()


def test_shipped_spec_contents() -> None:
    awq = load_spec(ROOT / "specs" / "awq_int4_fp16.yaml")
    assert awq.order == [0, 2, 4, 6, 1, 3, 5, 7] and awq.per_word == 8 and awq.zeros.mode == "integer"
    gptq = load_spec(ROOT / "specs" / "gptq_int4_fp16.yaml")
    assert gptq.source.kind is SourceKind.biased and gptq.source.offset == 8 and gptq.source.short == "u4b8"
    assert gptq.order == list(range(8)) and gptq.packing.axis == "K"
    ft = load_spec(ROOT / "specs" / "ft_int8_fp16.yaml")
    assert ft.order == [0, 2, 1, 3] and ft.source.short == "u8b128" and ft.per_word == 4
    i8 = load_spec(ROOT / "specs" / "int8_bf16.yaml")
    assert i8.target is Target.bf16 and i8.source.short == "s8" and i8.sm == 80


def test_valid_variants() -> None:
    assert load_spec(spec_with(**{"packing.order": [7, 6, 5, 4, 3, 2, 1, 0]})).order == [7, 6, 5, 4, 3, 2, 1, 0]
    assert load_spec(spec_with(**{"source.bits": 2, "packing.order": "sequential"})).per_word == 16
    assert load_spec(spec_with(**{"scales.group_size": -1})).scales.group_size == -1
    assert load_spec(spec_with(arch="sm_90a")).sm == 90
    assert load_spec(spec_with(target="bf16", arch="sm_80")).target is Target.bf16
    assert load_spec(spec_with(**{"source.kind": "biased", "source.bias": 0})).source.offset == 0
    assert load_spec(spec_with(**{"packing.axis": "K", "packing.order": "sequential", "scales.group_size": 64})).packing.axis == "K"
    text = "name: y\nsource: {bits: 8, kind: signed}\ntarget: fp16\npacking: {axis: N}\nscales: {group_size: -1}\n"
    assert load_spec(text).order == [0, 1, 2, 3]


INVALID: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("non-permutation order", spec_with(**{"packing.order": [0, 1, 2, 3, 4, 5, 6, 6]}), ("packing.order", "[0, 1, 2, 3, 4, 5, 6, 6]")),
    ("order of wrong length", spec_with(**{"packing.order": [0, 1, 2, 3]}), ("packing.order", "[0, 1, 2, 3]")),
    ("unknown preset", spec_with(**{"packing.order": "zigzag"}), ("packing.order", "zigzag")),
    ("preset for other bits", spec_with(**{"source.bits": 8}), ("packing.order", "awq", "8")),
    ("bits 3", spec_with(**{"source.bits": 3, "packing.order": "sequential"}), ("packing.axis", "3-bit")),
    ("bits 0", spec_with(**{"source.bits": 0, "packing.order": "sequential"}), ("source.bits", "0")),
    ("bits 16", spec_with(**{"source.bits": 16, "packing.order": "sequential"}), ("source.bits", "16")),
    ("group_size 0", spec_with(**{"scales.group_size": 0}), ("scales.group_size", "0")),
    ("group_size -2", spec_with(**{"scales.group_size": -2}), ("scales.group_size", "-2")),
    ("unknown target", spec_with(target="fp8"), ("target", "fp8")),
    ("bf16 on sm_75", spec_with(target="bf16", arch="sm_75"), ("arch", "sm_75", "bf16")),
    ("bad arch string", spec_with(arch="sm80"), ("arch", "sm80")),
    ("arch too old", spec_with(arch="sm_70"), ("arch", "sm_70")),
    ("biased without bias", spec_with(**{"source.kind": "biased"}), ("source", "bias", "biased")),
    ("bias out of range", spec_with(**{"source.kind": "biased", "source.bias": 16}), ("source", "bias", "16")),
    ("negative bias", spec_with(**{"source.kind": "biased", "source.bias": -1}), ("source", "bias", "-1")),
    ("bias with unsigned kind", spec_with(**{"source.bias": 8}), ("source", "bias", "unsigned")),
    ("integer zeros with signed kind", spec_with(**{"source.kind": "signed", "zeros.mode": "integer"}), ("zeros.mode", "integer", "signed")),
    (
        "K packing with group size not a multiple of 8",
        spec_with(**{"packing.axis": "K", "packing.order": "sequential", "scales.group_size": 100}),
        ("scales.group_size", "100"),
    ),
    ("scale dtype differs from target", spec_with(**{"scales.dtype": "bf16"}), ("scales.dtype", "bf16")),
    ("unknown extra field", spec_with(colour="blue"), ("colour", "not a known field")),
    ("unknown nested field", spec_with(**{"source.signedness": "x"}), ("source.signedness", "not a known field")),
    ("missing field", {k: v for k, v in BASE.items() if k != "target"}, ("target", "required")),
    ("bad name", spec_with(name="1bad"), ("name", "1bad")),
]


@pytest.mark.parametrize("data,needles", [(d, n) for _, d, n in INVALID], ids=[c for c, _, _ in INVALID])
def test_invalid_spec(data: dict[str, Any], needles: tuple[str, ...]) -> None:
    with pytest.raises(SpecError) as ei:
        load_spec(data)
    msg = str(ei.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"


def test_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "nope.yaml"
    for src in (p, str(p)):
        with pytest.raises(SpecError) as ei:
            load_spec(src)
        assert str(p) in str(ei.value) and "no such" in str(ei.value) and "\n" not in str(ei.value)


def test_invalid_yaml(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nsource: {bits: 4\n")
    for src in (p, "name: [unclosed\n"):
        with pytest.raises(SpecError) as ei:
            load_spec(src)
        msg = str(ei.value)
        assert "YAML" in msg and "\n" not in msg
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    assert str(p) in str(ei.value)


def test_yaml_not_a_mapping() -> None:
    with pytest.raises(SpecError) as ei:
        load_spec("- 1\n- 2\n")
    assert "mapping" in str(ei.value) and "list" in str(ei.value)


def test_file_error_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text("name: x\nsource: {bits: 9, kind: unsigned}\ntarget: fp16\npacking: {axis: N}\nscales: {group_size: 1}\n")
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    msg = str(ei.value)
    assert msg.startswith(str(p)) and "source.bits" in msg and "9" in msg
