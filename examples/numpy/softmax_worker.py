"""The smallest Coach worker: softmax regression in NumPy over the `coach` core API.

A planted data set (2000 training and 500 test samples, 10 features, 3 classes) is generated from
a fixed seed, so every process of the job holds the same one. Coach sends each step's sample
indices; the script writes the gradient of the SUM of the samples' cross-entropy losses into the
shared gradient region and pushes the summed loss. Coach's shards hold the parameters and run the
optimizer. Run by Coach (a spec whose model is `{script: examples/numpy/softmax_worker.py}`).
"""
import numpy as np

import coach

FEATURES, CLASSES, TRAIN, TEST = 10, 3, 2000, 500


def planted_data(seed=1234):
    """(x, y, x_test, y_test): labels from a hidden linear model plus Gumbel noise."""
    rng = np.random.default_rng(seed)  # fixed: the data must not depend on the job's seed
    w = rng.normal(size=(FEATURES, CLASSES)) * 2
    x = rng.normal(size=(TRAIN + TEST, FEATURES)).astype(np.float32)
    y = np.argmax(x @ w + rng.gumbel(size=(TRAIN + TEST, CLASSES)), axis=1)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


def forward(w, b, x, y):
    """(per-sample losses, class probabilities) of the model (w, b) on x, y."""
    logits = x @ w + b
    logits = logits - logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -log_p[np.arange(len(y)), y], np.exp(log_p)


def main():
    x_train, y_train, x_test, y_test = planted_data()

    def initial(job):  # only the job's first process: small random weights from COACH_SEED
        job.param("W")[:] = np.random.default_rng(job.seed).normal(0, 0.01, (FEATURES, CLASSES))

    def evaluate(job):  # (loss_sum, correct, samples) on the current parameters
        losses, p = forward(job.param("W"), job.param("b"), x_test, y_test)
        return float(losses.sum()), int((p.argmax(axis=1) == y_test).sum()), len(y_test)

    job = coach.init([("W", (FEATURES, CLASSES), "param"), ("b", (CLASSES,), "param")],
                     samples=TRAIN, initial=initial, evaluate=evaluate, test_samples=TEST)
    for step in job.steps():
        x, y = x_train[step.indices], y_train[step.indices]
        losses, p = forward(job.param("W"), job.param("b"), x, y)
        p[np.arange(len(y)), y] -= 1  # d(sum of losses) / d(logits)
        job.grad("W")[:] = x.T @ p
        job.grad("b")[:] = p.sum(axis=0)
        step.push(float(losses.sum()))


if __name__ == "__main__":
    main()
