"""Every small Hopper GEMM schedule (dqgen.run.gemm90.Plan90) Plan90.check accepts: what the schedule tests sweep."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from dqgen.run.gemm90 import Plan90


def accepted_small_plans(max_tiles: int = 5, max_k_tiles: int = 4, max_ctas: int = 8) -> Iterator[Plan90]:
    for tiles, k_tiles, ctas in itertools.product(
        range(1, max_tiles + 1), range(1, max_k_tiles + 1), range(1, max_ctas + 1)
    ):
        for whole, q in itertools.product(range(tiles + 1), range(1, ctas + 1)):
            plan = Plan90(tiles, ctas, k_tiles, whole, q)
            try:
                plan.check()
            except ValueError:
                continue
            yield plan
