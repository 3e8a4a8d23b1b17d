"""CPU tests of the bounded tables behind the w8a8 ops' signature caches (dqgen.run.calls.remember)."""

from __future__ import annotations

from dqgen.run.calls import remember


def test_remember_inserts_and_returns_the_value() -> None:
    table: dict[str, int] = {}
    assert remember(table, "a", 1, 3) == 1 and table == {"a": 1}
    assert remember(table, "a", 2, 3) == 2 and table == {"a": 2}  # a key already there is replaced, nothing dropped


def test_remember_starts_over_when_the_table_is_full() -> None:
    table: dict[int, str] = {}
    for i in range(3):
        remember(table, i, str(i), 3)
    assert table == {0: "0", 1: "1", 2: "2"}  # at most 3 entries: all kept
    remember(table, 3, "3", 3)
    assert table == {3: "3"}  # the fourth finds the table full: emptied, then inserted
