"""dqgen.gru's public names: the numpy core imports without torch; quantize / QuantGRU load the torch module."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_core_imports_without_torch_and_the_torch_names_load_lazily():
    code = (
        "import sys, dqgen.gru as g\n"
        "assert 'torch' not in sys.modules, 'importing dqgen.gru pulled in torch'\n"
        "assert {'quantize', 'QuantGRU'} <= set(g.__all__)\n"
        "try:\n"
        "    import torch  # noqa: F401\n"
        "except ImportError:\n"
        "    try:\n"
        "        g.quantize\n"
        "    except ModuleNotFoundError as e:\n"
        "        assert e.name == 'torch', e\n"
        "    else:\n"
        "        raise AssertionError('quantize without torch')\n"
        "else:\n"
        "    from dqgen.gru.module import QuantGRU, quantize\n"
        "    assert g.quantize is quantize and g.QuantGRU is QuantGRU\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_unknown_name_is_an_attribute_error():
    import dqgen.gru as g

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        g.nope  # noqa: B018 - the attribute access is the test
