"""Coach's script side: a process of a user's script as a Coach worker's compute.

Coach's native worker runs the script, hands it each training step over a Unix socket (one JSON
object per line) and takes the gradient back through shared memory (docs/wire.md, "External
compute processes"; docs/python.md). This module is the framework-neutral core over NumPy;
``coach.torch`` is the PyTorch adapter. Standard library and NumPy only.

    job = coach.init([("W", (10, 3), "param"), ("b", (3,), "param")], samples=2000)
    for step in job.steps():
        ...                          # fill job.grad(name) for the samples step.indices
        step.push(loss_sum)
"""
import atexit
import json
import math
import mmap
import numbers
import os
import socket
import sys

import numpy as np

__all__ = ["CoachError", "Job", "Step", "init", "PROTOCOL"]

PROTOCOL = 1
MAX_LINE = 1 << 20  # bytes of one message, its "\n" included
NOT_STARTED = ("this script was not started by Coach (no COACH_CONTROL_FD): run it with "
               "`coach train SPEC` whose model names it")


class CoachError(RuntimeError):
    """A failure of the channel to Coach or of the script's use of it, in one line."""


def _one_line(text, limit=4096):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _number(x):
    """x (a number, a 0-d array, a one-element tensor) as a finite float, or None."""
    if not isinstance(x, (numbers.Real, np.number)) and hasattr(x, "item"):
        try:
            x = x.item()
        except Exception:
            return None
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Real, np.number)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _count(x):
    """x as a non-negative int (an integral float too), or None."""
    if _is_int(x):
        return int(x) if x >= 0 else None
    x = _number(x)
    return int(x) if x is not None and x >= 0 and x.is_integer() else None


from ._tables import _Tables, _check_tables  # noqa: E402 (uses CoachError and the helpers above)


class Step:
    """One training step: ``step`` (the number), ``rank`` (the worker), ``indices`` (int64 array
    of training-sample indices in [0, samples)) and ``samples`` (their count). Fill the job's
    gradient region, then call ``push(loss_sum)`` once."""

    __slots__ = ("step", "rank", "indices", "samples", "handoff_s", "row_ids", "rows",
                 "row_grads", "_job", "_pushed")

    def __init__(self, job, step, rank, indices):
        self._job, self.step, self.rank, self.indices = job, step, rank, indices
        self.samples = len(indices)
        #: a job with tables: per table, the step's rows (the ids its lookup gave, ascending),
        #: their values (rows x dim float32, a view of the rows region) and where their
        #: gradients go (the same shape; zeroed by Coach)
        self.row_ids = self.rows = self.row_grads = None
        #: seconds an adapter spent moving this step's tensors between the shared regions and
        #: the model (copies to and from a device); sent with ``done`` for Coach's breakdown
        self.handoff_s = 0.0
        self._pushed = False

    @property
    def pushed(self):
        """Whether push() was called."""
        return self._pushed

    def push(self, loss_sum=None):
        """Hands the step back to Coach: the gradient region holds the gradient of the SUM of the
        per-sample losses (and each buffer's value times ``samples``); ``loss_sum`` is that sum
        (a finite number; None reports 0.0). Once per step: a second call raises CoachError."""
        self._job._push(self, loss_sum)

    def __repr__(self):
        return f"Step(step={self.step}, rank={self.rank}, samples={self.samples})"


class Job(_Tables):
    """A script's connection to Coach, made by ``coach.init``: the shared parameter and gradient
    regions and the message loop (the embedding tables' part: _tables.py)."""

    def __init__(self, sock, tensors, samples, test_samples, evaluate, tables=(), lookups=None):
        self._sock = sock
        self.tables = list(tables)  #: [(name, rows, dim, init_scale)]: the embedding tables
        self._lookups = lookups
        self._lookup = None  # (step, [ids per table]) answered last
        self._rows_mm = None  # the rows region (docs/wire.md "Rows of a script's tables")
        self._rfile = sock.makefile("rb")
        self._tensors = tensors  # [(name, shape, kind, offset, size)]
        self.samples, self.test_samples = samples, test_samples
        self._evaluate_fn = evaluate
        seed, job_id = os.environ.get("COACH_SEED"), os.environ.get("COACH_JOB")
        self.seed = int(seed) if seed and seed.isdigit() else None  #: COACH_SEED, or None
        self.id = int(job_id) if job_id and job_id.isdigit() else None  #: COACH_JOB, or None
        self.first = False  #: whether this process sent the job's initial values
        self.params = self.grads = None  #: flat float32 views of the two regions
        self._views = {}
        self._state = "handshake"  # then running, stopped, closed (EOF, error) or refused
        self._error_sent = False
        self._current = None  # the step yielded and not pushed
        self._evaluating = False  # within the script's evaluate (pull allowed)

    @property
    def tensors(self):
        """[(name, shape, kind)] in the order of the flat vector."""
        return [(t[0], t[1], t[2]) for t in self._tensors]

    def param(self, name):
        """The float32 view (the tensor's shape) of tensor ``name`` in the parameter region."""
        return self._view(name)[0]

    def grad(self, name):
        """The float32 view (the tensor's shape) of tensor ``name`` in the gradient region."""
        return self._view(name)[1]

    def _view(self, name):
        try:
            return self._views[name]
        except KeyError:
            raise CoachError(f"no tensor named {name!r} in this job's layout") from None

    def steps(self):
        """Yields each Step Coach sends; answers evaluations while waiting. Ends on Coach's
        ``stop`` (or when Coach closes the channel). The gradient region is zeroed before each
        step is yielded."""
        while True:
            step = self._next()
            if step is None:
                return
            self.grads.fill(0)
            self._current = step
            yield step
            if not step._pushed:
                raise CoachError(f"step {step.step} ended without step.push(loss_sum): "
                                 "push once per step")

    def serve(self):
        """Answers Coach's messages (evaluations) until ``stop``, for a process that never
        iterates steps(). A step sent to it is an error."""
        step = self._next()
        if step is not None:
            raise self._error(f"step {step.step} came to a process that only evaluates "
                              "(job.serve())")

    def close(self):
        """Closes the channel (the views stay valid). Coach sees the process as ended."""
        global _job
        if self._state != "refused":
            self._state = "closed"
        self._rfile.close()
        self._sock.close()
        if _job is self:
            _job = None

    # -- messages --

    def _send(self, msg):
        data = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        if len(data) > MAX_LINE:
            raise CoachError(f"the {msg['op']} message has {len(data)} bytes (the protocol's "
                             f"limit is {MAX_LINE})")
        try:
            self._sock.sendall(data)
        except OSError as e:
            self._state = "closed"
            raise CoachError(f"Coach closed the control channel ({e.strerror or e})") from None

    def _error(self, message):
        """Sends ``error`` (best effort) and returns the CoachError to raise."""
        self._fail(message)
        return CoachError(message)

    def _fail(self, message, memory=False):
        if self._error_sent or self._state not in ("handshake", "running"):
            return
        self._error_sent = True
        msg = {"op": "error", "message": _one_line(message)}
        if memory:
            msg["kind"] = "memory"
        try:
            self._send(msg)
        except CoachError:
            pass

    def _call(self, fn):
        """fn(self), the script's code: what it raises is sent as ``error``, then raised."""
        try:
            return fn(self)
        except BaseException as e:
            self._fail(f"{type(e).__name__}: {e}", _is_memory_error(e))
            raise

    def _junk(self, what):
        return self._error(f"Coach sent junk on the control channel: {what}")

    def _receive(self):
        """The next message (a dict with a str ``op``), or None at the channel's end."""
        try:
            line = self._rfile.readline(MAX_LINE)
        except OSError as e:
            raise CoachError(f"the control channel failed: {e}") from None
        if not line:
            return None
        if not line.endswith(b"\n"):
            if len(line) >= MAX_LINE:
                raise self._junk(f"a line over {MAX_LINE} bytes")
            raise self._junk(f"{line[:80]!r} cut off by the channel's end")
        try:
            msg = json.loads(line, parse_constant=_no_constant)
        except ValueError:
            raise self._junk(repr(line[:80].decode("utf-8", "replace").rstrip("\n"))) from None
        if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
            raise self._junk(f"{_one_line(line.decode('utf-8', 'replace'), 80)!r} has no op")
        return msg

    def _field(self, msg, name, kind):
        value = msg.get(name)
        ok = _is_int(value) if kind is int else isinstance(value, kind)
        if not ok:
            what = "missing" if name not in msg else f"{value!r:.40}"
            raise self._junk(f"{msg['op']} field {name!r} is {what}")
        return value

    def _next(self):
        """The next Step, answering evaluations meanwhile; None on stop or the channel's end."""
        if self._state != "running":
            return None
        while True:
            msg = self._receive()
            if msg is None:
                self._state = "closed"
                return None
            op = msg["op"]
            if op == "step":
                return self._parse_step(msg)
            if op == "lookup":
                self._answer_lookup(msg)
                continue
            if op == "evaluate":
                self._evaluate(self._field(msg, "epoch", int))
            elif op == "stop":
                self._state = "stopped"
                return None
            elif op == "error":
                self._state = "closed"
                raise CoachError(f"Coach failed: {_one_line(msg.get('message'))}")
            else:
                raise self._junk(f"unknown op {op!r:.40}")

    def _parse_step(self, msg):
        step, rank = self._field(msg, "step", int), self._field(msg, "rank", int)
        out = Step(self, step, rank, self._indices(msg, f"step {step}"))
        if self.tables:
            self._step_rows(msg, out)
        return out

    def _indices(self, msg, what):
        raw = self._field(msg, "indices", list)
        if not all(type(i) is int for i in raw):
            raise self._junk(f"{what}'s indices are not all integers")
        try:
            indices = np.array(raw, dtype=np.int64)
        except OverflowError:
            raise self._junk(f"{what} has an index beyond 64 bits") from None
        if len(indices) and (indices.min() < 0 or indices.max() >= self.samples):
            raise self._junk(f"{what} has an index outside [0, {self.samples})")
        return indices

    def _push(self, step, loss_sum):
        if step._pushed:
            raise CoachError(f"step {step.step} was pushed already: push once per step")
        if step is not self._current or self._state != "running":
            raise CoachError(f"step {step.step} is not the step in progress")
        loss = 0.0 if loss_sum is None else _number(loss_sum)
        if loss is None:
            raise CoachError(f"step {step.step}: loss_sum {loss_sum!r:.60} is not a finite "
                             "number")
        step._pushed = True
        self._current = None
        done = {"op": "done", "step": step.step, "samples": step.samples, "loss_sum": loss}
        if step.handoff_s > 0:
            done["handoff_s"] = float(step.handoff_s)
        self._send(done)

    def _evaluate(self, epoch):
        if self._evaluate_fn is None:
            raise self._junk(f"evaluate (epoch {epoch}) came to a script without evaluate")
        self._evaluating = True
        try:
            result = self._call(self._evaluate_fn)
        finally:
            self._evaluating = False
        extra = {}
        if isinstance(result, (tuple, list)) and len(result) == 4 and isinstance(result[3], dict):
            result, extra = result[:3], result[3]
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise self._error(f"evaluate returned {result!r:.60}: give (loss_sum, correct, "
                              "samples)")
        loss, correct, samples = _number(result[0]), _count(result[1]), _count(result[2])
        if loss is None or correct is None or not samples or correct > samples:
            raise self._error(f"evaluate returned {tuple(result)!r:.80}: give (loss_sum: a "
                              "finite number, correct <= samples, samples > 0)")
        msg = {"op": "evaluated", "epoch": epoch, "samples": samples, "correct": correct,
               "loss_sum": loss}
        for key in ("auc", "log_loss"):  # a two-class model's, optional
            value = _number(extra.get(key))
            if value is not None:
                msg[key] = value
        self._send(msg)

    def _handshake(self, hello, initial):
        self._send(hello)
        msg = self._receive()
        if msg is None:
            raise CoachError("Coach closed the control channel before answering hello")
        if msg["op"] == "refused":
            self._state = "refused"
            print(f"coach: refused: {_one_line(msg.get('message'))}", file=sys.stderr,
                  flush=True)
            sys.exit(1)
        if msg["op"] != "layout":
            raise self._junk(f"{msg['op']!r:.40} where layout or refused was due")
        path, floats = self._field(msg, "shm", str), self._field(msg, "floats", int)
        offset = self._field(msg, "grads_offset", int)
        first = self._field(msg, "send_initial", bool)
        want = sum(t[4] for t in self._tensors)
        if floats != want:
            raise self._junk(f"layout of {floats} floats where the tensors hold {want}")
        if offset < 4 * floats or offset % 64:
            raise self._junk(f"grads_offset {offset} (a multiple of 64, at least {4 * floats})")
        self._map(path, floats, offset)
        self.first = first
        if first and initial is not None:
            self._call(initial)
        self._send({"op": "initial" if first else "ready"})
        self._state = "running"

    def _map(self, path, floats, offset):
        size = offset + 4 * floats
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            raise self._error(f"cannot open Coach's shared memory {path}: {e.strerror}") from None
        try:
            have = os.fstat(fd).st_size
            if have < size:
                raise self._junk(f"shared memory {path} has {have} bytes, the layout {size}")
            mm = mmap.mmap(fd, size)
        except (OSError, ValueError) as e:
            raise self._error(f"cannot map Coach's shared memory {path}: {e}") from None
        finally:
            os.close(fd)
        self.params = np.frombuffer(mm, np.float32, floats, 0)
        self.grads = np.frombuffer(mm, np.float32, floats, offset)
        for name, shape, _, begin, n in self._tensors:
            self._views[name] = (self.params[begin:begin + n].reshape(shape),
                                 self.grads[begin:begin + n].reshape(shape))


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def _check_tensors(tensors):
    out, names, offset = [], set(), 0
    for t in tensors:
        try:
            name, shape, kind = t
            shape = tuple(shape)
        except (TypeError, ValueError):
            raise CoachError(f"tensor {t!r:.60} is not (name, shape, kind)") from None
        if not isinstance(name, str) or not name:
            raise CoachError(f"tensor name {name!r:.60} is not a non-empty string")
        if name in names:
            raise CoachError(f"tensor {name!r} is listed twice")
        if not all(_is_int(d) and d >= 0 for d in shape):
            raise CoachError(f"tensor {name!r} has shape {shape!r:.60}: give dimensions >= 0")
        if kind not in ("param", "buffer"):
            raise CoachError(f"tensor {name!r} has kind {kind!r:.40}: give 'param' or 'buffer'")
        shape = tuple(int(d) for d in shape)
        size = math.prod(shape)
        names.add(name)
        out.append((name, shape, kind, offset, size))
        offset += size
    if not out:
        raise CoachError("no tensors: Coach needs at least one")
    return out


def init(tensors, samples, initial=None, evaluate=None, test_samples=0, framework="numpy",
         tables=(), lookups=None):
    """Connects this process to Coach and returns its Job.

    tensors: [(name, shape, kind)], kind "param" (trained by its gradient) or "buffer" (a
    statistic: its value times the samples goes in its gradient slot); float32 always, in this
    order in the flat vector. samples: the training set's size N (step indices lie in [0, N)).
    initial(job): fills job.param(name) with initial values; called only in the job's first
    process (otherwise the region holds zeros until the first step). evaluate(job) -> (loss_sum,
    correct, samples) over the script's test set of test_samples (> 0 with evaluate, else 0),
    optionally with a fourth element {"auc": a, "log_loss": l} (a two-class model's metrics).
    framework: free text Coach logs. tables: [(name, rows, dim, init_scale)], embedding tables
    whose rows the shards hold (docs/python.md, coach.torch.Embedding); lookups(indices) -> one
    integer id array per table: the rows the samples `indices` look up (any order, repeats
    allowed), given with tables. Raises CoachError (one line); exits 1 when Coach refuses.
    """
    global _job
    fd = os.environ.get("COACH_CONTROL_FD")
    if not fd:
        raise CoachError(NOT_STARTED)
    if os.environ.get("COACH_PROTOCOL", "1") != str(PROTOCOL):
        raise CoachError(f"Coach speaks protocol {os.environ['COACH_PROTOCOL']!r}; this "
                         f"package speaks {PROTOCOL}")
    if _job is not None:
        raise CoachError("coach.init was called twice in this process")
    layout = _check_tensors(tensors)
    table_list = _check_tables(tables)
    if bool(table_list) != (lookups is not None):
        raise CoachError("give tables and lookups together, or neither")
    if not _is_int(samples) or samples <= 0:
        raise CoachError(f"samples {samples!r:.40}: give the training set's size (> 0)")
    if not _is_int(test_samples) or test_samples < 0:
        raise CoachError(f"test_samples {test_samples!r:.40}: give the test set's size (>= 0)")
    if (evaluate is None) != (test_samples == 0):
        raise CoachError("give evaluate and test_samples > 0 together, or neither")
    try:
        sock = socket.socket(fileno=int(fd))
    except (ValueError, OSError) as e:
        raise CoachError(f"COACH_CONTROL_FD={fd!r} is not an open socket ({e})") from None
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise CoachError(f"COACH_CONTROL_FD={fd} is not a Unix stream socket")
    sock.set_inheritable(False)  # programs the script runs do not keep the channel open
    job = Job(sock, layout, int(samples), int(test_samples), evaluate, table_list, lookups)
    hello = {"op": "hello", "protocol": PROTOCOL, "pid": os.getpid(), "samples": job.samples,
             "test_samples": job.test_samples, "framework": str(framework),
             "tensors": [{"name": n, "shape": list(s), "dtype": "float32", "kind": k}
                         for n, s, k, _, _ in layout]}
    if table_list:
        hello["tables"] = [{"name": n, "rows": r, "dim": d, "init_scale": c}
                           for n, r, d, c in table_list]
    _job = job
    _install_hooks()
    try:
        job._handshake(hello, initial)
    except BaseException:  # refused, junk, or initial() raised: the channel ends here
        job.close()
        raise
    return job


_job = None  # this process's job, for the exit hooks
_previous_hook = None


def _is_memory_error(e):
    """Whether ``e`` says an allocation failed: MemoryError (NumPy's too), or a framework's
    RuntimeError for it (PyTorch's CPU allocator: "can't allocate memory"; CUDA's "out of
    memory"). Coach counts such an invocation as out of memory (function.memory_mb)."""
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("can't allocate memory" in text
                                            or "out of memory" in text)


def _excepthook(kind, value, tb):
    """An exception that ends the script: Coach hears it as ``error`` (before the traceback)."""
    if _job is not None:
        _job._fail(f"{kind.__name__}: {value}", _is_memory_error(value))
    _previous_hook(kind, value, tb)


def _at_exit():
    job = _job
    if job is None or job._state != "running":
        return
    if job._current is not None:
        job._fail(f"the script ended during step {job._current.step} without pushing it")
    else:
        job._fail("the script ended before Coach sent stop")


def _install_hooks():
    global _previous_hook
    if _previous_hook is None:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook
        atexit.register(_at_exit)
