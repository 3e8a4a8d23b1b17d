"""Does the Hopper GEMM's weight access pattern cost DRAM bandwidth? Reads 8192 x 28672 int4 (117 MB) the way its
CTAs read W: per 64-k tile, 32 (or 16) lines of 128 bytes, (a) in TensorRT-LLM's line order (a line holds every K,
so the tile's chunks are 16 KB apart) and (b) tile-contiguous (the chunks one 4 KB / 2 KB block). Same bytes, same
programs (Triton), L2 flushed, median; a torch copy of the same bytes beside them. Writes JSON (argv[1]).

    python devtools/weight_read_pattern.py docs/bench/weight_read_pattern_h100.json
"""

from __future__ import annotations

import json
import sys

import torch
import triton
import triton.language as tl
import triton.testing as tt


@triton.jit
def read_tiles(ptr, out, n_kt, line_stride, tile_stride, cta_stride, LINES: tl.constexpr):
    """Program p reads K tile kt of its LINES lines at p cta_stride + line line_stride + kt tile_stride (int32s)."""
    pid = tl.program_id(0)
    rows = tl.arange(0, LINES)[:, None]
    cols = tl.arange(0, 32)[None, :]
    base = ptr + pid.to(tl.int64) * cta_stride
    acc = tl.zeros((LINES, 32), tl.int32)
    for kt in range(n_kt):
        acc ^= tl.load(base + rows * line_stride + kt * tile_stride + cols)
    tl.store(out + pid * LINES * 32 + rows * 32 + cols, acc)


def main() -> None:
    K, N = 8192, 28672
    lines, line_words = N // 4, K * 2 // 4  # 4 int4 features a 128-byte line; a line's bytes: 2 a K slot
    w = torch.randint(-(2**31), 2**31 - 1, (lines * line_words,), dtype=torch.int32, device="cuda")
    n_kt = K // 64
    rows: list[dict[str, object]] = []
    for per_cta in (32, 16):
        ctas = lines // per_cta
        out = torch.empty(ctas * per_cta * 32, dtype=torch.int32, device="cuda")
        for warps in (4, 8):
            for stages in (3, 6):
                layouts = {
                    "trt lines (16 KB apart)": (line_words, 32, per_cta * line_words),
                    f"tile-contiguous ({per_cta * 128 // 1024} KB blocks)": (32, per_cta * 32, n_kt * per_cta * 32),
                }
                for name, (ls, ts, cs) in layouts.items():

                    def fn(ls: int = ls, ts: int = ts, cs: int = cs) -> None:
                        grid = (ctas,)  # noqa: B023
                        read_tiles[grid](w, out, n_kt, ls, ts, cs, LINES=per_cta, num_warps=warps, num_stages=stages)  # noqa: B023

                    fn()
                    us = float(tt.do_bench(fn, warmup=25, rep=200, return_mode="median")) * 1e3
                    gbs = w.numel() * 4 / us / 1e3
                    row = {"lines": per_cta, "ctas": ctas, "warps": warps, "stages": stages, "layout": name}
                    rows.append({**row, "us": us, "gbs": gbs})
                    print(f"{per_cta} lines {ctas} CTAs w{warps} s{stages} {name:30s} {us:7.1f} us {gbs:7.0f} GB/s")
    copy = torch.empty_like(w)
    us = float(tt.do_bench(lambda: copy.copy_(w), warmup=25, rep=200, return_mode="median")) * 1e3
    print(f"copy: {us:.1f} us, {2 * w.numel() * 4 / us / 1e3:.0f} GB/s")
    rows.append({"layout": "torch copy (read + write)", "us": us, "gbs": 2 * w.numel() * 4 / us / 1e3})
    with open(sys.argv[1], "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
