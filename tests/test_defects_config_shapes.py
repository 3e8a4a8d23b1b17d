"""Issue 26: a checkpoint's JSON of the wrong shape (an index whose weight_map is an array, a quantization_config
that is a string, a zero_point written "false") is named in one line, by its field and the JSON type it holds,
instead of a Python exception's text ("'list' object has no attribute 'values'") or "has no quantization_config"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dqgen.io.hf_config import parse_config, read_config
from dqgen.io.safetensors_io import safetensors_files

#: Python's own wording, which a message about a user's file must not carry.
PYTHON_INTERNALS = re.compile(
    r"object has no attribute|not supported between|indices must be|codec can't|'list'|'dict'"
)


def _one_line(exc: pytest.ExceptionInfo[ValueError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and not PYTHON_INTERNALS.search(msg), msg
    return msg


@pytest.mark.parametrize(
    "doc,expected",
    [
        ([1, 2], "expected a JSON object with a weight_map, got an array"),
        ({"weight_map": []}, "[weight_map] got an array; expected an object of tensor -> shard file name"),
        ({"weight_map": "model.safetensors"}, "[weight_map] got a string; expected an object"),
        ({"weight_map": {"a.weight": 1, "b.weight": "x.safetensors"}}, "[weight_map] 'a.weight' got a number"),
        ({"weight_map": {"a.weight": None}}, "[weight_map] 'a.weight' got null; expected a shard file name"),
        ({"metadata": {}}, "the JSON object has no weight_map"),
    ],
)
def test_index_of_the_wrong_shape_names_the_field(tmp_path: Path, doc: object, expected: str) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps(doc))
    for path in (index, tmp_path):  # the index itself, or the folder that holds it
        with pytest.raises(ValueError) as exc:
            safetensors_files(path)
        msg = _one_line(exc)
        assert msg.startswith(f"{index}: not a safetensors index") and expected in msg, msg


def test_index_that_is_not_text_says_so(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError) as exc:
        safetensors_files(index)
    assert _one_line(exc) == f"{index}: not a safetensors index (not a UTF-8 text file)"


@pytest.mark.parametrize("qc,kind", [([], "an array"), ("awq", "a string"), (4, "a number"), (True, "true/false")])
def test_wrong_typed_quantization_config_is_not_reported_missing(tmp_path: Path, qc: object, kind: str) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "quantization_config": qc})
    )
    with pytest.raises(ValueError) as exc:
        read_config(tmp_path)
    msg = _one_line(exc)
    assert msg.startswith(f"{tmp_path / 'config.json'}: [quantization_config] got {kind}; expected an object"), msg
    assert "has no quantization_config" not in msg


def test_missing_quantization_config_is_still_reported_missing(tmp_path: Path) -> None:
    for doc in ({"architectures": []}, {"quantization_config": None}):
        (tmp_path / "config.json").write_text(json.dumps(doc))
        with pytest.raises(ValueError, match="has no quantization_config"):
            read_config(tmp_path)


def test_config_file_that_is_not_text_or_an_object(tmp_path: Path) -> None:
    config = tmp_path / "quantize_config.json"
    config.write_bytes(b"\xff{")
    with pytest.raises(ValueError) as exc:
        read_config(tmp_path)
    assert _one_line(exc) == f"{config}: expected a JSON object (not a UTF-8 text file)"
    config.write_text("[4]")
    with pytest.raises(ValueError) as exc:
        read_config(tmp_path)
    assert _one_line(exc) == f"{config}: expected a JSON object, got an array"


@pytest.mark.parametrize(
    "config,expected",
    [
        ({"quant_method": "awq", "bits": 4, "zero_point": "false"}, "[zero_point] got 'false'; expected true or false"),
        ({"quant_method": ["awq"], "bits": 4}, "[quant_method] got ['awq']; expected 'awq' or 'gptq', a string"),
        ({"quant_method": "gptq", "bits": "4"}, "[bits] got '4'; expected an integer"),
    ],
)
def test_wrong_typed_config_fields_are_named(config: dict, expected: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_config(config | {"config_file": "quant_config.json"})
    assert _one_line(exc) == f"quant_config.json: {expected}"
