#!/usr/bin/env bash
# The tensor-core GEMM (issue 14) on a lent GPU, one step per call (each well inside the 10-minute limit):
#   bash docs/experiments/gemm_gpu.sh tests    [OUTDIR]  GPU tests: tests/test_gpu_gemm.py, and tests/test_gpu_matmul.py
#                                               (its M > 16 cases now go through the GEMM's dispatch)
#   bash docs/experiments/gemm_gpu.sh sanitize [OUTDIR]  one launch of every GEMM entry point (every tile, direct and
#                                               gather A, split and unsplit) under compute-sanitizer memcheck and
#                                               racecheck, outputs checked against the reference
#   bash docs/experiments/gemm_gpu.sh rule     [OUTDIR]  GEMM vs dequantize + cuBLAS vs cuBLAS dense at the shapes,
#                                               M = 16..4096: the timing table and the measured dispatch rule
#                                               (written to the NVRTC cache dir's dispatch.json and OUTDIR)
#   bash docs/experiments/gemm_gpu.sh bench    [OUTDIR]  `dqgen bench --matmul` (Kernel.matmul through the dispatch, beside
#                                               cuBLAS dense, dequantize + cuBLAS, torch int4) at M = 16..4096:
#                                               OUTDIR/matmul_gemm.json and OUTDIR/performance_gemm.md
#   bash docs/experiments/gemm_gpu.sh all      [OUTDIR]  tests, sanitize, rule (not bench: it would pass 10 minutes)
# Run from the repo root with dqgen on PYTHONPATH. Exit 1 when any step failed; a summary last.
set -uo pipefail
STEP=${1:-all}
OUT=${2:-${OUT:-/tmp/dqgen-gemm}}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
rc=0
step() {  # name, command...: run, log to OUT/name.log, print its last lines
  local name=$1; shift
  local t0; t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1 || { echo "FAILED: $name (see $name.log)"; rc=1; }
  tail -4 "$OUT/$name.log"
  echo "[$name: $(( $(date +%s) - t0 )) s]"
}
if [[ $STEP == tests || $STEP == all ]]; then
  step gemm-tests python -m pytest -q -p no:cacheprovider --junitxml="$OUT/gemm-tests.xml" -m gpu \
    tests/test_gpu_gemm.py
  step matmul-tests python -m pytest -q -p no:cacheprovider --junitxml="$OUT/matmul-tests.xml" -m gpu \
    tests/test_gpu_matmul.py
fi
if [[ $STEP == sanitize || $STEP == all ]]; then
  for tool in memcheck racecheck; do
    step "gemm-sanitize-$tool" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99 \
      python devtools/gemm_sanitize.py
  done
fi
if [[ $STEP == rule || $STEP == all ]]; then
  step gemm-rule python devtools/gemm_dispatch_rule.py --json "$OUT/gemm_dispatch.json" --write-rule
  grep -A 12 '^| M |' "$OUT/gemm-rule.log" || true
fi
if [[ $STEP == bench ]]; then
  # BENCH_SPECS="awq_int4_fp16" (one spec per call) if both do not fit in one call's 10 minutes
  # shellcheck disable=SC2086
  step gemm-bench python -m dqgen bench --matmul ${BENCH_SPECS:-awq_int4_fp16 awq_int4_bf16} \
    --m 16,32,64,128,256,512,1024,4096 --record "$OUT/matmul_gemm.json" --docs "$OUT/performance_gemm.md"
  cat "$OUT/gemm-bench.log" | tail -60
fi
echo "gemm_gpu.sh $STEP: rc=$rc"
exit $rc
