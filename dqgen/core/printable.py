"""Spec text made safe to print on a terminal: a spec's ``description`` or a file name is user data."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls (0x80-0x9F: 8-bit CSI and friends), and the bidirectional
# overrides and isolates that make a terminal show text in another order than it is stored ("Trojan Source").
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` without control characters: an ESC cannot start a terminal escape sequence once it is gone.
    With ``newlines=False`` tabs and newlines become spaces too (text shown on one line)."""
    text = _CONTROL.sub("", text)
    return text if newlines else text.replace("\n", " ").replace("\t", " ")
