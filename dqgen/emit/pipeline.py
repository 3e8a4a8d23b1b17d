"""The compiler's one pipeline: a spec in, an ``Artifact`` out (the winning plan and why the others lost, the
proof, the converter's source; the kernels built around it render in dqgen.kernels). ``dqgen build``, the
runtime's ``Kernel``, ``explain``, the SASS counts and the bench all start here, so one spec is solved and rendered
once per process.

Caches and their keys (Triton's idea: each stage memoized on a key over its inputs):
- solving and rendering: in-process, on (dqgen version, spec JSON, strategy);
- the proof: in-process and on disk beside the NVRTC cache (``<cache>/proofs``), on (dqgen version, a digest of
  the prover's own code, spec JSON, the plan's ops, random words, seed). A cached build does not prove again.
  Only proofs that passed are stored: a failure is recomputed and reported every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..check.prove import ProofResult, prove
from ..core.files import write_whole_bytes
from ..core.spec import Spec
from ..ir.plan import Plan
from ..solve.solver import solve
from .nvrtc import default_cache_dir
from .render import render_converter

#: dqgen's version, from dqgen/__init__.py: Python imports a package before its subpackages, so it is loaded
#: here without an upward import (pyproject reads the same assignment).
DQGEN_VERSION: str = sys.modules[__name__.split(".")[0]].__version__

#: The proof's seed: one fixed stream of random words, so a stored proof is the proof that would run again.
PROOF_SEED = 0


@dataclass(frozen=True)
class Artifact:
    """Everything the later stages read about one compiled spec."""

    spec: Spec
    plan: Plan
    losers: tuple[str, ...]  # the other strategies considered and why they lost (also plan.rejected)
    proof: ProofResult | None  # None when no proof was asked for (solve's lane check still screened the plan)
    header: str  # the converter alone (.cuh), for use inside other kernels
    key: str  # content key of the solved spec: sha256 over dqgen's version, the spec JSON and the strategy


@dataclass(frozen=True)
class _Solved:
    plan: Plan
    header: str
    key: str


def spec_key(spec: Spec, strategy: str | None = None) -> str:
    blob = json.dumps([DQGEN_VERSION, spec.model_dump(mode="json"), strategy], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


_SOLVED: dict[str, _Solved] = {}
_PROOFS: dict[str, ProofResult] = {}


def _solved(spec: Spec, strategy: str | None) -> _Solved:
    key = spec_key(spec, strategy)
    hit = _SOLVED.get(key)
    if hit is None:
        plan = solve(spec, strategy)
        hit = _SOLVED[key] = _Solved(plan, render_converter(spec, plan), key)
    return hit


@cache
def _prover_digest() -> str:
    """The prover's verdict depends on its own code (the emulator, the expected values, the formats): a change
    there, even without a version bump, must not reuse stored proofs."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted([*root.glob("core/*.py"), *root.glob("ir/*.py"), *root.glob("check/*.py")]):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def plan_fingerprint(plan: Plan) -> list[object]:
    """What the proof's verdict depends on in a plan: its ops, inputs and outputs (not the prose), in names and
    numbers that are the same in every process."""
    ops = [
        [op.opcode.name, op.stage, op.dst, [a if isinstance(a, str) else a.value for a in op.args], op.imm]
        for op in plan.ops
    ]
    return [ops, [[i.name, i.role] for i in plan.inputs], plan.outputs, plan.scale_regs, plan.target, plan.elements]


def proof_key(spec: Spec, plan: Plan, words: int, seed: int = PROOF_SEED) -> str:
    what = [DQGEN_VERSION, _prover_digest(), spec.model_dump(mode="json"), plan_fingerprint(plan), words, seed]
    return hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _proof_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "proofs" / key[:2] / f"{key}.json"


def _load_proof(path: Path, words: int) -> ProofResult | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        result = ProofResult(
            ok=data["ok"] is True,
            words=int(data["words"]),
            lane_words=int(data["lane_words"]),
            seconds=float(data["seconds"]),
            cached=True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, partial or foreign: prove again
    return result if result.ok and result.words >= words else None


def _store_proof(path: Path, proof: ProofResult) -> None:
    data = {"ok": proof.ok, "words": proof.words, "lane_words": proof.lane_words, "seconds": proof.seconds}
    with contextlib.suppress(OSError):  # a read-only cache only costs the next build its proof time
        write_whole_bytes(path, json.dumps(data).encode())


def _proof(
    spec: Spec, plan: Plan, words: int, progress: Callable[[int, int], None] | None, cache_dir: Path | None
) -> ProofResult:
    key = proof_key(spec, plan, words)
    hit = _PROOFS.get(key)
    if hit is not None:
        return hit
    path = _proof_path(cache_dir if cache_dir is not None else default_cache_dir(), key)
    result = _load_proof(path, words)
    if result is None:
        result = prove(plan, spec, n_random=words, seed=PROOF_SEED, progress=progress)
        if result.ok:
            _store_proof(path, result)
    if result.ok:
        _PROOFS[key] = result
    return result


def compile_artifact(
    spec: Spec,
    *,
    proof_words: int | None = None,
    strategy: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache_dir: Path | None = None,
) -> Artifact:
    """Solve, render and (with ``proof_words``, the random words besides every code at every lane) prove ``spec``.
    ``strategy`` picks that strategy's best plan instead of the cheapest. Raises solve's NoPlanError."""
    solved = _solved(spec, strategy)
    proof = None if proof_words is None else _proof(spec, solved.plan, proof_words, progress, cache_dir)
    return Artifact(
        spec=spec,
        plan=solved.plan,
        losers=tuple(solved.plan.rejected),
        proof=proof,
        header=solved.header,
        key=solved.key,
    )
