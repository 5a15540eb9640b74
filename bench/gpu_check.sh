#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU checks of docs/cuda.md and docs/performance.md in one run, made for a
# lent GPU machine that has PyTorch but none of Coach's Debian libraries (docs/cuda.md, "On a
# lent GPU machine"). Prepared here:
#   cmake -S . -B build-cuda -DCOACH_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-cuda -j2 --target coach coach-node coach_cuda cuda_backend_test train_bench \
#     rescale_bench
#   ../shared/tools/device-bundle build-cuda           # programs + libraries into .device/
#   cp build-cuda/lib/libcoach_cuda.so .device/lib/     # the CUDA backend's plugin
#   bench/gpu_check.sh --pack-data                      # Fashion-MNIST into .devdata/ (xz)
# There: source .device/env.sh; bench/gpu_check.sh OUT_DIR   (each step bounded by `timeout`)
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--pack-data" ]; then
  mkdir -p .devdata
  grep -qx "/.devdata/" .git/info/exclude 2>/dev/null || echo "/.devdata/" >> .git/info/exclude
  for f in train-images-idx3-ubyte t10k-images-idx3-ubyte train-labels-idx1-ubyte \
           t10k-labels-idx1-ubyte; do
    zcat "/usr/share/datasets/fashion-mnist/$f.gz" | xz -9 -T2 > ".devdata/$f.xz"
  done
  mkdir -p .devdata/data && cp data/digits.csv.gz .devdata/data/
  du -sh .devdata
  exit 0
fi
out=${1:?usage: gpu_check.sh OUT_DIR | --pack-data}
mkdir -p "$out"
bin=.device/bin
fm=/tmp/fashion-mnist
mkdir -p "$fm"
for f in .devdata/*.xz; do
  b=$(basename "$f" .xz)
  xz -dc "$f" | gzip -1 > "$fm/$b.gz"
done
mkdir -p data && cp -n .devdata/data/digits.csv.gz data/ 2>/dev/null
# cuDNN: the machine's own (PyTorch's), never a copy of this build's (its stub would load
# another version's engines).
rm -f .device/lib/libcudnn*
dnn=$(find / -xdev -name 'libcudnn.so.9' -not -path '/proc/*' -not -path "$PWD/*" 2>/dev/null | head -n 1)
[ -n "$dnn" ] && export LD_LIBRARY_PATH="$(dirname "$dnn"):$LD_LIBRARY_PATH"
echo "cuDNN from: ${dnn:-none found}"
[ -e .device/lib/libcoach_cuda.so ] || echo "no .device/lib/libcoach_cuda.so: the programs will run on the cpu"
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'

echo "== 1. cuda_backend_test"
timeout 150 "$bin/cuda_backend_test" --gtest_brief=1 2>&1 | tee "$out/cuda_backend_test.txt" | tail -25

echo "== 2. the larger CNN: Coach beside PyTorch at fp32, tf32, bf16"
timeout 300 python3 bench/gpu_cnn.py --spec examples/fashion-cnn-gpu.yaml --coach "$bin/coach" \
  --data "$fm" --epochs "${GPU_CHECK_EPOCHS:-3}" --json "$out/gpu_cnn.json" 2>&1 | tee "$out/gpu_cnn.txt"

echo "== 3. where a step goes (train_bench --layers): cuDNN fp32, tf32, bf16; im2col fp32"
sed "s#/usr/share/datasets/fashion-mnist#$fm#" examples/fashion-cnn-gpu.yaml > /tmp/cnn32.yaml
sed 's/^precision: fp32/precision: tf32/' /tmp/cnn32.yaml > /tmp/cnntf.yaml
sed 's/^precision: fp32/precision: bf16/' /tmp/cnn32.yaml > /tmp/cnn16.yaml
for p in 32 tf 16; do
  timeout 40 "$bin/train_bench" --spec /tmp/cnn$p.yaml --backend cuda --samples 10240 \
    --configs 1x1,1x4 --repeat 1 --layers 20 2>&1 | tee "$out/layers_$p.txt" | tail -22
done
COACH_CUDNN=0 timeout 40 "$bin/train_bench" --spec /tmp/cnn32.yaml --backend cuda --samples 10240 \
  --configs 1x1 --repeat 1 --layers 20 2>&1 | tee "$out/layers_im2col.txt" | tail -20

echo "== 4. Coach fp32 and bf16 with 8 shards (the shards' Adam on 8 cores)"
timeout 150 python3 bench/gpu_cnn.py --spec examples/fashion-cnn-gpu.yaml --coach "$bin/coach" \
  --data "$fm" --epochs "${GPU_CHECK_EPOCHS:-3}" --shards 8 --precisions fp32,bf16 \
  2>&1 | tee "$out/gpu_cnn_8.txt"
if [ "${GPU_CHECK_RESCALE:-0}" = 1 ]; then
  echo "== 5. rescale_bench on 16 cores: 4, 64, 256 MiB shards, 3 moves each"
  timeout 150 "$bin/rescale_bench" --sizes 4,64,256 --repeat 3 --json 2>&1 | tee "$out/rescale.txt" | tail -30
fi
echo "== done"
