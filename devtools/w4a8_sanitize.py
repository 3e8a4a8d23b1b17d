"""Every CTA shape of the Hopper W4A8 GEMM (dqgen.kernels.w4a8_gemm90, W4A8_TILES) launched on a small layer with
token and feature tails, one CTA a tile and in split-K pieces, AWQ (zero words in the stages) and GPTQ, for
`compute-sanitizer --tool memcheck`, `racecheck` and `synccheck` (stages recycled through mbarriers while the next
tile's words are converted under the current tile's wgmmas; the split-K pieces' last arriver); each output is also
checked against the numpy model (dqgen.check.w4a8_model: its bits in one piece; split-K within one fp16 ulp plus
what adding the 128-k terms in another order can change in fp32). Exit 1 when an output is off; exit 0 with a note
on a GPU that is not sm_90. ``--no-refill``: 5 K tiles, no stage refilled (for racecheck: below)."""

from __future__ import annotations

import sys


def main() -> int:
    import numpy as np
    import torch

    from dqgen.check.w4a8_model import w4a8_matmul as model_matmul
    from dqgen.core.spec import load_spec
    from dqgen.emit.pipeline import compile_artifact
    from dqgen.kernels.w4a8_gemm90 import W4A8_TILES
    from dqgen.layout.layout import Layout
    from dqgen.layout.w4a8 import pack_w4a8, w4a8_converter_spec
    from dqgen.w8a8.w4a8 import pack_w4a8_weight, w4a8_matmul

    if torch.cuda.get_device_capability(0) != (9, 0):
        print("not an sm_90 GPU: the Hopper W4A8 GEMM does not run here")
        return 0
    bad = []
    # 19 rescale tiles: past twice every tile's stages (each stage refilled after its release), an odd count (the last
    # tile in the first register set); 3 feature blocks. --no-refill: 5 tiles, fewer than any tile's stages (racecheck:
    # it does not follow the mbarrier completion of the weights' bulk copies (UBLKCP), so a refilled stage reads as a
    # race; the refill order is checked in the SASS by tests/test_w4a8_gemm90.py and by the outputs here)
    K, N = (5 if "--no-refill" in sys.argv else 19) * 128, 64 * 3
    for name in ("awq_int4_s8", "gptq_int4_s8"):
        spec = load_spec(name)
        lay = Layout.of(spec)
        rng = np.random.default_rng(5)
        codes = rng.integers(0, 16, (K, N)).astype(np.uint8)
        s16 = (rng.uniform(0.5, 2.0, (K // 128, N)) * 1e-2).astype(np.float16)
        qz, zc = None, np.full((K // 128, N), 8)
        if spec.zeros.packed:
            zc = rng.integers(0, 16, (K // 128, N)).astype(np.uint8)
            qz = lay.pack_fields(zc, lay.zero_order, "N")
        w8 = codes.astype(np.int64) - np.repeat(zc.astype(np.int64), 128, axis=0)  # the int8 weights the kernel sums
        qweight = lay.pack_fields(codes)
        w = pack_w4a8_weight(spec, qweight, s16, qz, 128)
        plan = compile_artifact(w4a8_converter_spec(spec)).plan
        for tile in W4A8_TILES:
            m = tile.bn + 3
            xq = rng.integers(-128, 128, (m, K)).astype(np.int8)
            xs = rng.uniform(1e-3, 1e-2, m).astype(np.float32)
            want = model_matmul(plan, pack_w4a8(spec, qweight, s16, qz, 128), xq, xs)
            want16 = want.astype(np.float16).astype(np.float32)
            ulp16 = np.spacing(np.abs(want).astype(np.float16)).astype(np.float32)
            # split-K adds the 128-k terms in another order: up to 2 k_tiles 2^-24 sum |term| more in fp32
            # (dqgen.w8a8.gemm_bench.w4a8_close's bound)
            terms = [np.abs(xq[:, t * 128 : (t + 1) * 128].astype(np.int64) @ w8[t * 128 : (t + 1) * 128])
                     * s16[t].astype(np.float32)[None, :] * xs[:, None] for t in range(K // 128)]  # fmt: skip
            reorder = 2 * (K // 128) * 2.0**-24 * np.sum(terms, axis=0)
            for splits in (1, 2):
                y = w4a8_matmul(torch.from_numpy(xq).cuda(), torch.from_numpy(xs).cuda(), w, tile=tile, splits=splits)
                torch.cuda.synchronize()
                got = y.float().cpu().numpy()
                ok = np.array_equal(got, want16) if splits == 1 else bool((np.abs(got - want) <= ulp16 + reorder).all())
                if not ok:
                    bad.append(f"{name} {tile.tag} splits={splits}")
    print("\n".join(f"off: {b}" for b in bad) or "every CTA shape ran and matched the model")
    return 1 if bad else 0


if __name__ == "__main__":
    from dqgen.run.gpucheck import exact_allocations

    exact_allocations()
    sys.exit(main())
