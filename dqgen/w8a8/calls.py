"""What the eager signature caches of quantize_activations (``op``) and matmul (``matmul_op``) share: their bounds
and the bounded insert. Torch-free, so it is tested on the CPU."""

from __future__ import annotations

from typing import TypeVar

#: Signatures an op keeps (pointers change with every new input tensor: the table starts over when full).
CALLS_MAX = 1024
#: Bound launches kept per signature: the outputs (and the matmul's workspace) come from torch's caching allocator,
#: where a few addresses recur.
BOUND_MAX = 16

K = TypeVar("K")
V = TypeVar("V")


def remember(table: dict[K, V], key: K, value: V, most: int) -> V:
    """``table[key] = value``, the table emptied first when it holds ``most`` entries (safe: an entry owns no memory a
    launch reads, and the kernels stay loaded); returns ``value``."""
    if len(table) >= most:
        table.clear()
    table[key] = value
    return value
