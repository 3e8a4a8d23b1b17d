"""The cluster-resident int8 GRU kernel (sm_90): its plan (what fits one CTA's shared memory), its NVRTC
compilation for sm_90 (CPU: tensor-core mma, cluster barrier, distributed shared memory, no local memory), and on
an H100 every step bit-exact with the numba reference, QuantGRU choosing it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dqgen.emit.nvrtc import compile_source
from dqgen.emit.sass import disassemble
from dqgen.gru import reference
from dqgen.gru.cluster import (
    STATIC_SHARED,
    ClusterPlan,
    candidates,
    choose,
    cluster_config,
    cluster_size,
    shared_bytes,
)
from dqgen.kernels.gru_cell import GruClusterConfig

from .test_gru_persist import H100_OPTIN, _inputs, _params


def test_cluster_of_16_holds_r_up_to_hidden_1024() -> None:
    assert [cluster_size(h) for h in (128, 256, 384, 512, 1024)] == [8, 16, 12, 16, 16]
    assert cluster_size(320) is None  # not a multiple of 128: the cooperative kernel runs
    # H 1024 over 16 CTAs: 192 KiB of R + two h buffers of 8 rows + two stages of the CTA's slice + split-K
    # partials, beside 784 static bytes (tables, mbarriers)
    c = candidates(1024, 64, H100_OPTIN)
    assert [(p.nb, p.ksplit) for p in c] == [(8, 2), (16, 1)]
    assert c[0].shared_bytes == 3 * 64 * 1024 + 2 * 8 * 1024 + 2 * 8 * 64 + 2 * 4 * 12 * 32 * 4 == 226304
    assert c[1].shared_bytes == 3 * 64 * 1024 + 2 * 16 * 1024 + 2 * 16 * 64 == 231424
    assert c[1].shared_bytes + 784 <= H100_OPTIN < c[1].shared_bytes + 784 + 1024  # 1 KiB short of nb 24
    assert c[0].clusters == 8 and c[1].clusters == 4 and c[0].threads == 256
    # H 1280 over 16 CTAs is 240 KiB of R alone: no plan
    assert candidates(1280, 1, H100_OPTIN) == [] and candidates(2048, 1, H100_OPTIN) == []


@pytest.mark.parametrize(("hidden", "rows"), [(256, 1), (256, 64), (512, 8), (512, 70), (1024, 1), (1024, 64)])
def test_every_candidate_fits_and_covers_the_batch(hidden: int, rows: int) -> None:
    c = candidates(hidden, rows, H100_OPTIN)
    assert c and [p.nb for p in c] == list(range(8, 8 * len(c) + 1, 8))
    for p in c:
        assert p.clusters * p.nb >= rows > (p.clusters - 1) * p.nb
        assert p.shared_bytes == shared_bytes(hidden, p.cluster, p.nb, p.ksplit) <= H100_OPTIN - STATIC_SHARED
        units = hidden // p.cluster
        assert p.threads == 32 * (units // 16) * (p.nb // 8) * p.ksplit <= 256
        cfg = cluster_config(_params(hidden, 64), p)
        assert cfg.shared_bytes == p.shared_bytes and cfg.threads == p.threads


def test_choose_prefers_all_clusters_resident_then_fewest_waves() -> None:
    c = candidates(1024, 64, H100_OPTIN)
    assert choose(c, [8, 8]) == c[0]  # 8 clusters of 8 rows, all resident
    assert choose(c, [7, 7]) == c[1]  # 8 would not all be resident: 4 of 16 rows
    assert choose(c, [2, 2]) == c[1]  # neither: the fewest waves
    assert choose(c, [0, 0]) is None


def test_config_refuses_what_the_kernel_cannot_run() -> None:
    k = _params(256, 64)
    from dqgen.gru.kernel import cell_context

    ctx = cell_context(k)
    with pytest.raises(ValueError, match="cluster"):
        GruClusterConfig(ctx, 32, 8, 1)
    with pytest.raises(ValueError, match="nb"):
        GruClusterConfig(ctx, 16, 12, 1)
    with pytest.raises(ValueError, match="ksplit"):
        GruClusterConfig(ctx, 16, 8, 3)
    with pytest.raises(ValueError, match="warps"):
        GruClusterConfig(ctx, 16, 72, 1)  # 9 n tiles of one m tile: 9 warps


@pytest.mark.parametrize(
    ("hidden", "which"), [(256, 0), (256, 3), (256, 7), (512, 0), (512, 1), (512, 2), (512, 3), (1024, 0), (1024, 1)]
)
def test_renders_and_compiles_for_sm90_with_no_local_memory(hidden: int, which: int) -> None:
    """Every candidate of batch 64 at hidden 512 and 1024 (and four of 256's eight), each within its registers."""
    pl = candidates(hidden, 64, H100_OPTIN)[which]
    cfg = cluster_config(_params(hidden, 64), pl)
    src = cfg.source()
    assert f"#define CL {pl.cluster} " in src and f"#define NB {pl.nb} " in src
    ptx = compile_source(src, arch="sm_90", want="ptx", name=cfg.source_name).ptx
    assert ".entry dqgen_gru_cluster" in ptx
    assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in ptx  # R.h on the int8 tensor cores
    # h through distributed shared memory: st.async completing bytes on the receiver's mbarrier, awaited there;
    # one cluster barrier at the start (every CTA running, barriers initialised), none a step
    assert "mapa.shared::cluster" in ptx
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32" in ptx
    # the peers' complete_tx are releases at cluster scope: the wait acquires at cluster scope (never the default
    # cta), through a fence restricted to shared::cluster (the h buffers), not an acquire of all memory
    assert "mbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64" in ptx
    assert "fence.acquire.sync_restrict::shared::cluster.cluster" in ptx
    assert "mbarrier.try_wait.parity.shared::cta.b64" not in ptx and "try_wait.parity.acquire" not in ptx
    assert ptx.count("barrier.cluster.arrive.release") == 1 and ptx.count("barrier.cluster.wait.acquire") == 1
    assert "dp4a" not in ptx and "atom.global" not in ptx  # neither the SIMT dot nor the grid barrier
    assert ".local" not in ptx
    res = compile_source(src, arch="sm_90", want="cubin", name=cfg.source_name, options=["-Xptxas=-v"])
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", res.log)
    assert frames == [("0", "0", "0")], res.log
    # one L1 invalidation, after the start's barrier.cluster.wait.acquire; none a step (an acquire.cluster wait
    # puts one after every wait: 13-17 % slower on the H100)
    assert disassemble(res.cubin).count("CCTL.IVALL") == 1


def test_sm80_refuses_the_cluster_config() -> None:
    from dqgen.run.loader import compile_config

    pl = candidates(256, 8, H100_OPTIN)[0]
    with pytest.raises(ValueError, match="sm_90"):
        compile_config(cluster_config(_params(256, 64), pl), "sm_80")


# ----------------------------------------------------------------------------------------------------- GPU


def _run_plan(p, pl: ClusterPlan, x_q: np.ndarray, h0_q: np.ndarray) -> np.ndarray:
    """The kernel of plan ``pl`` on W.x from numpy (int32), h poisoned past slice 0: int8 h [T, N, H]."""
    torch = pytest.importorskip("torch")
    from dqgen.gru.cluster import ClusterKernel
    from dqgen.gru.kernel import channel_table

    steps, rows, _ = x_q.shape
    wx = np.einsum("tnc,gc->tng", x_q.astype(np.int64), p.w_q.astype(np.int64)).astype(np.int32)
    hbuf = torch.full((steps + 1, rows, p.hidden_size), 99, dtype=torch.int8, device="cuda")
    hbuf[0] = torch.from_numpy(h0_q)
    kern = ClusterKernel(p, 0)
    r_q = torch.from_numpy(np.ascontiguousarray(p.r_q)).cuda()
    kern(pl, torch.from_numpy(wx).cuda(), r_q, hbuf, torch.from_numpy(channel_table(p)).cuda())
    return hbuf[1:].cpu().numpy()


def _assert_every_step(got: np.ndarray, want: np.ndarray) -> None:
    for t in range(want.shape[0]):
        assert (got[t] == want[t]).all(), f"step {t} differs ({(got[t] != want[t]).sum()} codes)"


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "sine", "saturating"])
@pytest.mark.parametrize("rows", [1, 8, 64])
@pytest.mark.parametrize("hidden", [256, 512, 1024])
def test_cluster_bit_exact_every_step(hidden: int, rows: int, kind: str) -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.module import QuantGRU

    p = _params(hidden)
    steps = 16
    x_q, h0_q = _inputs(p, kind, steps, rows, seed=hidden + rows)
    mod = QuantGRU(p)  # the default path on sm_90
    got = mod.forward_int(torch.from_numpy(x_q).cuda(), torch.from_numpy(h0_q).cuda()).cpu().numpy()
    assert mod.last_path == "cluster"
    _assert_every_step(got, reference.run(p, x_q, h0_q))


@pytest.mark.gpu
@pytest.mark.parametrize(("hidden", "rows", "which"), [(256, 70, 2), (256, 20, 1), (512, 64, 3), (1024, 40, 1)])
def test_cluster_plans_of_every_shape(hidden: int, rows: int, which: int) -> None:
    """Other rows per cluster and K splits than the default picks (1, 2 and 4 warps a tile), a last cluster
    with fewer rows than nb."""
    p = _params(hidden)
    pl = candidates(hidden, rows, H100_OPTIN)[which]
    x_q, h0_q = _inputs(p, "random", 10, rows, seed=7)
    _assert_every_step(_run_plan(p, pl, x_q, h0_q), reference.run(p, x_q, h0_q))


@pytest.mark.gpu
def test_cluster_true_refuses_what_does_not_fit_and_false_runs_the_cooperative_kernel() -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.module import QuantGRU

    p = _params(320)  # not a multiple of 128
    x_q, h0_q = _inputs(p, "sine", 5, 4, seed=1)
    x, h0 = torch.from_numpy(x_q).cuda(), torch.from_numpy(h0_q).cuda()
    auto = QuantGRU(p)
    got = auto.forward_int(x, h0).cpu().numpy()
    assert auto.last_path == "persistent" and (got == reference.run(p, x_q, h0_q)).all()
    with pytest.raises(ValueError, match="cluster=True"):
        QuantGRU(p, cluster=True).forward_int(x, h0)
    p = _params(256)
    x_q, h0_q = _inputs(p, "sine", 5, 4, seed=1)
    x, h0 = torch.from_numpy(x_q).cuda(), torch.from_numpy(h0_q).cuda()
    off = QuantGRU(p, cluster=False)
    off.forward_int(x, h0)
    assert off.last_path == "persistent"
