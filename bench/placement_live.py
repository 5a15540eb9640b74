#!/usr/bin/env python3
"""placement_live: spread against dltap on 4 coach-nodes on 127.0.0.1, in several orders
(docs/performance.md, "Placement (issue 14)", "Live: 4 coach-nodes on 127.0.0.1").

Each order runs on a fresh cluster: 4 coach-node processes with their default flags (the host's
CPUs each, CPU accounting `measured`, placement dltap), the scheduler's store in a temporary
folder. The job is the digits example with `--workers W --shards S` and the `placement:` of the
step, submitted with `coach submit --wait --json` one after another (each starts on an idle
cluster, after the one before it ended). Per job it prints the nodes of its workers and shards
(`coach status --json`), the bytes the transports counted between hosts (`cross_host_bytes`)
and the bytes the placement implies: every worker exchanges with shard k the bytes of k's key
range, so a job moves between hosts, per byte a worker-shard pair exchanged, the pairs that sit
on two nodes (checked against the traffic each part sent). Then, per order, dltap's bytes over
spread's, and whether every job of one placement moved the same bytes in every order.

    bench/placement_live.py [--bin-dir build/apps] [--workers 2] [--shards 2] [--epochs 20]
                            [--orders spread,dltap;dltap,spread;dltap;spread,spread,dltap;\
                                      spread@4x2,dltap@3x1,dltap,spread]
                            [--cpu-accounting measured|reserved] [--quick] [--json]

A step PLACEMENT@WxS of an order runs another job first (W workers, S shards), left out of the
comparisons. The table's `best` column is the fewest worker-shard pairs on two nodes that any placement of
the job could reach on these nodes (every assignment of its parts within each node's CPUs, one a
part, tried): with 2 CPUs a node, 4 workers and 2 shards cross in 6 of 8 pairs whatever the
placement (a node holds at most one worker beside a shard), so spread is as good as dltap there.
--cpu-accounting is passed to every node (default: theirs, measured; the suite's quick mode
runs beside other tests, whose CPUs would hold its jobs back, and counts only Coach's). A job
that has not ended 5 minutes after its submit fails the run with what `coach status` says.
--quick: 2 epochs and the orders "spread,dltap" and "dltap,spread" (the suite's
bench.placement_live_quick). Exit 0 when every goal held (dltap at most 0.6x spread's bytes, or
at the best any placement reaches; each placement's bytes the same in every run), 1 otherwise.
"""
import itertools
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class cluster:
    """4 coach-nodes on 127.0.0.1 with their default flags (a name each, and --exit-with-parent:
    a bench killed leaves none behind), stopped on exit."""

    def __init__(self, bin_dir, tmp, extra, names=("a", "b", "c", "d")):
        self.bin_dir, self.tmp = bin_dir, tmp
        self.procs = []
        ports = [free_port() for _ in names]
        self.at = f"tcp://127.0.0.1:{ports[0]}"
        for i, (name, port) in enumerate(zip(names, ports)):
            role = ["--scheduler"] if i == 0 else ["--join", self.at]
            log = open(os.path.join(tmp, f"node-{name}.log"), "w")
            self.procs.append(subprocess.Popen(
                [os.path.join(bin_dir, "coach-node"), "--exit-with-parent",
                 "--listen", f"tcp://127.0.0.1:{port}",
                 *role, "--name", name, *extra], cwd=tmp, stdout=log,
                stderr=subprocess.STDOUT))
        deadline = time.time() + 30
        while time.time() < deadline:
            out = self.coach("nodes", "--json", check=False)
            try:
                nodes = json.loads(out)["nodes"]
                if sum(n["alive"] is True for n in nodes) == len(names):
                    self.cpus = [int(n["cpus_total"]) for n in nodes]
                    return
            except (ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the {len(names)} nodes did not join: {out}")

    def coach(self, *args, check=True, timeout=None):
        try:
            r = subprocess.run([os.path.join(self.bin_dir, "coach"), *args, "--at", self.at],
                               cwd=SRC, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"coach {' '.join(args)}: no answer within {timeout} s; the "
                               f"jobs: {self.coach('status', check=False)}")
        if check and r.returncode != 0:
            raise RuntimeError(f"coach {' '.join(args)}: exit {r.returncode}: {r.stderr}")
        return r.stdout

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def implied_pairs(status):
    """Worker-shard pairs on two nodes, and all pairs, from the nodes `coach status` names."""
    w, s = status["worker_nodes"], status["shard_nodes"]
    return sum(a != b for a in w for b in s), len(w) * len(s)


def best_pairs(cpus, workers, shards):
    """The fewest worker-shard pairs on two nodes of any placement within `cpus` (one a part)."""
    best = None
    for sn in itertools.product(range(len(cpus)), repeat=shards):
        for wn in itertools.combinations_with_replacement(range(len(cpus)), workers):
            used = [sn.count(n) + wn.count(n) for n in range(len(cpus))]
            if any(u > c for u, c in zip(used, cpus)):
                continue
            cross = sum(w != s for w in wn for s in sn)
            best = cross if best is None else min(best, cross)
    return best


def run_job(c, specs, step, workers, shards):
    """Runs one step of an order: PLACEMENT (the job) or PLACEMENT@WxS (another job)."""
    placement, _, size = step.partition("@")
    main = not size
    if size:
        workers, shards = (int(x) for x in size.split("x"))
    # A job that waits (under --cpu-accounting measured, for CPUs other programs keep busy)
    # fails the run after 5 minutes, saying why it waits.
    out = c.coach("submit", specs[placement], "--workers", str(workers), "--shards", str(shards),
                  "--wait", "--json", timeout=300)
    st = json.loads(out.strip().splitlines()[-1])
    st = st["jobs"][0] if "jobs" in st else st
    if st["state"] != "succeeded" or not st["traffic_final"]:
        raise RuntimeError(f"job ended {st['state']}, traffic_final {st['traffic_final']}: {out}")
    if st["placement"] != placement:
        raise RuntimeError(f"asked for {placement}, placed by {st['placement']}")
    cross, pairs = implied_pairs(st)
    return {"placement": placement, "main": main, "job": st["job"], "workers": st["worker_nodes"],
            "shards": st["shard_nodes"], "cross_host_bytes": st["cross_host_bytes"],
            "cross_pairs": cross, "pairs": pairs, "accuracy": st["test_accuracy"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", default=os.path.join(SRC, "build", "apps"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--orders", default="spread,dltap;dltap,spread;dltap;spread,spread,dltap;"
                    "spread@4x2,dltap@3x1,dltap,spread")
    ap.add_argument("--cpu-accounting", choices=["measured", "reserved"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    a.bin_dir = os.path.abspath(a.bin_dir)
    if a.quick:
        a.epochs, a.orders = 2, "spread,dltap;dltap,spread"
    orders = [o.split(",") for o in a.orders.split(";")]
    for step in (s for o in orders for s in o):
        placement, at, size = step.partition("@")
        w, x, sh = size.partition("x")
        if placement not in ("spread", "dltap") or (at and not (w.isdigit() and x and sh.isdigit())):
            print(f"placement_live: --orders: '{step}' is not PLACEMENT or PLACEMENT@WxS "
                  "(spread or dltap; e.g. spread,dltap;dltap@3x1,spread: ',' between steps, "
                  "';' between orders)", file=sys.stderr)
            return 2
    for p in ("coach", "coach-node"):
        if not os.access(os.path.join(a.bin_dir, p), os.X_OK):
            print(f"placement_live: {a.bin_dir}/{p} is not built", file=sys.stderr)
            return 2
    tmp = tempfile.mkdtemp(prefix="placement-live-")
    try:
        return measure(a, orders, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(a, orders, tmp):
    """The runs of every order under TMP, then the table; the exit code."""
    with open(os.path.join(SRC, "examples", "digits-mlp.yaml")) as f:
        text = f.read().replace("../data/", os.path.join(SRC, "data") + "/")
    text = "\n".join(l for l in text.splitlines() if not l.startswith("epochs:"))
    specs = {}
    for p in ("spread", "dltap"):
        specs[p] = os.path.join(tmp, f"digits-{p}.yaml")
        with open(specs[p], "w") as f:
            f.write(text + f"\nepochs: {a.epochs}\nplacement: {p}\n")
    runs = []
    try:
        extra = ["--cpu-accounting", a.cpu_accounting] if a.cpu_accounting else []
        for i, order in enumerate(orders):
            # A fresh cluster: its own folder, so its own job store (coach-jobs.db).
            home = os.path.join(tmp, f"cluster-{i}")
            os.mkdir(home)
            c = cluster(a.bin_dir, home, extra)
            try:
                jobs = [run_job(c, specs, step, a.workers, a.shards) for step in order]
                best = best_pairs(c.cpus, a.workers, a.shards)
            finally:
                c.stop()
            runs.append({"order": order, "jobs": jobs, "best_pairs": best})
    except RuntimeError as e:
        print(f"placement_live: {e}", file=sys.stderr)
        for home, _, files in sorted(os.walk(tmp)):
            for log in sorted(f for f in files if f.endswith(".log")):
                print(f"---- {log}\n" + open(os.path.join(home, log)).read()[-3000:],
                      file=sys.stderr)
        return 1

    return report(a, runs)


def report(a, runs):
    """Prints the table of `runs` and whether the goals held; the exit code."""
    main = [j for r in runs for j in r["jobs"] if j["main"]]
    by_placement = {}
    for j in main:
        by_placement.setdefault(j["placement"], set()).add(j["cross_host_bytes"])
    flags = f"--cpu-accounting {a.cpu_accounting}" if a.cpu_accounting else "default flags"
    print(f"placement_live: 4 coach-nodes on 127.0.0.1 ({flags}), digits --workers "
          f"{a.workers} --shards {a.shards} (P@WxS: another job first), {a.epochs} epochs, one "
          f"fresh cluster per order")
    print(f"{'order':<34} {'job':>3} {'placement':<9} {'workers | shards':<24} "
          f"{'cross pairs':>11} {'best':>4} {'cross-host B':>13} {'dltap/spread':>12}")
    ok = True
    for r in runs:
        # dltap against spread's run of the job in this order, else the least of any order's.
        spread = [j["cross_host_bytes"] for j in r["jobs"] if j["main"] and
                  j["placement"] == "spread"] or sorted(by_placement.get("spread", []))
        for j in r["jobs"]:
            ratio = ""
            if j["main"] and j["placement"] == "dltap" and spread and spread[0]:
                x = j["cross_host_bytes"] / spread[0]
                ratio = f"{x:.3f}"
                ok &= x <= 0.6 or j["cross_pairs"] == r["best_pairs"]
            nodes = ",".join(j["workers"]) + " | " + ",".join(j["shards"])
            best = r["best_pairs"] if j["main"] else ""
            print(f"{'>'.join(r['order']):<34} {j['job']:>3} {j['placement']:<9} {nodes:<24} "
                  f"{j['cross_pairs']:>5}/{j['pairs']:<5} {best:>4} {j['cross_host_bytes']:>13} "
                  f"{ratio:>12}")
    for p, seen in sorted(by_placement.items()):
        same = len(seen) == 1
        ok &= same
        print(f"{p}: {'the same bytes in every run' if same else 'DIFFERENT bytes'}: "
              f"{sorted(seen)}")
    if "spread" in by_placement and "dltap" in by_placement:
        worst = max(by_placement["dltap"]) / min(by_placement["spread"])
        print(f"dltap/spread, worst over every run: {worst:.3f} (goal <= 0.6, or dltap at the "
              f"best any placement reaches)")
    if a.json:
        print(json.dumps({"workers": a.workers, "shards": a.shards, "epochs": a.epochs,
                          "runs": runs, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    # A SIGTERM (ctest's timeout, kill) unwinds as an exception: the nodes are stopped and the
    # temporary folder removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
