"""What the quantized modules share about their buffers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def move_buffers(module: torch.nn.Module, fn: Callable[[torch.Tensor], Any]) -> None:
    """Apply a module's ``_apply`` function to its own buffers for the device only: ``fn`` is ``.to(dtype)`` as well
    as ``.to(device)`` (and ``.half()`` casts every float buffer), and packed codes, fp32 scales or fp16 scales in a
    bf16 spec cast to another dtype would be another weight."""
    for name, t in module._buffers.items():
        if t is None:
            continue
        moved = fn(t)
        if moved.dtype != t.dtype:
            moved = t.to(moved.device)
        module._buffers[name] = moved
