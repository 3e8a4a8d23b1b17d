#!/usr/bin/env bash
# Wheels the lent GPU machine lacks (it has no registry), into ./.whl (git-ignored).
# Like ../shared/device/fetch-wheels.sh, but pydantic 2.14.3 needs typing-inspection >= 0.4.4
# (that script pins 0.4.2) and typing-extensions >= 4.16.
set -euo pipefail
ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"
grep -qx '/.whl/' "$ex" 2>/dev/null || echo '/.whl/' >> "$ex"
mkdir -p .whl && rm -f .whl/typing_inspection-0.4.2-*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_27_x86_64 -d .whl pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.7.0 \
  typing-inspection==0.4.5 typing-extensions==4.16.0 'nvidia-cuda-nvdisasm>=13.2,<14' 2>/dev/null
ls .whl
echo 'Start each device command with:'
echo 'python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site || exit;'
