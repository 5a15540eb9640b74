"""A worker for the C++ tests of external compute processes (tests/unit/worker/
external_process_test.cpp, tests/integration/script_model_test.cpp): a parameter `w` of 4
floats and a buffer `b` of 2, 100 training and 10 test samples, gradients that the tests can
check exactly. argv[1] picks a behaviour:

  normal            w's gradient: w * n + sum(indices); b: (b + 1) * n; loss_sum: sum(indices)
  other-layout      `w` of 5 floats (a later process that differs from the first)
  fail-before-init  raises before coach.init
  never-init        sleeps instead of calling coach.init
  junk              writes a line that is not JSON on the control channel instead of hello
  kill-at-step:S:R  kills itself (SIGKILL) when it is given step S as worker R
  sleep-at-step:S   sleeps 600 s when it is given step S (a deadline's test)
  allocate-at-step:S  allocates and fills 2 GiB when it is given step S (a memory cap's test)
  raise-at-step:S   raises ValueError when it is given step S (the script's own error)

With COACH_TEST_ONCE=FILE in the environment, the *-at-step behaviours happen only in the
first process that reaches them (the one that creates FILE): a later process computes the step.
"""
import os
import signal
import sys
import time

import numpy as np

mode = sys.argv[1] if len(sys.argv) > 1 else "normal"
if mode == "fail-before-init":
    raise RuntimeError("the data set is not where the script looks")
if mode == "never-init":
    time.sleep(600)
if mode == "junk":
    os.write(int(os.environ["COACH_CONTROL_FD"]), b"hello world\n")
    time.sleep(600)

import coach  # noqa: E402  (after the modes that must fail before it)

size = 5 if mode == "other-layout" else 4


def initial(job):
    job.param("w")[:] = np.arange(1, size + 1, dtype=np.float32)
    job.param("b")[:] = 0.5


job = coach.init([("w", (size,), "param"), ("b", (2,), "buffer")], samples=100, test_samples=10,
                 initial=initial,
                 evaluate=lambda job: (float(job.param("w").sum()), 7, 10))


def misbehaves(step):
    """Whether this step is the one the mode names (and, with COACH_TEST_ONCE, the first time)."""
    if "-at-step:" not in mode:
        return False
    where = [int(v) for v in mode.split(":")[1:]]
    if step.step != where[0] or (len(where) > 1 and step.rank != where[1]):
        return False
    once = os.environ.get("COACH_TEST_ONCE")
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
    return True


for step in job.steps():
    if misbehaves(step):
        if mode.startswith("kill-at-step:"):
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode.startswith("sleep-at-step:"):
            time.sleep(600)
        elif mode.startswith("allocate-at-step:"):
            hog = np.ones(1 << 29, dtype=np.float32)
        elif mode.startswith("raise-at-step:"):
            raise ValueError(f"step {step.step} is not for this script")
    n = len(step.indices)
    job.grad("w")[:] = job.param("w") * n + float(step.indices.sum())
    job.grad("b")[:] = (job.param("b") + 1) * n
    step.push(float(step.indices.sum()))
print("steps ended", file=sys.stderr)
