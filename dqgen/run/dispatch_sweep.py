"""A GPU's dispatch rule from a sweep of its paths (devtools/gemm_dispatch_rule.py times them; this derives the
rule, a pure function of the times, so the rule a record holds can be recomputed from its rows on any machine).

``us(path, M, K, N)``: the time of path "gemv", "gemm" or "dequant + cublas" for M rows of a K x N weight."""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..layout.gemm import TILE_K
from .dispatch import DENSE_MARGIN, GEMV_MAX_M, DispatchRule, MeasuredShape, narrowed_gemm
from .gemm90 import pays90

Times = Callable[[str, int, int, int], float]


def measured_shapes(us: Times, ms: list[int], shapes: list[tuple[int, int]]) -> tuple[MeasuredShape, ...]:
    """Per shape, the M of ``ms`` above GEMV_MAX_M and those where dequantize + cuBLAS ran more than DENSE_MARGIN
    faster than the GEMM; the M up to GEMV_MAX_M and those where the GEMM ran more than DENSE_MARGIN faster than the
    GEMV (a call keeps the GEMV unless the GEMM clearly wins: within the margin either is within 3% of the best)."""
    big = tuple(M for M in ms if M > GEMV_MAX_M)
    small = tuple(M for M in ms if M <= GEMV_MAX_M)
    if not big and not small:
        return ()
    return tuple(
        MeasuredShape(
            K,
            N,
            big,
            tuple(M for M in big if us("dequant + cublas", M, K, N) * DENSE_MARGIN < us("gemm", M, K, N)),
            small,
            tuple(M for M in small if us("gemm", M, K, N) * DENSE_MARGIN < us("gemv", M, K, N)),
        )
        for K, N in shapes
    )


def dense_min_m(us: Times, ms: list[int], shapes: list[tuple[int, int]]) -> int | None:
    """The smallest M (> GEMV_MAX_M) from which dequantize + cuBLAS beat the GEMM by more than DENSE_MARGIN on every
    shape (what a shape the sweep did not time follows; None: never)."""
    for M in ms:
        if M > GEMV_MAX_M and all(
            us("dequant + cublas", M, K, N) * DENSE_MARGIN < us("gemm", M, K, N) for K, N in shapes
        ):
            return M
    return None


def regret(us: Times, start: int, ms: list[int], shapes: list[tuple[int, int]], sms: int | None) -> float:
    """The worst time over the faster of GEMV and GEMM, over the sweep's M <= GEMV_MAX_M and shapes, of the dispatch
    with gemm_min_m = ``start``: the GEMM from ``start``, below GEMV_MAX_M on an sm_90 GPU of ``sms`` SMs only where
    the Hopper GEMM pays (dispatch.narrowed_gemm with gemm90.pays90; ``sms`` None: another GPU, no such narrowing)."""
    worst = 1.0
    for M in (m for m in ms if m <= GEMV_MAX_M):
        for K, N in shapes:
            gv, gm = us("gemv", M, K, N), us("gemm", M, K, N)
            pays = None if sms is None else functools.partial(pays90, N, -(-K // TILE_K), M, sms)
            gemm = narrowed_gemm(M, start, pays)
            worst = max(worst, (gm if gemm else gv) / min(gv, gm))
    return worst


def rule_from_sweep(
    us: Times, ms: list[int], shapes: list[tuple[int, int]], spec: str, sms: int, hopper: bool
) -> DispatchRule:
    """The rule of a GPU of ``sms`` SMs (``hopper``: sm_90, where the dispatch narrows rows under 16) from a sweep of
    ``spec``: gemm_min_m the M (of the sweep's up to GEMV_MAX_M, or GEMV_MAX_M + 1) of least regret (the larger on a
    tie; what shapes the sweep did not time follow); dense_min_m and the measured shapes as above (their own GEMV /
    GEMM choice up to GEMV_MAX_M rows and dense choice above), those for ``spec``'s code family on GPUs of ``sms``
    SMs."""
    small = [M for M in ms if M <= GEMV_MAX_M]
    narrow = sms if hopper else None
    gemm_min = min([*small, GEMV_MAX_M + 1], key=lambda m: (regret(us, m, ms, shapes, narrow), -m))
    return DispatchRule(gemm_min, dense_min_m(us, ms, shapes), measured_shapes(us, ms, shapes), spec, sms)
