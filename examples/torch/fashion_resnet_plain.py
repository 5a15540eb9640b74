"""Fashion-MNIST with a small residual network in PyTorch (a model Coach's layer list cannot
express): a strided 3x3 stem to 14 x 14, three residual blocks with batch norm and skip
connections (the second strides to 7 x 7), global average pooling, 10 classes. Adam with a
cosine schedule per step down to 0. fashion_resnet_plain.py is the plain script; fashion_resnet.py
is the same script as Coach workers (`diff -u fashion_resnet_plain.py fashion_resnet.py`).

    python3 fashion_resnet_plain.py [--epochs 3] [--batch 64] [--lr 0.001] [--threads 1]
"""
import argparse
import time

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
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--train-limit", type=int, default=0, help="the first N training samples (0: all)")
    ap.add_argument("--test-limit", type=int, default=0, help="the first N test samples (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default=DEFAULT_DATA, help="the folder of the IDX .gz files")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)

    x_train, y_train, x_test, y_test = load_fashion(args.data, args.train_limit, args.test_limit)
    model = ResNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps = args.epochs * ((len(x_train) + args.batch - 1) // args.batch)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)  # per step, down to 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        start, loss_sum = time.time(), 0.0
        for idx in torch.randperm(len(x_train)).split(args.batch):  # a seeded shuffle each epoch
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            loss_sum += loss.item() * len(idx)
        rate = len(x_train) / (time.time() - start)
        test_loss, accuracy = evaluate(model.eval(), x_test, y_test)
        print(f"epoch {epoch}: train loss {loss_sum / len(x_train):.4f}, test loss {test_loss:.4f}, "
              f"test accuracy {accuracy:.4f}, {rate:.0f} samples/s", flush=True)


if __name__ == "__main__":
    main()
