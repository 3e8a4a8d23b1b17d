"""The signature tables of the eager call paths: one bounded dict and its insert, shared by the dequantize Kernel's
checked launches, the GEMV's and the GEMM's bound launches (per packed weight) and the W8A8 ops' call caches
(``dqgen.w8a8.op``, ``dqgen.w8a8.matmul_op``). Torch-free, so it is tested on the CPU."""

from __future__ import annotations

from typing import TypeVar

#: Signatures a W8A8 op keeps (pointers change with every new input tensor: the table starts over when full).
CALLS_MAX = 1024
#: Checked launches a dequantize Kernel keeps; past this many tensor signatures the table starts over.
SIGNATURES_MAX = 256
#: Bound launches a packed GEMV or GEMM weight keeps, by (x, out, bias) pointers and M.
WEIGHT_BOUND_MAX = 64

K = TypeVar("K")
V = TypeVar("V")


def remember(table: dict[K, V], key: K, value: V, most: int) -> V:
    """``table[key] = value``, the table emptied first when it holds ``most`` entries (safe: an entry owns no memory a
    launch reads, and the kernels stay loaded); returns ``value``."""
    if len(table) >= most:
        table.clear()
    table[key] = value
    return value
