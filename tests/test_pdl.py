"""CPU: programmatic dependent launch (blocks/pdl.cuh.j2, dqgen.run.device). A family whose config says ``pdl``
renders the wait for the previous kernel into every entry point (a kernel launched with the attribute but without
the wait could read x before the kernel writing it has finished), no global memory access comes before that wait,
and nothing of it reaches code compiled for GPUs without griddepcontrol (sm_80). Families that do not wait say so,
so that their launches stay in plain stream order; a bound launch carries the attribute only for a waiting kernel,
on sm_90 or newer, unless DQGEN_PDL=0 or its caller keeps it plain (tests/test_gpu_pdl.py runs the launches)."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import dqgen
import dqgen.kernels
from dqgen.core.spec import load_spec
from dqgen.emit.nvrtc import compile_source
from dqgen.kernels.family import KernelConfig
from dqgen.kernels.gemm import GemmKernelConfig
from dqgen.kernels.gemm90 import CLUSTER_CONFIGS90, CONFIGS90, Gemm90KernelConfig
from dqgen.kernels.gemv import GemvConfig, entries, gemv_entry_name
from dqgen.run import device as dev

TEMPLATES = Path(dqgen.__file__).parent / "emit" / "templates"
WAIT = "griddepcontrol.wait"


def _families(cls: type[KernelConfig] = KernelConfig) -> list[type[KernelConfig]]:
    """Every KernelConfig subclass of dqgen.kernels (each module imported)."""
    for mod in pkgutil.iter_modules(dqgen.kernels.__path__):
        importlib.import_module(f"dqgen.kernels.{mod.name}")
    out: list[type[KernelConfig]] = []
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("dqgen.kernels."):  # not the probes other test modules define
            out += [sub, *_families(sub)]
    return out


@pytest.mark.parametrize("cls", [c for c in _families() if "template" in vars(c)], ids=lambda c: c.__name__)
def test_a_family_launches_as_a_dependent_only_if_its_template_waits(cls: type[KernelConfig]) -> None:
    text = (TEMPLATES / cls.template).read_text()
    assert cls.pdl == ("pdl.wait_then_release(" in text), cls.template


def _ptx_entries(ptx: str) -> dict[str, str]:
    """Each .entry's body in a PTX module, by name."""
    parts = re.split(r"\.(?:visible|weak) \.entry (\w+)\(", ptx)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


#: A PTX instruction that reads or writes global memory: a load, store, atomic or reduction not in the parameter,
#: shared, local or constant space (generic addresses included), or a bulk copy.
GLOBAL_ACCESS = re.compile(r"\b(?:ld|st|atom|red)\.(?!param|shared|local|const)|\bcp\.async\.bulk\.(?!prefetch)")


def test_every_gemv_entry_waits_before_touching_global_memory_on_sm90_and_not_on_sm80() -> None:
    k = dqgen.compile("awq_int4_fp16")
    src = GemvConfig(k.artifact).source()
    for arch in ("sm_90", "sm_80"):
        ptx = compile_source(src, arch=arch, want="ptx", name="gemv_pdl.cu").ptx
        assert ptx is not None
        bodies = _ptx_entries(ptx)
        assert set(bodies) == {gemv_entry_name(k.spec, e) for e in entries(k.spec)}
        for name, body in bodies.items():
            if arch == "sm_80":
                assert "griddepcontrol" not in body, name
                continue
            assert body.count(WAIT) == 1 and body.count("griddepcontrol.launch_dependents") == 1, name
            assert GLOBAL_ACCESS.search(body[: body.index(WAIT)]) is None, name


def test_every_gemm90_entry_waits_in_producer_and_consumers_before_touching_global_memory() -> None:
    spec = load_spec("awq_int4_fp16")
    kc = Gemm90KernelConfig(spec, CONFIGS90 + CLUSTER_CONFIGS90)
    ptx = compile_source(kc.source(), arch="sm_90a", want="ptx", name=kc.source_name).ptx
    assert ptx is not None
    bodies = _ptx_entries(ptx)
    assert len(bodies) == len(CONFIGS90) + len(CLUSTER_CONFIGS90)
    for name, body in bodies.items():
        assert body.count(WAIT) == 2, name  # the producer thread's and the consumer warpgroups'
        # PTX lays the two branches out in either order; no global access precedes the first of them
        assert GLOBAL_ACCESS.search(body[: body.index(WAIT)]) is None, name
        assert GLOBAL_ACCESS.search(body) is not None, name  # the pattern sees this kernel's accesses


def test_the_sm80_gemm_does_not_wait_and_is_not_a_dependent() -> None:
    spec = load_spec("awq_int4_fp16")
    kc = GemmKernelConfig(spec)
    assert not kc.pdl
    ptx = compile_source(kc.source(), arch="sm_90", want="ptx", name=kc.source_name).ptx
    assert ptx is not None and "griddepcontrol" not in ptx


def _kernel(pdl: bool) -> SimpleNamespace:
    """What BoundLaunch reads of a LoadedKernel (no GPU: the launch functions are built, never called)."""
    return SimpleNamespace(pdl=pdl, device=0, _function=None, _module=object(), name="k")


@pytest.mark.parametrize(
    ("pdl", "asked", "arch", "env", "expected"),
    [
        (True, True, "sm_90", None, True),
        (True, True, "sm_90a", "1", True),
        (True, True, "sm_100", None, True),
        (True, True, "sm_90", "0", False),  # DQGEN_PDL=0: plain launches
        (True, True, "sm_89", None, False),  # no griddepcontrol before sm_90
        (True, False, "sm_90", None, False),  # the caller keeps this launch plain (gemm90.PDL_MAX_M)
        (False, True, "sm_90", None, False),  # a kernel that does not wait is never a dependent
    ],
)
def test_a_bound_launch_is_programmatic_only_for_a_waiting_kernel_on_sm90(
    monkeypatch: pytest.MonkeyPatch, pdl: bool, asked: bool, arch: str, env: str | None, expected: bool
) -> None:
    monkeypatch.setattr(dev, "device_arch", lambda ordinal=0: arch)
    if env is None:
        monkeypatch.delenv(dev.PDL_ENV, raising=False)
    else:
        monkeypatch.setenv(dev.PDL_ENV, env)
    dev.programmatic_launches.cache_clear()
    try:
        b = dev.BoundLaunch(_kernel(pdl), (2,), (128,), [], 0, programmatic=asked)  # type: ignore[arg-type]
    finally:
        dev.programmatic_launches.cache_clear()
    assert b.programmatic is expected
    assert isinstance(b.launch, functools.partial) is not expected  # the plain launch is cuLaunchKernel's partial


def test_a_refused_programmatic_launch_falls_back_to_plain_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev, "device_arch", lambda ordinal=0: "sm_90")
    monkeypatch.delenv(dev.PDL_ENV, raising=False)
    dev.programmatic_launches.cache_clear()
    try:
        b = dev.BoundLaunch(_kernel(True), (2,), (128,), [], 0)  # type: ignore[arg-type]
    finally:
        dev.programmatic_launches.cache_clear()
    calls: list[str] = []

    def refused(stream: int, params: int, extra: int) -> tuple:  # before and after the retry
        calls.append("ex")
        return (1,)

    def plain(stream: int, params: int, extra: int) -> tuple:
        calls.append("plain")
        return (0,)

    monkeypatch.setattr(dev, "primary_context", lambda device: None)
    monkeypatch.setattr(dev.BoundLaunch, "_plain", lambda self: plain)
    b.launch = refused
    b(0)
    assert calls == ["ex", "ex", "plain"] and not b.programmatic
    b(0)
    assert calls[-1] == "plain"


@pytest.mark.parametrize("pdl", [False, True])
def test_a_cluster_launch_carries_its_cluster_and_keeps_it_in_the_plain_fallback(
    monkeypatch: pytest.MonkeyPatch, pdl: bool
) -> None:
    """BoundLaunch(cluster=S) (the Hopper GEMM's split-K clusters): cuLaunchKernelEx with the cluster-dimension
    attribute, beside the programmatic one where the kernel waits; the plain launch a refused programmatic one falls
    back to keeps the cluster (a cluster kernel launched without it would read peers that do not exist)."""
    monkeypatch.setattr(dev, "device_arch", lambda ordinal=0: "sm_90")
    monkeypatch.delenv(dev.PDL_ENV, raising=False)
    built: list[dict] = []

    def launch_ex(function, grid, block, shared_mem, programmatic=False, cluster=1):  # type: ignore[no-untyped-def]
        built.append({"grid": grid, "programmatic": programmatic, "cluster": cluster})
        return lambda stream, params, extra: (1 if programmatic else 0,)  # a programmatic launch is refused

    monkeypatch.setattr(dev, "_launch_ex", launch_ex)
    monkeypatch.setattr(dev, "primary_context", lambda device: None)
    dev.programmatic_launches.cache_clear()
    try:
        b = dev.BoundLaunch(_kernel(pdl), (32,), (256,), [], 0, cluster=4)  # type: ignore[arg-type]
    finally:
        dev.programmatic_launches.cache_clear()
    assert built == [{"grid": (32, 1, 1), "programmatic": pdl, "cluster": 4}]
    b(0)  # refused twice where programmatic, then the plain launch: still in clusters of 4
    assert built[-1] == {"grid": (32, 1, 1), "programmatic": False, "cluster": 4} and not b.programmatic
    assert len(built) == (2 if pdl else 1)
    # the attribute itself (cuda-bindings builds the config without a driver)
    cfg = dev.launch_config((32, 1, 1), (256, 1, 1), 0, [dev.cluster_attribute(4)])  # alive while attrs are read
    attrs = cfg.attrs
    cluster_id = dev.driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert len(attrs) == 1 and attrs[0].id == cluster_id
    assert (attrs[0].value.clusterDim.x, attrs[0].value.clusterDim.y, attrs[0].value.clusterDim.z) == (4, 1, 1)
