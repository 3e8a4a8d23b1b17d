"""Print the GPU run's summary table: GPU tests (from pytest's junit XML) and `dqgen build` checks."""

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
    xml = out / "gpu-tests.xml"
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            status, detail = "pass", f"{float(case.get('time', 0)):.1f} s"
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    status, detail = tag, (el.get("message") or "")[:150]
            t.add_row(escape(f"test {case.get('name')}"), status, escape(detail))
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
