#!/usr/bin/env bash
# The W8A8 GEMM on a GPU (issue 15 items 2-4), for one call on a lent GPU machine (each step well inside 10 min):
#   bash docs/experiments/w8a8_gpu.sh [OUTDIR]                    all steps: tests, sanitize, bench
#   STEPS="tests sanitize" bash docs/experiments/w8a8_gpu.sh OUT  a subset
# tests:    tests/test_w8a8_gemm_gpu.py (bit-exact integer GEMM and epilogue, fp8 tolerance, SmoothQuant MLP,
#           torch.compile, errors) and the CPU tests tests/test_w8a8_gemm.py; junit XML and logs in OUTDIR.
# sanitize: devtools/w8a8_gemm_memcheck.py under compute-sanitizer memcheck and racecheck (every tile shape, split
#           and unsplit, tails; results checked against the references too).
# bench:    python -m dqgen.w8a8.gemm_bench OUTDIR/w8a8.json (the timing table; copy it to docs/bench/w8a8.json).
set -uo pipefail
OUT=${1:-${OUT:-/tmp/dqgen-w8a8}}
STEPS=${STEPS:-tests sanitize bench}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
rc=0
step() {  # name, command...: run, log to OUTDIR/name.log, print the tail and the time
  local name=$1 t0; shift
  t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1 || { echo "FAILED: $name (see $name.log)"; rc=1; }
  tail -4 "$OUT/$name.log"
  echo "== $name: $(( $(date +%s) - t0 )) s"
}
if [[ " $STEPS " == *" tests "* ]]; then
  step tests python -m pytest -q -p no:cacheprovider -rs --junitxml="$OUT/w8a8_gemm_tests.xml" \
    tests/test_w8a8_gemm_gpu.py tests/test_w8a8_gemm.py -s
fi
if [[ " $STEPS " == *" sanitize "* ]]; then
  for tool in memcheck racecheck; do
    step "sanitize-$tool" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99 \
      python devtools/w8a8_gemm_memcheck.py
  done
fi
if [[ " $STEPS " == *" bench "* ]]; then
  step bench timeout 540 python -m dqgen.w8a8.gemm_bench "$OUT/w8a8.json"
fi
exit $rc
