"""Coach's side of the external-process protocol (docs/wire.md "External compute processes"),
played in Python for the tests of the `coach` package: a socket pair, the shared-memory file,
and the messages. Either spawns a script (`FakeCoach(script)`) or leaves the script's end of the
channel to the caller (`FakeCoach()`, then `script_env()`), for a script run in this process.
"""
import json
import mmap
import os
import socket
import subprocess
import sys
import threading

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "python")
_counter = 0


class FakeCoach:
    """One process's channel. Methods raise AssertionError on an unexpected answer."""

    def __init__(self, script=None, args=(), seed=7, job=3, python=None, env=None, timeout=60):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.fd = theirs.detach()  # the script's end: a spawned script's, or this process's
        self.sock.settimeout(timeout)
        self._rfile = self.sock.makefile("rb")
        self.seed, self.job = seed, job
        self.shm_path = None
        self.params = self.grads = None
        self.proc, self._stderr = None, []
        if script is None:
            return
        full_env = dict(os.environ, **self.script_env(), **(env or {}))
        self.proc = subprocess.Popen(
            [python or sys.executable, os.path.abspath(script), *args],
            cwd=os.path.dirname(os.path.abspath(script)), env=full_env, pass_fds=(self.fd,),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(self.fd)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def script_env(self):
        """The variables Coach adds to a script's environment (a script run in this process
        takes over self.fd: coach.init owns it)."""
        path = os.environ.get("PYTHONPATH")
        return {"COACH_CONTROL_FD": str(self.fd), "COACH_PROTOCOL": "1",
                "COACH_SEED": str(self.seed), "COACH_JOB": str(self.job),
                "PYTHONPATH": PACKAGE + (os.pathsep + path if path else "")}

    def _read_stderr(self):
        for line in self.proc.stderr:
            self._stderr.append(line.decode("utf-8", "replace"))

    @property
    def stderr(self):
        return "".join(self._stderr)

    # -- the channel --

    def send(self, msg):
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def send_raw(self, data):
        self.sock.sendall(data)

    def receive(self):
        """The next message as a dict, or None when the process closed its end."""
        line = self._rfile.readline()
        if not line:
            return None
        assert line.endswith(b"\n"), f"a line cut off: {line[:80]!r}"
        return json.loads(line)

    def expect(self, op):
        msg = self.receive()
        assert msg is not None and msg["op"] == op, f"expected {op}, got {msg!r:.300}" + (
            f"; stderr: {self.stderr}" if self.proc else "")
        return msg

    # -- the handshake --

    def hello(self):
        return self.expect("hello")

    def layout(self, floats, send_initial=True):
        """Creates the shared file as Coach does (O_EXCL, 0600) and sends `layout`."""
        global _counter
        _counter += 1
        self.shm_path = f"/dev/shm/coach-test-{os.getpid()}-{_counter}"
        grads_offset = (4 * floats + 63) // 64 * 64
        size = grads_offset + 4 * floats
        fd = os.open(self.shm_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.params = np.frombuffer(self._mm, np.float32, floats, 0)
        self.grads = np.frombuffer(self._mm, np.float32, floats, grads_offset)
        self.send({"op": "layout", "shm": self.shm_path, "floats": floats,
                   "grads_offset": grads_offset, "send_initial": send_initial})

    def answer(self):
        """The process's answer to `layout` (`initial` or `ready`); unlinks the shared file."""
        msg = self.receive()
        self.unlink()
        assert msg is not None, f"no answer to layout; stderr: {self.stderr}"
        return msg

    def handshake(self, send_initial=True):
        """hello, layout, initial/ready: returns the hello."""
        hello = self.hello()
        self.layout(sum(_size(t["shape"]) for t in hello["tensors"]), send_initial)
        answer = self.answer()
        assert answer["op"] == ("initial" if send_initial else "ready"), answer
        return hello

    def unlink(self):
        if self.shm_path and os.path.exists(self.shm_path):
            os.unlink(self.shm_path)

    # -- the work --

    def step(self, step, indices, rank=0, params=None):
        """Writes `params` (if given), sends a step, returns its `done`."""
        if params is not None:
            self.params[:] = params
        self.send({"op": "step", "step": step, "rank": rank, "indices": [int(i) for i in indices]})
        done = self.expect("done")
        assert done["step"] == step and done["samples"] == len(indices), done
        return done

    # -- embedding tables (docs/wire.md "Rows of a script's tables") --

    def lookup(self, step, indices):
        """Sends `lookup`, returns the `ids` answer's lists (one per table)."""
        self.send({"op": "lookup", "step": step, "indices": [int(i) for i in indices]})
        msg = self.expect("ids")
        assert msg["step"] == step, msg
        return msg["ids"]

    def _rows_file(self, size):
        """A fresh rows region of `size` bytes (Coach makes one when a message needs more)."""
        global _counter
        _counter += 1
        path = f"/dev/shm/coach-test-{os.getpid()}-rows-{_counter}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return path, mm

    def step_rows(self, step, indices, values, rank=0, params=None):
        """A step of a script with tables: `values` per table (rows x dim float32) written into
        a fresh rows region; returns (done, [row gradients per table])."""
        if params is not None:
            self.params[:] = params
        at, offsets = 0, []
        for v in values:
            offsets.append(at)
            at += 4 * v.size
        grads_at = (at + 63) // 64 * 64
        path, mm = self._rows_file(max(2 * grads_at, 64))
        for v, o in zip(values, offsets):
            np.frombuffer(mm, np.float32, v.size, o)[:] = np.asarray(v, np.float32).ravel()
        self.send({"op": "step", "step": step, "rank": rank,
                   "indices": [int(i) for i in indices], "rows": [len(v) for v in values],
                   "rows_bytes": len(mm), "rows_grads_offset": grads_at, "rows_shm": path})
        try:
            done = self.expect("done")
        finally:
            os.unlink(path)
        grads = [np.frombuffer(mm, np.float32, v.size, grads_at + o).reshape(v.shape).copy()
                 for v, o in zip(values, offsets)]
        return done, grads

    def evaluate_rows(self, epoch, table_rows):
        """An evaluation whose `pull`s are answered from `table_rows` (a full float32 table per
        table); returns (evaluated, [the pulled id lists])."""
        self.send({"op": "evaluate", "epoch": epoch})
        pulled, path = [], None
        while True:
            msg = self.receive()
            if path is not None:  # mapped by the process, which answered
                os.unlink(path)
            assert msg is not None, f"no answer to evaluate; stderr: {self.stderr}"
            if msg["op"] != "pull":
                break
            pulled.append(msg["ids"])
            values = [table_rows[t][ids] for t, ids in enumerate(msg["ids"])]
            size = max(sum(4 * v.size for v in values), 64)
            path, mm = self._rows_file(size)
            at = 0
            for v in values:
                np.frombuffer(mm, np.float32, v.size, at)[:] = v.ravel()
                at += 4 * v.size
            self.send({"op": "rows", "rows": [len(v) for v in values], "rows_bytes": size,
                       "rows_shm": path})
        assert msg["op"] == "evaluated" and msg["epoch"] == epoch, msg
        return msg, pulled

    def evaluate(self, epoch):
        self.send({"op": "evaluate", "epoch": epoch})
        done = self.expect("evaluated")
        assert done["epoch"] == epoch, done
        return done

    def stop(self):
        self.send({"op": "stop"})

    def wait(self, timeout=60):
        """The process's exit code (it must end within `timeout`)."""
        rc = self.proc.wait(timeout)
        self._reader.join(timeout)
        return rc

    def close(self):
        self.unlink()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None:
            self._reader.join(10)
            self.proc.stderr.close()
        self._rfile.close()
        self.sock.close()


def beside(fake, coach_side):
    """Runs coach_side(fake) in a thread (a script runs in this one); returns result(), which
    waits for it and returns its value or raises its exception."""
    out = {}

    def run():
        try:
            out["value"] = coach_side(fake)
        except BaseException as e:  # raised by result()
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result(timeout=30):
        thread.join(timeout)
        assert not thread.is_alive(), "the harness thread did not end"
        if "error" in out:
            raise out["error"]
        return out.get("value")
    return result


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n
