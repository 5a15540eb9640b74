#!/usr/bin/env python3
"""PyTorch twin of train_bench for any Coach job spec on Fashion-MNIST: the spec's model (layers
or the mlp shorthand), batch size and optimizer, trained in PyTorch with a given number of
threads; with --train-bench, Coach's train_bench runs the same spec on the same samples first,
and one table prints both side by side.

    pip install torch numpy pyyaml   # only for this benchmark; never needed by the build or tests
    python3 bench/pytorch_spec.py --spec examples/fashion-cnn.yaml [--samples 2000]
                                  [--threads 1,2] [--rounds 2] [--device cpu|cuda]
                                  [--train-bench build/bench/train_bench] [--configs 1x1,2x2]

Coach's "plain" row is train_bench's plain loop: one thread computing forward, backward and the
optimizer with no actors, the like of a PyTorch loop with one thread. Throughput is the best
round of one epoch over the samples (data in memory, batches gathered from a shuffled order).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import yaml

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


def torch_rate(spec, data, threads, rounds, device):
    torch.set_num_threads(threads)
    torch.manual_seed(int(spec.get("seed", 42)))
    x, y, tx, ty = (t.to(device) for t in data)
    net = coach_torch.build(spec["model"], tuple(x.shape[1:]), 10).to(device)
    opt = optimizer_for(spec.get("optimizer", {}), net.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    batch = int(spec.get("batch_size", 64))
    best = 0.0
    for _ in range(rounds):
        order = torch.randperm(x.shape[0], device=device)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for b in range(0, x.shape[0], batch):
            idx = order[b:b + batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(net(coach_torch.inputs_for(net, x[idx])), y[idx]).backward()
            opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        best = max(best, x.shape[0] / (time.perf_counter() - t0))
    return best


def coach_rates(train_bench, spec_path, samples, configs, rounds, device):
    cmd = [train_bench, "--spec", spec_path, "--samples", str(samples), "--configs", configs,
           "--repeat", str(rounds), "--backend", device, "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    rows = [("coach plain loop (1 thread)", report["plain_loop_samples_per_s"])]
    for r in report["results"]:
        reduce = ", host reduce" if r.get("host_reduce") else ""
        rows.append((f"coach {r['workers']} worker(s) x {r['shards']} shard(s){reduce}",
                     r["samples_per_s"]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="a Coach job spec with an IDX data set")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--threads", default="1", help="comma-separated PyTorch thread counts")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--train-bench", help="Coach's train_bench binary: run it on the same spec")
    ap.add_argument("--configs", default="1x1", help="train_bench --configs")
    a = ap.parse_args()

    with open(a.spec) as f:
        spec = yaml.safe_load(f)
    ds = spec.get("dataset", {})
    if ds.get("format", "idx") != "idx":
        raise SystemExit("pytorch_spec: only IDX data sets (Fashion-MNIST) are supported")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("pytorch_spec: --device cuda, but torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    data = coach_torch.read_fashion(ds["path"], a.samples)

    rows = []
    if a.train_bench:
        rows += coach_rates(a.train_bench, a.spec, a.samples, a.configs, a.rounds, a.device)
    for t in (int(v) for v in a.threads.split(",")):
        rows.append((f"pytorch {torch.__version__} {a.device} ({t} thread(s))",
                     torch_rate(spec, data, t, a.rounds, a.device)))

    print(f"{spec.get('name', a.spec)}: {a.samples} samples, batch {spec.get('batch_size', 64)}, "
          f"best of {a.rounds} round(s)")
    base = rows[0][1]
    for name, rate in rows:
        print(f"{name:<44} {rate:9.0f} samples/s  {rate / base:5.2f}x")


if __name__ == "__main__":
    main()
