"""dqgen.core.spec: valid specs load; every invalid one raises SpecError with one line naming the
field and the offending value."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, get_args

import pytest

from dqgen.core.formats import MINIFLOATS
from dqgen.core.spec import (
    BLOCK_SCALE_DOCS,
    BLOCK_SCALE_DTYPES,
    CODEBOOK_PRESET_DOCS,
    CODEBOOK_PRESETS,
    ELEMENT_FORMATS,
    NF4_CODEBOOK,
    ORDER_PRESET_DOCS,
    ORDER_PRESETS,
    SHIPPED_SPECS,
    ZERO_MODE_DOCS,
    ScaleDtype,
    SourceKind,
    Spec,
    SpecError,
    Target,
    ZeroMode,
    load_spec,
)

ROOT = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted(SHIPPED_SPECS.glob("*.yaml"))

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
    awq = load_spec(SHIPPED_SPECS / "awq_int4_fp16.yaml")
    assert awq.order == [0, 2, 4, 6, 1, 3, 5, 7] and awq.per_word == 8 and awq.zeros.mode == "integer"
    gptq = load_spec(SHIPPED_SPECS / "gptq_int4_fp16.yaml")
    assert gptq.source.kind is SourceKind.biased and gptq.source.offset == 8 and gptq.source.short == "u4b8"
    assert gptq.order == list(range(8)) and gptq.packing.axis == "K"
    ft = load_spec(SHIPPED_SPECS / "ft_int8_fp16.yaml")
    assert ft.order == [0, 2, 1, 3] and ft.source.short == "u8b128" and ft.per_word == 4
    i8 = load_spec(SHIPPED_SPECS / "int8_bf16.yaml")
    assert i8.target is Target.bf16 and i8.source.short == "s8" and i8.sm == 80


def test_valid_variants() -> None:
    assert load_spec(spec_with(**{"packing.order": [7, 6, 5, 4, 3, 2, 1, 0]})).order == [7, 6, 5, 4, 3, 2, 1, 0]
    assert load_spec(spec_with(**{"source.bits": 2, "packing.order": "sequential"})).per_word == 16
    assert load_spec(spec_with(**{"scales.group_size": -1})).scales.group_size == -1
    assert load_spec(spec_with(arch="sm_90a")).sm == 90
    assert load_spec(spec_with(target="bf16", arch="sm_80")).target is Target.bf16
    assert load_spec(spec_with(**{"source.kind": "biased", "source.bias": 0})).source.offset == 0
    assert (
        load_spec(
            spec_with(**{"packing.axis": "K", "packing.order": "sequential", "scales.group_size": 64})
        ).packing.axis
        == "K"
    )
    text = "name: y\nsource: {bits: 8, kind: signed}\ntarget: fp16\npacking: {axis: N}\nscales: {group_size: -1}\n"
    assert load_spec(text).order == [0, 1, 2, 3]


INVALID: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "non-permutation order",
        spec_with(**{"packing.order": [0, 1, 2, 3, 4, 5, 6, 6]}),
        ("packing.order", "[0, 1, 2, 3, 4, 5, 6, 6]"),
    ),
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
    (
        "integer zeros with signed kind",
        spec_with(**{"source.kind": "signed", "zeros.mode": "integer"}),
        ("zeros.mode", "integer", "signed"),
    ),
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


@pytest.mark.parametrize("bits", [0, 5, 7, 9])
def test_unsolvable_widths_are_spec_errors(bits: int) -> None:
    # 5-7-bit codes would straddle words in 5-7-word blocks that no strategy places: refused by the
    # schema, not by the solver after the fact
    with pytest.raises(SpecError) as ei:
        load_spec(
            {
                "name": "w",
                "source": {"bits": bits, "kind": "unsigned"},
                "target": "fp16",
                "packing": {"axis": "K"},
                "scales": {"group_size": -1},
            }
        )
    assert "[source.bits]" in str(ei.value) and f"got {bits}" in str(ei.value) and "1, 2, 3, 4, 6, 8" in str(ei.value)


def test_six_bit_codes_are_fp6_minifloats_only() -> None:
    # 6 bits is solved for the FP6 minifloats (e2m3, e3m2) only, not for 6-bit integer codes
    with pytest.raises(SpecError) as ei:
        load_spec(
            {
                "name": "w",
                "source": {"bits": 6, "kind": "unsigned"},
                "target": "fp16",
                "packing": {"axis": "K"},
                "scales": {"group_size": -1},
            }
        )
    msg = str(ei.value)
    assert "[source.bits]" in msg and "kind 'float' only" in msg and "e2m3 / e3m2" in msg and "\n" not in msg


def test_file_error_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text(
        "name: x\nsource: {bits: 9, kind: unsigned}\ntarget: fp16\npacking: {axis: N}\nscales: {group_size: 1}\n"
    )
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    msg = str(ei.value)
    assert msg.startswith(str(p)) and "source.bits" in msg and "9" in msg


# ------------------------------------------------------------------ issue #5: minifloat, codebook, 3-bit, block scales

# Each new format on its own, packed along K (where 3-bit codes and block scales must be).
E4M3 = {"bits": 8, "kind": "float", "format": "e4m3"}
E5M2 = {"bits": 8, "kind": "float", "format": "e5m2"}
E2M1 = {"bits": 4, "kind": "float", "format": "e2m1"}
NF4 = {"bits": 4, "kind": "codebook", "codebook": "nf4"}
U3B4 = {"bits": 3, "kind": "biased", "bias": 4}
MXFP4_SCALES = {"group_size": 32, "dtype": "e8m0"}
NVFP4_SCALES = {"group_size": 16, "dtype": "e4m3", "global_scale": True}


def k_spec(source: dict[str, Any], group_size: int = 128, **changes: Any) -> dict[str, Any]:
    """A spec packed sequentially along K with ``source`` and per-group fp16 scales, plus dotted changes."""
    return spec_with(
        **{
            "source": copy.deepcopy(source),
            "packing": {"axis": "K", "order": "sequential"},
            "scales.group_size": group_size,
            **copy.deepcopy(changes),
        }
    )


def test_new_formats_load() -> None:
    for src, fmt, bits in ((E4M3, "e4m3", 8), (E5M2, "e5m2", 8), (E2M1, "e2m1", 4)):
        for axis in ("K", "N"):
            s = load_spec(k_spec(src, **{"packing.axis": axis}))
            assert s.source.kind is SourceKind.float and s.source.short == fmt and s.per_word == 32 // bits
            assert s.source.scalar_type is MINIFLOATS[fmt] and not s.scales.block and s.words == 1

    nf4 = load_spec(k_spec(NF4))
    assert nf4.source.codebook_values == CODEBOOK_PRESETS["nf4"] and nf4.source.short == "nf4" and nf4.per_word == 8
    assert load_spec(k_spec(NF4, target="bf16", **{"packing.axis": "N"})).target is Target.bf16
    user = load_spec(k_spec({"bits": 4, "kind": "codebook", "codebook": [-1.0, -0.5, 0, 0.5, 1.0]}))
    assert user.source.codebook_values == [-1.0, -0.5, 0.0, 0.5, 1.0] and user.source.short == "cb4"

    mx = load_spec(k_spec(E2M1, scales=MXFP4_SCALES))
    assert mx.scales.block and mx.scales.dtype is ScaleDtype.e8m0 and not mx.scales.global_scale
    nv = load_spec(k_spec(E2M1, scales=NVFP4_SCALES))
    assert nv.scales.block and nv.scales.dtype is ScaleDtype.e4m3 and nv.scales.global_scale
    assert load_spec(k_spec(E2M1, target="bf16", scales=NVFP4_SCALES)).target is Target.bf16

    for words in (None, 3):  # derived, or stated and matching
        u3 = load_spec(k_spec(U3B4, **({"packing.words": words} if words else {})))
        assert (u3.words, u3.per_word, u3.source.short, u3.source.offset) == (3, 32, "u3b4", 4)
        assert u3.order == list(range(32))
    assert load_spec(k_spec(U3B4, zeros={"mode": "float"})).zeros.mode == "float"
    u2 = load_spec(k_spec({"bits": 2, "kind": "biased", "bias": 2}))
    assert (u2.words, u2.per_word, u2.source.short) == (1, 16, "u2b2")


def test_new_format_yaml_loads() -> None:
    text = (
        "name: mxfp4\nsource: {bits: 4, kind: float, format: e2m1}\ntarget: bf16\n"
        "packing: {axis: K}\nscales: {group_size: 32, dtype: e8m0}\n"
    )
    assert load_spec(text).scales.dtype is ScaleDtype.e8m0


INVALID_V5: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    # zero points shift integer codes: none with a minifloat or a codebook
    *[
        (f"{mode} zeros with {name}", k_spec(src, zeros={"mode": mode}), ("[zeros.mode]", repr(mode), "'none'", name))
        for mode in ("integer", "gptq_v1", "float", "additive")
        for name, src in (("e4m3", E4M3), ("e2m1", E2M1), ("nf4", NF4))
    ],
    # block scales
    (
        "NVFP4 without global_scale",
        k_spec(E2M1, scales={"group_size": 16, "dtype": "e4m3"}),
        ("[scales.global_scale]", "False", "true", "e4m3"),
    ),
    (
        "global_scale with e8m0",
        k_spec(E2M1, scales={**MXFP4_SCALES, "global_scale": True}),
        ("[scales.global_scale]", "True", "false", "e8m0"),
    ),
    (
        "global_scale with fp16 scales",
        k_spec(E2M1, scales={"group_size": 32, "global_scale": True}),
        ("[scales.global_scale]", "True", "false", "e4m3"),
    ),
    (
        "global_scale with explicit fp16 scales",
        k_spec(E2M1, scales={"group_size": 32, "dtype": "fp16", "global_scale": True}),
        ("[scales.global_scale]", "True", "false"),
    ),
    ("e8m0 scales with e4m3 codes", k_spec(E4M3, scales=MXFP4_SCALES), ("[scales.dtype]", "'e8m0'", "e2m1", "e4m3")),
    ("e4m3 scales with nf4 codes", k_spec(NF4, scales=NVFP4_SCALES), ("[scales.dtype]", "'e4m3'", "e2m1", "nf4")),
    (
        "e8m0 scales with integer codes",
        k_spec({"bits": 4, "kind": "unsigned"}, scales=MXFP4_SCALES),
        ("[scales.dtype]", "'e8m0'", "e2m1", "u4"),
    ),
    (
        "block scales packed along N",
        k_spec(E2M1, scales=MXFP4_SCALES, **{"packing.axis": "N"}),
        ("[packing.axis]", "'N'", "'K'", "e8m0"),
    ),
    (
        "block scales with group_size -1",
        k_spec(E2M1, scales={**MXFP4_SCALES, "group_size": -1}),
        ("[scales.group_size]", "-1", "positive"),
    ),
    (
        "NVFP4 with group_size -1",
        k_spec(E2M1, scales={**NVFP4_SCALES, "group_size": -1}),
        ("[scales.group_size]", "-1", "positive"),
    ),
    (
        "act_order with e8m0 block scales",
        k_spec(E2M1, scales=MXFP4_SCALES, act_order=True),
        ("[act_order]", "True", "block scales"),
    ),
    (
        "act_order with e4m3 block scales",
        k_spec(E2M1, scales=NVFP4_SCALES, act_order=True),
        ("[act_order]", "True", "block scales"),
    ),
    (
        "unknown scale dtype",
        k_spec(E2M1, scales={"group_size": 32, "dtype": "e5m2"}),
        ("[scales.dtype]", "'e5m2'", "e8m0"),
    ),
    # codebooks
    (
        "codebook with 17 entries",
        k_spec({"bits": 4, "kind": "codebook", "codebook": [float(i) for i in range(17)]}),
        ("[source.codebook]", "17", "16"),
    ),
    ("empty codebook", k_spec({"bits": 4, "kind": "codebook", "codebook": []}), ("[source.codebook]", "got 0")),
    (
        "codebook on 3-bit codes",
        k_spec({"bits": 3, "kind": "codebook", "codebook": [0.0, 1.0]}),
        ("[source.bits]", "3", "4 bits"),
    ),
    (
        "nf4 on 3-bit codes",
        k_spec({"bits": 3, "kind": "codebook", "codebook": "nf4"}),
        ("[source.bits]", "3", "4 bits"),
    ),
    (
        "unknown codebook preset",
        k_spec({"bits": 4, "kind": "codebook", "codebook": "nf5"}),
        ("[source.codebook]", "'nf5'", "nf4"),
    ),
    (
        "codebook with inf",
        k_spec({"bits": 4, "kind": "codebook", "codebook": [1.0, float("inf")]}),
        ("[source.codebook]", "finite", "inf", "entry 1"),
    ),
    (
        "codebook entry past fp16",
        k_spec({"bits": 4, "kind": "codebook", "codebook": [0.5, 70000.0]}),
        ("[source.codebook]", "70000", "fp16 range", "inf"),
    ),
    (
        "codebook of strings",
        k_spec({"bits": 4, "kind": "codebook", "codebook": ["x"]}),
        ("[source.codebook]", "['x']", "preset name", "list of 1 to 16 numbers"),
    ),
    (
        "codebook of booleans",
        k_spec({"bits": 4, "kind": "codebook", "codebook": [True, False]}),
        ("[source.codebook]", "[True, False]", "numbers"),
    ),
    (
        "codebook mapping",
        k_spec({"bits": 4, "kind": "codebook", "codebook": {"a": 1}}),
        ("[source.codebook]", "{'a': 1}", "preset name"),
    ),
    ("codebook kind without codebook", k_spec({"bits": 4, "kind": "codebook"}), ("[source.codebook]", "needs", "nf4")),
    (
        "codebook on an integer kind",
        k_spec({"bits": 4, "kind": "unsigned", "codebook": "nf4"}),
        ("[source.codebook]", "'unsigned'"),
    ),
    # bits that do not divide the stated packing
    ("3-bit with packing.words 1", k_spec(U3B4, **{"packing.words": 1}), ("[packing.words]", "got 1", "3")),
    ("3-bit with packing.words 2", k_spec(U3B4, **{"packing.words": 2}), ("[packing.words]", "got 2", "3")),
    (
        "4-bit with packing.words 3",
        k_spec({"bits": 4, "kind": "unsigned"}, **{"packing.words": 3}),
        ("[packing.words]", "got 3", "1"),
    ),
    ("3-bit packed along N", k_spec(U3B4, **{"packing.axis": "N"}), ("[packing.axis]", "'N'", "'K'", "3-bit")),
    (
        "3-bit with the awq order",
        k_spec(U3B4, **{"packing.order": "awq"}),
        ("[packing.order]", "'awq'", "'sequential'", "3-bit"),
    ),
    (
        "3-bit with packed integer zeros",
        k_spec({"bits": 3, "kind": "unsigned"}, zeros={"mode": "integer"}),
        ("[zeros.mode]", "'integer'", "3-bit"),
    ),
    ("3-bit group not a multiple of 32", k_spec(U3B4, group_size=16), ("[scales.group_size]", "16", "32")),
    # minifloat formats
    ("e4m3 with bits 4", k_spec({**E4M3, "bits": 4}), ("[source.bits]", "e4m3", "8", "4")),
    ("e2m1 with bits 8", k_spec({**E2M1, "bits": 8}), ("[source.bits]", "e2m1", "4", "8")),
    (
        "kind float without format",
        k_spec({"bits": 8, "kind": "float"}),
        ("[source.format]", "float", "e4m3", "e5m2", "e2m1"),
    ),
    (
        "unknown minifloat format",
        k_spec({"bits": 8, "kind": "float", "format": "e3m4"}),
        ("[source.format]", "e3m4", "e4m3"),
    ),
    (
        "format on an unsigned kind",
        k_spec({"bits": 8, "kind": "unsigned", "format": "e4m3"}),
        ("[source.format]", "e4m3", "'float'", "'unsigned'"),
    ),
    (
        "format on a biased kind",
        k_spec({"bits": 8, "kind": "biased", "bias": 128, "format": "e4m3"}),
        ("[source.format]", "e4m3", "'float'", "'biased'"),
    ),
    ("format on a codebook kind", k_spec({**NF4, "format": "e2m1"}), ("[source.format]", "e2m1", "'codebook'")),
]


def test_codebook_past_fp16_is_fine_for_bf16() -> None:
    spec = load_spec(k_spec({"bits": 4, "kind": "codebook", "codebook": [0.5, 70000.0]}, target="bf16"))
    assert spec.source.codebook_values == [0.5, 70000.0]


@pytest.mark.parametrize("data,needles", [(d, n) for _, d, n in INVALID_V5], ids=[c for c, _, _ in INVALID_V5])
def test_invalid_new_format_spec(data: dict[str, Any], needles: tuple[str, ...]) -> None:
    """One line that names the field (as [field]), the value and what is expected."""
    with pytest.raises(SpecError) as ei:
        load_spec(data)
    msg = str(ei.value)
    assert "\n" not in msg and msg.count("[") >= 1
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"


def test_invalid_new_format_yaml_names_file_and_field(tmp_path: Path) -> None:
    p = tmp_path / "nvfp4.yaml"
    p.write_text(
        "name: nvfp4\nsource: {bits: 4, kind: float, format: e2m1}\ntarget: fp16\n"
        "packing: {axis: K}\nscales: {group_size: 16, dtype: e4m3}\n"
    )
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}: [scales.global_scale]") and "\n" not in msg


# ------------------------------------------------------------------------- presets and their descriptions (dqgen list)


def test_every_preset_has_a_one_line_description() -> None:
    assert set(ORDER_PRESET_DOCS) == set(ORDER_PRESETS)
    assert set(CODEBOOK_PRESET_DOCS) == set(CODEBOOK_PRESETS)
    assert set(ELEMENT_FORMATS) == {"e4m3", "e5m2", "e2m1", "e2m3", "e3m2"}
    assert set(BLOCK_SCALE_DOCS) == set(BLOCK_SCALE_DTYPES) <= {d.value for d in ScaleDtype}
    assert set(ZERO_MODE_DOCS) == set(get_args(ZeroMode))
    element_docs = {n: f.doc for n, f in ELEMENT_FORMATS.items()}
    for docs in (ORDER_PRESET_DOCS, CODEBOOK_PRESET_DOCS, element_docs, BLOCK_SCALE_DOCS, ZERO_MODE_DOCS):
        for name, line in docs.items():
            assert line.strip() and "\n" not in line, name


def test_element_formats_are_the_registry_rows() -> None:
    """source.format accepts exactly the registry's element rows, and a code's width is its row's width."""
    for name, f in ELEMENT_FORMATS.items():
        assert f is MINIFLOATS[name] and "element" in f.roles and f.is_float, name
        s = load_spec(k_spec({"bits": f.width, "kind": "float", "format": name}))
        assert s.source.scalar_type is f
    for name in BLOCK_SCALE_DTYPES:
        assert MINIFLOATS[name].width == 8, name
    assert (
        len(NF4_CODEBOOK) == 16
        and sorted(NF4_CODEBOOK) == NF4_CODEBOOK
        and (NF4_CODEBOOK[0], NF4_CODEBOOK[-1]) == (-1.0, 1.0)
    )


# ---- issue 11: hostile or sloppy input (items 9-13, 15) ----------------------------------------------------------

BASE_YAML = """name: t
source: {bits: 4, kind: unsigned}
target: fp16
packing: {axis: N, order: awq}
scales: {group_size: 128}
"""


def _one_line_error(source: Any) -> str:
    with pytest.raises(SpecError) as exc:
        load_spec(source)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_alias_bomb_is_refused_fast_with_a_short_message() -> None:
    # "billion laughs": 9 levels of 9 aliases each, 9^9 strings in a description, in well under 1 KB
    levels = ['a0: &a0 "lol"'] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = "\n".join(levels) + "\n" + BASE_YAML + "description: *a8\n"
    assert len(bomb) < 1000
    import time

    t0 = time.perf_counter()
    msg = _one_line_error(bomb)
    assert time.perf_counter() - t0 < 2
    assert "expands to more than 10000 nodes" in msg
    assert len(msg) < 300


def test_moderate_aliases_still_load() -> None:
    # anchors are fine while the expanded document stays small
    text = BASE_YAML.replace("{axis: N, order: awq}", "{<<: &p {axis: N, order: sequential}, order: awq}")
    text += "description: &d 'a'\nzeros: {<<: {mode: integer}}\n"
    spec = load_spec(text)
    assert spec.packing.order == "awq" and spec.zeros.mode == "integer"


def test_recursive_alias_is_refused() -> None:
    msg = _one_line_error(BASE_YAML + "description: &d [1, *d]\n")
    assert "recursive alias" in msg


def test_bad_long_value_is_shown_truncated() -> None:
    msg = _one_line_error(spec_with(arch="sm_" + "x" * 5000))
    assert msg.startswith("spec: [arch]")
    assert "\u2026" in msg and len(msg) < 200
    msg = _one_line_error(spec_with(description=["lol"] * 100_000))
    assert msg.startswith("spec: [description]") and len(msg) < 300


@pytest.mark.parametrize("name", ["int", "namespace", "asm", "extern", "class", "__global__", "_Foo", "a__b"])
def test_name_keywords_and_reserved_identifiers_refused(name: str) -> None:
    msg = _one_line_error(spec_with(name=name))
    assert msg.startswith("spec: [name]")
    assert "keyword" in msg or "reserved" in msg


@pytest.mark.parametrize("name", ["9lives", "a-b", "caf\u00e9", "x\n", "", "a b"])
def test_name_must_be_an_ascii_c_identifier(name: str) -> None:
    assert "C identifier" in _one_line_error(spec_with(name=name))


def test_name_ok_forms() -> None:
    for name in ("_foo", "Int", "awq_int4_fp16", "x" * 64):
        assert load_spec(spec_with(name=name)).name == name


def test_name_length_bounded() -> None:
    msg = _one_line_error(spec_with(name="x" * 5000))
    assert msg.startswith("spec: [name]") and "at most 64 characters, got 5000" in msg


@pytest.mark.parametrize("arch", ["sm_80\n", "sm_\u0668\u0660", "sm_80 ", " sm_80", "sm_90ax", "SM_80"])
def test_arch_pattern_is_ascii_and_full(arch: str) -> None:
    assert _one_line_error(spec_with(arch=arch)).startswith("spec: [arch]")


@pytest.mark.parametrize("arch", ["sm_1000", "sm_81", "sm_99", "sm_130"])
def test_arch_nvrtc_cannot_target_is_refused(arch: str) -> None:
    msg = _one_line_error(spec_with(arch=arch))
    assert msg.startswith("spec: [arch]") and "not an architecture NVRTC 13 targets" in msg


def test_arch_list_matches_nvrtc() -> None:
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    from dqgen.core.spec import NVRTC_ARCHS

    err, major, _ = nvrtc.nvrtcVersion()
    if major != 13:
        pytest.skip(f"NVRTC_ARCHS lists NVRTC 13's targets; this is NVRTC {major}")
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    assert int(err) == 0
    assert tuple(archs) == NVRTC_ARCHS
    for sm in archs:
        assert load_spec(spec_with(arch=f"sm_{sm}")).sm == sm


@pytest.mark.parametrize(
    "field,value",
    [
        ("source.bits", "4"),
        ("source.bits", 4.0),
        ("source.bits", True),
        ("scales.group_size", "128"),
        ("scales.group_size", 128.0),
        ("scales.group_size", 1e30),
        ("act_order", "yes"),
        ("act_order", 1),
        ("packing.words", 1.0),
        ("packing.container", 32.0),
        ("packing.order", [0, 2, 4, 6, 1, 3, 5, 7.0]),
        ("packing.order", [False, 2, 4, 6, 1, 3, 5, 7]),
        ("scales.global_scale", "false"),
        ("name", 5),
        ("description", 5),
    ],
)
def test_no_lax_coercion(field: str, value: object) -> None:
    msg = _one_line_error(spec_with(**{field: value}))
    assert msg.startswith(f"spec: [{field}")


@pytest.mark.parametrize(
    "line", ['bits: "4"', "bits: 4.0", "bits: true", "bits: 0x4.0"], ids=["str", "float", "bool", "hexfloat"]
)
def test_no_lax_coercion_from_yaml(line: str) -> None:
    text = BASE_YAML.replace("source: {bits: 4, kind: unsigned}", "source:\n  kind: unsigned\n  " + line)
    assert _one_line_error(text).startswith("spec: [source.bits]")


@pytest.mark.parametrize("value", ["1e30", "1.0e30", str(2**31), str(10**400)])
def test_group_size_bounded(value: str) -> None:
    text = BASE_YAML.replace("group_size: 128", f"group_size: {value}")
    msg = _one_line_error(text)
    assert msg.startswith("spec: [scales.group_size]") and len(msg) < 300


def test_duplicate_keys_refused_naming_key_and_line(tmp_path: Path) -> None:
    f = tmp_path / "dup.yaml"
    f.write_text(BASE_YAML + "target: bf16\n")
    msg = _one_line_error(f)
    assert msg.startswith(f"{f}: not valid YAML") and "duplicate key 'target' on line 6 (first on line 3)" in msg
    nested = BASE_YAML.replace("{bits: 4, kind: unsigned}", "{bits: 4, kind: unsigned, bits: 8}")
    assert "duplicate key 'bits' on line 2" in _one_line_error(nested)


def test_strict_specs_still_take_enum_names() -> None:
    s = load_spec(spec_with(target="bf16", **{"scales.dtype": "bf16"}))
    assert s.target is Target.bf16 and s.scales.dtype is ScaleDtype.bf16


def test_special_files_refused_without_reading(tmp_path: Path) -> None:
    import os
    import threading

    assert "not a regular file" in _one_line_error("/dev/zero")
    assert "not a regular file" in _one_line_error(str(tmp_path))
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    result: list[str] = []

    def load() -> None:
        try:
            load_spec(fifo)
        except SpecError as e:
            result.append(str(e))

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "load_spec blocked opening a FIFO"
    assert result == [f"{fifo}: not a regular file (expected a YAML spec file)"]


def test_huge_spec_file_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate(2 << 20)  # sparse: 2 MiB of zeros on no disk
    msg = _one_line_error(big)
    assert msg == f"{big}: {2 << 20} bytes; a spec file has at most {1 << 20} bytes"


def test_load_spec_refuses_other_types() -> None:
    with pytest.raises(TypeError, match=r"^spec: expected a dqgen Spec, .* got int$"):
        load_spec(5)  # type: ignore[arg-type]


def test_unknown_huge_key_is_shown_short() -> None:
    msg = _one_line_error(spec_with(**{"k" * 100_000: 1}))
    assert msg.startswith("spec: [kkkk") and msg.endswith("\u2026] is not a known field") and len(msg) < 200


def test_overlong_path_is_shown_short() -> None:
    msg = _one_line_error("a" * 5000)
    assert msg.endswith("\u2026: cannot read the spec: File name too long") and len(msg) < 400
