"""Print the GPU run's summary table: GPU tests (from pytest's junit XML files: counts and failures)
and `dqgen build` checks."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def main(out: Path) -> None:
    console = Console(width=160)
    t = Table(title="dqgen GPU run")
    t.add_column("what")
    t.add_column("result")
    t.add_column("detail", overflow="fold")
    for xml in sorted(out.glob("*.xml")):  # one per pytest step: a count line, and a row per failure
        counts: dict[str, int] = {}
        total = 0.0
        for case in ET.parse(xml).getroot().iter("testcase"):
            status, detail = "pass", ""
            total += float(case.get("time", 0))
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    status, detail = tag, (el.get("message") or "")[:150]
            counts[status] = counts.get(status, 0) + 1
            if status in ("failure", "error"):
                t.add_row(escape(f"test {case.get('name')}"), status, escape(detail))
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        t.add_row(
            escape(f"tests {xml.stem}"),
            "ok" if set(counts) <= {"pass", "skipped"} else "FAILED",
            f"{summary}; {total:.0f} s in tests",
        )
    builds = out / "builds.json"
    if builds.exists():
        for r in json.loads(builds.read_text()):
            gpu = r["steps"].get("gpu", {})
            t.add_row(
                f"build {r['spec']}",
                "ok" if r["ok"] else "FAILED",
                f"{r['ops_per_8']['convert']} ops/8; {gpu.get('line', '')}",
            )
    bench = out / "bench.txt"
    console.print(t)
    if bench.exists():
        console.print(bench.read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
