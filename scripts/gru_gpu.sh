#!/bin/bash
# GPU checks and bench of the int8 GRU (issue 16), run on the device machine from the worktree root.
set -u
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
python -m pytest -q -p no:cacheprovider tests/test_gru_gpu.py 2>&1 | tail -25
python - <<'PY'
import os
from pathlib import Path
from dqgen.gru.bench import bench_gru, markdown_table
out = Path(os.environ.get("OUT", "/tmp")) / "gru.json"
rows = bench_gru(out_json=out)
print(markdown_table(rows))
PY
