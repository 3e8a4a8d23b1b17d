"""dqgen: a code-generation compiler for fast, proven GPU dequantization kernels."""

__version__ = "0.2.0"

from .core.spec import Spec, SpecError, load_spec
from .layout.packing import pack, pack_zeros, repack, unpack, unpack_zeros

__all__ = [
    "Kernel",
    "__version__",
    "Spec",
    "SpecError",
    "compile",
    "load_spec",
    "pack",
    "pack_zeros",
    "repack",
    "unpack",
    "unpack_zeros",
]


def __getattr__(name: str):
    # Keep `import dqgen` light: the runtime (cuda-bindings, numba) loads on first use.
    if name in ("compile", "Kernel"):
        from .run import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
