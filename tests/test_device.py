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
