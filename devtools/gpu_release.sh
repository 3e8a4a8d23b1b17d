#!/usr/bin/env bash
# One device call that checks a release candidate and refreshes its figures: `dqgen build` cold (fresh caches) and
# cached, the quick GPU tier (tests + compute-sanitizer), the dequantize bench (docs/performance.md's dequant section
# and docs/bench/dequant.json) and the launch-overhead comparison of docs/architecture.md. Everything lands in
# OUTDIR (default $OUT), also packed as OUTDIR/all.tgz for a caller that can fetch only a few files.
# Usage from the repo root on the GPU machine (dqgen on PYTHONPATH): bash devtools/gpu_release.sh [OUTDIR]
set -uo pipefail
OUTDIR=${1:-${OUT:-/tmp/dqgen-release}}
res=$(mktemp -d)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$res/gpu.txt"
step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout "$limit" "$@" > "$res/$name.out" 2> "$res/$name.err"
  local rc=$?
  printf '%-12s rc=%-3s %8s ms\n' "$name" "$rc" "$(( ($(date +%s%N) - t0) / 1000000 ))" | tee -a "$res/steps.txt"
  # after every step: a call cut off at its time limit still brings back what was done
  mkdir -p "$OUTDIR" && tar czf "$OUTDIR/all.tgz" -C "$res" . && cp "$res/steps.txt" "$OUTDIR/steps.txt"
}
cold=$(mktemp -d)
# a fresh machine: nothing of dqgen's (NVRTC, proofs, tuning) nor numba's caches exists yet
step build_cold 60 env DQGEN_CACHE_DIR="$cold/dqgen" NUMBA_CACHE_DIR="$cold/numba" \
  python -m dqgen build awq_int4_fp16 --json --out "$cold/gen"
step build_cached 60 env DQGEN_CACHE_DIR="$cold/dqgen" NUMBA_CACHE_DIR="$cold/numba" \
  python -m dqgen build awq_int4_fp16 --json --out "$cold/gen"
step quick 300 env TIER=quick bash devtools/gpu_all.sh "$res/quick"
cp docs/performance.md "$res/performance.md"
step bench 200 python -m dqgen bench awq_int4_fp16 awq_int4_bf16 gptq_int4_fp16 int8_fp16 \
  --docs "$res/performance.md" --record "$res/dequant.json"
step launch 40 python devtools/cuda_core_overhead.py
cat "$res/steps.txt"
