"""Every entry point of the Hopper GEMM (dqgen.run.gemm90: each token tile, one and two consumer warpgroups, the
64-feature shapes (NARROW_CONFIGS90, selectable, not dispatched), split-K
with its workspace and the unsplit grid, split-K clusters of the one-CTA entries (their pieces added through
distributed shared memory), the 2-CTA cluster entries multicasting x: two token tiles, the second's
rank-1 half past M, and an odd feature-tile count's spare CTA) and the gather kernel in front of it for act-order
weights (x gathered into slot order, padding slots zero) launched on shapes with tails, for `compute-sanitizer --tool
memcheck`, `racecheck` and `synccheck` (TMA stages reused through mbarriers, named barriers among the consumers,
remote arrivals on a peer's barriers); each output is also checked against the float64 reference. Exit 1 when an
entry is not covered or an output is off; exit 0 with a note on a GPU that is not sm_90. ``--only nvfp4_fp16,...``:
those cases alone (each still launches every entry point split and unsplit; the gather is required only where its
act-order case runs); ``--cluster``: the 2-CTA cluster entries alone (a shorter run under the sanitizers)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dqgen.check.matmul_reference import TOLERANCE, matmul_inputs, matmul_reference, random_x, relative_error
from dqgen.core.spec import Spec, load_spec
from dqgen.kernels.gemm90 import CLUSTER_CONFIGS90, CONFIGS90, NARROW_CONFIGS90, Gemm90Config
from dqgen.run import gemm, gemm90
from dqgen.run.gemm90 import Plan90
from dqgen.run.gpucheck import exact_allocations, to_numpy, to_torch

#: (spec, K, N, group size, splits a tile, split-K cluster sizes): int4 with zeros, int8 per-channel with a K tail
#: inside a tile, MXFP4 (the float specs' 1-byte scale rows) and NVFP4 (its global scale); N leaves a partial tile; 5
#: pieces of 12 K tiles put stream-K pieces across tiles (both partial slots, odd segments); 2 and 4 pieces a
#: tile (int8, AWQ) are added by their CTAs' shares where gemm90.shares_for allows (the shared fixup); split-K
#: clusters of 2, 4 and 8 CTAs (8 on 12 and 13 K tiles: CTAs of one and of two K tiles), and of 2 on the act-order
#: weight's gathered x'.
CASES = (
    ("awq_int4_fp16", 128 * 6, 200, 128, (1, 3, 4, 5), (2, 4, 8)),  # 12 K tiles in 5 pieces: CTAs spanning two tiles
    ("int8_bf16", 64 * 3 + 8, 128 * 3 + 4, None, (1, 2, 3), ()),  # 2 pieces shared, 3 by the last arriver
    # act-order (shuffled g_idx) in 6 groups of 96 rows, each padded to 128 slots: the gather writes x' [M, 768]
    ("gptq_int4_asym_act_order_fp16", 96 * 6, 200, 96, (1, 3), (2,)),
    # a float spec: MXFP4's e8m0 codes, two scale rows a stage (groups of 32), the last tile's second past G
    ("mxfp4_bf16", 64 * 12 + 32, 200, None, (1, 3), ()),
    # NVFP4: e4m3 codes in groups of 16 (four scale rows a stage, two decoded a word), the fp32 global scale's
    # pointer an argument of the launch; the last tile's last two scale rows past G
    ("nvfp4_fp16", 64 * 12 + 32, 200, None, (1, 3), (8,)),
)


def _launch(spec: Spec, gw: Any, W: np.ndarray, cfg: Gemm90Config, M: int, what: str, **kw: int) -> list[str]:
    """One launch of ``cfg`` on M rows of x (run_gemm with ``kw``), checked against the float64 reference: [] where
    within tolerance, else its one-line name."""
    import torch

    x = random_x(spec, M, W.shape[0], seed=M)
    y = gemm.run_gemm(spec, to_torch(x), gw, config=cfg, **kw)
    torch.cuda.synchronize()
    err = relative_error(to_numpy(y).astype(np.float64), matmul_reference(x, W))
    print(f"{spec.name} K={W.shape[0]} M={M} {cfg.tag} {what}: rel err {err:.2e}")
    return [] if err <= TOLERANCE[spec.target.value] else [f"{spec.name} {cfg.tag} {what}"]


def main(only: list[str] | None = None, only_cluster: bool = False) -> int:
    import torch

    if torch.cuda.get_device_capability(0) != (9, 0):
        print("not an sm_90 GPU: the Hopper GEMM does not run here")
        return 0
    covered: set[tuple[Gemm90Config, bool | str]] = set()  # (entry, split: False / True / "ksplit")
    bad: list[str] = []
    gathered = False
    cases = [c for c in CASES if only is None or c[0] in only]
    if only is not None and len(cases) != len(only):
        print(f"--only: expected case names among {[c[0] for c in CASES]}, got {only}")
        return 1
    for name, K, N, group, split_list, cluster_list in cases:
        spec = load_spec(name)
        (q, s, z, gi, gs), W = matmul_inputs(spec, K, N, seed=K + N, group_size=group)
        gw = gemm.pack_gemm(spec, to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gs))
        gathered |= gw.gather
        for cfg in () if only_cluster else CONFIGS90 + NARROW_CONFIGS90:
            for splits in split_list:
                M = cfg.bn - 3 if cfg.bn > 8 else 5
                bad += _launch(spec, gw, W, cfg, M, f"N={N} splits={splits}", splits=splits)
                plan = Plan90.of(cfg.tiles(M, N), cfg.tiles(M, N) * splits, gw.k_tiles)
                shared = splits > 1 and gemm90.shares_for(plan, cfg, 1 << 20) > 1
                covered.add((cfg, "shared" if shared else splits > 1))
            for ks in (k for k in cluster_list if cfg.accumulators % k == 0):  # the sizes it has shares for; 2 tiles
                bad += _launch(spec, gw, W, cfg, cfg.bn + 5, f"N={N} cluster_splits={ks}", cluster_splits=ks)
                covered.add((cfg, "ksplit"))
        for n_cols in (N, N + 256):  # whole pair tiles only: two token tiles; N = 200 and 200 + 256 (3 tiles)
            if n_cols != N:  # the weight above serves N: one more pack (slow under the sanitizers) for the other
                (q, s, z, gi, gs), W = matmul_inputs(spec, K, n_cols, seed=K + n_cols, group_size=group)
                gw = gemm.pack_gemm(
                    spec, to_torch(q), to_torch(s), to_torch(z), g_idx=to_torch(gi), global_scale=to_torch(gs)
                )
            for cfg in CLUSTER_CONFIGS90:
                bad += _launch(spec, gw, W, cfg, cfg.bn + 5, f"N={n_cols}")
                covered.add((cfg, False))
    want: set[tuple[Gemm90Config, bool | str]] = {(c, False) for c in CLUSTER_CONFIGS90}
    if not only_cluster:
        want |= {(c, sp) for c in CONFIGS90 + NARROW_CONFIGS90 for sp in (False, True)}
        want |= {(c, "shared") for c in CONFIGS90 + NARROW_CONFIGS90 if c.accumulators % 16 == 0}
        sizes = {k for c in cases for k in c[5]}
        want |= {(c, "ksplit") for c in CONFIGS90 + NARROW_CONFIGS90 if any(c.accumulators % k == 0 for k in sizes)}
    missing = want - covered
    want_gather = any(load_spec(c[0]).act_order for c in cases)
    if missing or bad or gathered != want_gather:
        print(f"FAILED: not covered {sorted(str(m) for m in missing)}, off: {bad}, gather launched: {gathered}")
        return 1
    also = ", and the gather" if want_gather else ""
    print(
        f"every Hopper GEMM entry point launched, split and unsplit, and in split-K clusters{also}; every output"
        " within tolerance"
    )
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated case names (default: every case)")
    ap.add_argument("--cluster", action="store_true", help="the 2-CTA cluster entries alone")
    args = ap.parse_args()
    exact_allocations()
    sys.exit(main(args.only.split(",") if args.only else None, args.cluster))
