"""Issue 26: a spec named after a CUDA global the generated kernels use (threadIdx, blockIdx, gridDim, uint4, ...)
passed validation and then failed in NVRTC: the spec's name is the kernels' C++ namespace (dqgen::<name>), where it
hides the global of that name. Such names are refused by the spec's validation, in one line naming the field."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dqgen.core.spec import CUDA_BUILTIN_VARIABLES, Spec, SpecError, load_spec, name_problem, shipped_specs

#: The names the shipped specs' sources do use from inside the spec's namespace, found by compiling each source
#: with a spec of every identifier it holds (the test below checks the same, all at once).
USED = ("threadIdx", "blockIdx", "gridDim", "uint2", "uint4", "int4", "float4", "make_uint2", "make_uint4")
USED += ("make_float4", "atomicAdd", "fmaf")


def _spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"bits": 4, "kind": "unsigned"},
        "target": "fp16",
        "packing": {"axis": "N", "order": "awq"},
        "scales": {"group_size": 128},
        "zeros": {"mode": "integer"},
    }


@pytest.mark.parametrize("name", CUDA_BUILTIN_VARIABLES + USED + ("uint32_t", "dim3", "make_int2", "atomicCAS"))
def test_cuda_global_names_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_spec(_spec(name))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"spec: [name] got {name!r}; a CUDA ")
    assert "would hide it" in msg


@pytest.mark.parametrize("name", ["thread_idx", "blockIdx_", "Uint4", "int", "gemm", "dqgen", "x", "K"])
def test_names_that_only_look_alike_are_still_fine_or_refused_as_before(name: str) -> None:
    problem = name_problem(name)
    assert problem is None or "keyword" in problem  # "int" is a C keyword, as before


def _syntax_check(source: str) -> str | None:
    """NVRTC's log when ``source`` is not valid CUDA C++ (front end only: fast), else None."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"names.cu", 0, [], [])
    assert int(err) == 0
    try:
        opts = [b"--gpu-architecture=compute_90", b"-std=c++17", b"-fdevice-syntax-only"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        return log.decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


#: A name no source holds, put where the spec's name goes; the sources are rendered once per spec.
PLACEHOLDER = "qqspecnameqq"


def _sources(spec: Spec) -> dict[str, str]:
    """Every source `dqgen build` compiles or writes for ``spec`` (the dequantize kernel, its header, each matmul
    family's), with the spec's name replaced by PLACEHOLDER."""
    from dqgen.kernels.dequant import whole_source
    from dqgen.tools.build import _family_sources, compile_artifact

    artifact = compile_artifact(spec.model_copy(update={"name": PLACEHOLDER}))
    sources = {"dequant": whole_source(artifact), "header": artifact.header}
    return sources | {fam.family: fam.source for fam in _family_sources(artifact)}


@pytest.mark.parametrize("name", USED[:3] + USED[4:6])
def test_a_used_name_does_break_the_kernels(name: str) -> None:
    """What the validation prevents: the AWQ kernels with a spec of that name (the check bypassed) do not compile."""
    sources = _sources(load_spec("awq_int4_fp16"))
    assert all(_syntax_check(src) is None for src in sources.values())
    logs = [_syntax_check(src.replace(PLACEHOLDER, name)) for src in sources.values()]
    assert any(log is not None and "error" in log for log in logs), name


@pytest.mark.parametrize("spec_name", sorted(shipped_specs()))
def test_no_other_name_of_the_generated_sources_would_collide(spec_name: str) -> None:
    """Every identifier of a shipped spec's sources that validation accepts as a spec name, declared as a namespace
    beside the spec's (dqgen::<identifier>, where a spec of that name would put its own), leaves the sources valid:
    no global the kernels use is hidden by it. A template that starts using another CUDA global fails here."""
    for part, src in _sources(load_spec(spec_name)).items():
        names = sorted({t for t in re.findall(r"\b[A-Za-z_]\w*\b", src) if t != PLACEHOLDER and not name_problem(t)})
        beside = "namespace dqgen {\n" + "\n".join(f"namespace {n} {{}}" for n in names) + "\n}\n"
        log = _syntax_check(beside + src)
        assert log is None, f"{spec_name} {part}: a spec name the validation accepts hides a global:\n{log[:3000]}"
