"""Issue 24's three unprofiled misses under ncu, with their anchors, and the main loops' SASS on the CPU.

(a) decode: int8 at M = 1 / 16 / 64 on 8192x28672 and 28672x8192 (K x N) at 79-84% of the int8 weight floor; anchors
    torch._int_mm at M = 64 (it refuses M <= 16) and a plain read of the weight (torch's int32 sum over its bytes).
(b) fp8 e4m3 at M = 4096 on 8192x28672 against torch._scaled_mm row-wise.
(c) W4A8 at M = 256 against int8 W8A8 at M = 256, both shapes.
(d) int8 against torch._int_mm where K is short (4096x28672, M = 256 and 4096).

Each case is built as dqgen.w8a8.gemm_bench builds it (the same weights, quantizers and entry points: matmul,
w4a8_matmul, gemm_bench.w4a8_weight) and launched once after a warm-up between cudaProfilerStart / Stop (and in an
NVTX range named after the case), so ``ncu --profile-from-start off`` profiles those launches alone, in CASES' order.

    python devtools/w8a8_ncu.py sass                      # CPU: registers, spills, main-loop SASS of each dqgen kernel
    ncu --query-metrics > q.txt; python devtools/w8a8_ncu.py metrics q.txt   # the --metrics list this ncu accepts
    ncu --profile-from-start off --clock-control none --metrics "$(...)" --section WarpStateStats \\
        -o rep python devtools/w8a8_ncu.py profile     # GPU, under ncu
    python devtools/w8a8_ncu.py time [--out F.json]       # GPU, no ncu: each case's µs, a K sweep and decode variants
    python devtools/w8a8_ncu.py table raw.csv [--save F]  # ncu --page raw CSV -> the key figures per case
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

#: The H100's SMs (the configuration choice's ``sms``; the profile runs there).
SMS = 132
GMMA_OPS = ("IGMMA", "QGMMA", "HGMMA")
#: The spec of gemm_bench.w4a8_weight's weights (AWQ-style zero points: dqgen.w8a8.w4a8_op.SPEC_WITH_ZEROS, named
#: here so the CPU part needs no torch).
W4A8_SPEC = "awq_int4_s8"


@dataclass(frozen=True)
class Case:
    """One profiled launch: which miss it explains, the implementation, M and the weight's K x N."""

    miss: str
    impl: str
    m: int
    k: int
    n: int

    @property
    def tag(self) -> str:
        return f"{self.miss}:{self.impl}:M{self.m}:{self.k}x{self.n}"


BIG, TALL = (8192, 28672), (28672, 8192)  # K x N
CASES: tuple[Case, ...] = (
    *(Case("a", "dqgen int8", m, *kn) for kn in (BIG, TALL) for m in (1, 16, 64)),
    *(Case("a", "torch._int_mm", 64, *kn) for kn in (BIG, TALL)),
    Case("a", "read weight", 0, *BIG),
    Case("b", "dqgen fp8", 4096, *BIG),
    Case("b", "torch._scaled_mm", 4096, *BIG),
    *(Case("c", impl, 256, *kn) for kn in (BIG, TALL) for impl in ("dqgen w4a8", "dqgen int8")),
    # (d) int8 below 1.1x _int_mm where K is short: 4096x28672 (32 K tiles a tile) at M = 256 and 4096
    *(Case("d", impl, m, 4096, 28672) for m in (256, 4096) for impl in ("dqgen int8", "torch._int_mm")),
)


def run_order(cases: Sequence[Any]) -> list[Any]:
    """The cases in the order they run (and ncu lists them): shape by shape, each shape's in ``cases``' order."""
    shapes = dict.fromkeys((c.k, c.n) for c in cases)
    return [c for kn in shapes for c in cases if (c.k, c.n) == kn]


def kernel_of(case: Case, name: str) -> bool:
    """Whether a kernel of this name is the case's own (ncu lists any helper kernel of a torch call beside it)."""
    prefix = {"dqgen int8": "dqgen_w8a8_s8", "dqgen fp8": "dqgen_w8a8_e4m3", "dqgen w4a8": "dqgen_w4a8"}
    if case.impl in prefix:
        return name.startswith(prefix[case.impl])
    if case.impl == "read weight":
        return "reduce_kernel" in name and "splitK" not in name
    return not name.startswith("dqgen") and "reduce" not in name.lower()  # the cuBLAS / CUTLASS GEMM


# ---- the kernels' SASS (CPU) -------------------------------------------------------------------------------------


def dqgen_kernels() -> dict[str, tuple[Any, int]]:
    """{case tag: (the kernel config the case launches, m64 blocks a consumer warpgroup)} for the dqgen cases, as the
    dispatch chooses them on the H100 (fp16 out)."""
    from dqgen.core.spec import load_spec
    from dqgen.kernels.w4a8_gemm90 import W4A8Gemm90Config, choose_w4a8_tile
    from dqgen.kernels.w8a8_gemm90 import choose_w8a8_gemm90

    out: dict[str, tuple[Any, int]] = {}
    for c in CASES:
        if c.impl in ("dqgen int8", "dqgen fp8"):
            cfg = choose_w8a8_gemm90("s8" if c.impl == "dqgen int8" else "e4m3", "f16", c.m, c.n, SMS)
            out[c.tag] = (cfg, cfg.mw)
        elif c.impl == "dqgen w4a8":
            tile = choose_w4a8_tile(c.m)
            out[c.tag] = (W4A8Gemm90Config.one(load_spec(W4A8_SPEC), tile, "f16"), tile.mw)
    return out


_INST = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def main_loop(sass: str) -> tuple[Counter[str], Counter[str]]:
    """(every opcode, the opcodes a predicated forward branch inside it may skip) of the smallest loop (a label up to
    a branch back to it) that holds a GMMA: the main loop's static body, and its conditional part (e.g. fp8's
    promotion, which runs every PROMOTE_K_TILES K tiles). Empty where no loop holds a GMMA."""
    ops: list[tuple[bool, str, str]] = []  # (predicated, opcode, operands)
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        label = _LABEL.match(line.strip())
        if label:
            labels[label.group(1)] = len(ops)
            continue
        inst = _INST.search(line)
        if inst:
            ops.append((inst.group(1) is not None, inst.group(2), inst.group(3)))

    def target(i: int) -> int | None:
        _, op, operands = ops[i]
        found = _TARGET.search(operands)
        return labels.get(found.group(1)) if op.startswith("BRA") and found else None

    best: tuple[int, int] | None = None
    for end in range(len(ops)):
        start = target(end)
        if start is None or start > end or not any(o.startswith(GMMA_OPS) for _, o, _ in ops[start : end + 1]):
            continue
        if best is None or end - start < best[1] - best[0]:
            best = (start, end)
    if best is None:
        return Counter(), Counter()
    start, end = best
    skippable = set()
    for i in range(start, end + 1):
        to = target(i)
        if ops[i][0] and to is not None and i < to <= end + 1:
            skippable.update(range(i + 1, to))
    body = Counter(op for _, op, _ in ops[start : end + 1] if op != "NOP")
    cond = Counter(ops[i][1] for i in skippable if ops[i][1] != "NOP")
    return body, cond


def family(op: str) -> str:
    """An opcode's family for the table: GMMA, the int -> float conversions, FMUL / FADD / FFMA, or the opcode's
    first word."""
    if op.startswith(GMMA_OPS):
        return "GMMA"
    if op.startswith(("I2F", "I2FP")):
        return "I2F"
    return op.split(".")[0]


def sass_row(cfg: Any, mw: int) -> dict[str, Any]:
    """Registers and spills (ptxas), then the main loop's instructions per 128-k tile (a warp's; 4 k32 GMMAs per
    m64 block a tile) by family."""
    from dqgen.emit.nvrtc import compile_source
    from dqgen.emit.sass import nvdisasm_path

    res = compile_source(cfg.source(), arch="sm_90a", want="cubin", name=cfg.source_name, options=["-Xptxas=-v"])
    assert res.cubin is not None
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", res.log)]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", res.log)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(res.cubin)
        f.flush()
        text = subprocess.run([nvdisasm_path(), "-c", f.name], check=True, capture_output=True, text=True).stdout
    loop, cond = main_loop(text)
    gmma = sum(v for k, v in loop.items() if k.startswith(GMMA_OPS))
    tiles = gmma / (4 * mw) if gmma else 0.0

    def per_tile(ops: Counter[str]) -> dict[str, float]:
        fams: Counter[str] = Counter()
        for op, v in ops.items():
            fams[family(op)] += v
        return {k: round(v / tiles, 1) for k, v in fams.most_common()} if tiles else {}

    return {
        "kernel": cfg.name,
        "registers": max(regs) if regs else None,
        "spill_bytes": sum(int(a) + int(b) for a, b in spills),
        "gmma_op": sorted({k for k in loop if k.startswith(GMMA_OPS)}),
        "loop_k_tiles": tiles,
        "loop_instructions_per_k_tile": round(sum(loop.values()) / tiles, 1) if tiles else None,
        "per_k_tile": per_tile(loop),
        "conditional_instructions_per_k_tile": round(sum(cond.values()) / tiles, 1) if tiles else None,
        "conditional_per_k_tile": per_tile(cond),
    }


def sass_report(out: str = "") -> list[dict[str, Any]]:
    """sass_row of each dqgen kernel the cases launch (printed; ``out``: a JSON file of them too)."""
    rows = []
    seen: set[str] = set()
    for tag, (cfg, mw) in dqgen_kernels().items():
        if cfg.name in seen:
            continue
        seen.add(cfg.name)
        row = {"case": tag, **sass_row(cfg, mw)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        with open(out, "w") as f:
            note = "main loop per 128-k tile, a warp's instructions (nvdisasm of NVRTC's sm_90a cubin)"
            json.dump({"what": note, "rows": rows}, f, indent=1)
    return rows


# ---- ncu's metrics ------------------------------------------------------------------------------------------------

#: Metrics every ncu since 2022 accepts on sm_90 (launch attributes and the duration are not in --query-metrics).
BASE_METRICS = (
    "gpu__time_duration.sum",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    "launch__waves_per_multiprocessor",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
)
#: The figures that explain the misses, kept where --query-metrics lists their base name: DRAM and L2 throughput and
#: bytes, occupancy, issue slots, and (PIPE_PATTERN) the tensor, FMA and ALU pipes.
WANTED = (
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sector_hit_rate.pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_elapsed.avg.per_second",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__warps_active.avg.per_cycle_active",
    "smsp__warps_eligible.avg.per_cycle_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed.sum",
)
PIPE_PATTERN = re.compile(
    r"^sm__(pipe_[a-z0-9_]*(tensor|gmma|fma|alu|fp16|xu|shared|uniform)[a-z0-9_]*_cycles_active"
    r"|inst_executed_pipe_[a-z0-9_]*(tensor|gmma|fma|alu|fp16|xu|uniform)[a-z0-9_]*)$"
)
_QUERY_NAME = re.compile(r"^\s*([a-z0-9]+__[a-z0-9_]+)\b")


def ncu_metrics(query: str) -> list[str]:
    """The --metrics list for the ncu whose ``--query-metrics`` printed ``query``: BASE_METRICS, the WANTED metrics
    whose base name it lists, and its pipes' utilisations (PIPE_PATTERN) as % of peak over the active cycles."""
    names = {m.group(1) for m in map(_QUERY_NAME.match, query.splitlines()) if m}
    wanted = [w for w in WANTED if w.split(".")[0] in names]
    pipes = sorted(n for n in names if PIPE_PATTERN.match(n))
    return [*BASE_METRICS, *wanted, *(f"{p}.avg.pct_of_peak_sustained_active" for p in pipes)]


# ---- the cases on the GPU -----------------------------------------------------------------------------------------


def shape_calls(k: int, n: int, cases: Sequence[Case]) -> list[tuple[Case, Callable[[], Any]]]:
    """(case, its call) for the cases of weight K x N, on gemm_bench's weights and activations of that shape."""
    import torch

    from dqgen.w8a8 import matmul, quantize_activations, quantize_weight
    from dqgen.w8a8.gemm_bench import w4a8_weight
    from dqgen.w8a8.matmul_op import quantize_activations_fp8
    from dqgen.w8a8.w4a8_op import w4a8_matmul

    g = torch.Generator(device="cuda").manual_seed(k + n)
    w16 = (torch.randn(n, k, device="cuda", generator=g) * 0.02).half()
    w, ws = quantize_weight(w16, "int8")
    impls = {c.impl for c in cases}
    w8, ws8 = quantize_weight(w16, "fp8") if impls & {"dqgen fp8", "torch._scaled_mm"} else (None, None)
    w4 = w4a8_weight(w16)[0] if "dqgen w4a8" in impls else None
    del w16
    calls: list[tuple[Case, Callable[[], Any]]] = []
    for c in cases:
        if c.impl == "read weight":  # every weight byte read once (as 4-byte words), one int64 out
            calls.append((c, functools.partial(torch.sum, w.view(torch.int32))))
            continue
        x16 = torch.randn(c.m, k, device="cuda", generator=g).half()
        x, xs = quantize_activations(x16)
        x8, xs8 = quantize_activations_fp8(x16)
        calls.append(
            (
                c,
                {
                    "dqgen int8": functools.partial(matmul, x, xs, w, ws),
                    "torch._int_mm": functools.partial(torch._int_mm, x, w.t()),
                    "dqgen fp8": functools.partial(matmul, x8, xs8, w8, ws8),
                    # gemm_bench's row-wise call (bf16 out)
                    "torch._scaled_mm": functools.partial(
                        torch._scaled_mm,
                        x8,
                        None if w8 is None else w8.t(),
                        scale_a=xs8[:, None],
                        scale_b=None if ws8 is None else ws8[None, :],
                        out_dtype=torch.bfloat16,
                    ),
                    "dqgen w4a8": functools.partial(w4a8_matmul, x, xs, *(w4 or ())),
                }[c.impl],
            )
        )
    return calls


#: A script's calls of the cases of one weight shape: (K, N, its cases) -> [(case, call)].
ShapeCalls = Callable[[int, int, Sequence[Any]], list[tuple[Any, Callable[[], Any]]]]


def case_calls(cases: Sequence[Any], calls_of: ShapeCalls | None = None) -> Iterator[tuple[Any, Callable[[], Any]]]:
    """(case, its call) for each case in run_order, shape by shape (``calls_of``: shape_calls by default; another
    script's cases bring theirs); a shape's tensors are freed before the next's."""
    import torch

    calls_of = shape_calls if calls_of is None else calls_of
    order = run_order(cases)
    for k, n in dict.fromkeys((c.k, c.n) for c in order):
        yield from calls_of(k, n, [c for c in order if (c.k, c.n) == (k, n)])
        torch.cuda.empty_cache()


def profile(misses: str = "", cases: Sequence[Any] = CASES, calls_of: ShapeCalls | None = None) -> None:
    """Each case (of ``misses``, e.g. "d"; all by default) once after two warm-up calls, between cudaProfilerStart
    and Stop, in an NVTX range of its tag (in run_order); ``cases`` / ``calls_of``: another script's."""
    import torch

    for i, (case, call) in enumerate(case_calls([c for c in cases if not misses or c.miss in misses], calls_of)):
        call()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        with torch.cuda.nvtx.range(case.tag):
            call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"ncu case {i}: {case.tag}", flush=True)


#: Decode variants timed beside the default launch (8192x28672, M = 1: 224 tiles of 128 channels, 2 CTAs an SM on
#: 132 SMs): (label, CTAs or None for the plan's own, (bn, consumers, mw, stages, min_blocks) or None for the choice's).
DECODE_VARIANTS: tuple[tuple[str, int | None, tuple[int, int, int, int, int] | None], ...] = (
    ("choice: 224 CTAs, one tile each", None, None),
    ("264 CTAs: stream-K over every resident slot", 264, None),
    ("448 CTAs: two K halves a tile", 448, None),
    ("64-channel CTAs, 3 an SM, 8 stages (plan's own)", None, (8, 1, 1, 8, 3)),
)
#: K of the decode K sweep (M = 1, N = 28672, the same 224 CTAs): µs against weight bytes gives the launch's fixed
#: cost (the intercept) and the streaming bandwidth (the slope).
SWEEP_K = (2048, 4096, 8192)


def time_all(out: str) -> None:
    """Each case's µs (one call after an L2 flush, median: gemm_bench's single_call_us), the decode K sweep and the
    decode variants (raw launches of the acc output, devtools/w8a8_gemm90_try.raw)."""
    import torch
    from w8a8_gemm90_try import raw  # devtools/ (this script's folder, first on sys.path)

    from dqgen.kernels.w8a8_gemm90 import W8A8Gemm90Config, choose_w8a8_gemm90
    from dqgen.run.timing import single_call_us
    from dqgen.w8a8 import matmul, quantize_activations

    rows: list[dict[str, Any]] = []

    def record(what: str, us: float, **extra: Any) -> None:
        rows.append({"what": what, "us": round(us, 2), **extra})
        print(f"{what:70s} {us:9.2f} us {extra}", flush=True)

    for case, call in case_calls(CASES):
        record(case.tag, single_call_us(call))
    k_big, n_big = BIG
    w = torch.randint(-128, 128, (n_big, k_big), dtype=torch.int8, device="cuda")
    ws = torch.rand(n_big, device="cuda")
    for k in SWEEP_K:
        wk = w[:, :k].contiguous()
        x, xs = quantize_activations(torch.randn(1, k, device="cuda").half())
        record(f"sweep: dqgen int8 M1 {k}x{n_big}", single_call_us(lambda x=x, xs=xs, wk=wk: matmul(x, xs, wk, ws)),
               weight_bytes=wk.numel())  # fmt: skip
    x = torch.randint(-128, 128, (1, k_big), dtype=torch.int8, device="cuda")
    for label, ctas, shape in DECODE_VARIANTS:
        cfg = (
            choose_w8a8_gemm90("s8", "acc", 1, n_big, SMS)
            if shape is None
            else W8A8Gemm90Config("s8", "acc", True, *shape)
        )
        y, fn, plan = raw(x, w, cfg, ctas)
        fn()
        exact = bool(torch.equal(y.double(), x.double() @ w.double().T))
        record(f"variant: {label}", single_call_us(fn), kernel=cfg.name, plan=list(plan), exact=exact)
    with open(out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "method": "single_call_us (L2 flushed, median)", "rows": rows},
                  f, indent=1)  # fmt: skip


# ---- the ncu CSV ---------------------------------------------------------------------------------------------------

#: (column, the ncu metric) of the summary table.
TABLE = (
    ("us", "gpu__time_duration.sum"),
    ("grid", "launch__grid_size"),
    ("regs", "launch__registers_per_thread"),
    ("DRAM%", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("DRAM MB", "dram__bytes_read.sum"),
    ("L2%", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("warps/sched", "smsp__warps_active.avg.per_cycle_active"),
    ("occ%", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    ("issue%", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
)
TIME_UNIT_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
BYTE_UNIT_MB = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
_STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def read_raw_csv(path: str) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """(header, units, rows) of ``ncu --csv --page raw``: its first row names the metrics, its second their units."""
    with open(path, newline="") as f:
        lines = [line for line in f if not line.startswith("==")]  # ncu's own messages, where they went to the file
    table = list(csv.reader(lines))
    header, units = table[0], table[1]
    return header, units, [dict(zip(header, r, strict=False)) for r in table[2:]]


def number(text: str) -> float:
    return float(text.replace(",", "")) if text not in ("", "n/a") else float("nan")


def match_rows(
    rows: Sequence[dict[str, str]], cases: Sequence[Any] = CASES, owns: Callable[[Any, str], bool] | None = None
) -> list[tuple[Any, dict[str, str] | None, list[str]]]:
    """(case, its kernel's row or None, the names of other kernels before it) in run_order: each case takes the next
    row whose kernel is its own (``owns``, kernel_of by default; another script's cases bring their own)."""
    owns = kernel_of if owns is None else owns
    out = []
    pos = 0
    for case in run_order(cases):
        skipped = []
        while pos < len(rows) and not owns(case, rows[pos].get("Kernel Name", "")):
            skipped.append(rows[pos].get("Kernel Name", "")[:50])
            pos += 1
        out.append((case, rows[pos] if pos < len(rows) else None, skipped))
        pos += 1
    return out


#: Columns of ncu's raw page that describe the device or the profiler, not the kernel (left out of --save).
NOT_KERNEL = ("device__attribute_", "nvlink__", "numa__", "c2clink__", "profiler__", "Process", "Host Name", "Context")


def save_rows(
    path: str,
    header: Sequence[str],
    units: Sequence[str],
    rows: Sequence[dict[str, str]],
    cases: Sequence[Any] = CASES,
    owns: Callable[[Any, str], bool] | None = None,
) -> None:
    """The raw page's rows with a ``case`` column first (match_rows; helper kernels of a torch call get
    ``helper of <case>``), the kernel's own columns only (NOT_KERNEL dropped), the units row kept."""
    keep = [i for i, h in enumerate(header) if not h.startswith(NOT_KERNEL)]
    mine = {id(row): case.tag for case, row, _ in match_rows(rows, cases, owns) if row is not None}
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["case", *(header[i] for i in keep)])
        out.writerow(["", *(units[i] for i in keep)])
        for row in rows:
            tag = mine.get(id(row), "helper kernel (a torch call's)")
            out.writerow([tag, *(row.get(header[i], "") for i in keep)])


def print_row(tag: str, row: dict[str, str], header: Sequence[str], unit: dict[str, str]) -> None:
    """One case's kernel: the TABLE figures, its busiest pipes and its top stall reasons."""
    cells = []
    for label, metric in TABLE:
        v = number(row.get(metric, ""))
        if metric == "gpu__time_duration.sum":
            v *= TIME_UNIT_US.get(unit[metric], 1.0)
        elif metric.startswith("dram__bytes"):
            v *= BYTE_UNIT_MB.get(unit[metric], 1.0)
        cells.append(f"{label} {v:.1f}")
    pipes = sorted(
        ((number(row[h]), h.split(".")[0].removeprefix("sm__")) for h in header if h.startswith("sm__")
         and "pipe" in h and h.endswith(".avg.pct_of_peak_sustained_active") and row.get(h)),
        reverse=True,
    )  # fmt: skip
    stalls = sorted(((number(row[h]), m.group(1)) for h in header if (m := _STALL.match(h)) and row.get(h)),
                    reverse=True)  # fmt: skip
    print(f"{tag}  [{row.get('Kernel Name', '')[:60]}]")
    print("   " + " | ".join(cells))
    print("   pipes: " + ", ".join(f"{n} {v:.1f}%" for v, n in pipes[:8] if v == v))
    print("   stalls (cycles an issue): " + ", ".join(f"{n} {v:.2f}" for v, n in stalls[:6] if v == v))


def table(
    path: str,
    save: str = "",
    misses: str = "",
    cases: Sequence[Any] = CASES,
    owns: Callable[[Any, str], bool] | None = None,
) -> None:
    """Per case (run_order; of ``misses`` only where given, as profiled): print_row of its kernel; ``save``:
    save_rows there. ``cases`` / ``owns``: another script's cases and kernel_of."""
    cases = [c for c in cases if not misses or c.miss in misses]
    header, units, rows = read_raw_csv(path)
    if save:
        save_rows(save, header, units, rows, cases, owns)
    unit = dict(zip(header, units, strict=True))
    for case, row, skipped in match_rows(rows, cases, owns):
        if skipped:
            print(f"   (other kernels before it: {skipped})")
        if row is None:
            print(f"{case.tag}: no kernel of its own in the CSV")
            continue
        print_row(case.tag, row, header, unit)


def subcommands(description: str) -> tuple[argparse.ArgumentParser, Any]:
    """A profiling script's parser with the subcommands every one has: sass [--out], profile [--misses] and table
    CSV [--save] [--misses]; the caller adds its own to the returned subparsers."""
    ap = argparse.ArgumentParser(description=description)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sass").add_argument("--out", default="")
    sub.add_parser("profile").add_argument("--misses", default="", help="only these misses' cases (letters)")
    r = sub.add_parser("table")
    r.add_argument("csv")
    r.add_argument("--save", default="", help="the raw rows with a case column, device columns dropped")
    r.add_argument("--misses", default="", help="the misses profile --misses ran")
    return ap, sub


def main() -> None:
    ap, sub = subcommands(__doc__.splitlines()[0])
    sub.add_parser("metrics").add_argument("query_file")
    sub.add_parser("time").add_argument("--out", default="w8a8_ncu_time.json")
    args = ap.parse_args()
    if args.cmd == "sass":
        sass_report(args.out)
    elif args.cmd == "metrics":
        with open(args.query_file) as f:
            print(",".join(ncu_metrics(f.read())))
    elif args.cmd == "profile":
        profile(args.misses)
    elif args.cmd == "time":
        time_all(args.out)
    else:
        table(args.csv, args.save, args.misses)


if __name__ == "__main__":
    main()
