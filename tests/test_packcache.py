"""dqgen.run.packcache: checkpoint tensors packed once per version, on tensor stand-ins (the attributes the cache
reads), so that the rules hold without a GPU: same tensors -> one pack; an in-place write, a freed tensor or another
kernel -> a new pack."""

from __future__ import annotations

import gc

import pytest

from dqgen.run.packcache import PackCache, signature, version


class FakeTensor:
    """What the cache reads of a torch tensor: data_ptr, shape, stride, dtype and _version."""

    def __init__(self, ptr: int, inference: bool = False) -> None:
        self.ptr, self.inference, self.writes = ptr, inference, 0
        self.shape, self.dtype = (4, 8), "int32"

    def data_ptr(self) -> int:
        return self.ptr

    def stride(self) -> tuple[int, int]:
        return (8, 1)

    @property
    def _version(self) -> int:
        if self.inference:
            raise RuntimeError("Inference tensors do not track version counter.")
        return self.writes


def test_one_pack_per_version_and_owner() -> None:
    cache: PackCache[int] = PackCache()
    q, s = FakeTensor(0x1000), FakeTensor(0x2000)
    packs: list[int] = []

    def pack() -> int:
        packs.append(len(packs))
        return packs[-1]

    assert cache.get("k1", (q, s, None), pack) == 0
    assert cache.get("k1", (q, s, None), pack) == 0  # same tensors, same versions: no new pack
    s.writes += 1  # an in-place write to the scales
    assert cache.get("k1", (q, s, None), pack) == 1
    assert cache.get("k2", (q, s, None), pack) == 2  # another kernel's layout
    assert cache.get("k1", (q, s, FakeTensor(0x3000)), pack) == 3  # zeros given where there were none
    assert packs == [0, 1, 2, 3]


def test_a_freed_tensor_at_the_same_address_is_packed_anew() -> None:
    cache: PackCache[str] = PackCache()
    q = FakeTensor(0x1000)
    assert cache.get("k", (q,), lambda: "first") == "first"
    del q
    gc.collect()
    q2 = FakeTensor(0x1000)  # the allocator reused the address; version 0 again
    assert cache.get("k", (q2,), lambda: "second") == "second"


def test_limit_clears_and_inference_tensors_have_version_minus_one() -> None:
    cache: PackCache[int] = PackCache(limit=2)
    keep = [FakeTensor(0x1000 * i) for i in range(1, 4)]
    for i, t in enumerate(keep):
        cache.get("k", (t,), lambda i=i: i)
    assert cache.get("k", (keep[0],), lambda: 99) == 99  # dropped when the third entry cleared the cache
    frozen = FakeTensor(0x9000, inference=True)
    assert version(frozen) == -1 and signature(frozen) == (0x9000, (4, 8), (8, 1), "int32", -1)
    assert signature(None) is None
    with pytest.raises(AttributeError):
        signature(object())


def test_no_stale_packed_copy_stays_resident() -> None:
    """A new version of the same tensors replaces their entry, and an entry whose tensors were freed goes at the
    next miss: repeated in-place updates of one weight keep one packed copy, not one per version."""
    cache: PackCache[int] = PackCache()
    q, s = FakeTensor(0x1000), FakeTensor(0x2000)
    for write in range(10):
        q.writes = write
        assert cache.get("k", (q, s), lambda write=write: write) == write
    assert len(cache) == 1
    other = FakeTensor(0x3000)
    cache.get("k", (other, s), lambda: 100)
    assert len(cache) == 2
    del other
    gc.collect()
    cache.get("k2", (q, s), lambda: 200)  # a miss: the freed tensor's entry goes
    assert len(cache) == 2  # ("k", q, s) and ("k2", q, s)
    view = FakeTensor(0x1000)  # another object with q's signature (a view of the same memory): a hit
    view.writes = q.writes
    assert cache.get("k", (view, s), lambda: 300) == 9
