"""dqgen: a code-generation compiler for fast, proven GPU dequantization kernels."""

from .spec import Spec, SpecError, load_spec

from .packing import pack, pack_zeros, repack, unpack, unpack_zeros

__all__ = ["Spec", "SpecError", "load_spec", "compile", "Kernel", "pack", "unpack", "pack_zeros", "unpack_zeros", "repack"]


def __getattr__(name: str):
    # Keep `import dqgen` light: the runtime (cuda-bindings, numba) loads on first use.
    if name in ("compile", "Kernel"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
