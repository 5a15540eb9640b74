"""A PyTorch worker for tests/integration/torch_script_test.cpp: an MLP (no batch norm, no
dropout: its per-step losses do not depend on how a step is shared among workers) on a planted
data set of 1200 training and 300 test samples (16 features, 4 classes) generated from a fixed
seed. Deterministic settings: one thread, torch.use_deterministic_algorithms."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import coach.torch as ct

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
rng = np.random.default_rng(99)  # the data does not depend on the job's seed
w = rng.normal(size=(16, 4))
x = torch.from_numpy(rng.normal(size=(1500, 16)).astype(np.float32))
y = torch.from_numpy(np.argmax(x.numpy() @ w + rng.gumbel(size=(1500, 4)), axis=1))
x_train, y_train, x_test, y_test = x[:1200], y[:1200], x[1200:], y[1200:]

model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def evaluate(model):
    out = model(x_test)
    return F.cross_entropy(out, y_test).item(), (out.argmax(1) == y_test).float().mean().item()


job = ct.init(model, samples=len(x_train), evaluate=evaluate, test_samples=len(x_test))
for step in job.steps():
    idx = torch.from_numpy(step.indices)
    loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
    loss.backward()
    step.push(loss)
