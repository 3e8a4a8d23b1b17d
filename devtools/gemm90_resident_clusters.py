"""How many clusters of each one-CTA Hopper GEMM entry can be resident at once (cuOccupancyMaxActiveClusters), at
cluster sizes 1, 2, 4 and 8: what bounds a split-K cluster launch to one wave (dqgen.run.gemm90.ksplit_resident).
A cluster's CTAs share a GPC, so fewer fit than the resident CTAs suggest.

    python devtools/gemm90_resident_clusters.py OUT.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    import torch

    from dqgen.core.spec import load_spec
    from dqgen.kernels.gemm90 import CONFIGS90, Gemm90KernelConfig
    from dqgen.run import device as dev
    from dqgen.run.loader import load

    spec = load_spec("awq_int4_fp16")
    sms = dev.sm_count(0)
    rows: list[dict[str, Any]] = []
    for cfg in CONFIGS90:
        fn = load(Gemm90KernelConfig.one(spec, cfg), 0)
        smem = cfg.launch_shared_bytes(spec)
        row: dict[str, Any] = {"cfg": cfg.tag, "resident_ctas": sms * cfg.min_blocks}
        for size in (1, 2, 4, 8):
            row[f"S{size}"] = fn.max_active_clusters(size * 1024, cfg.threads, size, smem)
        rows.append(row)
        print(row, flush=True)
    out = {"gpu": torch.cuda.get_device_name(), "sms": sms, "rows": rows}
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
