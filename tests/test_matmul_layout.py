"""CPU: the GEMV weight layout (dqgen.layout.matmul) is a bijection from every shipped spec's checkpoint layout
(round trip with random codes, tails, act-order, groups that are no whole blocks), each code sits where the mma
fragment derivation puts it (recomputed here from the PTX fragment facts, not from the packer), the matmul
reference is x @ W in float64, and the kernel renders and compiles for every spec with no I2F in its SASS."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.check.matmul_reference import matmul_inputs, matmul_reference, random_x, relative_error
from dqgen.check.reference import dequantize_reference, random_global_scale, random_inputs
from dqgen.core.spec import SHIPPED_SPECS, Spec, load_spec, with_group_size
from dqgen.layout.layout import Layout
from dqgen.layout.matmul import MatmulLayout, prepack, unprepack

SPECS = [load_spec(p) for p in sorted(SHIPPED_SPECS.glob("*.yaml"))]
IDS = [s.name for s in SPECS]


def _case(spec: Spec) -> tuple[Spec, int, int, int]:
    """A spec with a concrete group size and (K, N) with tails: K not a whole chunk where the format allows,
    N = 56 (not a whole 16-row tile; 80 where N must be whole 16-code words)."""
    lay = Layout.of(spec)
    g = spec.scales.group_size
    sp = with_group_size(spec, 32) if g == "auto" else spec
    gs = sp.scales.group_size
    assert isinstance(gs, int)
    K = 3 * max(gs, 64) + (gs if gs > 0 else lay.per_block if lay.axis == "K" else 3)
    n_unit = lay.per_block if lay.axis == "N" or lay.zeros == "packed" else 1
    return sp, K, 56 if 56 % n_unit == 0 else 80, gs


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_prepack_round_trip_every_spec(spec: Spec) -> None:
    sp, K, N, gs = _case(spec)
    q, s, z, gi = random_inputs(sp, K, N, seed=K)
    pre = prepack(sp, q, s, z, gi, gs)
    q2, s2, z2 = unprepack(sp, pre)
    assert np.array_equal(q2.view(np.uint32), q.view(np.uint32))
    assert np.array_equal(s2, np.ascontiguousarray(s).view(s2.dtype))
    if z is None:
        assert z2 is None
    else:
        assert z2 is not None
        assert np.array_equal(np.ascontiguousarray(z2).view(np.uint8), np.ascontiguousarray(z).view(np.uint8))
    assert pre.slots.gather == bool(spec.act_order)


@pytest.mark.parametrize("name,group", [("awq_int4_fp16", 36), ("int8_fp16", 6), ("int2_bf16", 24)])
def test_round_trip_groups_that_are_no_whole_blocks(name: str, group: int) -> None:
    sp = with_group_size(load_spec(name), group)
    K, N = group * 7, 48
    q, s, z, gi = random_inputs(sp, K, N, seed=group)
    pre = prepack(sp, q, s, z, gi, group)
    assert pre.slots.gather  # rows regrouped so that no block crosses a group
    mm = MatmulLayout.of(sp)
    bg = pre.slots.block_group
    assert bg is not None
    perm = pre.slots.perm
    for b in range(pre.slots.slots // mm.per_block):  # every real row of a block is in the block's group
        rows = perm[b * mm.per_block : (b + 1) * mm.per_block]
        assert all(r // group == bg[b] for r in rows if r >= 0)
    q2, _, _ = unprepack(sp, pre)
    assert np.array_equal(q2.view(np.uint32), q.view(np.uint32))


def _fragment_code(spec: Spec, wq: np.ndarray, k: int, n: int) -> int:
    """The code of (k, n) read from the prepacked words by the mma fragment derivation: channel n is A row
    n % 16 of tile n // 16 (lane row g = n % 8, register half r = n % 16 // 8); k is k-lane t, block b, element e
    of chunk k // 8P; the lane's 16-byte vectors list rows (g, g+8) x blocks (2t, 2t+1) x words, and the block's
    field order[j] = e holds bits [j * bits, (j + 1) * bits) of its words."""
    lay = Layout.of(spec)
    P, W, bits = lay.per_block, lay.words, lay.bits
    chunk, within = divmod(k, 8 * P)
    kb, e = divmod(within, P)
    t, b = divmod(kb, 2)
    tile, row = divmod(n, 16)
    r, g = divmod(row, 8)
    lane = 4 * g + t
    block = 0
    for w in range(W):
        j = (2 * r + b) * W + w
        block |= int(wq[tile, chunk, j // 4, lane, j % 4]) << (32 * w)
    pos = bits * lay.order.index(e)
    return (block >> pos) & ((1 << bits) - 1)


@pytest.mark.parametrize("name", ["awq_int4_fp16", "gptq_int3_fp16", "int8_bf16_shuffled", "gptq_uint2_asym_fp16"])
def test_codes_sit_where_the_fragment_derivation_says(name: str) -> None:
    sp, K, N, gs = _case(load_spec(name))
    q, s, z, gi = random_inputs(sp, K, N, seed=1)
    pre = prepack(sp, q, s, z, gi, gs)
    codes = Layout.of(sp).unpack_fields(q.view(np.uint32))
    rng = np.random.default_rng(0)
    for k, n in zip(rng.integers(0, K, 300), rng.integers(0, N, 300), strict=True):
        assert _fragment_code(sp, pre.wq, int(k), int(n)) == codes[k, n], (k, n)


@pytest.mark.parametrize("group", [-1, 16, 64])
def test_direct_slots_give_each_block_its_group(group: int) -> None:
    mm = MatmulLayout.of(load_spec("awq_int4_fp16"))
    K = 64 * 5 if group > 0 else 301  # a tail past the last whole chunk
    sl = mm.slots(K, group)
    assert not sl.gather and sl.slots % mm.chunk_k == 0 and sl.slots >= K
    assert np.array_equal(sl.perm[:K], np.arange(K)) and np.all(sl.perm[K:] == -1)
    for b, grp in enumerate(sl.block_group.tolist()):
        k = min(b * mm.per_block, K - 1)  # padding blocks keep the last group (a valid scale row)
        assert grp == (k // group if group > 0 else 0)


def test_act_order_slots_sort_rows_by_group() -> None:
    sp = with_group_size(load_spec("gptq_int4_asym_act_order_fp16"), 64)
    K = 64 * 9
    _, _, _, gi = random_inputs(sp, K, 8, seed=3)
    sl = MatmulLayout.of(sp).slots(K, 64, gi)
    real = sl.perm[sl.perm >= 0]
    assert sorted(real.tolist()) == list(range(K))
    assert np.all(np.diff(gi[real]) >= 0)  # groups contiguous, in order


def test_matmul_reference_is_x_at_w() -> None:
    spec = load_spec("int8_bf16")
    (q, s, z, gi, gsc), W = matmul_inputs(spec, 64, 8, seed=0)
    assert np.array_equal(W.view(np.uint16), dequantize_reference(spec, q, s, z, gi, gsc).view(np.uint16))
    x = random_x(spec, 3, 64, seed=1)
    ref = matmul_reference(x, W)
    by_hand = np.array([[sum(float(x[m, k]) * float(W[k, n]) for k in range(64)) for n in range(8)] for m in range(3)])
    assert np.allclose(ref, by_hand, rtol=1e-12, atol=0)
    assert relative_error(ref, ref) == 0.0 and relative_error(ref * 1.01, ref) == pytest.approx(0.01)


@pytest.mark.parametrize("name", ["fp8_e5m2_fp16", "mxfp4_bf16", "nvfp4_fp16"])
def test_matmul_inputs_are_finite(name: str) -> None:
    (_, _, _, _, _), W = matmul_inputs(load_spec(name), 256, 64, seed=2)
    assert np.isfinite(W.astype(np.float64)).all()


@pytest.mark.parametrize("name", ["fp8_e4m3_fp16", "fp8_e5m2_fp16", "fp6_e3m2_bf16"])
def test_zero_codes_where_zeroes_exactly_the_flagged_weights(name: str) -> None:
    """check.matmul_reference.zero_codes_where (the tests' and the bench's way of dropping a minifloat's NaN / Inf
    weights): the weights it flags dequantize to zero afterwards (code +0 times the scale: -0 under a negative
    scale), every other weight to the same bits as before (NaN included), judged by the independent reference; the
    words keep their dtype and shape."""
    from dqgen.check.matmul_reference import zero_codes_where

    spec = load_spec(name)
    K, N = 96, 32
    q, s, z, gi = random_inputs(spec, K, N, seed=7)
    gs = random_global_scale(spec, 5)
    before = dequantize_reference(spec, q, s, z, gi, gs)
    bad = ~np.isfinite(before.astype(np.float64))
    assert bad.any() == name.startswith("fp8")  # e4m3 / e5m2 have NaN (and Inf) codes; fp6 none
    bad[[0, 5, 95], [0, 17, 31]] = True  # finite ones too: any flagged weight goes
    out = zero_codes_where(spec, q, bad)
    assert out.dtype == q.dtype and out.shape == q.shape
    after = dequantize_reference(spec, out, s, z, gi, gs)
    assert (after[bad].astype(np.float64) == 0).all()
    assert (after.view(np.uint16)[~bad] == before.view(np.uint16)[~bad]).all()


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_matmul_kernel_compiles_without_i2f(spec: Spec) -> None:
    from dqgen.emit.nvrtc import compile_source
    from dqgen.emit.pipeline import compile_artifact
    from dqgen.emit.sass import disassemble
    from dqgen.kernels.gemv import GEMV_ENTRIES, gemv_entry_name, min_blocks, render_matmul

    art = compile_artifact(spec)
    src = render_matmul(art)
    for e in GEMV_ENTRIES:
        assert f"void __launch_bounds__(128, {min_blocks(spec)}) {gemv_entry_name(spec, e)}(" in src
    for arch in ("sm_80", "sm_90"):
        if int(arch[3:]) < spec.sm:
            continue
        res = compile_source(src, arch=arch, want="cubin", name=f"{spec.name}_matmul.cu")
        ops = disassemble(res.cubin or b"")
        assert any(op.startswith("HMMA") for op in ops), "no tensor-core mma"
        assert not [op for op in ops if op.startswith("I2F")], "an integer->float conversion in the kernel"


def test_grouped_magic_reciprocal_is_exact_up_to_the_chunk_limit() -> None:
    """GROUPED maps chunk c to its group as (c * magic) >> 32; entry_mode allows it below MAX_GROUPED_CHUNKS
    chunks, so the product must equal c // (chunks per group) for every such c and every group of whole chunks."""
    import numpy as np

    from dqgen.kernels.gemv import MAX_GROUPED_CHUNKS, group_magic

    per_block = 8  # int4 words: a chunk is 8 blocks of 8 k = 64 k
    c = np.arange(MAX_GROUPED_CHUNKS, dtype=np.uint64)
    for per_group in (1, 2, 3, 7, 64, 255, 1000, MAX_GROUPED_CHUNKS - 1):
        magic = np.uint64(group_magic(per_group * 8 * per_block, per_block))
        assert np.array_equal((c * magic) >> np.uint64(32), c // np.uint64(per_group)), per_group
    assert group_magic(-1, per_block) == 0


def test_group_chunks_is_the_magic_s_divisor_and_one_group_starts_no_other() -> None:
    """The kernel's group_chunks argument (the lean entry's group switch) and the magic reciprocal (the other
    GROUPED entries) describe the same groups: chunk c starts a group exactly when c is a multiple of group_chunks,
    and the magic maps c to c // group_chunks; one group never switches."""
    import numpy as np

    from dqgen.kernels.gemv import MAX_GROUPED_CHUNKS, ONE_GROUP_CHUNKS, group_chunks, group_magic

    per_block = 8
    c = np.arange(MAX_GROUPED_CHUNKS, dtype=np.uint64)
    for group_size in (64, 128, 192, 4096):
        per_group = group_chunks(group_size, per_block, groups=3)
        assert per_group * 8 * per_block == group_size
        magic = np.uint64(group_magic(group_size, per_block))
        assert np.array_equal((c * magic) >> np.uint64(32), c // np.uint64(per_group)), group_size
    assert group_chunks(-1, per_block, groups=1) == ONE_GROUP_CHUNKS > MAX_GROUPED_CHUNKS
    assert group_chunks(128, per_block, groups=1) == ONE_GROUP_CHUNKS  # K within one group of 128


@pytest.mark.parametrize("ahead", [0, 5])
def test_lean_read_ahead_beyond_the_padded_rows_is_refused(ahead: int) -> None:
    """run_lean loads the scale and zero rows of the next ``Tuning.ahead`` groups: more than the pack's PAD_GROUPS
    rows would read past the pack (and 0 makes a zero-size array), so such a tuning is refused by name."""
    from dqgen.kernels.gemv import Tuning

    with pytest.raises(ValueError, match=r"^Tuning\.ahead: expected 1\.\.4 .*got " + str(ahead) + "$"):
        Tuning(ahead=ahead)


@pytest.mark.parametrize(
    ("n_tiles", "chunks", "resident"),
    [(1792, 128, 528), (1792, 64, 528), (91, 66, 528), (4, 18, 528), (3, 65, 7), (1, 1, 528), (5000, 448, 396)],
)
def test_flat_grid_gives_every_chunk_to_one_warp(n_tiles: int, chunks: int, resident: int) -> None:
    """run_flat's partition (dqgen.run.matmul.flat_grid): warp i takes chunks [i * per, (i + 1) * per) of the tiles'
    chunks laid end to end, whole 4-chunk batches, within one wave of blocks; the kernel's magic reciprocals give
    each range's first tile and each tile's first and last warp; slots is the most warps on one tile."""
    from dqgen.run.matmul import WARPS, flat_grid

    f = flat_grid(n_tiles, chunks, resident, 4)
    assert f is not None
    total = n_tiles * chunks
    assert f.per_worker % 4 == 0 and f.blocks <= resident
    assert f.blocks * WARPS * f.per_worker >= total > (f.blocks * WARPS - WARPS) * f.per_worker
    owner = np.arange(total) // f.per_worker  # the warp of each chunk
    tiles = np.arange(total) // chunks
    on_tile = [len(set(owner[tiles == t].tolist())) for t in range(n_tiles)]
    assert f.slots == max(on_tile)
    starts = np.arange(0, total, f.per_worker, dtype=np.int64)
    assert np.array_equal((starts * f.tile_magic) >> 32, starts // chunks)
    for t in range(n_tiles):
        first, last = t * chunks, (t + 1) * chunks - 1
        assert (first * f.warp_magic) >> 32 == owner[first] and (last * f.warp_magic) >> 32 == owner[last]
