"""The one compile-and-load path of every kernel family: ``load(config, device)`` gates on the architecture the
config needs, takes the cubin from NVRTC's disk cache or compiles ``config.source()`` (dqgen.emit.nvrtc), loads
the entry point ``config.name`` and opts it in to the dynamic shared memory the config takes past 48 KB.

One process cache keyed by (config, device), never bounded: a CUDA graph that captured a launch holds the
function without a Python reference, so a loaded kernel must outlive every graph (a bounded cache once unloaded a
module under a graph that still replayed it). Entry points compiled from one source share one loaded module."""

from __future__ import annotations

from typing import Literal

from ..emit.nvrtc import CompileResult, cache_lookup, compile_source
from ..kernels.family import SHARED_DEFAULT_MAX, SHARED_OPTIN, KernelConfig
from . import device as dev

#: Loaded entry points of this process, by (config, device).
_LOADED: dict[tuple[KernelConfig, int], dev.LoadedKernel] = {}
#: Loaded modules by (NVRTC's cache key of the compile, device): a second entry point of one module is its sibling.
_MODULES: dict[tuple[str, int], dev.LoadedKernel] = {}


def target_arch(config: KernelConfig, arch: str) -> str:
    """The architecture ``config`` compiles for on a GPU of ``arch``: "sm_90a" for an architecture-specific
    source (wgmma) on an sm_90 GPU, else ``arch``."""
    if config.arch_specific and not arch.endswith(("a", "f")):
        return arch + "a"
    return arch


def check_arch_of(config: KernelConfig, device: int, arch: str) -> None:
    """One line naming the config and the GPU when the GPU is older than the config's architecture."""
    if dev.arch_sm(arch) < config.min_sm:
        raise RuntimeError(f"{config.what}: needs sm_{config.min_sm} or newer, but GPU {device} is {arch}")


def _cubin(config: KernelConfig, arch: str) -> CompileResult:
    """The config's own cubin from the disk cache; else that of a source whose module holds the entry point too
    (the dequantize kernel's whole variant set, left by ``dqgen build``); else compiled."""
    source = config.source()
    res = cache_lookup(source, arch=arch, want="cubin", name=config.source_name)
    for other in config.fallbacks():
        if res is not None:
            break
        res = cache_lookup(other.source(), arch=arch, want="cubin", name=config.source_name)
    if res is None:
        res = compile_source(source, arch=arch, want="cubin", name=config.source_name)
    return res


def compile_config(config: KernelConfig, arch: str, want: Literal["ptx", "cubin"] = "cubin") -> CompileResult:
    """``config``'s source compiled for ``arch`` (through NVRTC's disk cache; no GPU needed): what the tests read
    the PTX or SASS of, and what ``load`` finds in the cache."""
    if dev.arch_sm(arch) < config.min_sm:
        raise ValueError(f"arch: {config.what} needs sm_{config.min_sm} or newer, got {arch}")
    return compile_source(config.source(), arch=target_arch(config, arch), want=want, name=config.source_name)


def compile_for(config: KernelConfig, device: int = 0) -> CompileResult:
    """``config``'s source compiled for ``device``'s architecture into NVRTC's disk cache (nothing is loaded):
    what a source holding several entry points needs before ``load`` finds each of them in it."""
    arch = dev.device_arch(device)
    check_arch_of(config, device, arch)
    return compile_config(config, arch)  # target_arch there


def load(config: KernelConfig, device: int = 0) -> dev.LoadedKernel:
    """``config``'s entry point compiled for and loaded on ``device`` (once per process)."""
    key = (config, int(device))
    fn = _LOADED.get(key)
    if fn is not None:
        return fn
    arch = dev.device_arch(device)
    check_arch_of(config, device, arch)
    res = _cubin(config, target_arch(config, arch))
    assert res.cubin is not None
    module = _MODULES.get((res.key, device))
    if module is None:
        fn = _MODULES[(res.key, device)] = dev.LoadedKernel(res.cubin, config.name, device)
    elif module.name == config.name:
        fn = module
    else:
        fn = module.sibling(config.name)
    fn.pdl = config.pdl
    shared = dev.max_shared_optin(device) if config.shared_bytes == SHARED_OPTIN else config.shared_bytes
    if shared > SHARED_DEFAULT_MAX:
        fn.set_max_dynamic_shared(shared)
    _LOADED[key] = fn
    return fn


def loaded(config: KernelConfig, device: int = 0) -> bool:
    """Whether ``config`` is loaded on ``device`` in this process (nothing is compiled or loaded)."""
    return (config, int(device)) in _LOADED
