#!/bin/bash
# sparse_function.sh [--quick] [BIN_DIR] [DATA]: issue 43's function-mode figure. One ctr job
# (docs/sparse.md) trained twice with `coach train`, 2 workers and 2 shards: plainly, and with
# every worker's steps run by coach-invocation children under `function: {memory_mb: 256}`.
# Prints, for each, the held-out AUC and log loss, the wall time and the process's peak
# memory, and for the capped run the invocations' counts and their peak; then the rows the
# steps touched (read from the saved tables file), the bytes of their values (the tables'
# size in the shards: the rows' optimizer is sgd, which keeps no state) and that size against
# the cap.
#
# DATA (default data/ctr-fn.tsv of the repository, made on the first run: 2,000,000 rows, ids
# up to 10^8, Zipf exponent 0.5, so that a step meets new ids and the tables grow to ~12M
# rows): a set from `coach data ctr`. DIM (environment, default 64): each table's row width.
# --quick: 50,000 rows and dim 8, made in a temporary folder (the suite's run: it judges only
# that both runs end with the same figures and the capped one under its cap).
set -eu
QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
HERE=$(cd "$(dirname "$0")" && pwd)
B=$(cd "${1:-$HERE/../build/apps}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DIM=${DIM:-64}
if [ $QUICK = 1 ]; then
  DATA=$WORK/ctr-quick.tsv
  DIM=8
  "$B/coach" data ctr --rows 50000 --out "$DATA" --max-vocab 1000000 --zipf 0.5 --seed 5 >/dev/null
else
  DATA=$(realpath -m "${2:-$HERE/../data/ctr-fn.tsv}")
  if [ ! -f "$DATA" ]; then
    echo "making $DATA (2,000,000 rows, ids up to 10^8, Zipf 0.5)"
    mkdir -p "$(dirname "$DATA")"
    "$B/coach" data ctr --rows 2000000 --out "$DATA" --max-vocab 100000000 --zipf 0.5 --seed 5 \
      | tail -1
  fi
fi
spec() {  # spec EXTRA (one name for both runs: the saved files name it)
  cat <<Y
name: sparse-function
dataset: {format: ctr, path: $DATA, test_fraction: 0.1}
model:
  type: mlp
  hidden: [64]
  embeddings:
    - {fields: all, rows: 100000000, dim: $DIM}
sparse_optimizer: {type: sgd, learning_rate: 0.5}
optimizer: {type: adam, learning_rate: 0.002}
batch_size: 256
epochs: 1
seed: 5
workers: 2
shards: 2
$1
Y
}
spec "" > "$WORK/plain.yaml"
spec "function: {memory_mb: 256, deadline_s: 300, chunks_per_invocation: 500}" \
  > "$WORK/capped.yaml"
run() {  # run NAME: trains, prints its figures
  local name=$1
  /usr/bin/time -f "%e %M" -o "$WORK/$name.time" "$B/coach" train "$WORK/$name.yaml" \
    --save "$WORK/$name.safetensors" --report "$WORK/$name.json" > "$WORK/$name.log" 2>&1 || {
    tail -20 "$WORK/$name.log"
    exit 1
  }
  python3 - "$WORK" "$name" <<'PY'
import json, sys
work, name = sys.argv[1], sys.argv[2]
r = json.load(open(f"{work}/{name}.json"))
wall, kib = open(f"{work}/{name}.time").read().split()
e = r["epochs"][-1]
line = (f"{name:7s} test AUC {e['test_auc']:.4f}  log loss {e['test_log_loss']:.4f}  "
        f"{float(wall):6.1f} s  process peak {int(kib) / 2**20:5.2f} GiB")
inv = r.get("invocations")
if inv:
    line += (f"\n        invocations: {inv['started']} started, {inv['completed']} completed, "
             f"{inv['timed_out']} timed out, {inv['out_of_memory']} out of memory, "
             f"{inv['failed']} failed; {inv['tasks']} steps; peak "
             f"{inv['peak_memory_bytes'] / 2**20:.1f} MiB of the 256 MiB cap")
print(line)
PY
}
run plain
run capped
python3 - "$WORK" "$DIM" "$QUICK" <<'PY'
import json, struct, sys
work, dim, quick = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))
h = header(f"{work}/capped.tables.safetensors")
rows = sum(v["shape"][0] for k, v in h.items() if k.endswith(".ids"))
values = rows * dim * 4
cap = 256 << 20
print(f"tables: {rows} rows touched of 26 x 10^8 declared, dim {dim}: {values / 1e9:.2f} GB of "
      f"rows in the shards (sgd: no optimizer state), {values / cap:.1f}x the cap")
same = all(open(f"{work}/plain{s}", "rb").read() == open(f"{work}/capped{s}", "rb").read()
           for s in (".safetensors", ".tables.safetensors"))
print("capped run's model and tables", "bit for bit the plain run's" if same else "DIFFER")
plain, capped = (json.load(open(f"{work}/{n}.json")) for n in ("plain", "capped"))
inv = capped["invocations"]
ok = (same and inv["peak_memory_bytes"] < cap and inv["failed"] == 0
      and inv["out_of_memory"] == 0 and inv["timed_out"] == 0)
sys.exit(0 if ok else 1)
PY
