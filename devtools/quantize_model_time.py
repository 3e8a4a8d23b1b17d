"""Time ``dqgen.nn.quantize_model`` on a Llama-3-8B-shaped model (issue 26, deliverable 2: its 224 linears in at
most 10 s on an H100).

The model is plain ``nn.Linear`` modules of Llama-3-8B's shapes (hidden 4096, intermediate 14336, 32 layers, 32
query heads and 8 key/value heads of 128: q 4096x4096, k and v 1024x4096, o 4096x4096, gate and up 14336x4096,
down 4096x14336; lm_head 128256x4096, skipped by default as AWQ / GPTQ tools do), random fp16 weights made directly
on the GPU (no download, no transformers). The spec's kernels are compiled first, on one small layer of each shape
(warm-up, reported apart: NVRTC's cost is once per spec and machine, cached on disk); then the whole model is
quantized, which includes packing every layer for the GEMV and the GEMM on the GPU. Prints one JSON object:
seconds, per-linear median, peak GPU memory, the replaced and skipped counts, the device and the bound.

Run on the GPU host: ``python devtools/quantize_model_time.py [--spec awq_int4_fp16] [--layers 32]
[--group-size 128] [--repeat 1]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: this checkout's dqgen
    sys.path.insert(0, str(ROOT))

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4096, 14336, 32, 8, 128, 128256
BOUND_S = 10.0


def build(layers: int, vocab: int, device: str = "cuda", shrink: int = 1) -> object:
    """The decoder's linears as modules named as transformers' LlamaForCausalLM names them (every size divided by
    ``shrink``: a smoke test off the GPU)."""
    import torch as t

    nn = t.nn
    hidden, inter, head_dim = HIDDEN // shrink, INTERMEDIATE // shrink, HEAD_DIM // shrink

    def linear(k: int, n: int) -> nn.Linear:
        # made in fp16 with no initialisation pass, then filled: random weights of a trained layer's scale
        lin = nn.Linear(k, n, bias=False, device="meta")
        lin.weight = nn.Parameter(t.empty((n, k), device=device, dtype=t.float16).normal_(0.0, 0.02))
        return lin

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = linear(hidden, HEADS * head_dim)
            self.k_proj = linear(hidden, KV_HEADS * head_dim)
            self.v_proj = linear(hidden, KV_HEADS * head_dim)
            self.o_proj = linear(HEADS * head_dim, hidden)

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj = linear(hidden, inter)
            self.up_proj = linear(hidden, inter)
            self.down_proj = linear(inter, hidden)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn = Attn()
            self.mlp = Mlp()

    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Layer() for _ in range(layers)])

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Inner()
            self.lm_head = linear(hidden, vocab)

    return Model()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="awq_int4_fp16")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1, help="quantize a fresh model this many times (median)")
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (with --shrink)")
    ap.add_argument("--shrink", type=int, default=1, help="divide every size by this (smoke tests)")
    args = ap.parse_args()

    import torch

    from dqgen.nn import quantize_model

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA GPU"}))
        sys.exit(2)
    dev = torch.cuda.get_device_name() if cuda else args.device

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    sh = args.shrink
    # warm-up: compile the spec's kernels (GEMV modes, GEMM) on one small model of every distinct (K, N)
    t0 = time.perf_counter()
    warm = torch.nn.ModuleList(
        [
            torch.nn.Linear(k // sh, n // sh, bias=False, device=args.device, dtype=torch.float16)
            for k, n in {
                (HIDDEN, HEADS * HEAD_DIM),
                (HIDDEN, KV_HEADS * HEAD_DIM),
                (HIDDEN, INTERMEDIATE),
                (INTERMEDIATE, HIDDEN),
            }
        ]
    )
    quantize_model(warm, args.spec, group_size=args.group_size)
    sync()
    warm_s = time.perf_counter() - t0
    del warm

    runs = []
    report = None
    for _ in range(args.repeat):
        model = build(args.layers, args.vocab, args.device, sh)
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() if cuda else 0
        t0 = time.perf_counter()
        report = quantize_model(model, args.spec, group_size=args.group_size)
        sync()
        runs.append(time.perf_counter() - t0)
        peak = torch.cuda.max_memory_allocated() if cuda else 0
        after = torch.cuda.memory_allocated() if cuda else 0
        del model
        if cuda:
            torch.cuda.empty_cache()
    assert report is not None
    n = len(report.replaced)
    seconds = statistics.median(runs)
    print(
        json.dumps(
            {
                "device": dev,
                "torch": torch.__version__,
                "spec": args.spec,
                "group_size": args.group_size,
                "layers": args.layers,
                "linears_replaced": n,
                "skipped": report.skipped,
                "notes": report.notes,
                "seconds": round(seconds, 3),
                "runs_s": [round(r, 3) for r in runs],
                "per_linear_ms": round(1e3 * seconds / max(n, 1), 2),
                "warmup_compile_s": round(warm_s, 2),
                "model_bytes_before": before,
                "bytes_after": after,
                "peak_bytes": peak,
                "bound_s": BOUND_S,
                "shrink": sh,
                "meets_bound": bool(cuda and sh == 1 and n == 7 * args.layers and seconds <= BOUND_S),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
