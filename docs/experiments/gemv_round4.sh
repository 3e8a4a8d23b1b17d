#!/bin/bash
# Round 4's GPU call (docs/performance.md, "Fused GEMV speed work, round 4"): run from this tree's root with dqgen
# on PYTHONPATH and MAIN = a checkout of the branch's base (the "before" kernel, timed in the same call).
# Timings first (main, this tree's variants, this tree's kept kernel at M = 1..16), then the GPU tests and the
# sanitizers of the kept kernel. Everything goes to $OUT.
set -u
ALLM=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
PYTHONPATH=$MAIN:/tmp/site timeout 150 python docs/experiments/matmul_variants.py $OUT/main --only=kept --ms=$ALLM > $OUT/main.log 2>&1
tail -3 $OUT/main.log
timeout 200 python docs/experiments/matmul_variants.py $OUT/variants > $OUT/variants.log 2>&1
grep "^check" $OUT/variants.log; tail -2 $OUT/variants.log
timeout 120 python docs/experiments/matmul_variants.py $OUT/kept --only=kept --ms=$ALLM > $OUT/kept.log 2>&1
tail -2 $OUT/kept.log
timeout 200 python -m pytest -q -x tests/test_gpu_matmul.py > $OUT/pytest.log 2>&1; tail -3 $OUT/pytest.log
timeout 150 compute-sanitizer --tool memcheck --report-api-errors no python devtools/matmul_sanitize.py > $OUT/memcheck.log 2>&1; tail -3 $OUT/memcheck.log
timeout 150 compute-sanitizer --tool racecheck python devtools/matmul_sanitize.py > $OUT/racecheck.log 2>&1; tail -3 $OUT/racecheck.log
