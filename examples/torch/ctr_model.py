"""A click-through-rate model in PyTorch whose embedding tables live in Coach's shards: one
coach.torch.Embedding per categorical field (its rows pulled each step, only those the batch
touches), the dense features beside them, an MLP on top, one logit and the binary cross-entropy.
Reads the CTR TSV layout (label, integer columns, hex categorical columns; `coach data ctr`
writes one, docs/sparse.md); the last --test-fraction of the rows are held out, as the
generator holds them out. The row of value v in field f is mix((f << 32) | v) mod --rows, the
hashing trick of Coach's native CTR models (worker/sparse_batch.hpp, embedding_row).

    coach data ctr --rows 100000 --out ctr-small.tsv --fields 6 --dense 4 --max-vocab 3000
    coach train ctr.yaml --workers 2 --shards 2    # the tables' optimizer: sparse_optimizer
"""
import argparse
import gzip

import coach.torch as ct
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MISSING = 0xFFFFFFFF  # an empty categorical cell (worker/ctr_data.hpp, ctr_missing)


def mix(z):
    """SplitMix64's output function (kernels/counter_rng.hpp), on a uint64 array."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def load_ctr(path, n_dense, n_fields):
    """(labels float32 [N], dense float32 [N, n_dense] as log(1 + x) for x > 0 else 0,
    categorical uint32 [N, n_fields], MISSING where empty)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        cells = [line.rstrip("\n").split("\t") for line in f]
    cols = 1 + n_dense + n_fields
    bad = next((i for i, c in enumerate(cells) if len(c) != cols), None)
    if bad is not None:
        raise SystemExit(f"{path}: line {bad + 1} has {len(cells[bad])} columns, expected {cols}")
    labels = np.array([float(c[0]) for c in cells], np.float32)
    raw = np.array([[int(v) if v else 0 for v in c[1:1 + n_dense]] for c in cells], np.float64)
    dense = np.where(raw > 0, np.log1p(np.maximum(raw, 0)), 0).astype(np.float32)
    cat = np.array([[int(v, 16) if v else MISSING for v in c[1 + n_dense:]] for c in cells],
                   np.uint32)
    return labels, dense.reshape(len(cells), n_dense), cat.reshape(len(cells), n_fields)


def admit(cat, n_train, min_count):
    """Values seen fewer than min_count times in their field over the training rows become the
    field's one rare value (dataset.min_count of Coach's native CTR models, docs/sparse.md)."""
    out = cat.copy()
    for f in range(cat.shape[1]):
        values, counts = np.unique(cat[:n_train, f], return_counts=True)
        rare = ~np.isin(cat[:, f], values[counts >= min_count])
        out[rare, f] = MISSING - 1
    return out


def table_rows(cat, rows):
    """Each cell's row: mix((field << 32) | value) mod rows (int64 [N, fields])."""
    fields = np.arange(cat.shape[1], dtype=np.uint64)[None, :]
    return (mix((fields << np.uint64(32)) | cat.astype(np.uint64)) % np.uint64(rows)).astype(
        np.int64)


class CTR(nn.Module):
    def __init__(self, n_dense, n_fields, rows, dim, hidden):
        super().__init__()
        self.emb = nn.ModuleList([ct.Embedding(rows, dim, mode="sum") for _ in range(n_fields)])
        self.mlp = nn.Sequential(nn.Linear(n_dense + n_fields * dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, dense, ids):
        return self.mlp(torch.cat([dense] + [e(ids[:, f]) for f, e in enumerate(self.emb)],
                                  1)).squeeze(1)


def auc(labels, scores):
    """The exact AUC, a tie counted half."""
    order = np.argsort(scores, kind="stable")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    pos = y.sum()
    neg = len(y) - pos
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


@torch.no_grad()
def evaluate(model, dense, ids, labels):
    """Mean log loss, accuracy at 0.5, AUC and log loss of the held-out rows, 4096 at a time
    (each Embedding pulls the rows of its batch from Coach)."""
    logits = torch.cat([model(dense[i:i + 4096], ids[i:i + 4096])
                        for i in range(0, len(labels), 4096)])
    loss = F.binary_cross_entropy_with_logits(logits, labels).item()
    p = torch.sigmoid(logits).numpy()
    y = labels.numpy()
    accuracy = float(((p > 0.5) == (y > 0.5)).mean())
    return {"loss": loss, "accuracy": accuracy, "auc": auc(y, p), "log_loss": loss}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="the CTR TSV file (plain or .gz)")
    ap.add_argument("--dense", type=int, default=13, help="integer columns")
    ap.add_argument("--fields", type=int, default=26, help="categorical columns")
    ap.add_argument("--test-fraction", type=float, default=0.1, help="the last rows, held out")
    ap.add_argument("--rows", type=int, default=1 << 16, help="rows of each field's table")
    ap.add_argument("--dim", type=int, default=8, help="floats per row")
    ap.add_argument("--hidden", type=int, default=64, help="units of the MLP's hidden layer")
    ap.add_argument("--min-count", type=int, default=0,
                    help="values seen fewer times in training share their field's rare row")
    args = ap.parse_args()

    labels, dense, cat = load_ctr(args.data, args.dense, args.fields)
    n_test = int(len(labels) * args.test_fraction)
    n_train = len(labels) - n_test
    if args.min_count > 0:
        cat = admit(cat, n_train, args.min_count)
    ids = table_rows(cat, args.rows)
    y, x, i = (torch.from_numpy(a) for a in (labels, dense, ids))
    model = CTR(args.dense, args.fields, args.rows, args.dim, args.hidden)
    job = ct.init(model, samples=n_train, test_samples=n_test,
                  evaluate=lambda m: evaluate(m, x[n_train:], i[n_train:], y[n_train:]),
                  lookups=lambda idx: {e: ids[idx, f] for f, e in enumerate(model.emb)})
    for step in job.steps():
        idx = torch.from_numpy(step.indices)
        loss = F.binary_cross_entropy_with_logits(model(x[idx], i[idx]), y[idx])
        loss.backward()
        step.push(loss)  # the dense gradient and the rows' go to the shards


if __name__ == "__main__":
    main()
