"""dqgen: a code-generation compiler for fast, proven GPU dequantization kernels."""

from __future__ import annotations

__version__ = "0.2.0"

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.spec import Spec, SpecError, load_spec
from .layout.packing import pack, pack_zeros, repack, unpack, unpack_zeros
from .nn.quantize import quantize

if TYPE_CHECKING:
    from .run.runtime import Kernel

__all__ = [
    "Kernel",
    "Spec",
    "SpecError",
    "__version__",
    "compile",
    "from_pretrained",
    "load_spec",
    "pack",
    "pack_zeros",
    "quantize",
    "repack",
    "unpack",
    "unpack_zeros",
]


def compile(spec: Spec | str | Path | dict) -> Kernel:
    """The compiler's front door: the pipeline (solve, render; dqgen.emit.pipeline, memoized) on ``spec`` (a Spec,
    a YAML path, a shipped spec's name or a dict), and a callable ``Kernel`` over its artifact. The CUDA binary is
    built for the GPU the tensors live on at first call, through NVRTC's cache."""
    # imported here to keep `import dqgen` light: the runtime (cuda-bindings, numba) loads on first use
    from .emit.pipeline import compile_artifact
    from .run import runtime

    return runtime.Kernel(compile_artifact(spec if isinstance(spec, Spec) else load_spec(spec)))


def from_pretrained(pretrained_model_name_or_path: str | Path, **kwargs: Any) -> Any:
    """A ``transformers`` model from a quantized checkpoint folder (AWQ, GPTQ, compressed-tensors, ModelOpt), with a
    ``dqgen.nn.QuantLinear`` for every quantized layer: ``dqgen.nn.from_pretrained`` (keyword arguments there)."""
    # imported here to keep `import dqgen` light: torch and transformers load on first use
    try:
        from .nn.load import from_pretrained as load
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise ImportError(
            "dqgen.from_pretrained needs torch and transformers: pip install 'dqgen[torch]' transformers"
        ) from None

    return load(pretrained_model_name_or_path, **kwargs)


def __getattr__(name: str):
    # Keep `import dqgen` light: the runtime (cuda-bindings, numba) loads on first use.
    if name == "Kernel":
        from .run import runtime

        return runtime.Kernel
    raise AttributeError(name)
