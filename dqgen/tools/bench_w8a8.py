"""The "w8a8" section of docs/performance.md, written from the two JSON records of the W8A8 benches alone
(``docs/bench/w8a8.json``: the GEMM, dqgen.w8a8.gemm_bench; ``docs/bench/w8a8_act.json``: the activation quantizer,
dqgen.w8a8.bench), with issue 15's speed targets and the part of issue 24's W4A8 target this record holds (W4A8 against
dqgen's int8 W8A8 at M >= 128) each stated met or missed with its figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import read_json_record, write_section

#: The GEMM rows' impl names, as dqgen.w8a8.gemm_bench records them.
DQ_INT8 = "dqgen int8"
DQ_FP8 = "dqgen fp8"
INT_MM = "torch._int_mm"
INT_MM_SCALED = "torch._int_mm + scaling"
DENSE = "cuBLAS fp16 (dense W)"
SCALED_MM = "torch._scaled_mm fp8 rowwise"
DQ_W4A8 = "dqgen w4a8"
#: Column order of the GEMM table (an impl a run lacks is left out).
TABLE_IMPLS = (DQ_INT8, "dqgen quantize + int8", INT_MM, INT_MM_SCALED, DQ_FP8, SCALED_MM, DQ_W4A8, DENSE)
#: The quantizer fused into the op that makes x (issue 24 item 2): per producer, the fp16 op a float model runs
#: anyway, the fused op alone, and the fused op then the int8 GEMM (rows of dqgen.w8a8.gemm_bench).
PRODUCERS: tuple[tuple[str, str, str, str], ...] = (
    ("RMSNorm", "torch rms_norm (fp16)", "dqgen rmsnorm_quantize", "dqgen rmsnorm_quantize + int8"),
    ("SiLU-and-mul", "torch silu * mul (fp16)", "dqgen silu_mul_quantize", "dqgen silu_mul_quantize + int8"),
)
#: Bytes per output element of each fp16 producer at its floor: RMSNorm reads x and writes y (2 + 2), SiLU-and-mul
#: reads gate and up and writes y (4 + 2).
PRODUCER_FP16_BYTES = {"RMSNorm": 4, "SiLU-and-mul": 6}
#: Issue 24 item 2: quantize + GEMM within this much of the GEMM alone, at M >= LARGE_M.
QUANT_OVERHEAD_PCT = 5.0
#: Issue 24 item 3: W4A8 faster than int8 W8A8 from this M on (and than the W4A16 GEMM: `dqgen bench --matmul`).
W4A8_LARGE_M = 128
#: Item 5's regimes: weight-bandwidth bound up to this M, compute bound from LARGE_M on.
SMALL_M = 64
LARGE_M = 256
#: Item 5: the activation quantizer's bar, for M x K at least ACT_MIN_ELEMS.
ACT_PCT = 85.0
ACT_MIN_ELEMS = 4096 * 4096


def load(path: Path) -> dict[str, Any]:
    """One bench record; ValueError (one line naming the file) when it is missing or not such a record."""
    doc = read_json_record(path, "w8a8")
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list) or "copy_GBps" not in doc:
        raise ValueError(f"{path}: expected a JSON object with copy_GBps and a list of rows")
    return doc


def _at(rows: list[dict], impl: str, m: int, k: int, n: int) -> dict | None:
    return next((r for r in rows if (r["impl"], r["M"], r["K"], r["N"]) == (impl, m, k, n)), None)


def _from_m(rows: list[dict], impl: str, m: int) -> list[dict]:
    """``impl``'s rows from ``m`` tokens on, by shape, then M."""
    return sorted((r for r in rows if r["impl"] == impl and r["M"] >= m), key=lambda r: (r["K"], r["N"], r["M"]))


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def gemm_targets(doc: dict[str, Any]) -> list[str]:
    """Item 5's GEMM targets, per shape: M <= 64 at >= 80% of the floor and faster than _int_mm + scaling where
    that runs (M > 16); M >= 256 at >= 0.8x _int_mm's speed and faster than cuBLAS fp16 on the dense weight."""
    rows = doc["rows"]
    lines: list[str] = []
    shapes = sorted({(r["K"], r["N"]) for r in rows if r["impl"] == DQ_INT8})
    for k, n in shapes:
        small = [r for r in rows if r["impl"] == DQ_INT8 and (r["K"], r["N"]) == (k, n) and r["M"] <= SMALL_M]
        if small:
            worst = min(small, key=lambda r: r["pct_floor"])
            lines.append(
                f"- {k}x{n}, M <= {SMALL_M}: >= 80% of the floor: {_met(worst['pct_floor'] >= 80.0)} "
                f"(lowest {worst['pct_floor']:.1f}% at M = {worst['M']}, {worst['us']:.1f} us)"
            )
            losses = [
                (r, o)
                for r in small
                if (o := _at(rows, INT_MM_SCALED, r["M"], k, n)) is not None and r["us"] >= o["us"]
            ]
            compared = [r for r in small if _at(rows, INT_MM_SCALED, r["M"], k, n) is not None]
            if compared:
                detail = ", ".join(f"M = {r['M']}: {r['us']:.1f} vs {o['us']:.1f} us" for r, o in losses)
                lines.append(
                    f"- {k}x{n}, M <= {SMALL_M}: faster than _int_mm + scaling: {_met(not losses)}"
                    + (f" ({detail})" if losses else f" (M = {', '.join(str(r['M']) for r in compared)})")
                )
        for r in (r for r in rows if r["impl"] == DQ_INT8 and (r["K"], r["N"]) == (k, n) and r["M"] >= LARGE_M):
            mm, dense = _at(rows, INT_MM, r["M"], k, n), _at(rows, DENSE, r["M"], k, n)
            if mm is not None:
                speed = mm["us"] / r["us"]
                lines.append(
                    f"- {k}x{n}, M = {r['M']}: >= 0.8x _int_mm's speed: {_met(speed >= 0.8)} "
                    f"({speed:.2f}x: {r['us']:.1f} vs {mm['us']:.1f} us)"
                )
            if dense is not None:
                lines.append(
                    f"- {k}x{n}, M = {r['M']}: faster than cuBLAS fp16 dense: {_met(r['us'] < dense['us'])} "
                    f"({r['us']:.1f} vs {dense['us']:.1f} us)"
                )
    return lines


def w4a8_targets(doc: dict[str, Any]) -> list[str]:
    """Issue 24 item 3, the part in this record: W4A8 faster than dqgen's int8 W8A8 at M >= 128, per shape and M
    (the W4A16 comparisons, M >= 128 and M <= 16, are against `dqgen bench --matmul`'s record)."""
    rows = doc["rows"]
    lines = []
    for r in _from_m(rows, DQ_W4A8, W4A8_LARGE_M):
        int8 = _at(rows, DQ_INT8, r["M"], r["K"], r["N"])
        if int8 is not None:
            lines.append(
                f"- {r['K']}x{r['N']}, M = {r['M']}: W4A8 faster than dqgen int8: {_met(r['us'] < int8['us'])} "
                f"({r['us']:.1f} vs {int8['us']:.1f} us)"
            )
    return lines


def producer_targets(doc: dict[str, Any]) -> list[str]:
    """Issue 24 item 2 at M >= LARGE_M: what quantizing adds to the GEMM, separate (quantize_activations before it)
    and fused (the producer's fused op before it, less the fp16 producer a float model runs anyway), against
    QUANT_OVERHEAD_PCT of the GEMM alone."""
    rows = doc["rows"]
    lines: list[str] = []
    for r in _from_m(rows, DQ_INT8, LARGE_M):
        m, k, n, gemm = r["M"], r["K"], r["N"], r["us"]
        if (sep := _at(rows, "dqgen quantize + int8", m, k, n)) is not None:
            pct = 100 * (sep["us"] - gemm) / gemm
            lines.append(
                f"- {k}x{n}, M = {m}, separate quantizer: within {QUANT_OVERHEAD_PCT:.0f}% of the GEMM: "
                f"{_met(pct <= QUANT_OVERHEAD_PCT)} ({pct:+.1f}%: {sep['us']:.1f} vs {gemm:.1f} us)"
            )
        for name, fp16_impl, _, fused_impl in PRODUCERS:
            fp16, fused = _at(rows, fp16_impl, m, k, n), _at(rows, fused_impl, m, k, n)
            if fp16 is None or fused is None:
                continue
            pct = 100 * (fused["us"] - gemm - fp16["us"]) / gemm
            floor_us = m * k * PRODUCER_FP16_BYTES[name] / (doc["copy_GBps"] * 1e3)
            strict = 100 * (fused["us"] - gemm - floor_us) / gemm
            lines.append(
                f"- {k}x{n}, M = {m}, fused into the {name}: within {QUANT_OVERHEAD_PCT:.0f}% of the GEMM: "
                f"{_met(pct <= QUANT_OVERHEAD_PCT)} ({pct:+.1f}%: {fused['us']:.1f} us against {gemm:.1f} for the "
                f"GEMM plus {fp16['us']:.1f} for torch's fp16 {name}; {strict:+.1f}% against an fp16 {name} at its "
                f"byte floor, {floor_us:.1f} us)"
            )
    return lines


def act_targets(doc: dict[str, Any]) -> list[str]:
    """Item 5's activation-quantizer bar: the default call (impl "dqgen") at >= 85% of copy for M x K >= 4096^2."""
    lines = []
    for r in doc["rows"]:
        if r["impl"] == "dqgen" and r["M"] * r["K"] >= ACT_MIN_ELEMS:
            lines.append(
                f"- quantize_activations {r['M']}x{r['K']}: >= {ACT_PCT:.0f}% of copy: "
                f"{_met(r['pct_copy'] >= ACT_PCT)} ({r['pct_copy']:.1f}%, {r['us']:.1f} us)"
            )
    return lines


def markdown_section(gemm: dict[str, Any], act: dict[str, Any] | None) -> str:
    """The section's markdown: the GEMM table (µs, % of the int8-weight floor), the quantizer table, targets."""
    rows = gemm["rows"]
    impls = [i for i in TABLE_IMPLS if any(r["impl"] == i for r in rows)]
    out = [
        "## W8A8: SmoothQuant int8 and fp8 GEMMs with the scales in the epilogue (issue 15), and W4A8 (issue 24)",
        "",
        f"Written by `dqgen bench --w8a8` from docs/bench/w8a8.json; GPU: {gemm.get('device', '?')}; "
        f"copy {gemm['copy_GBps']:.0f} GB/s; {gemm.get('method', '')}.",
        f"Floor: {gemm.get('floor', 'int8 weights read once at the copy bandwidth')}. Cells: µs (% of the floor); "
        "n/a: torch refuses the shape (`_int_mm` needs M > 16), or a row not taken (`dqgen w4a8`: sm_90 only, at "
        f"M <= 16 and M >= {W4A8_LARGE_M}; int4 weights, group 128 with zero points, times int8 tokens, reading half "
        "the floor's bytes). `exact`: " + str(gemm.get("exact", "")),
        "",
        "| K x N | M | " + " | ".join(impls) + " | dqgen exact |",
        "|---|---|" + "---|" * len(impls) + "---|",
    ]
    for k, n in sorted({(r["K"], r["N"]) for r in rows}):
        for m in sorted({r["M"] for r in rows if (r["K"], r["N"]) == (k, n)}):
            cells = []
            for impl in impls:
                r = _at(rows, impl, m, k, n)
                cells.append("n/a" if r is None else f"{r['us']:.1f} ({r['pct_floor']:.0f}%)")
            exact = [r["exact"] for i in (DQ_INT8, DQ_FP8, DQ_W4A8) if (r := _at(rows, i, m, k, n)) is not None]
            verdict = "n/a" if not exact else "yes" if all(exact) else "NO"
            out.append(f"| {k}x{n} | {m} | " + " | ".join(cells) + f" | {verdict} |")
    if act is not None:
        out += [
            "",
            f"Activation quantization (`dqgen.w8a8.quantize_activations`, docs/bench/w8a8_act.json; copy "
            f"{act['copy_GBps']:.0f} GB/s; bytes: {act.get('bytes', '')}):",
            "",
            "| M x K | implementation | µs | % of copy | exact |",
            "|---|---|---|---|---|",
        ]
        for r in act["rows"]:
            out.append(
                f"| {r['M']}x{r['K']} | {r['impl']} | {r['us']:.1f} | {r['pct_copy']:.1f} | "
                f"{'yes' if r['exact'] else 'NO'} |"
            )
    producer_impls = [i for p in PRODUCERS for i in p[1:] if any(r["impl"] == i for r in rows)]
    if producer_impls:
        out += [
            "",
            "The quantizer fused into the op that makes x (issue 24; `dqgen.w8a8.rmsnorm_quantize`, "
            "`silu_mul_quantize`; the SiLU-and-mul's input is [M, 2K]), beside the fp16 op a float model runs "
            "instead, µs:",
            "",
            "| K x N | M | dqgen int8 | " + " | ".join(producer_impls) + " |",
            "|---|---|---|" + "---|" * len(producer_impls),
        ]
        for k, n in sorted({(r["K"], r["N"]) for r in rows if r["impl"] in producer_impls}):
            for m in sorted({r["M"] for r in rows if (r["K"], r["N"]) == (k, n) and r["impl"] in producer_impls}):
                found = [_at(rows, i, m, k, n) for i in (DQ_INT8, *producer_impls)]
                out.append(
                    f"| {k}x{n} | {m} | " + " | ".join("n/a" if c is None else f"{c['us']:.1f}" for c in found) + " |"
                )
    out += ["", "Targets (issue 15 item 5):", ""]
    out += gemm_targets(gemm) + (act_targets(act) if act is not None else [])
    quant = producer_targets(gemm)
    if quant:
        out += ["", "Quantize + GEMM against the GEMM alone (issue 24 item 2, M >= 256):", "", *quant]
    w4a8 = w4a8_targets(gemm)
    if w4a8:
        out += ["", "W4A8 against int8 W8A8 (issue 24 item 3; against W4A16: the matmul section):", "", *w4a8]
    return "\n".join(out)


def write(docs: Path, gemm_path: Path, act_path: Path | None) -> None:
    """Rewrite the "w8a8" section of ``docs`` from the two records (the quantizer's may be absent)."""
    gemm = load(gemm_path)
    act = load(act_path) if act_path is not None and Path(act_path).is_file() else None
    write_section(docs, "w8a8", markdown_section(gemm, act))
