"""What the matmul GPU tests (tests/test_gpu_matmul.py, tests/test_gpu_gemm.py) check of every output: the
tolerance against the float64 reference, no non-finite element, and the same bits from two runs into outputs
poisoned with NaN."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dqgen.check.matmul_reference import TOLERANCE, relative_error
from dqgen.core.spec import Spec
from dqgen.run.gpucheck import to_numpy


def twice(call: Callable[[Any], Any], y_shape: tuple[int, ...], dtype: Any) -> Any:
    """Two runs of ``call(out)`` into NaN-poisoned outputs; each returns its out, and both hold the same bits."""
    import torch

    outs = []
    for _ in range(2):
        out = torch.full(y_shape, float("nan"), dtype=dtype, device="cuda")
        r = call(out)
        assert r is out
        outs.append(out)
    torch.cuda.synchronize()
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), "not the same bits twice"
    return outs[0]


def check(spec: Spec, y: Any, ref: np.ndarray) -> float:
    """Every element finite and ||y - ref|| / ||ref|| within the spec's target tolerance; the error."""
    got = to_numpy(y).astype(np.float64)
    assert np.isfinite(got).all(), f"{int((~np.isfinite(got)).sum())} non-finite outputs"
    err = relative_error(got, ref)
    assert err <= TOLERANCE[spec.target.value], f"relative error {err:.3g}"
    return err
