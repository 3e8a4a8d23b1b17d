#!/bin/bash
# One device call for the persistent int8 GRU (issue 16): a torch-free smoke run, the GRU GPU tests, the bench
# (rewrites the GRU section of docs/performance.md and docs/bench/gru.json, copied to $OUT), then the smoke run
# under compute-sanitizer racecheck and synccheck. Run from the worktree root on the device machine.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 90 python devtools/gru_persist_sanitize.py
smoke=$?
echo "smoke rc $smoke"
if [ "$smoke" -ne 0 ]; then  # a wrong or hanging kernel: keep the per-step tests, skip what would hang
    timeout 120 python -m pytest -q -p no:cacheprovider tests/test_gru_gpu.py tests/test_gru_persist.py -k "not persistent and not quantgru" 2>&1 | tail -20
    exit 1
fi
timeout 200 python -m pytest -q -p no:cacheprovider -rfE tests/test_gru_persist.py tests/test_gru_gpu.py 2>&1 | tail -30
timeout 240 python -m dqgen bench --gru --docs docs/performance.md > "$OUT/bench.log" 2>&1
echo "bench rc $?"
cp docs/performance.md docs/bench/gru.json "$OUT/" 2>/dev/null
grep -E "persistent|cudnn_fp16|per-step \(float" "$OUT/bench.log" | head -40
for tool in racecheck synccheck; do
    timeout 35 compute-sanitizer --tool $tool --error-exitcode 3 python devtools/gru_persist_sanitize.py > "$OUT/$tool.log" 2>&1
    echo "$tool rc $?"; tail -3 "$OUT/$tool.log"
done
