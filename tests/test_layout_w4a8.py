"""The prepacked W4A8 layout (dqgen.layout.w4a8): a bijection between the codes of W[K, N] and the words of the
layout for every allowed shape, each thread's words holding exactly its wgmma A fragments (the PTX ISA's .s8
m64nNk32 register fragment, written out independently below), and the per-128-k-tile scales and zeros."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.core.spec import load_spec, with_group_size
from dqgen.emit.pipeline import compile_artifact
from dqgen.layout.layout import Layout
from dqgen.layout.w4a8 import (
    RESCALE_K,
    element_map,
    pack_codes,
    pack_w4a8,
    unpack_codes,
    w4a8_converter_spec,
)


def _fragment(thread: int, reg: int) -> tuple[int, list[int]]:
    """(row, the four k) of A register ``reg`` (a0..a3) of ``thread`` in one k32 step of an m64 warpgroup tile:
    warp w holds rows 16w..16w+15; lane l: g = l / 4, t = l % 4; a0 row g, k 4t..; a1 row g+8, k 4t..; a2 row g,
    k 16+4t..; a3 row g+8, k 16+4t.."""
    w, lane = divmod(thread, 32)
    g, t = divmod(lane, 4)
    row = 16 * w + g + (8 if reg in (1, 3) else 0)
    k0 = 4 * t + (16 if reg in (2, 3) else 0)
    return row, [k0, k0 + 1, k0 + 2, k0 + 3]


def test_each_word_holds_two_fragment_registers() -> None:
    """Word 2s + h of a thread: k32 step s, rows g (h = 0: registers a0, a2) or g + 8 (h = 1: a1, a3); its
    elements 0..3 are the first register's k, 4..7 the second's."""
    n, k = element_map()
    for thread in range(128):
        for word in range(4):
            step, h = divmod(word, 2)
            first, second = (0, 2) if h == 0 else (1, 3)
            for reg, elements in ((first, range(0, 4)), (second, range(4, 8))):
                row, ks = _fragment(thread, reg)
                assert [int(n[thread, word, e]) for e in elements] == [row] * 4
                assert [int(k[thread, word, e]) for e in elements] == [32 * step + x for x in ks]


def test_element_map_covers_the_tile_once() -> None:
    n, k = element_map()
    cells = n.astype(np.int64) * 64 + k
    assert np.array_equal(np.sort(cells.ravel()), np.arange(64 * 64))


@pytest.mark.parametrize(("K", "N"), [(128, 64), (256, 128), (384, 192), (1024, 64), (128, 640)])
def test_pack_is_a_bijection(K: int, N: int) -> None:
    rng = np.random.default_rng(K + N)
    codes = rng.integers(0, 16, (K, N)).astype(np.uint8)
    wq = pack_codes(codes)
    assert wq.shape == (N // 64, K // 64, 128, 4) and wq.dtype == np.uint32
    assert np.array_equal(unpack_codes(wq), codes)
    # and the other way: every word pattern comes from exactly one code matrix
    words = rng.integers(0, 2**32, wq.shape, dtype=np.uint64).astype(np.uint32)
    assert np.array_equal(pack_codes(unpack_codes(words)), words)


def test_one_code_lands_where_the_fragment_says() -> None:
    """A single nonzero code at (k, n) shows up in exactly one nibble: the thread, word and field the fragment
    formula and the W4A8 order give."""
    K, N = 256, 128
    for kk, nn in [(0, 0), (5, 9), (37, 63), (64 + 18, 64 + 40), (255, 127)]:
        codes = np.zeros((K, N), dtype=np.uint8)
        codes[kk, nn] = 0xA
        wq = pack_codes(codes)
        hits = np.argwhere(wq != 0)
        assert len(hits) == 1
        nt, kt, thread, word = (int(x) for x in hits[0])
        assert (nt, kt) == (nn // 64, kk // 64)
        step, h = divmod(word, 2)
        k_in, row = kk % 64 - 32 * step, nn % 64
        reg = (1 if h else 0) if k_in % 32 < 16 else (3 if h else 2)
        frag_row, frag_k = _fragment(thread, reg)
        assert frag_row == row and k_in in frag_k
        e = frag_k.index(k_in) + (4 if reg in (2, 3) else 0)
        field = [0, 4, 1, 5, 2, 6, 3, 7].index(e)
        assert int(wq[nt, kt, thread, word]) == 0xA << (4 * field)


def test_converter_spec_word_is_the_fragment_pair() -> None:
    """The converter spec's Plan on a layout word gives a0 (or a1) in out0 and a2 (or a3) in out1: four bytes of
    four consecutive k each, in k order."""
    spec = with_group_size(load_spec("gptq_int4_s8"), 128)
    plan = compile_artifact(w4a8_converter_spec(spec)).plan
    assert plan.count("convert") == 7 and not [op for op in plan.ops if op.opcode.ptx.startswith("prmt")]
    codes = (np.arange(128 * 64) % 16).reshape(128, 64).astype(np.uint8)  # code = (64 k + n) % 16 = n % 16
    codes = (codes + np.arange(128)[:, None].astype(np.uint8)) % 16  # now (k + n) % 16
    wq = pack_codes(codes)
    regs = plan.run({"w": wq[0, 0].reshape(-1)}, upto="convert")
    thread, word = 37, 3  # warp 1, lane 5: g = 1, t = 1; step 1, rows g + 8
    flat = thread * 4 + word
    for out, reg in zip(plan.outputs, (1, 3), strict=True):
        row, ks = _fragment(thread, reg)
        got = [((int(regs[out][flat]) >> (8 * b)) & 0xFF) for b in range(4)]
        want = [((int(codes[32 + k, row]) - 8) & 0xFF) for k in ks]
        assert got == want


def test_scales_and_zeros_per_rescale_tile() -> None:
    spec = with_group_size(load_spec("awq_int4_s8"), 256)
    lay = Layout.of(spec)
    K, N = 512, 128
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 16, (K, N)).astype(np.uint8)
    s = rng.uniform(0.001, 0.01, (2, N)).astype(np.float16)
    z = rng.integers(0, 16, (2, N)).astype(np.uint8)
    p = pack_w4a8(spec, lay.pack_fields(codes), s, lay.pack_fields(z, lay.zero_order, "N"), 256)
    assert p.scales.shape == (N // 64, K // RESCALE_K, 64) and p.scales.dtype == np.float32
    assert p.zeros is not None and p.zeros.shape == p.scales.shape
    for nt in range(N // 64):
        for t in range(K // RESCALE_K):
            group = t * RESCALE_K // 256
            cols = slice(64 * nt, 64 * nt + 64)
            assert np.array_equal(p.scales[nt, t], s[group, cols].astype(np.float32))
            assert np.array_equal(p.zeros[nt, t], z[group, cols].astype(np.uint32) * 0x11111111)
    assert np.array_equal(unpack_codes(p.wq), codes)


def test_per_channel_scales_repeat_over_every_tile() -> None:
    spec = with_group_size(load_spec("gptq_int4_s8"), -1)
    lay = Layout.of(spec)
    codes = np.zeros((384, 64), dtype=np.uint8)
    s = np.linspace(0.5, 1.5, 64, dtype=np.float16)[None, :]
    p = pack_w4a8(spec, lay.pack_fields(codes), s, None, -1)
    assert p.zeros is None
    assert np.array_equal(p.scales[0], np.repeat(s.astype(np.float32), 3, axis=0))


@pytest.mark.parametrize(
    ("K", "N", "group", "message"),
    [
        (192, 64, 64, "K = 192"),
        (256, 96, 128, "N = 96"),
        (256, 64, 64, "groups of whole 128-k tiles"),
    ],
)
def test_shapes_the_layout_refuses(K: int, N: int, group: int, message: str) -> None:
    spec = load_spec("gptq_int4_s8")
    lay = Layout.of(spec)
    qweight = lay.pack_fields(np.zeros((K, N), dtype=np.uint8))
    scales = np.ones((K // group, N), dtype=np.float16)
    with pytest.raises(ValueError, match=message):
        pack_w4a8(spec, qweight, scales, None, group)


def test_fp16_specs_and_act_order_refused() -> None:
    with pytest.raises(ValueError, match=r"^\[target\]"):
        w4a8_converter_spec(load_spec("gptq_int4_fp16"))
    data = load_spec("gptq_int4_s8").model_dump(mode="json", exclude_none=True)
    data["act_order"] = True
    with pytest.raises(ValueError, match=r"^\[act_order\]"):
        w4a8_converter_spec(load_spec(data))
