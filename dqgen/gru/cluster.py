"""The cluster-resident int8 GRU (sm_90, templates/gru_cluster.cu.j2): one launch of thread-block clusters for all
T steps; each cluster keeps R in the shared memory of its CTAs (3H^2 / cluster bytes each), exchanges h through
distributed shared memory (st.async onto each peer's mbarrier, double-buffered) a step, and runs R.h on the int8
tensor cores. Several clusters split the batch. W.x for all steps stays one int8 GEMM before it (QuantGRULayer
runs it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels.gru_cell import CLUSTER_MAX_WARPS, CLUSTER_STATIC_SHARED, MAX_CLUSTER, GruClusterConfig
from .kernel import cell_context
from .params import QuantGRUParams

#: Bytes of one warp's partial accumulators when a tile's K range is split (12 int32 a lane).
_PARTIAL_BYTES = 12 * 32 * 4
#: Static shared memory of the kernel beside its dynamic part: the shared copies of the three activation tables and
#: the two mbarriers of the h buffers.
STATIC_SHARED = CLUSTER_STATIC_SHARED


@dataclass(frozen=True)
class ClusterPlan:
    """``clusters`` clusters of ``cluster`` CTAs, ``nb`` batch rows each, K split over ``ksplit`` warps."""

    cluster: int
    nb: int
    ksplit: int
    clusters: int
    threads: int
    shared_bytes: int


def cluster_size(hidden: int, max_cluster: int = MAX_CLUSTER) -> int | None:
    """The most CTAs (<= max_cluster) that share ``hidden`` units in multiples of 16; None where the kernel does
    not run (hidden not a multiple of 128)."""
    if hidden < 128 or hidden % 128:
        return None
    return max(c for c in range(1, max_cluster + 1) if hidden % c == 0 and (hidden // c) % 16 == 0)


def shared_bytes(hidden: int, cluster: int, nb: int, ksplit: int) -> int:
    units = hidden // cluster
    items = (units // 16) * (nb // 8)
    return (
        3 * units * hidden + 2 * nb * hidden + 2 * nb * units + (ksplit * items * _PARTIAL_BYTES if ksplit > 1 else 0)
    )


def candidates(hidden: int, rows: int, shared_optin: int, max_cluster: int = MAX_CLUSTER) -> list[ClusterPlan]:
    """Every batch-rows-per-cluster choice that fits one CTA's shared memory, fewest rows first (each with the
    widest K split that fits: more warps for a small tile). Empty where R's slice alone does not fit."""
    cl = cluster_size(hidden, max_cluster)
    if cl is None or rows < 1:
        return []
    units = hidden // cl
    out = []
    for nb in range(8, max(8, -(-rows // 8) * 8) + 1, 8):
        items = (units // 16) * (nb // 8)
        fits = [
            k
            for k in (4, 2, 1)
            if items * k <= CLUSTER_MAX_WARPS
            and (hidden // 64) % k == 0
            and shared_bytes(hidden, cl, nb, k) + STATIC_SHARED <= shared_optin
        ]
        if not fits:
            break
        k = fits[0]
        sb = shared_bytes(hidden, cl, nb, k)
        out.append(ClusterPlan(cl, nb, k, -(-rows // nb), 32 * items * k, sb))
    return out


def choose(cands: list[ClusterPlan], max_active: list[int]) -> ClusterPlan | None:
    """The fewest rows per cluster whose clusters are all resident at once (``max_active[i]``: the occupancy
    API's count for ``cands[i]``); else the most rows per cluster that can run (fewest waves of clusters)."""
    runnable = [(c, m) for c, m in zip(cands, max_active, strict=True) if m >= 1]
    for c, m in runnable:
        if c.clusters <= m:
            return c
    return runnable[-1][0] if runnable else None


def cluster_config(p: QuantGRUParams, pl: ClusterPlan) -> GruClusterConfig:
    return GruClusterConfig(cell_context(p), pl.cluster, pl.nb, pl.ksplit)


def compile_cluster(p: QuantGRUParams, pl: ClusterPlan, arch: str = "sm_90", want: Any = "cubin") -> Any:
    """NVRTC result of the cluster kernel for ``arch`` (no GPU needed), for the tests that read its PTX / log."""
    from ..run.loader import compile_config

    return compile_config(cluster_config(p, pl), arch, want)


class ClusterKernel:
    """The cluster kernel of one model on one device (one compiled variant per plan shape)."""

    def __init__(self, p: QuantGRUParams, device: int = 0) -> None:
        from ..run import device as dev
        from ..run.device import arch_sm

        self.params = p
        self.device = device
        self._dev = dev
        arch = dev.device_arch(device)
        self.supported = arch_sm(arch) >= 90
        self._optin = dev.max_shared_optin(device)
        self._kernels: dict[tuple[int, int, int], Any] = {}

    def plan(self, rows: int) -> ClusterPlan | None:
        """The launch for ``rows`` batch rows, or None where the GPU has no clusters or R does not fit."""
        if not self.supported:
            return None
        cands = candidates(self.params.hidden_size, rows, self._optin)
        active: list[int] = []
        for c in cands:
            active.append(
                self._kernel(c).max_active_clusters(c.clusters * c.cluster, c.threads, c.cluster, c.shared_bytes)
            )
            if active[-1] >= max(1, c.clusters):
                break  # the first that is all resident: choose() takes it, the rest need not compile
        return choose(cands[: len(active)], active)

    def _kernel(self, pl: ClusterPlan) -> Any:
        key = (pl.cluster, pl.nb, pl.ksplit)
        if key not in self._kernels:
            from ..run.loader import load

            fn = load(cluster_config(self.params, pl), self.device)  # opts in to its shared bytes
            if pl.cluster > 8:
                fn.allow_nonportable_cluster()
            self._kernels[key] = fn
        return self._kernels[key]

    def __call__(self, pl: ClusterPlan, wx_all: Any, r_q: Any, hbuf: Any, chan: Any, stream: Any = 0) -> None:
        """wx_all int32 [T, >= rows, 3H] (unit inner stride), r_q int8 [3H, H], hbuf int8 [T + 1, rows, H] with
        h_0 in slice 0 (h_t is written into slice t), chan int32 [3H, 8]."""
        dev = self._dev
        hsz = self.params.hidden_size
        wx, rq_, hb, ch = (
            dev.as_device_array(a, nm) for a, nm in ((wx_all, "wx_all"), (r_q, "r_q"), (hbuf, "hbuf"), (chan, "chan"))
        )
        steps, rows = hb.shape[0] - 1, hb.shape[1]
        checks = (
            ("wx_all", wx, np.int32, len(wx.shape) == 3 and wx.shape[0] == steps and wx.shape[1] >= rows),
            ("wx_all", wx, np.int32, wx.shape[-1] == 3 * hsz and wx.strides_bytes[-1] == 4),
            ("r_q", rq_, np.int8, tuple(rq_.shape) == (3 * hsz, hsz) and rq_.is_c_contiguous and rq_.ptr % 16 == 0),
            (
                "hbuf",
                hb,
                np.int8,
                len(hb.shape) == 3 and hb.shape[2] == hsz and hb.is_c_contiguous and hb.ptr % 16 == 0,
            ),
            ("chan", ch, np.int32, tuple(ch.shape) == (3 * hsz, 8) and ch.is_c_contiguous and ch.ptr % 16 == 0),
        )
        for name, a, dtype, ok in checks:
            if a.dtype != dtype or not ok:
                raise ValueError(
                    f"{name}: wrong dtype/shape/layout {a.dtype}{list(a.shape)} (see the docstring; int8 arrays"
                    " 16-byte aligned)"
                )
        if rows > pl.clusters * pl.nb:
            raise ValueError(f"hbuf: {rows} batch rows, but the plan covers {pl.clusters * pl.nb}")
        if steps < 1:
            return
        args = [
            wx,
            np.int64(wx.strides_bytes[0] // 4),
            np.int32(wx.strides_bytes[1] // 4),
            rq_,
            hb,
            ch,
            np.int32(steps),
            np.int32(rows),
        ]
        self._kernel(pl).launch_cluster(
            pl.clusters * pl.cluster, pl.threads, pl.cluster, args, stream=stream, shared_mem=pl.shared_bytes
        )
