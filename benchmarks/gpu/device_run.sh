#!/usr/bin/env bash
# Run on a lent GPU machine through the device tool (benchmarks/gpu/PLAN.md), from the repository root:
#   bash benchmarks/gpu/device_run.sh [SECONDS]
# The machine has PyTorch and pandas but no network: the few missing wheels travel in .whl/ (PLAN.md, step 0).
# Results go to .gpu-results/ (ignored) and come back as one archive, $OUT/gpu-results.tgz.
set -uo pipefail
budget=${1:-420}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheels missing: see benchmarks/gpu/PLAN.md, step 0"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
w=.gpu-results
mkdir -p "$w"
nvidia-smi -q > "$w/nvidia-smi.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' \
  > "$w/versions.txt" 2>&1
# the sweep (every rule, bf16, three architectures), largest configurations first, in one process; then the
# findings (calibration, comparison, summary, figures) and the device model's numbers beside the catalogue's
python3 benchmarks/gpu_sweep.py --config config/gpu.yaml --out "$w/sweep" --in-process --largest-first \
  --time-budget "$budget" 2>&1 | tee "$w/sweep.log"
tar czf "${OUT:-/tmp}/gpu-results.tgz" --exclude='*.pt' --exclude='runs' "$w"
ls -la "${OUT:-/tmp}"
