#!/usr/bin/env bash
# Every GPU test and GPU check in one command, for one call on a lent GPU machine; a table last.
# Usage from the repo root on the GPU machine (dqgen on PYTHONPATH, not pip-installed):
#   bash scripts/gpu_all.sh [OUTDIR]
set -uo pipefail
OUT=${1:-${OUT:-/tmp/dqgen-gpu}}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python -m pytest -q -m gpu tests/test_gpu.py tests/test_nvrtc.py -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/pytest.log"
rc=${PIPESTATUS[0]}
for spec in specs/*.yaml; do
  name=$(basename "$spec" .yaml)
  python -m dqgen build "$spec" --json --words 100000 --out "$(mktemp -d)" > "$OUT/build-$name.json" 2> "$OUT/build-$name.err" || rc=1
done
python scripts/gpu_table.py "$OUT"
exit $rc
