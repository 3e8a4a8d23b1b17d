"""The CPU proof: run a Plan in the emulator and compare with the spec's formula, bit for bit.

Cases: every code at every lane (and, with zero points, every (code, zero) pair at every lane),
with the other lanes random; scale 1 (so the conversion itself is checked exactly) and random
scales; then at least a million random full words with random zeros and scales. The expected
values come from the spec's formula with plain shifts and masks and one float64 -> target
rounding, not from the Plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .formats import BF16, FP16, FloatFormat
from .plan import Plan
from .spec import Spec, SourceKind, Target


@dataclass
class ProofResult:
    ok: bool
    words: int
    lane_words: int
    seconds: float
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        status = "PROVEN" if self.ok else "FAILED"
        return f"{status}: {self.words:,} words ({self.lane_words:,} lane-exhaustive), bit-exact in {self.seconds:.2f} s"


def _fmt(spec: Spec) -> FloatFormat:
    return FP16 if spec.target is Target.fp16 else BF16


def code_values(spec: Spec, words: np.ndarray, zeros: np.ndarray | None = None) -> np.ndarray:
    """[n, per_word] integer value of each element, in element order: the code value, minus the
    integer zero point when the spec has packed zeros (``zeros``: words in the Plan's z layout)."""
    b = spec.source.bits
    mask = np.uint32((1 << b) - 1)
    out = np.empty((words.shape[0], spec.per_word), dtype=np.int64)
    for j, e in enumerate(spec.order):
        q = ((words >> np.uint32(b * j)) & mask).astype(np.int64)
        if spec.source.kind is SourceKind.signed:
            q = np.where(q >= (1 << (b - 1)), q - (1 << b), q)
        elif spec.source.kind is SourceKind.biased:
            q = q - spec.source.offset
        if zeros is not None:
            q = q - (((zeros >> np.uint32(b * j)) & mask).astype(np.int64) + spec.zeros.stored_offset)
        out[:, e] = q
    return out


def expected_bits(spec: Spec, words: np.ndarray, zeros: np.ndarray | None, scales: np.ndarray,
                  fzeros: np.ndarray | None = None) -> np.ndarray:
    """As ``_expected_bits``, with every NaN (e.g. 0 * inf) as PTX's canonical NaN 0x7FFF."""
    from .isa import _canonical_nan

    bits = _expected_bits(spec, words, zeros, scales, fzeros)
    fmt = _fmt(spec)
    return _canonical_nan(bits, fmt.values_of(bits), fmt)


def _expected_bits(spec: Spec, words: np.ndarray, zeros: np.ndarray | None, scales: np.ndarray,
                   fzeros: np.ndarray | None = None) -> np.ndarray:
    """[n, per_word] target bit patterns of each element, by the spec's formula (``Zeros`` docstring).
    ``scales`` and ``fzeros`` are [n, per_word] target bit patterns."""
    fmt = _fmt(spec)
    s = fmt.values_of(scales)
    mode = spec.zeros.mode
    if mode == "float":
        assert fzeros is not None
        q = code_values(spec, words).astype(np.float64)
        diff = fmt.values_of(fmt.round_from_f64(q - fmt.values_of(fzeros)))  # q - z is exact in float64
        return fmt.round_from_f64(diff * s)  # exact product, second rounding
    if mode == "additive":
        assert fzeros is not None
        q = code_values(spec, words).astype(np.float64)
        return fmt.round_from_f64(_exact_sum(q * s, fmt.values_of(fzeros)))
    v = code_values(spec, words, zeros if spec.zeros.packed else None).astype(np.float64) * s  # exact in float64
    return fmt.round_from_f64(v)


def _exact_sum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y rounded to odd at 53 bits, so that one more rounding to <= 24 bits is exact (as in isa)."""
    from .isa import _round_to_odd_sum

    with np.errstate(all="ignore"):
        return _round_to_odd_sum(x, y)


def random_scales(rng: np.random.Generator, fmt: FloatFormat, shape: tuple[int, ...]) -> np.ndarray:
    # Mostly normal scales of ordinary size, plus some whose products are subnormal or overflow.
    lo, hi = (-24, 16) if fmt is FP16 else (-133, 128)
    exps = np.where(rng.random(shape) < 0.9, rng.uniform(-14, 8, size=shape), rng.uniform(lo, hi, size=shape))
    vals = np.where(rng.random(shape) < 0.5, -1.0, 1.0) * np.exp2(exps)
    return fmt.round_from_f64(vals)


def _run(plan: Plan, spec: Spec, words: np.ndarray, zeros: np.ndarray | None, scales: np.ndarray,
         fzeros: np.ndarray | None = None) -> np.ndarray:
    env: dict[str, np.ndarray] = {"w": words}
    if zeros is not None:
        env["z"] = zeros
    for i in range(spec.per_word // 2):
        env[f"s{i}"] = scales[:, 2 * i] | (scales[:, 2 * i + 1] << np.uint32(16))
        if fzeros is not None:
            env[f"f{i}"] = fzeros[:, 2 * i] | (fzeros[:, 2 * i + 1] << np.uint32(16))
    regs = plan.run(env)
    got = np.empty((words.shape[0], spec.per_word), dtype=np.uint32)
    for i, o in enumerate(plan.outputs):
        got[:, 2 * i] = regs[o] & np.uint32(0xFFFF)
        got[:, 2 * i + 1] = regs[o] >> np.uint32(16)
    return got


def random_float_zeros(rng: np.random.Generator, spec: Spec, shape: tuple[int, ...]) -> np.ndarray | None:
    """Float zero points near the code range (float mode) or additive zeros of a product's size."""
    fmt = _fmt(spec)
    if spec.zeros.mode == "float":
        return fmt.round_from_f64(rng.uniform(-1, 1 << spec.source.bits, size=shape))
    if spec.zeros.mode == "additive":
        return random_scales(rng, fmt, shape)
    return None


def lane_cases(spec: Spec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Every code (and every zero) at every lane, other lanes random."""
    b, n = spec.source.bits, spec.per_word
    codes = np.arange(1 << b, dtype=np.uint32)
    zs = codes if spec.zeros.packed else np.zeros(1, dtype=np.uint32)
    q, z = np.meshgrid(codes, zs, indexing="ij")
    q, z = q.ravel(), z.ravel()
    words, zeros = [], []
    for lane in range(n):
        clear = np.uint32(~(((1 << b) - 1) << (b * lane)) & 0xFFFFFFFF)
        bg = rng.integers(0, 1 << 32, size=q.size, dtype=np.uint64).astype(np.uint32)
        words.append((bg & clear) | (q << np.uint32(b * lane)))
        zbg = rng.integers(0, 1 << 32, size=q.size, dtype=np.uint64).astype(np.uint32)
        zeros.append((zbg & clear) | (z << np.uint32(b * lane)))
    # and the words where every lane holds the same code (e.g. all-ones, the maximum)
    words.append(sum(codes << np.uint32(b * j) for j in range(n)).astype(np.uint32))
    zeros.append(np.zeros(codes.size, dtype=np.uint32))
    w = np.concatenate(words)
    return w, (np.concatenate(zeros) if spec.zeros.packed else None)


def _compare(plan: Plan, spec: Spec, words, zeros, scales, label: str, failures: list[str], fzeros=None) -> None:
    got = _run(plan, spec, words, zeros, scales, fzeros)
    want = expected_bits(spec, words, zeros, scales, fzeros)
    bad = np.nonzero(got != want)
    if bad[0].size:
        r, e = int(bad[0][0]), int(bad[1][0])
        ztxt = f", zero word 0x{int(zeros[r]):08X}" if zeros is not None else ""
        ftxt = f", zero 0x{int(fzeros[r, e]):04X}" if fzeros is not None else ""
        failures.append(
            f"{label}: {bad[0].size} of {got.size} elements differ; first: word 0x{int(words[r]):08X}{ztxt}{ftxt}, "
            f"element {e}, scale 0x{int(scales[r, e]):04X}: got 0x{int(got[r, e]):04X}, expected 0x{int(want[r, e]):04X}"
        )


def quick_check(plan: Plan, spec: Spec, seed: int = 1) -> str | None:
    """The lane-exhaustive part with scale 1: fast enough to screen every candidate."""
    rng = np.random.default_rng(seed)
    fmt = _fmt(spec)
    words, zeros = lane_cases(spec, rng)
    ones = np.full((words.size, spec.per_word), fmt.encode_exact(1), dtype=np.uint32)
    failures: list[str] = []
    fz = random_float_zeros(rng, spec, ones.shape)
    _compare(plan, spec, words, zeros, ones, "every code at every lane, scale 1", failures, fz)
    return failures[0] if failures else None


def prove(plan: Plan, spec: Spec, n_random: int = 1_000_000, seed: int = 0, chunk: int = 1 << 18) -> ProofResult:
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    fmt = _fmt(spec)
    failures: list[str] = []
    words, zeros = lane_cases(spec, rng)
    ones = np.full((words.size, spec.per_word), fmt.encode_exact(1), dtype=np.uint32)
    _compare(plan, spec, words, zeros, ones, "every code at every lane, scale 1", failures, random_float_zeros(rng, spec, ones.shape))
    _compare(plan, spec, words, zeros, random_scales(rng, fmt, ones.shape), "every code at every lane, random scales", failures,
             random_float_zeros(rng, spec, ones.shape))
    lane_words = words.size * 2
    done = 0
    while done < n_random and not failures:
        n = min(chunk, n_random - done)
        w = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
        z = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32) if spec.zeros.packed else None
        _compare(plan, spec, w, z, random_scales(rng, fmt, (n, spec.per_word)), "random words", failures,
                 random_float_zeros(rng, spec, (n, spec.per_word)))
        done += n
    return ProofResult(not failures, lane_words + done, lane_words, time.perf_counter() - t0, failures)
