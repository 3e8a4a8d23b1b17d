"""The tree shows the architecture: every import inside dqgen (module level, in a function, relative or
``import dqgen.x``) follows the layer table below, no modules import each other in a cycle (imports under
``TYPE_CHECKING`` count: a cycle there is the same knot, only hidden), and no two modules of one layer define the
same public name (a reader, and an import graph tool, could not tell them apart).

The checker's own parts are tested on small fake trees and graphs here too (the old flat tree's cycles,
an upward import), so a checker that found nothing could not pass."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: What each layer may import besides itself. core <- ir <- check <- solve <- emit <- kernels <- run <- io / tools /
#: cli.
#: ``api`` is dqgen/__init__.py (the public names only); ``cli`` is cli.py and __main__.py.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "ir": frozenset({"core"}),
    # layout: the Layout (field positions, blocks, shapes) is part of the resolved spec every stage reads (issue 12)
    "check": frozenset({"core", "ir", "layout"}),
    "layout": frozenset({"core"}),
    "solve": frozenset({"core", "ir", "check", "layout"}),
    # layout: the Layout owns the tile and register permutations that the templates render (issue 12).
    # check: the pipeline (emit/pipeline.py) proves the plan it renders.
    "emit": frozenset({"core", "ir", "layout", "check", "solve"}),
    # kernels: one typed config per kernel family over the emit layer's templates and converter (rendering only)
    "kernels": frozenset({"core", "ir", "layout", "check", "solve", "emit"}),
    "run": frozenset({"core", "ir", "check", "layout", "solve", "emit", "kernels"}),
    "io": frozenset({"core", "layout", "check", "run"}),
    # nn: the end-to-end benches (--model-linears, --model) time QuantLinear / W8A8Linear / quantize_model as a user
    # runs them
    "tools": frozenset({"core", "ir", "check", "layout", "solve", "emit", "kernels", "run", "nn"}),
    "gru": frozenset({"core", "emit", "kernels", "run"}),
    # nn: dqgen.quantize (numpy, on the Layout's packing) and QuantLinear (a Kernel's matmul)
    # w8a8: W8A8Linear (the W8A8 GEMM and the activation quantization)
    # io: from_pretrained / replace_linears read checkpoints through io's spec inference
    "nn": frozenset({"core", "layout", "emit", "run", "w8a8", "io"}),
    "w8a8": frozenset({"core", "layout", "emit", "kernels", "run"}),
    "api": frozenset({"core", "layout", "emit", "run", "nn"}),  # dqgen.compile: the pipeline, a Kernel
    "cli": frozenset(
        {"api", "core", "ir", "check", "layout", "solve", "emit", "kernels", "run", "io", "tools", "gru", "nn", "w8a8"}
    ),
}
#: Modules held to less than their layer: the independent reference shares nothing with the solver and the
#: prover but the spec, so a bug in a shared part cannot make both agree on a wrong answer.
#: It takes tensor shapes from the Layout (issue 12: one owner of shapes) but decodes the words' bits itself.
ALLOWED_MODULE: dict[str, frozenset[str]] = {"dqgen.check.reference": frozenset({"core", "layout"})}


@dataclass(frozen=True)
class Edge:
    src: str  # importing module, dotted
    dst: str  # imported module or package, dotted
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``: never executed, so no cycle at run time


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted name of every module under root/package (a package's __init__ is the package itself)."""
    names = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node, at any depth (function bodies included), with whether it is type-only."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _imports(node, type_only)


def import_edges(root: Path, package: str) -> list[Edge]:
    """Edges from each module to the modules of its own package that it imports. ``from .a import b`` goes
    to module a.b where that is a module, else to a (b is a name defined in a)."""
    names = module_names(root, package)
    edges = []
    for name, path in names.items():
        is_init = path.name == "__init__.py"
        here = name.split(".") if is_init else name.split(".")[:-1]  # the package the module sits in
        for node, type_only in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = here[: len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                else:
                    base = (node.module or "").split(".")
                mod = ".".join(base)
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in names else mod for a in node.names]
            for t in targets:
                if t == package or t.startswith(package + "."):
                    while t not in names and "." in t:  # `import dqgen.a.b` of a name: its nearest module
                        t = t.rsplit(".", 1)[0]
                    if t != name:
                        edges.append(Edge(name, t, node.lineno, type_only))
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted; a module that
    imports itself counts too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    if parts[1] in ("cli", "__main__"):
        return "cli"
    return parts[1]


def layering_violations(edges: list[Edge]) -> list[str]:
    bad = []
    for e in edges:
        src, dst = layer_of(e.src), layer_of(e.dst)
        allowed = ALLOWED_MODULE.get(e.src, ALLOWED.get(src, frozenset()))
        if (dst != src and dst not in allowed) or (e.src in ALLOWED_MODULE and dst == src):
            bad.append(f"{e.src}:{e.line} imports {e.dst} ({src} may import {sorted(allowed) or 'nothing of dqgen'})")
    return bad


def runtime_graph(edges: list[Edge]) -> dict[str, set[str]]:
    """The imports that run (TYPE_CHECKING ones left out)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.type_only:
            graph.setdefault(e.src, set()).add(e.dst)
    return graph


def import_graph(edges: list[Edge]) -> dict[str, set[str]]:
    """Every import, TYPE_CHECKING ones included."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
    return graph


def public_definitions(tree: ast.Module) -> set[str]:
    """The public names a module defines at module level: functions, classes and assigned names (imports are not
    definitions: a name imported from its one home is that home's)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def shared_public_names(root: Path, package: str, layers: set[str] | None = None) -> dict[tuple[str, str], list[str]]:
    """(layer, name) -> the modules of that layer defining it, for every public name two or more modules of one
    layer define (``layers``: only those)."""
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in module_names(root, package).items():
        layer = layer_of(module)
        if layers is None or layer in layers:
            for name in public_definitions(ast.parse(path.read_text(), str(path))):
                where[(layer, name)].append(module)
    return {k: sorted(v) for k, v in sorted(where.items()) if len(v) > 1}


# ----------------------------------------------------------------------------- the real tree

EDGES = import_edges(ROOT, "dqgen")


def test_the_real_tree_is_read() -> None:
    """A parser that missed imports would pass everything: the known edges of each kind are there."""
    seen = {(e.src, e.dst, e.type_only) for e in EDGES}
    assert ("dqgen.run.runtime", "dqgen.emit.pipeline", False) in seen  # module level, relative, two dots
    assert ("dqgen.run.runtime", "dqgen.run.torch_op", False) in seen  # in a function: `from . import torch_op`
    assert ("dqgen", "dqgen.run.runtime", True) in seen  # under TYPE_CHECKING (the Kernel annotation)
    assert ("dqgen.check.reference", "dqgen.core.spec", False) in seen  # absolute `from dqgen.core.spec import`
    assert ("dqgen", "dqgen.run.runtime", False) in seen  # __init__'s lazy `from .run import runtime`
    assert len(EDGES) > 100


def test_every_module_is_in_a_layer_of_the_table() -> None:
    layers = {layer_of(m) for m in module_names(ROOT, "dqgen")}
    assert layers <= set(ALLOWED), f"no row in ALLOWED for {sorted(layers - set(ALLOWED))}"
    # every subpackage says in its docstring what lives there and what it may import
    for pkg in sorted((ROOT / "dqgen").glob("*/__init__.py")):
        assert ast.get_docstring(ast.parse(pkg.read_text())), pkg


def test_no_import_cycles() -> None:
    """Not even through TYPE_CHECKING imports: a module that needs another's types only for its annotations
    still depends on it (the run/ knot of issue 22 hid behind them)."""
    assert cycles(import_graph(EDGES)) == []


def test_nothing_in_run_imports_the_kernel_facade() -> None:
    """dqgen.run.runtime.Kernel is the top of run/: the modules below take (spec, artifact, operands) and never
    import it, not even for a type."""
    up = sorted({e.src for e in EDGES if e.dst == "dqgen.run.runtime" and layer_of(e.src) == "run"})
    assert up == []


#: Layers whose modules still define names of the same meaning side by side, one module per kernel family (the
#: kernel-family layer, dqgen/kernels/, gives each family one typed config; until their modules move there):
#: emit (the GEMV's and the GEMM's ENTRIES / entry_name), gru (the cell's and the persistent kernel's BLOCK,
#: KERNEL_NAME, render), w8a8 (the GEMM's and the activation quantizer's choose / loaded / render, the two op
#: modules' check_inputs, two benches), tools (the benches' DEFAULT_SHAPES and markdown writers).
SHARED_NAMES_ALLOWED_IN = frozenset({"emit", "gru", "w8a8", "tools"})


def test_no_two_modules_of_a_layer_define_one_public_name() -> None:
    held = set(ALLOWED) - SHARED_NAMES_ALLOWED_IN
    assert {"run", "core", "layout", "check"} <= held
    assert shared_public_names(ROOT, "dqgen", held) == {}


def test_every_import_follows_the_layer_table() -> None:
    assert layering_violations(EDGES) == []


def test_run_never_imports_tools_io_or_the_cli() -> None:
    up = [e for e in EDGES if layer_of(e.src) == "run" and layer_of(e.dst) in ("tools", "io", "cli", "api")]
    assert up == []


# ----------------------------------------------------------------------------- the checker on fake trees


def test_cycles_of_the_old_flat_tree_are_found() -> None:
    old = {  # the imports that made cycles before the tree was split (function-level ones included)
        "solver": {"solver_float", "formats", "prove"},
        "solver_float": {"solver", "formats"},
        "bench": {"runtime", "tune", "timing", "bench_triton"},
        "bench_triton": {"bench"},
        "tune": {"bench", "runtime", "timing"},
        "runtime": {"tune", "torch_op", "solver"},
        "torch_op": {"runtime"},
        "prove": {"formats"},
        "timing": set(),
    }
    assert cycles(old) == [["bench", "bench_triton", "runtime", "torch_op", "tune"], ["solver", "solver_float"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "dqgen" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_function_level_and_absolute_imports_make_edges_and_cycles(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "core/__init__.py": "",
            "core/spec.py": "def f():\n    from ..run import runtime\n",
            "run/__init__.py": "",
            "run/runtime.py": "import dqgen.core.spec\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from ..tools.bench import Row\n",
            "tools/__init__.py": "",
            "tools/bench.py": "from dqgen.run.runtime import Kernel\n",
        },
    )
    edges = import_edges(root, "dqgen")
    assert {(e.src, e.dst, e.type_only) for e in edges} == {
        ("dqgen.core.spec", "dqgen.run.runtime", False),
        ("dqgen.run.runtime", "dqgen.core.spec", False),
        ("dqgen.run.runtime", "dqgen.tools.bench", True),
        ("dqgen.tools.bench", "dqgen.run.runtime", False),
    }
    assert cycles(runtime_graph(edges)) == [["dqgen.core.spec", "dqgen.run.runtime"]]
    # with the type-only import, tools.bench and run.runtime import each other: a cycle too
    assert cycles(import_graph(edges)) == [["dqgen.core.spec", "dqgen.run.runtime", "dqgen.tools.bench"]]
    # a type-only import is no cycle at run time, but it still has to follow the layers
    assert [v.split(" ")[0] for v in layering_violations(edges)] == ["dqgen.core.spec:2", "dqgen.run.runtime:4"]


@pytest.mark.parametrize(
    ("src", "text", "ok"),
    [
        ("check/reference.py", "from dqgen.core.spec import Spec\n", True),
        ("check/reference.py", "from ..ir.isa import emulate\n", False),  # held to core alone
        ("check/reference.py", "from .prove import prove\n", False),  # not even its own layer
        ("check/prove.py", "from ..ir.isa import emulate\n", True),
        ("ir/plan.py", "from ..solve.solver import solve\n", False),
        ("solve/solver.py", "from ..check.prove import quick_check\n", True),
        ("emit/render.py", "from ..run import device\n", False),
        ("gru/kernel.py", "from ..emit.render import TEMPLATES\n", True),
        ("cli.py", "from .tools.build import build_spec\n", True),
    ],
)
def test_an_import_against_the_table_fails(tmp_path: Path, src: str, text: str, ok: bool) -> None:
    files = {"__init__.py": "", src: text}
    for pkg in ("core", "ir", "check", "solve", "emit", "run", "tools", "gru"):
        files.setdefault(f"{pkg}/__init__.py", "")
    for mod in ("core/spec.py", "ir/isa.py", "check/prove.py", "solve/solver.py", "run/device.py"):
        files.setdefault(mod, "")
    files.setdefault("emit/render.py", "")
    files.setdefault("tools/build.py", "")
    edges = import_edges(_tree(tmp_path, files), "dqgen")
    assert len(edges) == 1
    assert (layering_violations(edges) == []) is ok


def test_shared_public_names_are_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "run/__init__.py": "",
            "run/matmul.py": "def pack(): ...\ndef _function(): ...\nTOKENS = 16\nfrom .gemm import run\n",
            "run/gemm.py": "def pack(): ...\ndef _function(): ...\nclass run: ...\nTOKENS: int = 8\n",
            "emit/__init__.py": "",
            "emit/gemm.py": "def pack(): ...\n",  # another layer: no clash
        },
    )
    # private names (_function) and imports (matmul's run) are no definitions
    assert shared_public_names(root, "dqgen") == {
        ("run", "TOKENS"): ["dqgen.run.gemm", "dqgen.run.matmul"],
        ("run", "pack"): ["dqgen.run.gemm", "dqgen.run.matmul"],
    }
    assert shared_public_names(root, "dqgen", {"emit"}) == {}
