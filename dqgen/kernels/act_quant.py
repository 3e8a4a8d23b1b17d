"""The activation-quantization kernel (templates/act_quant.cu.j2): one config per (dtype, K, smoothing, mode,
alignment, register and shared-memory placement), and the rule that picks a call's.

K is baked in: the loop over a thread's vectors unrolls to straight-line code with the row held in registers
between the row's max and its codes, so x is read from memory once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..core.formats import integer
from .family import KernelConfig

XDtype = Literal["fp16", "bf16"]
SmoothDtype = Literal["fp32", "fp16", "bf16"] | None
#: What registers hold of a row between its max and its codes: the converted (and smoothed) fp32 values, 8
#: registers a vector, or the raw 16-byte vectors, 4 registers, converted again for the codes. Fewer registers
#: let more blocks (so more loads) be resident on an SM; the second conversion costs instructions.
Hold = Literal["f32", "raw"]
#: Where a block keeps the smoothing reciprocals 1/s: per thread in registers (its columns are the same in every
#: row; aligned and at most MAX_CACHED_SMOOTH vectors a thread), in shared memory (K floats, once per block;
#: aligned), or computed from s for every element (any variant).
SmoothIn = Literal["regs", "smem", "rcp"]
#: The op that makes x, fused in front of the quantizer so that x never goes to memory in its float form (the
#: producers of a Llama layer's linears' inputs): "rmsnorm" (HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), cast to
#: x's dtype, times the weight gamma in x's dtype) and "silu_mul" (HF LlamaMLP's act_fn(gate) * up, from the
#: merged gate / up projection's output: gate the first K columns of a row, up the next K).
Prologue = Literal["none", "rmsnorm", "silu_mul"]

#: The codes' range, from the registry's signed 8-bit integer format: the clamp, and max|x| / qmax as the scale.
_CODES = integer(8, signed=True)
CODE_RANGE: tuple[int, int] = (
    int(min(_CODES.decode(c) for c in range(1 << _CODES.width))),
    int(max(_CODES.decode(c) for c in range(1 << _CODES.width))),
)

#: A thread's vectors (8 elements each) per row that the block size aims for: enough loads in flight per thread.
VECS_PER_THREAD = 4
MAX_THREADS = 512
#: Vectors per thread held in registers between the max and the codes; a longer row reads the rest again (from
#: L2). 8 x 8 fp32 at 512 threads stays inside the 128 registers a thread may have there.
MAX_CACHED = 8
#: Per-thread reciprocals of the smoothing factors are kept in registers across rows up to this many vectors.
MAX_CACHED_SMOOTH = 4
#: Shared memory a block may take for the smoothing reciprocals (an H100 SM has 228 KB).
MAX_SMOOTH_SMEM = 96 * 1024


@dataclass(frozen=True)
class ActQuantConfig(KernelConfig):
    """What one compiled entry point is specialized on: the activation dtype, K (baked in), the smoothing factors'
    dtype (None: no smoothing), a static scale or a dynamic per-row one, 16-byte aligned rows, where a row waits
    between its max and its codes (``hold``) and where the smoothing reciprocals live (``smooth_in``)."""

    family: ClassVar[str] = "act_quant"
    template: ClassVar[str] = "act_quant.cu.j2"

    dtype: XDtype
    k: int
    smooth: SmoothDtype
    static: bool
    aligned: bool
    hold: Hold = "raw"
    smooth_in: SmoothIn = "rcp"
    prologue: Prologue = "none"

    def __post_init__(self) -> None:
        # one config per kernel: a static scale holds no row between a max and its codes, and without smoothing
        # there are no reciprocals to place, so those fields take one value (the source and the name ignore them)
        if self.static or self.prologue != "none":  # a producer's row is held raw and made again for its codes
            object.__setattr__(self, "hold", "raw")
        if not self.smooth:
            object.__setattr__(self, "smooth_in", "rcp")

    @property
    def name(self) -> str:
        sm = f"_s{self.smooth}{self.smooth_in}" if self.smooth else ""
        pro = {"none": "", "rmsnorm": "_rms", "silu_mul": "_silu"}[self.prologue]
        mode = "static" if self.static else f"dyn{self.hold}"
        return f"dqgen_act_quant_{self.dtype}_k{self.k}{pro}{sm}_{mode}_{'a' if self.aligned else 'u'}"

    @property
    def threads(self) -> int:
        nvec = max(1, self.k // 8)
        want = -(-nvec // VECS_PER_THREAD)
        return min(MAX_THREADS, max(32, -(-want // 32) * 32))

    @property
    def chunks(self) -> int:
        return -(-(self.k // 8) // self.threads)

    @property
    def cache(self) -> int:
        return 0 if self.static else min(self.chunks, MAX_CACHED)

    @property
    def inv_s_in(self) -> str:
        return self.smooth_in if self.smooth else ""

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of a block."""
        return 4 * self.k if self.inv_s_in == "smem" else 0

    @property
    def min_sm(self) -> int:
        return 80  # bf16 conversions (cvt.rn.bf16.f32) and the 16-byte vector loads of the aligned variants

    def context(self) -> dict[str, Any]:
        return _context(self)

    @property
    def source_name(self) -> str:
        return "act_quant.cu"


#: Rows from which the smoothing reciprocals go to shared memory by default: filling K floats costs each block a
#: pass over s, repaid only over several rows a block. Measured on an H100 (docs/bench/w8a8_act.json, K = 4096,
#: one call after an L2 flush): 1 and 16 rows 9.0 / 8.7 us in registers against 19.2 / 18.4 us in shared memory;
#: 4096 x 4096 36.8 us in shared memory (43.6 us per element), 8192 x 8192 a tie (90.8 / 90.1 us),
#: 16384 x 14336 290.5 us in shared memory against 326.3 us in registers.
SMEM_MIN_ROWS = 1024
#: The placement of the row between its max and its codes: "raw" was faster at every measured shape
#: (16384 x 14336: 256.8 us against 319.2 us for "f32", which leaves fewer blocks resident).
DEFAULT_HOLD: Hold = "raw"


def choose_act_quant(
    dtype: XDtype,
    k: int,
    smooth: SmoothDtype,
    static: bool,
    aligned: bool,
    rows: int,
    hold: Hold | None = None,
    smooth_in: SmoothIn | None = None,
    prologue: Prologue = "none",
) -> ActQuantConfig:
    """The variant a call on ``rows`` rows runs (``hold`` / ``smooth_in`` override the defaults where the variant
    allows them: "regs" falls back to "smem", "smem" to "rcp")."""
    if prologue != "none":
        return ActQuantConfig(dtype, k, None, False, aligned, hold or DEFAULT_HOLD, "rcp", prologue)
    base = ActQuantConfig(dtype, k, smooth, static, aligned)
    if smooth_in is None:
        smooth_in = "smem" if rows >= SMEM_MIN_ROWS else "regs"
    if smooth_in == "regs" and not (aligned and base.chunks <= MAX_CACHED_SMOOTH):
        smooth_in = "smem" if rows >= SMEM_MIN_ROWS else "rcp"
    if smooth_in == "smem" and not (aligned and 4 * k <= MAX_SMOOTH_SMEM):
        smooth_in = "rcp"
    return ActQuantConfig(dtype, k, smooth, static, aligned, hold or DEFAULT_HOLD, smooth_in)


def _context(v: ActQuantConfig) -> dict[str, Any]:
    if v.k < 1:
        raise ValueError(f"K: expected at least 1 column, got {v.k}")
    if v.aligned and v.k % 8:
        raise ValueError(f"aligned variant: K must be a multiple of 8, got {v.k}")
    if v.inv_s_in in ("regs", "smem") and not v.aligned:
        raise ValueError(f"smooth_in={v.smooth_in!r} needs the aligned variant")
    if v.inv_s_in == "regs" and v.chunks > MAX_CACHED_SMOOTH:
        raise ValueError(f"smooth_in='regs': at most {MAX_CACHED_SMOOTH} vectors a thread, K={v.k} has {v.chunks}")
    if v.prologue != "none":
        # the producer's output is quantized per row as it is made: no static scale, smoothing folded into the
        # producer's weight (gamma / s) or the weight of the linear before it, 16-byte vectors only
        if v.static or v.smooth:
            raise ValueError(f"prologue={v.prologue!r}: takes a dynamic scale and no smoothing factors")
        if not v.aligned:
            raise ValueError(f"prologue={v.prologue!r}: needs the aligned variant (K a multiple of 8, 16-byte rows)")
    if v.static:
        cache_doc = "converted as it streams"
    elif v.cache == v.chunks:
        cache_doc = f"held in registers ({v.hold}) from the max to the codes"
    else:
        cache_doc = f"{v.cache} of {v.chunks} vectors held in registers ({v.hold}), the rest read again"
    mode = "static scale" if v.static else "dynamic per-row scale"
    smooth = f", smoothing factors {v.smooth} (reciprocals: {v.smooth_in})" if v.smooth else ""
    pro = {"none": "", "rmsnorm": "RMSNorm then ", "silu_mul": "SiLU(gate) * up then "}[v.prologue]
    return dict(
        name=v.name,
        summary=f"{pro}{v.dtype}, K = {v.k}, {mode}{smooth}",
        prologue=v.prologue,
        dtype=v.dtype,
        k=v.k,
        smooth=v.smooth or "",
        static=v.static,
        aligned=v.aligned,
        threads=v.threads,
        chunks=v.chunks,
        cache=v.cache,
        hold=v.hold,
        inv_s_in=v.inv_s_in,
        cache_doc=cache_doc,
        qmin=CODE_RANGE[0],
        qmax=CODE_RANGE[1],
    )


def render_act_quant(v: ActQuantConfig) -> str:
    """The variant's source (memoized on the config; ValueError naming the field the template cannot take)."""
    return v.source()
