"""The benches' shared option parsing: one line naming the flag and what was expected, before any GPU work."""

from __future__ import annotations


def parse_subset(flag: str, text: str, allowed: tuple[str, ...], bench: str) -> list[str]:
    """``text``, a comma-separated subset of ``allowed`` (as given, in order); ValueError naming ``flag`` and the
    ``bench`` it belongs to otherwise."""
    names = [p.strip() for p in text.split(",")]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        got = bad[0] if bad else text
        raise ValueError(f"[{flag}] got {got!r}; with {bench} expected a subset of {', '.join(allowed)}")
    return names
