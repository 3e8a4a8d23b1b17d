"""Dequantizing a checkpoint: each layer through its dqgen kernel (or the CPU path), written as a dense
safetensors file streamed tensor by tensor into a temporary file that replaces the output only when complete."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.spec import Spec
from .hf_config import parse_config, read_config
from .infer import LAYER_PARTS, TARGETS, QuantLayer, build_layer, check_code_width, layer_names, spec_summary
from .safetensors_io import BF16, ST_NAMES, Entry, Tensors, header_bytes, le_bytes, safetensors_files

_KERNELS: dict[str, Any] = {}


def _kernel(spec: Spec) -> Any:
    key = spec.model_dump_json(exclude={"name", "description"})
    if key not in _KERNELS:
        from ..run.runtime import Kernel

        _KERNELS[key] = Kernel(spec)  # through the pipeline, like dqgen.compile
    return _KERNELS[key]


def _row_groups(layer: QuantLayer, K: int) -> np.ndarray:
    """The scales row (group) of each row of K."""
    if layer.g_idx is not None:
        return layer.g_idx.astype(np.int64)
    assert layer.product_scales is not None
    return np.arange(K) // (K // layer.product_scales.shape[0])


def _scale_once(diff: np.ndarray, layer: QuantLayer) -> np.ndarray:
    """round_target(diff * product_scales[row group]) for diff = q - z [K, N] (fp16 integers), on the CPU:
    the float64 product is exact (9 x 24 significant bits at most), and the reference's rounding rounds
    it once (numpy and ml_dtypes go float64 -> float32 -> bf16, which can round twice)."""
    from ..check.reference import _FORMAT_BITS, _round_array
    from ..core.spec import Target

    assert layer.product_scales is not None
    K, N = diff.shape
    rows = _row_groups(layer, K)
    scales = layer.product_scales.astype(np.float64)
    bits = np.empty((K, N), np.uint16)
    step = max(1, (1 << 22) // max(N, 1))  # rows per chunk: bounded float64 temporaries
    for k in range(0, K, step):
        exact = diff[k : k + step].astype(np.float64) * scales[rows[k : k + step]]
        bits[k : k + step] = _round_array(exact.reshape(-1), *_FORMAT_BITS[Target(layer.target)]).reshape(exact.shape)
    return bits.view(TARGETS[layer.target])


def _dequantize(layer: QuantLayer, device: str, transpose: bool) -> np.ndarray:
    if device == "cpu":
        from ..check.reference import dequantize_reference

        w = dequantize_reference(layer.spec, layer.qweight, layer.scales, layer.zeros, layer.g_idx)
        if layer.product_scales is not None:
            w = _scale_once(w, layer)
        if transpose:
            w = np.ascontiguousarray(w.T)
    elif device == "cuda":
        try:
            import torch
        except ImportError:
            raise ValueError("device 'cuda' needs torch (pip install torch); or dequantize with device 'cpu'") from None

        def up(a: np.ndarray | None) -> Any:
            if a is None:
                return None
            a = np.ascontiguousarray(a)
            if a.dtype == BF16:
                return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
            return torch.from_numpy(a).cuda()

        def down(t: Any) -> np.ndarray:
            t = t.cpu()
            return t.view(torch.int16).numpy().view(BF16) if t.dtype == torch.bfloat16 else t.numpy()

        kernel = _kernel(layer.spec)
        out = kernel(up(layer.qweight), up(layer.scales), up(layer.zeros), g_idx=up(layer.g_idx))
        ps = layer.product_scales
        if ps is not None and ps.dtype.itemsize <= 2:
            # q - z (9 significant bits at most) times an fp16 / bf16 / fp8 scale (11 at most) is exact in
            # fp32, and torch's fp32 -> fp16 / bf16 conversion rounds to nearest even: one rounding.
            rows = torch.from_numpy(_row_groups(layer, out.shape[0])).cuda()
            out = (out.float() * torch.from_numpy(ps.astype(np.float32)).cuda()[rows]).to(
                torch.bfloat16 if layer.target == "bf16" else torch.float16
            )
            ps = None
        if ps is not None:  # fp32 scales: the exact product needs float64
            out = torch.from_numpy(_scale_once(down(out), layer).view(np.int16)).view(
                torch.bfloat16 if layer.target == "bf16" else torch.float16
            )
        if transpose:
            out = out.t().contiguous()
        w = down(out)
    else:
        raise ValueError(f"[device] got {device!r}; expected 'cuda' or 'cpu'")
    bad = ~np.isfinite(w.astype(np.float32))
    if bad.any():
        raise ValueError(
            f"layer {layer.name}: {int(bad.sum())} dequantized values overflow {layer.target} (|value| too large)"
            + ("; dequantize to bf16 instead" if layer.target == "fp16" else "")
        )
    return w


def dequantize_layer(layer: QuantLayer, device: str = "cuda") -> np.ndarray:
    """``W[K, N]`` in ``layer.target`` (dqgen's orientation; ``dequantize_file`` writes its transpose).
    ``device="cuda"`` runs ``dqgen.compile(layer.spec)`` on torch CUDA tensors; ``"cpu"`` runs
    ``dqgen.check.reference.dequantize_reference``. Both give the same bits."""
    return _dequantize(layer, device, transpose=False)


def _check_out(out: Path) -> None:
    """Refuse an output path that cannot be a file before any input is read."""
    if out.is_dir():
        raise ValueError(f"output {out}: is a folder; expected the path of the .safetensors file to write")
    if out.exists() and not out.is_file():  # a device or a FIFO would be replaced by a regular file
        raise ValueError(f"output {out}: exists and is not a regular file")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ValueError(f"output {out}: {parent} is not a folder")


def _open_temp(out: Path) -> tuple[Any, Path]:
    """A new file of its own next to ``out`` (renamed onto it when complete), with the permissions a
    plain open() would give it (mkstemp makes it 0600)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
    except OSError as e:
        raise ValueError(f"output {out}: cannot write in {out.parent}: {e.strerror or e}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return os.fdopen(fd, "wb"), Path(name)
    except BaseException:  # an interrupt here too leaves no file behind
        os.close(fd)
        os.unlink(name)
        raise


def dequantize_file(
    file: Path | str,
    out: Path | str,
    target: str = "fp16",
    device: str = "cuda",
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    config: dict | None = None,
) -> list[str]:
    """Dequantize every quantized layer of a checkpoint into ``out`` (a .safetensors file).

    ``out`` holds ``<prefix>.weight`` ``[N, K]`` (out_features x in_features, ``torch.nn.Linear``'s
    layout) in ``target`` for each layer, and every non-quantized tensor of the input unchanged; the
    layers' qweight / qzeros / scales / g_idx are dropped. ``out`` and all layers are checked before
    anything is written; the file is written under a temporary name of its own in ``out``'s folder and
    renamed onto ``out`` when complete (atomically: concurrent runs to one ``out`` each install a whole
    file of their own, the last one stays), and removed on any error or interrupt. With ``progress`` a
    rich progress bar (one step per layer) runs on stderr when it is a terminal. Returns one summary
    line per layer (also passed to ``log`` as each layer is done)."""
    path, out = Path(file), Path(out)
    if target not in TARGETS:
        raise ValueError(f"[target] got {target!r}; expected 'fp16' or 'bf16'")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"[device] got {device!r}; expected 'cuda' or 'cpu'")
    _check_out(out)
    qc = parse_config(config if config is not None else read_config(path))
    files = safetensors_files(path)
    if out.resolve() in {f.resolve() for f in files}:
        raise ValueError(f"{out}: the output would overwrite an input file")
    with Tensors(files) as tensors:
        names = layer_names(tensors)
        if not names:
            raise ValueError(f"{path}: no quantized layers (no tensor named <prefix>.qweight)")
        # Pass 1: check every layer (reads only the small tensors) before writing anything.
        plans = {n: build_layer(qc, tensors, n, target, load_qweight=False) for n in names}
        check_code_width(qc, tensors, list(plans.values()), path if path.is_dir() else path.parent)
        consumed = {f"{n}.{p}" for n in names for p in LAYER_PARTS}
        items: list[tuple[str, str, tuple[int, ...], int]] = []
        sources: dict[str, Any] = {}
        for n, layer in plans.items():
            wname = f"{n}.weight"
            if wname in tensors:
                raise ValueError(f"layer {n}: the checkpoint already has a tensor {wname}")
            items.append((wname, ST_NAMES[TARGETS[target]], (layer.N, layer.K), layer.N * layer.K * 2))
            sources[wname] = n
        for name, e in tensors.entries.items():
            if name not in consumed:
                items.append((name, e.dtype, e.shape, e.end - e.begin))
                sources[name] = e
        items.sort(key=lambda it: it[0])
        meta = {
            "format": "pt",
            "dqgen": f"dequantized {qc.method.upper()} layers to {target} [out_features, in_features]",
        }
        lines: list[str] = []
        fh, tmp = _open_temp(out)
        bar = None
        try:
            if progress:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )

                console = Console(stderr=True)
                if console.is_terminal:  # no bar (nor its stray newline) in logs and pipes
                    bar = Progress(
                        TextColumn("dequant"),
                        BarColumn(),
                        MofNCompleteColumn(),
                        TimeElapsedColumn(),
                        TextColumn("{task.description}"),
                        console=console,
                        transient=True,
                    )
                    bar.start()
                    task = bar.add_task("", total=len(names))
            with fh:
                fh.write(header_bytes(items, meta))
                for name, _dt, shape, nbytes in items:
                    src = sources[name]
                    if isinstance(src, Entry):
                        fh.write(src.file.raw(src))
                        continue
                    layer = plans[src]
                    if bar is not None:
                        bar.update(task, description=src)
                    line = f"{src}: {layer.K}x{layer.N} {spec_summary(layer.spec, layer.target)}" + (
                        f" [{'; '.join(layer.notes)}]" if layer.notes else ""
                    )
                    layer.qweight = tensors[f"{src}.qweight"]
                    w = _dequantize(layer, device, transpose=True)
                    layer.qweight = layer.qweight[:0]  # free it (keeps the dtype)
                    assert w.shape == shape and w.nbytes == nbytes, (w.shape, shape)
                    fh.write(le_bytes(w))
                    del w
                    lines.append(line)
                    if log is not None:
                        log(line)
                    if bar is not None:
                        bar.advance(task)
            os.replace(tmp, out)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            if bar is not None:
                bar.stop()
    return lines
