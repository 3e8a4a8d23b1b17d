#!/usr/bin/env bash
# GPU tests, sanitizer runs, GPU build checks and benchmarks, for one call on a lent GPU machine (at most
# 10 minutes each); a summary table last. Usage from the repo root on the GPU machine (dqgen on PYTHONPATH):
#   TIER=quick bash scripts/gpu_all.sh [OUTDIR]    the quick tier: run after every change to a kernel,
#       template, solver or runtime (185 s on an H100, 2026-11-23, before the GRU persistent tests and sanitizers were added to it): tests marked `quick` (every shipped spec
#       at two shapes, one with tails; every entry point; every zero mode once), then one launch of every
#       kernel entry point under compute-sanitizer memcheck (and racecheck where a kernel uses shared memory).
#   TIER=full PART=1|2|3|4 bash scripts/gpu_all.sh [OUTDIR]    the full tier, one part per call:
#       1: test_gpu.py, every spec at every shape and the unaligned path; 2: the rest of the GPU tests;
#       3: `dqgen build` of every shipped spec; 4: the benchmark (writes OUTDIR/performance.md and
#       OUTDIR/bench/dequant.json).
#   STEPS="tests builds bench" (the old way, everything at once) still works where no TIER is given.
set -uo pipefail
OUT=${1:-${OUT:-/tmp/dqgen-gpu}}
TIER=${TIER:-}
PART=${PART:-}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
rc=0
start=$(date +%s)
pytest_gpu() {  # name, pytest arguments...
  local name=$1; shift
  python -m pytest -q -p no:cacheprovider --junitxml="$OUT/$name.xml" "$@" > "$OUT/$name.log" 2>&1 || rc=1
  tail -3 "$OUT/$name.log"
}
case "$TIER/$PART" in
  quick/*) STEPS=${STEPS:-quick sanitize} ;;
  full/1) STEPS=${STEPS:-full1} ;;
  full/2) STEPS=${STEPS:-full2} ;;
  full/3) STEPS=${STEPS:-builds} ;;
  full/4) STEPS=${STEPS:-bench} ;;
  full/*) echo "error: TIER=full needs PART=1, 2, 3 or 4" >&2; exit 2 ;;
  /*) STEPS=${STEPS:-tests builds bench} ;;
  *) echo "error: TIER must be quick or full, got '$TIER'" >&2; exit 2 ;;
esac
if [[ " $STEPS " == *" quick "* ]]; then
  pytest_gpu quick-tests -m "gpu and quick" tests/test_gpu_quick.py
  # the fused GEMV: every shipped spec at M = 1, 3, 16 with tails, act-order, bias, torch.compile, graphs (~2 min)
  pytest_gpu quick-matmul -m gpu tests/test_gpu_matmul.py
  # the runtime's own entry points (custom op under torch.compile, graph capture, act-order checks), the GRU
  # kernels and the dequant CLI's GPU path: each is one entry point the quick tier must launch
  pytest_gpu quick-entry -m gpu tests/test_gpu_runtime.py tests/test_gru_gpu.py tests/test_gru_persist.py \
    tests/test_checkpoint.py tests/test_refworker.py tests/test_build_cold.py tests/test_quantlinear_gpu.py \
    tests/test_w8a8_gpu.py tests/test_device_views.py
fi
if [[ " $STEPS " == *" sanitize "* ]]; then
  t0=$(date +%s)
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 python scripts/sanitize_entry_points.py \
    > "$OUT/memcheck.log" 2>&1 || rc=1
  tail -2 "$OUT/memcheck.log"
  shared=$(python scripts/sanitize_entry_points.py --shared)
  if [[ -n "$shared" ]]; then
    compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 99 python scripts/sanitize_entry_points.py $shared \
      > "$OUT/racecheck.log" 2>&1 || rc=1
    tail -2 "$OUT/racecheck.log"
  else
    echo "racecheck: no dequantize kernel uses shared memory" | tee "$OUT/racecheck.log"
  fi
  # the persistent GRU kernel stages h in shared memory and has its own grid barrier
  for tool in racecheck synccheck; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 python scripts/gru_persist_sanitize.py \
      > "$OUT/gru-$tool.log" 2>&1 || rc=1
    tail -1 "$OUT/gru-$tool.log"
  done
  # the activation quantizer (dqgen.w8a8) keeps 1/s in shared memory in some variants
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 python scripts/w8a8_memcheck.py \
      > "$OUT/w8a8-$tool.log" 2>&1 || rc=1
    tail -1 "$OUT/w8a8-$tool.log"
  done
  echo "sanitizer step: $(( $(date +%s) - t0 )) s"
fi
if [[ " $STEPS " == *" full1 "* ]]; then
  pytest_gpu full1 -m gpu tests/test_gpu.py -k "bit_exact_all_shapes or unaligned_fallback"
fi
if [[ " $STEPS " == *" full2 "* ]]; then
  pytest_gpu full2 -m gpu tests/test_gpu.py tests/test_nvrtc.py tests/test_checkpoint.py \
    -k "not bit_exact_all_shapes and not unaligned_fallback"
fi
if [[ " $STEPS " == *" tests "* ]]; then
  pytest_gpu gpu-tests -m gpu tests/test_gpu.py tests/test_gpu_quick.py tests/test_nvrtc.py tests/test_checkpoint.py
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
echo "gpu_all.sh TIER=${TIER:-none} PART=${PART:-none} STEPS='$STEPS': $(( $(date +%s) - start )) s, rc=$rc"
exit $rc
