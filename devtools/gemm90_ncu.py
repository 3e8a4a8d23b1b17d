"""Issue 23's speed misses under ncu, each beside the kernel it is measured against, and the W4A16 Hopper GEMM's
main-loop SASS on the CPU.

(a) decode at >= 80% of the weight floor: dqgen at M = 1 (Kernel.matmul: the GEMV) and 8 (``dqgen gemm``: run_gemm,
    the Hopper GEMM whatever the dispatch rule says) on 8192x28672 and 28672x8192 (K x N), humming at M = 1, and a
    plain read of the packed weight (torch's sum over its int32 words).
(b) at most 0.9x humming's time, M = 16..256: dqgen and humming at M = 16, 128, 256 on 8192x28672, and at M = 128 on
    4096x28672 (the worst ratio of the committed bench).
(c) end to end, the small linears of a Llama-3-8B layer (q / o 4096x4096, k / v 4096x1024) at M = 64 and 256: dqgen's
    GEMM (run_gemm: the sm_80 or Hopper kernel, by gemm90.hopper_pays; the dispatch may send these to dequantize +
    cuBLAS instead), humming and cuBLAS on the dense fp16 weight.
(d) end to end from 64 tokens, where dqgen trails humming (session 39): the dispatch (Kernel.matmul), humming and
    cuBLAS dense on gate / up (4096x14336) and down (14336x4096) at M = 64, q / o (4096x4096) at M = 128.

Weights: AWQ int4 g128 fp16 (dqgen.run.inputs.make_inputs, the bench's), humming quantizing the same dense W itself
(dqgen.tools.bench_matmul.humming_layer). Each case is launched once after two warm-up calls between
cudaProfilerStart / Stop, in an NVTX range of its tag, so ``ncu --profile-from-start off`` profiles those launches
alone, in run order (w8a8_ncu.run_order: shape by shape).

    python devtools/gemm90_ncu.py sass [--out F.json]    # CPU: registers, spills, main-loop SASS per 64-k tile
    ncu --query-metrics > q.txt; python devtools/w8a8_ncu.py metrics q.txt   # the --metrics list
    ncu --profile-from-start off --metrics "$(...)" --section WarpStateStats -o rep \\
        python devtools/gemm90_ncu.py profile
    python devtools/gemm90_ncu.py table raw.csv [--save F]  # ncu --page raw CSV -> the key figures per case
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import w8a8_ncu as nc  # devtools/ (this script's folder is first on sys.path)
from w8a8_ncu import Case

SPEC = "awq_int4_fp16"
BIG, TALL, WIDE = (8192, 28672), (28672, 8192), (4096, 28672)
Q_O, K_V, UP, DOWN = (4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096)
CASES: tuple[Case, ...] = (
    *(Case("a", impl, m, *kn) for kn in (BIG, TALL) for impl, m in (("dqgen", 1), ("dqgen gemm", 8), ("humming", 1))),
    Case("a", "read weight", 0, *BIG),
    *(Case("b", impl, m, *BIG) for m in (16, 128, 256) for impl in ("dqgen", "humming")),
    *(Case("b", impl, 128, *WIDE) for impl in ("dqgen", "humming")),
    *(Case("c", impl, m, *kn) for kn in (Q_O, K_V) for m in (64, 256) for impl in ("dqgen gemm", "humming", "cublas")),
    *(Case("d", i, m, *kn) for kn, m in ((UP, 64), (DOWN, 64), (Q_O, 128)) for i in ("dqgen", "humming", "cublas")),
)


def kernel_of(case: Case, name: str) -> bool:
    """Whether a kernel of this name is the case's own (a torch call's helper kernels are listed beside it)."""
    if case.impl in ("dqgen", "dqgen gemm"):
        return name.startswith("dqgen")
    if case.impl == "read weight":
        return "reduce_kernel" in name and "splitK" not in name
    torch_helper = name.startswith(("void at::", "at::")) or "elementwise" in name or "reduce_kernel" in name
    return not name.startswith("dqgen") and not torch_helper


# ---- the main loop's SASS (CPU) -----------------------------------------------------------------------------------


def sass_report(out: str = "") -> list[dict[str, Any]]:
    """w8a8_ncu.sass_row of the W4A16 Hopper GEMM in each CTA shape the cases launch (choose_config90's; a "k tile"
    is 64 k here: 4 k16 steps of MW m64 wgmmas)."""
    from dqgen.core.spec import load_spec
    from dqgen.kernels.gemm90 import Gemm90KernelConfig, choose_config90

    spec = load_spec(SPEC)
    rows = []
    for cfg in dict.fromkeys(choose_config90(c.m) for c in CASES if c.impl in ("dqgen", "dqgen gemm")):
        mw = cfg.features // cfg.consumers // 64
        # sass_row counts 4 GMMAs of each m64 block a tile: the k16 steps of one 64-k tile here
        row = {"config": cfg.tag, **nc.sass_row(Gemm90KernelConfig.one(spec, cfg), mw)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        with open(out, "w") as f:
            note = "W4A16 Hopper GEMM main loop per 64-k tile, a warp's instructions (nvdisasm of NVRTC's sm_90a cubin)"
            json.dump({"what": note, "spec": SPEC, "rows": rows}, f, indent=1)
    return rows


# ---- the cases on the GPU -----------------------------------------------------------------------------------------


def shape_calls(k: int, n: int, cases: Sequence[Case]) -> list[tuple[Case, Callable[[], Any]]]:
    """(case, its call) for the cases of weight K x N: dqgen's packed weight, humming's layer and the dense W of
    the same codes."""
    import torch

    from dqgen import Kernel
    from dqgen.core.spec import load_spec
    from dqgen.run import dispatch, gemm
    from dqgen.run.inputs import make_inputs
    from dqgen.tools.bench_matmul import humming_layer

    kernel: Any = Kernel(load_spec(SPEC))
    q, s, z = make_inputs(kernel.spec, k, n, 0)
    W = kernel(q, s, z)  # [K, N] fp16
    impls = {c.impl for c in cases}
    packed = kernel.pack_matmul(q, s, z) if impls & {"dqgen", "dqgen gemm"} else None
    gw = dispatch.beside(packed) if packed is not None else None
    layer = humming_layer(W.t()) if "humming" in impls else None
    g = torch.Generator(device="cuda").manual_seed(k + n)
    calls: list[tuple[Case, Callable[[], Any]]] = []
    for c in cases:
        if c.impl == "read weight":  # every packed weight byte read once (int32 words), one int64 out
            calls.append((c, functools.partial(torch.sum, q.view(torch.int32))))
            continue
        x = (torch.randn(c.m, k, device="cuda", generator=g) / k**0.5).half()
        call = {
            "dqgen": lambda x=x: kernel.matmul(x, packed),
            "dqgen gemm": lambda x=x: gemm.run_gemm(kernel.spec, x, gw),
            "humming": lambda x=x: layer(x),
            "cublas": lambda x=x: torch.matmul(x, W),
        }[c.impl]
        calls.append((c, call))
    return calls


def main() -> None:
    args = nc.subcommands(__doc__.splitlines()[0])[0].parse_args()
    if args.cmd == "sass":
        sass_report(args.out)
    elif args.cmd == "profile":
        nc.profile(args.misses, CASES, shape_calls)
    else:
        nc.table(args.csv, args.save, args.misses, CASES, kernel_of)


if __name__ == "__main__":
    main()
