"""A loaded W8A8 kernel (the GEMM's configurations, the activation quantizer's variants) stays loaded for the
process: a CUDA graph that captured its launch holds the function without a Python reference, so a kernel dropped
from a bounded cache (and unloaded with its module once the signature caches let go of it) would leave a graph
replaying a function that no longer exists. CPU, with stand-ins for the loaded kernels."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from dqgen.kernels import act_quant, w8a8_gemm
from dqgen.w8a8 import gemm, kernel


class Loaded:
    """Stands in for GemmKernel / ActQuantKernel: made once per (what, device), here without a GPU."""

    def __init__(self, what: Any, device: int) -> None:
        self.what, self.device = what, device


@pytest.mark.parametrize(
    "module, stub, what",
    [
        (gemm, "GemmKernel", w8a8_gemm.choose_w8a8_gemm("s8", "f16", 1)),
        (kernel, "ActQuantKernel", act_quant.choose_act_quant("fp16", 4096, None, False, True, 1)),
    ],
    ids=["gemm", "act_quant"],
)
def test_a_loaded_kernel_is_never_dropped(module: Any, stub: str, what: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, stub, Loaded)
    module.loaded.cache_clear()
    try:
        first = module.loaded(what, 0)
        assert isinstance(first, Loaded) and module.loaded(what, 0) is first
        alive = weakref.ref(first)
        del first
        for device in range(1, 1100):  # many more (kernel, device) pairs than a bounded cache would keep
            module.loaded(what, device)
        gc.collect()
        assert alive() is not None, "the first kernel was dropped: a graph that captured it would replay it unloaded"
        assert module.loaded(what, 0) is alive()
    finally:
        module.loaded.cache_clear()  # the stand-ins go; real kernels load again on the next call
