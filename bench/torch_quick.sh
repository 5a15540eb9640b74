#!/usr/bin/env bash
# bench/torch_quick.sh NAME BUILD_DIR: the quick mode, for the suite (ctest bench.NAME_quick), of
# the benches under bench/ that need PyTorch or a GPU and have none of their own, at tiny sizes on
# the cpu, so that none breaks silently where they cannot be measured. Their figures mean nothing
# here; each run must finish and print its figure. NAME:
#   pytorch_mlp    bench/pytorch_mlp.py, 2,000 samples, 1 epoch
#   pytorch_spec   bench/pytorch_spec.py on examples/fashion-mlp.yaml beside train_bench, 512
#                  samples, 1 round
#   pytorch_check  coach train (fashion-mlp, 1 epoch, 2,000 samples) --save, then
#                  bench/pytorch_check.py on the file with coach predict and coach eval
#   torch_ddp      torchrun --nproc_per_node 2 bench/torch_ddp.py --quick
#   torch_gpu      bench/torch_gpu.sh with DEVICE=cpu, 1 epoch of 2,000 samples
#   gpu_check      bench/gpu_check.sh with 1 epoch: only on a lent GPU machine (nvidia-smi and
#                  the .device/ bundle gpu_check.sh documents); skipped elsewhere
# Python: $COACH_PYTHON, else /opt/coach-venv/bin/python (PyTorch's venv), else python3. Exit 77
# (skipped, saying why) without torch (numpy, yaml, safetensors where used) or Fashion-MNIST.
set -uo pipefail
name=${1:?usage: torch_quick.sh NAME BUILD_DIR}
build=$(cd "${2:?usage: torch_quick.sh NAME BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
py=${COACH_PYTHON:-}
[ -z "$py" ] && [ -x /opt/coach-venv/bin/python ] && py=/opt/coach-venv/bin/python
py=${py:-python3}
skip() { echo "skipped: $*"; exit 77; }
need() { "$py" -c "import $1" 2>/dev/null || skip "$py cannot import $1 (PyTorch's venv: issue 40's set-up)"; }
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || skip "no Fashion-MNIST in $data"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
coach=$build/apps/coach

case $name in
  pytorch_mlp)
    need "torch, numpy"
    "$py" bench/pytorch_mlp.py --samples 2000 --epochs 1 --json | tee "$tmp/out"
    grep -q '"samples_per_s"' "$tmp/out"
    ;;
  pytorch_spec)
    need "torch, numpy, yaml"
    "$py" bench/pytorch_spec.py --spec examples/fashion-mlp.yaml --samples 512 --rounds 1 \
      --train-bench "$build/bench/train_bench" --configs 1x1 | tee "$tmp/out"
    grep -qi "coach" "$tmp/out" && grep -qi "pytorch" "$tmp/out"
    ;;
  pytorch_check)
    need "torch, numpy, yaml, safetensors"
    sed -e 's/^epochs:.*/epochs: 1/' -e 's|^  path: .*|&\n  train_limit: 2000|' \
      examples/fashion-mlp.yaml >"$tmp/mlp.yaml"
    "$coach" train "$tmp/mlp.yaml" --workers 1 --shards 1 --save "$tmp/mlp.safetensors" ||
      { echo "coach train failed"; exit 1; }
    "$py" bench/pytorch_check.py "$tmp/mlp.safetensors" --coach "$coach" --spec "$tmp/mlp.yaml" |
      tee "$tmp/out"
    grep -q "agree on" "$tmp/out"
    ;;
  torch_ddp)
    need "torch, numpy"
    run=$(dirname "$py")/torchrun
    [ -x "$run" ] || skip "no torchrun beside $py"
    "$run" --standalone --nproc_per_node 2 bench/torch_ddp.py --quick | tee "$tmp/out"
    grep -q "samples/s" "$tmp/out"
    ;;
  torch_gpu)
    need "torch, numpy"
    DEVICE=cpu EXTRA="--train-limit 2000" COACH_PYTHON=$py bench/torch_gpu.sh "$coach" 1 |
      tee "$tmp/out"
    grep -q "Coach, 2 worker" "$tmp/out" && grep -q "epoch" "$tmp/out"
    ;;
  gpu_check)
    command -v nvidia-smi >/dev/null || skip "no nvidia-smi: gpu_check.sh runs on a lent GPU machine"
    [ -x .device/bin/coach ] || skip "no .device/ bundle (gpu_check.sh says how to make one)"
    GPU_CHECK_EPOCHS=1 bench/gpu_check.sh "$tmp/gpu" | tee "$tmp/out"
    grep -q "== done" "$tmp/out"
    ;;
  *)
    echo "torch_quick.sh: unknown bench '$name'" >&2
    exit 2
    ;;
esac
