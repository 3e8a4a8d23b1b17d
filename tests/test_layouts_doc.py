"""docs/layouts.md's GEMM tile table says what ``dqgen.kernels.gemm.CONFIGS`` holds and which M
``dqgen.run.gemm.choose_config`` gives each tile (an earlier page described tiles the code no longer had)."""

from __future__ import annotations

import re
from pathlib import Path

from dqgen.kernels.gemm import CONFIGS
from dqgen.run.gemm import choose_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "layouts.md"
#: choose_config is asked up to this M: past every tile's rows, so the open-ended last range is seen too.
M_MAX = 4 * max(c.bm for c in CONFIGS)


def doc_tiles(text: str) -> list[dict[str, object]]:
    """The rows of the table whose header starts with "tile (BM x BN x BK)", parsed."""
    section = text.split("| tile (BM x BN x BK) |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in section.splitlines()[2:]:
        tile, warps, stages, blocks, loop, ms = (c.strip() for c in line.strip().strip("|").split("|"))
        lo, hi = ms.split("..")
        rows.append(
            {
                "tile": tuple(int(v) for v in tile.split(" x ")),
                "warps": tuple(int(v) for v in warps.split(" x ")),
                "stages": int(stages),
                "min_blocks": int(blocks),
                "kind": loop.strip("`"),
                "m": (int(lo), int(hi) if hi else None),
            }
        )
    return rows


def code_tiles() -> list[dict[str, object]]:
    """The same rows from the code: each config's main loop, and the M range choose_config gives it."""
    chosen: dict[int, list[int]] = {}
    for m in range(1, M_MAX + 1):
        chosen.setdefault(CONFIGS.index(choose_config(m)), []).append(m)
    rows = []
    for i, cfg in enumerate(CONFIGS):
        ms = chosen.get(i, [])
        if ms:  # one unbroken range of M per tile, as the table's last column can say
            assert ms == list(range(ms[0], ms[-1] + 1)), f"{cfg} is chosen for a broken M range"
        rows.append(
            {
                "tile": cfg.mainloop.tile,
                "warps": cfg.mainloop.warps,
                "stages": cfg.stages,
                "min_blocks": cfg.min_blocks,
                "kind": cfg.kind,
                "m": (ms[0], None if ms[-1] == M_MAX else ms[-1]) if ms else None,
            }
        )
    return rows


def test_the_tile_table_is_configs():
    assert doc_tiles(DOC.read_text()) == code_tiles()


def test_a_stale_row_is_caught():
    """The parser reads what the page says: a changed stage count or M range differs from the code."""
    text = DOC.read_text()
    stale = re.sub(r"(\| 32 x 128 x 64 \| 1 x 4 \| )4( \|)", r"\g<1>3\2", text, count=1)
    assert stale != text and doc_tiles(stale) != code_tiles()
    shifted = text.replace("| 17..32 |", "| 17..31 |")
    assert shifted != text and doc_tiles(shifted) != code_tiles()
