#!/usr/bin/env python3
"""PyTorch scripts as Coach's workers, measured side by side in one run (docs/performance.md
"PyTorch scripts as workers"):

1. speed: the CNN of examples/torch/fashion_cnn_plain.py, global batch 64, 2 processes, the same
   training samples and steps: (a) torchrun DDP over gloo (bench/torch_ddp.py), (b) `coach train`
   of examples/torch/fashion_cnn.yaml's job (2 workers of the script, 2 shards, Adam), (c) Coach's
   native CNN with the same layers. Samples/s of the last epoch of --epochs (2: the first pays
   for the processes' start); DDP: its timed steps, one epoch's, after one epoch of warm-up
   steps. The ratios, and the per-step handoff breakdown Coach logs for each PyTorch worker.
2. join: a third PyTorch worker at step --join-step (`schedule: [{at_step: 20, workers: 3}]`),
   with `warm: 1` and with `warm: 0` (a cold start), then warm 1 again at --join-late-step, when
   the warm process has had time to start: the report's join_ms, gap_ms, pause_ms, and when the
   joining process started and finished its handshake against the request.
3. loss: a worker's process SIGKILLed mid-epoch (`warm: 0`: every Python child of coach is a
   worker or the evaluator, the first started): the highest-pid child, at step --loss-at-step
   or later, right after the other worker pushed its share of the step (so that the step waits
   on the loss alone). The time from the kill to the next step handed to the worker left (its
   parameters: the step applied without the victim), the victim's end (polled in /proc), Coach's
   log lines (timestamped as they arrive on its stderr), the report's changes, and a control:
   kill -> socket EOF of a bare PyTorch process computing the same CNN, under the same load.

    python3 bench/torch_workers.py [--coach build/apps/coach] [--python /opt/coach-venv/bin/python]
        [--samples 12000] [--epochs 2] [--rounds 2] [--join-samples 6400] [--join-step 20]
        [--join-late-step 150] [--loss-samples 6400] [--loss-at-step 40] [--json OUT.json]
        [--keep DIR] [--parts speed,join,loss] [--quick]

The bench needs only the standard library (any python3); PyTorch runs in --python (the script's
interpreter, `coach train --python`, and torchrun's). Threads: DDP runs with OMP_NUM_THREADS=1
and torch.set_num_threads(1) in each process; coach is run with OMP_NUM_THREADS unset, so that
it sets it for the script's processes (cores / workers), and the bench reads it from each
process's /proc environ and prints it.

The join and loss runs' script is a probe written to the temp folder: it runs fashion_cnn.py
unchanged and logs, per process, the wall time its handshake ended, each step was handed to it
and each push (when the script asked for the next step).

--quick: 640 samples and 1 epoch for speed, 2560 for join (warm 1 and 0 at step 20) and loss
(at step 20), each once, one teardown control (90-104 s on these 2 cores); exit 1 when
a figure is missing, 77 (skipped) when --python cannot import torch or Fashion-MNIST is missing.
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_DIR = os.path.join(ROOT, "examples", "torch")
DATA = "/usr/share/datasets/fashion-mnist"
DATA_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
BREAKDOWN = re.compile(r"coach: worker \d+: \d+ steps: .* a step")

# The native CNN with fashion_cnn_plain.py's layers.
NATIVE_LAYERS = """\
    - {type: conv2d, channels: 32, kernel: 3, padding: 1}   # 32x28x28
    - batch_norm
    - relu
    - {type: max_pool2d, kernel: 2}                         # 32x14x14
    - {type: conv2d, channels: 64, kernel: 3, padding: 1}   # 64x14x14
    - batch_norm
    - relu
    - {type: max_pool2d, kernel: 2}                         # 64x7x7
    - flatten
    - {type: dense, units: 128}
    - relu
    - dense                                                 # the 10 classes
"""

# The join and loss runs' script: fashion_cnn.py as it is, with each process's handshake done
# ("i"), each step handed to it ("y") and each push (when it asks for the next step: "p") logged
# with the wall time, one file per process.
PROBE = """\
import os, runpy, sys, time
sys.path.insert(0, {torch_dir!r})
import coach.torch as ct
_init = ct.init
def init(*a, **k):
    job = _init(*a, **k)
    f = open(os.path.join({logs!r}, "%d.steps" % os.getpid()), "w", buffering=1)
    f.write("i 0 %.6f\\n" % time.time())
    steps = job.steps
    def logged():
        for s in steps():
            f.write("y %d %.6f\\n" % (s.step, time.time()))
            yield s
            f.write("p %d %.6f\\n" % (s.step, time.time()))
    job.steps = logged
    return job
ct.init = init
sys.argv = [{script!r}] + sys.argv[1:]
runpy.run_path({script!r}, run_name="__main__")
"""


def log(msg):
    print(msg, flush=True)


def uptime():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


class Others:
    """The CPU the rest of the machine used while a run ran: all CPUs' busy time (/proc/stat,
    steal included) less this bench's and its reaped children's (os.times), as a share of the
    cores over the run's wall time."""

    def __init__(self):
        self.t, self.busy, self.ours = time.time(), self._busy(), self._ours()

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait

    @staticmethod
    def _ours():
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def share(self):
        """The others' CPU as a fraction of all cores (0.5: one of 2 cores busy all along)."""
        wall = time.time() - self.t
        others = (self._busy() - self.busy) - (self._ours() - self.ours)
        return max(0.0, others / wall / (os.cpu_count() or 1)) if wall > 0 else 0.0


def children(pid):
    """Pids of the processes whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(d))
    return sorted(out)


def environ(pid, name):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(name.encode() + b"="):
                    return item.split(b"=", 1)[1].decode()
    except OSError:
        return None
    return "(unset)"


class Coach:
    """`coach train` in the background: stderr lines timestamped as they come, stdout kept, the
    script processes' OMP_NUM_THREADS read while it runs."""

    def __init__(self, args, spec, tmp, name, env_extra=None):
        self.report = os.path.join(tmp, f"{name}.report.json")
        self.events = os.path.join(tmp, f"{name}.events.jsonl")
        cmd = [args.coach, "train", spec, "--workers", "2", "--shards", "2", "--report",
               self.report, "--events", self.events, "--python", args.python]
        self.cmd = cmd
        env = dict(os.environ)
        env.pop("OMP_NUM_THREADS", None)  # Coach sets it for the script's processes
        env.update(env_extra or {})
        self.start = time.time()
        self.others = Others()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, text=True)
        self.err, self.out, self.omp = [], [], {}
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stderr, self.err)),
                        threading.Thread(target=self._read, args=(self.proc.stdout, self.out))]
        for t in self.readers:
            t.start()

    def _read(self, stream, into):
        for line in stream:
            into.append((time.time(), line.rstrip("\n")))

    def poll_threads(self):
        for c in children(self.proc.pid):
            if c not in self.omp:
                v = environ(c, "OMP_NUM_THREADS")
                if v is not None:
                    self.omp[c] = v

    def wait(self, timeout):
        deadline = time.time() + timeout
        while self.proc.poll() is None:
            self.poll_threads()
            if time.time() > deadline:
                self.proc.kill()
                break
            time.sleep(0.1)
        self.proc.wait()
        for t in self.readers:
            t.join()
        self.seconds = time.time() - self.start
        self.others_share = self.others.share()
        if self.proc.returncode != 0:
            tail = "\n".join(l for _, l in (self.out + self.err)[-15:])
            raise RuntimeError(f"{' '.join(self.cmd)} exited {self.proc.returncode}:\n{tail}")
        with open(self.report) as f:
            return json.load(f)

    def breakdown(self):
        return [l for _, l in self.err if BREAKDOWN.search(l)]


def torch_spec(tmp, name, samples, epochs, extra_model="", extra="", script=None):
    script = script or os.path.join(TORCH_DIR, "fashion_cnn.py")
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(f"""# derived from examples/torch/fashion_cnn.yaml by bench/torch_workers.py
name: {name}
model:
  script: {script}
  args: ["--train-limit", "{samples}", "--test-limit", "1000"]
{extra_model}optimizer:
  type: adam
  learning_rate: 0.001
  schedule: {{type: cosine}}
batch: {{global: 64}}
epochs: {epochs}
consistency: bsp
seed: 42
workers: {{min: 1, max: 8, initial: 2}}
shards: {{min: 1, max: 8, initial: 2}}
{extra}""")
    return path


def native_spec(tmp, samples, epochs):
    path = os.path.join(tmp, "native.yaml")
    with open(path, "w") as f:
        f.write(f"""# fashion_cnn_plain.py's CNN as Coach's native layers (bench/torch_workers.py)
name: native-cnn
dataset: {{format: idx, path: {DATA}, train_limit: {samples}, test_limit: 1000}}
model:
  layers:
{NATIVE_LAYERS}optimizer:
  type: adam
  learning_rate: 0.001
  schedule: {{type: cosine}}
batch: {{global: 64}}
epochs: {epochs}
consistency: bsp
seed: 42
workers: {{min: 1, max: 8, initial: 2}}
shards: {{min: 1, max: 8, initial: 2}}
backend: cpu
""")
    return path


def last_epoch(report):
    e = report["epochs"][-1]
    return {"epoch": e["epoch"], "of": len(report["epochs"]), "samples_per_s": e["samples_per_s"],
            "steps": e["steps"], "samples": e["samples"], "seconds": e["seconds"],
            "test_accuracy": e["test_accuracy"],
            "step_ms": 1000 * e["seconds"] / max(1, e["steps"]),
            "compute_ms_per_worker_step": 1000 * e.get("compute_seconds", 0) / max(1, e["steps"])
            / max(1, e.get("workers", 1)), "all_epochs": [x["samples_per_s"] for x in
                                                                report["epochs"]]}


def run_ddp(args, steps_per_epoch, epochs):
    warmup = steps_per_epoch * (epochs - 1)
    cmd = [args.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           os.path.join(HERE, "torch_ddp.py"), "--steps", str(steps_per_epoch), "--warmup",
           str(warmup), "--batch", "64", "--train-limit", str(args.samples)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.time()
    others = Others()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    m = re.search(r"samples/s (\d+)", p.stdout)
    if not m:
        raise RuntimeError(f"torch_ddp.py printed no samples/s:\n{p.stdout}")
    return {"samples_per_s": float(m.group(1)), "steps": steps_per_epoch, "warmup_steps": warmup,
            "others_cpu": others.share(),
            "wall_s": time.time() - t0, "command": "OMP_NUM_THREADS=1 " + " ".join(cmd),
            "lines": [l for l in p.stdout.splitlines() if l.startswith("ddp:")]}


def speed_torch(args, tmp):
    c = Coach(args, torch_spec(tmp, "torch-speed", args.samples, args.epochs), tmp, "torch-speed")
    rep = c.wait(args.timeout)
    tw = last_epoch(rep)
    tw.update(breakdown=c.breakdown(), omp_threads=sorted(set(c.omp.values())),
              processes=len(c.omp), command=" ".join(c.cmd), wall_s=c.seconds,
              others_cpu=c.others_share)
    log(f"  Coach PyTorch workers: {tw['samples_per_s']:.0f} samples/s (epoch {tw['epoch']} of "
        f"{tw['of']}, {tw['steps']} steps; every epoch {', '.join(f'{x:.0f}' for x in tw['all_epochs'])}); "
        f"OMP_NUM_THREADS of its {len(c.omp)} script processes: {', '.join(tw['omp_threads'])}; "
        f"other processes used {100 * tw['others_cpu']:.0f} % of the cores meanwhile)")
    log(f"    its epoch {tw['epoch']}: {tw['step_ms']:.1f} ms a step, each worker's compute "
        f"{tw['compute_ms_per_worker_step']:.1f} ms a step (the report's compute_seconds / "
        f"steps / workers)")
    for line in tw["breakdown"]:
        log(f"    {line}")
    return tw


def speed_native(args, tmp):
    n = Coach(args, native_spec(tmp, args.samples, args.epochs), tmp, "native-speed")
    nat = last_epoch(n.wait(args.timeout))
    nat.update(command=" ".join(n.cmd), wall_s=n.seconds, others_cpu=n.others_share)
    log(f"  Coach native CNN: {nat['samples_per_s']:.0f} samples/s (epoch {nat['epoch']} of "
        f"{nat['of']}, {nat['steps']} steps; every epoch {', '.join(f'{x:.0f}' for x in nat['all_epochs'])}; "
        f"{nat['step_ms']:.1f} ms a step, compute {nat['compute_ms_per_worker_step']:.1f} ms; "
        f"other processes {100 * nat['others_cpu']:.0f} % of the cores)")
    return nat


def speed_ddp(args, steps_per_epoch):
    ddp = run_ddp(args, steps_per_epoch, args.epochs)
    log(f"  DDP gloo: {ddp['samples_per_s']:.0f} samples/s ({ddp['steps']} timed steps after "
        f"{ddp['warmup_steps']} warm-up; {64000 / ddp['samples_per_s']:.1f} ms a step; other "
        f"processes {100 * ddp['others_cpu']:.0f} % of the cores)")
    return ddp


def speed(args, tmp):
    """Each side once a round; the order reversed every other round (load drifts)."""
    steps_per_epoch = args.samples // 64  # 64 a step; DDP drops the last partial batch
    rounds = []
    for r in range(args.rounds):
        order = ["ddp", "coach_torch", "coach_native"]
        if r % 2:
            order.reverse()
        log(f"speed, round {r + 1}/{args.rounds}: {', '.join(order)} (load {uptime()})")
        got = {}
        for side in order:
            if side == "ddp":
                got[side] = speed_ddp(args, steps_per_epoch)
            elif side == "coach_torch":
                got[side] = speed_torch(args, tmp)
            else:
                got[side] = speed_native(args, tmp)
        got["torch_over_ddp"] = got["coach_torch"]["samples_per_s"] / got["ddp"]["samples_per_s"]
        got["torch_over_native"] = (got["coach_torch"]["samples_per_s"]
                                    / got["coach_native"]["samples_per_s"])
        got["order"] = order
        rounds.append(got)
        log(f"  ratios: Coach-torch / DDP {got['torch_over_ddp']:.2f}, "
            f"Coach-torch / Coach-native {got['torch_over_native']:.2f}")
    out = {"samples": args.samples, "epochs": args.epochs, "rounds": rounds}
    for key in ("torch_over_ddp", "torch_over_native"):
        out[key] = statistics.median(r[key] for r in rounds)
    for side in ("ddp", "coach_torch", "coach_native"):
        out[side + "_samples_per_s"] = statistics.median(r[side]["samples_per_s"] for r in rounds)
    log(f"speed, median of {len(rounds)} round(s): DDP {out['ddp_samples_per_s']:.0f}, Coach "
        f"PyTorch workers {out['coach_torch_samples_per_s']:.0f}, Coach native "
        f"{out['coach_native_samples_per_s']:.0f} samples/s; Coach-torch / DDP "
        f"{out['torch_over_ddp']:.2f}, Coach-torch / Coach-native {out['torch_over_native']:.2f}")
    return out


def probe_script(tmp, name):
    """A probe of fashion_cnn.py for one run and its log folder (PROBE)."""
    logs = os.path.join(tmp, f"{name}.probe")
    os.makedirs(logs, exist_ok=True)
    for old in os.listdir(logs):
        os.unlink(os.path.join(logs, old))
    path = os.path.join(tmp, f"probe_{name.replace('-', '_')}.py")
    with open(path, "w") as f:
        f.write(PROBE.format(torch_dir=TORCH_DIR, logs=logs,
                             script=os.path.join(TORCH_DIR, "fashion_cnn.py")))
    return path, logs


def read_probe(path):
    """{"i": time, "y": [(step, time)], "p": [(step, time)]} of one process's probe log."""
    out = {"i": None, "y": [], "p": []}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3 or not line.endswith("\n"):
                continue
            if parts[0] == "i":
                out["i"] = float(parts[2])
            elif parts[0] in ("y", "p"):
                out[parts[0]].append((int(parts[1]), float(parts[2])))
    return out


def read_probes(logs):
    out = {}
    for name in os.listdir(logs):
        try:
            out[int(name.split(".")[0])] = read_probe(os.path.join(logs, name))
        except (OSError, ValueError):
            pass
    return out


def started_at(pid):
    """A process's start, wall time (its start in ticks since boot against /proc/uptime: 10 ms)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    now = time.time()
    return now - up + int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def ended(pid):
    """True once the process has finished exiting (a zombie, or reaped already)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def join(args, tmp, warm, step):
    name = f"join-warm{warm}-step{step}"
    script, logs = probe_script(tmp, name)
    samples = max(args.join_samples, 64 * (step + 20))  # the join mid-epoch
    spec = torch_spec(tmp, name, samples, 1, extra_model=f"  warm: {warm}\n",
                      extra=f"schedule: [{{at_step: {step}, workers: 3}}]\n",
                      script=script)
    c = Coach(args, spec, tmp, name)
    starts = {}
    deadline = time.time() + args.timeout
    while c.proc.poll() is None and time.time() < deadline:  # each script process's start
        for pid in children(c.proc.pid):
            if pid not in starts:
                try:
                    starts[pid] = started_at(pid)
                except OSError:
                    pass
        time.sleep(0.1)
    rep = c.wait(args.timeout)
    changes = rep.get("changes", [])
    joins = [ch for ch in changes if ch.get("join_ms", -1) >= 0]
    out = {"warm": warm, "at_step": step, "changes": changes, "command": " ".join(c.cmd),
           "join_ms": joins[0]["join_ms"] if joins else None,
           "samples_per_s": rep["epochs"][-1]["samples_per_s"]}
    for ch in changes:
        log(f"  warm {warm}: {ch['what']} at step {ch['step']}: join_ms {ch['join_ms']:.1f}, "
            f"gap_ms {ch['gap_ms']:.1f}, step_ms {ch['step_ms']:.1f}, pause_ms {ch['pause_ms']:.1f}, "
            f"samples/s before {ch['samples_per_s_before']:.0f}, after {ch['samples_per_s_after']:.0f}")
    if not changes:
        log(f"  warm {warm}: the report holds no change")
    # The joining process (the one whose first step is the join's) against the request: the
    # step the join begins at applied (~ the first hand-over of the step after it) less join_ms.
    probes = read_probes(logs)
    first = {pid: p["y"][0][0] for pid, p in probes.items() if p["y"]}
    joiner = [pid for pid, s in first.items() if s >= step]
    after = [t for p in probes.values() for s, t in p["y"] if s == step + 1]
    if joiner and after and out["join_ms"] and joiner[0] in starts and probes[joiner[0]]["i"]:
        j, req = joiner[0], min(after) - out["join_ms"] / 1000
        out["joiner"] = {"pid": j, "started_ms_after_request": (starts[j] - req) * 1000,
                         "ready_ms_after_request": (probes[j]["i"] - req) * 1000,
                         "first_step": first[j],
                         "first_step_handed_ms_after_request": (probes[j]["y"][0][1] - req) * 1000}
        jo = out["joiner"]
        log(f"  warm {warm}: the joining process {j}, from the request (step {step + 1} "
            f"handed less join_ms): started {jo['started_ms_after_request']:+.0f} ms, its "
            f"handshake done {jo['ready_ms_after_request']:+.0f} ms, its first step {jo['first_step']} "
            f"handed {jo['first_step_handed_ms_after_request']:+.0f} ms")
    return out


def teardown_control(args, reps):
    """Kill -> socket EOF of a bare PyTorch process (the loss run's data loaded, the CNN's
    steps computing) under the same load: how long the kernel takes to end such a process, the
    floor of any death seen by a closed socket."""
    code = ("import os, socket, sys\n"
            f"sys.path.insert(0, {TORCH_DIR!r})\n"
            "import torch, torch.nn.functional as F\n"
            "from fashion_data import load_fashion\n"
            "from fashion_cnn_plain import CNN\n"
            f"x, y, _, _ = load_fashion(train_limit={args.loss_samples}, test_limit=1000)\n"
            "m = CNN()\n"
            "s = socket.socket(fileno=int(os.environ['TW_FD']))\n"
            "s.send(b'r')\n"
            "while True: F.cross_entropy(m(x[:32]), y[:32]).backward()\n")
    out = []
    for _ in range(reps):
        a, b = socket.socketpair()
        env = dict(os.environ, TW_FD=str(b.fileno()), OMP_NUM_THREADS="1")
        p = subprocess.Popen([args.python, "-c", code], pass_fds=[b.fileno()], env=env)
        b.close()
        try:
            a.settimeout(120)
            if a.recv(1) != b"r":
                raise RuntimeError("the teardown control did not start")
            time.sleep(0.3)
            t = time.time()
            os.kill(p.pid, signal.SIGKILL)
            a.settimeout(10)
            a.recv(1)
            out.append((time.time() - t) * 1000)
        finally:
            p.kill()
            p.wait()
            a.close()
    return out


def loss(args, tmp):
    """One worker's process SIGKILLed while the other waits for the step: the survivor pushed
    its share of step s (>= --loss-at-step) and the victim has not pushed its share yet."""
    script, logs = probe_script(tmp, "loss")
    spec = torch_spec(tmp, "loss", args.loss_samples, 1, extra_model="  warm: 0\n", script=script)
    c = Coach(args, spec, tmp, "loss")
    kill = None
    deadline = time.time() + args.timeout
    near = False  # polled every 100 ms until a step before the kill's, then every 1 ms
    while kill is None and c.proc.poll() is None and time.time() < deadline:
        time.sleep(0.001 if near else 0.1)
        probes = read_probes(logs)
        workers = sorted(pid for pid, p in probes.items() if p["y"])
        if len(workers) < 2:
            continue
        near = max(probes[w]["y"][-1][0] for w in workers) >= args.loss_at_step - 1
        if max(probes[w]["y"][-1][0] for w in workers) < args.loss_at_step:
            continue
        pythons = children(c.proc.pid)
        victim = pythons[-1]
        if victim not in probes:
            continue
        survivor = next(w for w in workers if w != victim)
        sp, vp = probes[survivor]["p"], probes[victim]["p"]
        if not sp:
            continue
        s = sp[-1][0]  # the survivor's last push; the victim's share of s is still out
        if s >= args.loss_at_step and not any(x == s for x, _ in vp):
            kill = {"pid": victim, "pythons": pythons, "survivor": survivor, "step": s,
                    "time": time.time()}
            t_end = kill["time"]
            os.kill(victim, signal.SIGKILL)
            while not ended(victim) and time.time() < t_end + 5:
                time.sleep(0.0005)
            kill["ended"] = time.time()
    rep = c.wait(max(1, deadline - time.time()))
    out = {"command": " ".join(c.cmd), "changes": rep.get("changes", []),
           "segments": rep["epochs"][-1].get("segments", []), "report_workers": rep.get("workers")}
    if kill is None:
        log(f"  loss: the job ended before a kill at step {args.loss_at_step} or later")
        return out
    t_k = kill["time"]
    probes = read_probes(logs)
    steppers = {pid for pid, p in probes.items() if p["y"]}
    vy = probes.get(kill["pid"], {"y": []})["y"]
    sv = probes[kill["survivor"]]
    out.update(victim=kill["pid"], pythons=kill["pythons"], survivor=kill["survivor"],
               victim_was_worker=kill["pid"] in steppers, evaluator_pid=kill["pythons"][0],
               evaluator_stepped=kill["pythons"][0] in steppers, step=kill["step"],
               kill_to_victim_ended_ms=(kill["ended"] - t_k) * 1000)
    before = [y for y in vy if y[1] <= t_k]
    if before:
        out["kill_ms_into_victim_step"] = (t_k - before[-1][1]) * 1000
    push = [t for s, t in sv["p"] if s == kill["step"]]
    out["kill_ms_after_survivor_push"] = (t_k - push[0]) * 1000 if push else None
    nxt = [y for y in sv["y"] if y[1] > t_k]
    if nxt:
        out["next_step"] = nxt[0][0]
        out["kill_to_next_step_ms"] = (nxt[0][1] - t_k) * 1000
        out["after_kill"] = [(s, round((t - t_k) * 1000, 1)) for s, t in nxt[:5]]
    # The survivor's wait from its push to its next step, on the steps before the kill.
    pushed = dict(sv["p"])
    waits = [(t - pushed[s - 1]) * 1000 for s, t in sv["y"] if s - 1 in pushed and t < t_k][-20:]
    out["median_wait_ms"] = statistics.median(waits) if waits else None
    for key, word in (("killed_line", "killed by signal"), ("gone_line", "is gone")):
        lines = [(t, l) for t, l in c.err if word in l]
        if lines:
            out[key] = lines[0][1]
            out[f"kill_to_{key}_ms"] = (lines[0][0] - t_k) * 1000
    out["stderr_after_kill"] = [(round((t - t_k) * 1000, 1), l) for t, l in c.err if t >= t_k][:6]
    out["teardown_control_ms"] = teardown_control(args, args.teardown_reps)
    return out


def print_loss(lo):
    if "kill_to_next_step_ms" not in lo:
        log("  loss: no step after the kill")
        return
    log(f"  killed pid {lo['victim']} (the highest python child of coach: {lo['pythons']}; it "
        f"stepped: {lo['victim_was_worker']}; the lowest, {lo['evaluator_pid']}, stepped: "
        f"{lo['evaluator_stepped']}) {lo.get('kill_ms_into_victim_step', float('nan')):.1f} ms into "
        f"its step {lo['step']}, {lo['kill_ms_after_survivor_push']:.1f} ms after the survivor "
        f"{lo['survivor']} pushed its share of it")
    log(f"  kill -> the victim ended (a zombie or reaped, polled in /proc every 0.5 ms): "
        f"{lo['kill_to_victim_ended_ms']:.1f} ms")
    log(f"  kill -> step {lo['next_step']} handed to the survivor (step {lo['step']} applied "
        f"without the victim): {lo['kill_to_next_step_ms']:.1f} ms; its usual wait from push to "
        f"next step {lo['median_wait_ms']:.1f} ms")
    for key in ("killed_line", "gone_line"):
        if key in lo:
            log(f"  kill -> coach's \"{lo[key]}\": {lo[f'kill_to_{key}_ms']:.1f} ms")
    log(f"  steps handed to the survivor after the kill (step, ms after the kill): {lo['after_kill']}")
    log(f"  kill -> socket EOF of a bare torch process (control, same load): "
        f"{', '.join(f'{x:.1f}' for x in lo['teardown_control_ms'])} ms")
    log(f"  the report's changes: {lo['changes'] or 'none'}; its epoch's segments: "
        f"{[(g['first_step'], g['workers']) for g in lo['segments']]} (first step, workers)")


def check(res, parts):
    """The figures each part asked for must have produced; a list of what is missing."""
    missing = []
    sp = res.get("speed", {}).get("rounds", [])
    if "speed" in parts and not sp:
        missing.append("speed")
    for r in sp:
        for side in ("ddp", "coach_torch", "coach_native"):
            if not r[side].get("samples_per_s", 0) > 0:
                missing.append(f"speed {side} samples/s")
        if len(r["coach_torch"].get("breakdown", [])) < 2:
            missing.append("speed: the breakdown lines of both PyTorch workers")
    for warm in ("warm1", "warm0") if "join" in parts else ():
        j = res.get("join", {}).get(warm, {})
        if not (j.get("join_ms") or -1) > 0:
            missing.append(f"join {warm} join_ms")
    if "loss" not in parts:
        return missing
    lo = res.get("loss", {})
    if not (lo.get("kill_to_next_step_ms") or -1) > 0:
        missing.append("loss: kill -> next step")
    if not lo.get("victim_was_worker"):
        missing.append("loss: the process killed was a worker")
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--coach", default=os.path.join(ROOT, "build", "apps", "coach"))
    ap.add_argument("--python", default="/opt/coach-venv/bin/python",
                    help="PyTorch's interpreter: the script's (coach --python) and torchrun's")
    ap.add_argument("--samples", type=int, default=12000, help="training samples, speed runs")
    ap.add_argument("--epochs", type=int, default=2, help="speed runs: the last one is timed")
    ap.add_argument("--join-samples", type=int, default=6400)
    ap.add_argument("--loss-samples", type=int, default=6400)
    ap.add_argument("--join-step", type=int, default=20, help="the join's step (schedule at_step)")
    ap.add_argument("--join-late-step", type=int, default=150,
                    help="a third join, warm 1, at this step (0: none)")
    ap.add_argument("--loss-at-step", type=int, default=40,
                    help="kill at this step or a later one, once the survivor pushed its share")
    ap.add_argument("--teardown-reps", type=int, default=3,
                    help="kills of a bare torch process (the teardown control)")
    ap.add_argument("--rounds", type=int, default=2, help="speed runs, each side once a round")
    ap.add_argument("--parts", default="speed,join,loss")
    ap.add_argument("--timeout", type=float, default=600, help="seconds, each run")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--keep", help="keep the specs, reports and logs in this folder")
    ap.add_argument("--quick", action="store_true",
                    help="640 samples, 1 epoch; join and loss on 2560; exit 1 on a missing figure")
    args = ap.parse_args()
    if args.quick:
        args.samples, args.epochs, args.rounds = 640, 1, 1
        args.join_samples, args.loss_samples, args.loss_at_step = 2560, 2560, 20
        args.teardown_reps, args.join_late_step = 1, 0
    skip = 77 if args.quick else 2
    probe = subprocess.run([args.python, "-c", "import torch, numpy; print(torch.__version__)"],
                           capture_output=True, text=True) if os.access(args.python, os.X_OK) else None
    if probe is None or probe.returncode != 0:
        print(f"skipped: {args.python} cannot import torch and numpy (scripts/torch-venv.sh)")
        sys.exit(skip)
    missing = [f for f in DATA_FILES if not os.path.isfile(os.path.join(DATA, f))]
    if missing:
        print(f"skipped: no Fashion-MNIST in {DATA} (apt-get install dataset-fashion-mnist)")
        sys.exit(skip)
    if not os.access(args.coach, os.X_OK):
        sys.exit(f"torch_workers: no coach binary at {args.coach} (--coach)")
    parts = set(args.parts.split(","))
    res = {"load_before": uptime(), "cores": os.cpu_count(), "torch": probe.stdout.strip(),
           "argv": sys.argv[1:]}
    log(f"torch_workers: load {res['load_before']}, {res['cores']} cores, torch {res['torch']}")
    tmp_obj = None
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        tmp = args.keep
    else:
        tmp_obj = tempfile.TemporaryDirectory(prefix="torch_workers.")
        tmp = tmp_obj.name
    try:
        if "speed" in parts:
            res["speed"] = speed(args, tmp)
        if "join" in parts:
            log(f"join at step {args.join_step}, 2 -> 3 workers, {args.join_samples} samples "
                f"(load {uptime()})")
            res["join"] = {"warm1": join(args, tmp, 1, args.join_step),
                           "warm0": join(args, tmp, 0, args.join_step)}
            if args.join_late_step:
                log(f"join at step {args.join_late_step} (the warm process started by then), "
                    f"warm 1 (load {uptime()})")
                res["join"]["warm1_late"] = join(args, tmp, 1, args.join_late_step)
        if "loss" in parts:
            log(f"loss: a worker's process killed at step {args.loss_at_step} or after, once the "
                f"other pushed its share, "
                f"{args.loss_samples} samples (load {uptime()})")
            res["loss"] = loss(args, tmp)
            print_loss(res["loss"])
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"torch_workers: {e}", file=sys.stderr)
        res["error"] = str(e)
    finally:
        if tmp_obj:
            tmp_obj.cleanup()
    res["load_after"] = uptime()
    log(f"torch_workers: load after {res['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if "error" in res:
        sys.exit(1)
    if args.quick:
        lacking = check(res, parts)
        if lacking:
            print("torch_workers quick: missing " + "; ".join(lacking), file=sys.stderr)
            sys.exit(1)
        log("torch_workers quick: every part produced its figures")


if __name__ == "__main__":
    main()
