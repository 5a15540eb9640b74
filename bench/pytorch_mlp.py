#!/usr/bin/env python3
"""PyTorch twin of train_bench: the same MLP, batch size, optimizer and data (Fashion-MNIST from
Debian's dataset-fashion-mnist), so one run can print Coach's samples/s next to PyTorch's.

    pip install torch numpy          # only for this benchmark; never needed by the build or tests
    python3 bench/pytorch_mlp.py [--samples 20000] [--batch 64] [--hidden 256,128]
                                 [--optimizer adam|momentum|sgd] [--lr 0.001] [--threads 1]
                                 [--device cpu|cuda]
                                 [--epochs 1] [--json]

Throughput is measured over the training steps of each epoch (data already in memory, batches
gathered from a shuffled index list, as Coach's dispenser does); the test accuracy after the
last epoch is printed too, so the runs can be checked to learn the same thing.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coach_torch import read_idx  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--optimizer", default="adam", choices=["adam", "momentum", "sgd"],
                    help="as examples/fashion-mlp.yaml (adam, lr 0.001)")
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: compare with train_bench --backend cuda (FP32, no TF32)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("pytorch_mlp: --device cuda, but torch sees no CUDA device "
                         f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    # Full FP32 matrix products, as Coach's cuBLAS backend (no TF32 rounding of the inputs).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    x = read_idx(f"{a.data}/train-images-idx3-ubyte.gz")[: a.samples].reshape(-1, 784)
    y = read_idx(f"{a.data}/train-labels-idx1-ubyte.gz")[: a.samples]
    tx = read_idx(f"{a.data}/t10k-images-idx3-ubyte.gz").reshape(-1, 784)
    ty = read_idx(f"{a.data}/t10k-labels-idx1-ubyte.gz")
    x = torch.tensor(x, dtype=torch.float32, device=dev) / 255.0
    y = torch.tensor(y, dtype=torch.int64, device=dev)
    tx = torch.tensor(tx, dtype=torch.float32, device=dev) / 255.0
    ty = torch.tensor(ty, dtype=torch.int64, device=dev)

    sizes = [784] + [int(h) for h in a.hidden.split(",") if h] + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr,
                              momentum=a.momentum if a.optimizer == "momentum" else 0.0)
    loss_fn = torch.nn.CrossEntropyLoss()

    rates = []
    for epoch in range(a.epochs):
        order = torch.randperm(x.shape[0], device=dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for b in range(0, x.shape[0], a.batch):
            idx = order[b: b + a.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        rates.append(x.shape[0] / (time.perf_counter() - t0))
    with torch.no_grad():
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    best = max(rates)
    print(f"pytorch {torch.__version__} on {a.device} ({a.threads} thread(s)): "
          f"{best:.0f} samples/s, test accuracy {acc:.4f} after {a.epochs} epoch(s)")
    if a.json:
        print(json.dumps({"device": a.device, "threads": a.threads, "batch": a.batch,
                          "samples": int(x.shape[0]), "samples_per_s": round(best, 1),
                          "test_accuracy": round(acc, 4)}))


if __name__ == "__main__":
    main()
