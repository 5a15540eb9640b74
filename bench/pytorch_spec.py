#!/usr/bin/env python3
"""PyTorch twin of train_bench for any Coach job spec on Fashion-MNIST: the spec's model (layers
or the mlp shorthand), batch size and optimizer, trained in PyTorch with a given number of
threads; with --train-bench, Coach's train_bench runs the same spec on the same samples first,
and one table prints both side by side.

    pip install torch numpy pyyaml   # only for this benchmark; never needed by the build or tests
    python3 bench/pytorch_spec.py --spec examples/fashion-cnn.yaml [--samples 2000]
                                  [--threads 1,2] [--rounds 2] [--device cpu|cuda]
                                  [--train-bench build/bench/train_bench] [--configs 1x1,2x2]
                                  [--isa native|avx2|avx512] [--breakdown N] [--quick]

Coach's "plain" row is train_bench's plain loop: one thread computing forward, backward and the
optimizer with no actors, the like of a PyTorch loop with one thread. Throughput is the best
round of one epoch over the samples (data in memory, batches gathered from a shuffled order).
The rounds are interleaved: train_bench's round r, then PyTorch's round r at each thread count,
so a slow spell of a shared machine falls on both sides.

--isa holds both to one instruction set: COACH_CPU_KERNEL for train_bench (avx2: the AVX2/FMA
kernel), ONEDNN_MAX_CPU_ISA for PyTorch's oneDNN (AVX2, AVX512_CORE); the script re-executes
itself with the variable set, since oneDNN reads it once. ATen's own vector code is not held.
--breakdown N: forward and backward per layer type, ms a batch, for both: Coach's from
train_bench --layers N (one thread), PyTorch's from its profiler over N batches (one thread).
--quick: the suite's smoke run (few samples, one round); exits 77 where torch or the data set is
missing.
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's start and stop lines, unprinted
try:
    import torch
    import yaml
except ImportError as e:  # the suite's quick mode skips where PyTorch is missing
    if "--quick" in sys.argv:
        print(f"pytorch_spec: skipped: {e}")
        sys.exit(77)
    raise

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coach_torch  # noqa: E402


def optimizer_for(spec_opt, params):
    kind = spec_opt.get("type", "sgd")
    lr = float(spec_opt.get("learning_rate", 0.01))
    wd = float(spec_opt.get("weight_decay", 0.0))
    if kind in ("adam", "adamw"):
        cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        return cls(params, lr=lr, betas=(float(spec_opt.get("beta1", 0.9)),
                                         float(spec_opt.get("beta2", 0.999))),
                   eps=float(spec_opt.get("epsilon", 1e-8)), weight_decay=wd)
    momentum = float(spec_opt.get("momentum", 0.9)) if kind == "momentum" else 0.0
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd)


def torch_setup(spec, data, threads, device):
    """The model, optimizer and loss of the spec, seeded as the spec says."""
    torch.set_num_threads(threads)
    torch.manual_seed(int(spec.get("seed", 42)))
    x, y, _, _ = (t.to(device) for t in data)
    net = coach_torch.build(spec["model"], tuple(x.shape[1:]), 10).to(device)
    opt = optimizer_for(spec.get("optimizer", {}), net.parameters())
    return net, opt, torch.nn.CrossEntropyLoss(), x, y


def torch_round(setup, batch, device, clock):
    """samples/s of one epoch over the samples: forward, backward and the optimizer's step, by
    `clock` (wall: time.perf_counter; cpu: this thread's CPU time, for one thread)."""
    net, opt, loss_fn, x, y = setup
    now = time.thread_time if clock == "cpu" else time.perf_counter
    order = torch.randperm(x.shape[0], device=device)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = now()
    for b in range(0, x.shape[0], batch):
        idx = order[b:b + batch]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(coach_torch.inputs_for(net, x[idx])), y[idx]).backward()
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return x.shape[0] / (now() - t0)


# Profiler events by layer type: forward ops, and the autograd nodes of their backward passes.
FORWARD_OPS = {"aten::conv2d": "conv2d", "aten::relu": "relu", "aten::max_pool2d": "max_pool2d",
               "aten::avg_pool2d": "avg_pool2d", "aten::linear": "dense",
               "aten::flatten": "flatten", "aten::batch_norm": "batch_norm",
               "aten::dropout": "dropout", "aten::cross_entropy_loss": "loss"}
BACKWARD_NODES = {"ConvolutionBackward0": "conv2d", "ReluBackward0": "relu",
                  "MaxPool2DWithIndicesBackward0": "max_pool2d",
                  "AvgPool2DBackward0": "avg_pool2d", "AddmmBackward0": "dense",
                  "TBackward0": "dense", "ViewBackward0": "flatten",
                  "ReshapeAliasBackward0": "flatten",
                  "NativeBatchNormBackward0": "batch_norm", "NativeDropoutBackward0": "dropout",
                  "NllLossBackward0": "loss", "LogSoftmaxBackward0": "loss"}


def torch_breakdown(setup, batch, batches):
    """ms a batch by layer type, forward and backward apart, and the optimizer's step: each
    batch profiled alone (after one unprofiled), each figure the fastest batch's (wall)."""
    from torch.profiler import profile, ProfilerActivity
    net, opt, loss_fn, x, y = setup

    def step(b):
        idx = torch.arange(b * batch, (b + 1) * batch) % x.shape[0]
        opt.zero_grad(set_to_none=True)
        loss_fn(net(coach_torch.inputs_for(net, x[idx])), y[idx]).backward()
        opt.step()

    step(0)
    best = {}
    # The profiler's library prints a line on stderr at each start and stop: not ours to show.
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        profiles = []
        for b in range(batches):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step(b + 1)
            profiles.append(prof.key_averages())
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    for averages in profiles:
        out = {}
        for e in averages:
            name, ms = e.key, e.cpu_time_total / 1e3
            if name in FORWARD_OPS:
                out.setdefault(FORWARD_OPS[name], [0.0, 0.0])[0] += ms
            elif name.startswith("autograd::engine::evaluate_function: "):
                node = name.split(": ", 1)[1]
                if node in BACKWARD_NODES:
                    out.setdefault(BACKWARD_NODES[node], [0.0, 0.0])[1] += ms
            elif name.startswith("Optimizer.step#"):
                out.setdefault("optimizer", [0.0, 0.0])[0] += ms
        for kind, (f, bw) in out.items():
            old = best.get(kind)
            best[kind] = [min(f, old[0]), min(bw, old[1])] if old else [f, bw]
    return best


def coach_run(train_bench, spec_path, samples, configs, device, layers, clock):
    """One round of train_bench (its figures are each configuration's samples/s)."""
    cmd = [train_bench, "--spec", spec_path, "--samples", str(samples), "--configs", configs,
           "--repeat", "1", "--backend", device, "--clock", clock, "--json"]
    if layers:
        cmd += ["--layers", str(layers)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    rows = [("coach plain loop (1 thread)", report["plain_loop_samples_per_s"])]
    for r in report["results"]:
        reduce = ", host reduce" if r.get("host_reduce") else ""
        rows.append((f"coach {r['workers']} worker(s) x {r['shards']} shard(s){reduce}",
                     r["samples_per_s"]))
    return rows, report


def print_breakdown(coach_report, torch_parts, kernel, batch):
    """The per-layer-type table: Coach's forward/backward (train_bench --layers) beside
    PyTorch's (the profiler), ms a batch on one thread."""
    coach = {}
    for layer in coach_report.get("layers", []):
        part = coach.setdefault(layer["kind"], [0.0, 0.0])
        part[0] += layer["forward_min_ms"]
        part[1] += layer["backward_min_ms"]
    print(f"\nper layer type, ms a batch of {batch} on one thread, the fastest batch's (coach: "
          f"{kernel} kernel, train_bench --layers; pytorch: its profiler, a batch at a time)")
    print(f"{'layer':<12} {'coach fwd':>10} {'coach bwd':>10} {'torch fwd':>10} {'torch bwd':>10}")
    for kind in list(dict.fromkeys(list(coach) + list(torch_parts))):
        c = coach.get(kind)
        t = torch_parts.get(kind)
        cells = [f"{v:10.3f}" if part else f"{'-':>10}" for part in (c, t)
                 for v in (part or [0.0, 0.0])]
        print(f"{kind:<12} {' '.join(cells)}")
    ct = sum(a + b for a, b in coach.values())
    tt = sum(a + b for k, (a, b) in torch_parts.items() if k != "optimizer")
    print(f"{'sum':<12} {ct:21.3f} {tt:21.3f}  (forward + backward; optimizer apart)")


ISA_NAMES = {"avx2": ("avx2", "AVX2"), "avx512": ("avx512", "AVX512_CORE")}


def hold_isa(isa):
    """Re-executes this script with COACH_CPU_KERNEL and ONEDNN_MAX_CPU_ISA set for `isa`
    (oneDNN reads its variable once, at its first use); returns when they are set already."""
    if isa == "native":
        return
    coach_kernel, onednn = ISA_NAMES[isa]
    if (os.environ.get("COACH_CPU_KERNEL") == coach_kernel
            and os.environ.get("ONEDNN_MAX_CPU_ISA") == onednn):
        return
    env = dict(os.environ, COACH_CPU_KERNEL=coach_kernel, ONEDNN_MAX_CPU_ISA=onednn)
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="a Coach job spec with an IDX data set")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--threads", default="1", help="comma-separated PyTorch thread counts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--train-bench", help="Coach's train_bench binary: run it on the same spec")
    ap.add_argument("--configs", default="1x1", help="train_bench --configs")
    ap.add_argument("--isa", default="native", choices=["native", "avx2", "avx512"],
                    help="hold Coach's kernel and PyTorch's oneDNN to one instruction set")
    ap.add_argument("--breakdown", type=int, default=0,
                    help="N batches: forward/backward per layer type for both (0: none)")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="cpu: one thread's CPU time on both sides (a loaded machine); the "
                         "cluster's rows and more than one PyTorch thread stay wall time")
    ap.add_argument("--quick", action="store_true", help="the suite's smoke run")
    a = ap.parse_args()
    if a.quick:
        a.samples, a.rounds, a.threads = min(a.samples, 256), 1, "1"
        a.breakdown = a.breakdown or 2
    hold_isa(a.isa)

    with open(a.spec) as f:
        spec = yaml.safe_load(f)
    ds = spec.get("dataset", {})
    if ds.get("format", "idx") != "idx":
        raise SystemExit("pytorch_spec: only IDX data sets (Fashion-MNIST) are supported")
    if a.quick and not os.path.exists(f"{ds['path']}/train-images-idx3-ubyte.gz"):
        print(f"pytorch_spec: skipped: no data set at {ds['path']}")
        sys.exit(77)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("pytorch_spec: --device cuda, but torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    data = coach_torch.read_fashion(ds["path"], a.samples)
    batch = int(spec.get("batch_size", 64))
    threads = [int(v) for v in a.threads.split(",")]
    setups = {t: torch_setup(spec, data, t, a.device) for t in threads}

    best = {}  # row name -> best samples/s over the rounds
    report = None
    for r in range(a.rounds):
        if a.train_bench:
            rows, run = coach_run(a.train_bench, a.spec, a.samples, a.configs, a.device,
                                  a.breakdown if r == 0 else 0, a.clock)
            report = report or run  # the first round's: it has the breakdown
            for name, rate in rows:
                best[name] = max(best.get(name, 0.0), rate)
        for t in threads:
            torch.set_num_threads(t)
            name = f"pytorch {torch.__version__} {a.device} ({t} thread(s))"
            clock = a.clock if t == 1 else "wall"
            best[name] = max(best.get(name, 0.0), torch_round(setups[t], batch, a.device, clock))

    isa = f", isa {a.isa} (COACH_CPU_KERNEL={os.environ.get('COACH_CPU_KERNEL', '')}, " \
          f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '')})" \
        if a.isa != "native" else ""
    kernel = report.get("kernel", "?") if report else "?"
    print(f"{spec.get('name', a.spec)}: {a.samples} samples, batch {batch}, best of {a.rounds} "
          f"interleaved round(s){isa}; coach kernel {kernel}; clock {a.clock}")
    base = next(iter(best.values()))
    for name, rate in best.items():
        print(f"{name:<44} {rate:9.0f} samples/s  {rate / base:5.2f}x")
    one = [rate for name, rate in best.items() if name.endswith("(1 thread(s))")]
    if a.train_bench and one:
        plain = best["coach plain loop (1 thread)"]
        print(f"coach plain loop / pytorch 1 thread: {plain / one[0]:.2f}x")
    if a.breakdown and a.device == "cpu":
        torch.set_num_threads(1)
        parts = torch_breakdown(torch_setup(spec, data, 1, a.device), batch, a.breakdown)
        print_breakdown(report or {}, parts, kernel, batch)


if __name__ == "__main__":
    main()
