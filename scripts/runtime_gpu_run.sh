set -u
O=$OUT
nvidia-smi --query-gpu=name --format=csv,noheader
export NUMBA_CACHE_DIR=/tmp/nb_warm
timeout 200 python -m pytest -q -x -m gpu tests/test_gpu_runtime.py -p no:cacheprovider > $O/gpu_runtime_tests.log 2>&1; echo "gpu_runtime rc=$?"; tail -15 $O/gpu_runtime_tests.log
timeout 120 python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "out_given or current_torch_stream or cupy or bad_ or (all_shapes and (awq_int4_fp16 or gptq_int4_asym)) or zero_modes" > $O/gpu_tests_subset.log 2>&1; echo "gpu subset rc=$?"; tail -5 $O/gpu_tests_subset.log
timeout 90 python scripts/runtime_figures.py overhead > $O/overhead.json 2>$O/overhead.err; echo "overhead rc=$?"; cat $O/overhead.json; tail -5 $O/overhead.err
export DQGEN_CACHE_DIR=/tmp/dq_cold1
timeout 60 python scripts/runtime_figures.py first-call > $O/first_cold.json 2>&1; cat $O/first_cold.json
timeout 60 python scripts/runtime_figures.py first-call > $O/first_warm.json 2>&1; cat $O/first_warm.json
export DQGEN_CACHE_DIR=/tmp/dq_cold2 NUMBA_CACHE_DIR=/tmp/nb_cold2
timeout 90 python scripts/runtime_figures.py build awq_int4_fp16 > $O/build_cold.json 2>&1; cat $O/build_cold.json
timeout 90 python scripts/runtime_figures.py build awq_int4_fp16 > $O/build_warm.json 2>&1; cat $O/build_warm.json
( time python -c "import dqgen.runtime" ) 2>&1 | grep real
