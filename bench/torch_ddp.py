#!/usr/bin/env python3
"""PyTorch DistributedDataParallel baseline for Coach's PyTorch-script workers: the CNN of
examples/torch/fashion_cnn_plain.py (imported from there, not copied) trained on Fashion-MNIST
by N processes over gloo on the CPU, one thread each, so its samples/s can be set next to
`coach train examples/torch/fashion_cnn.yaml --workers N`.

    torchrun --standalone --nproc_per_node 2 bench/torch_ddp.py [--steps 300] [--batch 64]
             [--warmup 10] [--lr 0.001] [--data DIR] [--quick]

--batch is the global batch (each process takes batch / processes samples a step, as Coach
cuts a step among its workers); DistributedSampler deals each epoch's seeded shuffle among the
processes; Adam with a per-step cosine schedule down to 0 over the run, as the spec's shards.
The clock starts after --warmup steps (not counted) and stops after --steps more; rank 0 prints
`ddp: processes P, global batch B, steps N, samples/s X`. --quick: 20 steps after 3 warm-up
steps on the first 6,400 training samples (seconds).
Needs the PyTorch venv (scripts/torch-venv.sh; torchrun is in /opt/coach-venv/bin).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "torch"))
from fashion_cnn_plain import CNN  # noqa: E402
from fashion_data import DEFAULT_DATA, load_fashion  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="timed steps (after --warmup)")
    ap.add_argument("--batch", type=int, default=64, help="global batch, cut among the processes")
    ap.add_argument("--warmup", type=int, default=10, help="steps before the clock starts")
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--train-limit", type=int, default=0, help="the first N training samples (0: all)")
    ap.add_argument("--data", default=DEFAULT_DATA, help="the folder of the IDX .gz files")
    ap.add_argument("--quick", action="store_true", help="20 steps after 3 warm-up steps, 6,400 samples")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.warmup, args.train_limit = 20, 3, 6400
    if "RANK" not in os.environ:
        raise SystemExit("torch_ddp: run it with torchrun "
                         "(torchrun --standalone --nproc_per_node 2 bench/torch_ddp.py)")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"torch_ddp: --batch {args.batch} is not a multiple of the {world} processes")
    local_batch = args.batch // world

    torch.manual_seed(42)  # the same initial values in every process (DDP broadcasts rank 0's anyway)
    x_train, y_train, _, _ = load_fashion(args.data, args.train_limit, 1)
    model = DistributedDataParallel(CNN())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    total = args.warmup + args.steps
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, total)  # per step, down to 0
    sampler = DistributedSampler(range(len(x_train)), num_replicas=world, rank=rank,
                                 shuffle=True, seed=42, drop_last=True)

    def batches():  # this process's share of each step, epoch after epoch
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(sampler))
            yield from order.split(local_batch)[:len(order) // local_batch]
            epoch += 1

    model.train()
    step, loss_sum, start = 0, 0.0, None
    for idx in batches():
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        if step == total:
            break
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces (averages) the gradients here
        optimizer.step()
        schedule.step()
        if step >= args.warmup:
            loss_sum += loss.item()
        step += 1
    dist.barrier()
    seconds = time.perf_counter() - start
    mean_loss = torch.tensor([loss_sum / args.steps])
    dist.all_reduce(mean_loss)
    if rank == 0:
        print(f"ddp: mean training loss of the timed steps {mean_loss.item() / world:.4f}, "
              f"{seconds:.2f} s")
        print(f"ddp: processes {world}, global batch {args.batch}, steps {args.steps}, "
              f"samples/s {args.steps * args.batch / seconds:.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
