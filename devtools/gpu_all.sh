#!/usr/bin/env bash
# GPU tests, sanitizer runs, GPU build checks and benchmarks, for one call on a lent GPU machine (at most
# 10 minutes each); a summary table last. Usage from the repo root on the GPU machine (dqgen on PYTHONPATH):
#   TIER=quick bash devtools/gpu_all.sh [OUTDIR]    the quick tier: run after every change to a kernel,
#       template, solver or runtime (jobs run side by side; the time of the last run is in the closing lines): tests marked `quick` (every shipped spec
#       at two shapes, one with tails; every entry point; every zero mode once), then one launch of every
#       kernel entry point under compute-sanitizer memcheck (and racecheck where a kernel uses shared memory).
#   TIER=full PART=1|2|3|4 bash devtools/gpu_all.sh [OUTDIR]    the full tier, one part per call:
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
# A quick-tier job runs in the background (the GPU has room for several; much of each is CPU: references, NVRTC,
# sanitizer instrumentation); its exit code lands in OUT/NAME.rc and `collect` folds them into rc.
bg() {  # name, command...
  local name=$1; shift
  ( "$@" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc" ) &
}
bg_pytest() {  # name, pytest arguments...
  local name=$1; shift
  bg "$name" python -m pytest -q -p no:cacheprovider --junitxml="$OUT/$name.xml" "$@"
}
sanitize() {  # tool, script, arguments...
  local tool=$1 script=$2; shift 2
  bg "$(basename "$script" .py)-$tool" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99 \
    python "$script" "$@"
}
collect() {  # name...: wait for the background jobs, print each one's last lines, fold the exit codes into rc
  wait
  for name in "$@"; do
    tail -2 "$OUT/$name.log"
    [[ "$(cat "$OUT/$name.rc" 2>/dev/null)" == 0 ]] || { echo "FAILED: $name (see $name.log)"; rc=1; }
  done
}
if [[ " $STEPS " == *" quick "* ]]; then
  t0=$(date +%s)
  bg_pytest quick-tests -m "gpu and quick" tests/test_gpu_quick.py tests/test_gpu_pdl.py
  # the fused matmul: one spec of each family here (every spec in the full tier): int4 AWQ fp16/bf16, act-order,
  # int8, 3-bit words, fp8, NVFP4 and MX block scales, a codebook, float zeros
  bg_pytest quick-matmul -m gpu tests/test_gpu_matmul.py -k "not test_every_spec or awq_int4 or act_order_fp16 \
    or int8_fp16 or gptq_int3 or fp8_e4m3_fp16 or nvfp4 or mxfp6_e2m3 or nf4 or uint3_float"
  # the runtime's own entry points (custom op under torch.compile, graph capture, act-order checks), the GRU
  # kernels, the activation quantizer (and its fused producers) and the dequant CLI's GPU path: each is one entry point the tier must launch
  bg_pytest quick-entry -m gpu tests/test_gpu_runtime.py tests/test_gru_gpu.py tests/test_gru_persist.py \
    tests/test_checkpoint.py tests/test_refworker.py tests/test_build_cold.py tests/test_quantlinear_gpu.py \
    tests/test_w8a8_gpu.py tests/test_w8a8_producer_gpu.py tests/test_device_views.py tests/test_gru_modules_gpu.py tests/test_gru_cluster.py
  # the tensor-core GEMM (M > 16): one int4 and one int8 spec at M = 17, 64, 200 with tails, and every other test
  # of its file once (act-order, split-K, dispatch, real-format AWQ / GPTQ layers, torch.compile + graphs, errors)
  bg_pytest quick-gemm -m gpu tests/test_gpu_gemm.py -k "not test_every_spec or awq_int4_fp16-128 or int8_bf16-128"
  # the W8A8 GEMM: bit-exact int32 and epilogue, fp8 tolerance, SmoothQuant MLP, W8A8Linear under torch.compile;
  # the W4A8 GEMM, its op and W4A8Linear
  bg_pytest quick-w8a8gemm -m gpu tests/test_w8a8_gemm_gpu.py tests/test_w8a8_gemm90_gpu.py tests/test_w4a8_gemm90_gpu.py \
    tests/test_s8_converter_gpu.py tests/test_w4a8_module_gpu.py
  # the Hopper GEMM (sm_90 only; skipped elsewhere): every int4 / int8 spec at every token tile with tails, act-order
  # layers through the gather
  bg_pytest quick-gemm90 -m gpu tests/test_gpu_gemm90.py
  quick_jobs=(quick-tests quick-matmul quick-entry quick-gemm quick-w8a8gemm quick-gemm90)
  if [[ " $STEPS " != *" sanitize "* ]]; then
    collect "${quick_jobs[@]}"
    echo "test step: $(( $(date +%s) - t0 )) s"
  fi  # else the sanitizer jobs start beside the tests (both are mostly CPU: references, NVRTC, instrumentation)
fi
if [[ " $STEPS " == *" sanitize "* ]]; then
  t0=$(date +%s)
  jobs=(sanitize_entry_points-memcheck gru_persist_sanitize-racecheck gru_persist_sanitize-synccheck
        matmul_sanitize-memcheck matmul_sanitize-racecheck matmul_sanitize-synccheck w8a8_memcheck-memcheck w8a8_memcheck-racecheck
        gemm_sanitize-memcheck gemm_sanitize-racecheck w8a8_gemm_memcheck-memcheck w8a8_gemm_memcheck-racecheck
        gemm90_sanitize-memcheck gemm90_sanitize-racecheck gemm90_sanitize-synccheck
        w8a8_gemm90_sanitize-memcheck w8a8_gemm90_sanitize-racecheck w8a8_gemm90_sanitize-synccheck
        w4a8_sanitize-memcheck w4a8_sanitize-racecheck w4a8_sanitize-synccheck
        gru_cluster_sanitize-memcheck gru_cluster_sanitize-racecheck gru_cluster_sanitize-synccheck)
  sanitize memcheck devtools/sanitize_entry_points.py
  shared=$(python devtools/sanitize_entry_points.py --shared)
  if [[ -n "$shared" ]]; then
    sanitize racecheck devtools/sanitize_entry_points.py $shared
    jobs+=(sanitize_entry_points-racecheck)
  else
    echo "racecheck: no dequantize kernel uses shared memory"
  fi
  # the persistent GRU kernel stages h in shared memory and has its own grid barrier
  sanitize racecheck devtools/gru_persist_sanitize.py
  sanitize synccheck devtools/gru_persist_sanitize.py
  # the fused matmul reduces its warps' partial sums in shared memory, behind a barrier of 4, 8 or 16 warps
  sanitize memcheck devtools/matmul_sanitize.py
  sanitize racecheck devtools/matmul_sanitize.py
  sanitize synccheck devtools/matmul_sanitize.py
  # the activation quantizer (dqgen.w8a8) keeps 1/s in shared memory in some variants
  sanitize memcheck devtools/w8a8_memcheck.py
  sanitize racecheck devtools/w8a8_memcheck.py
  # the two GEMMs stage A and B through shared memory in cp.async pipelines: every entry point once
  sanitize memcheck devtools/gemm_sanitize.py
  sanitize racecheck devtools/gemm_sanitize.py
  sanitize memcheck devtools/w8a8_gemm_memcheck.py
  sanitize racecheck devtools/w8a8_gemm_memcheck.py
  # the Hopper GEMM: TMA stages recycled through mbarriers, consumers on a named barrier (sm_90 only); its act-order
  # case launches the gather kernel (x into slot order) in front of it, so memcheck covers that entry too
  sanitize memcheck devtools/gemm90_sanitize.py
  sanitize racecheck devtools/gemm90_sanitize.py
  sanitize synccheck devtools/gemm90_sanitize.py
  sanitize memcheck devtools/w8a8_gemm90_sanitize.py
  sanitize racecheck devtools/w8a8_gemm90_sanitize.py
  sanitize synccheck devtools/w8a8_gemm90_sanitize.py
  # racecheck does not follow the mbarrier completion of the W4A8 weights' bulk copies (UBLKCP): it runs without a
  # stage refilled (the refill order: the SASS check of tests/test_w4a8_gemm90.py, the outputs of the other two runs)
  sanitize memcheck devtools/w4a8_sanitize.py
  sanitize racecheck devtools/w4a8_sanitize.py --no-refill
  sanitize synccheck devtools/w4a8_sanitize.py
  # the cluster GRU: R resident in shared memory, h exchanged between CTAs by st.async on mbarriers (sm_90 only)
  sanitize memcheck devtools/gru_cluster_sanitize.py
  sanitize racecheck devtools/gru_cluster_sanitize.py
  sanitize synccheck devtools/gru_cluster_sanitize.py
  collect "${jobs[@]}" ${quick_jobs[@]+"${quick_jobs[@]}"}
  echo "sanitizer step (with the quick tests beside it, when both run): $(( $(date +%s) - t0 )) s"
fi
if [[ " $STEPS " == *" full1 "* ]]; then
  pytest_gpu full1 -m gpu tests/test_gpu.py -k "bit_exact_all_shapes or unaligned_fallback"
fi
if [[ " $STEPS " == *" full2 "* ]]; then
  pytest_gpu full2 -m gpu tests/test_gpu.py tests/test_nvrtc.py tests/test_checkpoint.py tests/test_gpu_matmul.py \
    -k "not bit_exact_all_shapes and not unaligned_fallback"
fi
if [[ " $STEPS " == *" tests "* ]]; then
  pytest_gpu gpu-tests -m gpu tests/test_gpu.py tests/test_gpu_quick.py tests/test_gpu_pdl.py tests/test_nvrtc.py tests/test_checkpoint.py
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
python devtools/gpu_table.py "$OUT"
echo "gpu_all.sh TIER=${TIER:-none} PART=${PART:-none} STEPS='$STEPS': $(( $(date +%s) - start )) s, rc=$rc"
exit $rc
