"""The Hopper GEMMs' schedule as the kernels render it (templates/blocks/splitk.cuh.j2: owner_fn, cta_work,
split_owners; both the W4A16 and the W8A8 kernel include it) compiled for the host with g++ and walked for every small
plan Plan90.check accepts: the producer's (tile, K tile) sequence is the consumers' segments', every unit runs once,
each split tile's pieces come from exactly the CTAs c0..c1 its last arriver waits for, and no CTA writes a workspace
slot twice. The template's own code, not a restatement of it (tests/test_w8a8_gemm90.py's model is that), with no
GPU."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections import Counter
from typing import Any

import pytest

from dqgen.emit.render import template_env
from dqgen.run.gemm90 import Plan90

from .hopper_plans import accepted_small_plans

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to compile the schedule for the host")

# The kernels' walk, both halves: the producer steps K tiles, moving to next_segment at a tile's end; the consumers
# run segments of len = min(k_tiles - kb, nt - done) and, for a piece of a tile, find its owners and their slots.
SOURCE = """
#define __device__
#define __forceinline__ inline
{% import "blocks/splitk.cuh.j2" as splitk %}
struct Args { long long units; int k_tiles; long long whole; int split_ctas; };
{{ splitk.owner_fn() }}
extern "C" int walk(long long units, int k_tiles, long long whole, int split_ctas, int cta, int P,
                    long long* prod, long long* segs, int* nseg) {
    const Args p{units, k_tiles, whole, split_ctas};
{{ splitk.cta_work("p") }}
    long long tile;
    int kt;
    first_segment(tile, kt);
    for (int i = 0; i < nt; ++i) {
        prod[2 * i] = tile;
        prod[2 * i + 1] = kt;
        if (++kt == p.k_tiles) next_segment(tile, kt);
    }
    int kb, n = 0;
    first_segment(tile, kb);
    for (int done = 0; done < nt; next_segment(tile, kb)) {
        const int len = p.k_tiles - kb < nt - done ? p.k_tiles - kb : nt - done;
        long long* s = segs + 6 * n++;
        s[0] = tile; s[1] = kb; s[2] = len; s[3] = s[4] = s[5] = -1;
        if (!(kb == 0 && len == p.k_tiles)) {
{{ splitk.split_owners("p", "tile") }}
            s[3] = c0; s[4] = c1; s[5] = slot(cta);
        }
        done += len;
    }
    *nseg = n;
    return nt;
}
"""


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("schedule")
    (tmp / "walk.cpp").write_text(template_env().from_string(SOURCE).render())
    lib = tmp / "walk.so"
    assert GXX is not None
    subprocess.run([GXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-ftrapv", "-o", str(lib), str(tmp / "walk.cpp")],
                   check=True)  # fmt: skip
    fn = ctypes.CDLL(str(lib)).walk
    fn.restype = ctypes.c_int
    i64, i32, p64 = ctypes.c_longlong, ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)
    fn.argtypes = [i64, i32, i64, i32, i32, i32, p64, p64, ctypes.POINTER(i32)]
    return fn


def _run(walk: Any, plan: Plan90) -> None:
    cap = plan.tiles * plan.k_tiles + 1
    prod, segs, nseg = (ctypes.c_longlong * (2 * cap))(), (ctypes.c_longlong * (6 * cap))(), ctypes.c_int()
    units: Counter[tuple[int, int]] = Counter()
    holders: dict[int, list[int]] = {}  # split tile -> the CTAs that ran a piece of it
    owners: dict[int, set[tuple[int, int]]] = {}  # split tile -> the (c0, c1) each piece computed
    slots: Counter[tuple[int, int]] = Counter()
    for cta in range(plan.ctas):
        nt = walk(plan.tiles * plan.k_tiles, plan.k_tiles, plan.whole, plan.split_ctas, cta, plan.ctas, prod, segs,
                  ctypes.byref(nseg))  # fmt: skip
        produced = [(prod[2 * i], prod[2 * i + 1]) for i in range(nt)]
        consumed = []
        for j in range(nseg.value):
            tile, kb, length, c0, c1, slot = segs[6 * j : 6 * j + 6]
            consumed += [(tile, kb + i) for i in range(length)]
            if c0 >= 0:
                holders.setdefault(tile, []).append(cta)
                owners.setdefault(tile, set()).add((c0, c1))
                slots[cta, slot] += 1
            else:
                assert kb == 0 and length == plan.k_tiles, plan
        assert produced == consumed, (plan, cta)  # the producer fills the stages the consumers read, in order
        units.update(produced)
    assert units == Counter((t, k) for t in range(plan.tiles) for k in range(plan.k_tiles)), plan  # each unit once
    for tile, ctas in holders.items():
        assert len(owners[tile]) == 1, plan  # every piece names the same owners
        ((c0, c1),) = owners[tile]
        assert ctas == list(range(c0, c1 + 1)), plan  # the last arriver waits for exactly these c1 - c0 + 1 pieces
    assert all(n == 1 for n in slots.values()), plan  # a CTA's two slots: its first and its last piece


def test_the_rendered_schedule_runs_every_plan_check_accepts(walk: Any) -> None:
    plans = list(accepted_small_plans())
    assert len(plans) > 1000
    for plan in plans:
        _run(walk, plan)
    # the plans plan_for makes on the H100 (132 SMs): a split tail of 60 tiles in halves, stream-K pieces of a grid
    for plan in (Plan90(192, 132, 32, 132, 120), Plan90(300, 132, 64, 264, 108), Plan90(48, 96, 32, 0, 96)):
        plan.check()
        _run(walk, plan)


def test_a_plan_check_refuses_would_lose_a_tile(walk: Any) -> None:
    """Plan90(3, 4, 2, 2, 4): CTA 2's stream-K range is empty, between the owners of tile 2: the rendered walk gives
    its last arriver three owners and two pieces, so the tile would never be stored (what check refuses)."""
    with pytest.raises(ValueError, match="split_ctas"):
        Plan90(3, 4, 2, 2, 4).check()
    with pytest.raises(AssertionError):
        _run(walk, Plan90(3, 4, 2, 2, 4))
