# The runtime's GPU figures and tests in one device call (issue 10 items 2-4); logs and JSON under $OUT.
set -u
O=$OUT
nvidia-smi --query-gpu=name --format=csv,noheader
export NUMBA_CACHE_DIR=/tmp/nb_warm
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 200 python -m pytest -q -x -m gpu tests/test_gpu_runtime.py -p no:cacheprovider > $O/gpu_runtime_tests.log 2>&1; echo "gpu_runtime rc=$?"; tail -3 $O/gpu_runtime_tests.log
fi
timeout 90 python scripts/runtime_figures.py overhead > $O/overhead.json 2>$O/overhead.err; echo "overhead rc=$?"; cat $O/overhead.json; tail -5 $O/overhead.err
export DQGEN_CACHE_DIR=/tmp/dq_cold1
timeout 60 python scripts/runtime_figures.py first-call > $O/first_cold.json 2>&1; cat $O/first_cold.json
timeout 60 python scripts/runtime_figures.py first-call > $O/first_warm.json 2>&1; cat $O/first_warm.json
export DQGEN_CACHE_DIR=/tmp/dq_cold2 NUMBA_CACHE_DIR=/tmp/nb_cold2
timeout 90 python scripts/runtime_figures.py build awq_int4_fp16 > $O/build_cold.json 2>&1; cat $O/build_cold.json
timeout 90 python scripts/runtime_figures.py build awq_int4_fp16 > $O/build_warm.json 2>&1; cat $O/build_warm.json
export DQGEN_CACHE_DIR=/tmp/dq_cold3
timeout 90 python scripts/runtime_figures.py build awq_int4_fp16 > $O/build_cold_nvrtc_warm_numba.json 2>&1; cat $O/build_cold_nvrtc_warm_numba.json
python -X importtime -m dqgen build awq_int4_fp16 --json --out /tmp/x > /dev/null 2> $O/importtime.txt; sort -t'|' -k2 -n $O/importtime.txt | tail -8
