"""Checkpoint tensors packed once per version: the fused matmul's checkpoint form (``Kernel.matmul(x, qweight,
scales, ...)``) packs the GEMV layout, the dispatch the GEMM's, each on first use and again when any tensor changes
(torch's in-place version counter) or is freed. Keyed by the tensors' identities and versions, never by their
contents (no device read per call)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def version(t: Any) -> int:
    """torch's in-place version counter of ``t`` (-1 for an inference-mode tensor, which cannot be written)."""
    try:
        return int(t._version)
    except RuntimeError:
        return -1


def signature(t: Any) -> tuple | None:
    """What identifies a tensor's contents without reading them: pointer, shape, strides, dtype and version."""
    if t is None:
        return None
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, version(t))


@dataclass
class _Entry(Generic[T]):
    packed: T
    refs: tuple[Callable[[], Any] | None, ...]  # the tensors packed (alive: their memory is not reused)


class PackCache(Generic[T]):
    """Packed forms by (kernel key, tensor signatures); an entry whose tensors were freed is packed anew (a new
    tensor may reuse the freed memory and version). Cleared whole past ``limit`` entries."""

    def __init__(self, limit: int = 256) -> None:
        self._entries: dict[tuple, _Entry[T]] = {}
        self.limit = limit

    def get(self, owner: str, tensors: Sequence[Any], pack: Callable[[], T]) -> T:
        key = (owner, *(signature(t) for t in tensors))
        hit = self._entries.get(key)
        if hit is not None and all(
            (r is None) == (t is None) and (r is None or r() is not None)
            for r, t in zip(hit.refs, tensors, strict=True)
        ):
            return hit.packed
        packed = pack()
        if len(self._entries) >= self.limit:
            self._entries.clear()
        self._entries[key] = _Entry(packed, tuple(None if t is None else weakref.ref(t) for t in tensors))
        return packed
