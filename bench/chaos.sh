#!/usr/bin/env bash
# chaos: jobs with and without shard replicas on a keyed cluster of coach-node processes while
# nodes are killed and restarted, frozen and thawed, and the scheduler's node is killed and
# restarted on its store (issue 37: "0 lost, 0 hung, 0 failed").
#
#   bench/chaos.sh [--seconds S] [--quick] [--bin-dir DIR] [--nodes N] [--jobs J]
#                  [--epochs E] [--seed R] [--deadline D] [--keep]
#
# The cluster: a scheduler coach-node `a` with a job store, and N - 1 more nodes (default 5 in
# all), on 127.0.0.1, authenticated with one key from `coach keygen`, heartbeat 0.25 s, node
# timeout 1.5 s, --cpus 4 each, --cpu-accounting reserved (the faults' own load must not keep
# the jobs queued). The jobs: J (default 8) digits MLPs of E epochs (default 6,000: minutes each), 2 workers and
# 2 shards, placed spread over the nodes (so the faults hit their parts), every other one with
# `replicas: 2`, submitted one every S / J / 2 seconds.
#
# For S seconds (default 600) a fault every 1-4 s, chosen at random (seed R): a node other than
# `a` killed (SIGKILL) and restarted 1-3 s later on its address; a node other than `a` frozen
# (SIGSTOP) for 0.5-4 s (past the node timeout or not) and thawed; once, half way, `a` killed and
# restarted 1 s later on the same store. Then every node runs, and every job must end within D
# seconds (default 600). Checks: every submitted job is in the store (none lost), every one
# succeeded (none failed, none hung past the deadline), and each trained every sample of each of
# its epochs once (`epoch_samples`, from `coach status JOB --json`).
#
# --quick: 45 s of faults, 4 jobs of 1,500 epochs, deadline 300 s (the suite's bench.chaos_quick).
# Exit code 0 when every check passes, 1 when one fails, 2 on bad usage. The work directory
# (store, logs) is removed unless --keep or a check failed.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
bin=$src/build/apps
seconds=600
nodes=5
jobs=8
epochs=6000
seed=$RANDOM
deadline=600
keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --quick) seconds=45; jobs=4; epochs=1500; deadline=300; shift ;;
    --bin-dir) bin=$(cd "$2" && pwd); shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
usage() { echo "chaos: $*" >&2; exit 2; }
for v in seconds nodes jobs epochs seed deadline; do
  [[ ${!v} =~ ^[0-9]+$ ]] || usage "--$v must be a whole number"
done
[ "$nodes" -ge 3 ] && [ "$nodes" -le 9 ] || usage "--nodes must be in [3, 9]"
[ "$jobs" -ge 1 ] || usage "--jobs must be >= 1"
for p in coach coach-node; do [ -x "$bin/$p" ] || usage "$bin/$p is not built (--bin-dir DIR)"; done
data=$src/data/digits.csv.gz
[ -f "$data" ] || usage "$data is missing (scripts/setup.sh extracts it)"
command -v python3 >/dev/null || usage "python3 is needed to read coach status --json"
RANDOM=$seed

tmp=$(mktemp -d "${TMPDIR:-/tmp}/coach-chaos.XXXXXX")
say() { echo "chaos: $*" >&2; }
failures=()
check() { failures+=("$*"); say "FAILED: $*"; }

names=(a b c d e f g h i)
declare -A pid addr starts
cleanup() {
  local rc=$? n
  for n in "${!pid[@]}"; do kill -CONT "${pid[$n]}" 2>/dev/null || true; done
  for n in "${!pid[@]}"; do kill -KILL "${pid[$n]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$keep" -eq 1 ] || [ "$rc" -ne 0 ]; then say "work directory kept: $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
"$bin/coach" keygen "$tmp/keys" --name cluster >/dev/null
export COACH_KEY=$tmp/keys/cluster.key
for ((i = 0; i < nodes; i++)); do addr[${names[$i]}]=tcp://127.0.0.1:$(free_port); done
at=${addr[a]}
coach() { "$bin/coach" "$@"; }

# Starts node NAME (again) on its address; its log gets one file per start.
start() {
  local n=$1
  starts[$n]=$((${starts[$n]:-0} + 1))
  local role=(--join "$at")
  [ "$n" = a ] && role=(--scheduler --store "$tmp/jobs.db" --node-timeout 1.5)
  "$bin/coach-node" --exit-with-parent --listen "${addr[$n]}" "${role[@]}" --name "$n" \
    --heartbeat 0.25 --cpus 4 --cpu-accounting reserved >"$tmp/node-$n.${starts[$n]}.log" 2>&1 &
  pid[$n]=$!
}

alive_count() {
  local out
  out=$(coach nodes --json --at "$at" 2>/dev/null) || out=""
  python3 -c '
import json, sys
try:
    print(sum(n["alive"] is True for n in json.load(sys.stdin)["nodes"]))
except (ValueError, LookupError, TypeError):
    print(0)' <<<"$out"
}
await_alive() {
  for _ in $(seq 300); do
    [ "$(alive_count)" -ge "$1" ] && return 0
    sleep 0.2
  done
  return 1
}

for ((i = 0; i < nodes; i++)); do start "${names[$i]}"; done
await_alive "$nodes" || { check "the cluster did not start"; exit 1; }
say "cluster: $nodes nodes, scheduler at $at, seed $seed, $seconds s of faults, $jobs jobs of $epochs epochs"

spec() {  # spec FILE REPLICAS
  cat >"$1" <<EOF
name: chaos
dataset: {format: csv, path: $data, test_fraction: 0.2}
model: {type: mlp, hidden: [64], activation: relu}
optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}
batch_size: 32
epochs: $epochs
consistency: bsp
seed: 7
workers: 2
shards: 2
replicas: $2
placement: spread
slice_size: 1024
backend: cpu
EOF
}
spec "$tmp/plain.yaml" 1
spec "$tmp/replicated.yaml" 2

ids=()
submitted=0
submit_every=$(((seconds + jobs * 2 - 1) / (jobs * 2)))  # the jobs go in the first half
[ "$submit_every" -ge 1 ] || submit_every=1
next_submit=$SECONDS
submit_one() {
  local which=plain out
  [ $((submitted % 2)) -eq 1 ] && which=replicated
  if out=$(coach submit "$tmp/$which.yaml" --json --at "$at" 2>"$tmp/submit.err"); then
    ids+=("$(python3 -c 'import json, sys; print(json.load(sys.stdin)["job"])' <<<"$out")")
    submitted=$((submitted + 1))
  else
    say "a submit failed (tried again): $(cat "$tmp/submit.err")"
  fi
}

kills=0 freezes=0 sched_restarts=0
others=("${names[@]:1:$((nodes - 1))}")
start_s=$SECONDS
end_s=$((SECONDS + seconds))
half=$((SECONDS + seconds / 2))
while [ "$SECONDS" -lt "$end_s" ] || [ "$submitted" -lt "$jobs" ]; do
  if [ "$submitted" -lt "$jobs" ] && [ "$SECONDS" -ge "$next_submit" ]; then
    submit_one
    next_submit=$((SECONDS + submit_every))
  fi
  [ "$SECONDS" -lt "$end_s" ] || { sleep 0.5; continue; }
  if [ "$sched_restarts" -eq 0 ] && [ "$SECONDS" -ge "$half" ]; then
    kill -KILL "${pid[a]}"; wait "${pid[a]}" 2>/dev/null || true
    sleep 1
    start a
    sched_restarts=1
    say "$((SECONDS - start_s)) s: the scheduler's node killed and restarted"
    await_alive 1 || check "the scheduler did not come back"
    continue
  fi
  n=${others[$((RANDOM % ${#others[@]}))]}
  if [ $((RANDOM % 2)) -eq 0 ]; then
    kill -KILL "${pid[$n]}"; wait "${pid[$n]}" 2>/dev/null || true
    sleep "$((1 + RANDOM % 3))"
    start "$n"
    kills=$((kills + 1))
    say "$((SECONDS - start_s)) s: node $n killed and restarted"
  else
    kill -STOP "${pid[$n]}"
    sleep "$((RANDOM % 4)).$((RANDOM % 10))"
    kill -CONT "${pid[$n]}"
    freezes=$((freezes + 1))
    say "$((SECONDS - start_s)) s: node $n frozen and thawed"
  fi
  sleep "$((1 + RANDOM % 3))"
done
say "faults over: $kills kills, $freezes freezes, $sched_restarts scheduler restart(s); $submitted jobs"
await_alive "$nodes" || check "not every node alive after the faults"

# Every job ends within the deadline.
stop_at=$((SECONDS + deadline))
final=0
while [ "$SECONDS" -lt "$stop_at" ]; do
  line=$(coach status --json --at "$at" 2>/dev/null | python3 -c '
import json, sys
ids = set(int(a) for a in sys.argv[1:])
try:
    jobs = {j["job"]: j["state"] for j in json.load(sys.stdin)["jobs"]}
except (ValueError, LookupError, TypeError):
    print("unreachable"); sys.exit()
count = {}
for i in ids:
    s = jobs.get(i, "missing")
    count[s] = count.get(s, 0) + 1
print(" ".join(f"{k}={v}" for k, v in sorted(count.items())))' "${ids[@]}") || line=unreachable
  if [[ $line != *queued* && $line != *running* && $line != *suspended* && $line != unreachable ]]; then
    final=1
    break
  fi
  sleep 2
done
say "after $((SECONDS - end_s)) s: $line"
[ "$final" -eq 1 ] || check "jobs not final $deadline s after the faults (hung): $line"

succeeded=0 bad_epochs=0 lost=0 recoveries=0 failovers=0 resumes=0
for id in "${ids[@]}"; do
  read -r state ok rec fo rs < <(coach status "$id" --json --at "$at" 2>/dev/null | python3 -c '
import json, sys
try:
    j = json.load(sys.stdin)["jobs"][0]
except (ValueError, LookupError, TypeError):
    print("missing 0 0 0 0"); sys.exit()
per = j.get("samples_per_epoch", 0)
eps = j.get("epoch_samples", [])
ok = int(len(eps) == j.get("epochs_total", -1) and all(e == per for e in eps))
print(j["state"], ok, j.get("recoveries", 0), j.get("failovers", 0), j.get("resumes", 0))') ||
    state=missing
  case $state in
    succeeded) succeeded=$((succeeded + 1)) ;;
    missing) lost=$((lost + 1)); check "job $id lost (not known to the scheduler)" ;;
    *) check "job $id ended $state" ;;
  esac
  [ "$state" != succeeded ] || [ "$ok" = 1 ] || { bad_epochs=$((bad_epochs + 1)); check "job $id: an epoch did not train every sample once"; }
  recoveries=$((recoveries + ${rec:-0})); failovers=$((failovers + ${fo:-0})); resumes=$((resumes + ${rs:-0}))
done

echo
echo "chaos summary (seed $seed, $nodes nodes, $(nproc) CPUs here):"
echo "  faults: $seconds s; $kills node kills, $freezes freezes, $sched_restarts scheduler restart(s)"
echo "  jobs: $submitted submitted (half with replicas: 2), $succeeded succeeded, $lost lost, $bad_epochs with an epoch not trained once"
echo "  their recoveries $recoveries, failovers $failovers, resumes $resumes"
if [ "${#failures[@]}" -gt 0 ]; then
  echo "  FAILED checks:"
  for f in "${failures[@]}"; do echo "    $f"; done
  exit 1
fi
echo "  every check passed"
