"""The CPU proof: run a Plan in the emulator and compare with the spec's formula, bit for bit.

Cases: every code at every lane (and, with zero points, every (code, zero) pair at every lane),
with the other lanes random; scale 1 (so the conversion itself is checked exactly) and random
scales; then at least a million random full words with random zeros and scales. The expected
values come from the spec's formula with plain shifts and masks and one float64 -> target
rounding, not from the Plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core.formats import FP16, FP32, MINIFLOATS, FloatFormat
from ..core.spec import SourceKind, Spec
from ..ir.plan import Plan
from ..layout.layout import Layout


@dataclass
class ProofResult:
    ok: bool
    words: int
    lane_words: int
    seconds: float
    failures: list[str] = field(default_factory=list)
    cached: bool = False  # read back from the proof cache (dqgen.emit.pipeline): ``seconds`` is the original run's

    def line(self) -> str:
        status = "PROVEN" if self.ok else "FAILED"
        return (
            f"{status}: {self.words:,} words ({self.lane_words:,} lane-exhaustive), bit-exact in {self.seconds:.2f} s"
            + (" (cached)" if self.cached else "")
        )


def _fmt(spec: Spec) -> FloatFormat:
    return spec.target_type


def _as2d(words: np.ndarray) -> np.ndarray:
    """Blocks as [n, words per block] (a 1-D array is one word per block)."""
    w = np.asarray(words, dtype=np.uint32)
    return w[:, None] if w.ndim == 1 else w


def code_fields(spec: Spec, words: np.ndarray) -> np.ndarray:
    """[n, per_word] raw unsigned code of each element, in element order."""
    return Layout.of(spec).block_codes(words)


def code_values(spec: Spec, words: np.ndarray, zeros: np.ndarray | None = None) -> np.ndarray:
    """[n, per_word] integer value of each element, in element order: the code value, minus the
    integer zero point when the spec has packed zeros (``zeros``: words in the Plan's z layout)."""
    b = spec.source.bits
    q = code_fields(spec, words)
    if spec.source.kind is SourceKind.signed:
        q = np.where(q >= (1 << (b - 1)), q - (1 << b), q)
    elif spec.source.kind is SourceKind.biased:
        q = q - spec.source.offset
    if zeros is not None:  # one zero word per weight word, its fields in the weights' order
        q -= Layout.of(spec).block_codes(zeros) + spec.zeros.stored_offset
    return q


def element_values(spec: Spec, words: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """[n, per_word] float64 value of each element's code: exact (minifloats; integers) or the
    codebook entry rounded once to ``fmt`` (the spec's rule). NaN / inf as float64."""
    fields = code_fields(spec, words)
    if spec.source.kind is SourceKind.float:
        mf = spec.source.scalar_type
        assert mf is not None, "the spec validator requires a format for kind 'float'"
        table = np.array([float(mf.decode(c)) for c in range(1 << mf.width)])
        return table[fields]
    if spec.source.kind is SourceKind.codebook:
        vals = spec.source.codebook_values
        vals = vals + [0.0] * ((1 << spec.source.bits) - len(vals))
        table = fmt.values_of(fmt.round_from_f64(np.array(vals, dtype=np.float64)))
        return table[fields]
    return code_values(spec, words).astype(np.float64)


def block_scale_values(spec: Spec, codes: np.ndarray) -> np.ndarray:
    """float64 value of block-scale codes (e8m0: 2^(E-127), 0xFF NaN; e4m3: OCP e4m3fn)."""
    if spec.scales.dtype is None:
        raise ValueError(f"{spec.name}: scales.dtype is not set, so the scales are not block-scale codes")
    mf = MINIFLOATS[spec.scales.dtype.value]
    table = np.array([float(mf.decode(c)) for c in range(256)])
    return table[np.asarray(codes, dtype=np.int64) & 0xFF]


def expected_bits(
    spec: Spec,
    words: np.ndarray,
    zeros: np.ndarray | None,
    scales: np.ndarray,
    fzeros: np.ndarray | None = None,
    gs: np.ndarray | None = None,
) -> np.ndarray:
    """[n, per_word] target bit patterns of each element, by the spec's formula (``Zeros`` and
    ``Scales`` docstrings), with every NaN (e.g. 0 * inf) as PTX's canonical NaN 0x7FFF. ``scales`` and
    ``fzeros`` are [n, per_word] target bit patterns; for block-scaled specs ``scales`` is [n] scale codes
    and ``gs`` [n] fp32 bit patterns."""
    from ..ir.isa import _canonical_nan

    if spec.integer_target:
        # s8 lanes: the exact integer code - offset - zero as a two's-complement byte; no scale (the W4A8 GEMM
        # applies it to int32 sums in fp32)
        values = code_values(spec, words, zeros if spec.zeros.packed else None)
        return (values & 0xFF).astype(np.uint32)
    fmt = _fmt(spec)

    def by_formula() -> np.ndarray:
        with np.errstate(all="ignore"):
            if spec.scales.block:
                v = element_values(spec, words, fmt) * block_scale_values(spec, scales)[:, None]  # exact in float64
                if spec.scales.global_scale:
                    assert gs is not None
                    g = FP32.values_of(gs)[:, None]
                    v = (v * g).astype(np.float32).astype(np.float64)  # exact product, rounded once to fp32
                return fmt.round_from_f64(v)
            if spec.source.kind in (SourceKind.float, SourceKind.codebook):
                return fmt.round_from_f64(element_values(spec, words, fmt) * fmt.values_of(scales))
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
        with np.errstate(invalid="ignore"):  # 0 * inf is NaN, as on the GPU
            codes = code_values(spec, words, zeros if spec.zeros.packed else None)
            v = codes.astype(np.float64) * s  # exact in float64
        return fmt.round_from_f64(v)

    bits = by_formula()
    return _canonical_nan(bits, fmt.values_of(bits), fmt)


def _exact_sum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y rounded to odd at 53 bits, so that one more rounding to <= 24 bits is exact (as in isa)."""
    from ..ir.isa import _round_to_odd_sum

    with np.errstate(all="ignore"):
        return _round_to_odd_sum(x, y)


def random_scales(rng: np.random.Generator, fmt: FloatFormat, shape: tuple[int, ...]) -> np.ndarray:
    # Mostly normal scales of ordinary size, plus some whose products are subnormal or overflow.
    lo, hi = (-24, 16) if fmt is FP16 else (-133, 128)
    exps = np.where(rng.random(shape) < 0.9, rng.uniform(-14, 8, size=shape), rng.uniform(lo, hi, size=shape))
    vals = np.where(rng.random(shape) < 0.5, -1.0, 1.0) * np.exp2(exps)
    return fmt.round_from_f64(vals)


def _run(
    plan: Plan,
    spec: Spec,
    words: np.ndarray,
    zeros: np.ndarray | None,
    scales: np.ndarray,
    fzeros: np.ndarray | None = None,
    gs: np.ndarray | None = None,
) -> np.ndarray:
    w = _as2d(words)
    names = plan.words
    env: dict[str, np.ndarray] = {n: w[:, k] for k, n in enumerate(names)}
    if zeros is not None:
        env["z"] = zeros
    if spec.scales.block:
        env["sc"] = np.asarray(scales, dtype=np.uint32)
        if gs is not None:
            env["gs"] = gs
    else:
        for i in range(spec.per_word // 2):
            env[f"s{i}"] = scales[:, 2 * i] | (scales[:, 2 * i + 1] << np.uint32(16))
            if fzeros is not None:
                env[f"f{i}"] = fzeros[:, 2 * i] | (fzeros[:, 2 * i + 1] << np.uint32(16))
    regs = plan.run(env)
    got = np.empty((w.shape[0], spec.per_word), dtype=np.uint32)
    width = plan.lane_bits
    for o, elements in zip(plan.outputs, plan.lanes, strict=True):  # Plan.lanes has one tuple per output
        for lane, e in enumerate(elements):
            got[:, e] = (regs[o] >> np.uint32(width * lane)) & np.uint32((1 << width) - 1)
    return got


def random_float_zeros(rng: np.random.Generator, spec: Spec, shape: tuple[int, ...]) -> np.ndarray | None:
    """Float zero points near the code range (float mode) or additive zeros of a product's size."""
    fmt = _fmt(spec)
    if spec.zeros.mode == "float":
        return fmt.round_from_f64(rng.uniform(-1, 1 << spec.source.bits, size=shape))
    if spec.zeros.mode == "additive":
        return random_scales(rng, fmt, shape)
    return None


def _set_field(words: np.ndarray, P: int, b: int, codes: np.ndarray) -> None:
    """Write ``codes`` into bits [P, P + b) of each block (in place; fields may straddle words)."""
    for j in range(b):
        k, bit = divmod(P + j, 32)
        one = np.uint32(1 << bit)
        words[:, k] = (words[:, k] & ~one) | (((codes >> np.uint32(j)) & np.uint32(1)) << np.uint32(bit))


def _random_words(rng: np.random.Generator, n: int, per_block: int) -> np.ndarray:
    return rng.integers(0, 1 << 32, size=(n, per_block), dtype=np.uint64).astype(np.uint32)


def lane_cases(spec: Spec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Every code (and every zero) at every lane, other lanes random. Words are 1-D for one-word
    blocks, else [n, words]."""
    b, n, W = spec.source.bits, spec.per_word, spec.words
    codes = np.arange(1 << b, dtype=np.uint32)
    zs = codes if spec.zeros.packed else np.zeros(1, dtype=np.uint32)
    grid_q, grid_z = np.meshgrid(codes, zs, indexing="ij")
    q, z = grid_q.ravel(), grid_z.ravel()
    words, zeros = [], []
    for lane in range(n):
        w = _random_words(rng, q.size, W)
        _set_field(w, Layout.of(spec).field_pos(lane), b, q)
        words.append(w)
        zw = _random_words(rng, q.size, 1)
        if spec.zeros.packed:
            _set_field(zw, Layout.of(spec).field_pos(lane), b, z)  # packed zeros: one-word blocks only
        zeros.append(zw[:, 0])
    # and the blocks where every lane holds the same code (e.g. all-ones, the maximum)
    same = np.zeros((codes.size, W), dtype=np.uint32)
    for lane in range(n):
        _set_field(same, b * lane, b, codes)
    words.append(same)
    zeros.append(np.zeros(codes.size, dtype=np.uint32))
    w = np.concatenate(words)
    return (w[:, 0] if W == 1 else w), (np.concatenate(zeros) if spec.zeros.packed else None)


def scale_cases(spec: Spec, rng: np.random.Generator, n: int, exhaustive: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Scale codes for block-scaled specs (every one of the 256 when ``exhaustive``, cycling) and
    fp32 global scales (of every magnitude, tiny ones included)."""
    codes = (np.arange(n) % 256 if exhaustive else rng.integers(0, 256, size=n)).astype(np.uint32)
    gs = None
    if spec.scales.global_scale:
        exps = np.where(rng.random(n) < 0.7, rng.uniform(-12, 4, size=n), rng.uniform(-140, 100, size=n))
        gs = FP32.bits_of(np.float32(np.where(rng.random(n) < 0.2, -1.0, 1.0) * np.exp2(exps)).astype(np.float64))
    return codes, gs


def _compare(
    plan: Plan, spec: Spec, words, zeros, scales, label: str, failures: list[str], fzeros=None, gs=None
) -> None:
    got = _run(plan, spec, words, zeros, scales, fzeros, gs)
    want = expected_bits(spec, words, zeros, scales, fzeros, gs)
    bad = np.nonzero(got != want)
    if bad[0].size:
        r, e = int(bad[0][0]), int(bad[1][0])
        wtxt = " ".join(f"0x{int(x):08X}" for x in _as2d(words)[r])
        ztxt = f", zero word 0x{int(zeros[r]):08X}" if zeros is not None else ""
        ftxt = f", zero 0x{int(fzeros[r, e]):04X}" if fzeros is not None else ""
        stxt = f"scale code 0x{int(scales[r]):02X}" if spec.scales.block else f"scale 0x{int(scales[r, e]):04X}"
        if gs is not None:
            stxt += f", global scale 0x{int(gs[r]):08X}"
        failures.append(
            f"{label}: {bad[0].size} of {got.size} elements differ; first: word {wtxt}{ztxt}{ftxt}, "
            f"element {e}, {stxt}: got 0x{int(got[r, e]):04X}, expected 0x{int(want[r, e]):04X}"
        )


def _scales(
    spec: Spec, rng: np.random.Generator, n: int, unit: bool, exhaustive: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """Scales for n blocks: target pairs (1.0 when ``unit``) or block-scale codes (+ global scales)."""
    fmt = _fmt(spec)
    if spec.integer_target:
        return np.zeros((n, spec.per_word), dtype=np.uint32), None  # s8 plans take no scale
    if spec.scales.block:
        return scale_cases(spec, rng, n, exhaustive)
    if unit:
        return np.full((n, spec.per_word), fmt.encode_exact(1), dtype=np.uint32), None
    return random_scales(rng, fmt, (n, spec.per_word)), None


def _lane_suite(plan: Plan, spec: Spec, rng: np.random.Generator, failures: list[str], random_too: bool) -> int:
    words, zeros = lane_cases(spec, rng)
    n = _as2d(words).shape[0]
    if spec.scales.block:
        # every code at every lane, against every one of the 256 scale codes
        reps = 256
        words = np.repeat(words, reps, axis=0)
        zeros = None
        sc = np.tile(np.arange(reps, dtype=np.uint32), n)
        gs = scale_cases(spec, rng, sc.size, True)[1]
        _compare(plan, spec, words, zeros, sc, "every code at every lane x every scale code", failures, None, gs)
        return sc.size
    s, _ = _scales(spec, rng, n, True)
    _compare(
        plan,
        spec,
        words,
        zeros,
        s,
        "every code at every lane, scale 1",
        failures,
        random_float_zeros(rng, spec, s.shape),
    )
    if random_too:
        s, _ = _scales(spec, rng, n, False)
        _compare(
            plan,
            spec,
            words,
            zeros,
            s,
            "every code at every lane, random scales",
            failures,
            random_float_zeros(rng, spec, s.shape),
        )
        return 2 * n
    return n


def quick_check(plan: Plan, spec: Spec, seed: int = 1) -> str | None:
    """The lane-exhaustive part (with scale 1 where scales are not block codes): fast enough to
    screen every candidate."""
    failures: list[str] = []
    _lane_suite(plan, spec, np.random.default_rng(seed), failures, False)
    return failures[0] if failures else None


def prove(
    plan: Plan,
    spec: Spec,
    n_random: int = 1_000_000,
    seed: int = 0,
    chunk: int = 1 << 18,
    progress: Callable[[int, int], None] | None = None,
) -> ProofResult:
    """Check ``plan`` bit for bit: every code at every lane, then ``n_random`` random words in chunks.
    ``progress(done, n_random)`` is called after each chunk (a progress bar for long proofs)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    failures: list[str] = []
    lane_words = _lane_suite(plan, spec, rng, failures, True)
    done = 0
    while done < n_random and not failures:
        n = min(chunk, n_random - done)
        w = _random_words(rng, n, spec.words)
        w = w[:, 0] if spec.words == 1 else w
        z = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32) if spec.zeros.packed else None
        s, gs = _scales(spec, rng, n, False)
        _compare(plan, spec, w, z, s, "random words", failures, random_float_zeros(rng, spec, (n, spec.per_word)), gs)
        done += n
        if progress is not None:
            progress(done, n_random)
    return ProofResult(not failures, lane_words + done, lane_words, time.perf_counter() - t0, failures)
