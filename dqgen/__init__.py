"""dqgen: a code-generation compiler for fast, proven GPU dequantization kernels."""

__version__ = "0.2.0"

from .packing import pack, pack_zeros, repack, unpack, unpack_zeros
from .spec import Spec, SpecError, load_spec

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
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
