"""NVRTC compilation (CUDA C++ -> PTX or cubin) with a persistent on-disk cache.

Works without a GPU: NVRTC is a pure compiler library.  The cache is keyed only
on things that determine the compiler's output (source text, target, options,
NVRTC version), never on paths or mtimes, so it can be shared between checkouts
and processes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cuda.bindings import nvrtc

from ..core.files import write_whole_bytes

__all__ = [
    "CACHE_FORMAT_VERSION",
    "CompileError",
    "CompileResult",
    "cache_lookup",
    "compile_source",
    "default_cache_dir",
    "nvrtc_version",
]

# Bump whenever the key recipe, the base options or the on-disk layout changes,
# so stale entries written by older dqgen versions are simply never looked up.
CACHE_FORMAT_VERSION = 1

# Options every compilation gets.  Deliberately minimal: anything added here
# changes the generated code for every kernel and must bump CACHE_FORMAT_VERSION.
_BASE_OPTIONS: tuple[str, ...] = ("-std=c++17",)

_ARCH_RE = re.compile(r"sm_([0-9]{2,3})([af]?)")  # matched in full, ASCII digits only

Want = Literal["ptx", "cubin"]


@dataclass(frozen=True)
class CompileResult:
    ptx: str | None
    cubin: bytes | None
    arch: str
    log: str
    seconds: float
    cache_hit: bool
    key: str


class CompileError(RuntimeError):
    """NVRTC rejected the source; the message carries NVRTC's log."""

    def __init__(self, message: str, *, log: str = "", arch: str = "", source_path: str | None = None) -> None:
        super().__init__(message)
        self.log = log
        self.arch = arch
        self.source_path = source_path


def _check(result: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    """Unpack a cuda-bindings ``(err, *values)`` tuple, raising on any error."""
    err, *values = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {_err_name(err)}")
    return tuple(values)


def _err_name(err: Any) -> str:
    try:
        res, msg = nvrtc.nvrtcGetErrorString(err)
        if res == nvrtc.nvrtcResult.NVRTC_SUCCESS and msg:
            return msg.decode(errors="replace")
    except Exception:
        pass
    return getattr(err, "name", str(err))


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


def default_cache_dir() -> Path:
    env = os.environ.get("DQGEN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dqgen"


def _arch_options(arch: str, want: Want) -> list[str]:
    m = _ARCH_RE.fullmatch(arch)
    if not m:
        raise ValueError(f"arch must look like 'sm_80', 'sm_90' or 'sm_90a', got {arch!r}")
    if want == "ptx":
        # A virtual target makes NVRTC stop at PTX; a real sm_XX would also
        # run ptxas, which is wasted work when only the PTX is wanted.
        return [f"--gpu-architecture=compute_{m.group(1)}{m.group(2)}"]
    if want == "cubin":
        return [f"--gpu-architecture={arch}"]
    raise ValueError(f"want must be 'ptx' or 'cubin', got {want!r}")


def _cache_key(source: str, arch: str, want: Want, name: str, options: Sequence[str]) -> str:
    # Options are hashed in the given order: NVRTC processes them in order
    # (e.g. repeated -D), so reordering may legitimately change the output.
    # The program name is included because it ends up in diagnostics and,
    # with -lineinfo, in the PTX .file directive.
    payload = {
        "format": CACHE_FORMAT_VERSION,
        "nvrtc": list(nvrtc_version()),
        "arch": arch,
        "want": want,
        "name": name,
        "options": list(options),
        "source": source,
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def _entry_paths(cache_dir: Path, key: str, want: Want) -> tuple[Path, Path]:
    d = cache_dir / key[:2]
    return d / f"{key}.{want}", d / f"{key}.json"


def _cache_load(cache_dir: Path, key: str, want: Want, arch: str) -> CompileResult | None:
    data_path, meta_path = _entry_paths(cache_dir, key, want)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        data = data_path.read_bytes()
        # The digest in the metadata catches truncated/corrupted payloads and
        # a payload left without matching metadata by an interrupted writer.
        if (
            not isinstance(meta, dict)
            or meta.get("key") != key
            or meta.get("sha256") != hashlib.sha256(data).hexdigest()
            or meta.get("size") != len(data)
        ):
            return None
        log = str(meta.get("log", ""))
        if want == "ptx":
            return CompileResult(data.decode("utf-8"), None, arch, log, 0.0, True, key)
        return CompileResult(None, data, arch, log, 0.0, True, key)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _cache_store(cache_dir: Path, result: CompileResult, want: Want) -> None:
    data_path, meta_path = _entry_paths(cache_dir, result.key, want)
    data = result.ptx.encode("utf-8") if want == "ptx" else result.cubin  # type: ignore[union-attr]
    assert data is not None
    meta = {
        "key": result.key,
        "format": CACHE_FORMAT_VERSION,
        "arch": result.arch,
        "want": want,
        "nvrtc_version": list(nvrtc_version()),
        "compile_seconds": result.seconds,
        "log": result.log,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    try:
        # Payload first, metadata last: the metadata's digest is what makes an
        # entry valid, so a crash in between leaves a clean miss.
        write_whole_bytes(data_path, data)
        write_whole_bytes(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
    except OSError as e:
        # A read-only or full cache must not break compilation: one line per folder and process, no traceback.
        if cache_dir not in _CACHE_DISABLED:
            _CACHE_DISABLED.add(cache_dir)
            print(f"dqgen: NVRTC cache disabled: cannot write {cache_dir}: {e.strerror or e}", file=sys.stderr)


#: Cache folders found unwritable in this process (the line saying so is printed once for each).
_CACHE_DISABLED: set[Path] = set()


def _get_log(prog: Any) -> str:
    (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    if size <= 1:
        return ""
    buf = b" " * size
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode("utf-8", errors="replace").strip()


def _compile(
    source: str, arch: str, want: Want, name: str, all_options: list[str], source_path: str | None
) -> tuple[str | None, bytes | None, str]:
    (prog,) = _check(
        nvrtc.nvrtcCreateProgram(source.encode("utf-8"), name.encode("utf-8"), 0, [], []), "nvrtcCreateProgram"
    )
    try:
        opts = [o.encode("utf-8") for o in all_options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _get_log(prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            parts = [f"NVRTC compilation failed for {arch} ({_err_name(err)})"]
            if source_path:
                parts.append(f"source: {source_path}")
            parts.append(f"options: {' '.join(all_options)}")
            parts.append(log or "(empty NVRTC log)")
            raise CompileError("\n".join(parts), log=log, arch=arch, source_path=source_path)
        if want == "ptx":
            (size,) = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            buf = b" " * size
            _check(nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
            # NVRTC's size includes the C string terminator.
            return buf.rstrip(b"\x00").decode("utf-8"), None, log
        (size,) = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
        # NVRTC keeps the PTX it handed to ptxas: one run gives both (`dqgen build` checks the PTX, loads the cubin)
        (psize,) = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        pbuf = b" " * psize
        _check(nvrtc.nvrtcGetPTX(prog, pbuf), "nvrtcGetPTX")
        return pbuf.rstrip(b"\x00").decode("utf-8"), bytes(buf), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_source(
    source: str,
    *,
    arch: str = "sm_80",
    want: Want = "ptx",
    name: str = "dqgen.cu",
    options: Sequence[str] = (),
    source_path: str | None = None,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    with_ptx: bool = False,
) -> CompileResult:
    """Compile CUDA C++ ``source`` for ``arch`` to PTX or cubin; ``with_ptx`` (cubin only) also returns the PTX
    of the same NVRTC run (one compile instead of two for callers that want both).

    ``source_path`` is only used in error messages (it is not part of the cache
    key).  ``cache_dir`` defaults to :func:`default_cache_dir`.
    """
    if isinstance(options, (str, bytes)):
        raise TypeError("options must be a sequence of strings, not a single string")
    all_options = _arch_options(arch, want) + list(_BASE_OPTIONS) + [str(o) for o in options]
    key = _cache_key(source, arch, want, name, all_options)
    cdir = Path(cache_dir) if cache_dir is not None else default_cache_dir()

    if use_cache:
        hit = _cache_load(cdir, key, want, arch)
        if hit is not None and with_ptx and want == "cubin":
            try:  # the PTX of a cubin entry sits beside it (written by the compile that made the cubin)
                ptx_text = _entry_paths(cdir, key, "ptx")[0].with_suffix(".cubin.ptx").read_text(encoding="utf-8")
                hit = CompileResult(ptx_text, hit.cubin, arch, hit.log, 0.0, True, key)
            except (OSError, UnicodeDecodeError):
                hit = None
        if hit is not None:
            return hit

    t0 = time.perf_counter()
    ptx, cubin, log = _compile(source, arch, want, name, all_options, source_path)
    seconds = time.perf_counter() - t0
    if want == "cubin" and not with_ptx:
        ptx_keep, ptx = ptx, None
    else:
        ptx_keep = ptx
    result = CompileResult(ptx=ptx, cubin=cubin, arch=arch, log=log, seconds=seconds, cache_hit=False, key=key)
    if use_cache:
        _cache_store(cdir, result, want)
        if want == "cubin" and ptx_keep is not None:
            try:
                side = _entry_paths(cdir, key, "ptx")[0].with_suffix(".cubin.ptx")
                write_whole_bytes(side, ptx_keep.encode("utf-8"))
            except OSError:
                pass  # only `with_ptx` lookups need it; they recompile without it
    return result


def cache_lookup(
    source: str,
    *,
    arch: str = "sm_80",
    want: Want = "ptx",
    name: str = "dqgen.cu",
    options: Sequence[str] = (),
    cache_dir: Path | None = None,
) -> CompileResult | None:
    """The cached result of ``compile_source`` with these arguments, or None (nothing is compiled)."""
    all_options = _arch_options(arch, want) + list(_BASE_OPTIONS) + [str(o) for o in options]
    key = _cache_key(source, arch, want, name, all_options)
    return _cache_load(Path(cache_dir) if cache_dir is not None else default_cache_dir(), key, want, arch)
