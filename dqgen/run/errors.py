"""The runtime's input errors (their own module so that the runtime's parts share them without importing each
other)."""

from __future__ import annotations

import sys
from typing import Any


class ShapeError(ValueError):
    """A tensor does not match the spec; the message names the tensor."""


def imported_torch() -> Any:
    """torch, as the caller imported it (the torch entry points take torch tensors; dqgen never imports torch on
    its own); a one-line TypeError when it is not imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        raise TypeError("matmul: expects torch tensors (import torch first)")
    return torch
