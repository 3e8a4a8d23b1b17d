from __future__ import annotations

from pathlib import Path

import pytest

from dqgen.core.spec import SHIPPED_SPECS

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted(SHIPPED_SPECS.glob("*.yaml"))


def _gpu() -> bool:
    from dqgen.run.device import gpu_available

    return gpu_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _gpu():
        skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
