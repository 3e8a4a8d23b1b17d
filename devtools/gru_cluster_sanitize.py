"""Small runs of the cluster-resident int8 GRU kernel (sm_90) without torch (W.x on the host), checked bit-exact
against the numba reference at every step; meant to run under `compute-sanitizer --tool memcheck` / `racecheck` /
`synccheck --report-api-errors no` on an H100 (remote st.async into the peers' h buffers, the mbarrier waits, the
two stages, the split-K partial sums). H 256 with batch 20 (3 clusters of 8 rows, the last one short, K split 4) and
H 1024 with batch 16 (one cluster of 16 rows, K split 1), 4 steps.
Usage: python devtools/gru_cluster_sanitize.py"""

from __future__ import annotations

import numpy as np

from dqgen.gru import calibrate, reference
from dqgen.gru.cluster import ClusterKernel, candidates
from dqgen.gru.kernel import channel_table
from dqgen.run import device as dev


def run_case(hidden: int, rows: int, which: int, steps: int = 4) -> bool:
    rng = np.random.default_rng(hidden + rows)
    c = 64
    k = 1 / np.sqrt(hidden)
    w, r = rng.uniform(-k, k, (3 * hidden, c)), rng.uniform(-k, k, (3 * hidden, hidden))
    bx, br = rng.uniform(-k, k, 3 * hidden), rng.uniform(-k, k, 3 * hidden)
    p = calibrate(w, r, bx, br, [(rng.standard_normal((10, rows, c)), np.zeros((rows, hidden)))])
    x_q = rng.integers(-128, 128, (steps, rows, c)).astype(np.int8)
    h0_q = rng.integers(-128, 128, (rows, hidden)).astype(np.int8)
    wx = np.einsum("tnc,gc->tng", x_q.astype(np.int64), p.w_q.astype(np.int64)).astype(np.int32)
    pl = candidates(hidden, rows, dev.max_shared_optin(0))[which]
    hbuf = np.zeros((steps + 1, rows, hidden), np.int8)
    hbuf[0] = h0_q
    host = {"wx": wx, "r": np.ascontiguousarray(p.r_q), "h": hbuf, "chan": channel_table(p)}
    bufs = {name: dev.DeviceBuffer.from_host(a) for name, a in host.items()}
    arr = {name: b.as_array(host[name].shape, host[name].dtype) for name, b in bufs.items()}
    ClusterKernel(p, 0)(pl, arr["wx"], arr["r"], arr["h"], arr["chan"])
    dev.synchronize(0)
    got = dev.to_host(arr["h"])[1:]
    want = reference.run(p, x_q, h0_q)
    bad = [t for t in range(steps) if not (got[t] == want[t]).all()]
    print(f"cluster GRU hidden {hidden} rows {rows} plan {pl}: steps differing {bad}")
    return not bad


def main() -> None:
    ok = run_case(256, 20, 0) & run_case(1024, 16, 1)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
