"""SASS instruction counts of a spec's conversion, from NVRTC's cubin and nvdisasm (runs on the CPU).

Two probe kernels load the same inputs and store the same number of registers: one runs the
converter, the other stores its inputs unchanged. The conversion's cost is the difference of
their instruction counts, MOVs of constants excluded (in a GEMM main loop they are hoisted out).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from ..core.spec import Spec, load_spec
from ..ir.magic import fmt_num
from .nvrtc import compile_source
from .pipeline import compile_artifact

#: Instructions that convert integers to floats or between float widths: what the magic avoids.
SLOW_CONVERSIONS = ("I2F", "I2FP", "F2F", "F2FP", "I2I")
_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")


def nvdisasm_path() -> str:
    """nvdisasm from PATH, else from the nvidia-cuda-nvdisasm wheel (nvidia/cu13/bin) on sys.path."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    for root in sys.path:
        cand = Path(root or ".") / "nvidia" / "cu13" / "bin" / "nvdisasm"
        if cand.is_file():
            return str(cand)
    raise RuntimeError("nvdisasm not found: pip install 'nvidia-cuda-nvdisasm>=13.2,<14'")


def _is_constant_move(op: str, operands: str) -> bool:
    """MOV/IMAD.MOV, HFMA2.MMA Rd, -RZ, RZ, imm, imm and IMAD.U32 Rd, RZ, RZ, imm: ptxas's ways to put a
    constant (a magic number, a lookup table) in a register."""
    return (
        op.startswith(("MOV", "IMAD.MOV", "UMOV"))
        or (op.startswith("HFMA2") and "-RZ, RZ" in operands)
        or (op.startswith("IMAD.U32") and "RZ, RZ" in operands)
    )


def disassemble(cubin: bytes) -> list[str]:
    """Opcodes of the cubin's code, constant materializations reported as "const"."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([nvdisasm_path(), "-c", f.name], check=True, capture_output=True, text=True).stdout
    return ["const" if _is_constant_move(m.group(1), m.group(2)) else m.group(1) for m in _LINE.finditer(text)]


def _probe(spec: Spec, convert: bool) -> str:
    artifact = compile_artifact(spec)
    plan = artifact.plan
    n = spec.per_word // 2
    words = plan.words
    has_z = spec.zeros.packed
    name = spec.name
    args = "".join(f"{w}, " for w in words)
    # Both probes load the words and the zero registers and store n + words words, so only the conversion differs.
    body = (
        f"unsigned d[{n}]; dqgen::{name}::convert({args}{'zr, ' if has_z else ''}d);"
        if convert
        else f"unsigned d[{n}]; for (int i = 0; i < {n}; ++i) d[i] = zr[i];"
    )
    loads = "\n    ".join(f"const unsigned {w} = in[{k}];" for k, w in enumerate(words))
    keep = "\n    ".join(f"out[{n + k}] = {w};" for k, w in enumerate(words))
    return (
        artifact.header
        + f"""
extern "C" __global__ void probe(const unsigned* __restrict__ in, unsigned* __restrict__ out) {{
    {loads}
    unsigned zr[{n}];
    for (int i = 0; i < {n}; ++i) zr[i] = in[{len(words)} + i];
    (void)zr;
    {body}
    for (int i = 0; i < {n}; ++i) out[i] = d[i];
    {keep}
}}
"""
    )


@dataclass
class SassCount:
    spec: str
    arch: str
    per8: Fraction
    ops: Counter
    slow: list[str]

    def line(self) -> str:
        hist = ", ".join(f"{k} {v}" for k, v in sorted(self.ops.items()))
        return f"{self.arch}: {fmt_num(self.per8)} SASS instructions per 8 outputs ({hist})"


def _count(ops: list[str]) -> Counter:
    return Counter(op for op in ops if op not in ("const", "NOP"))


def sass_count(spec: Spec, arch: str) -> SassCount:
    conv = disassemble(
        compile_source(_probe(spec, True), arch=arch, want="cubin", name=f"{spec.name}_probe.cu").cubin or b""
    )
    base = disassemble(
        compile_source(_probe(spec, False), arch=arch, want="cubin", name=f"{spec.name}_base.cu").cubin or b""
    )
    diff = _count(conv)
    diff.subtract(_count(base))
    ops = Counter({k: v for k, v in diff.items() if v > 0})
    per8 = Fraction(sum(ops.values()) * 8, spec.per_word)
    # conversion instructions are only "slow" where the plan did not ask for a hardware cvt itself
    wants_cvt = any(op.opcode.name.startswith("CVT") for op in compile_artifact(spec).plan.stage_ops("convert"))
    slow = [] if wants_cvt else sorted({op for op in conv if op.split(".")[0] in SLOW_CONVERSIONS})
    return SassCount(spec.name, arch, per8, ops, slow)


def _cell(spec: Spec, arch: str) -> str:
    if int(arch[3:]) < spec.sm:  # a plan for sm_89+ (fp8 cvt) has no SASS on older archs
        return f"n/a (needs {spec.arch})"
    c = sass_count(spec, arch)
    return fmt_num(c.per8) + (" (slow cvt!)" if c.slow else "")


def sass_report(paths: list[str], archs: tuple[str, ...] = ("sm_80", "sm_90")) -> str:
    lines = [
        "## SASS instructions of the conversion per 8 outputs (nvdisasm; constant MOVs excluded)",
        "",
        "| spec | " + " | ".join(archs) + " |",
        "|---|" + "---|" * len(archs),
    ]
    for p in paths:
        spec = load_spec(p)
        lines.append(f"| {spec.name} | " + " | ".join(_cell(spec, a) for a in archs) + " |")
    return "\n".join(lines)
