"""The live compiled specs by key (``Kernel.op_key``): how the torch custom ops, whose graphs hold a string, find the
object they run. Lives below dqgen.run.runtime so that the ops never import it: they call the public methods of
``OpTarget`` on what they look up."""

from __future__ import annotations

from typing import Any, Protocol

from ..core.spec import Spec


class OpTarget(Protocol):
    """What a custom op calls (dqgen.run.runtime.Kernel is one)."""

    @property
    def spec(self) -> Spec: ...

    def torch_call(
        self, torch: Any, qweight: Any, scales: Any, zeros: Any, g_idx: Any, global_scale: Any, out: Any, stream: Any
    ) -> Any:
        """The dequantize call on torch tensors (checked once per signature)."""
        ...

    def matmul(
        self,
        x: Any,
        w: Any,
        scales: Any = None,
        zeros: Any = None,
        *,
        g_idx: Any = None,
        global_scale: Any = None,
        bias: Any = None,
        out: Any = None,
    ) -> Any:
        """y = x @ dequant(W) (+ bias), eager."""
        ...


#: Every live target by key. Strong references: a graph may hold a key as long as the process lives.
_TARGETS: dict[str, OpTarget] = {}


def add(key: str, target: OpTarget) -> None:
    """Make ``target`` what the ops holding ``key`` run (a later target of the same spec replaces it: same work)."""
    _TARGETS[key] = target


def lookup(key: str) -> OpTarget:
    """The live target of a key (the string a traced graph holds)."""
    return _TARGETS[key]
