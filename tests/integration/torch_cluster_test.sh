#!/usr/bin/env bash
# tests/integration/torch_cluster_test.sh [BUILD_DIR]: a PyTorch script job on 4 coach-nodes on 127.0.0.1 (one the scheduler),
# `replicas: 2`, the node of a primary shard SIGKILLed in the first epoch: prints the nodes, the
# job's status before and after, and its log (issue 40: "across 3 coach-nodes a PyTorch job
# completes, and with replicas: 2 survives the loss of the node holding a primary"). The spec is
# examples/torch/fashion_cnn.yaml on 6,000 training images for 3 epochs, submitted from a copy of
# its folder that is deleted right after the submit (the nodes run their own copies). Stops
# everything it started; exit 0 when the job succeeded, 77 (skipped) without PyTorch. ctest
# torch.cluster (labels integration, torch). PORT_BASE (default 7791), PYTHON (default
# /opt/coach-venv/bin/python).
set -u
cd "$(dirname "$0")/../.."
B=${1:-build}/apps
PY=${PYTHON:-/opt/coach-venv/bin/python}
port=${PORT_BASE:-7791}
at=127.0.0.1:$port
tmp=$(mktemp -d)
pids=()
trap 'kill ${pids[*]} 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
"$PY" -c 'import torch' 2>/dev/null || { echo "skipped: $PY cannot import torch"; exit 77; }
[ -d /usr/share/datasets/fashion-mnist ] || { echo "skipped: no Fashion-MNIST"; exit 77; }
names=(a b c d)
for i in 0 1 2 3; do
  role=(--join "tcp://$at")
  [ "$i" = 0 ] && role=(--scheduler --store '')
  "$B/coach-node" --listen "tcp://127.0.0.1:$((port + i))" "${role[@]}" --name "${names[$i]}" \
    --python "$PY" --cpu-accounting reserved --cpus 8 > "$tmp/${names[$i]}.log" 2>&1 &
  pids+=($!)
  [ "$i" = 0 ] && sleep 1
done
for _ in $(seq 100); do
  [ "$("$B/coach" nodes --at "$at" --json 2>/dev/null | grep -o '"name"' | wc -l)" -ge 4 ] && break
  sleep 0.2
done
"$B/coach" nodes --at "$at"
cp -r examples/torch "$tmp/torch"
sed -e 's|^  # args: .*|  args: ["--train-limit", "6000", "--test-limit", "1000"]|' \
  -e 's|^epochs: .*|epochs: 3|' \
  -e 's|^shards: .*|shards: {min: 1, max: 8, initial: 2}\nreplicas: 2\nplacement: spread|' \
  examples/torch/fashion_cnn.yaml > "$tmp/torch/cluster.yaml"
job=$("$B/coach" submit "$tmp/torch/cluster.yaml" --at "$at" --workers 2 --shards 2 --python "$PY" \
  --json | grep -o '"job": *[0-9]*' | grep -o '[0-9]*$')
[ -n "$job" ] || { echo "the submit failed"; exit 1; }
rm -rf "$tmp/torch"  # the nodes must not need the submitter's folder
field() {
  "$B/coach" status "$job" --at "$at" --json |
    python3 -c "import json,sys; d=json.load(sys.stdin); j=d['jobs'][0] if 'jobs' in d else d; print($1)"
}
for _ in $(seq 600); do [ "$(field "j['samples_done']")" -gt 0 ] 2>/dev/null && break; sleep 0.5; done
"$B/coach" status "$job" --at "$at"
victim=$(field "[n for n in j['shard_nodes'] if n != 'a'][0]")
for i in 0 1 2 3; do [ "${names[$i]}" = "$victim" ] && vpid=${pids[$i]}; done
echo "SIGKILL coach-node $victim, which holds a primary shard"
kill -9 "$vpid"
for _ in $(seq 900); do
  case $(field "j['state']") in succeeded | failed | cancelled) break ;; esac
  sleep 1
done
"$B/coach" status "$job" --at "$at"
field "{k: j[k] for k in ('state', 'epoch_samples', 'epoch_accuracy', 'failovers', 'recoveries')}"
"$B/coach" logs "$job" --at "$at"
[ "$(field "j['state']")" = succeeded ]
