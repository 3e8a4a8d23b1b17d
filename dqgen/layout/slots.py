"""K-slot maps shared by the prepacked layouts of the fused GEMV (layout.matmul, units of one block of P rows) and the
tensor-core GEMM (layout.gemm, units of one TILE_K tile): which original row of W each slot holds, and the group of
each unit of slots, so that every unit lies in one group."""

from __future__ import annotations

import numpy as np


def in_order(K: int, slots: int, unit: int, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows in their own order, padding after the last: ``(perm [slots], unit_group [slots / unit])``; the padding
    joins the last group (group size -1: one group)."""
    perm = np.full(slots, -1, dtype=np.int32)
    perm[:K] = np.arange(K, dtype=np.int32)
    first = np.arange(0, slots, unit, dtype=np.int64)  # each unit's first slot
    if group_size <= 0:
        return perm, np.zeros(first.size, dtype=np.int32)
    last_group = (K - 1) // group_size if K > 0 else 0
    return perm, np.minimum(first // group_size, last_group).astype(np.int32)


def sorted_by_group(row_group: np.ndarray, unit: int, multiple: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by group (stably), each group padded to whole units, the total padded to a positive multiple of
    ``multiple`` slots (a multiple of ``unit``): ``(perm [slots], unit_group [slots / unit])``; units past the last
    group's are group 0 (they hold no rows)."""
    rows = np.argsort(row_group, kind="stable")
    groups, counts = np.unique(row_group[rows], return_counts=True)
    padded = -(-counts // unit) * unit
    slots = max(multiple, -(-int(padded.sum()) // multiple) * multiple)
    perm = np.full(slots, -1, dtype=np.int32)
    unit_group = np.zeros(slots // unit, dtype=np.int32)
    at = start = 0
    for grp, n, pn in zip(groups.tolist(), counts.tolist(), padded.tolist(), strict=True):
        perm[at : at + n] = rows[start : start + n]
        unit_group[at // unit : (at + pn) // unit] = grp
        at += pn
        start += n
    return perm, unit_group
