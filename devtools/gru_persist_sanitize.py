"""A small run of the persistent int8 GRU kernel without torch (W.x on the host), checked bit-exact against the
numba reference at every step; meant to run under `compute-sanitizer --tool racecheck` / `--tool synccheck`
(shared-memory staging between steps, the grid barrier's __syncthreads) on a GPU machine. Two batch chunks
(40 rows staged 32 at a time), a tail hidden size (72: the last CTA owns fewer units), 4 steps.
Usage: python devtools/gru_persist_sanitize.py"""

from __future__ import annotations

import dataclasses

import numpy as np

from dqgen.gru import calibrate, reference
from dqgen.gru.kernel import channel_table
from dqgen.gru.persist import PersistentKernel, padded_hidden
from dqgen.run import device as dev


def main() -> None:
    rng = np.random.default_rng(7)
    hidden, c, rows, steps = 72, 24, 40, 4
    k = 1 / np.sqrt(hidden)
    w, r = rng.uniform(-k, k, (3 * hidden, c)), rng.uniform(-k, k, (3 * hidden, hidden))
    bx, br = rng.uniform(-k, k, 3 * hidden), rng.uniform(-k, k, 3 * hidden)
    p = calibrate(w, r, bx, br, [(rng.standard_normal((10, rows, c)), np.zeros((rows, hidden)))])
    x_q = rng.integers(-128, 128, (steps, rows, c)).astype(np.int8)
    h0_q = rng.integers(-128, 128, (rows, hidden)).astype(np.int8)
    wx = np.einsum("tnc,gc->tng", x_q.astype(np.int64), p.w_q.astype(np.int64)).astype(np.int32)
    kern = PersistentKernel(p, 0)
    pl = kern.plan(rows)
    assert pl is not None
    hp = padded_hidden(hidden)
    pl = dataclasses.replace(
        pl, units=5, grid=-(-hidden // 5), upad=5, nbc=32, shared_bytes=3 * 5 * hp + 32 * (hp + 16)
    )
    hbuf = np.zeros((steps + 1, rows, hidden), np.int8)
    hbuf[0] = h0_q
    bufs = {
        "wx": (dev.DeviceBuffer.from_host(wx), wx),
        "r": (dev.DeviceBuffer.from_host(np.ascontiguousarray(p.r_q)), p.r_q),
        "h": (dev.DeviceBuffer.from_host(hbuf), hbuf),
        "chan": (dev.DeviceBuffer.from_host(channel_table(p)), channel_table(p)),
        "bar": (dev.DeviceBuffer.from_host(np.zeros(2, np.int32)), np.zeros(2, np.int32)),
    }
    arr = {name: b.as_array(h.shape, h.dtype) for name, (b, h) in bufs.items()}
    kern(pl, arr["wx"], arr["r"], arr["h"], arr["chan"], arr["bar"])
    dev.synchronize(0)
    got = dev.to_host(arr["h"])[1:]
    want = reference.run(p, x_q, h0_q)
    bad = [t for t in range(steps) if not (got[t] == want[t]).all()]
    print(f"persistent GRU hidden {hidden} rows {rows} grid {pl.grid} units {pl.units}: steps differing {bad}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
