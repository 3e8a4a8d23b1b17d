"""The kernel-family layer (dqgen.kernels) and the one loader (dqgen.run.loader), on the CPU: every family's config
is a frozen, hashable value that renders once per distinct config; entry-point names are unique over every config
a family produces; ``supports`` agrees with what renders; the loader gates on the architecture, keys its cache on
(config, device), shares modules and opts in to shared memory (with stand-ins for the driver)."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

import numpy as np
import pytest

from dqgen.core.spec import Spec, load_spec, shipped_specs
from dqgen.emit.nvrtc import CompileResult
from dqgen.emit.pipeline import compile_artifact
from dqgen.kernels import act_quant, dequant, family, gemm, gemv, gru_cell, w8a8_gemm
from dqgen.kernels.family import SHARED_OPTIN, Epilogue, KernelConfig, Mainloop
from dqgen.run import device as dev
from dqgen.run import loader

from .conftest import ROOT

AWQ = "awq_int4_fp16"


@cache
def _gru_constants() -> dict[str, Any]:
    """The cell constants of a small calibrated model (what dqgen.gru.kernel.cell_context derives)."""
    from dqgen.gru import calibrate
    from dqgen.gru.kernel import cell_context

    rng = np.random.default_rng(3)
    c, h = 16, 32
    w, r = rng.standard_normal((3 * h, c)) * 0.3, rng.standard_normal((3 * h, h)) * 0.3
    bw, br = rng.standard_normal(3 * h) * 0.1, rng.standard_normal(3 * h) * 0.1
    return cell_context(calibrate(w, r, bw, br, [(rng.standard_normal((20, 4, c)), np.zeros((4, h)))]))


def _one_of_each() -> list[KernelConfig]:
    art = compile_artifact(load_spec(AWQ))
    return [
        dequant.DequantConfig(art, dequant.variants(art.spec)[0]),
        gemv.GemvConfig(art, gemv.entries(art.spec)[0]),
        gemm.GemmKernelConfig.one(art.spec, gemm.GEMM_ENTRIES[0]),
        w8a8_gemm.choose_w8a8_gemm("s8", "f16", 1),
        act_quant.choose_act_quant("fp16", 4096, None, False, True, 1),
        gru_cell.GruCellConfig(_gru_constants()),
        gru_cell.GruPersistConfig(_gru_constants(), 2),
    ]


@pytest.mark.parametrize("cfg", _one_of_each(), ids=lambda c: c.family)
def test_every_config_is_a_frozen_hashable_value(cfg: KernelConfig) -> None:
    twin = dataclasses.replace(cfg)  # a second object, built the same way
    assert twin is not cfg and twin == cfg and hash(twin) == hash(cfg) and len({cfg, twin}) == 1
    field = dataclasses.fields(cfg)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cfg, field, getattr(cfg, field))
    assert cfg.name.startswith("dqgen_") and cfg.threads % 32 == 0 and cfg.min_sm >= 75
    assert cfg.source_name.endswith(".cu") and f" {cfg.name}(" in cfg.source()


class _CountingEnv:
    """Stands in for the Jinja environment: counts the templates rendered, renders with the real one."""

    def __init__(self) -> None:
        self.renders: list[str] = []
        self.real = family.template_env()

    def get_template(self, name: str) -> Any:
        outer = self

        class _Template:
            def render(self, **ctx: Any) -> str:
                outer.renders.append(name)
                return outer.real.get_template(name).render(**ctx)

        return _Template()


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    env = _CountingEnv()
    family._render.cache_clear()
    monkeypatch.setattr(family, "template_env", lambda: env)
    yield env.renders
    family._render.cache_clear()  # the counting environment's entries go with it


def test_equal_configs_render_once_and_every_tuning_of_the_gemv_is_its_own_source(renders: list[str]) -> None:
    spec = load_spec(AWQ)
    one, two = compile_artifact(spec), compile_artifact(load_spec(AWQ))
    e8, e16 = gemv.entries(spec)[0], gemv.entries(spec)[1]
    kept = gemv.GemvConfig(one, e8).source()
    # an equal config from another artifact object, another entry of the same source, the whole source
    assert gemv.GemvConfig(two, e8).source() is kept
    assert gemv.GemvConfig(one, e16).source() is kept and gemv.render_matmul(two) is kept
    assert renders == ["matmul.cu.j2"]
    # another tuning: another config, another source (its own cache entry), rendered once too
    cs = gemv.GemvConfig(one, e8, gemv.Tuning(wload="cs"))
    assert cs != gemv.GemvConfig(one, e8) and cs.source() != kept and cs.source() is cs.source()
    assert renders == ["matmul.cu.j2"] * 2
    assert "__ldcs" in cs.source() and "__ldcs" not in kept
    # the other families: equal configs once, distinct ones apart
    w8 = [w8a8_gemm.choose_w8a8_gemm("s8", "f16", m) for m in (1, 1, 100)]
    assert w8[0].source() is w8[1].source() and w8[2].source() != w8[0].source()
    assert renders.count("w8a8_gemm.cu.j2") == 2


def test_no_module_level_tuning_remains() -> None:
    """The GEMV's code shape is a field of its config (and of a packed weight): no module holds a TUNING that a
    script could swap under the render cache, and the old home of the GEMV's rendering is gone."""
    assert not hasattr(gemv, "TUNING") and importlib.util.find_spec("dqgen.emit.matmul") is None
    assigned = []
    for path in sorted((ROOT / "dqgen").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            assigned += [f"{path.name}:{t.id}" for t in targets if isinstance(t, ast.Name) and t.id == "TUNING"]
    assert assigned == []
    assert "tuning" in {f.name for f in dataclasses.fields(gemv.GemvConfig)}


def _all_names() -> dict[str, list[str]]:
    """Every entry-point name each family produces over the shipped specs and the W8A8 choices of the benches."""
    names: dict[str, list[str]] = {"dequant": [], "gemv": [], "gemm": [], "w8a8_gemm": [], "act_quant": []}
    for path in shipped_specs():
        spec = load_spec(path)
        names["dequant"] += [dequant.kernel_name(spec, v) for v in dequant.variants(spec)]
        names["gemv"] += [gemv.gemv_entry_name(spec, e) for e in gemv.entries(spec)]
        if gemm.supports(spec):
            names["gemm"] += [gemm.gemm_entry_name(spec, e) for e in gemm.GEMM_ENTRIES]
    w8 = set()
    for elem in ("s8", "e4m3"):
        for out in ("f16", "bf16", "acc"):
            for m in (1, 16, 17, 32, 33, 64, 65, 128, 4096):
                for n, k in ((6144, 4096), (28672, 8192), (256, 256)):
                    for sms, shared in ((0, w8a8_gemm.SHARED_SM89), (132, 227 * 1024), (108, 163 * 1024)):
                        w8.add(w8a8_gemm.choose_w8a8_gemm(elem, out, m, n, k, sms, shared))  # type: ignore[arg-type]
    names["w8a8_gemm"] = [c.name for c in w8]
    aq = set()
    for dtype in ("fp16", "bf16"):
        for k in (4096, 4100, 256):
            for smooth in (None, "fp32", "fp16"):
                for static in (False, True):
                    for aligned in (True, False):
                        if not (aligned and k % 8):
                            for rows in (1, 4096):
                                aq.add(act_quant.choose_act_quant(dtype, k, smooth, static, aligned, rows))  # type: ignore[arg-type]
    names["act_quant"] = [c.name for c in aq]
    return names


def test_entry_names_are_unique_over_every_config_of_every_family() -> None:
    names = _all_names()
    assert all(len(v) > 4 for v in names.values()), {f: len(v) for f, v in names.items()}
    every = [n for v in names.values() for n in v]
    assert [n for n, c in Counter(every).items() if c > 1] == []  # distinct configs, distinct names, across families
    # a field the name leaves out would make two configs one name: each W8A8 field moves it
    base = w8a8_gemm.W8A8GemmConfig("s8", "f16", False, 128, 128, 2, 4, 3)
    moved = [
        dataclasses.replace(base, **{f: v})
        for f, v in (
            ("elem", "e4m3"),
            ("out", "bf16"),
            ("swap", True),
            ("bm", 64),
            ("bn", 256),
            ("warps_m", 1),
            ("warps_n", 2),
            ("stages", 4),
            ("bk", 256),
            ("kind", "wgmma_tma_sm90"),
        )
    ]
    assert len({c.name for c in [base, *moved]}) == len(moved) + 1
    # the GRU's entry names are fixed by its templates: its configs differ in the constants and units per thread
    # that the source bakes in, so the loader keys them by config, never by name
    sources = {gru_cell.GruPersistConfig(_gru_constants(), jt).source() for jt in range(1, 5)}
    assert len(sources) == 4


def test_supports_agrees_with_what_renders() -> None:
    rendered = 0
    for path in shipped_specs():
        spec = load_spec(path)
        assert dequant.DequantConfig.supports(spec) and gemv.GemvConfig.supports(spec)
        assert not any(c.supports(spec) for c in (w8a8_gemm.W8A8GemmConfig, act_quant.ActQuantConfig))
        cfg = gemm.GemmKernelConfig(spec)
        if gemm.GemmKernelConfig.supports(spec):
            assert "dqgen_gemm_" in cfg.source()
            rendered += 1
        else:
            with pytest.raises(ValueError, match=r"^\[source\.(bits|kind|words)\]|^\[scales"):
                cfg.source()
    assert rendered >= 4


def test_value_types_carry_the_architecture_axis() -> None:
    assert Mainloop("wgmma_tma_sm90", (128, 128, 64), (2, 2), 4).min_sm == 90
    assert Mainloop("mma_sync_sm80", (64, 128, 64), (1, 4), 4).threads == 128
    with pytest.raises(ValueError, match=r"^Mainloop\.kind"):
        Mainloop("tcgen05", (128, 128, 64), (1, 4), 4)  # type: ignore[arg-type]
    # a Hopper main loop is one new kind: it raises a config's architecture and renames its entry point
    s8 = w8a8_gemm.choose_w8a8_gemm("s8", "f16", 4096)
    hopper = dataclasses.replace(s8, kind="wgmma_tma_sm90")
    assert s8.min_sm == 80 and hopper.min_sm == 90 and hopper.name != s8.name
    with pytest.raises(ValueError, match="mma_sync_sm80 main loop alone"):
        hopper.source()  # no template has it yet
    assert w8a8_gemm.choose_w8a8_gemm("e4m3", "bf16", 1).min_sm == 89
    assert s8.epilogue == Epilogue("f16", bias=True, row_scale=True, col_scale=True)
    assert s8.mainloop.swap_ab is False and w8a8_gemm.choose_w8a8_gemm("s8", "f16", 8).mainloop.swap_ab
    tile = gemm.CONFIGS[0]
    assert dataclasses.replace(tile, kind="wgmma_tma_sm90").tag != tile.tag


# ----------------------------------------------------------------------------------------------------- the loader


@dataclass(frozen=True)
class _Probe(KernelConfig):
    """A config whose source is a line naming it (no template): the loader's side alone."""

    family: ClassVar[str] = "probe"
    template: ClassVar[str] = ""

    entry: str
    sm: int = 80
    shared: int = 0
    module: str = ""  # entry points with the same module share one source

    @property
    def name(self) -> str:
        return self.entry

    @property
    def threads(self) -> int:
        return 128

    @property
    def min_sm(self) -> int:
        return self.sm

    @property
    def shared_bytes(self) -> int:
        return self.shared

    def context(self) -> dict[str, Any]:
        return {}

    def source(self) -> str:
        return f"// module {self.module or self.entry}\n"


class _Loaded:
    """Stands in for dev.LoadedKernel: what was loaded, its siblings and its shared-memory opt-in."""

    made: ClassVar[list[tuple[bytes, str, int]]] = []

    def __init__(self, image: bytes, name: str, device: int = 0) -> None:
        self.image, self.name, self.device, self.shared = image, name, device, 0
        self.owner: _Loaded | None = None
        _Loaded.made.append((image, name, device))

    def sibling(self, name: str) -> _Loaded:
        other = object.__new__(_Loaded)
        other.image, other.name, other.device, other.shared, other.owner = self.image, name, self.device, 0, self
        return other

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        self.shared = nbytes


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """No GPU and no NVRTC: device 0 is an sm_80, device 1 an sm_90; a compile is a digest of its source."""
    state: dict[str, Any] = {"compiled": [], "cached": set()}
    monkeypatch.setattr(dev, "device_arch", lambda ordinal=0: ("sm_80", "sm_90")[ordinal])
    monkeypatch.setattr(dev, "max_shared_optin", lambda ordinal=0: 227 * 1024)
    monkeypatch.setattr(dev, "LoadedKernel", _Loaded)
    monkeypatch.setattr(loader, "_LOADED", {})
    monkeypatch.setattr(loader, "_MODULES", {})
    _Loaded.made = []

    def result(source: str, arch: str, name: str) -> CompileResult:
        key = hashlib.sha256(f"{arch}\0{name}\0{source}".encode()).hexdigest()
        return CompileResult(None, b"\x7fELF" + key.encode(), arch, "", 0.0, False, key)

    def compile_source(source: str, *, arch: str, want: str, name: str, **kw: Any) -> CompileResult:
        assert want == "cubin"
        state["compiled"].append(source)
        state["cached"].add((source, arch, name))
        return result(source, arch, name)

    def cache_lookup(source: str, *, arch: str, want: str, name: str, **kw: Any) -> CompileResult | None:
        return result(source, arch, name) if (source, arch, name) in state["cached"] else None

    monkeypatch.setattr(loader, "compile_source", compile_source)
    monkeypatch.setattr(loader, "cache_lookup", cache_lookup)
    return state


def test_the_loader_refuses_an_older_gpu_in_one_line_naming_config_and_gpu(stand_ins: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match=r"^probe kernel hopper_only: needs sm_90 or newer, but GPU 0 is sm_80$"):
        loader.load(_Probe("hopper_only", sm=90), 0)
    assert stand_ins["compiled"] == [] and _Loaded.made == []  # refused before compiling anything
    assert loader.load(_Probe("hopper_only", sm=90), 1).name == "hopper_only"
    fp8 = w8a8_gemm.choose_w8a8_gemm("e4m3", "f16", 1)
    with pytest.raises(RuntimeError, match=rf"^w8a8_gemm kernel {fp8.name}: needs sm_89 or newer, but GPU 0 is sm_80$"):
        loader.load(fp8, 0)
    spec = load_spec(AWQ).model_copy(update={"arch": "sm_90"})
    old = gemm.GemmKernelConfig.one(spec, gemm.GEMM_ENTRIES[0])
    with pytest.raises(
        RuntimeError, match=r"^awq_int4_fp16 \(spec targets sm_90\), gemm kernel dqgen_gemm_.*GPU 0 is sm_80$"
    ):
        loader.load(old, 0)


def test_the_loader_caches_by_config_and_device(stand_ins: dict[str, Any]) -> None:
    first = loader.load(_Probe("k"), 0)
    again = loader.load(_Probe("k"), 0)  # an equal config, another object
    assert again is first and len(stand_ins["compiled"]) == 1 and len(_Loaded.made) == 1
    other_gpu = loader.load(_Probe("k"), 1)
    assert other_gpu is not first and other_gpu.device == 1 and len(stand_ins["compiled"]) == 2  # sm_90's compile
    assert loader.load(_Probe("k2"), 0) is not first  # another config, another entry
    # an equal source and entry under another config is the same function (its shared memory opt-in raised)
    assert loader.load(_Probe("k", shared=64 * 1024), 0) is first and first.shared == 64 * 1024
    assert loader.loaded(_Probe("k"), 0) and not loader.loaded(_Probe("never"), 0)


def test_entry_points_of_one_source_share_one_module(stand_ins: dict[str, Any]) -> None:
    a = loader.load(_Probe("a", module="m"), 0)
    b = loader.load(_Probe("b", module="m"), 0)
    assert len(stand_ins["compiled"]) == 1 and len(_Loaded.made) == 1  # one compile, one module load
    assert b.owner is a and b.name == "b" and b.image == a.image


def test_the_loader_opts_in_to_the_shared_memory_a_config_takes(stand_ins: dict[str, Any]) -> None:
    assert loader.load(_Probe("small", shared=48 * 1024), 0).shared == 0  # the default needs no opt-in
    assert loader.load(_Probe("big", shared=96 * 1024), 0).shared == 96 * 1024
    assert loader.load(_Probe("sized_at_launch", shared=SHARED_OPTIN), 0).shared == 227 * 1024
    deep = w8a8_gemm.choose_w8a8_gemm("s8", "f16", 4096, 6144, 4096, 132, 227 * 1024)
    assert deep.shared_bytes > 48 * 1024 and loader.load(deep, 1).shared == deep.shared_bytes
    persist = gru_cell.GruPersistConfig(_gru_constants(), 1)
    assert loader.load(persist, 0).shared == 227 * 1024


def test_a_dequant_variant_comes_from_the_whole_sets_cached_module(stand_ins: dict[str, Any]) -> None:
    """What `dqgen build` leaves (the whole variant set compiled) serves every variant: no compile, one module."""
    art = compile_artifact(load_spec(AWQ))
    whole = dequant.DequantConfig(art)
    loader.compile_for(whole, 0)
    assert stand_ins["compiled"] == [whole.source()]
    fns = [loader.load(dequant.DequantConfig(art, v), 0) for v in dequant.variants(art.spec)[:3]]
    assert len(stand_ins["compiled"]) == 1 and len(_Loaded.made) == 1
    assert [f.name for f in fns] == [dequant.kernel_name(art.spec, v) for v in dequant.variants(art.spec)[:3]]
    with pytest.raises(ValueError, match="whole variant set has no single entry point"):
        loader.load(whole, 0)


def test_a_spec_is_no_config_key() -> None:
    """A Spec is not hashable: the spec families key on the content key of the artifact (or spec)."""
    spec: Spec = load_spec(AWQ)
    with pytest.raises(TypeError):
        hash(spec)
    art = compile_artifact(spec)
    assert dequant.DequantConfig(art).key == art.key
    assert gemm.GemmKernelConfig(spec) == gemm.GemmKernelConfig(load_spec(AWQ))
    assert gemm.GemmKernelConfig(spec) != gemm.GemmKernelConfig(load_spec("awq_int4_bf16"))


@pytest.mark.gpu
def test_every_family_loads_through_the_loader_on_the_gpu() -> None:
    """On a real GPU: one config of each family loads once per process (an equal config is the same function),
    entry points of one source share a module, and configs past 48 KB of shared memory are opted in (the
    occupancy API counts a block of that size resident)."""
    if dev.arch_sm(dev.device_arch(0)) < 80:
        pytest.skip("the families need sm_80")
    for cfg in _one_of_each():
        fn = loader.load(cfg, 0)
        assert fn.name == cfg.name and loader.load(dataclasses.replace(cfg), 0) is fn
    art = compile_artifact(load_spec(AWQ))
    e0, e1 = gemv.entries(art.spec)[:2]
    first, second = loader.load(gemv.GemvConfig(art, e0), 0), loader.load(gemv.GemvConfig(art, e1), 0)
    assert second._owner is first or first._owner is second or second._owner is first._owner is not None
    deep = w8a8_gemm.choose_w8a8_gemm("s8", "f16", 4096, 6144, 4096, dev.sm_count(0), dev.max_shared_optin(0))
    if deep.shared_bytes > 48 * 1024 and deep.shared_bytes <= dev.max_shared_optin(0):
        assert loader.load(deep, 0).max_active_blocks(deep.threads, deep.shared_bytes) >= 1
