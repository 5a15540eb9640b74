#!/usr/bin/env bash
# bench/cores_check.sh: the checks that need a host with idle cores (issues 42, 43, 44 item 4),
# in one run on a lent 16-core machine that has none of Coach's Debian libraries. Prepared here:
#   ../shared/tools/device-bundle build-n        # then keep only the programs used below:
#   (cd .device/bin && ls | grep -vxE 'coach|coach-node|coach-invocation|sparse_bench|ps_bench|recovery_bench|cipher_bench' | xargs rm -f)
#   bench/cores_check.sh --pack-data             # digits and 20,000 Fashion-MNIST rows, .devdata/
# There: source .device/env.sh; bench/cores_check.sh OUT_DIR [SECONDS]
# Steps run in order of what they settle, each bounded by `timeout`, and a step is skipped when
# less than its bound is left of SECONDS (default 480).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--pack-data" ]; then
  mkdir -p .devdata/fm .devdata/data
  grep -qx "/.devdata/" .git/info/exclude 2>/dev/null || echo "/.devdata/" >> .git/info/exclude
  src=/usr/share/datasets/fashion-mnist
  python3 - "$src" .devdata/fm <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, keep in (("train-images-idx3-ubyte", 20000), ("train-labels-idx1-ubyte", 20000),
                   ("t10k-images-idx3-ubyte", 10000), ("t10k-labels-idx1-ubyte", 10000)):
    raw = gzip.open(f"{src}/{name}.gz").read()
    dims = raw[3]
    shape = list(struct.unpack(f">{dims}I", raw[4:4 + 4 * dims]))
    per = 1
    for d in shape[1:]:
        per *= d
    shape[0] = keep
    head = raw[:4] + struct.pack(f">{dims}I", *shape)
    body = raw[4 + 4 * dims:4 + 4 * dims + keep * per]
    with gzip.open(f"{dst}/{name}.gz", "wb", 9) as f:
        f.write(head + body)
PY
  cp data/digits.csv.gz .devdata/data/
  du -sh .devdata
  exit 0
fi
out=${1:?usage: cores_check.sh OUT_DIR [SECONDS] | --pack-data}
budget=${2:-480}
mkdir -p "$out" data
cp -n .devdata/data/digits.csv.gz data/ 2>/dev/null
bin=.device/bin
start=$(date +%s)
step() {  # step BOUND NAME COMMAND...: runs COMMAND under timeout BOUND if the budget allows
  local bound=$1 name=$2
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt "$bound" ]; then
    echo "== $name: skipped ($left s left, needs $bound)"
    return
  fi
  echo "== $name ($(($(date +%s) - start)) s in)"
  timeout "$bound" "$@" 2>&1 | tee "$out/$name.txt"
}
nproc
step 60 torch_embedding python3 -m unittest discover -s tests/python -p 'test_torch_embedding.py' -v
step 70 sparse_dim8 "$bin/sparse_bench" --table-rows 100000 --shards 1,2,4 --seconds 1
step 70 sparse_dim64 "$bin/sparse_bench" --table-rows 100000 --dim 64 --shards 1,2,4 --seconds 1
step 60 ps_sizes "$bin/ps_bench" --sizes 4096,65536,1048576,16777216 --shards 2 --seconds 1
step 60 ps_curve "$bin/ps_bench" --sizes 1048576 --shards 1,2 --seconds 2 --curve
step 90 replicas_64 "$bin/recovery_bench" --no-recovery --reps 3 --epochs 20 --hidden 64 \
  --bin-dir "$bin"
step 90 replicas_512 "$bin/recovery_bench" --no-recovery --reps 3 --epochs 20 --hidden 512,512 \
  --bin-dir "$bin"
sed "s#/usr/share/datasets/fashion-mnist#$PWD/.devdata/fm#" examples/fashion-mlp-large-batch.yaml \
  > /tmp/fm-large.yaml
step 120 dynamic "$bin/coach" experiment dynamic --spec /tmp/fm-large.yaml --epochs 80 \
  --hog-seconds 8 --max-workers 8 --out "$out/experiments"
step 150 policies "$bin/coach" experiment policies --spec /tmp/fm-large.yaml --epochs 30 \
  --out "$out/experiments"
step 120 sparse_1e8 "$bin/sparse_bench" --table-rows 100000,100000000 --shards 2 --fill \
  --seconds 1
echo "== done ($(($(date +%s) - start)) s)"
