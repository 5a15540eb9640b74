#!/usr/bin/env bash
# submit_load: many `coach submit`s at the same moment against a loopback cluster, then the same
# across a killed and restarted scheduler (docs/load.md).
#
#   bench/submit_load.sh [--jobs N] [--bin-dir DIR] [--nodes K] [--cpus C] [--deadline S]
#                        [--phase 1|2|both|load] [--kill-after A] [--down S] [--keep]
#                        [--heartbeat H] [--node-timeout T] [--status-loops L] [--load-for S]
#                        [--accounting measured|reserved] [--status-p99 S]
#
# The cluster: a scheduler coach-node with a job store in a temporary directory and K more
# nodes (default 2) joining it, all on 127.0.0.1, authenticated with one key from
# `coach keygen`. The job: the digits MLP, 1 epoch, 1 worker, 1 shard.
#
# Phase 1: N (default 100) `coach submit` processes are released together; every one must exit 0
# and print an id, the ids must be distinct, and every job must reach a final state (succeeded,
# failed, cancelled) within S seconds (default 600); `coach status --json` is polled and the
# jobs per state are printed as they change.
# Phase 2: the same against the same store, but the scheduler node is killed (SIGKILL) once its
# log shows A of these submits taken (default N/2; clients print their id later than that, so
# counting ids would kill it after the last one), and restarted on the same store and address
# after --down seconds (default 1). Every id printed must be a job of the store that reaches a
# final state; a submit that failed must exit non-zero with a message (the messages are
# counted); no id of phase 1 or 2 may be given twice. Jobs in the store that no submit printed
# (stored, then the scheduler died before its answer left) are counted and must end too.
#
# Phase load (issue 37, item 2; not part of both): N submits released together while L loops
# (default 50) run `coach status --json` back to back for S seconds (default 60). Checks: every
# submit exits 0 with an id, every job ends succeeded, no node is declared dead ("stopped
# heartbeating" in the scheduler's log: every node is alive throughout), and `coach status`
# answers with p99 under 2 s. --heartbeat and --node-timeout are passed to every node (default
# 0.25 s and coach-node's 5 s). --status-p99: the bound on that p99 (default 2 s).
# --accounting: every node's --cpu-accounting (default: coach-node's, measured, under which the
# jobs wait while the load keeps the CPUs busy). The suite runs the quick mode
# (bench.submit_load_quick): 20 submits, 5 loops, 5 s, reserved accounting, a 10 s bound.
#
# --bin-dir: where `coach` and `coach-node` are (default: build/apps of this tree). --cpus: the
# CPUs each node advertises (default: the host's). --keep: keep the work directory (it is kept
# anyway when a check fails). Exit code 0 when every check passes, 1 when one fails, 2 on bad
# usage.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
bin=$src/build/apps
jobs=100
joiners=2
cpus=""
deadline=600
phase=both
kill_after=""
down=1
keep=0
heartbeat=0.25
node_timeout=""
status_loops=50
load_for=60
accounting=""
status_p99=2
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --bin-dir) bin=$(cd "$2" && pwd); shift 2 ;;
    --nodes) joiners=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --phase) phase=$2; shift 2 ;;
    --kill-after) kill_after=$2; shift 2 ;;
    --down) down=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --heartbeat) heartbeat=$2; shift 2 ;;
    --node-timeout) node_timeout=$2; shift 2 ;;
    --status-loops) status_loops=$2; shift 2 ;;
    --load-for) load_for=$2; shift 2 ;;
    --accounting) accounting=$2; shift 2 ;;
    --status-p99) status_p99=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "submit_load: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
usage() { echo "submit_load: $*" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || usage "--jobs must be >= 1"
names=(b c d e f g h i j k l m n o p q r s t u v w x y z)
[[ $joiners =~ ^[0-9]+$ && $joiners -le ${#names[@]} ]] || usage "--nodes must be in [0, ${#names[@]}]"
[[ -z $cpus || $cpus =~ ^[1-9][0-9]*$ ]] || usage "--cpus must be >= 1"
[[ $deadline =~ ^[1-9][0-9]*$ ]] || usage "--deadline must be whole seconds >= 1"
[[ $phase =~ ^(1|2|both|load)$ ]] || usage "--phase must be 1, 2, both or load"
[[ $down =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage "--down must be seconds >= 0"
[[ $heartbeat =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage "--heartbeat must be seconds"
[[ -z $node_timeout || $node_timeout =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage "--node-timeout must be seconds"
[[ $status_loops =~ ^[0-9]+$ ]] || usage "--status-loops must be >= 0"
[[ $load_for =~ ^[1-9][0-9]*$ ]] || usage "--load-for must be whole seconds >= 1"
[[ -z $accounting || $accounting =~ ^(measured|reserved)$ ]] || usage "--accounting must be measured or reserved"
[[ $status_p99 =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage "--status-p99 must be seconds"
[ -n "$kill_after" ] || kill_after=$(((jobs + 1) / 2))
[[ $kill_after =~ ^[0-9]+$ && $kill_after -le $jobs ]] || usage "--kill-after must be in [0, --jobs]"
for p in coach coach-node; do
  [ -x "$bin/$p" ] || usage "$bin/$p is not built (--bin-dir DIR)"
done
data=$src/data/digits.csv.gz
[ -f "$data" ] || usage "$data is missing (scripts/setup.sh extracts it)"
command -v python3 >/dev/null || usage "python3 is needed to read coach status --json"
command -v flock >/dev/null || usage "flock (util-linux) is needed to release the submits together"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/coach-submit-load.XXXXXX")
say() { echo "submit_load: $*" >&2; }
failures=()
check() {  # check CONDITION-WORDS... : records a failed check
  failures+=("$*")
  say "FAILED: $*"
}

# --- processes ------------------------------------------------------------------------------

node_pids=()
sched_pid=""
submit_pids=()
cleanup() {
  local rc=$? p
  for p in "${submit_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  # The joining nodes first (SIGTERM drains them), then the scheduler's; SIGKILL after 5 s.
  for p in "${node_pids[@]}" $sched_pid; do
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 25); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null || true
    { wait "$p" || true; } 2>/dev/null
  done
  if [ "$keep" -eq 1 ] || [ "$rc" -ne 0 ]; then
    say "work directory kept: $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

"$bin/coach" keygen "$tmp/keys" --name cluster >/dev/null
export COACH_KEY=$tmp/keys/cluster.key
at=tcp://127.0.0.1:$(free_port)
store=$tmp/jobs.db
cpu_args=()
[ -z "$cpus" ] || cpu_args=(--cpus "$cpus")
[ -z "$accounting" ] || cpu_args+=(--cpu-accounting "$accounting")
timing_args=(--heartbeat "$heartbeat")
[ -z "$node_timeout" ] || timing_args+=(--node-timeout "$node_timeout")
coach() { "$bin/coach" "$@"; }

# The scheduler node; its log gets one file per start. --exit-with-parent: none outlives this
# script, even when it is killed.
sched_starts=0
start_scheduler() {
  sched_starts=$((sched_starts + 1))
  "$bin/coach-node" --exit-with-parent --listen "$at" --scheduler --store "$store" --name a \
    "${timing_args[@]}" "${cpu_args[@]}" >"$tmp/node-a.$sched_starts.log" 2>&1 &
  sched_pid=$!
}

# How many nodes the output of `coach nodes --json` on stdin lists alive (0 if it is not that).
alive_in() {
  python3 -c '
import json, sys
try:
    print(sum(n["alive"] is True for n in json.load(sys.stdin)["nodes"]))
except (ValueError, LookupError, TypeError):
    print(0)'
}

# Waits until `coach nodes` lists N nodes alive (60 s at most).
await_alive() {
  local n=$1 out=""
  for _ in $(seq 300); do
    out=$(coach nodes --json --at "$at" 2>/dev/null || true)
    [ "$(alive_in <<<"$out")" -eq "$n" ] && return 0
    sleep 0.2
  done
  say "$n node(s) not alive after 60 s: $out"
  return 1
}

start_scheduler
for i in $(seq "$joiners"); do
  name=${names[$((i - 1))]}
  "$bin/coach-node" --exit-with-parent --listen "tcp://127.0.0.1:$(free_port)" --join "$at" \
    --name "$name" --heartbeat "$heartbeat" "${cpu_args[@]}" >"$tmp/node-$name.log" 2>&1 &
  node_pids+=($!)
done
await_alive $((joiners + 1)) || { check "the cluster did not start"; exit 1; }
say "cluster: scheduler at $at, $((joiners + 1)) node(s), store $store, binaries $bin"

# The job: digits, 1 epoch, 1 worker, 1 shard; the data set by absolute path.
spec=$tmp/load.yaml
cat >"$spec" <<EOF
name: load
dataset: {format: csv, path: $data, test_fraction: 0.2}
model: {type: mlp, hidden: [64], activation: relu}
optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}
batch_size: 32
epochs: 1
consistency: bsp
seed: 7
workers: 1
shards: 1
slice_size: 1024
backend: cpu
EOF

# --- submits --------------------------------------------------------------------------------

# Starts N submits into DIR, each waiting on a shared lock; they go once release_submits runs.
# Each writes DIR/out.I (stdout), DIR/err.I (stderr) and DIR/rc.I ("EXIT START END" seconds).
prepare_submits() {
  local dir=$1 n=$2 i
  mkdir -p "$dir"
  : >"$dir/go.lock"
  exec {go_fd}>"$dir/go.lock"
  flock -x "$go_fd"
  submit_pids=()
  for i in $(seq "$n"); do
    (
      exec {go_fd}>&-
      : >"$dir/ready.$i"
      flock -s "$dir/go.lock" true
      start=$EPOCHREALTIME
      rc=0
      "$bin/coach" submit "$spec" --json --at "$at" >"$dir/out.$i" 2>"$dir/err.$i" || rc=$?
      echo "$rc $start $EPOCHREALTIME" >"$dir/rc.$i"
    ) &
    submit_pids+=($!)
  done
  while [ "$(find "$dir" -name 'ready.*' | wc -l)" -lt "$n" ]; do sleep 0.05; done
  sleep 0.2  # the last ones reach flock
}
release_submits() {
  go_at=$EPOCHREALTIME
  flock -u "$go_fd"
  exec {go_fd}>&-
}
acknowledged() { find "$1" -name 'out.*' -size +0 | wc -l; }
# Submits the running scheduler has logged ("job N 'load' submitted ..."), this start of it.
taken() { grep -c "' submitted (" "$tmp/node-a.$sched_starts.log" || true; }
wait_submits() {
  local p
  for p in "${submit_pids[@]}"; do wait "$p" || true; done
  submit_pids=()
}

# Reads DIR's results: prints "ok failed ids" counts and writes DIR/ids (one id a line, in
# submit order), DIR/errors (each failed submit's exit code and message), DIR/latency.
collect() {
  python3 - "$1" "$2" "$go_at" <<'EOF'
import json, os, statistics, sys
d, n, go = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ids, errors, lat, bad = [], [], [], 0
ends = []
for i in range(1, n + 1):
    rc, start, end = open(f"{d}/rc.{i}").read().split()
    rc, end = int(rc), float(end)
    out = open(f"{d}/out.{i}").read().strip()
    err = open(f"{d}/err.{i}").read().strip()
    job = None
    if out:
        try:
            job = json.loads(out)["job"]
        except (ValueError, KeyError, TypeError):
            job = None
    if rc == 0 and job is not None:
        ids.append(job)
        lat.append(end - go)
        ends.append(end)
    else:
        if rc == 0 or not err:
            bad += 1  # exit 0 without an id, or a failure without a message
        errors.append(f"exit {rc}: {err or '(no message)'}" + (f" [stdout: {out}]" if out else ""))
open(f"{d}/ids", "w").write("".join(f"{j}\n" for j in ids))
open(f"{d}/errors", "w").write("".join(f"{e}\n" for e in errors))
q = lambda p: sorted(lat)[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
open(f"{d}/latency", "w").write(
    f"{len(lat)} {min(lat, default=float('nan')):.2f} {q(0.5):.2f} {q(0.95):.2f} "
    f"{max(lat, default=float('nan')):.2f}\n")
print(len(ids), len(errors), len(set(ids)), bad)
EOF
}

# Prints the states of the jobs listed in IDS (a file) as "STATE=COUNT ..." plus "final=F
# total=T missing=M", or "unreachable" when the scheduler does not answer.
states_of() {
  local out
  out=$(coach status --json --at "$at" 2>/dev/null) || { echo unreachable; return; }
  python3 -c '
import json, sys
ids = [int(l) for l in open(sys.argv[1]) if l.strip()]
jobs = {j["job"]: j["state"] for j in json.load(sys.stdin)["jobs"]}
count = {}
for i in ids:
    s = jobs.get(i, "missing")
    count[s] = count.get(s, 0) + 1
final = sum(count.get(s, 0) for s in ("succeeded", "failed", "cancelled"))
order = ["queued", "running", "suspended", "succeeded", "failed", "cancelled", "missing"]
missing = count.get("missing", 0)
print(" ".join(f"{s}={count[s]}" for s in order if s in count),
      f"final={final} total={len(ids)} missing={missing}")
' "$1" <<<"$out"
}

# Polls until every job of IDS is final or DEADLINE seconds passed; prints progress when the
# counts change (at most every second). Sets final_at (seconds since `since`) and last_states.
await_final() {
  local label=$1 ids=$2 since=$3 stop=$((SECONDS + deadline)) line last=""
  final_at=""
  while [ "$SECONDS" -lt "$stop" ]; do
    line=$(states_of "$ids")
    local t
    t=$(python3 -c "print(f'{$EPOCHREALTIME - $since:.1f}')")
    if [ "$line" != "$last" ]; then
      say "$label: ${t} s: $line"
      last=$line
    fi
    last_states=$line
    if [[ $line =~ final=([0-9]+)\ total=([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -eq "${BASH_REMATCH[2]}" ]; then
      final_at=$t
      return 0
    fi
    sleep 1
  done
  return 1
}

# The jobs of IDS that are not final, with their state and error, one a line.
not_final() {
  coach status --json --at "$at" 2>/dev/null | python3 -c '
import json, sys
ids = {int(l) for l in open(sys.argv[1]) if l.strip()}
for j in json.load(sys.stdin)["jobs"]:
    if j["job"] in ids and j["state"] not in ("succeeded", "failed", "cancelled"):
        print("job {job}: {state}, workers {worker_nodes}, shards {shard_nodes}, epochs "
              "{epochs_done}/{epochs_total}, resumes {resumes}, error {error!r}".format(**j))
' "$1"
}

# Ids in the store (read-only), one a line.
store_ids() {
  python3 -c '
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, timeout=10)
for (i,) in db.execute("SELECT id FROM jobs ORDER BY id"):
    print(i)
' "$store"
}

summary=()
all_ids=$tmp/all-ids
: >"$all_ids"

# --- phase 1 --------------------------------------------------------------------------------

run_phase1() {
  local dir=$tmp/phase1
  say "phase 1: $jobs submits at once"
  prepare_submits "$dir" "$jobs"
  release_submits
  wait_submits
  local accepted_s
  accepted_s=$(python3 -c "print(f'{$EPOCHREALTIME - $go_at:.1f}')")
  local ok failed distinct bad
  read -r ok failed distinct bad < <(collect "$dir" "$jobs")
  local lat
  read -r _ l_min l_med l_p95 l_max <"$dir/latency"
  lat="min $l_min s, median $l_med s, p95 $l_p95 s, max $l_max s"
  say "phase 1: $ok of $jobs submits exited 0 with an id ($distinct distinct), $failed failed; all answered in $accepted_s s (per submit: $lat)"
  [ "$ok" -eq "$jobs" ] || check "phase 1: $failed submit(s) failed: $(sort "$dir/errors" | uniq -c | head -5)"
  [ "$distinct" -eq "$ok" ] || check "phase 1: duplicate ids: $(sort -n "$dir/ids" | uniq -d | tr '\n' ' ')"
  [ "$bad" -eq 0 ] || check "phase 1: $bad submit(s) exited 0 without an id or failed without a message"
  cat "$dir/ids" >>"$all_ids"
  local final_ok=1
  await_final "phase 1" "$dir/ids" "$go_at" || final_ok=0
  if [ "$final_ok" -eq 0 ]; then
    check "phase 1: not every job final after $deadline s: $last_states"
    not_final "$dir/ids" | head -20 >&2
  fi
  summary+=("phase 1: $jobs submits, $ok exited 0 with an id, $distinct distinct ids, $failed failed")
  summary+=("phase 1: all $jobs submits answered $accepted_s s after the release ($lat)")
  summary+=("phase 1: final states: $last_states; all final ${final_at:-never} s after the release")
}

# --- phase 2 --------------------------------------------------------------------------------

run_phase2() {
  local dir=$tmp/phase2
  local before
  before=$(store_ids | wc -l)
  say "phase 2: $jobs submits at once; the scheduler is killed once it has taken $kill_after"
  prepare_submits "$dir" "$jobs"
  local base
  base=$(taken)
  release_submits
  # (or once every submit has returned, should fewer than that reach it)
  while [ "$(($(taken) - base))" -lt "$kill_after" ] &&
    [ "$(find "$dir" -name 'rc.*' | wc -l)" -lt "$jobs" ]; do sleep 0.005; done
  kill -KILL "$sched_pid"
  local killed_at=$EPOCHREALTIME
  { wait "$sched_pid" || true; } 2>/dev/null
  local taken_at_kill acked_at_kill kill_s
  taken_at_kill=$(($(taken) - base))
  acked_at_kill=$(acknowledged "$dir")
  kill_s=$(python3 -c "print(f'{$killed_at - $go_at:.2f}')")
  say "phase 2: scheduler killed $kill_s s after the release, when it had logged $taken_at_kill of these submits and $acked_at_kill submits had printed an id"
  sleep "$down"
  start_scheduler
  local restarted_at=$EPOCHREALTIME
  say "phase 2: scheduler restarted on the same store"
  wait_submits
  local answered_s
  answered_s=$(python3 -c "print(f'{$EPOCHREALTIME - $go_at:.1f}')")
  local ok failed distinct bad
  read -r ok failed distinct bad < <(collect "$dir" "$jobs")
  read -r _ l_min l_med l_p95 l_max <"$dir/latency"
  local late
  late=$(python3 - "$dir" "$jobs" "$restarted_at" <<'EOF'
import sys
d, n, t = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
print(sum(1 for i in range(1, n + 1)
          for rc, _, end in [open(f"{d}/rc.{i}").read().split()]
          if rc == "0" and float(end) > t))
EOF
)
  say "phase 2: $ok submits exited 0 with an id ($distinct distinct; $late of them answered by the restarted scheduler), $failed failed; the last answered $answered_s s after the release"
  if [ "$failed" -gt 0 ]; then
    say "phase 2: the failed submits' messages:"
    sed -e 's/^/    /' "$dir/errors" | sort | uniq -c >&2
  fi
  [ "$distinct" -eq "$ok" ] || check "phase 2: duplicate ids: $(sort -n "$dir/ids" | uniq -d | tr '\n' ' ')"
  [ "$bad" -eq 0 ] || check "phase 2: $bad submit(s) exited 0 without an id or failed without a message"
  local reused
  reused=$(sort "$all_ids" | comm -12 - <(sort "$dir/ids") | sort -n | tr '\n' ' ')
  [ -z "$reused" ] || check "phase 2: ids of phase 1 given again: $reused"
  cat "$dir/ids" >>"$all_ids"

  # Every id printed is in the store; what the store got beyond them was stored, then unanswered.
  await_alive $((joiners + 1)) || check "phase 2: the nodes did not come back to the restarted scheduler"
  store_ids >"$dir/store-ids"
  local missing orphans
  missing=$(sort "$dir/ids" | comm -23 - <(sort "$dir/store-ids") | sort -n | tr '\n' ' ')
  [ -z "$missing" ] || check "phase 2: ids printed but not in the store (lost): $missing"
  sort "$all_ids" >"$dir/known"
  tail -n +"$((before + 1))" "$dir/store-ids" | sort | comm -23 - <(sort "$dir/known") |
    sort -n >"$dir/orphans"
  orphans=$(wc -l <"$dir/orphans")
  local added=$(($(wc -l <"$dir/store-ids") - before))
  say "phase 2: the store got $added job(s): $((added - orphans)) with a printed id, $orphans without one ($(tr '\n' ' ' <"$dir/orphans"))"
  [ "$((ok + orphans))" -eq "$added" ] || check "phase 2: store jobs ($added) != printed ids ($ok) + unanswered ($orphans)"
  cat "$dir/ids" "$dir/orphans" >"$dir/watch"
  local final_ok=1
  await_final "phase 2" "$dir/watch" "$go_at" || final_ok=0
  if [ "$final_ok" -eq 0 ]; then
    check "phase 2: not every job final after $deadline s: $last_states"
    not_final "$dir/watch" | head -20 >&2
  fi
  local resumed
  resumed=$(grep -c "resumes at epoch" "$tmp/node-a.$sched_starts.log" || true)
  local dropped
  dropped=$(grep -c "no actor 2 on host" "$tmp/node-a.$sched_starts.log" || true)
  summary+=("phase 2: scheduler SIGKILLed $kill_s s after the release, having logged $taken_at_kill of the $jobs submits ($acked_at_kill ids printed by then); restarted after $down s")
  summary+=("phase 2: $ok submits exited 0 with an id ($distinct distinct, $late answered after the restart), $failed failed (non-zero exit)")
  summary+=("phase 2: the last submit returned $answered_s s after the release (per successful submit: min $l_min s, median $l_med s, p95 $l_p95 s, max $l_max s)")
  if [ "$failed" -gt 0 ]; then
    while read -r line; do summary+=("phase 2:   failed: $line"); done < <(sort "$dir/errors" | uniq -c)
  fi
  summary+=("phase 2: store: $added new job(s), every printed id among them: $([ -z "$missing" ] && echo yes || echo "no, missing $missing"); $orphans stored without a printed id")
  summary+=("phase 2: restarted scheduler: $resumed job(s) resumed, $dropped message(s) to the scheduler dropped while it started ('no actor 2')")
  summary+=("phase 2: final states (printed ids and unanswered ones): $last_states; all final ${final_at:-never} s after the release")
}

# --- phase load ---------------------------------------------------------------------------

# One `coach status --json` loop: until the file STOP exists, one call after the other, each
# call's "EXIT MILLISECONDS" appended to OUT (lat.N), its errors to err.N.
status_loop() {
  local out=$1 stop=$2 t0 rc
  while [ ! -e "$stop" ]; do
    t0=${EPOCHREALTIME/./}  # microseconds: bash arithmetic, no process per call
    rc=0
    "$bin/coach" status --json --at "$at" >/dev/null 2>>"${out/lat./err.}" || rc=$?
    echo "$rc $(((${EPOCHREALTIME/./} - t0) / 1000))" >>"$out"
  done
}

run_load() {
  local dir=$tmp/load
  mkdir -p "$dir/status"
  say "phase load: $jobs submits at once and $status_loops status loops for $load_for s (heartbeat $heartbeat s, node timeout ${node_timeout:-5} s)"
  prepare_submits "$dir" "$jobs"
  local loop_pids=() i
  for i in $(seq "$status_loops"); do
    status_loop "$dir/status/lat.$i" "$dir/stop" &
    loop_pids+=($!)
  done
  release_submits
  local stop_at=$((SECONDS + load_for))
  wait_submits
  local answered_s
  answered_s=$(python3 -c "print(f'{$EPOCHREALTIME - $go_at:.1f}')")
  while [ "$SECONDS" -lt "$stop_at" ]; do sleep 0.5; done
  : >"$dir/stop"
  for i in "${loop_pids[@]}"; do wait "$i" || true; done
  local ok failed distinct bad
  read -r ok failed distinct bad < <(collect "$dir" "$jobs")
  read -r _ l_min l_med l_p95 l_max <"$dir/latency"
  [ "$ok" -eq "$jobs" ] || check "load: $failed submit(s) failed: $(sort "$dir/errors" | uniq -c | head -5)"
  [ "$distinct" -eq "$ok" ] || check "load: duplicate ids"
  cat "$dir/ids" >>"$all_ids"
  local st
  st=$(cat "$dir"/status/lat.* 2>/dev/null | python3 -c '
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
lat = sorted(float(t) / 1000 for rc, t in rows)  # milliseconds in the files
bad = sum(1 for rc, t in rows if rc != "0")
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
mx = lat[-1] if lat else float("nan")
print(len(lat), bad, f"{q(0.5):.2f}", f"{q(0.99):.2f}", f"{mx:.2f}")')
  local calls st_bad p50 p99 pmax
  read -r calls st_bad p50 p99 pmax <<<"$st"
  say "phase load: $ok of $jobs submits exited 0 ($failed failed), last answered $answered_s s after the release; status: $calls calls, $st_bad failed, p50 $p50 s, p99 $p99 s, max $pmax s"
  [ "$st_bad" -eq 0 ] || check "load: $st_bad status call(s) failed: $(cat "$dir"/status/err.* | sort | uniq -c | head -3)"
  python3 -c "import sys; sys.exit(0 if float('$p99') < $status_p99 else 1)" || check "load: status p99 $p99 s (not under $status_p99 s)"
  local final_ok=1
  await_final "load" "$dir/ids" "$go_at" || final_ok=0
  [ "$final_ok" -eq 1 ] || check "load: not every job final after $deadline s: $last_states"
  [[ $last_states =~ ^succeeded=$jobs\  ]] || check "load: not every job succeeded: $last_states"
  local dead
  dead=$(grep -c "stopped heartbeating" "$tmp/node-a.$sched_starts.log" || true)
  [ "$dead" -eq 0 ] || check "load: $dead node(s) declared dead: $(grep "stopped heartbeating" "$tmp/node-a.$sched_starts.log" | head -3)"
  summary+=("load: $jobs submits + $status_loops status loops for $load_for s; heartbeat $heartbeat s, node timeout ${node_timeout:-5} s")
  summary+=("load: $ok submits exited 0 with an id, $failed failed; the last answered $answered_s s after the release (per submit: median $l_med s, p95 $l_p95 s, max $l_max s)")
  summary+=("load: coach status: $calls calls, $st_bad failed, p50 $p50 s, p99 $p99 s, max $pmax s")
  summary+=("load: nodes declared dead: $dead; final states: $last_states; all final ${final_at:-never} s after the release")
}

case $phase in
  1) run_phase1 ;;
  2) run_phase2 ;;
  both) run_phase1; run_phase2 ;;
  load) run_load ;;
esac

distinct_all=$(sort -n "$all_ids" | uniq | wc -l)
total_all=$(wc -l <"$all_ids")
[ "$distinct_all" -eq "$total_all" ] || check "ids given twice across phases: $(sort -n "$all_ids" | uniq -d | tr '\n' ' ')"
summary+=("ids printed in all: $total_all, distinct: $distinct_all")

echo
echo "submit_load summary ($jobs submits a phase, $((joiners + 1)) nodes, $(nproc) CPUs here):"
for line in "${summary[@]}"; do echo "  $line"; done
if [ "${#failures[@]}" -gt 0 ]; then
  echo "  FAILED checks:"
  for f in "${failures[@]}"; do echo "    $f"; done
  exit 1
fi
echo "  every check passed"
