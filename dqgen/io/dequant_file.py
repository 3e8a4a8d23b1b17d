"""Dequantizing a checkpoint: each layer through its dqgen kernel (or the CPU path), written as a dense model
folder (shards, index, config.json without quantization_config) or one safetensors file, streamed tensor by tensor
into a temporary file or folder that replaces the output only when complete."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.spec import Spec
from .hf_config import parse_config, read_config
from .infer import LAYER_PARTS, TARGETS, QuantLayer, build_layer, check_code_width, layer_names, spec_summary
from .safetensors_io import (
    BF16,
    DEFAULT_SHARD_BYTES,
    INDEX_NAME,
    ST_NAMES,
    Entry,
    Tensors,
    header_bytes,
    index_text,
    le_bytes,
    natural_key,
    parse_size,
    plan_shards,
    safetensors_files,
    shard_names,
)

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


#: Files of a model folder copied beside the dense weights (config.json is rewritten: see _output_config), so that
#: ``transformers``' from_pretrained (and its tokenizer) loads the output folder as it is.
COPIED_FILES = (
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)
_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
#: This machine, in the temporary names (with the pid): a later run removes only what a dead run of this host left.
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"


def is_folder_out(out: Path) -> bool:
    """A model folder (sharded, with config.json) unless ``out`` names a .safetensors file."""
    return not out.name.endswith(".safetensors")


def _check_out(out: Path, folder: bool) -> None:
    """Refuse an output path that cannot be written before any input is read."""
    if folder:
        if out.is_file():
            raise ValueError(
                f"output {out}: is a file not named *.safetensors; expected a .safetensors file, or a new or empty "
                "folder for a model folder"
            )
        if out.exists() and (not out.is_dir() or out.is_symlink()):
            raise ValueError(f"output {out}: exists and is not a regular file or a folder")
        if out.is_dir() and any(out.iterdir()):
            raise ValueError(f"output {out}: the folder is not empty; expected a new or empty folder")
    else:
        if out.is_dir():
            raise ValueError(f"output {out}: is a folder; expected the path of the .safetensors file to write")
        if out.exists() and not out.is_file():  # a device or a FIFO would be replaced by a regular file
            raise ValueError(f"output {out}: exists and is not a regular file")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ValueError(f"output {out}: {parent} is not a folder")


def _prefix(out: Path) -> str:
    """The temporary names' prefix: hidden, the output's name, this host and process (see _clean_stale)."""
    return f".{out.name}.{_HOST}-{os.getpid()}."


def _permissions(path: Path, mode: int) -> None:
    """What a plain open() / mkdir() would give (mkstemp and mkdtemp make them 0600 / 0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)


def _open_temp(out: Path) -> tuple[Any, Path]:
    """A new file of its own next to ``out`` (renamed onto it when complete). An interrupt anywhere in here or
    in the caller leaves the file to :func:`_remove_own_temps`."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=_prefix(out), suffix=".partial")
    except OSError as e:
        raise ValueError(f"output {out}: cannot write in {out.parent}: {e.strerror or e}") from None
    fh = None
    try:
        _permissions(Path(name), 0o666)
        fh = os.fdopen(fd, "wb")
    except BaseException:
        # Once a file object owns the descriptor it closes it (io.open does so itself when it fails after taking
        # it): a second close must not replace the interrupt with EBADF (CI, stop 33: SIGTERM exited 2 "Bad file
        # descriptor" instead of 143).
        if fh is None:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    return fh, Path(name)


def _make_temp_dir(out: Path) -> Path:
    """A new folder of its own next to ``out`` (renamed onto it when complete)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        name = Path(tempfile.mkdtemp(dir=out.parent, prefix=_prefix(out), suffix=".partial"))
    except OSError as e:
        raise ValueError(f"output {out}: cannot write in {out.parent}: {e.strerror or e}") from None
    _permissions(name, 0o777)
    return name


def _temps(out: Path) -> list[tuple[Path, int]]:
    """The temporaries of runs to ``out`` on this host, each with its run's pid: names ``_prefix`` + mkstemp's 8
    characters + ``.partial``."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.{re.escape(_HOST)}-(\d+)\.[a-z0-9_]{{8}}\.partial$")
    return [(p, int(m.group(1))) for p in out.parent.iterdir() if (m := pattern.match(p.name)) is not None]


def _remove(p: Path) -> bool:
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    except FileNotFoundError:  # another run cleaned it first
        return False
    return True


def _remove_own_temps(out: Path) -> None:
    """Remove this process's temporaries for ``out``, found by name: an interrupt can land after mkstemp /
    mkdtemp made one and before its name reached the caller, so a name held in a variable is not enough."""
    try:
        temps = _temps(out)
    except OSError:  # the folder itself was the problem (the error on its way out says which)
        return
    for p, pid in temps:
        if pid == os.getpid():
            with contextlib.suppress(OSError):  # cleanup goes on past one it cannot remove
                _remove(p)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def clean_stale(out: Path) -> list[Path]:
    """Remove the temporary files and folders that earlier runs to ``out`` left when they were killed (SIGKILL,
    power loss: no cleanup ran): only names of our own pattern (``.<out name>.<this host>-<pid>.<8 chars>.partial``)
    whose process is no longer alive on this host; a live run's (a concurrent one to the same ``out``) is kept.
    Returns what was removed."""
    if not out.parent.is_dir():
        return []
    return [p for p, pid in _temps(out) if pid != os.getpid() and not _alive(pid) and _remove(p)]


def _check_cuda() -> None:
    """device 'cuda' needs torch and a GPU it can see: a one-line ValueError before anything is read."""
    try:
        import torch
    except ImportError:
        raise ValueError("device 'cuda' needs torch (pip install torch); or dequantize with device 'cpu'") from None
    if not torch.cuda.is_available():
        raise ValueError(
            "device 'cuda': no NVIDIA GPU found (torch.cuda.is_available() is false); pass device 'cpu' to "
            "dequantize with the CPU reference (slower, same bits)"
        )


def _output_config(folder: Path, target: str) -> dict[str, bytes]:
    """The files a dense model folder gets beside its weights: ``config.json`` without ``quantization_config``
    (its ``torch_dtype`` / ``dtype`` set to the output's) and the tokenizer / generation files, copied."""
    files: dict[str, bytes] = {}
    cfg = folder / "config.json"
    if cfg.is_file():
        try:
            data = json.loads(cfg.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{cfg}: not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{cfg}: expected a JSON object, got {type(data).__name__}")
        data.pop("quantization_config", None)
        for key in ("torch_dtype", "dtype"):
            if key in data:
                data[key] = _TORCH_DTYPES[target]
        files["config.json"] = (json.dumps(data, indent=2) + "\n").encode()
    for name in COPIED_FILES:
        p = folder / name
        if p.is_file():
            files[name] = p.read_bytes()
    return files


Item = tuple[str, str, tuple[int, ...], int]


def dequantize_file(
    file: Path | str,
    out: Path | str,
    target: str = "fp16",
    device: str = "cuda",
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    config: dict | None = None,
    shard_size: int | str = DEFAULT_SHARD_BYTES,
) -> list[str]:
    """Dequantize every quantized layer of a checkpoint into ``out``: a model folder, or one .safetensors file.

    The output holds ``<prefix>.weight`` ``[N, K]`` (out_features x in_features, ``torch.nn.Linear``'s
    layout) in ``target`` for each layer, and every non-quantized tensor of the input unchanged; the layers'
    qweight / qzeros / scales / g_idx are dropped. Tensors are in natural order (``layers.9`` before
    ``layers.23``).

    ``out`` not ending in ``.safetensors`` is a model folder (new, or empty), written as transformers'
    save_pretrained writes one: shards of at most ``shard_size`` bytes of tensors (default 5GB; ``"500MB"``,
    ``"2GiB"`` or an int), ``model.safetensors`` alone or ``model-00001-of-0000N.safetensors`` ... with
    ``model.safetensors.index.json``; the input folder's ``config.json`` without ``quantization_config`` (so
    ``from_pretrained`` loads it as a dense model) and its tokenizer and generation files. ``out`` ending in
    ``.safetensors`` is one file with every tensor (no config).

    ``out``, the device and all layers are checked before anything is written; the output is written under a
    temporary name of its own in ``out``'s folder and renamed onto ``out`` when complete (atomically: concurrent
    runs to one file each install a whole file of their own, the last one stays), and removed on any error or
    interrupt; what a killed earlier run left is removed (``clean_stale``). With ``progress`` a rich progress bar
    (one step per layer) runs on stderr when it is a terminal. Returns one summary line per layer (also passed to
    ``log`` as each layer is done)."""
    path, out = Path(file), Path(out)
    if target not in TARGETS:
        raise ValueError(f"[target] got {target!r}; expected 'fp16' or 'bf16'")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"[device] got {device!r}; expected 'cuda' or 'cpu'")
    if not path.exists():  # before the config is looked for beside it (a typo is no missing config)
        raise ValueError(f"{path}: no such file or folder")
    folder_out = is_folder_out(out)
    max_bytes = parse_size(shard_size, "shard size")
    _check_out(out, folder_out)
    if device == "cuda":
        _check_cuda()
    qc = parse_config(config if config is not None else read_config(path))
    files = safetensors_files(path)
    resolved = {f.resolve() for f in files}
    if out.resolve() in resolved:
        raise ValueError(f"{out}: the output would overwrite an input file")
    extra_files = _output_config(path if path.is_dir() else path.parent, target) if folder_out else {}
    with Tensors(files) as tensors:
        names = sorted(layer_names(tensors), key=natural_key)
        if not names:
            raise ValueError(f"{path}: no quantized layers (no tensor named <prefix>.qweight)")
        # Pass 1: check every layer (reads only the small tensors) before writing anything.
        plans = {n: build_layer(qc, tensors, n, target, load_qweight=False) for n in names}
        check_code_width(qc, tensors, list(plans.values()), path if path.is_dir() else path.parent)
        consumed = {f"{n}.{p}" for n in names for p in LAYER_PARTS}
        items: list[Item] = []
        sources: dict[str, Any] = {}
        for n, layer in plans.items():
            wname = f"{n}.weight"
            if wname in tensors:
                raise ValueError(f"layer {n}: the checkpoint already has a tensor {wname}")
            if f"{n}.bias" in tensors:
                _dt, bshape = tensors.meta(f"{n}.bias")
                if bshape != (layer.N,):
                    raise ValueError(
                        f"layer {n}, bias: has shape {list(bshape)}, expected [{layer.N}] (N, the layer's "
                        "out_features, from its scales)"
                    )
            items.append((wname, ST_NAMES[TARGETS[target]], (layer.N, layer.K), layer.N * layer.K * 2))
            sources[wname] = n
        for name, e in tensors.entries.items():
            if name not in consumed:
                items.append((name, e.dtype, e.shape, e.end - e.begin))
                sources[name] = e
        items.sort(key=lambda it: natural_key(it[0]))
        meta = {
            "format": "pt",
            "dqgen": f"dequantized {qc.method.upper()} layers to {target} [out_features, in_features]",
        }
        clean_stale(out)
        writer = _Writer(tensors, plans, sources, device, log, progress, len(names))
        with writer:
            if folder_out:
                _write_folder(out, plan_shards(items, max_bytes), meta, extra_files, writer)
            else:
                _write_file(out, items, meta, writer)
    return writer.lines


class _Writer:
    """Streams items into open files: copied tensors byte for byte, layers dequantized one at a time; the
    progress bar (one step per layer) and the summary lines."""

    def __init__(
        self,
        tensors: Tensors,
        plans: dict[str, QuantLayer],
        sources: dict[str, Any],
        device: str,
        log: Callable[[str], None] | None,
        progress: bool,
        layers: int,
    ) -> None:
        self.tensors, self.plans, self.sources, self.device, self.log = tensors, plans, sources, device, log
        self.lines: list[str] = []
        self.bar: Any = None
        self.task: Any = None
        if progress:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(stderr=True)
            if console.is_terminal:  # no bar (nor its stray newline) in logs and pipes
                self.bar = Progress(
                    TextColumn("dequant"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    TextColumn("{task.description}"),
                    console=console,
                    transient=True,
                )
                self.task = self.bar.add_task("", total=layers)

    def __enter__(self) -> _Writer:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def write(self, fh: Any, items: list[Item], meta: dict[str, str]) -> None:
        fh.write(header_bytes(items, meta))
        for name, _dt, shape, nbytes in items:
            src = self.sources[name]
            if isinstance(src, Entry):
                fh.write(src.file.raw(src))
                continue
            layer = self.plans[src]
            if self.bar is not None:
                self.bar.update(self.task, description=src)
            line = f"{src}: {layer.K}x{layer.N} {spec_summary(layer.spec, layer.target)}" + (
                f" [{'; '.join(layer.notes)}]" if layer.notes else ""
            )
            layer.qweight = self.tensors[f"{src}.qweight"]
            w = _dequantize(layer, self.device, transpose=True)
            layer.qweight = layer.qweight[:0]  # free it (keeps the dtype)
            assert w.shape == shape and w.nbytes == nbytes, (w.shape, shape)
            fh.write(le_bytes(w))
            del w
            self.lines.append(line)
            if self.log is not None:
                self.log(line)
            if self.bar is not None:
                self.bar.advance(self.task)


def _write_file(out: Path, items: list[Item], meta: dict[str, str], writer: _Writer) -> None:
    try:
        fh, tmp = _open_temp(out)
        with fh:
            writer.write(fh, items, meta)
        os.replace(tmp, out)
    except BaseException:
        _remove_own_temps(out)
        raise


def _write_folder(
    out: Path, shards: list[list[Item]], meta: dict[str, str], extra: dict[str, bytes], writer: _Writer
) -> None:
    try:
        tmp = _make_temp_dir(out)
        names = shard_names(len(shards))
        for shard, fname in zip(shards, names, strict=True):
            with open(tmp / fname, "wb") as fh:
                writer.write(fh, shard, meta)
        if len(shards) > 1:
            (tmp / INDEX_NAME).write_text(index_text(shards, names))
        for fname, data in extra.items():
            (tmp / fname).write_bytes(data)
        try:
            os.rename(tmp, out)  # onto a missing or empty folder, atomically
        except OSError as e:
            raise ValueError(
                f"output {out}: cannot install the written folder ({e.strerror or e}): another run wrote it meanwhile?"
            ) from None
    except BaseException:
        _remove_own_temps(out)
        raise
