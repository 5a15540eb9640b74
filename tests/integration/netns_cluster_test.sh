#!/usr/bin/env bash
# netns.three_node_fashion_job: the cluster test of cluster_test.cpp across real network
# namespaces. deploy/local/netns-cluster.sh makes 3 hosts (10.77.0.1-3, links at RATE), each runs
# a coach-node on its own address (host 1 the scheduler), `coach submit --wait` runs the
# Fashion-MNIST MLP with 3 workers and 2 shards over them, and the test asserts the job succeeds
# with the accuracy of `coach train` (>= 0.87) and that status counts bytes between hosts. The
# nodes and the CLI authenticate with one cluster key (coach keygen, COACH_KEY); first, a node
# without a key is shown to refuse a client on another host (it serves loopback only).
# Root only: exits 77 (skipped) with the reason where namespaces cannot be made.
#   netns_cluster_test.sh BINARY_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
bin=${1:?usage: netns_cluster_test.sh BINARY_DIR}
cluster=$src/deploy/local/netns-cluster.sh
prefix=coachnc$$
port=7470
rate=${COACH_NETNS_RATE:-1gbit}
tmp=$(mktemp -d)

say() { echo "netns_cluster_test: $*"; }
fail() {
  say "FAILED: $*" >&2
  for f in "$tmp"/node*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 30 "$f"; }; done >&2
  exit 1
}

rc=0
why=$("$cluster" check 2>&1) || rc=$?
if [ "$rc" -eq 77 ]; then
  say "skipped: $why"
  exit 77
fi
[ "$rc" -eq 0 ] || fail "check exited with $rc: $why"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null || true
  done
  "$cluster" down --prefix "$prefix" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

"$cluster" up 3 --rate "$rate" --prefix "$prefix" >/dev/null || fail "cluster up"
a1=$("$cluster" addr 1)
sched=tcp://$a1:$port

# Without a key a node serves loopback only: a keyless client on host 2 is refused, at once.
"$cluster" exec 1 --prefix "$prefix" -- "$bin/apps/coach-node" --listen "tcp://$a1:$((port + 1))" \
  --scheduler --store "" --name plain >"$tmp/node-plain.log" 2>&1 &
plain_pid=$!
pids+=($plain_pid)
refused=1
for _ in $(seq 50); do
  rc=0
  out=$("$cluster" exec 2 --prefix "$prefix" -- env -u COACH_KEY "$bin/apps/coach" nodes \
    --at "tcp://$a1:$((port + 1))" 2>&1) || rc=$?
  if [ "$rc" -eq 3 ] && grep -q "not authorized" <<<"$out"; then refused=0; break; fi
  sleep 0.1  # the node may still be starting (connection refused: rc 1)
done
[ "$refused" -eq 0 ] || fail "a keyless node took a client from another host: rc $rc, $out"
grep -q "is not loopback and this node has no key" "$tmp/node-plain.log" ||
  fail "the keyless node did not log the refusal"
say "keyless node refused a client from 10.77.0.2: $out"
kill -TERM "$plain_pid"

# One key for the whole cluster; every coach-node and coach below reads it from COACH_KEY.
"$bin/apps/coach" keygen "$tmp/keys" --name cluster >/dev/null || fail "keygen"
export COACH_KEY=$tmp/keys/cluster.key
for i in 1 2 3; do
  ai=$("$cluster" addr "$i")
  # The scheduler keeps its jobs in memory: a later run must not resume this one's jobs.
  if [ "$i" -eq 1 ]; then role=(--scheduler --store ""); else role=(--join "$sched"); fi
  "$cluster" exec "$i" --prefix "$prefix" -- "$bin/apps/coach-node" --listen "tcp://$ai:$port" \
    "${role[@]}" --name "ns$i" --heartbeat 0.25 --cpu-accounting reserved >"$tmp/node$i.log" 2>&1 &
  pids+=($!)
done

in_ns1() { "$cluster" exec 1 --prefix "$prefix" -- "$@"; }
# JSON read by parsing it (never by its text): the nodes alive in a `coach nodes --json` reply,
# a field of the job that `coach submit --wait --json` prints ("" where it has none), and whether
# that job ran a part (worker or shard) on a node.
alive_nodes() {
  python3 -c 'import json, sys
try: print(sum(1 for n in json.load(sys.stdin)["nodes"] if n.get("alive") is True))
except Exception: print(0)'
}
job_field() {
  python3 -c 'import json, sys
try: v = json.load(sys.stdin).get(sys.argv[1])
except Exception: v = None
print("" if v is None else v)' "$1"
}
runs_on() {
  python3 -c 'import json, sys
try: j = json.load(sys.stdin); ok = sys.argv[1] in j["worker_nodes"] + j["shard_nodes"]
except Exception: ok = False
sys.exit(0 if ok else 1)' "$1"
}
up=0
for _ in $(seq 100); do
  out=$(cd "$src" && in_ns1 "$bin/apps/coach" nodes --json --at "$sched" 2>/dev/null || true)
  if [ "$(alive_nodes <<<"$out")" -eq 3 ]; then up=1; break; fi
  sleep 0.2
done
[ "$up" -eq 1 ] || fail "three nodes did not join: $out"
say "3 nodes up at 10.77.0.1-3, links $rate"

result=$(cd "$src" && in_ns1 "$bin/apps/coach" submit examples/fashion-mlp.yaml --workers 3 \
  --shards 2 --wait --json --at "$sched" 2>"$tmp/submit.err") || fail "submit: $(cat "$tmp/submit.err")"
say "$(tail -n 1 "$tmp/submit.err")"
acc=$(job_field test_accuracy <<<"$result")
cross=$(job_field cross_host_bytes <<<"$result")
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.87 else 1)" ||
  fail "test accuracy $acc < 0.87"
[ "${cross:-0}" -gt 1000000 ] || fail "cross-host bytes ${cross:-none} (expected > 1 MB)"
runs_on ns2 <<<"$result" && runs_on ns3 <<<"$result" || fail "workers not spread: $result"
say "ok: accuracy $acc, $cross bytes between hosts"
