"""Tests of coach.torch.Embedding (python/coach/torch.py): tables whose rows Coach's shards hold,
against a Python Coach (fake_coach.py) in a thread, the model in this process. Every value is a
small dyadic fraction, so sums are exact and the rows' gradients are compared bit for bit with
torch.nn.functional.embedding_bag's over the same rows. Skipped where torch is not importable.

    /opt/coach-venv/bin/python -m unittest discover -s tests/python -p 'test_torch_embedding.py'
"""
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
    from coach import CoachError
except ImportError:
    torch = None

N, B = 200, 32  # training samples; a step's


def dyadic(rng, *shape):
    """Values k / 8, k in [-8, 8]: sums of a few stay exact in float32."""
    return (rng.integers(-8, 9, shape) / 8).astype(np.float32)


if torch is not None:
    class CtrNet(nn.Module):
        """Three tables (bags of 3 summed, bags of 4 averaged, one id a sample) and a layer."""

        def __init__(self):
            super().__init__()
            self.a = ct.Embedding(100, 4, mode="sum")
            self.tables = nn.ModuleList([ct.Embedding(50, 2, mode="mean", init_scale=0.5),
                                         ct.Embedding(30, 3)])
            self.fc = nn.Linear(4 + 2 + 3, 2)
            with torch.no_grad():
                rng = np.random.default_rng(5)
                self.fc.weight.copy_(torch.from_numpy(dyadic(rng, 2, 9)))
                self.fc.bias.copy_(torch.from_numpy(dyadic(rng, 2)))

        def forward(self, ia, ib, ic):
            return self.fc(torch.cat([self.a(ia), self.tables[0](ib), self.tables[1](ic)], 1))

    def loss_of(out):
        """A loss whose gradient is dyadic: the mean over the batch of out . c."""
        c = torch.tensor([0.5, -0.25], device=out.device)
        return (out * c).sum(1).mean()


@unittest.skipIf(torch is None, "torch is not importable (run with /opt/coach-venv/bin/python)")
class EmbeddingTest(unittest.TestCase):
    rng = np.random.default_rng(3)
    IA = rng.integers(0, 100, (N, 3))
    IB = rng.integers(0, 50, (N, 4))
    IC = rng.integers(0, 30, N)
    # The tables' full values, as the shards would hold them.
    FULL = [dyadic(rng, 100, 4), dyadic(rng, 50, 2), dyadic(rng, 30, 3)]

    def lookups_of(self, model):
        return lambda idx: {model.a: self.IA[idx], model.tables[0]: torch.from_numpy(self.IB[idx]),
                            model.tables[1]: self.IC[idx].tolist()}

    def connect(self, model, coach_side, **kw):
        fake = FakeCoach(timeout=20)
        self.addCleanup(fake.close)
        result = beside(fake, coach_side)
        with mock.patch.dict(os.environ, fake.script_env()):
            job = ct.init(model, samples=N, **kw)
        self.addCleanup(job.core.close)
        return job, result

    def test_hello_tables_and_the_dense_layout_unchanged(self):
        model = CtrNet()
        self.assertEqual([n for n, _ in model.named_parameters()], ["fc.weight", "fc.bias"])

        def coach_side(fake):
            hello = fake.handshake()
            fake.stop()
            return hello

        job, result = self.connect(model, coach_side, lookups=self.lookups_of(model))
        hello = result()
        self.assertEqual(hello["tables"], [
            {"name": "a", "rows": 100, "dim": 4, "init_scale": 0.01},
            {"name": "tables.0", "rows": 50, "dim": 2, "init_scale": 0.5},
            {"name": "tables.1", "rows": 30, "dim": 3, "init_scale": 0.01}])
        self.assertEqual([t["name"] for t in hello["tensors"]], ["fc.weight", "fc.bias"])
        self.assertEqual(list(job.steps()), [])

    def test_forward_is_embedding_bag_and_row_gradients_exact(self):
        self.check_steps("cpu")

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
    def test_a_cuda_model_gets_its_rows_on_its_device(self):
        self.check_steps("cuda")

    def check_steps(self, device):
        model = CtrNet().to(device)
        idx_of = [np.random.default_rng(k).choice(N, B, replace=False) for k in range(2)]

        def coach_side(fake):
            fake.handshake()
            out = []
            for k, idx in enumerate(idx_of):
                ids = fake.lookup(k + 1, idx)
                values = [self.FULL[t][np.array(ids[t], np.int64)] for t in range(3)]
                done, grads = fake.step_rows(k + 1, idx, values)
                out.append((ids, done, grads, fake.grads.copy()))
            fake.stop()
            return out

        job, result = self.connect(model, coach_side, lookups=self.lookups_of(model))
        seen = []
        for step in job.steps():
            idx = step.indices
            ia, ib, ic = (torch.from_numpy(a[idx]).to(device)
                          for a in (self.IA, self.IB, self.IC))
            full = [torch.from_numpy(f).to(device) for f in self.FULL]
            self.assertEqual(model.a(ia).device.type, device)
            # forward = EmbeddingBag's over the same rows, bit for bit
            torch.testing.assert_close(model.a(ia), F.embedding_bag(ia, full[0], mode="sum"),
                                       rtol=0, atol=0)
            torch.testing.assert_close(model.tables[0](ib),
                                       F.embedding_bag(ib, full[1], mode="mean"), rtol=0, atol=0)
            torch.testing.assert_close(model.tables[1](ic), full[2][ic], rtol=0, atol=0)
            loss = loss_of(model(ia, ib, ic))
            loss.backward()
            step.push(loss)
            seen.append(idx)
        steps = result()
        self.assertEqual(len(steps), 2)
        for (ids, done, grads, dense), idx in zip(steps, seen):
            want_ids = [np.unique(a[idx]).tolist() for a in (self.IA, self.IB, self.IC)]
            self.assertEqual(ids, want_ids)  # ascending, each once
            # the reference: EmbeddingBag over full tables, the same layer, the loss summed
            w = [torch.from_numpy(f.copy()).to(device).requires_grad_() for f in self.FULL]
            ia, ib, ic = (torch.from_numpy(a[idx]).to(device)
                          for a in (self.IA, self.IB, self.IC))
            ref = model.fc(torch.cat([F.embedding_bag(ia, w[0], mode="sum"),
                                      F.embedding_bag(ib, w[1], mode="mean"),
                                      F.embedding(ic, w[2])], 1))
            ref_loss = loss_of(ref) * B  # Coach takes the gradient of the sum
            model.fc.zero_grad()
            ref_loss.backward()
            self.assertEqual(done["loss_sum"], ref_loss.item())
            for t in range(3):
                np.testing.assert_array_equal(grads[t], w[t].grad.cpu().numpy()[want_ids[t]])
                self.assertTrue(np.any(grads[t] != 0))
            np.testing.assert_array_equal(
                dense,
                torch.cat([model.fc.weight.grad.reshape(-1), model.fc.bias.grad]).cpu().numpy())

    def test_a_step_without_its_rows_region_is_an_error(self):
        model = CtrNet()
        idx = np.arange(B)

        def coach_side(fake):
            fake.handshake()
            ids = fake.lookup(1, idx)
            values = [self.FULL[t][np.array(ids[t], np.int64)] for t in range(3)]
            fake.send({"op": "step", "step": 1, "rank": 0, "indices": idx.tolist(),
                       "rows": [len(v) for v in values], "rows_bytes": 64, "rows_grads_offset": 0})
            msg = fake.receive()
            return msg

        job, result = self.connect(model, coach_side, lookups=self.lookups_of(model))
        # A step whose region was never named: the process says so.
        with self.assertRaises(CoachError):
            next(iter(job.steps()))
        self.assertIn("none that large is mapped", result()["message"])

    def test_ids_outside_the_table_or_the_step_are_one_line_errors(self):
        model = CtrNet()
        idx = np.arange(B)

        def coach_side2(fake):
            fake.handshake()
            ids = fake.lookup(1, idx)
            values = [self.FULL[t][np.array(ids[t], np.int64)] for t in range(3)]
            done, _ = fake.step_rows(1, idx, values)
            return done

        job, result = self.connect(model, coach_side2, lookups=self.lookups_of(model))
        step = next(iter(job.steps()))
        outside = torch.tensor([[0, 1, 100]])
        with self.assertRaisesRegex(CoachError, r"^Embedding 'a': id 100 is outside \[0, 100\)$"):
            model.a(outside)
        missing = int(np.setdiff1d(np.arange(100), self.IA[step.indices])[0])
        with self.assertRaisesRegex(
                CoachError, rf"^Embedding 'a': id {missing} is not among the rows of this step"):
            model.a(torch.tensor([[missing, int(self.IA[0, 0]), int(self.IA[0, 1])]]))
        with self.assertRaisesRegex(CoachError, "give integer ids"):
            model.a(torch.zeros(2, 3))
        step.push(0.0)
        self.assertEqual(result()["op"], "done")

    def test_lookup_of_an_id_outside_its_table_is_sent_as_error(self):
        model = CtrNet()

        def coach_side(fake):
            fake.handshake()
            fake.send({"op": "lookup", "step": 4, "indices": [0, 1]})
            return fake.receive()

        bad = dict(enumerate([7, 30]))
        job, result = self.connect(model, coach_side,
                                   lookups=lambda idx: {model.tables[1]: [bad[int(i)]
                                                                           for i in idx]})
        with self.assertRaises(CoachError):
            next(iter(job.steps()))
        msg = result()
        self.assertEqual(msg["op"], "error")
        self.assertEqual(msg["message"], "CoachError: step 4: table 'tables.1' has no id 30 (its "
                                         "ids lie in [0, 30))")

    def test_init_refuses_tables_without_lookups(self):
        with mock.patch.dict(os.environ, {"COACH_CONTROL_FD": "99"}):
            with self.assertRaisesRegex(CoachError, r"^the model has Embedding tables \('a'...\): "
                                                    r"give init\(..., lookups=fn\)"):
                ct.init(CtrNet(), samples=N)
        with self.assertRaisesRegex(CoachError, "used before coach.torch.init"):
            ct.Embedding(5, 2)(torch.tensor([[1]]))

    def test_evaluation_pulls_the_rows_it_needs(self):
        model = CtrNet()
        test = np.arange(N - 40, N)

        def evaluate(m):
            out = m(*(torch.from_numpy(a[test]) for a in (self.IA, self.IB, self.IC)))
            return {"loss": loss_of(out), "accuracy": 0.5, "samples": len(test)}

        def coach_side(fake):
            fake.handshake()
            got = fake.evaluate_rows(2, self.FULL)
            fake.stop()
            return got

        job, result = self.connect(model, coach_side, lookups=self.lookups_of(model),
                                   evaluate=evaluate, test_samples=len(test))
        self.assertEqual(list(job.steps()), [])
        evaluated, pulled = result()
        # one pull a table's forward, its ids the test set's, ascending, each once
        self.assertEqual(pulled, [[np.unique(self.IA[test]).tolist(), [], []],
                                  [[], np.unique(self.IB[test]).tolist(), []],
                                  [[], [], np.unique(self.IC[test]).tolist()]])
        full = [torch.from_numpy(f) for f in self.FULL]
        ia, ib, ic = (torch.from_numpy(a[test]) for a in (self.IA, self.IB, self.IC))
        with torch.no_grad():
            ref = loss_of(model.fc(torch.cat([F.embedding_bag(ia, full[0], mode="sum"),
                                              F.embedding_bag(ib, full[1], mode="mean"),
                                              full[2][ic]], 1)))
        self.assertEqual(evaluated["loss_sum"], ref.item() * len(test))


if __name__ == "__main__":
    unittest.main()
