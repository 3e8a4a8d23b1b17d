"""The shared template blocks (dqgen/emit/templates/blocks/): every hardware instruction the kernel families share
(cp.async, ldmatrix, mma.sync, the 16-bit <-> fp32 cvts, the cache-hinted global accesses) is spelled once, in a
block; the family templates compose the blocks instead of restating them; every rendered kernel holds what the
blocks emit, and holds each shared instruction's helper once; the wheel ships the blocks.

The rendered sources are those devtools/ptx_hashes.py hashes (every entry point of every family), so this file
follows the family layer's render functions wherever they move.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import jinja2
import pytest

import dqgen
from dqgen.emit.render import TEMPLATES, template_env

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = TEMPLATES / "blocks"
BLOCK_NAMES = ("memory", "mma", "convert", "pipeline", "splitk", "epilogue", "tma", "pdl")
#: Blocks one family composes so far, each with why it is a block all the same.
SINGLE_FAMILY = {
    "tma": "the Hopper GEMM's (gemm90) TMA / mbarrier / setmaxnreg helpers, which the Hopper W8A8 GEMM (issue 24) "
    "takes too",
}
#: Blocks the sm_80 tensor-core families (gemm, w8a8_gemm) do not compose, each with why.
NOT_IN_EVERY_TENSOR_CORE_FAMILY = {
    **SINGLE_FAMILY,
    "pdl": "programmatic dependent launch: the families launched as dependents (the GEMV, the Hopper GEMM) wait",
}

# The instructions the families share: each lives in exactly one block (the PTX mnemonic prefix as the inline asm
# spells it).
SHARED_INSTRUCTIONS = {
    "cp.async": "memory",  # the Ampere copies (cp.async.cg ...), not Hopper's cp.async.bulk (below)
    "cp.async.bulk": "tma",
    "mbarrier.": "tma",
    "griddepcontrol.": "pdl",
    "setmaxnreg": "tma",
    "wgmma.": "mma",
    "ldmatrix": "memory",
    "st.shared": "memory",
    "st.global.cs": "memory",
    "ld.global.nc": "memory",
    "prefetch.global": "memory",
    "mma.sync": "mma",
    "cvt.f32.f16": "convert",
    "cvt.rn.": "convert",  # fp32 -> f16 / bf16 (the type chosen by the template), e4m3 pairs -> f16 pairs
}

# One inline-asm statement: asm [volatile] ( "string" "string" ... — the concatenated string is its instruction text.
_ASM = re.compile(r'\basm\s*(?:volatile\s*)?\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
_USES = re.compile(r'{%-?\s*(?:import|include|from)\s+"blocks/(\w+)\.cuh\.j2"')


def spells(instr: str, text: str) -> bool:
    """Whether asm text holds the instruction (cp.async: the Ampere forms only, not cp.async.bulk)."""
    if instr == "cp.async":
        return re.search(r"cp\.async\.(?!bulk)", text) is not None
    return instr in text


def asm_texts(text: str) -> list[str]:
    """The instruction text of every inline asm statement in text (string literals concatenated)."""
    return ["".join(_LITERAL.findall(m.group(1))) for m in _ASM.finditer(text)]


def family_templates() -> list[Path]:
    """Every template but the blocks (the families' own files and the parts they include, e.g. gemv/)."""
    return sorted(p for p in TEMPLATES.rglob("*.j2") if BLOCKS not in p.parents)


def test_the_blocks_exist():
    assert sorted(p.name for p in BLOCKS.glob("*.j2")) == sorted(f"{b}.cuh.j2" for b in BLOCK_NAMES)


@pytest.mark.parametrize("template", family_templates(), ids=lambda p: p.relative_to(TEMPLATES).as_posix())
def test_no_family_template_spells_a_shared_instruction(template: Path):
    # A shared instruction written inline in a family template is the copy the blocks exist to remove.
    for text in asm_texts(template.read_text()):
        inline = [i for i in SHARED_INSTRUCTIONS if spells(i, text)]
        assert not inline, f"{template.name} spells {inline} inline: {text!r} (use blocks/)"


def test_each_shared_instruction_lives_in_its_one_block():
    where: dict[str, set[str]] = {i: set() for i in SHARED_INSTRUCTIONS}
    for path in BLOCKS.glob("*.j2"):
        for text in asm_texts(path.read_text()):
            for instr in SHARED_INSTRUCTIONS:
                if spells(instr, text):
                    where[instr].add(path.name.split(".")[0])
    for instr, block in SHARED_INSTRUCTIONS.items():
        assert where[instr] == {block}, f"{instr}: in {sorted(where[instr])}, expected only in {block}"


def test_every_block_is_composed_by_at_least_two_family_templates():
    users: dict[str, set[str]] = {b: set() for b in BLOCK_NAMES}
    for template in family_templates():
        for block in _USES.findall(template.read_text()):
            assert block in users, f"{template.name} uses blocks/{block}.cuh.j2, which does not exist"
            users[block].add(template.name)
    for block, names in users.items():
        assert len(names) >= (1 if block in SINGLE_FAMILY else 2), f"blocks/{block}.cuh.j2 is used by {sorted(names)}"
    # the tensor-core families are built of every block
    for family in ("w8a8_gemm.cu.j2", "gemm.cu.j2"):
        assert {b for b, names in users.items() if family in names} == set(BLOCK_NAMES) - set(
            NOT_IN_EVERY_TENSOR_CORE_FAMILY
        ), family


# --- the block macros themselves ---------------------------------------------------------------------------------


def emit(block: str, macro: str, *args: object, **kwargs: object) -> str:
    """What a block's macro emits, rendered through the templates' own environment."""
    module = template_env().get_template(f"blocks/{block}.cuh.j2").module
    return str(getattr(module, macro)(*args, **kwargs))


HOLE = "@@hole@@"


def emit_call(block: str, macro: str, *args: str) -> str:
    """What a call-macro emits with every hole the caller fills marked HOLE: its own skeleton."""
    params = ", ".join(repr(a) for a in args)
    source = f'{{% import "blocks/{block}.cuh.j2" as b %}}{{% call(hole) b.{macro}({params}) %}}{HOLE}{{% endcall %}}'
    return template_env().from_string(source).render()


@pytest.mark.parametrize("zfill", [True, False])
@pytest.mark.parametrize("clobber", [True, False])
def test_cp_async_forms(zfill: bool, clobber: bool):
    text = emit("memory", "cp_async", zfill=zfill, clobber=clobber)
    asms = asm_texts(text)
    assert [a.split()[0] for a in asms] == [
        "cp.async.cg.shared.global",
        "cp.async.commit_group;",
        "cp.async.wait_group",
    ]
    # the zero-fill form passes a src-size operand (%2), the plain one copies all 16 bytes
    assert asms[0].endswith("16, %2;") if zfill else asms[0].endswith("16;")
    assert ("void cp_async16(unsigned dst, const void* src, bool pred)" in text) == zfill
    # the "memory" clobber on every one of the three statements, or on none
    assert text.count('"memory"') == (3 if clobber else 0)


@pytest.mark.parametrize("dtype", ["f16", "fp16", "bf16"])
def test_conversions(dtype: str):
    to_f = emit("convert", "to_float", dtype)
    from_f = emit("convert", "from_float", dtype)
    if dtype == "bf16":
        assert asm_texts(to_f) == [] and "<< 16" in to_f  # bf16 is the top half of an fp32: a shift, no cvt
    else:
        assert asm_texts(to_f) == ["cvt.f32.f16 %0, %1;"]
    assert asm_texts(from_f) == [f"cvt.rn.{'bf16' if dtype == 'bf16' else 'f16'}.f32 %0, %1;"]
    assert "float renamed(unsigned short h)" in emit("convert", "to_float", dtype, name="renamed")


def test_mma_shapes():
    assert asm_texts(emit("mma", "m16n8k16", "bf16"))[0].startswith(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    )
    s8 = asm_texts(emit("mma", "m16n8k32", "s8"))
    e4m3 = asm_texts(emit("mma", "m16n8k32", "e4m3"))
    assert s8[0].startswith("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32")
    assert e4m3[0].startswith("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32")


def test_split_k_reduction_orders():
    batched = emit("splitk", "reduce", "batched", "ws", "step", "MI", "NI", "kThreads")
    fold = emit("splitk", "reduce", "fold", "ws", "step", "MI", "NI", "kThreads")
    exact = emit("splitk", "reduce", "exact", "ws", "step", "MI", "NI", "kThreads", type="int")
    # batched: split 0 loaded, later splits added from s = 1, each split's loads in a buffer first
    assert "for (int s = 1; s < splits; ++s)" in batched and "float v[MI][NI][4];" in batched
    # fold: every split from 0 in order, 0 + split 0 (fp32: -0 becomes +0)
    assert "for (int sp = 0; sp < splits; ++sp)" in fold and "(sp == 0 ? 0.0f : acc[i][j][r]) + v" in fold
    assert "if (sp == split) continue;" not in fold
    # exact (int32): this block's own partial stays in registers
    assert "if (sp == split) continue;" in exact and "const int* part" in exact
    with pytest.raises(jinja2.UndefinedError):  # a block's parameters are required, never silently empty
        emit("splitk", "arrive", "counters", "tile")


def test_pipeline_ring_skeleton():
    ring = emit_call("pipeline", "ring", "kStages", "nk")
    assert ring.count(HOLE) == 4  # prologue, between, refill, compute
    waits = re.findall(r"cp_async_wait<([^>]*)>\(\)", ring)
    # wait for all but stages - 2 groups at the top of an iteration, then everything before leaving the ring
    assert waits == ["kStages - 2", "0"]
    assert ring.count("cp_async_commit();") == 2  # one a prologue stage, one an iteration (empty groups too)
    assert ring.index("__syncthreads();") > ring.index("cp_async_wait<kStages - 2>")


# --- the rendered families -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[tuple[str, str]]]:
    """family -> [(source name, source text)] of every source devtools/ptx_hashes.py hashes."""
    spec = importlib.util.spec_from_file_location("ptx_hashes", ROOT / "devtools" / "ptx_hashes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out: dict[str, list[tuple[str, str]]] = {}
    for family, name, source, _sm in module.sources():
        out.setdefault(family, []).append((name, source))
    return out


def test_every_family_renders(rendered: dict[str, list[tuple[str, str]]]):
    assert set(rendered) >= {"dequant", "gemv", "gemm", "w8a8_gemm", "act_quant", "gru"}
    for family, sources in rendered.items():
        for name, source in sources:
            assert "{{" not in source and "{%" not in source, f"{family} {name}: unrendered Jinja"


def test_each_shared_helper_is_emitted_once_per_kernel(rendered: dict[str, list[tuple[str, str]]]):
    # The same instruction text in two asm statements of one source is a copied helper. (Not the cvts: the proven
    # converter writes its conversions inline, op by op, one statement per value converted.)
    helpers = [i for i in SHARED_INSTRUCTIONS if not i.startswith("cvt.")]
    for family, sources in rendered.items():
        for name, source in sources:
            texts = [t for t in asm_texts(source) if any(i in t for i in helpers)]
            dup = {t for t in texts if texts.count(t) > 1}
            assert not dup, f"{family} {name}: {sorted(dup)} emitted more than once"


def _w8a8_parts(name: str) -> tuple[str, str]:
    # dqgen_w8a8_<elem>_<out>_...
    elem, out = name.split("_")[2:4]
    return elem, out


def _target(spec_name: str) -> str:
    # shipped spec names carry the 16-bit type: awq_int4_fp16, int8_bf16_shuffled, ...
    return "bf16" if "bf16" in spec_name.split("_") else "f16"


Expect = Callable[[str], list[str]]
# family -> the block output each of its kernels must contain (the arguments: what its template passes)
EXPECTED: dict[str, Expect] = {
    "w8a8_gemm": lambda name: (
        [
            emit("memory", "cp_async", zfill=True, clobber=True),
            emit("memory", "ldmatrix"),
            emit("mma", "m16n8k32", _w8a8_parts(name)[0]),
            emit("splitk", "arrive", "counters", "tile", "splits", "tid"),
            emit("splitk", "release", "counters", "tile", "tid"),
            emit_call("pipeline", "ring", "kStages", "nk"),
        ]
        + ([] if _w8a8_parts(name)[1] == "acc" else [emit("convert", "from_float", _w8a8_parts(name)[1])])
    ),
    "gemm": lambda name: [
        emit("memory", "cp_async", zfill=True, clobber=False),
        emit("memory", "ldmatrix"),
        emit("memory", "swizzle", "128"),
        emit("mma", "m16n8k16", _target(name)),
        emit("splitk", "arrive", "p.counters", "tile", "splits", "tid"),
        emit_call("pipeline", "ring", "STAGES", "nt"),
    ],
    "gemv": lambda name: [
        emit("pdl", "helpers"),
        emit("mma", "m16n8k16", _target(name)),
        emit("splitk", "arrive", "counters", "tile", "splits", "threadIdx.x"),
        emit("splitk", "release", "counters", "tile", "threadIdx.x"),
        emit("convert", "from_float", _target(name)),
    ],
    "dequant": lambda name: [emit("memory", "store_stream")],
    "act_quant": lambda name: [emit("convert", "to_float", name.split("_")[3], name="x_to_f32")],
}


def _contains_in_order(source: str, block_text: str) -> bool:
    """block_text's pieces between HOLEs (the caller's code) appear in source in order, whitespace aside."""
    flat = " ".join(source.split())
    pos = 0
    for piece in block_text.split(HOLE):
        piece = " ".join(piece.split())
        found = flat.find(piece, pos)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_family_kernels_hold_the_blocks(rendered: dict[str, list[tuple[str, str]]], family: str):
    assert rendered[family], family
    for name, source in rendered[family]:
        for block_text in EXPECTED[family](name):
            assert block_text.strip() and _contains_in_order(source, block_text), (
                f"{family} {name} lacks the block output:\n{block_text}"
            )


def test_gemv_grouped_kernels_reduce_through_the_warp_arrival(rendered: dict[str, list[tuple[str, str]]]):
    # the flat schedule (grouped weights only): warps, not blocks, arrive at a tile's counter
    warp_arrival = emit("splitk", "arrive_warp", "counters", "tile", "w1 - w0")
    grouped = [(name, source) for name, source in rendered["gemv"] if "void run_grouped(" in source]
    assert grouped, "no grouped GEMV rendered"
    for name, source in grouped:
        assert _contains_in_order(source, warp_arrival), name
        assert _contains_in_order(source, emit("splitk", "release", "counters", "tile", "lane")), name


# --- packaging ---------------------------------------------------------------------------------------------------


def test_the_wheel_ships_the_blocks():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["dqgen"]
    pkg = Path(dqgen.__file__).resolve().parent
    for path in sorted(BLOCKS.glob("*.j2")) + family_templates():
        rel = path.relative_to(pkg).as_posix()
        # setuptools globs do not cross folders: templates/*.j2 does not take templates/blocks/x.j2
        assert any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/") for g in data), f"{rel} not shipped"
