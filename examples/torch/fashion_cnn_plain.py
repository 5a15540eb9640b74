"""Fashion-MNIST with a small CNN in PyTorch: two 3x3 convolutions with batch norm and max
pooling, a dense layer of 128, 10 classes. Adam with a cosine schedule per step down to 0.
fashion_cnn_plain.py is the plain script (what a user has before Coach); fashion_cnn.py is the
same script as Coach workers (`diff -u fashion_cnn_plain.py fashion_cnn.py` shows the change).

    python3 fashion_cnn_plain.py [--epochs 5] [--batch 64] [--lr 0.001] [--threads 1]
"""
import argparse
import time

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
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--train-limit", type=int, default=0, help="the first N training samples (0: all)")
    ap.add_argument("--test-limit", type=int, default=0, help="the first N test samples (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default=DEFAULT_DATA, help="the folder of the IDX .gz files")
    ap.add_argument("--device", default="cpu", help="where the model trains: cpu, cuda, ...")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)

    data = load_fashion(args.data, args.train_limit, args.test_limit)
    x_train, y_train, x_test, y_test = (t.to(args.device) for t in data)
    model = CNN().to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps = args.epochs * ((len(x_train) + args.batch - 1) // args.batch)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)  # per step, down to 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        start, loss_sum = time.time(), 0.0
        for idx in torch.randperm(len(x_train), device=args.device).split(args.batch):  # shuffled
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
