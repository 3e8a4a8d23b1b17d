"""GPU tests of the int8 GRU: generated cell kernel bit-exact with the numba reference, QuantGRU vs nn.GRU."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.gru import calibrate, reference
from dqgen.gru.kernel import compile_cell

pytestmark = []


def _params(hidden: int = 256, c: int = 128, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = 1 / np.sqrt(hidden)
    w, r = rng.uniform(-k, k, (3 * hidden, c)), rng.uniform(-k, k, (3 * hidden, hidden))
    bx, br = rng.uniform(-k, k, 3 * hidden), rng.uniform(-k, k, 3 * hidden)
    return calibrate(w, r, bx, br, [(rng.standard_normal((30, 32, c)), np.zeros((32, hidden)))]), (w, r, bx, br)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cell_compiles_with_nvrtc(arch: str) -> None:
    p, _ = _params(64, 32)
    res = compile_cell(p, arch, "ptx")
    assert ".entry dqgen_gru_cell" in res.ptx
    assert f".target {arch}" in res.ptx


@pytest.mark.gpu
def test_cell_kernel_bit_exact_random_and_saturating() -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.kernel import CellKernel, channel_table

    p, _ = _params()
    kern = CellKernel(p)
    chan = torch.from_numpy(channel_table(p)).cuda()
    rng = np.random.default_rng(1)
    for scale in (2**8, 2**14, 2**20, 2**24, 2**30):  # calibrated range up to saturating every clamp
        wx = rng.integers(-scale, scale, (64, 768)).astype(np.int32)
        rh = rng.integers(-scale, scale, (64, 768)).astype(np.int32)
        h_old = rng.integers(-128, 128, (64, 256)).astype(np.int8)
        h_new = torch.empty((64, 256), dtype=torch.int8, device="cuda")
        kern(torch.from_numpy(wx).cuda(), torch.from_numpy(rh).cuda(), torch.from_numpy(h_old).cuda(), h_new, chan)
        torch.cuda.synchronize()
        want = reference.cell(p, wx, rh, h_old)
        assert (h_new.cpu().numpy() == want).all(), f"mismatch at accumulator scale {scale}"


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "sine", "saturating"])
def test_sequence_bit_exact_every_step(kind: str) -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.module import QuantGRU

    p, _ = _params()
    rng = np.random.default_rng(2)
    if kind == "random":
        x_q = rng.integers(-128, 128, (50, 64, 128))
    elif kind == "sine":
        x_q = p.x.quantize(np.sin(0.2 * np.arange(50)[:, None, None] + rng.uniform(0, 6, (1, 64, 128))))
    else:
        x_q = np.where(rng.random((50, 64, 128)) < 0.5, -128, 127)
    x_q = x_q.astype(np.int8)
    h0_q = rng.integers(-128, 128, (64, 256)).astype(np.int8)
    mod = QuantGRU(p, persistent=False)  # the per-step path (R.h GEMM + cell kernel)
    got = mod.forward_int(torch.from_numpy(x_q).cuda(), torch.from_numpy(h0_q).cuda()).cpu().numpy()
    want = reference.run(p, x_q, h0_q)
    for t in range(50):
        assert (got[t] == want[t]).all(), f"step {t} differs"


@pytest.mark.gpu
def test_quantize_torch_gru_accuracy_and_save_load(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from dqgen.gru.module import QuantGRU, quantize

    torch.manual_seed(0)
    gru = torch.nn.GRU(128, 256).cuda()
    calib = [torch.randn(50, 64, 128, device="cuda") for _ in range(2)]
    q = quantize(gru, calib)
    x = torch.randn(50, 64, 128, device="cuda")
    h0 = 0.1 * torch.randn(1, 64, 256, device="cuda")
    with torch.no_grad():
        want, want_n = gru(x, h0)
        got, got_n = q(x, h0)
    cos = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0).item()
    assert cos >= 0.9995
    assert ((got - want) ** 2).mean().item() < 1e-3
    assert got.shape == want.shape and got_n.shape == want_n.shape
    path = tmp_path / "q.npz"
    q.save(path)
    back = QuantGRU.load(path)
    assert torch.equal(back(x, h0)[0], got)
