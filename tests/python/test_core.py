"""Tests of the `coach` core (python/coach/__init__.py) against a Python Coach (fake_coach.py):
scripts spawned as Coach spawns them, and scripts run in this process beside a harness thread.

    python3 -m unittest discover -s tests/python -p 'test_core.py'
"""
import os
import subprocess
import sys
import unittest
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"),
                os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "numpy")]

import coach  # noqa: E402
import softmax_worker as sw  # noqa: E402
from fake_coach import FakeCoach, beside  # noqa: E402

SOFTMAX = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "numpy",
                       "softmax_worker.py")
PROBE = os.path.join(HERE, "scripts", "probe_worker.py")


def reference(w, b, x, y):
    """(loss_sum, dW, db) in float64: the gradient of the summed cross-entropy."""
    losses, p = sw.forward(w.astype(np.float64), b.astype(np.float64), x.astype(np.float64), y)
    p[np.arange(len(y)), y] -= 1
    return losses.sum(), x.T.astype(np.float64) @ p, p.sum(axis=0)


class Spawned(unittest.TestCase):
    """Scripts run as Coach runs them."""

    def start(self, script=SOFTMAX, *args):
        fake = FakeCoach(script, args)
        self.addCleanup(fake.close)
        return fake

    def test_first_process_sends_its_initial_values(self):
        fake = self.start()
        hello = fake.hello()
        self.assertEqual((hello["protocol"], hello["pid"], hello["samples"],
                          hello["test_samples"], hello["framework"]),
                         (1, fake.proc.pid, 2000, 500, "numpy"))
        self.assertEqual(hello["tensors"], [
            {"name": "W", "shape": [10, 3], "dtype": "float32", "kind": "param"},
            {"name": "b", "shape": [3], "dtype": "float32", "kind": "param"}])
        fake.layout(33, send_initial=True)
        self.assertEqual(fake.answer(), {"op": "initial"})
        self.assertFalse(os.path.exists(fake.shm_path))
        want = np.random.default_rng(fake.seed).normal(0, 0.01, (10, 3)).astype(np.float32)
        np.testing.assert_array_equal(fake.params[:30].reshape(10, 3), want)
        np.testing.assert_array_equal(fake.params[30:], 0)
        fake.stop()
        self.assertEqual(fake.wait(), 0, fake.stderr)

    def test_later_process_answers_ready_and_writes_nothing(self):
        fake = self.start()
        self.assertEqual(fake.handshake(send_initial=False)["samples"], 2000)
        np.testing.assert_array_equal(fake.params, 0)
        fake.stop()
        self.assertEqual(fake.wait(), 0, fake.stderr)

    def test_steps_push_the_exact_gradient_and_evaluations_answer_between_them(self):
        fake = self.start()
        fake.handshake()
        x, y, x_test, y_test = sw.planted_data()
        rng = np.random.default_rng(5)
        ev = fake.evaluate(0)  # before the first step: on the initial values
        want = sw.forward(fake.params[:30].reshape(10, 3), fake.params[30:], x_test, y_test)[0]
        self.assertAlmostEqual(ev["loss_sum"], float(want.sum()), places=2)
        for n, batch in enumerate([1, 64, 2000]):
            params = rng.normal(size=33).astype(np.float32)
            fake.grads[:] = 99  # stale: the process zeroes and overwrites
            indices = rng.choice(2000, batch, replace=False)
            done = fake.step(n + 1, indices, rank=2, params=params)
            loss, dw, db = reference(params[:30].reshape(10, 3), params[30:], x[indices],
                                     y[indices])
            self.assertAlmostEqual(done["loss_sum"] / loss, 1, places=5)
            np.testing.assert_allclose(fake.grads[:30].reshape(10, 3), dw, rtol=1e-4,
                                       atol=1e-4 * batch)
            np.testing.assert_allclose(fake.grads[30:], db, rtol=1e-4, atol=1e-4 * batch)
            ev = fake.evaluate(n + 1)
            losses, p = sw.forward(params[:30].reshape(10, 3), params[30:], x_test, y_test)
            self.assertEqual((ev["samples"], ev["correct"]),
                             (500, int((p.argmax(1) == y_test).sum())))
            self.assertAlmostEqual(ev["loss_sum"] / losses.sum(), 1, places=5)
        fake.stop()
        self.assertEqual(fake.wait(), 0, fake.stderr)

    def test_the_channel_closing_ends_steps_cleanly(self):
        fake = self.start(PROBE, "loop")
        fake.handshake()
        self.assertEqual(fake.step(1, [1, 2, 3])["loss_sum"], 6)
        fake.sock.shutdown(2)
        self.assertEqual(fake.wait(), 0, fake.stderr)
        self.assertIn("steps ended", fake.stderr)

    def test_refused_prints_the_message_and_exits_1(self):
        fake = self.start()
        fake.hello()
        fake.send({"op": "refused", "message": "tensor 'W' has shape [10, 3] where the first "
                                               "process registered [10, 4]"})
        self.assertEqual(fake.wait(), 1)
        self.assertEqual(fake.stderr, "coach: refused: tensor 'W' has shape [10, 3] where the "
                                      "first process registered [10, 4]\n")

    def test_an_exception_in_the_step_is_sent_then_raised(self):
        fake = self.start(PROBE, "raise")
        fake.handshake()
        fake.send({"op": "step", "step": 4, "rank": 0, "indices": [5]})
        self.assertEqual(fake.expect("error")["message"], "ValueError: boom in step 4")
        self.assertEqual(fake.wait(), 1)
        self.assertIn("Traceback", fake.stderr)
        self.assertTrue(fake.stderr.endswith("ValueError: boom in step 4\n"), fake.stderr)

    def test_exiting_in_the_middle_of_a_step_is_named(self):
        fake = self.start(PROBE, "exit")
        fake.handshake()
        fake.send({"op": "step", "step": 9, "rank": 0, "indices": [5]})
        self.assertEqual(fake.expect("error")["message"],
                         "the script ended during step 9 without pushing it")
        self.assertEqual(fake.wait(), 0)

    def test_an_evaluation_only_process_serves_until_stop(self):
        fake = self.start(PROBE, "serve")
        hello = fake.handshake(send_initial=False)
        self.assertEqual(hello["test_samples"], 10)
        fake.params[:] = [1, 2, 3.5]
        self.assertEqual(fake.evaluate(2), {"op": "evaluated", "epoch": 2, "samples": 10,
                                            "correct": 7, "loss_sum": 6.5})
        fake.stop()
        self.assertEqual(fake.wait(), 0, fake.stderr)
        self.assertIn("served", fake.stderr)

    def test_a_script_not_started_by_coach_says_so_in_one_line(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("COACH_")}
        env["PYTHONPATH"] = os.path.dirname(coach.__path__[0])
        run = subprocess.run([sys.executable, SOFTMAX], env=env, capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(run.returncode, 1)
        self.assertEqual(run.stderr.splitlines()[-1], "coach.CoachError: " + coach.NOT_STARTED)


class InProcess(unittest.TestCase):
    """The script runs here (its errors are caught as exceptions); the harness in a thread."""

    def pair(self, coach_side, tensors=(("w", (3,), "param"),), **kw):
        """Runs coach_side(fake) in a thread, inits a job here; returns (job, its result())."""
        fake = FakeCoach(timeout=10)
        self.addCleanup(fake.close)
        done = beside(fake, coach_side)
        with mock.patch.dict(os.environ, fake.script_env()):
            job = coach.init(list(tensors), samples=kw.pop("samples", 10), **kw)
        self.addCleanup(job.close)
        return job, done

    def test_junk_from_coach_raises_and_is_answered_with_error(self):
        for junk, says in [(b"hello world\n", "'hello world'"),
                           (b'{"op": "dance"}\n', "unknown op 'dance'"),
                           (b"[1, 2]\n", "has no op"),
                           (b'{"op": "step", "step": "1", "rank": 0, "indices": []}\n',
                            "step field 'step' is '1'"),
                           (b'{"op": "step", "step": 1, "rank": 0, "indices": [10]}\n',
                            "index outside [0, 10)"),
                           (b'{"op": "step", "step": 1, "rank": 0, "indices": [1.5]}\n',
                            "not all integers"),
                           (b'{"op": "evaluate", "epoch": 1}\n', "a script without evaluate"),
                           (b'{"op": "step", "step": NaN}\n', "NaN")]:
            with self.subTest(junk=junk):
                def coach_side(fake):
                    fake.handshake()
                    fake.send_raw(junk)
                    return fake.expect("error")["message"]

                job, done = self.pair(coach_side)
                with self.assertRaises(coach.CoachError) as caught:
                    next(job.steps())
                self.assertIn(says, str(caught.exception))
                self.assertIn("Coach sent junk on the control channel", str(caught.exception))
                self.assertEqual(done(), str(caught.exception))
                job.close()

    def test_junk_in_the_handshake_raises_from_init(self):
        layout = {"op": "layout", "shm": "/dev/shm/coach-test-none", "floats": 3,
                  "grads_offset": 64, "send_initial": True}
        for answer, says in [({"op": "banana"}, "'banana' where layout or refused was due"),
                             (dict(layout, floats=4), "layout of 4 floats where the tensors "
                                                      "hold 3"),
                             (dict(layout, grads_offset=8), "grads_offset 8"),
                             (dict(layout, send_initial=1), "field 'send_initial' is 1"),
                             (layout, "cannot open Coach's shared memory")]:
            with self.subTest(says=says):
                fake = FakeCoach(timeout=10)
                self.addCleanup(fake.close)

                def coach_side(fake):
                    fake.hello()
                    fake.send(answer)
                    return fake.expect("error")["message"]

                done = beside(fake, coach_side)
                with mock.patch.dict(os.environ, fake.script_env()):
                    with self.assertRaises(coach.CoachError) as caught:
                        coach.init([("w", (3,), "param")], samples=10)
                self.assertIn(says, str(caught.exception))
                self.assertEqual(done(), str(caught.exception))

    def test_push_twice_unpushed_steps_and_bad_losses_raise(self):
        def coach_side(fake):
            fake.handshake()
            return [fake.step(1, [1, 2]), fake.step(2, [3])]

        job, done = self.pair(coach_side)
        steps = job.steps()
        step = next(steps)
        self.assertEqual((step.step, step.rank, step.samples), (1, 0, 2))
        self.assertEqual(step.indices.dtype, np.int64)
        for bad in [float("nan"), float("inf"), "1.0", True, [1.0]]:
            with self.assertRaisesRegex(coach.CoachError, "is not a finite number"):
                step.push(bad)
        step.push(np.float32(2.5))
        with self.assertRaisesRegex(coach.CoachError, "step 1 was pushed already"):
            step.push(2.5)
        step = next(steps)
        step.push()  # None: 0.0
        self.assertEqual([d["loss_sum"] for d in done()], [2.5, 0.0])

    def test_a_step_left_without_push_raises(self):
        def coach_side(fake):
            fake.handshake()
            fake.send({"op": "step", "step": 1, "rank": 0, "indices": [1]})

        job, done = self.pair(coach_side)
        steps = job.steps()
        next(steps)
        with self.assertRaisesRegex(coach.CoachError, "step 1 ended without step.push"):
            next(steps)
        done()

    def test_an_error_from_coach_raises(self):
        def coach_side(fake):
            fake.handshake()
            fake.send({"op": "error", "message": "shard 2 is gone"})

        job, done = self.pair(coach_side)
        with self.assertRaisesRegex(coach.CoachError, "^Coach failed: shard 2 is gone$"):
            list(job.steps())
        done()

    def test_stop_ends_steps_and_the_regions_map_the_tensors(self):
        def coach_side(fake):
            fake.handshake()
            fake.params[:] = np.arange(7)
            fake.step(1, [0])
            fake.stop()
            return fake.grads.copy()

        job, done = self.pair(coach_side, [("a", (2, 2), "param"), ("s", (), "buffer"),
                                           ("c", (2,), "param")])
        self.assertTrue(job.first)
        for step in job.steps():
            np.testing.assert_array_equal(job.param("a"), [[0, 1], [2, 3]])
            self.assertEqual(job.param("s").shape, ())
            job.grad("c")[:] = job.param("c") + 1
            step.push(0)
        np.testing.assert_array_equal(done(), [0, 0, 0, 0, 0, 6, 7])
        self.assertEqual(list(job.steps()), [])
        with self.assertRaisesRegex(coach.CoachError, "no tensor named 'z'"):
            job.param("z")

    def test_init_checks_its_arguments(self):
        fake = FakeCoach(timeout=10)
        self.addCleanup(fake.close)
        self.addCleanup(os.close, fake.fd)
        cases = [([], {}, "no tensors"),
                 ([("w", (3,), "param"), ("w", (2,), "param")], {}, "listed twice"),
                 ([("w", (3, -1), "param")], {}, "dimensions >= 0"),
                 ([("w", (3,), "weight")], {}, "'param' or 'buffer'"),
                 ([("w", (3,), "param")], {"samples": 0}, "training set's size"),
                 ([("w", (3,), "param")], {"evaluate": len}, "together"),
                 ([("w", (3,), "param")], {"test_samples": 5}, "together")]
        with mock.patch.dict(os.environ, fake.script_env()):
            for tensors, kw, says in cases:
                with self.subTest(says=says), self.assertRaisesRegex(coach.CoachError, says):
                    coach.init(tensors, **{"samples": 10, **kw})

    def test_not_started_by_coach(self):
        with mock.patch.dict(os.environ, {"COACH_CONTROL_FD": ""}):
            with self.assertRaisesRegex(coach.CoachError, "not started by Coach"):
                coach.init([("w", (3,), "param")], samples=10)


if __name__ == "__main__":
    unittest.main()
