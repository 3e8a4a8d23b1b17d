"""Optional dependencies: torch is an extra (``pip install 'dqgen[torch]'``), so the parts of dqgen that need it
say so in one line instead of a bare ``No module named 'torch'`` from deep inside a module."""

from __future__ import annotations

import importlib
from types import ModuleType

#: The install line that brings torch in, as the README gives it.
TORCH_EXTRA = "pip install 'dqgen[torch]'"


class MissingDependency(ModuleNotFoundError):
    """A part of dqgen needs an optional package that is not installed. A ModuleNotFoundError (so an ImportError),
    so code that already catches either keeps working."""


def require_torch(what: str) -> ModuleType:
    """torch, or one line naming ``what`` needs it and the extra that installs it. ``what`` is the public name the
    user reached for (``dqgen.nn.QuantLinear``)."""
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise  # torch is there but a module it needs is not: its own message says which
        # `from None`: the chained "No module named 'torch'" traceback would bury the one line that says what to do
        raise MissingDependency(f"{what} needs torch: {TORCH_EXTRA}", name="torch") from None
