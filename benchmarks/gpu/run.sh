#!/usr/bin/env bash
# The GPU evidence of issue 41 in one command, about 8 minutes on an H100 (benchmarks/gpu/PLAN.md):
#   bash benchmarks/gpu/run.sh                    # on a machine with a CUDA GPU, from anywhere
#   GPU_DRY_RUN=1 bash benchmarks/gpu/run.sh      # the same stages on the CPU at tiny shapes (tests/test_gpu_run.py)
# Seven stages in order (benchmarks/gpu/stages.py), each in its own process with its own time budget
# (GPU_BUDGET_1..7 seconds; GPU_TOTAL for the whole); one status line per stage. Each stage's folder is packed into
# $OUT/stageN_<name>.tgz as soon as it ends, and $OUT/status.tsv is rewritten, so a crash or time-out in a later
# stage still returns the earlier ones. OUT defaults to .gpu-results/out, the tables to .gpu-results/work (GPU_WORK).
# Wheels in .whl/ (the device image lacks jsonschema and its dependencies: PLAN.md, step 0) are installed first.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
python=${PYTHON:-python3}
if [ "${GPU_DRY_RUN:-0}" != 1 ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "run.sh: the wheels in .whl/ did not install (benchmarks/gpu/PLAN.md, step 0)"; exit 2; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "run.sh: no CUDA device visible to torch here: refusing (GPU evidence comes from a GPU; GPU_DRY_RUN=1 runs the CPU dry run)"
    exit 2
  fi
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
exec "$python" benchmarks/gpu/stages.py
