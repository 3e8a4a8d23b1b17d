#!/usr/bin/env bash
# Every GPU test, GPU build check and benchmark in one command, for one call on a lent GPU machine;
# a summary table last. Usage from the repo root on the GPU machine (dqgen on PYTHONPATH):
#   bash scripts/gpu_all.sh [OUTDIR]        (STEPS="tests builds bench" by default)
# On an H100 (2026-11-23): tests about 8 min, builds of all 22 specs about 4 min, bench about 30 s per
# spec; where one call is limited to 10 minutes, run STEPS=tests, STEPS=builds and STEPS=bench apart.
set -uo pipefail
OUT=${1:-${OUT:-/tmp/dqgen-gpu}}
STEPS=${STEPS:-tests builds bench}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
rc=0
if [[ " $STEPS " == *" tests "* ]]; then
  python -m pytest -q -m gpu tests/test_gpu.py tests/test_nvrtc.py tests/test_checkpoint.py -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml" > "$OUT/pytest.log" 2>&1 || rc=1
  tail -3 "$OUT/pytest.log"
fi
if [[ " $STEPS " == *" builds "* ]]; then
  tmp=$(mktemp -d)
  for spec in dqgen/specs/*.yaml; do
    python -m dqgen build "$spec" --json --words 100000 --out "$tmp/generated" > "$tmp/$(basename "$spec" .yaml).json" 2>> "$OUT/builds.err" || rc=1
  done
  python - "$tmp" "$OUT/builds.json" <<'PY' || rc=1
import glob, json, sys
reports = []
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        reports.append(json.load(open(f)))
    except ValueError:  # the build failed before printing its JSON: its error is in builds.err
        reports.append({"spec": f.rsplit("/", 1)[-1][:-5], "ok": False, "ops_per_8": {"convert": "?"}, "steps": {}})
json.dump(reports, open(sys.argv[2], "w"), indent=1)
PY
fi
if [[ " $STEPS " == *" bench "* ]]; then
  python -m dqgen bench ${BENCH_SPECS:-awq_int4_fp16 awq_int4_bf16 gptq_int4_fp16 int8_fp16} \
    ${BENCH_ARGS:-} --docs "$OUT/performance.md" > "$OUT/bench.txt" 2> "$OUT/bench.log" || rc=1
  tail -5 "$OUT/bench.log"
fi
python scripts/gpu_table.py "$OUT"
exit $rc
