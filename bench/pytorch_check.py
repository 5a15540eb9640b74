#!/usr/bin/env python3
"""Loads a model saved by `coach train --save` into PyTorch and checks that it is the same model:
the torch.nn.Sequential built from the file's metadata takes the file's tensors as its
state_dict (strict: every name and shape must match), and its predictions on Fashion-MNIST's
test images agree with `coach predict` on the same file.

    pip install torch numpy safetensors   # only for this check; never needed by the build or tests
    coach train examples/fashion-cnn.yaml --save /tmp/cnn.safetensors
    python3 bench/pytorch_check.py /tmp/cnn.safetensors --coach build/apps/coach

Prints PyTorch's test accuracy, Coach's (from `coach eval --json`), and how many of the 10,000
predictions agree (argmax ties and last-bit differences between the two libraries' float sums
may flip a prediction whose two best logits are within rounding of each other).
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import yaml
from safetensors.torch import load_file, safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import coach_torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a .safetensors file from coach train --save")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--coach", help="the coach binary: compare with coach predict and coach eval")
    ap.add_argument("--spec", default="examples/fashion-cnn.yaml",
                    help="a spec whose data set coach eval uses (--coach only)")
    a = ap.parse_args()

    with safe_open(a.model, framework="pt") as f:
        meta = f.metadata()
    model = yaml.safe_load(meta["coach.model"])
    shape = tuple(int(v) for v in meta["coach.input_shape"].split(","))
    net = coach_torch.build(model, shape, int(meta["coach.classes"]))
    missing, unexpected = net.load_state_dict(load_file(a.model), strict=False)
    # Batch norm's num_batches_tracked is not in Coach's files (PyTorch does not use it when
    # momentum is set); anything else missing or left over is a naming error.
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise SystemExit(f"pytorch_check: state_dict mismatch: missing {missing}, "
                         f"unexpected {unexpected}")
    net.eval()

    images = f"{a.data}/t10k-images-idx3-ubyte.gz"
    _, _, tx, ty = coach_torch.read_fashion(a.data, 1)
    with torch.no_grad():
        pred = net(coach_torch.inputs_for(net, tx)).argmax(1)
    acc = (pred == ty).float().mean().item()
    print(f"pytorch {torch.__version__}: {len(net)} modules, "
          f"{sum(p.numel() for p in net.parameters())} parameters loaded; "
          f"test accuracy {acc:.4f}")
    if not a.coach:
        return
    out = subprocess.run([a.coach, "predict", a.model, images], check=True, capture_output=True,
                         text=True).stdout.split()
    names = json.loads(meta["coach.class_names"]) if "coach.class_names" in meta else None
    coach_pred = torch.tensor([names.index(v) if names else int(v) for v in out])
    ev = json.loads(subprocess.run([a.coach, "eval", a.model, "--data", a.spec, "--json"],
                                   check=True, capture_output=True, text=True).stdout)
    agree = int((coach_pred == pred).sum())
    print(f"coach eval: test accuracy {ev['accuracy']:.4f}; coach predict and pytorch agree on "
          f"{agree} of {len(pred)} test images")
    if agree != len(pred):
        diff = (coach_pred != pred).nonzero().flatten()[:5].tolist()
        print(f"first disagreements at images {diff}")


if __name__ == "__main__":
    main()
