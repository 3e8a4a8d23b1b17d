"""Print dqgen's layer graph: which layer imports which (with the number of import statements), the module graph
inside one layer, and every import cycle counting type-only (TYPE_CHECKING) imports too. It reads the code with
tests/test_layering.py's own parser, so what it prints is what that test holds.

Run from the repo root: ``python devtools/layer_graph.py [--inside run]``."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_layering import cycles, import_edges, layer_of  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inside", default="run", help="the layer whose module graph to print (default: run)")
    args = ap.parse_args()
    edges = import_edges(ROOT, "dqgen")
    layers = Counter((layer_of(e.src), layer_of(e.dst)) for e in edges if layer_of(e.src) != layer_of(e.dst))
    print("## layers: importer -> imported (import statements)")
    for src in sorted({s for s, _ in layers}):
        print(f"{src:6} -> " + ", ".join(f"{d} ({n})" for (s, d), n in sorted(layers.items()) if s == src))
    print(f"\n## modules inside {args.inside}/ (t: type-only)")
    inside = sorted({(e.src, e.dst, e.type_only) for e in edges if layer_of(e.src) == layer_of(e.dst) == args.inside})
    short = {m: m.split(".", 2)[-1] for e in inside for m in e[:2]}
    for src in sorted({e[0] for e in inside}):
        outs = sorted({f"{short[d]}{' (t)' if t else ''}" for s, d, t in inside if s == src})
        print(f"{short[src]:12} -> {', '.join(outs)}")
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
    found = cycles(graph)
    print("\n## cycles, type-only imports counted: " + ("none" if not found else ""))
    for c in found:
        print("  " + " <-> ".join(c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
