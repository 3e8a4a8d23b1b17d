"""The CUDA cell of every GRU kernel (templates/gru_cell_math.cuh.j2, rendered with a model's constants) compiled
for the host with g++ and run against the numba reference cell on the CPU: the template's own integer arithmetic
(its roundings, clamps, shifts, table reads, the split into the W.x and R.h halves) equals ``reference.cell`` on
random, in-range and saturating accumulators, with no GPU. The GPU tests then only have to show that the GPU runs
the same C++ the same way (tests/test_gru_gpu.py, test_gru_persist.py, test_gru_cluster.py)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dqgen.emit.render import template_env
from dqgen.gru import calibrate, reference
from dqgen.gru.kernel import ACC_PER_TERM, cell_context, channel_table
from dqgen.gru.params import QuantGRUParams

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ to compile the cell for the host")

# What the CUDA source needs to be host C++: the qualifiers vanish, int4 is the 16-byte struct CUDA declares.
PRELUDE = """
#include <cstdint>
#define __device__
#define __forceinline__ inline
#define __constant__ static const
#define __restrict__ __restrict
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
"""

# Both entry points: the whole cell (gru_cell_h, what the per-step and the cooperative kernels call) and the two
# halves as the cluster kernel calls them (gru_cell_wx a step ahead, kept, then gru_cell_rh).
DRIVER = """
extern "C" long long rne(long long p, int k) { return rshift_rne(p, k); }
extern "C" void cell_all(const int* wx, const int* rh, const signed char* h_old, signed char* out,
                         const int4* chan, int rows, int split) {
    for (int n = 0; n < rows; ++n)
        for (int j = 0; j < HSZ; ++j) {
            const int* a = wx + (long long)n * 3 * HSZ;
            const int* b = rh + (long long)n * 3 * HSZ;
            const int h = h_old[n * HSZ + j];
            if (split) {
                GruWxPart w = gru_cell_wx(chan, j, a[j], a[HSZ + j], a[2 * HSZ + j]);
                out[n * HSZ + j] = gru_cell_rh(chan, j, w, b[j], b[HSZ + j], b[2 * HSZ + j], h);
            } else {
                out[n * HSZ + j] = gru_cell_h(chan, j, a[j], a[HSZ + j], a[2 * HSZ + j], b[j], b[HSZ + j],
                                              b[2 * HSZ + j], h);
            }
        }
}
"""


def host_cell(p: QuantGRUParams, tmp: Path) -> ctypes.CDLL:
    """The rendered cell of ``p`` as a host shared library (-ftrapv: a signed overflow in the cell aborts)."""
    src = PRELUDE + template_env().get_template("gru_cell_math.cuh.j2").render(**cell_context(p)) + DRIVER
    cpp, lib = tmp / "cell.cpp", tmp / "cell.so"
    cpp.write_text(src)
    assert GXX is not None
    flags = ["-std=c++20", "-O1", "-shared", "-fPIC", "-ftrapv", "-Wno-unused-variable"]
    subprocess.run([GXX, *flags, "-o", str(lib), str(cpp)], check=True, capture_output=True, text=True)
    dll = ctypes.CDLL(str(lib))
    ptr = ctypes.c_void_p
    dll.cell_all.argtypes = [ptr, ptr, ptr, ptr, ptr, ctypes.c_int, ctypes.c_int]
    dll.rne.argtypes = [ctypes.c_longlong, ctypes.c_int]
    dll.rne.restype = ctypes.c_longlong
    return dll


def run_host(dll: ctypes.CDLL, p: QuantGRUParams, wx: np.ndarray, rh: np.ndarray, h_old: np.ndarray, split: bool):
    wx32, rh32 = np.ascontiguousarray(wx, np.int32), np.ascontiguousarray(rh, np.int32)
    h8 = np.ascontiguousarray(h_old, np.int8)
    chan = np.ascontiguousarray(channel_table(p))
    out = np.zeros_like(h8)
    dll.cell_all(wx32.ctypes.data, rh32.ctypes.data, h8.ctypes.data, out.ctypes.data, chan.ctypes.data, len(h8), split)
    return out


def _model(seed: int, hidden: int, bits: int) -> QuantGRUParams:
    rng = np.random.default_rng(seed)
    c = 40
    k = 1 / np.sqrt(hidden)
    w, r = rng.uniform(-k, k, (3 * hidden, c)), rng.uniform(-k, k, (3 * hidden, hidden))
    bx, br = rng.uniform(-k, k, 3 * hidden), rng.uniform(-k, k, 3 * hidden)
    calib = [(rng.standard_normal((20, 8, c)), 0.2 * rng.standard_normal((8, hidden)))]
    return calibrate(w, r, bx, br, calib, multiplier_bits=bits)  # type: ignore[arg-type]


def _accumulators(p: QuantGRUParams, rng: np.random.Generator, rows: int) -> tuple[np.ndarray, ...]:
    """W.x and R.h accumulators of real codes (x and h codes uniform over int8) for half the rows, and for the
    other half uniform over +-2^e, e up to the largest an int8 GEMM reaches (127 * 128 * K, K = C or H: the
    kernels' inputs, which the template's int32 sums assume), so that every clamp saturates; rows 0 and 1 at the
    extremes themselves (-ftrapv aborts on any signed overflow in the cell)."""
    hsz, c = p.hidden_size, p.input_size
    x_q = rng.integers(-128, 128, (rows, c))
    h_q = rng.integers(-128, 128, (rows, hsz))
    wx = x_q @ p.w_q.astype(np.int64).T
    rh = h_q @ p.r_q.astype(np.int64).T
    wild = rows // 2
    for acc, k in ((wx, c), (rh, hsz)):
        top = ACC_PER_TERM * k
        e = rng.integers(4, int(np.log2(top)) + 2, (wild, 1))
        acc[:wild] = np.clip(rng.integers(-(2**31), 2**31, (wild, 3 * hsz)) >> (31 - e), -top, top)
        acc[0], acc[1] = top, -top
    return wx, rh, h_q


@pytest.mark.parametrize(("seed", "hidden", "bits"), [(0, 64, 31), (1, 96, 31), (2, 64, 15), (3, 128, 31)])
def test_rendered_cell_equals_the_reference_cell(seed: int, hidden: int, bits: int, tmp_path: Path) -> None:
    p = _model(seed, hidden, bits)
    dll = host_cell(p, tmp_path)
    rng = np.random.default_rng(100 + seed)
    for _ in range(3):
        wx, rh, h_old = _accumulators(p, rng, 64)
        want = reference.cell(p, wx, rh, h_old.astype(np.int8))
        for split in (False, True):
            got = run_host(dll, p, wx, rh, h_old, split)
            bad = np.argwhere(got != want)
            assert not len(bad), f"split {split}: {len(bad)} codes differ, first at {bad[0].tolist()}"
    # the real recurrence too: each step's h from the last (reference.run's loop, with the host cell)
    x_q = rng.integers(-128, 128, (12, 8, p.input_size)).astype(np.int8)
    h = rng.integers(-128, 128, (8, hidden)).astype(np.int8)
    want_seq = reference.run(p, x_q, h)
    for t in range(12):
        wx = x_q[t].astype(np.int64) @ p.w_q.astype(np.int64).T
        rh = h.astype(np.int64) @ p.r_q.astype(np.int64).T
        h = run_host(dll, p, wx, rh, h, split=True)
        assert (h == want_seq[t]).all(), f"step {t}"


def test_branch_free_rounding_is_round_half_even(tmp_path: Path) -> None:
    """rshift_rne's floor((p + 2^(k-1) - 1 + bit k of p) / 2^k) against Fraction rounding (half to even): every p
    of a small range at every small k (all ties among them), and ties and their neighbours up to |p| ~ 2^62."""
    from fractions import Fraction

    dll = host_cell(_model(0, 16, 31), tmp_path)
    for k in range(0, 11):
        for v in range(-4096, 4097):
            assert dll.rne(v, k) == round(Fraction(v, 2**k)), (v, k)
    rng = np.random.default_rng(5)
    for k in (11, 20, 31, 32, 33, 40, 47, 55, 61):
        for q in [int(v) for v in rng.integers(-(2 ** (61 - k)), 2 ** (61 - k), 200)]:
            tie = q * 2**k + 2 ** (k - 1)
            for v in (tie - 1, tie, tie + 1, q * 2**k):
                assert dll.rne(v, k) == round(Fraction(v, 2**k)), (v, k)


def test_models_beyond_the_cell_widths_are_refused() -> None:
    """The template's int32 operands and int64 products hold for every GEMM accumulator of the models the tests
    and the bench build; a model whose products could overflow them is refused, before any source is rendered."""
    from dqgen.gru.kernel import cell_roundings, check_cell_ranges

    for hidden in (64, 1024):
        p = _model(1, hidden, 31)
        check_cell_ranges(p)
        worst = max(r.max_product + (2 ** (r.shift - 1) if r.shift else 0) for r in cell_roundings(p))
        assert worst < 2**63
    rng = np.random.default_rng(2)
    k = 1 / 4
    w, r = rng.uniform(-k, k, (48, 20)), rng.uniform(-k, k, (48, 16))
    wide = calibrate(
        w, r, np.zeros(48), np.zeros(48), [(rng.standard_normal((5, 4, 20)), np.zeros((4, 16)))], intermediate_bits=24
    )
    with pytest.raises(ValueError, match=r"rounding r\*rh_g->rrh could overflow .*int32 product"):
        cell_context(wide)
