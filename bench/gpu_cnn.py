#!/usr/bin/env python3
"""Coach's CUDA worker beside PyTorch eager on one GPU, training the same spec to the end: the
same model, batch, optimizer, rows and epochs, at each precision asked for. Per run: samples/s
(the median epoch after the first, which pays for warm-up) and the test accuracy after the last
epoch; one table, every row from this run, with Coach / PyTorch at each precision.

    python3 bench/gpu_cnn.py --spec examples/fashion-cnn-gpu.yaml --coach build-cuda/apps/coach
                             [--precisions fp32,tf32,bf16] [--epochs 4] [--samples 60000]
                             [--data DIR] [--json OUT.json]

Precisions, the same words on both sides:
  fp32  Coach `precision: fp32` (cuBLAS without TF32); PyTorch with TF32 off for matmul and cuDNN
  tf32  Coach `precision: tf32`; PyTorch with TF32 on for matmul and cuDNN
  bf16  Coach `precision: bf16` (products' operands bf16 on the tensor cores, float elsewhere);
        PyTorch under torch.autocast(dtype=torch.bfloat16) (its convolutions and matmuls in bf16)
PyTorch's optimizer is the spec's (Adam here) on float32 parameters in every case, as Coach's
shards are. Needs torch, numpy and pyyaml; never needed by the build or the tests.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coach_torch  # noqa: E402
from pytorch_spec import optimizer_for  # noqa: E402


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def torch_run(spec, data, precision, epochs, device):
    """Trains the spec in PyTorch on `device`; (samples/s per epoch, test accuracy)."""
    set_tf32(precision == "tf32")
    torch.manual_seed(int(spec.get("seed", 42)))
    x, y, tx, ty = (t.to(device) for t in data)
    net = coach_torch.build(spec["model"], tuple(x.shape[1:]), 10).to(device)
    opt = optimizer_for(spec.get("optimizer", {}), net.parameters())
    loss_fn = torch.nn.CrossEntropyLoss(reduction="mean")
    batch = int(spec.get("batch_size", 64))
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rates = []
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], device=device)
        sync()
        t0 = time.perf_counter()
        for b in range(0, x.shape[0], batch):
            idx = order[b:b + batch]
            opt.zero_grad(set_to_none=True)
            with autocast:
                loss = loss_fn(net(coach_torch.inputs_for(net, x[idx])), y[idx])
            loss.backward()
            opt.step()
        sync()
        rates.append(x.shape[0] / (time.perf_counter() - t0))
    net.eval()
    correct = 0
    with torch.no_grad():
        for b in range(0, tx.shape[0], 1000):
            out = net(coach_torch.inputs_for(net, tx[b:b + 1000]))
            correct += int((out.argmax(1) == ty[b:b + 1000]).sum())
    return rates, correct / tx.shape[0]


def coach_run(coach, spec_path, precision, epochs, samples, data_dir, device, shards=None):
    """`coach train` of the spec on `device` at `precision`; (samples/s per epoch, test accuracy)."""
    with open(spec_path) as f:
        spec = yaml.safe_load(f)
    spec["epochs"] = epochs
    spec["precision"] = precision
    spec["backend"] = device
    spec.setdefault("dataset", {})
    if data_dir:
        spec["dataset"]["path"] = os.path.abspath(data_dir)
    if samples:
        spec["dataset"]["train_limit"] = samples
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spec.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(spec, f)
        report = os.path.join(tmp, "report.json")
        cmd = [coach, "train", path, "--report", report]
        if shards:
            cmd += ["--shards", str(shards)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"gpu_cnn: coach train ({precision}) failed:\n{done.stderr[-3000:]}")
        with open(report) as f:
            r = json.load(f)
    rates = [e["samples_per_s"] for e in r["epochs"]]
    return rates, r["epochs"][-1]["test_accuracy"]


def steady(rates):
    return statistics.median(rates[1:]) if len(rates) > 1 else rates[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--coach", required=True, help="the coach binary (a CUDA build)")
    ap.add_argument("--precisions", default="fp32,tf32,bf16")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--samples", type=int, default=0, help="training rows (0: all)")
    ap.add_argument("--data", help="Fashion-MNIST's directory (default: the spec's)")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--shards", type=int, help="Coach's shards (default: the spec's)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a smoke test of this script (slow; figures mean nothing)")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_cnn: torch sees no CUDA device")
    with open(a.spec) as f:
        spec = yaml.safe_load(f)
    root = a.data or spec["dataset"]["path"]
    data = coach_torch.read_fashion(root, a.samples or None)
    results = {}
    for p in a.precisions.split(","):
        c_rates, c_acc = coach_run(a.coach, a.spec, p, a.epochs, a.samples, a.data, a.device,
                                   a.shards)
        t_rates, t_acc = torch_run(spec, data, p, a.epochs, a.device)
        results[p] = {"coach": {"rates": c_rates, "accuracy": c_acc},
                      "torch": {"rates": t_rates, "accuracy": t_acc}}
        print(f"{p}: coach {steady(c_rates):9.0f} samples/s acc {c_acc:.4f} | torch "
              f"{steady(t_rates):9.0f} samples/s acc {t_acc:.4f} | ratio "
              f"{steady(c_rates) / steady(t_rates):.2f}", flush=True)
    print(f"\n{spec.get('name')}: {data[0].shape[0]} rows, batch {spec.get('batch_size')}, "
          f"coach shards {a.shards or spec.get('shards', 1)}, "
          f"{a.epochs} epochs, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name() if a.device == 'cuda' else 'cpu'}")
    print(f"{'precision':<10}{'coach/s':>10}{'torch/s':>10}{'ratio':>7}{'coach acc':>11}"
          f"{'torch acc':>11}{'vs coach fp32':>15}")
    base = steady(results[next(iter(results))]["coach"]["rates"])
    for p, r in results.items():
        c, t = steady(r["coach"]["rates"]), steady(r["torch"]["rates"])
        print(f"{p:<10}{c:10.0f}{t:10.0f}{c / t:7.2f}{r['coach']['accuracy']:11.4f}"
              f"{r['torch']['accuracy']:11.4f}{c / base:15.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
