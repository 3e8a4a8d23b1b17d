"""The W8A8 GEMM (templates/w8a8_gemm.cu.j2): one configuration (element type, output type, tile) per entry point,
and the rule that picks a call's configuration.

Two kinds of tiles: ``tiles`` (M > SWAP_MAX_M: 128 tokens x 128 or 256 channels a block, 8 warps) and ``swap``
(small M, swap-AB as in the GEMV: the weight is the mma's A operand, 128 channels x 16/32/64 tokens a block), so a
block reads its strip of the weight once for every token. Both split K over blocks when the tiles alone leave SMs
idle (a deterministic reduction: partials stored, added by the last block of a tile). ``choose_w8a8_gemm`` picks the
configuration from M, N, K and the device's SMs and shared memory (rules fit to H100 timings, docs/w8a8.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .family import Epilogue, KernelConfig, Mainloop, MainloopKind, SplitK

Elem = Literal["s8", "e4m3"]
#: "acc": the raw accumulators (int32 / fp32) instead of the epilogue: the hook of the bit-exact integer test.
Out = Literal["f16", "bf16", "acc"]

#: Bytes (= elements) of K a pipeline stage holds: 8 chunks of 16 bytes a row (the swizzle's assumption).
BK = 128
#: Tokens up to which the swap-AB tiles run (the issue's weight-bandwidth regime).
SWAP_MAX_M = 64
#: K range of a split at least, in stages: fewer would spend more on the partials than on the product.
MIN_KTILES_PER_SPLIT = 4
#: The largest K whose int32 accumulation cannot wrap: |a * b| <= 128 * 128, and K * 2^14 < 2^31.
MAX_K_S8 = (1 << 17) - 1


def w8a8_epilogue(out: Out) -> Epilogue:
    """The W8A8 GEMMs' epilogue: per-token (row) and per-channel (column) scales and a bias; "acc": none of them."""
    scaled = out != "acc"
    return Epilogue(out, bias=scaled, row_scale=scaled, col_scale=scaled)


@dataclass(frozen=True)
class W8A8GemmConfig(KernelConfig):
    """What one compiled entry point is specialized on: the element type, the output (the epilogue), whether the
    operands are swapped, the block tile (bm x bn x bk: rows of P, rows of Q, bytes of K a stage), the warps and
    the stages of the main loop, and its kind (the template has the mma_sync_sm80 loop alone)."""

    family: ClassVar[str] = "w8a8_gemm"
    template: ClassVar[str] = "w8a8_gemm.cu.j2"

    elem: Elem
    out: Out
    swap: bool
    bm: int  # rows of P a block (tokens, or channels when swapped)
    bn: int  # rows of Q a block
    warps_m: int
    warps_n: int
    stages: int
    bk: int = BK  # bytes of K a stage (a multiple of 128)
    kind: MainloopKind = "mma_sync_sm80"

    @property
    def name(self) -> str:
        kind = "swap" if self.swap else "tiles"
        warps = f"w{self.warps_m}x{self.warps_n}"
        extra = (f"_k{self.bk}" if self.bk != BK else "") + ("" if self.kind == "mma_sync_sm80" else f"_{self.kind}")
        return f"dqgen_w8a8_{self.elem}_{self.out}_{kind}_{self.bm}x{self.bn}_{warps}_s{self.stages}{extra}"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * self.bk

    @property
    def min_sm(self) -> int:
        """fp8 (e4m3) mma needs sm_89."""
        return max(self.mainloop.min_sm, 89 if self.elem == "e4m3" else 80)

    @property
    def mainloop(self) -> Mainloop:
        return Mainloop(self.kind, (self.bm, self.bn, self.bk), (self.warps_m, self.warps_n), self.stages, self.swap)

    @property
    def epilogue(self) -> Epilogue:
        return w8a8_epilogue(self.out)

    @property
    def split_k(self) -> SplitK:
        return "last_arriver"

    @property
    def min_blocks(self) -> int:
        """Resident blocks an SM must fit (caps the registers): two int8 blocks of 64 accumulators a thread fit in
        127 registers without spills, two of 4 warps in 255; larger int8 tiles (128 accumulators a thread in 8
        warps) and fp8 on sm_90 (emulated through f16 mma) need more than two would leave them."""
        if self.swap or self.elem != "s8":
            return 1
        return 2 if self.accs <= 64 or self.threads <= 128 else 1

    def context(self) -> dict[str, Any]:
        return _context(self)

    @property
    def source_name(self) -> str:
        return "w8a8_gemm.cu"

    @property
    def accs(self) -> int:
        """Accumulators a thread holds (the partial tile a split stores: accs x threads values)."""
        return (self.bm // self.warps_m // 16) * (self.bn // self.warps_n // 8) * 4


#: Dynamic shared memory a block may opt in to on sm_89 (the least of sm_80 / 89 / 90): the configurations chosen
#: without the device's figure fit it.
SHARED_SM89 = 99 * 1024


def _cost(
    cfg: W8A8GemmConfig, m: int, n: int, k: int, sms: int, per_sm: int, shared_time: float, alone_time: float
) -> float:
    """Time of a launch in k-tiles of a 128 x 256 block alone on an SM: the blocks the busiest SM runs (``per_sm``
    resident at once) times a block's k-tiles, each block taking ``shared_time``, or ``alone_time`` where it has
    its SM to itself (a single round)."""
    rows, cols = (n, m) if cfg.swap else (m, n)
    tiles = -(-rows // cfg.bm) * -(-cols // cfg.bn)
    splits, per = choose_splits(tiles, k, sms * per_sm, cfg.bk)
    rounds = -(-tiles * splits // sms)
    return per * (alone_time if rounds == 1 else rounds * shared_time)


def choose_w8a8_gemm(
    elem: Elem, out: Out, m: int, n: int = 0, k: int = 0, sms: int = 0, shared: int = SHARED_SM89
) -> W8A8GemmConfig:
    """The tile configuration a call with ``m`` tokens runs; ``n``, ``k``, the GPU's SM count ``sms`` and the
    dynamic shared memory a block may opt in to (``shared``) refine it (0: unknown, the defaults that fit any
    sm_80+ GPU). Rules fit to the H100 timings in docs/performance.md (notes)."""
    deep = shared >= 192 * 1024  # sm_90: 227 KB a block
    if m <= 16:
        if elem == "s8" and shared >= 108 * 1024:
            # 256 bytes of K a stage: twice the contiguous bytes of each weight row per copy (2-15% faster at M <= 16)
            return W8A8GemmConfig(elem, out, True, 128, 16, 4, 1, 3, 2 * BK)
        return W8A8GemmConfig(elem, out, True, 128, 16, 4, 1, 4)
    if m <= 32:
        return W8A8GemmConfig(elem, out, True, 128, 32, 4, 1, 4)
    if m <= SWAP_MAX_M:
        if elem == "s8" and n and sms and 8 * -(-n // 128) <= 3 * sms:
            # channel strips for at most 3/8 of the SMs (N <= 6272 on 132): two 32-token column tiles a strip
            return W8A8GemmConfig(elem, out, True, 128, 32, 4, 1, 4)
        # 4 stages: 3 in flight while one is multiplied; (128 + 64) x 128 x 4 = 96 KB fits sm_89's 99 KB too
        return W8A8GemmConfig(elem, out, True, 128, 64, 4, 2 if elem == "s8" else 1, 4)
    small = W8A8GemmConfig(elem, out, False, 128, 128, 2, 4, 3)
    if not (deep and n and k and sms):
        return small
    # 128 x 256 tiles (warps of 64 x 64: half the shared-memory reads an mma) where they fill the SMs as well
    big = W8A8GemmConfig(elem, out, False, 128, 256, 2, 4, 4 if elem == "s8" else 3)
    # measured on the H100 (docs/performance.md, notes): two 128 x 128 blocks sharing an SM take 1.1 times one
    # 128 x 256 block's time, a 128 x 128 block alone 0.6 of it
    cost_big = _cost(big, m, n, k, sms, 1, 1.0, 1.0)
    cost_small = _cost(small, m, n, k, sms, 2, 0.55, 0.6)
    return big if cost_big <= cost_small else small


def _context(cfg: W8A8GemmConfig) -> dict[str, Any]:
    if cfg.bm % (16 * cfg.warps_m) or cfg.bn % (16 * cfg.warps_n):
        raise ValueError(f"config {cfg.name}: warp tiles must be multiples of 16 x 16")
    if cfg.bk < BK or cfg.bk % BK:
        raise ValueError(f"config {cfg.name}: bk must be a multiple of {BK} bytes, got {cfg.bk}")
    if cfg.stages < 2:
        raise ValueError(f"config {cfg.name}: the pipeline needs at least 2 stages, got {cfg.stages}")
    kind = "swap-AB" if cfg.swap else "tiles"
    summary = f"{cfg.elem} x {cfg.elem} -> {cfg.out}, {kind} {cfg.bm} x {cfg.bn}, {cfg.stages} stages"
    if cfg.kind != "mma_sync_sm80":
        raise ValueError(f"config {cfg.name}: w8a8_gemm.cu.j2 has the mma_sync_sm80 main loop alone, got {cfg.kind!r}")
    return dict(
        name=cfg.name,
        summary=summary,
        elem=cfg.elem,
        out=cfg.out,
        swap=cfg.swap,
        bm=cfg.bm,
        bn=cfg.bn,
        bk=cfg.bk,
        warps_m=cfg.warps_m,
        warps_n=cfg.warps_n,
        stages=cfg.stages,
        min_blocks=cfg.min_blocks,
        acc_c="int" if cfg.elem == "s8" else "float",
        acc_ptx="s32" if cfg.elem == "s8" else "f32",
        acc_doc="exact int32 accumulation" if cfg.elem == "s8" else "fp32 accumulation in the tensor core",
    )


def render_w8a8_gemm(cfg: W8A8GemmConfig) -> str:
    """The configuration's source (memoized on the config; ValueError naming the field of a config the template
    cannot render_w8a8_gemm)."""
    return cfg.source()


def ktiles(k: int, bk: int = BK) -> int:
    return -(-k // bk)


def choose_splits(tiles: int, k: int, resident_blocks: int, bk: int = BK) -> tuple[int, int]:
    """(splits, k-tiles a split) for ``tiles`` output tiles: as many splits as fit the GPU's resident blocks in one
    wave (a second, partial wave would leave most SMs idle while it runs), each split keeping at least
    MIN_KTILES_PER_SPLIT stages; no split is left empty."""
    kt = ktiles(k, bk)
    want = resident_blocks // max(tiles, 1)
    splits = max(1, min(want, kt // MIN_KTILES_PER_SPLIT))
    per = -(-kt // splits)
    return -(-kt // per), per
