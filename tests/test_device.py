"""The driver-API layer's locking: the first call of a process may be any entry point."""

from __future__ import annotations

import subprocess
import sys


def test_primary_context_first_in_a_process_does_not_deadlock():
    # primary_context() holds the init lock while _device() runs _ensure_init(), which takes it again: a plain
    # Lock hangs here forever. Without a GPU the call must fail with an error; with one it must return.
    code = (
        "from dqgen.run import device\n"
        "try:\n"
        "    device.primary_context(0)\n"
        "except Exception as e:\n"
        "    print('error:', type(e).__name__)\n"
        "else:\n"
        "    print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(("ok", "error:")), r.stdout


def test_torch_raw_stream_fn_is_the_accessor_or_the_stream_object_path():
    """The per-call fast paths (Kernel.__call__, the w8a8 ops) keep this callable: torch's C accessor itself where
    torch has one, else the current Stream object's handle; both give the raw CUstream of the device asked for."""
    import types

    from dqgen.run.device import torch_raw_stream_fn

    def accessor(device: int) -> int:
        return 0x1000 + device

    with_accessor = types.SimpleNamespace(_C=types.SimpleNamespace(_cuda_getCurrentRawStream=accessor))
    assert torch_raw_stream_fn(with_accessor) is accessor

    asked: list[int] = []

    def current_stream(device: int) -> types.SimpleNamespace:
        asked.append(device)
        return types.SimpleNamespace(cuda_stream=0x2000 + device)

    without = types.SimpleNamespace(
        _C=types.SimpleNamespace(), cuda=types.SimpleNamespace(current_stream=current_stream)
    )
    fn = torch_raw_stream_fn(without)
    assert fn(3) == 0x2003 and asked == [3]
