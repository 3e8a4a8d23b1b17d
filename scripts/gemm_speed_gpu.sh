#!/usr/bin/env bash
# Issue 14 speed work on a lent GPU, one step per argument (each logs to OUT/<step>.log, prints its tail):
#   sweep    scripts/gemm_sweep.py: tile configs and split counts side by side (OUT/gemm_sweep.json)
#   profile  ncu of one GEMM launch (8192 x 28672, M = 64, the automatic tile): occupancy, stalls, throughput
#   tests    tests/test_gpu_gemm.py
#   sanitize scripts/gemm_sanitize.py under compute-sanitizer memcheck and racecheck
#   rule     scripts/gemm_dispatch_rule.py (OUT/gemm_rule.json); with BEFORE=<dir of another tree>, that tree's
#            rule script first (OUT/gemm_rule_before.json): a before/after table from one call
# Run from the repo root with dqgen on PYTHONPATH: bash scripts/gemm_speed_gpu.sh sweep tests ...
set -uo pipefail
OUT=${OUT:-/tmp/dqgen-gemmspeed}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
rc=0
step() {  # name, command...
  local name=$1; shift
  local t0; t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1 || { echo "FAILED: $name (see $name.log)"; rc=1; }
  tail -${TAIL:-6} "$OUT/$name.log"
  echo "[$name: $(( $(date +%s) - t0 )) s]"
}
for s in "$@"; do
  case $s in
    sweep) TAIL=60 step sweep python scripts/gemm_sweep.py --json "$OUT/gemm_sweep.json" ${SWEEP_ARGS:-} ;;
    profile)
      cat > /tmp/gemm_one.py <<'EOF'
import torch
from dqgen.core.spec import load_spec
from dqgen.run import dispatch, gemm
from dqgen.run.inputs import make_inputs
from dqgen.run.runtime import Kernel
k = Kernel(load_spec("awq_int4_fp16"))
q, s, z = make_inputs(k.spec, 8192, 28672, 0)
gw = dispatch.beside(k.pack_matmul(q, s, z))
x = torch.randn((64, 8192), dtype=torch.float16, device="cuda")
for _ in range(3):
    gemm.run(k, x, gw)
torch.cuda.synchronize()
EOF
      TAIL=80 step profile ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section SchedulerStats --section LaunchStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis -k regex:dqgen_gemm --launch-skip 2 -c 1 python /tmp/gemm_one.py ;;
    tests) step tests python -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_gemm.py ;;
    sanitize)
      for tool in memcheck racecheck; do
        step "sanitize-$tool" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99 \
          python scripts/gemm_sanitize.py
      done ;;
    rule)
      if [[ -n ${BEFORE:-} ]]; then
        (cd "$BEFORE" && PYTHONPATH=$PWD:${PYTHONPATH#*:} TAIL=14 step rule-before python scripts/gemm_dispatch_rule.py \
          --json "$OUT/gemm_rule_before.json" ${RULE_ARGS:-})
      fi
      TAIL=14 step rule python scripts/gemm_dispatch_rule.py --json "$OUT/gemm_rule.json" ${RULE_ARGS:-} ;;
    *) echo "unknown step $s"; rc=1 ;;
  esac
done
echo "gemm_speed_gpu.sh $*: rc=$rc"
exit $rc
