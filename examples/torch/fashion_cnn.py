"""Fashion-MNIST with a small CNN in PyTorch: two 3x3 convolutions with batch norm and max
pooling, a dense layer of 128, 10 classes. Adam with a cosine schedule per step down to 0.
fashion_cnn_plain.py is the plain script (what a user has before Coach); fashion_cnn.py is the
same script as Coach workers (`diff -u fashion_cnn_plain.py fashion_cnn.py` shows the change).

    coach train fashion_cnn.yaml --workers 2 --shards 2   # epochs, batch, optimizer: the spec
"""
import argparse

import coach.torch as ct
import torch
import torch.nn as nn
import torch.nn.functional as F

from fashion_data import DEFAULT_DATA, load_fashion


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)  # 32 x 14 x 14
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)  # 64 x 7 x 7
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


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
    ap.add_argument("--device", default="cpu", help="where the model trains: cpu, cuda, ...")
    args = ap.parse_args()

    data = load_fashion(args.data, args.train_limit, args.test_limit)
    x_train, y_train, x_test, y_test = (t.to(args.device) for t in data)
    model = CNN().to(args.device)
    job = ct.init(model, samples=len(x_train), test_samples=len(x_test),
                  evaluate=lambda model: evaluate(model, x_test, y_test))
    for step in job.steps():  # this worker's share of each step, in the spec's seeded order
        idx = torch.from_numpy(step.indices).to(args.device)
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        loss.backward()
        step.push(loss)  # the shards apply the spec's optimizer


if __name__ == "__main__":
    main()
