"""A worker with an embedding table for the C++ tests of external processes
(tests/unit/worker/external_process_test.cpp): a parameter `w` of 2 floats, a table `emb` of 10
rows of 2 floats; sample i looks up row i mod 10. A step's row gradient: the row's values times
2 plus its id; w's gradient: the samples; loss_sum: the sum of the step's row values. Its
evaluation pulls rows 7 and 2 and answers their values' sum as loss_sum (correct 1 of 10)."""
import numpy as np

import coach


def evaluate(job):
    ids, values = job.pull([[7, 2, 2]])
    assert ids[0].tolist() == [2, 7], ids
    return float(values[0].sum()), 1, 10


job = coach.init([("w", (2,), "param")], samples=100, test_samples=10, evaluate=evaluate,
                 tables=[("emb", 10, 2, 0.5)], lookups=lambda idx: [idx % 10])
for step in job.steps():
    job.grad("w")[:] = step.samples
    step.row_grads[0][:] = step.rows[0] * 2 + step.row_ids[0][:, None]
    step.push(float(step.rows[0].sum()))
