"""CPU: programmatic dependent launch (blocks/pdl.cuh.j2). A family whose config says ``pdl`` renders the wait for
the previous kernel into every entry point (a kernel launched with the attribute but without the wait could read
x before the kernel writing it has finished), only L2 prefetches of its weights come before that wait, and nothing
of it reaches code compiled for GPUs without griddepcontrol (sm_80). Families that do not wait say so, so that
their launches stay in plain stream order (tests/test_gpu_pdl.py runs the launches)."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import dqgen
import dqgen.kernels
from dqgen.core.spec import load_spec
from dqgen.emit.nvrtc import compile_source
from dqgen.kernels.family import KernelConfig
from dqgen.kernels.gemm import GemmKernelConfig
from dqgen.kernels.gemm90 import CONFIGS90, Gemm90KernelConfig
from dqgen.kernels.gemv import GemvConfig, entries, gemv_entry_name

TEMPLATES = Path(dqgen.__file__).parent / "emit" / "templates"
WAIT = "griddepcontrol.wait"


def _families(cls: type = KernelConfig) -> list[type]:
    """Every KernelConfig subclass of dqgen.kernels (each module imported)."""
    for mod in pkgutil.iter_modules(dqgen.kernels.__path__):
        importlib.import_module(f"dqgen.kernels.{mod.name}")
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_families(sub)]
    return out


@pytest.mark.parametrize("cls", [c for c in _families() if "template" in vars(c)], ids=lambda c: c.__name__)
def test_a_family_launches_as_a_dependent_only_if_its_template_waits(cls: type) -> None:
    text = (TEMPLATES / cls.template).read_text()
    assert cls.pdl == ("pdl.wait_then_release()" in text), cls.template


def _ptx_entries(ptx: str) -> dict[str, str]:
    """Each .entry's body in a PTX module, by name."""
    parts = re.split(r"\.(?:visible|weak) \.entry (\w+)\(", ptx)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_gemv_entry_prefetches_its_weights_then_waits_on_sm90_and_not_on_sm80() -> None:
    k = dqgen.compile("awq_int4_fp16")
    src = GemvConfig(k.artifact).source()
    for arch in ("sm_90", "sm_80"):
        ptx = compile_source(src, arch=arch, want="ptx", name="gemv_pdl.cu").ptx
        assert ptx is not None
        bodies = _ptx_entries(ptx)
        assert set(bodies) == {gemv_entry_name(k.spec, e) for e in entries(k.spec)}
        for name, body in bodies.items():
            if arch == "sm_80":
                assert "griddepcontrol" not in body and "prefetch.L2" not in body, name
                continue
            assert body.count(WAIT) == 1 and body.count("griddepcontrol.launch_dependents") == 1, name
            # before the wait: only the weights' bulk prefetch into L2, no load and no store
            before = body[: body.index(WAIT)]
            assert "cp.async.bulk.prefetch.L2.global" in before, name
            assert not re.search(r"\b(ld|st|atom|red)\.global", before), name


def test_every_gemm90_entry_waits_in_producer_and_consumers_after_prefetching_weight_tiles() -> None:
    spec = load_spec("awq_int4_fp16")
    kc = Gemm90KernelConfig(spec, (CONFIGS90[0],))
    ptx = compile_source(kc.source(), arch="sm_90a", want="ptx", name=kc.source_name).ptx
    assert ptx is not None
    (body,) = _ptx_entries(ptx).values()
    assert body.count(WAIT) == 2  # the producer thread's and the consumer warpgroups' (PTX orders blocks freely)
    # the producer: the weight tiles' L2 prefetches, then its wait, then the first copy into shared memory
    prefetch = body.index("cp.async.bulk.prefetch.tensor.2d.L2.global")
    wait = body.index(WAIT, prefetch)
    assert not re.search(r"\b(ld|st|atom|red)\.global|cp\.async\.bulk\.tensor", body[prefetch:wait])


def test_the_sm80_gemm_does_not_wait_and_is_not_a_dependent() -> None:
    spec = load_spec("awq_int4_fp16")
    kc = GemmKernelConfig(spec)
    assert not kc.pdl
    ptx = compile_source(kc.source(), arch="sm_90", want="ptx", name=kc.source_name).ptx
    assert ptx is not None and "griddepcontrol" not in ptx
