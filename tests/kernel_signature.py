"""An entry point's parameter list as the rendered source declares it: (name, the width the host packs it at), for
the tests that hold a launch's argument table (run.gemm.PARAMS, run.gemm90.PARAMS90) equal to the signature."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

#: C parameter types -> the numpy width the host packs them at (pointers: np.uint64).
C_WIDTHS: dict[str, Any] = {"int": np.int32, "long long": np.int64}


def entry_params(src: str, entry: str, widths: dict[str, Any] = C_WIDTHS) -> list[tuple[str, Any]]:
    """(name, width) of each parameter of ``entry`` in ``src``: pointers as np.uint64, other types by ``widths``
    (the type's last ``::`` component, qualifiers dropped)."""
    m = re.search(re.escape(entry) + r"\((.*?)\)\s*\{", src, re.S)
    assert m is not None, f"{entry} is not in the source"
    params = []
    for decl in m.group(1).split(","):
        decl = " ".join(decl.split())
        name = decl.split(" ")[-1]
        ctype = decl[: -len(name)]
        for qualifier in ("const", "__restrict__", "__grid_constant__"):
            ctype = ctype.replace(qualifier, "")
        ctype = " ".join(ctype.split()).split("::")[-1]
        params.append((name, np.uint64 if "*" in ctype else widths[ctype]))
    return params
