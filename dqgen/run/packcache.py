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
    """torch's in-place version counter of ``t``; -1 for an inference-mode tensor, which has none (its in-place
    writes inside inference_mode are not counted: -1 means unknown, not unchanged)."""
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
    """Packed forms by (kernel key, tensor signatures). One entry per (kernel key, tensor objects): a new version
    of the same tensors replaces their entry, and entries whose tensors were freed are dropped on the next miss
    (a new tensor may reuse the freed memory and version), so no stale packed copy stays resident. Cleared whole
    past ``limit`` entries."""

    def __init__(self, limit: int = 256) -> None:
        self._entries: dict[tuple, _Entry[T]] = {}
        self._by_tensors: dict[tuple, tuple] = {}  # (owner, ids of the tensors) -> the key of their entry
        self.limit = limit

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, owner: str, tensors: Sequence[Any], pack: Callable[[], T]) -> T:
        key = (owner, *(signature(t) for t in tensors))
        hit = self._entries.get(key)
        if hit is not None and self._alive(hit, tensors):
            return hit.packed
        packed = pack()
        ident = (owner, *(id(t) for t in tensors))
        self._drop_stale(ident)
        if len(self._entries) >= self.limit:
            self._entries.clear()
            self._by_tensors.clear()
        self._entries[key] = _Entry(packed, tuple(None if t is None else weakref.ref(t) for t in tensors))
        self._by_tensors[ident] = key
        return packed

    @staticmethod
    def _alive(entry: _Entry[Any], tensors: Sequence[Any]) -> bool:
        """The tensors packed are still alive (then equal signatures mean the same memory and contents; a view of
        them, another object with the same signature, hits too)."""
        return all(
            (r is None) == (t is None) and (r is None or r() is not None)
            for r, t in zip(entry.refs, tensors, strict=True)
        )

    def _drop_stale(self, ident: tuple) -> None:
        """Before adding an entry: drop the older entry of the same tensor objects, and every entry whose tensors
        were freed."""
        old = self._by_tensors.pop(ident, None)
        if old is not None:
            self._entries.pop(old, None)
        dead = [k for k, e in self._entries.items() if any(r is not None and r() is None for r in e.refs)]
        for k in dead:
            self._entries.pop(k)
        if dead:
            keep = set(self._entries)
            self._by_tensors = {i: k for i, k in self._by_tensors.items() if k in keep}
