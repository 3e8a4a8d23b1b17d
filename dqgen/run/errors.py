"""The runtime's input error (its own module so that the runtime's parts share it without importing each other)."""

from __future__ import annotations


class ShapeError(ValueError):
    """A tensor does not match the spec; the message names the tensor."""
