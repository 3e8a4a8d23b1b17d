"""Render the W8A8 GEMM (templates/w8a8_gemm.cu.j2) for one (element type, output type, tile configuration),
compile it with NVRTC and launch it through dqgen.run.device on raw device pointers.

Two kinds of tiles: ``tiles`` (M > SWAP_MAX_M: 128 tokens x 128 or 256 channels a block, 8 warps) and ``swap``
(small M, swap-AB as in the GEMV: the weight is the mma's A operand, 128 channels x 16/32/64 tokens a block), so a
block reads its strip of the weight once for every token. Both split K over blocks when the tiles alone leave SMs
idle (a deterministic reduction: partials stored, added by the last block of a tile). ``choose`` picks the
configuration from M, N, K and the device's SMs and shared memory (rules fit to H100 timings, docs/w8a8.md)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..emit.nvrtc import compile_source
from ..emit.render import template_env

if TYPE_CHECKING:
    from ..run import device as dev

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


@dataclass(frozen=True)
class Config:
    """What one compiled entry point is specialized on."""

    elem: Elem
    out: Out
    swap: bool
    bm: int  # rows of P a block (tokens, or channels when swapped)
    bn: int  # rows of Q a block
    warps_m: int
    warps_n: int
    stages: int
    bk: int = BK  # bytes of K a stage (a multiple of 128)

    @property
    def name(self) -> str:
        kind = "swap" if self.swap else "tiles"
        warps = f"w{self.warps_m}x{self.warps_n}"
        extra = f"_k{self.bk}" if self.bk != BK else ""
        return f"dqgen_w8a8_{self.elem}_{self.out}_{kind}_{self.bm}x{self.bn}_{warps}_s{self.stages}{extra}"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * self.bk

    @property
    def min_blocks(self) -> int:
        """Resident blocks an SM must fit (caps the registers): two int8 blocks of 64 accumulators a thread fit in
        127 registers without spills, two of 4 warps in 255; larger int8 tiles (128 accumulators a thread in 8
        warps) and fp8 on sm_90 (emulated through f16 mma) need more than two would leave them."""
        if self.swap or self.elem != "s8":
            return 1
        return 2 if self.accs <= 64 or self.threads <= 128 else 1

    @property
    def accs(self) -> int:
        """Accumulators a thread holds (the partial tile a split stores: accs x threads values)."""
        return (self.bm // self.warps_m // 16) * (self.bn // self.warps_n // 8) * 4


#: Dynamic shared memory a block may opt in to on sm_89 (the least of sm_80 / 89 / 90): the configurations chosen
#: without the device's figure fit it.
SHARED_SM89 = 99 * 1024


def _cost(cfg: Config, m: int, n: int, k: int, sms: int, per_sm: int, shared_time: float, alone_time: float) -> float:
    """Time of a launch in k-tiles of a 128 x 256 block alone on an SM: the blocks the busiest SM runs (``per_sm``
    resident at once) times a block's k-tiles, each block taking ``shared_time``, or ``alone_time`` where it has
    its SM to itself (a single round)."""
    rows, cols = (n, m) if cfg.swap else (m, n)
    tiles = -(-rows // cfg.bm) * -(-cols // cfg.bn)
    splits, per = choose_splits(tiles, k, sms * per_sm, cfg.bk)
    rounds = -(-tiles * splits // sms)
    return per * (alone_time if rounds == 1 else rounds * shared_time)


def choose(elem: Elem, out: Out, m: int, n: int = 0, k: int = 0, sms: int = 0, shared: int = SHARED_SM89) -> Config:
    """The tile configuration a call with ``m`` tokens runs; ``n``, ``k``, the GPU's SM count ``sms`` and the
    dynamic shared memory a block may opt in to (``shared``) refine it (0: unknown, the defaults that fit any
    sm_80+ GPU). Rules fit to the H100 timings in docs/performance.md (notes)."""
    deep = shared >= 192 * 1024  # sm_90: 227 KB a block
    if m <= 16:
        if elem == "s8" and shared >= 108 * 1024:
            # 256 bytes of K a stage: twice the contiguous bytes of each weight row per copy (2-15% faster at M <= 16)
            return Config(elem, out, True, 128, 16, 4, 1, 3, 2 * BK)
        return Config(elem, out, True, 128, 16, 4, 1, 4)
    if m <= 32:
        return Config(elem, out, True, 128, 32, 4, 1, 4)
    if m <= SWAP_MAX_M:
        if elem == "s8" and n and sms and 8 * -(-n // 128) <= 3 * sms:
            # channel strips for at most 3/8 of the SMs (N <= 6272 on 132): two 32-token column tiles a strip
            return Config(elem, out, True, 128, 32, 4, 1, 4)
        # 4 stages: 3 in flight while one is multiplied; (128 + 64) x 128 x 4 = 96 KB fits sm_89's 99 KB too
        return Config(elem, out, True, 128, 64, 4, 2 if elem == "s8" else 1, 4)
    small = Config(elem, out, False, 128, 128, 2, 4, 3)
    if not (deep and n and k and sms):
        return small
    # 128 x 256 tiles (warps of 64 x 64: half the shared-memory reads an mma) where they fill the SMs as well
    big = Config(elem, out, False, 128, 256, 2, 4, 4 if elem == "s8" else 3)
    # measured on the H100 (docs/performance.md, notes): two 128 x 128 blocks sharing an SM take 1.1 times one
    # 128 x 256 block's time, a 128 x 128 block alone 0.6 of it
    cost_big = _cost(big, m, n, k, sms, 1, 1.0, 1.0)
    cost_small = _cost(small, m, n, k, sms, 2, 0.55, 0.6)
    return big if cost_big <= cost_small else small


def render(cfg: Config) -> str:
    if cfg.bm % (16 * cfg.warps_m) or cfg.bn % (16 * cfg.warps_n):
        raise ValueError(f"config {cfg.name}: warp tiles must be multiples of 16 x 16")
    if cfg.bk < BK or cfg.bk % BK:
        raise ValueError(f"config {cfg.name}: bk must be a multiple of {BK} bytes, got {cfg.bk}")
    if cfg.stages < 2:
        raise ValueError(f"config {cfg.name}: the pipeline needs at least 2 stages, got {cfg.stages}")
    kind = "swap-AB" if cfg.swap else "tiles"
    summary = f"{cfg.elem} x {cfg.elem} -> {cfg.out}, {kind} {cfg.bm} x {cfg.bn}, {cfg.stages} stages"
    return (
        template_env()
        .get_template("w8a8_gemm.cu.j2")
        .render(
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
    )


def compile_config(cfg: Config, arch: str = "sm_90", want: Any = "cubin") -> Any:
    """NVRTC result (PTX or cubin) of one configuration for ``arch`` (e4m3 needs sm_89 or newer)."""
    if cfg.elem == "e4m3" and int(arch[3:].rstrip("af")) < 89:
        raise ValueError(f"arch: fp8 (e4m3) mma needs sm_89 or newer, got {arch}")
    return compile_source(render(cfg), arch=arch, want=want, name="w8a8_gemm.cu")


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


#: gridDim.y's limit (the splits of a launch).
MAX_SPLITS = 65535


def launch_args(
    cfg: Config,
    m: int,
    n: int,
    k: int,
    x_ptr: int,
    x_ld: int,
    w_ptr: int,
    w_ld: int,
    x_scale_ptr: int,
    w_scale_ptr: int,
    bias_ptr: int,
    y_ptr: int,
    ws_ptr: int,
    counters_ptr: int,
    plan: tuple[int, int, int],
) -> list[Any]:
    """The kernel's arguments in its signature's order and widths, after checking what the kernel assumes and
    cannot check itself (a one-line ValueError before anything launches): cp.async copies 16 bytes from x and w
    at row * ld + 16 c, so both pointers and both row strides must be multiples of 16 (a misaligned address
    faults the context), K a positive multiple of 16 (a chunk is all in or all out of K), and the plan's splits
    must cover K within gridDim.y's limit (a split plan needs its workspace and counters)."""
    tiles, splits, per = plan
    if k <= 0 or k % 16:
        raise ValueError(f"k: expected a positive multiple of 16 (the caller pads K with zeros), got {k}")
    for name, value in (("x_ptr", x_ptr), ("w_ptr", w_ptr), ("x_ld", x_ld), ("w_ld", w_ld)):
        if value % 16:
            raise ValueError(f"{name}: expected a multiple of 16 (cp.async copies 16-byte chunks), got {value}")
    rows, cols = (n, m) if cfg.swap else (m, n)
    want_tiles = -(-rows // cfg.bm) * -(-cols // cfg.bn)
    if tiles != want_tiles or not 1 <= splits <= MAX_SPLITS or per < 1 or splits * per < ktiles(k, cfg.bk):
        raise ValueError(
            f"plan: expected ({want_tiles} tiles, 1..{MAX_SPLITS} splits, k-tiles a split) covering "
            f"{ktiles(k, cfg.bk)} k-tiles, got {plan}"
        )
    if splits > 1 and not (ws_ptr and counters_ptr):
        raise ValueError(f"ws_ptr, counters_ptr: a plan of {splits} splits needs both buffers, got null")
    if cfg.swap:  # the weight is the mma's A operand (P), the tokens its B (Q)
        p, q, ldp, ldq = w_ptr, x_ptr, w_ld, x_ld
    else:
        p, q, ldp, ldq = x_ptr, w_ptr, x_ld, w_ld
    return [
        np.uint64(p),
        np.uint64(q),
        np.int64(rows),
        np.int64(cols),
        np.int64(k),
        np.int64(ldp),
        np.int64(ldq),
        np.uint64(x_scale_ptr),
        np.uint64(w_scale_ptr),
        np.uint64(bias_ptr),
        np.uint64(y_ptr),
        np.int64(n),
        np.uint64(ws_ptr),
        np.uint64(counters_ptr),
        np.int32(per),
    ]


class GemmKernel:
    """One configuration loaded on a device. Pointers are raw device addresses (ints)."""

    def __init__(self, cfg: Config, device: int = 0) -> None:
        from ..run import device as dev

        self.cfg = cfg
        self.device = device
        self._kernel = dev.LoadedKernel(compile_config(cfg, dev.device_arch(device)).cubin, cfg.name, device)
        if cfg.shared_bytes > 48 * 1024:
            self._kernel.set_max_dynamic_shared(cfg.shared_bytes)
        self.resident = max(1, self._kernel.max_active_blocks(cfg.threads, cfg.shared_bytes)) * dev.sm_count(device)

    def plan(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """(tiles, splits, k-tiles a split) of a call."""
        rows, cols = (n, m) if self.cfg.swap else (m, n)
        tiles = -(-rows // self.cfg.bm) * -(-cols // self.cfg.bn)
        splits, per = choose_splits(tiles, k, self.resident, self.cfg.bk)
        return tiles, splits, per

    def workspace_elems(self, tiles: int, splits: int) -> int:
        """4-byte elements of the split-K partials (0 without a split)."""
        return 0 if splits == 1 else tiles * splits * self.cfg.accs * self.cfg.threads

    def __call__(
        self,
        m: int,
        n: int,
        k: int,
        x_ptr: int,
        x_ld: int,
        w_ptr: int,
        w_ld: int,
        x_scale_ptr: int,
        w_scale_ptr: int,
        bias_ptr: int,
        y_ptr: int,
        ws_ptr: int,
        counters_ptr: int,
        plan: tuple[int, int, int],
        stream: int,
    ) -> None:
        """y [m, n] (row stride n) from x [m, k] (row stride x_ld bytes) and w [n, k] (row stride w_ld); k, x_ld,
        w_ld multiples of 16 and the pointers 16-byte aligned (the caller pads). ``counters``: at least ``tiles``
        zero uint32 (left zero); ``ws``: workspace_elems(tiles, splits) elements."""
        tiles, splits, _ = plan
        args = launch_args(
            self.cfg,
            m,
            n,
            k,
            x_ptr,
            x_ld,
            w_ptr,
            w_ld,
            x_scale_ptr,
            w_scale_ptr,
            bias_ptr,
            y_ptr,
            ws_ptr,
            counters_ptr,
            plan,
        )
        self._kernel((tiles, splits), (self.cfg.threads,), args, stream=stream, shared_mem=self.cfg.shared_bytes)

    def bind(self, plan: tuple[int, int, int], args: list[Any]) -> dev.BoundLaunch:
        """The launch of ``plan`` with ``args`` (from launch_args) packed once: calling it costs one cuLaunchKernel."""
        tiles, splits, _ = plan
        return self._kernel.bind((tiles, splits), (self.cfg.threads,), args, shared_mem=self.cfg.shared_bytes)


@functools.cache
def loaded(cfg: Config, device: int) -> GemmKernel:
    """The configuration compiled (NVRTC's disk cache makes a second process cheap) and loaded once per device, for the
    process: a CUDA graph that captured its launch keeps the function, not this object, so it is never dropped
    (a bounded cache unloaded it once the signature caches let go, under a graph that still replays it)."""
    return GemmKernel(cfg, device)
