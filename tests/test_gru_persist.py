"""The persistent int8 GRU kernel (one cooperative launch for all steps): its plan, its NVRTC compilation (CPU),
and on a GPU every step bit-exact with the numba reference, and QuantGRU's choice of path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dqgen.emit.render import template_env
from dqgen.gru import calibrate, reference
from dqgen.gru.kernel import cell_context, render
from dqgen.gru.persist import BLOCK, compile_persist, padded_hidden, plan
from dqgen.gru.persist import render as render_persist

H100_SMS, H100_OPTIN = 132, 232448  # cuDeviceGetAttribute on the H100 SXM: SMs, opt-in shared bytes per block


def _params(hidden: int, c: int = 128, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = 1 / np.sqrt(hidden)
    w, r = rng.uniform(-k, k, (3 * hidden, c)), rng.uniform(-k, k, (3 * hidden, hidden))
    bx, br = rng.uniform(-k, k, 3 * hidden), rng.uniform(-k, k, 3 * hidden)
    return calibrate(w, r, bx, br, [(rng.standard_normal((30, 32, c)), np.zeros((32, hidden)))])


@pytest.mark.parametrize("hidden", [256, 320, 512, 1024, 2048])
@pytest.mark.parametrize("rows", [3, 64, 256])
def test_plan_covers_every_unit_and_fits_shared_memory(hidden: int, rows: int) -> None:
    pl = plan(hidden, rows, H100_SMS, H100_OPTIN)
    assert pl is not None
    assert pl.grid <= H100_SMS
    assert (pl.grid - 1) * pl.units < hidden <= pl.grid * pl.units  # every unit owned once, no empty CTA
    assert pl.upad % pl.jt == 0 and pl.upad >= pl.units
    hp = padded_hidden(hidden)
    assert pl.shared_bytes == 3 * pl.upad * hp + pl.nbc * (hp + 16) <= H100_OPTIN
    assert pl.nbc % 32 == 0 and (pl.nbc >= rows or (pl.nbc + 32) * (hp + 16) > H100_OPTIN - 3 * pl.upad * hp)


def test_plan_declines_what_does_not_fit() -> None:
    assert plan(4096, 64, H100_SMS, H100_OPTIN) is None  # 3 x 32 x 4096 bytes of R per CTA > 227 KB
    assert plan(1024, 64, H100_SMS, 48 * 1024) is None  # 24.6 KB of R + 32 x 1040 bytes of h > 48 KB
    assert plan(1024, 3, H100_SMS, 60 * 1024) is not None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(("hidden", "jt"), [(256, 1), (320, 1), (1024, 2), (512, 4)])
def test_persistent_kernel_compiles_with_nvrtc(arch: str, hidden: int, jt: int) -> None:
    p = _params(hidden, 64)
    res = compile_persist(p, jt, arch, "ptx")
    assert ".entry dqgen_gru_persist" in res.ptx
    assert f".target {arch}" in res.ptx
    assert "dp4a" in res.ptx
    assert ".local" not in res.ptx  # accumulators stay in registers


def test_one_rendering_of_the_integer_cell() -> None:
    p = _params(256, 64)
    cell_math = template_env().get_template("gru_cell_math.cuh.j2").render(**cell_context(p))
    for src in (render(p), render_persist(p, 2)):
        assert src.count(cell_math) == 1
        assert src.count("round_half_even") == cell_math.count("round_half_even")


def _inputs(p, kind: str, steps: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = p.input_size
    if kind == "random":
        x_q = rng.integers(-128, 128, (steps, rows, c))
    elif kind == "sine":
        x_q = p.x.quantize(np.sin(0.2 * np.arange(steps)[:, None, None] + rng.uniform(0, 6, (1, rows, c))))
    else:  # every input at an end of the int8 range: pre-activations and intermediates clamp
        x_q = np.where(rng.random((steps, rows, c)) < 0.5, -128, 127)
    return x_q.astype(np.int8), rng.integers(-128, 128, (rows, p.hidden_size)).astype(np.int8)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("hidden", "rows", "kind"),
    [
        (256, 64, "random"),
        (256, 64, "sine"),
        (256, 64, "saturating"),
        (256, 3, "random"),
        (512, 64, "random"),
        (512, 3, "saturating"),
        (320, 64, "sine"),
        (320, 3, "random"),
        (1024, 64, "sine"),
    ],
)
def test_persistent_bit_exact_every_step(hidden: int, rows: int, kind: str) -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.module import QuantGRU

    p = _params(hidden)
    steps = 12 if hidden > 512 else 30
    x_q, h0_q = _inputs(p, kind, steps, rows, seed=hidden + rows)
    mod = QuantGRU(p, persistent=True)
    got = mod.forward_int(torch.from_numpy(x_q).cuda(), torch.from_numpy(h0_q).cuda()).cpu().numpy()
    assert mod.last_path == "persistent"
    want = reference.run(p, x_q, h0_q)
    for t in range(steps):
        assert (got[t] == want[t]).all(), f"step {t} differs ({(got[t] != want[t]).sum()} codes)"


@pytest.mark.gpu
def test_persistent_batch_chunks_and_tail_units() -> None:
    """Batch staged 32 rows at a time (3 chunks of 70 rows) and CTAs of 3 units with a short last CTA."""
    torch = pytest.importorskip("torch")
    from dqgen.gru.kernel import channel_table
    from dqgen.gru.persist import PersistentKernel

    p = _params(256)
    steps, rows = 8, 70
    x_q, h0_q = _inputs(p, "random", steps, rows, seed=5)
    kern = PersistentKernel(p, 0)
    base = kern.plan(rows)
    assert base is not None
    hp = padded_hidden(256)
    pl = dataclasses.replace(base, units=3, grid=86, upad=3, nbc=32, shared_bytes=9 * hp + 32 * (hp + 16))
    assert kern._kernel(pl.jt).max_active_blocks(BLOCK, pl.shared_bytes) >= 1
    wx = np.einsum("tnc,gc->tng", x_q.astype(np.int64), p.w_q.astype(np.int64)).astype(np.int32)
    hbuf = torch.empty((steps + 1, rows, 256), dtype=torch.int8, device="cuda")
    hbuf.fill_(99)  # poison: a unit no CTA writes would show
    hbuf[0] = torch.from_numpy(h0_q)
    r_q = torch.from_numpy(np.ascontiguousarray(p.r_q)).cuda()
    chan = torch.from_numpy(channel_table(p)).cuda()
    barrier = torch.zeros(2, dtype=torch.int32, device="cuda")
    kern(pl, torch.from_numpy(wx).cuda(), r_q, hbuf, chan, barrier)
    got = hbuf[1:].cpu().numpy()
    want = reference.run(p, x_q, h0_q)
    for t in range(steps):
        assert (got[t] == want[t]).all(), f"step {t} differs"


@pytest.mark.gpu
def test_quantgru_runs_persistent_when_it_fits_else_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.module import QuantGRU
    from dqgen.run import device as dev

    p = _params(256)
    x_q, h0_q = _inputs(p, "sine", 10, 64, seed=3)
    x, h0 = torch.from_numpy(x_q).cuda(), torch.from_numpy(h0_q).cuda()
    auto = QuantGRU(p)
    got = auto.forward_int(x, h0).cpu().numpy()
    # sm_90 runs the cluster kernel ahead of the cooperative one (tests/test_gru_cluster.py)
    assert auto.last_path == ("cluster" if int(dev.device_arch(0)[3:].rstrip("af")) >= 90 else "persistent")
    coop = QuantGRU(p, cluster=False)
    assert (coop.forward_int(x, h0).cpu().numpy() == got).all()
    assert coop.last_path == "persistent"
    step = QuantGRU(p, persistent=False)
    assert (step.forward_int(x, h0).cpu().numpy() == got).all()
    assert step.last_path == "per-step"
    # a device whose blocks get too little shared memory for the R slice: auto falls back, True refuses
    monkeypatch.setattr(dev, "max_shared_optin", lambda ordinal=0: 4096)
    small = QuantGRU(p)
    assert (small.forward_int(x, h0).cpu().numpy() == got).all()
    assert small.last_path == "per-step"
    with pytest.raises(ValueError, match="persistent=True"):
        QuantGRU(p, persistent=True).forward_int(x, h0)
    assert (got == reference.run(p, x_q, h0_q)).all()


def test_persistent_call_checks_every_argument_before_launch() -> None:
    """Wrong dtype / shape / layout of any argument: a one-line ValueError naming it, and nothing launched."""
    from dqgen.gru.persist import PersistentKernel
    from dqgen.run import device as dev

    p = _params(72, 24)
    kern = object.__new__(PersistentKernel)  # no device: the checks and the packing run on the host
    kern.params, kern._dev = p, dev
    launches: list[tuple] = []
    kern._kernel = lambda jt: lambda *a, **kw: launches.append((a, kw))  # type: ignore[method-assign]

    def arr(shape: tuple[int, ...], dtype) -> dev.DeviceArray:
        dt = np.dtype(dtype)
        return dev.DeviceArray(0, shape, dev._c_strides(shape, dt.itemsize), dt, 0, "cai", None)

    good = {
        "wx_all": arr((4, 40, 216), np.int32),
        "r_q": arr((216, 72), np.int8),
        "hbuf": arr((5, 40, 72), np.int8),
        "chan": arr((216, 8), np.int32),
        "barrier": arr((2,), np.int32),
    }
    pl = plan(72, 40, H100_SMS, H100_OPTIN)
    bad = {
        "wx_all": arr((3, 40, 216), np.int32),  # one step short
        "r_q": arr((216, 72), np.uint8),
        "hbuf": arr((5, 40, 64), np.int8),
        "chan": arr((216, 4), np.int32),
        "barrier": arr((2,), np.int64),
    }
    for name, wrong in bad.items():
        with pytest.raises(ValueError, match=f"^{name}: "):
            kern(pl, **(good | {name: wrong}))
    assert launches == []
    kern(pl, **good)
    (grid, block, args), kw = launches[0]
    assert grid == (pl.grid,) and block == (BLOCK,)
    assert kw == {"stream": 0, "shared_mem": pl.shared_bytes, "cooperative": True}
    assert [int(a) for a in args[7:]] == [4, 40, pl.units, pl.upad, pl.nbc]  # steps, rows and the plan
    assert int(args[1]) == 40 * 216 and int(args[2]) == 216  # wx strides in elements
