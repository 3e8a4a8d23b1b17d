#!/usr/bin/env bash
# Smoke test of the end-to-end benches at small sizes, before their full runs (each full run is a device call of its
# own): humming in --matmul, --model-linears, --model. Run from the repo root on the GPU machine, with dqgen on
# PYTHONPATH and, for the humming rows, humming-kernels installed (bash ../shared/device/fetch-wheels.sh
# humming-kernels==0.1.19 here first; its install line there). Records go to OUTDIR, not docs/bench.
#   bash devtools/bench_e2e_smoke.sh [OUTDIR]            all three, small (about 3-5 minutes on an H100)
#   STEP=matmul|linears|model bash devtools/bench_e2e_smoke.sh [OUTDIR]    one of them
# The full runs, one device call each: `python -m dqgen bench --model-linears` (4 layers) and
# `python -m dqgen bench --model --modes eager` then `python -m dqgen bench --model --modes graphs --merge`.
set -uo pipefail
OUT=${1:-${OUT:-/tmp/dqgen-e2e}}
STEP=${STEP:-all}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python -c 'import humming' 2>/dev/null && echo "humming: installed" || echo "humming: not installed (no humming rows)"
rc=0
if [[ $STEP == all || $STEP == matmul ]]; then
  python -m dqgen bench --matmul awq_int4_fp16 --shapes 4096x6144 --m 1,16,64 \
    --impls "dqgen,cublas dense,humming" --record "$OUT/matmul_smoke.json" 2>&1 | tail -20 || rc=1
fi
if [[ $STEP == all || $STEP == linears ]]; then
  python -m dqgen bench --model-linears --layers 2 --m 1,16,64 --replays 5 \
    --record "$OUT/e2e_linears_smoke.json" || rc=1
fi
if [[ $STEP == all || $STEP == model ]]; then
  python -m dqgen bench --model --layers 2 --batches 1,4 --prefill 256 --new-tokens 8 --runs 2 \
    --record "$OUT/model_smoke.json" || rc=1
fi
exit $rc
