#!/usr/bin/env bash
# GPU check, no download: ResNet-18 training and inference images/s on synthetic CIFAR-shaped
# tensors (50,000 x 3x32x32 uint8) with and without the fast path (bf16 autocast + channels_last),
# the ratio of unlearnkit's loop to a bare PyTorch loop, then the audit's time over the bare forward
# passes it needs (benchmarks/audit_cost.py on the bundled mnist5k). Meant to finish in under
# 5 minutes on one H200 (not measured yet: see docs/performance.md).
#
#   benchmarks/gpu_check.sh            # on a GPU machine
#   benchmarks/gpu_check.sh --quick    # reduced sizes, runs on a CPU (or UNLEARNKIT_QUICK=1)
#   GPU_CHECK_COMPILE=1 benchmarks/gpu_check.sh   # also the torch.compile variant
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" UNLEARNKIT_PROGRESS=0
QUICK=${UNLEARNKIT_QUICK:-0}
[ "${1:-}" = "--quick" ] && QUICK=1

if [ "$QUICK" = 1 ]; then
    DEVICE=auto; N=128; EPOCHS=1; BATCH=32; REPEATS=1; AUDIT_DATA=digits
else
    DEVICE=cuda; N=50000; EPOCHS=1; BATCH=256; REPEATS=2; AUDIT_DATA=mnist5k
fi
bench() {
    "$PY" benchmarks/train_throughput.py --dataset synthetic --n "$N" --model resnet18 --batch-size "$BATCH" \
        --epochs "$EPOCHS" --repeats "$REPEATS" --device "$DEVICE" --inference "$@"
}
SECONDS=0
"$PY" -c "import torch; print('torch', torch.__version__, '| cuda', torch.cuda.is_available(),
      '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
echo "== ResNet-18, float32"
bench
echo "== ResNet-18, fast path: bf16 autocast + channels_last"
bench --amp bf16 --channels-last
if [ "${GPU_CHECK_COMPILE:-0}" = 1 ]; then
    echo "== ResNet-18, fast path + torch.compile"
    bench --amp bf16 --channels-last --compile
fi
echo "== audit time over the bare forward passes ($AUDIT_DATA, small_cnn)"
"$PY" benchmarks/audit_cost.py --dataset "$AUDIT_DATA" --jobs 4 --repeats 1
echo "gpu_check: done in ${SECONDS}s (quick=$QUICK)"
