"""NVRTC compilation + cache (CPU only) and the driver-API runtime (GPU tests skip without one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dqgen.emit.nvrtc import CompileError, compile_source, default_cache_dir, nvrtc_version
from dqgen.run import device

LOP3_SRC = r"""
extern "C" __global__ void k(unsigned* p) {
    unsigned r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(p[0]), "n"(0x000f000f), "n"(0x64006400));
    p[0] = r;
}
"""


def _entry(cache: Path, key: str, ext: str) -> Path:
    return cache / key[:2] / f"{key}.{ext}"


def _all_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- compilation


def test_nvrtc_version() -> None:
    major, minor = nvrtc_version()
    assert major >= 12 and minor >= 0


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_ptx(tmp_path: Path, arch: str) -> None:
    r = compile_source(LOP3_SRC, arch=arch, cache_dir=tmp_path)
    assert r.ptx is not None and r.cubin is None
    assert "lop3.b32" in r.ptx
    assert f".target {arch}" in r.ptx
    assert ".visible .entry k(" in r.ptx
    assert "\x00" not in r.ptx
    assert r.arch == arch


def test_compile_cubin(tmp_path: Path) -> None:
    r = compile_source(LOP3_SRC, arch="sm_90", want="cubin", cache_dir=tmp_path)
    assert r.ptx is None and r.cubin is not None
    assert r.cubin.startswith(b"\x7fELF")


def test_bad_arch_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="arch"):
        compile_source(LOP3_SRC, arch="compute_80", cache_dir=tmp_path)


def test_compile_error_message(tmp_path: Path) -> None:
    bad = 'extern "C" __global__ void broken(int* p) { p[0] = ; }\n'
    with pytest.raises(CompileError) as ei:
        compile_source(bad, arch="sm_80", cache_dir=tmp_path, source_path="generated/broken.cu")
    msg = str(ei.value)
    assert "expected an expression" in msg  # NVRTC's own diagnostic
    assert "source: generated/broken.cu" in msg
    assert "sm_80" in msg
    assert ei.value.log and "error" in ei.value.log
    assert _all_files(tmp_path) == []  # failures are not cached


# --------------------------------------------------------------------------- cache


def test_cache_hit_and_miss(tmp_path: Path) -> None:
    first = compile_source(LOP3_SRC, arch="sm_80", cache_dir=tmp_path)
    assert not first.cache_hit and first.seconds > 0
    assert _entry(tmp_path, first.key, "ptx").is_file()
    meta = json.loads(_entry(tmp_path, first.key, "json").read_text())
    assert meta["arch"] == "sm_80" and meta["nvrtc_version"] == list(nvrtc_version())

    second = compile_source(LOP3_SRC, arch="sm_80", cache_dir=tmp_path)
    assert second.cache_hit and second.seconds == 0
    assert second.ptx == first.ptx and second.key == first.key

    other_arch = compile_source(LOP3_SRC, arch="sm_90", cache_dir=tmp_path)
    assert not other_arch.cache_hit and other_arch.key != first.key

    other_opt = compile_source(LOP3_SRC, arch="sm_80", options=["-DDQGEN_UNUSED=1"], cache_dir=tmp_path)
    assert not other_opt.cache_hit and other_opt.key != first.key

    cubin = compile_source(LOP3_SRC, arch="sm_80", want="cubin", cache_dir=tmp_path)
    assert not cubin.cache_hit and cubin.key != first.key
    cubin2 = compile_source(LOP3_SRC, arch="sm_80", want="cubin", cache_dir=tmp_path)
    assert cubin2.cache_hit and cubin2.cubin == cubin.cubin

    no_cache = compile_source(LOP3_SRC, arch="sm_80", cache_dir=tmp_path, use_cache=False)
    assert not no_cache.cache_hit and no_cache.ptx == first.ptx


@pytest.mark.parametrize("damage", ["truncate", "garbage", "delete_meta", "bad_meta"])
def test_corrupt_entry_recompiled(tmp_path: Path, damage: str) -> None:
    first = compile_source(LOP3_SRC, arch="sm_80", cache_dir=tmp_path)
    data, meta = _entry(tmp_path, first.key, "ptx"), _entry(tmp_path, first.key, "json")
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[:50])
    elif damage == "garbage":
        data.write_bytes(b"\xff\xfe not ptx")
    elif damage == "delete_meta":
        meta.unlink()
    else:
        meta.write_text("{not json")

    again = compile_source(LOP3_SRC, arch="sm_80", cache_dir=tmp_path)
    assert not again.cache_hit and again.ptx == first.ptx
    assert data.read_text() == first.ptx  # overwritten with a good copy
    assert compile_source(LOP3_SRC, arch="sm_80", cache_dir=tmp_path).cache_hit


def test_key_independent_of_cache_dir_and_source_path(tmp_path: Path) -> None:
    a = compile_source(LOP3_SRC, cache_dir=tmp_path / "a", source_path="/x/a.cu")
    b = compile_source(LOP3_SRC, cache_dir=tmp_path / "deeper" / "b", source_path="/y/b.cu")
    assert a.key == b.key and not b.cache_hit
    assert compile_source(LOP3_SRC + "\n// changed\n", cache_dir=tmp_path / "a").key != a.key


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DQGEN_CACHE_DIR", str(tmp_path / "explicit"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DQGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "dqgen"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "dqgen"


def test_concurrent_processes_share_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # A source no earlier test compiled, so both processes really compile.
    src = LOP3_SRC + f"\n// concurrency {tmp_path.name}\n"
    src_file = tmp_path / "k.cu"
    src_file.write_text(src)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from dqgen.emit.nvrtc import compile_source
        r = compile_source(Path({str(src_file)!r}).read_text(), arch="sm_80", cache_dir=Path({str(cache)!r}))
        assert "lop3.b32" in r.ptx
        print(r.key, r.cache_hit)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    keys = {out.split()[0] for out, _ in outs}
    assert len(keys) == 1
    key = keys.pop()

    files = _all_files(cache)
    assert [f.name for f in files] == [f"{key}.json", f"{key}.ptx"]  # no temp files left
    ptx = _entry(cache, key, "ptx").read_text()
    assert ptx.rstrip().endswith("}") and ".target sm_80" in ptx and "lop3.b32" in ptx
    hit = compile_source(src, arch="sm_80", cache_dir=cache)
    assert hit.cache_hit and hit.ptx == ptx


# --------------------------------------------------------------------------- device.py without a GPU


def test_device_module_cpu_behaviour() -> None:
    assert isinstance(device.gpu_available(), bool)  # never raises, GPU or not
    assert device.stream_handle(None) == 0
    assert device.stream_handle(1234) == 1234
    with pytest.raises(ValueError, match="qweight"):
        device.as_device_array(np.zeros(3), "qweight")
    with pytest.raises(TypeError, match="scales"):
        device.as_device_array([1.0, 2.0], "scales")


@pytest.mark.skipif(device.gpu_available(), reason="checks the no-GPU path")
def test_gpu_unavailable_here() -> None:
    assert device.gpu_available() is False


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not device.gpu_available(), reason="needs an NVIDIA GPU")
def test_launch_lop3_kernel(tmp_path: Path) -> None:
    from cuda.bindings import driver

    arch = device.device_arch()
    assert arch.startswith("sm_")
    cubin = compile_source(LOP3_SRC, arch=arch, want="cubin", cache_dir=tmp_path).cubin
    assert cubin is not None
    kernel = device.LoadedKernel(cubin, "k", device=0)

    x = np.array([0xDEADBEEF], dtype=np.uint32)
    err, dptr = driver.cuMemAlloc(x.nbytes)
    assert err == driver.CUresult.CUDA_SUCCESS
    try:
        (err,) = driver.cuMemcpyHtoD(dptr, x.ctypes.data, x.nbytes)
        assert err == driver.CUresult.CUDA_SUCCESS
        kernel((1, 1, 1), (1, 1, 1), [np.uint64(int(dptr))])
        (err,) = driver.cuCtxSynchronize()
        assert err == driver.CUresult.CUDA_SUCCESS
        out = np.zeros_like(x)
        (err,) = driver.cuMemcpyDtoH(out.ctypes.data, dptr, out.nbytes)
        assert err == driver.CUresult.CUDA_SUCCESS
    finally:
        driver.cuMemFree(dptr)
        kernel.close()
    assert int(out[0]) == (0xDEADBEEF & 0x000F000F) | 0x64006400


@pytest.mark.gpu
@pytest.mark.skipif(not device.gpu_available(), reason="needs an NVIDIA GPU")
def test_kernel_errors_are_runtime_errors(tmp_path: Path) -> None:
    cubin = compile_source(LOP3_SRC, arch=device.device_arch(), want="cubin", cache_dir=tmp_path).cubin
    assert cubin is not None
    with pytest.raises(RuntimeError, match="CUDA_ERROR_NOT_FOUND"):
        device.LoadedKernel(cubin, "no_such_kernel")
    kernel = device.LoadedKernel(cubin, "k")
    with pytest.raises(TypeError, match="numpy scalar"):
        kernel((1,), (1,), [12345])


def test_unwritable_cache_is_one_line_on_stderr(tmp_path: Path) -> None:
    """An unwritable $DQGEN_CACHE_DIR (here: below a file; chmod does not stop root) compiles anyway and says once,
    in one line, that the cache is off and why: no RuntimeWarning with source lines (issue 11)."""
    (tmp_path / "file").write_text("")
    script = (
        "from dqgen.emit.nvrtc import compile_source\n"
        f"for arch in ('sm_80', 'sm_90'): assert compile_source({LOP3_SRC!r}, arch=arch).ptx\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "DQGEN_CACHE_DIR": str(tmp_path / "file" / "cache"), "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"dqgen: NVRTC cache disabled: cannot write {tmp_path / 'file' / 'cache'}: Not a directory\n"
