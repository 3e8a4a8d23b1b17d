#!/usr/bin/env bash
# The W8A8 call path's checks and host-time figures in one call on a lent GPU machine:
#   bash docs/experiments/w8a8_host_gpu.sh OUTDIR [BEFORE_TREE]
# 1. in parallel (correctness only): tests/test_w8a8_gpu.py and tests/test_w8a8_gemm_gpu.py (two processes each),
#    devtools/w8a8_memcheck.py and devtools/w8a8_gemm_memcheck.py under compute-sanitizer memcheck;
# 2. alone, after them: docs/experiments/w8a8_call_overhead.py (host us per call) and the activation quantizer's bench rows,
#    for this tree and, given BEFORE_TREE (a checkout of the base commit), for that tree in the same call.
# Exit status 1 when any check or measurement failed (each one's rc is printed), 0 otherwise.
set -uo pipefail
OUT=${1:?OUTDIR}
BEFORE=${2:-}
LOGS=$(mktemp -d)  # every log, returned as one archive (a lent machine returns at most 8 files)
mkdir -p "$OUT"
BASE_PATH=${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
t0=$(date +%s)
job() {  # name, command...: in the background, log and exit status under OUTDIR
  local name=$1; shift
  ( timeout 240 "$@" > "$LOGS/$name.log" 2>&1; echo "$name rc=$?" > "$LOGS/$name.rc" ) &
}
PYT=(python -m pytest -q -p no:cacheprovider -rs)
job act1 "${PYT[@]}" tests/test_w8a8_gpu.py -k "test_bit_exact and not every_placement"
job act2 "${PYT[@]}" tests/test_w8a8_gpu.py -k "not (test_bit_exact and not every_placement)"
job gemm1 "${PYT[@]}" tests/test_w8a8_gemm_gpu.py -k "configuration or accumulators or forced or largest"
job gemm2 "${PYT[@]}" tests/test_w8a8_gemm_gpu.py -k "not (configuration or accumulators or forced or largest)"
job memcheck_act compute-sanitizer --tool memcheck --error-exitcode 99 python devtools/w8a8_memcheck.py
job memcheck_gemm compute-sanitizer --tool memcheck --error-exitcode 99 python devtools/w8a8_gemm_memcheck.py
wait
echo "== checks: $(( $(date +%s) - t0 )) s"
rc=0
for f in act1 act2 gemm1 gemm2 memcheck_act memcheck_gemm; do
  cat "$LOGS/$f.rc"; tail -3 "$LOGS/$f.log"
  grep -q " rc=0$" "$LOGS/$f.rc" || rc=1
done
ACT='from pathlib import Path; import sys; from dqgen.w8a8 import bench; bench.run(out=Path(sys.argv[1]))'
ACT_SMALL='from pathlib import Path; import sys; from dqgen.w8a8 import bench
bench.run(shapes=((1, 4096), (16, 4096), (4096, 4096)), out=Path(sys.argv[1]))'
if [[ -n "$BEFORE" ]]; then
  PYTHONPATH="$BEFORE:$BASE_PATH" timeout 120 python docs/experiments/w8a8_call_overhead.py "$OUT/overhead_before.json" || rc=1
fi
timeout 120 python docs/experiments/w8a8_call_overhead.py "$OUT/overhead_after.json" || rc=1
if [[ -n "$BEFORE" ]]; then
  (cd "$BEFORE" && PYTHONPATH="$BEFORE:$BASE_PATH" timeout 150 python -c "$ACT_SMALL" "$OUT/act_before.json") \
    > "$LOGS/act_before.log" 2>&1 || rc=1  # from BEFORE: python -c puts the working directory first on sys.path
  grep -E "copy|^dqgen " "$LOGS/act_before.log"
fi
timeout 200 python -c "$ACT" "$OUT/act_after.json" > "$LOGS/act_after.log" 2>&1 || rc=1
grep -E "copy|^dqgen " "$LOGS/act_after.log"
echo "== all: $(( $(date +%s) - t0 )) s, rc=$rc"
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
exit $rc
