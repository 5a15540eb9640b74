"""Tests of coach.torch (python/coach/torch.py) against a Python Coach (fake_coach.py) in a thread,
the model in this process. Skipped where torch is not importable.

    /opt/coach-venv/bin/python -m unittest discover -s tests/python -p 'test_torch.py'
"""
import copy
import os
import sys
import unittest
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")]

from fake_coach import FakeCoach, beside  # noqa: E402

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import coach.torch as ct
except ImportError:
    torch = None


def make_net(extras=False):
    """A small CNN with batch norm (8x8 inputs, 3 classes); extras: a frozen parameter and a
    non-persistent buffer on the model itself."""
    torch.manual_seed(0)
    return Net(extras)


if torch is not None:
    class Net(nn.Module):
        def __init__(self, extras):
            super().__init__()
            if extras:
                self.frozen = nn.Parameter(torch.full((2,), 0.5), requires_grad=False)
                self.register_buffer("scale", torch.ones(2), persistent=False)
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4 * 4 * 4, 3)

        def forward(self, x):
            return self.fc(F.max_pool2d(F.relu(self.bn(self.conv(x))), 2).flatten(1))


def data(n):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def slots(layout):
    """{name: (begin, end, kind)} in the flat vector."""
    out, begin = {}, 0
    for name, shape, kind in layout:
        end = begin + int(np.prod(shape, dtype=np.int64))
        out[name], begin = (begin, end, kind), end
    return out


def load(model, params):
    """Writes the flat vector `params` into the model's registered tensors."""
    with torch.no_grad():
        state = dict(model.named_parameters(), **dict(model.named_buffers()))
        for name, (begin, end, _) in slots(ct.layout(model)).items():
            state[name].copy_(torch.from_numpy(params[begin:end]).view(state[name].shape))


@unittest.skipIf(torch is None, "torch is not importable (run with /opt/coach-venv/bin/python)")
class TorchTest(unittest.TestCase):
    X, Y = data(300) if torch else (None, None)

    def connect(self, model, coach_side, **kw):
        fake = FakeCoach(timeout=20)
        self.addCleanup(fake.close)
        result = beside(fake, coach_side)
        with mock.patch.dict(os.environ, fake.script_env()):
            job = ct.init(model, samples=len(self.X), **kw)
        self.addCleanup(job.core.close)
        return job, result

    def test_layout_names_kinds_and_what_stays_local(self):
        model = make_net(extras=True)
        want = [("frozen", (2,), "buffer"), ("conv.weight", (4, 1, 3, 3), "param"),
                ("conv.bias", (4,), "param"), ("bn.weight", (4,), "param"),
                ("bn.bias", (4,), "param"), ("fc.weight", (3, 64), "param"),
                ("fc.bias", (3,), "param"), ("bn.running_mean", (4,), "buffer"),
                ("bn.running_var", (4,), "buffer")]  # not bn.num_batches_tracked, nor scale
        self.assertEqual(ct.layout(model), want)
        self.assertLess({n for n, _, _ in want}, set(model.state_dict()))

        def coach_side(fake):
            hello = fake.handshake()
            fake.stop()
            return hello, fake.params.copy()

        initial = torch.cat([t.detach().reshape(-1) for t in
                             [*model.parameters(), model.bn.running_mean, model.bn.running_var]])
        job, result = self.connect(model, coach_side)
        hello, params = result()
        self.assertEqual([(t["name"], tuple(t["shape"]), t["kind"], t["dtype"])
                          for t in hello["tensors"]], [(*t, "float32") for t in want])
        self.assertTrue(hello["framework"].startswith("torch "))
        np.testing.assert_array_equal(params, initial.numpy())  # the first process's values
        base, gbase = job.core.params.ctypes.data, job.core.grads.ctypes.data
        state = dict(model.named_parameters(), **dict(model.named_buffers()))
        for name, (begin, _, kind) in slots(want).items():  # zero copy: views of the regions
            self.assertEqual(state[name].data_ptr(), base + 4 * begin, name)
            if kind == "param":
                self.assertEqual(state[name].grad.data_ptr(), gbase + 4 * begin, name)
        self.assertEqual(model.bn.num_batches_tracked.dtype, torch.int64)
        self.assertEqual(list(job.steps()), [])

    def check_gradients(self, reduction="mean", device="cpu", tolerance=1e-6):
        """Three steps (the second after zero_grad(set_to_none=True)) against plain PyTorch on
        the same parameters and batches. Returns the job."""
        model = make_net(extras=True).to(device)
        reference = copy.deepcopy(model)
        x, y = self.X.to(device), self.Y.to(device)
        layout = ct.layout(model)

        def coach_side(fake):
            fake.handshake()
            rng, out = np.random.default_rng(1), []
            for k in range(3):
                params = fake.params + rng.normal(0, 0.1, len(fake.params)).astype(np.float32)
                indices = rng.choice(len(self.X), [32, 1, 77][k], replace=False)
                done = fake.step(k + 1, indices, rank=1, params=params)
                out.append((params, indices, done, fake.grads.copy()))
            fake.stop()
            return out

        job, result = self.connect(model, coach_side, loss_reduction=reduction)
        for k, step in enumerate(job.steps()):
            self.assertEqual(step.indices.dtype, np.int64)
            if k == 1:
                model.zero_grad(set_to_none=True)
            idx = torch.from_numpy(step.indices) if k == 2 else step.indices  # either works
            loss = F.cross_entropy(model(x[idx]), y[idx], reduction=reduction)
            loss.backward()
            step.push(loss)
        for params, indices, done, grads in result():
            n = len(indices)
            load(reference, params)
            reference.zero_grad()
            loss = F.cross_entropy(reference(x[indices]), y[indices], reduction=reduction)
            loss.backward()
            scale = n if reduction == "mean" else 1
            self.assertAlmostEqual(done["loss_sum"] / (loss.item() * scale), 1, places=6)
            state = dict(reference.named_parameters(), **dict(reference.named_buffers()))
            for name, (begin, end, kind) in slots(layout).items():
                want = state[name].grad * scale if kind == "param" else state[name].detach() * n
                got, want = grads[begin:end], want.cpu().numpy().reshape(-1)
                self.assertLessEqual(np.abs(got - want).max(), tolerance * np.abs(want).max(),
                                     f"{name}: {got} != {want}")
        return job

    def test_pushed_gradients_are_samples_times_the_mean_loss_gradient(self):
        job = self.check_gradients()
        self.assertFalse(job._local)

    def test_a_sum_loss_is_pushed_as_it_is(self):
        self.check_gradients("sum")

    def test_tensors_off_the_cpu_are_copied_in_and_out(self):
        with mock.patch.object(ct, "_shares", lambda tensor: False):
            job = self.check_gradients()
        self.assertEqual(len(job._local), 9)
        self.assertNotEqual(job.model.conv.weight.data_ptr(), job.core.params.ctypes.data)

    def test_a_model_on_one_device_moves_with_one_copy_each_way(self):
        # The CUDA path's logic (_FlatDevice) run on the CPU: its tensors views of one flat
        # buffer of its own, the regions copied in and out whole.
        with mock.patch.object(ct, "_one_cuda_device", lambda entries: torch.device("cpu")):
            job = self.check_gradients()
        flat = job._flat
        self.assertIsNotNone(flat)
        self.assertEqual(job._entries[0].tensor().data_ptr(), flat.dparams.data_ptr())
        self.assertNotEqual(flat.dparams.data_ptr(), job.core.params.ctypes.data)

    @unittest.skipUnless(torch and torch.cuda.is_available(), "no CUDA device")
    def test_a_cuda_model_is_copied_in_and_out(self):
        torch.backends.cudnn.deterministic = True
        job = self.check_gradients(device="cuda", tolerance=1e-5)
        flat = job._flat  # every tensor on one device: views of one flat device buffer
        self.assertIsNotNone(flat)
        self.assertTrue(flat.pinned, "the shared regions registered as pinned memory")
        self.assertEqual(job.model.conv.weight.device.type, "cuda")
        self.assertEqual(job._entries[0].tensor().data_ptr(), flat.dparams.data_ptr())

    @unittest.skipUnless(torch and torch.cuda.is_available(), "no CUDA device")
    def test_a_cuda_model_evaluates_on_the_regions_parameters(self):
        self.check_evaluate("cuda")

    def test_evaluate_answers_evaluated(self):
        self.check_evaluate("cpu")

    def check_evaluate(self, device):
        x_test, y_test = (t.to(device) for t in data(100))
        seen = []

        def evaluate(model):
            seen.append((model.training, torch.is_grad_enabled()))
            out = model(x_test)
            accuracy = (out.argmax(1) == y_test).float().mean()
            loss = F.cross_entropy(out, y_test)
            return (loss, accuracy) if len(seen) == 1 else {"loss": loss.item(), "samples": 200,
                                                            "accuracy": accuracy.item()}

        def coach_side(fake):
            fake.handshake()
            fake.params[:] += np.random.default_rng(2).normal(0, 0.1, len(fake.params))
            answers = [fake.evaluate(1), fake.evaluate(2)]
            fake.stop()
            return fake.params.copy(), answers

        model, reference = make_net().to(device), make_net().to(device)
        job, result = self.connect(model, coach_side, evaluate=evaluate, test_samples=100)
        self.assertEqual(list(job.steps()), [])
        params, answers = result()
        load(reference, params)
        reference.eval()
        with torch.no_grad():
            out = reference(x_test)
        loss = F.cross_entropy(out, y_test).item()
        correct = int((out.argmax(1) == y_test).sum())
        for answer, samples in zip(answers, [100, 200]):
            self.assertEqual((answer["samples"], answer["correct"]),
                             (samples, round(correct * samples / 100)))
            self.assertAlmostEqual(answer["loss_sum"] / (loss * samples), 1, places=5)
        self.assertEqual(seen, [(False, False), (False, False)])
        self.assertTrue(model.training)

    def test_a_gradient_of_another_shape_is_an_error(self):
        def coach_side(fake):
            fake.handshake()
            fake.send({"op": "step", "step": 1, "rank": 0, "indices": [0, 1]})
            return fake.expect("error")["message"]

        model = make_net()
        job, result = self.connect(model, coach_side)
        for step in job.steps():
            model.fc.bias.data = torch.zeros(5)
            model.fc.bias.grad = torch.ones(5)
            with self.assertRaises(ct.CoachError) as caught:
                step.push(1.0)
            break
        message = "the gradient of 'fc.bias' has shape [5] where the layout has [3]"
        self.assertEqual(str(caught.exception), message)
        self.assertEqual(result(), message)

    def test_push_twice_is_an_error(self):
        def coach_side(fake):
            fake.handshake()
            fake.step(1, [3])
            fake.stop()

        model = make_net()
        job, result = self.connect(model, coach_side)
        for step in job.steps():
            with self.assertRaisesRegex(ct.CoachError, "the loss has 2 elements"):
                step.push(torch.ones(2))
            step.push(torch.tensor(0.5))
            with self.assertRaisesRegex(ct.CoachError, "step 1 was pushed already"):
                step.push(torch.tensor(0.5))
        result()

    def test_a_float64_parameter_is_refused_by_name(self):
        with self.assertRaises(ct.CoachError) as caught:
            ct.init(make_net().double(), samples=10)
        self.assertEqual(str(caught.exception), "parameter 'conv.weight' is float64: Coach's "
                                                "shards hold float32; call model.float()")

    def test_coach_seed_seeds_torch_numpy_and_random(self):
        import random
        with mock.patch.dict(os.environ, {"COACH_SEED": "11"}):
            ct._seed_from_coach()
        got = (torch.rand(1).item(), np.random.rand(), random.random())
        torch.manual_seed(11), np.random.seed(11), random.seed(11)
        self.assertEqual(got, (torch.rand(1).item(), np.random.rand(), random.random()))


if __name__ == "__main__":
    unittest.main()
