"""Hash the generated code of every entry point of every kernel family: the rendered CUDA source and the PTX that
NVRTC makes of it (sm_90 and sm_80), per entry point.

A change that should not move generated code (a refactor of the Python that renders it, templates split into
shared blocks) shows it here: ``--save before.json`` on the old tree, ``--compare before.json`` on the new one
prints every entry point whose PTX changed. Sources may differ (comments, helper names) while the PTX stays the
same; PTX is what the GPU runs.

Families and the configurations enumerated (what the product can launch):
- dequant: every shipped spec's artifact source (every launch variant);
- gemv: every shipped spec's fused GEMV source (every entry point); gemv_w16 / gemv_w8: the same with the wider
  blocks a weight of few tiles takes (dqgen.kernels.gemv.block_warps), where the spec's registers allow them;
- gemm: every shipped spec the tensor-core GEMM takes (every tile config, plain and gather);
- gemm90: the Hopper GEMM of every spec it takes, the same integer specs and the float / codebook ones (every token-tile
  config; sm_90a only: wgmma is architecture-specific);
- gather_x: the activation gather in front of the Hopper GEMM of gathered (act-order) weights (its one entry);
- w8a8_gemm: every configuration ``choose`` returns for s8 / e4m3 x f16 / bf16 / acc over the M, N, K, SM counts and
  shared-memory sizes of the benches;
- w8a8_gemm90: the Hopper W8A8 GEMM, every configuration its choice returns (sm_90a only);
- w4a8_gemm90: the Hopper W4A8 GEMM of both W4A8 specs, fp16 and bf16 out (every token tile; sm_90a only);
- act_quant: every variant ``choose`` returns over fp16 / bf16, K in the benches' sizes (and an unaligned one),
  smoothing, static / dynamic, aligned or not, few and many rows;
- gru: the per-step cell and the persistent kernel (every units-per-thread) of a small calibrated model;
- gru_cluster: the cluster-resident kernel (sm_90: clusters, st.async) of a calibrated hidden-256 model, every
  plan of 8 to 64 batch rows a cluster.

Run: ``python devtools/ptx_hashes.py --save hashes.json`` (about 10 minutes on two cores; NVRTC's disk cache
makes a second run over unchanged sources fast).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ARCHES = ("sm_90", "sm_80")
#: Specs whose 64-feature Hopper GEMM module is hashed too: int4 with zeros, int8 per-channel, NVFP4's block scales.
NARROW_SPECS = ("awq_int4_fp16", "int8_bf16", "nvfp4_fp16")
_ENTRY = re.compile(r"^\.(?:visible|weak)?\s*\.entry\s+(\w+)\(", re.M)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sources() -> Iterator[tuple[str, str, str, int]]:
    """(family, source name, source text, minimum sm) of every source to hash."""
    import numpy as np

    from dqgen.core.spec import load_spec, shipped_specs
    from dqgen.emit.pipeline import compile_artifact
    from dqgen.kernels.dequant import DequantConfig
    from dqgen.kernels.gemm import GemmKernelConfig
    from dqgen.kernels.gemm90 import NARROW_CONFIGS90, Gemm90KernelConfig
    from dqgen.kernels.gemv import GemvConfig, Tuning, wide_warps

    for name in shipped_specs():
        spec = load_spec(name)
        art = compile_artifact(spec)
        yield "dequant", name, DequantConfig(art).source(), spec.sm  # every variant's entry point
        yield "gemv", name, GemvConfig(art).source(), spec.sm  # every entry point, the kept tuning
        for warps in wide_warps(spec):
            yield f"gemv_w{warps}", name, GemvConfig(art, None, Tuning(warps=warps)).source(), spec.sm
        if GemmKernelConfig.supports(spec):
            yield "gemm", name, GemmKernelConfig(spec).source(), spec.sm  # every tile config, plain and gather
        if Gemm90KernelConfig.supports(spec):  # the integer specs, and the float / codebook ones it alone takes
            yield "gemm90", name, Gemm90KernelConfig(spec).source(), 90  # every token-tile config
        if name in NARROW_SPECS:  # the 64-feature shapes (selectable, not in the default module)
            yield "gemm90_narrow", name, Gemm90KernelConfig(spec, NARROW_CONFIGS90).source(), 90

    from dqgen.kernels.gather_x import GATHER_X

    yield "gather_x", GATHER_X.name, GATHER_X.source(), GATHER_X.min_sm

    from dqgen.kernels import w8a8_gemm as wg

    configs = set()
    for elem in ("s8", "e4m3"):
        for out in ("f16", "bf16", "acc"):
            for m in (1, 16, 17, 32, 33, 64, 65, 128, 256, 1024, 4096):
                for n, k in ((6144, 4096), (28672, 8192), (4096, 14336), (256, 256)):
                    for sms, shared in ((0, wg.SHARED_SM89), (132, 227 * 1024), (108, 163 * 1024)):
                        configs.add(wg.choose_w8a8_gemm(elem, out, m, n, k, sms, shared))
    for cfg in sorted(configs, key=lambda c: c.name):
        yield "w8a8_gemm", cfg.name, cfg.source(), cfg.min_sm

    from dqgen.kernels import w8a8_gemm90 as wg90

    for elem in ("s8", "e4m3"):
        for out in ("f16", "bf16", "acc"):
            for cfg90 in wg90.all_configs(elem, out):
                yield "w8a8_gemm90", cfg90.name, cfg90.source(), 90  # every configuration the choice returns

    from dqgen.kernels.w4a8_gemm90 import W4A8Gemm90Config

    for w4 in ("awq_int4_s8", "gptq_int4_s8"):
        for out in ("f16", "bf16"):
            yield "w4a8_gemm90", f"{w4}_{out}", W4A8Gemm90Config(load_spec(w4), out=out).source(), 90

    from dqgen.kernels import act_quant as ak

    variants = set()
    for dtype in ("fp16", "bf16"):
        for k in (4096, 8192, 14336, 4100, 256):
            for smooth in (None, "fp32", "fp16"):
                for static in (False, True):
                    for aligned in (True, False):
                        if aligned and k % 8:
                            continue
                        for rows in (1, 4096):
                            variants.add(ak.choose_act_quant(dtype, k, smooth, static, aligned, rows))
    for v in sorted(variants, key=lambda v: v.name):
        yield "act_quant", v.name, v.source(), v.min_sm

    from dqgen.gru import calibrate
    from dqgen.gru.kernel import cell_context
    from dqgen.kernels.gru_cell import MAX_UNITS_PER_THREAD, GruCellConfig, GruPersistConfig

    rng = np.random.default_rng(3)
    c, h = 16, 32
    w = rng.standard_normal((3 * h, c)) * 0.3
    r = rng.standard_normal((3 * h, h)) * 0.3
    p = calibrate(
        w,
        r,
        rng.standard_normal(3 * h) * 0.1,
        rng.standard_normal(3 * h) * 0.1,
        [(rng.standard_normal((20, 4, c)), np.zeros((4, h)))],
    )
    constants = cell_context(p)
    yield "gru", "cell", GruCellConfig(constants).source(), 80
    for jt in range(1, MAX_UNITS_PER_THREAD + 1):
        yield "gru", f"persist_jt{jt}", GruPersistConfig(constants, jt).source(), 80

    from dqgen.gru.cluster import candidates, cluster_config

    # the cluster kernel needs hidden a multiple of 128: its own small model, calibrated on a short sequence
    h = 256
    w = rng.standard_normal((3 * h, c)) * 0.1
    r = rng.standard_normal((3 * h, h)) * 0.05
    p = calibrate(w, r, np.zeros(3 * h), np.zeros(3 * h), [(rng.standard_normal((6, 2, c)), np.zeros((2, h)))])
    for pl in candidates(h, 64, 227 * 1024):
        cfg = cluster_config(p, pl)
        yield "gru_cluster", f"h{h}_nb{pl.nb}_k{pl.ksplit}", cfg.source(), 90


def _compile(item: tuple[str, str, str, int]) -> list[dict[str, object]]:
    from dqgen.emit.nvrtc import compile_source

    family, name, source, sm = item
    rows = []
    for arch in ("sm_90a",) if family in ("gemm90", "w8a8_gemm90", "w4a8_gemm90") else ARCHES:
        if int(arch[3:].rstrip("af")) < sm:
            continue
        ptx = compile_source(source, arch=arch, want="ptx", name=f"{family}_{name}.cu").ptx or ""
        starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(ptx)]
        # an entry's PTX: from its .entry line to the next one (the module header is hashed with the source's)
        for i, (pos, entry) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else len(ptx)
            rows.append({"family": family, "source": name, "arch": arch, "entry": entry, "ptx": _sha(ptx[pos:end])})
        rows.append(
            {"family": family, "source": name, "arch": arch, "entry": "<module>", "ptx": _sha(ptx), "src": _sha(source)}
        )
    return rows


def table(jobs: int) -> list[dict[str, object]]:
    items = list(sources())
    print(f"{len(items)} sources", file=sys.stderr)
    with ProcessPoolExecutor(jobs) as pool:
        rows = [r for rs in pool.map(_compile, items) for r in rs]
    return sorted(rows, key=lambda r: (str(r["family"]), str(r["source"]), str(r["arch"]), str(r["entry"])))


def compare(before: list[dict[str, object]], after: list[dict[str, object]]) -> list[str]:
    def key(r: dict[str, object]) -> tuple[object, ...]:
        return (r["family"], r["source"], r["arch"], r["entry"])

    b = {key(r): r for r in before}
    a = {key(r): r for r in after}
    diffs = [f"gone: {k}" for k in sorted(b.keys() - a.keys(), key=str)]
    diffs += [f"new: {k}" for k in sorted(a.keys() - b.keys(), key=str)]
    diffs += [f"ptx changed: {k}" for k in sorted(b.keys() & a.keys(), key=str) if b[k]["ptx"] != a[k]["ptx"]]
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", type=Path, help="write the hash table (JSON) here")
    ap.add_argument("--compare", type=Path, help="compare against a saved table; exit 1 on any PTX difference")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    rows = table(args.jobs)
    entries = [r for r in rows if r["entry"] != "<module>"]
    print(f"{len(entries)} entry points x arch, {len(rows) - len(entries)} modules", file=sys.stderr)
    if args.save:
        args.save.write_text(json.dumps(rows, indent=0) + "\n")
    if args.compare:
        diffs = compare(json.loads(args.compare.read_text()), rows)
        for d in diffs:
            print(d)
        print(f"{len(diffs)} differences", file=sys.stderr)
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
