#!/usr/bin/env bash
# bench/gpu_cnn_quick.sh COACH: gpu_cnn.py's quick mode for the suite (ctest bench.gpu_cnn_quick):
# a tiny CNN, 512 rows, 2 epochs, fp32 and bf16, on the cpu for both Coach and PyTorch, so the
# bench cannot break silently where there is no GPU. The figures mean nothing; the test checks
# that both sides trained (test accuracy above chance by far) and the table printed.
# Python: $COACH_PYTHON, else /opt/coach-venv/bin/python (PyTorch's venv), else python3; without
# torch, numpy or yaml it skips (exit 77) saying so.
set -uo pipefail
coach=${1:?usage: gpu_cnn_quick.sh COACH_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
py=${COACH_PYTHON:-}
[ -z "$py" ] && [ -x /opt/coach-venv/bin/python ] && py=/opt/coach-venv/bin/python
py=${py:-python3}
if ! "$py" -c 'import torch, numpy, yaml' 2>/dev/null; then
  echo "skipped: $py has no torch, numpy or yaml (PyTorch's venv: issue 40's set-up)"
  exit 77
fi
[ -d /usr/share/datasets/fashion-mnist ] || { echo "skipped: no Fashion-MNIST"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/tiny.yaml" <<'SPEC'
name: tiny-cnn
dataset: {format: idx, path: /usr/share/datasets/fashion-mnist, test_limit: 1000}
model:
  layers:
    - {type: conv2d, channels: 4, kernel: 3, padding: 1}
    - relu
    - {type: max_pool2d, kernel: 2}
    - flatten
    - dense
optimizer: {type: adam, learning_rate: 0.003}
batch_size: 32
epochs: 2
seed: 42
workers: 1
shards: 1
SPEC
"$py" "$here/gpu_cnn.py" --spec "$tmp/tiny.yaml" --coach "$coach" --device cpu --samples 512 \
  --epochs 2 --precisions fp32,bf16 --json "$tmp/out.json" || exit 1
"$py" - "$tmp/out.json" <<'CHECK'
import json, sys
r = json.load(open(sys.argv[1]))
bad = [f"{p} {side}: accuracy {v['accuracy']:.3f}" for p, sides in r.items()
       for side, v in sides.items() if not v["accuracy"] > 0.4 or not all(x > 0 for x in v["rates"])]
if set(r) != {"fp32", "bf16"} or bad:
    sys.exit("gpu_cnn quick: " + ("; ".join(bad) or f"precisions {sorted(r)}"))
print("gpu_cnn quick: both sides trained at fp32 and bf16")
CHECK
