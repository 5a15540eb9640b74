#!/usr/bin/env bash
# bench/torch_gpu.sh COACH [EPOCHS]: a PyTorch script's model on the GPU through Coach against the
# same script alone on the GPU (issue 44 item 3): examples/torch/fashion_cnn_plain.py --device
# cuda beside examples/torch/fashion_cnn.py run by `coach train` with 1 worker and 1 shard, and
# with 2 and 2, at global batches 64 and 512 (Adam 1e-3, cosine to 0). Prints each run's
# epochs (samples/s, test accuracy) and Coach's per-step breakdown of the handoff (parameters
# into the shared file, the script's copies to and from the device, its compute, the gradient
# out). Python: $COACH_PYTHON, else python3. Needs Fashion-MNIST in /usr/share/datasets.
# DEVICE (default cuda) and EXTRA (more arguments of both scripts, e.g. "--train-limit 2000")
# let it be tried on a machine without a GPU.
set -uo pipefail
coach=${1:?usage: torch_gpu.sh COACH_BINARY [EPOCHS]}
epochs=${2:-2}
device=${DEVICE:-cuda}
read -r -a extra <<<"${EXTRA:-}"
here=$(cd "$(dirname "$0")/.." && pwd)
py=${COACH_PYTHON:-python3}
export COACH_PYTHON=$py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
for batch in 64 512; do
  echo "== plain PyTorch on $device, batch $batch"
  "$py" "$here/examples/torch/fashion_cnn_plain.py" --epochs "$epochs" --batch "$batch" \
    --device "$device" --threads 4 "${extra[@]}"
  sed -e "s|^batch: .*|batch: {global: $batch}|" -e "s|^epochs: .*|epochs: $epochs|" \
    -e "s|^  script: .*|  script: $here/examples/torch/fashion_cnn.py\n  args: [--device, $device${EXTRA:+, ${EXTRA// /, }}]|" \
    "$here/examples/torch/fashion_cnn.yaml" > "$tmp/gpu.yaml"
  for n in 1 2; do
    echo "== Coach, $n worker(s), $n shard(s), the script on $device, batch $batch"
    "$coach" train "$tmp/gpu.yaml" --workers "$n" --shards "$n" 2>&1 |
      grep -E "epoch|steps:|done|error|Error" 
  done
done
