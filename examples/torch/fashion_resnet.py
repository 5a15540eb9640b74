"""Fashion-MNIST with a small residual network in PyTorch (a model Coach's layer list cannot
express): a strided 3x3 stem to 14 x 14, three residual blocks with batch norm and skip
connections (the second strides to 7 x 7), global average pooling, 10 classes. Adam with a
cosine schedule per step down to 0. fashion_resnet_plain.py is the plain script; fashion_resnet.py
is the same script as Coach workers (`diff -u fashion_resnet_plain.py fashion_resnet.py`).

    coach train fashion_resnet.yaml --workers 2 --shards 2   # epochs, batch, optimizer: the spec
"""
import argparse

import coach.torch as ct
import torch
import torch.nn as nn
import torch.nn.functional as F

from fashion_data import DEFAULT_DATA, load_fashion


class Block(nn.Module):
    """A residual block: two 3x3 convolutions with batch norm, added to its input (through a
    1x1 convolution where the block changes the width or strides)."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))


class ResNet(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, stride=2, padding=1, bias=False)  # 14 x 14 at once
        self.bn = nn.BatchNorm2d(width)
        self.block1 = Block(width, width)                 # width x 14 x 14
        self.block2 = Block(width, 2 * width, stride=2)   # 2 width x 7 x 7
        self.block3 = Block(2 * width, 2 * width)         # 2 width x 7 x 7
        self.fc = nn.Linear(2 * width, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.block3(self.block2(self.block1(x)))
        return self.fc(x.mean((2, 3)))  # global average pooling


@torch.no_grad()
def evaluate(model, x, y):
    """(mean loss, accuracy) of the model (in eval mode) over x, y, in batches of 1000."""
    loss, correct = 0.0, 0
    for i in range(0, len(x), 1000):
        out = model(x[i:i + 1000])
        loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
        correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
    return loss / len(x), correct / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-limit", type=int, default=0, help="the first N training samples (0: all)")
    ap.add_argument("--test-limit", type=int, default=0, help="the first N test samples (0: all)")
    ap.add_argument("--data", default=DEFAULT_DATA, help="the folder of the IDX .gz files")
    args = ap.parse_args()

    x_train, y_train, x_test, y_test = load_fashion(args.data, args.train_limit, args.test_limit)
    model = ResNet()
    job = ct.init(model, samples=len(x_train), test_samples=len(x_test),
                  evaluate=lambda model: evaluate(model, x_test, y_test))
    for step in job.steps():  # this worker's share of each step, in the spec's seeded order
        idx = torch.from_numpy(step.indices)
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        loss.backward()
        step.push(loss)  # the shards apply the spec's optimizer


if __name__ == "__main__":
    main()
