"""The Hopper W8A8 GEMM (templates/w8a8_gemm90.cu.j2): int8 x int8 -> int32 and e4m3 x e4m3 -> fp32 on
``wgmma.mma_async`` with both operands in shared memory, fed by TMA through an mbarrier ring (one producer
warpgroup, one or two consumer warpgroups), stream-K over the (tile, K tile) units, and the W8A8 epilogue
(per-token x per-channel scales, bias, fp16 / bf16 out) of the sm_80 kernel (dqgen.kernels.w8a8_gemm).

Two kinds of CTA tiles, as in the sm_80 kernel: swap-AB up to SWAP_MAX_M90 tokens (the weight is wgmma's m side,
128 channels a CTA, the tokens its n: 8 to 128), and 128 tokens x 128 or 256 channels above (x is the m side)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from .family import Epilogue, KernelConfig, Mainloop, SplitK
from .gemm90 import BLOCK_RESERVED_BYTES, PRODUCER_REGS, SM_SHARED_BYTES, consumer_regs
from .w8a8_gemm import MAX_K_S8, Elem, Out, w8a8_epilogue

#: Bytes (= elements) of K a stage: one 128-byte row of each operand, the 128-byte swizzle's span.
BK90: Final = 128
#: Tokens up to which the weight is wgmma's m side (swap-AB): wgmma's n holds the tokens, a CTA reads its weight
#: strip once for all of them.
SWAP_MAX_M90: Final = 128
#: K tiles an e4m3 partial sum runs in wgmma before it is added in fp32 registers (DeepSeek-V3 promotes every 128 k;
#: 256 k halves the waits for the wgmmas, at 1.3e-4..2.5e-4 of max|acc| on the H100: docs/experiments/issue24.md).
PROMOTE_K_TILES: Final = 2
#: wgmma's n of each kind of tile.
SWAP_TOKENS: Final = (8, 16, 32, 64, 128)

__all__ = ["MAX_K_S8", "W8A8Gemm90Config", "choose_w8a8_gemm90"]


@dataclass(frozen=True)
class W8A8Gemm90Config(KernelConfig):
    """One entry point: the element type, the output (the epilogue), swap-AB or not, ``bn`` (wgmma's n: tokens when
    swapped, channels otherwise), ``consumers`` math warpgroups of ``mw`` m64 blocks each (the CTA's 64 x consumers x
    mw rows of P), ``stages`` TMA stages and ``min_blocks`` CTAs an SM."""

    family: ClassVar[str] = "w8a8_gemm90"
    template: ClassVar[str] = "w8a8_gemm90.cu.j2"
    #: wgmma and setmaxnreg exist only in the architecture-specific target (compiled for sm_90a).
    arch_specific: ClassVar[bool] = True

    elem: Elem
    out: Out
    swap: bool
    bn: int
    consumers: int
    mw: int
    stages: int
    min_blocks: int

    def __post_init__(self) -> None:
        if self.bn % 8 or not 8 <= self.bn <= 256:
            raise ValueError(f"W8A8Gemm90Config.bn: expected a multiple of 8 in 8..256 (wgmma's n), got {self.bn}")
        if self.consumers not in (1, 2) or self.mw not in (1, 2):
            raise ValueError(f"W8A8Gemm90Config: consumers and mw must be 1 or 2, got {self.consumers}, {self.mw}")
        if self.mw * self.bn > 256:
            raise ValueError(f"W8A8Gemm90Config: {self.mw} x n{self.bn} accumulators exceed a thread's 128 registers")
        if self.elem == "e4m3" and self.mw * self.bn > 192:
            raise ValueError(
                f"W8A8Gemm90Config: e4m3 keeps its sums and a partial set: {self.mw} x n{self.bn} exceeds 96 "
                "accumulators a thread"
            )
        if self.stages < 2:
            raise ValueError(f"W8A8Gemm90Config.stages: the ring needs at least 2 stages, got {self.stages}")
        if self.shared_bytes > SM_SHARED_BYTES // self.min_blocks - BLOCK_RESERVED_BYTES:
            raise ValueError(f"W8A8Gemm90Config: {self.name} does not fit {self.min_blocks} CTAs an SM")

    @property
    def bm(self) -> int:
        """Rows of P a CTA (channels when swapped, tokens otherwise)."""
        return 64 * self.consumers * self.mw

    @property
    def name(self) -> str:
        kind = "swap" if self.swap else "tiles"
        return (
            f"dqgen_w8a8_{self.elem}_{self.out}_{kind}_{self.bm}x{self.bn}_c{self.consumers}"
            f"_s{self.stages}_b{self.min_blocks}_wgmma"
        )

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def shared_bytes(self) -> int:
        """The template's smem_bytes(): alignment slack, the stages, two mbarriers a stage."""
        return 1024 + self.stages * (self.bm + self.bn) * BK90 + self.stages * 16

    @property
    def min_sm(self) -> int:
        return 90

    @property
    def mainloop(self) -> Mainloop:
        return Mainloop("wgmma_tma_sm90", (self.bm, self.bn, BK90), (self.consumers, 4), self.stages, self.swap)

    @property
    def epilogue(self) -> Epilogue:
        return w8a8_epilogue(self.out)

    @property
    def split_k(self) -> SplitK:
        return "last_arriver"

    @property
    def accs(self) -> int:
        """Accumulators a consumer thread holds (a stream-K partial slot: accs x consumer threads values)."""
        return self.mw * self.bn // 2

    @property
    def consumer_threads(self) -> int:
        return 128 * self.consumers

    @property
    def source_name(self) -> str:
        return "w8a8_gemm90.cu"

    def context(self) -> dict[str, Any]:
        kind = "swap-AB" if self.swap else "tiles"
        return dict(
            name=self.name,
            summary=f"{self.elem} x {self.elem} -> {self.out}, {kind} {self.bm} x {self.bn}, {self.stages} stages",
            elem=self.elem,
            out=self.out,
            swap=self.swap,
            bm=self.bm,
            bn=self.bn,
            consumers=self.consumers,
            mw=self.mw,
            stages=self.stages,
            threads=self.threads,
            min_blocks=self.min_blocks,
            shared_bytes=self.shared_bytes,
            regs_producer=PRODUCER_REGS,
            regs_consumer=consumer_regs(self.consumers, self.min_blocks),
            acc_c="int" if self.elem == "s8" else "float",
            acc_ptx="s32" if self.elem == "s8" else "f32",
            acc_doc="exact int32 accumulation"
            if self.elem == "s8"
            else f"fp32 sums of each {PROMOTE_K_TILES * BK90} k in the tensor core, added in fp32 registers",
            promote=PROMOTE_K_TILES if self.elem == "e4m3" else 0,
        )


def _swap(elem: Elem, out: Out, bn: int) -> W8A8Gemm90Config:
    """A swap-AB tile of ``bn`` tokens: 128 channels in one consumer warpgroup (two m64 blocks) and two CTAs an SM
    up to 64 tokens (many small CTAs keep weight bytes in flight), two warpgroups and one CTA at 128."""
    if bn <= 64:
        stages = {8: 6, 16: 6, 32: 5, 64: 4}[bn]
        return W8A8Gemm90Config(elem, out, True, bn, 1, 2, stages, 2)
    return W8A8Gemm90Config(elem, out, True, bn, 2, 1, 6, 1)


#: The fraction of the SMs the wide tiles must fill to be chosen (one CTA an SM).
WIDE_FILL: Final = 0.875


def _wide(elem: Elem, out: Out) -> W8A8Gemm90Config:
    """128 tokens x 256 channels (int8, 4 stages of 48 KB), x 192 for e4m3 (5 stages of 40 KB; its sums and partial
    set: 192 registers a thread)."""
    if elem == "e4m3":
        return W8A8Gemm90Config(elem, out, False, 192, 2, 1, 5, 1)
    return W8A8Gemm90Config(elem, out, False, 256, 2, 1, 4, 1)


def choose_w8a8_gemm90(elem: Elem, out: Out, m: int, n: int = 0, sms: int = 0) -> W8A8Gemm90Config:
    """The CTA tile a call with ``m`` tokens runs (``n`` channels on ``sms`` SMs refine the large-M choice): swap-AB
    with the fewest tokens that hold M up to SWAP_MAX_M90; above, the wide tiles (_wide) where they fill at least
    WIDE_FILL of the SMs, else 128 x 128 (6 stages), whose pieces of K the grid shares (stream-K). On the H100
    (docs/experiments/issue24.md) the wide tiles ran 1.1-1.6x faster from 0.97 of a wave (M = 1024, N = 4096: 128
    of them on 132 SMs), the narrow ones 1.2-1.4x faster at half a wave or less."""
    if m <= SWAP_MAX_M90:
        return _swap(elem, out, next(b for b in SWAP_TOKENS if b >= m))
    wide = _wide(elem, out)
    if n and sms and -(-m // 128) * -(-n // wide.bn) < WIDE_FILL * sms:
        return W8A8Gemm90Config(elem, out, False, 128, 2, 1, 6, 1)
    return wide


def all_configs(elem: Elem, out: Out) -> tuple[W8A8Gemm90Config, ...]:
    """Every configuration choose_w8a8_gemm90 returns for one element and output type (the tests, the sanitizer
    script and the PTX hashes render each once)."""
    narrow = W8A8Gemm90Config(elem, out, False, 128, 2, 1, 6, 1)
    return (*(_swap(elem, out, b) for b in SWAP_TOKENS), narrow, _wide(elem, out))
