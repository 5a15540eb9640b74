#!/bin/bash
# sparse_memory.sh ROWS [BIN_DIR] [DATA]: three coach-nodes on 127.0.0.1 (a: the scheduler), a
# ctr job (docs/sparse.md) with one table of ROWS rows per field, 2 workers and 2 shards placed
# spread, one epoch; prints where the parts ran and each node's peak resident memory (VmHWM),
# so that a node holding only workers shows the worker's memory against the table's size.
# DATA: a set from `coach data ctr` (default data/ctr-1m.tsv of the repository); where it is
# missing, 100,000 rows are made for the run (the quick mode the suite runs).
set -eu
ROWS=$1
B=$(cd "${2:-$(dirname "$0")/../build/apps}" && pwd)
DATA=$(realpath -m "${3:-$(dirname "$0")/../data/ctr-1m.tsv}")
WORK=$(mktemp -d)
cd "$WORK"
trap 'kill $A $BB $C 2>/dev/null || true; rm -rf "$WORK"' EXIT
if [ ! -f "$DATA" ]; then
  DATA=$WORK/ctr-100k.tsv
  "$B/coach" data ctr --rows 100000 --out "$DATA" >/dev/null
fi
P=$((27200 + RANDOM % 500))
$B/coach-node --exit-with-parent --listen tcp://127.0.0.1:$P --scheduler --name a > a.log 2>&1 &
A=$!
$B/coach-node --exit-with-parent --listen tcp://127.0.0.1:$((P+1)) --join tcp://127.0.0.1:$P --name b > b.log 2>&1 &
BB=$!
$B/coach-node --exit-with-parent --listen tcp://127.0.0.1:$((P+2)) --join tcp://127.0.0.1:$P --name c > c.log 2>&1 &
C=$!
# The three nodes joined (every 0.2 s, 30 s at most).
for i in $(seq 1 150); do
  N=$("$B/coach" nodes --at tcp://127.0.0.1:$P --json 2>/dev/null | grep -o '"alive":true' | wc -l || true)
  [ "$N" -ge 3 ] && break
  sleep 0.2
done
cat > spec.yaml <<Y
name: mem-$ROWS
dataset: {format: ctr, path: $DATA, test_fraction: 0.1}
model:
  type: mlp
  hidden: [64]
  embeddings:
    - {fields: all, rows: $ROWS, dim: 8}
sparse_optimizer: {type: adagrad, learning_rate: 0.02}
optimizer: {type: adam, learning_rate: 0.002}
batch_size: 256
epochs: 1
seed: 42
workers: 2
shards: 2
placement: spread
Y
J=$($B/coach submit spec.yaml --at tcp://127.0.0.1:$P | tail -1)
for i in $(seq 1 120); do
  S=$($B/coach status $J --at tcp://127.0.0.1:$P --json 2>/dev/null)
  echo "$S" | grep -q '"state":"succeeded"\|"state":"failed"' && break
  sleep 1
done
echo "$S" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["state"], "workers", j["worker_nodes"], "shards", j["shard_nodes"], "acc", j["test_accuracy"]); sys.exit(j["state"] != "succeeded")'
for n in a:$A b:$BB c:$C; do echo "${n%%:*} peak $(grep VmHWM /proc/${n##*:}/status)"; done
