"""A worker for test_core.py: one tensor `w` of 3 floats, 100 samples, and a behaviour chosen by
argv[1]: `raise` (the step code raises), `exit` (exits in the middle of a step), `serve` (an
evaluation-only process: job.serve()), `loop` (pushes the summed indices as the loss)."""
import sys

import coach

mode = sys.argv[1]
if mode == "serve":
    job = coach.init([("w", (3,), "param")], samples=100, test_samples=10,
                     evaluate=lambda job: (float(job.param("w").sum()), 7, 10))
    job.serve()
    print("served", file=sys.stderr)
    sys.exit(0)

job = coach.init([("w", (3,), "param")], samples=100)
for step in job.steps():
    if mode == "raise":
        raise ValueError(f"boom in step {step.step}")
    if mode == "exit":
        sys.exit(0)
    job.grad("w")[:] = job.param("w") * step.samples
    step.push(float(step.indices.sum()))
print("steps ended", file=sys.stderr)
