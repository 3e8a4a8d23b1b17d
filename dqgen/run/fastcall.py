"""The per-call fast path of the eager entry points (issue 22, deliverable 4): one signature-keyed table of launches
checked once, then re-launched with the per-call pointers patched in.

A call's checks depend on its tensors' shapes, dtypes, contiguity, devices and the 16-byte alignment of the
pointers the kernel reads with vector loads, not on the addresses themselves; in a model, x and a fresh output have
a new address on every call. So an entry is keyed on what the checks read (and the weight's identity), and the
launch it holds (a ``device.BoundLaunch``, whose arguments live in patchable 8-byte slots) gets x's and the
output's pointers written into its slots before each cuLaunchKernel (which copies the arguments at the call).
A miss takes the entry point's checked path unchanged, and the launch it ran is remembered afterwards only where
it was one launch whose pointer slots can be told apart; everything else keeps the checked path on every call.

Keys hold the calling thread (a patch and its launch must not interleave with another thread's), and weak
references stand behind every identity in a key (an ``id`` is reused once its object is freed): an entry whose
weight, or checkpoint tensor, is gone is a miss. Torch-free at import: what the hits take from torch (its Tensor
type, ``empty``, the raw-stream accessor) is looked up on the first remember, before which no entry exists."""

from __future__ import annotations

import array
import math
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import device as dev
from .bound_x import BoundPerX, launch_patched

#: Entries a table keeps; past this many signatures (new tensor shapes, threads) it starts over.
TABLE_MAX = 256

ident: Callable[[], int] = threading.get_ident

#: What the hits take from torch, set by ``use_torch`` (the first remember): torch.Tensor, torch.empty and
#: torch's current raw CUstream of a device.
_Tensor: Any = None
_empty: Any = None
_raw_stream: Callable[[int], int] | None = None


def use_torch(torch: Any) -> None:
    global _Tensor, _empty, _raw_stream
    if _Tensor is None:
        _raw_stream = dev.torch_raw_stream_fn(torch)
        _empty, _Tensor = torch.empty, torch.Tensor


class FastTable(dict):
    """A bounded signature table that a copy or a pickle of its owner (a module, a Kernel) does not take along:
    its launches belong to this process's loaded modules and to the original's tensors."""

    def put(self, key: Any, value: Any) -> None:
        if len(self) >= TABLE_MAX:
            self.clear()
        self[key] = value

    def __deepcopy__(self, memo: dict) -> FastTable:
        return FastTable()

    def __copy__(self) -> FastTable:
        return FastTable()

    def __reduce__(self) -> tuple:
        return (FastTable, ())


@dataclass(slots=True, eq=False)
class Patched:
    """One checked launch with the slots a call patches: ``slots`` and ``params`` of a BoundLaunch, the argument
    index of each per-call pointer, and what a call allocates its output from."""

    fn: dev.BoundLaunch
    launch: Callable[..., tuple[Any]]
    params: int
    slots: array.array
    ordinal: int
    x_slot: int
    out_slot: int
    out_shape: tuple[int, ...]
    out_dtype: Any
    out_device: Any  # torch.device
    refs: tuple[Callable[[], Any], ...]  # weak references to every object the key names by identity
    #: x read through a TMA tensor map (the Hopper GEMM): the launch bound for x's address and its y slot (the
    #: fields above are the first address's launch; ``x_slot`` -1)
    per_x: BoundPerX | None = None


def patched(
    fn: dev.BoundLaunch,
    ordinal: int,
    x_ptr: int,
    out_ptr: int,
    out: Any,
    refs: tuple[Callable[[], Any], ...],
) -> Patched | None:
    """The entry of a bound launch whose x and output pointers are each in exactly one slot (else None: keep the
    checked path)."""
    x_slot, out_slot = fn.slot_of(x_ptr), fn.slot_of(out_ptr)
    if x_slot is None or out_slot is None:
        return None
    return Patched(
        fn, fn.launch, fn.params, fn.slots, ordinal, x_slot, out_slot, tuple(out.shape), out.dtype, out.device, refs
    )


# --------------------------------------------------------------------------- Kernel.matmul


def matmul_key(x: Any, w: Any, scales: Any, zeros: Any, bias: Any, out: Any) -> tuple:
    """What a fused-matmul launch on these tensors was checked for: the weight (a MatmulWeight by identity; the
    checkpoint tensors by identity, torch's in-place version and pointer, so a write into one, or new memory under
    it, repacks), x's shape, dtype, device, contiguity and pointer alignment (the GEMV's vector loads of x, the
    Hopper GEMM's tensor map), the bias by pointer, shape, dtype and contiguity (its pointer is bound), the given
    out's shape, dtype, device, contiguity and address modulo 16, the thread.
    Raises AttributeError for non-tensors and RuntimeError for an inference tensor's version (no fast path)."""
    if scales is None:
        wkey: Any = id(w)
    else:
        # the pointer too: ``t.data = other`` (or set_) keeps a tensor's id and version but not its memory
        wkey = (
            id(w), w._version, w.data_ptr(), id(scales), scales._version, scales.data_ptr(),
            None if zeros is None else (id(zeros), zeros._version, zeros.data_ptr()),
        )  # fmt: skip
    return (
        wkey,
        x.shape,
        x.dtype,
        x.get_device(),
        x.is_contiguous(),
        not x.data_ptr() % 16,
        None if bias is None else (bias.data_ptr(), bias.shape, bias.dtype, bias.is_contiguous()),
        # a given out's address within 16 bytes: the sm_80 GEMM binds whether y's stores go in 4-byte pairs
        None if out is None else (out.shape, out.dtype, out.get_device(), out.is_contiguous(), out.data_ptr() % 16),
        ident(),
    )


def matmul_hit(table: FastTable, x: Any, w: Any, scales: Any, zeros: Any, bias: Any, out: Any) -> Any:
    """y from the cached launch of this signature, or None (a miss: the caller takes the checked path)."""
    if type(x) is not _Tensor:
        return None
    try:
        hit = table.get(matmul_key(x, w, scales, zeros, bias, out))
    except (AttributeError, RuntimeError):  # no tensors, or an inference tensor (no version): checked path
        return None
    if hit is None:
        return None
    for ref in hit.refs:
        if ref() is None:  # the weight (or a checkpoint tensor) is gone: its id may be another object's now
            return None
    return run_patched(hit, x, out)


def run_patched(hit: Patched, x: Any, out: Any = None) -> Any:
    """Launch a checked entry on this call's x (its pointer patched in) into ``out``, or into a new output."""
    # the sizes as ints: torch parses them faster than a tuple (about 0.5 us a call)
    y = _empty(*hit.out_shape, dtype=hit.out_dtype, device=hit.out_device) if out is None else out
    stream = _raw_stream(hit.ordinal)  # type: ignore[misc]
    if hit.per_x is not None:
        launch_patched(hit.per_x(x.data_ptr()), (y.data_ptr(), 0, 0), stream)
        return y
    slots = hit.slots
    slots[hit.x_slot] = x.data_ptr()
    slots[hit.out_slot] = y.data_ptr()
    err = hit.launch(stream, hit.params, 0)[0]
    if err:
        hit.fn.failed(err, stream)
    return y


def matmul_remember(
    target: Any, table: FastTable, x: Any, w: Any, scales: Any, zeros: Any, bias: Any, out: Any, y: Any
) -> None:
    """After a checked ``kernel.matmul`` returned ``y``: remember its launch where it was one launch on a contiguous x,
    the GEMV's (M <= 16 rows the dispatch gives the GEMV) or the GEMM's of a packed weight (gemm.signature_launch);
    other calls (dequantize + cuBLAS, a gathered x, the checkpoint form past the GEMV) stay on the checked path."""
    from . import dispatch, gemm
    from . import matmul as mm

    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        return
    use_torch(torch)
    if type(x) is not _Tensor or x.dim() < 1 or not x.is_contiguous():
        return
    K = int(x.shape[-1])
    M = math.prod(x.shape[:-1])
    if M < 1 or (scales is not None and M > mm.TOKENS):  # the checkpoint form past one GEMV launch: not packed here
        return
    if scales is None:
        if not isinstance(w, mm.MatmulWeight):
            return
        mw, gemm_ok = w, target.gemm_ok and dispatch.beside(w) is not None
        refs: tuple[Callable[[], Any], ...] = (weakref.ref(w),)
    else:
        mw = mm.packed_gemv(target.artifact, target.key, w, scales, zeros)  # the PackCache's weight the call ran
        gemm_ok = target.gemm_ok
        refs = tuple(weakref.ref(t) for t in (w, scales, zeros, mw) if t is not None)
    if mw.N == 0 or mw.K != K:
        return
    # the dispatch's choice for M rows (dispatch.takes_gemv): the GEMV wherever the GEMM is not taken
    gemv = not gemm_ok or (M <= mm.TOKENS and dispatch.takes_gemv(target, x, w, scales, None, M))
    if not gemv and scales is not None:  # the checkpoint form's GEMM weight is the dispatch's own PackCache's
        return
    try:
        key = matmul_key(x, w, scales, zeros, bias, out)
    except (AttributeError, RuntimeError):
        return
    x2 = x.reshape(-1, K)
    entry: Patched | None = None
    if gemv:
        launches = mm._bind(target.artifact, mw, x2, K, M, bias, y) if M <= mm.TOKENS else []
        if len(launches) == 1:
            entry = patched(launches[0], mw.device, x2.data_ptr(), y.data_ptr(), y, refs)
    else:
        gw = dispatch.beside(w)
        try:  # a bind that fails keeps no entry: the call itself has succeeded
            got = None if gw is None else gemm.signature_launch(target.artifact.spec, gw, x2, M, bias, y)
            first = got(x2.data_ptr()) if isinstance(got, BoundPerX) else None
        except (RuntimeError, ValueError):
            return
        if gw is None or got is None:
            return
        if isinstance(got, BoundPerX):
            assert first is not None
            fn, y_slot, _, _ = first
            entry = Patched(
                fn, fn.launch, fn.params, fn.slots, gw.device, -1, y_slot, tuple(y.shape), y.dtype, y.device, refs,
                got,
            )  # fmt: skip
        else:
            entry = patched(got, gw.device, x2.data_ptr(), y.data_ptr(), y, refs)
    if entry is not None:
        table.put(key, entry)
