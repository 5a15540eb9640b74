"""coach.torch: a PyTorch model as a Coach worker's compute (docs/python.md).

    import coach.torch as ct
    job = ct.init(model, samples=len(train_set), evaluate=evaluate, test_samples=len(test_set))
    for step in job.steps():
        loss = loss_fn(model(X[step.indices]), Y[step.indices])  # the batch's mean loss
        loss.backward()
        step.push(loss)

The model's float32 parameters and buffers are Coach's: on the CPU they become views of the
shared parameter region (their gradients views of the gradient region), so nothing is copied; on
another device they are copied in before each step and the gradients out after it. Importing
this module seeds torch, numpy and random with COACH_SEED when Coach set it.
"""
import os
import random
import time

import numpy as np
import torch

import coach
from coach import CoachError

__all__ = ["CoachError", "Embedding", "Job", "Step", "init"]


def _seed_from_coach():
    seed = os.environ.get("COACH_SEED", "")
    if seed.isdigit():
        torch.manual_seed(int(seed))
        np.random.seed(int(seed) % 2**32)
        random.seed(int(seed))


_seed_from_coach()


class _Entry:
    """One registered tensor: where the model holds it and where Coach's regions hold it."""

    def __init__(self, name, module, attr, is_param, kind, shape):
        self.name, self.module, self.attr, self.is_param = name, module, attr, is_param
        self.kind, self.shape = kind, shape
        self.pview = self.gview = None  # torch views of the two regions
        self.local = False  # the model keeps its own tensor (not on the CPU): copied
        self.stage = None  # its slice of the staging buffers

    def tensor(self):
        """The model's tensor now (looked up each time: the script may have replaced it)."""
        return (self.module._parameters if self.is_param else self.module._buffers)[self.attr]


class Embedding(torch.nn.Module):
    """An embedding table whose rows live in Coach's shards (docs/python.md, "Embedding tables"):
    ``num_embeddings`` rows of ``embedding_dim`` floats, created on first touch by the shards
    (uniform in [-init_scale, init_scale], from the job's seed, the table and the row). It holds
    no weight: it is not in ``named_parameters()``, so the dense layout is the same with it.

    ``forward(ids)``: ids an integer tensor (or array) of shape (B, F), B bags of F ids each,
    pooled like ``torch.nn.EmbeddingBag`` (``mode`` "sum" or "mean") into (B, embedding_dim);
    or of shape (B,): one id a sample, (B, embedding_dim). In a step the rows are the step's
    (those init's ``lookups`` named for its samples): an id that is not among them, or outside
    [0, num_embeddings), is a CoachError. In ``evaluate(model)`` the rows are pulled from Coach
    as forward needs them. Their gradient goes to Coach with the step's push."""

    def __init__(self, num_embeddings, embedding_dim, mode="sum", init_scale=0.01):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise CoachError(f"Embedding mode {mode!r:.40}: give 'sum' or 'mean'")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.mode, self.init_scale = mode, float(init_scale)
        self._job, self._table, self._name = None, None, None
        self._ids = self._weight = None  # the step's rows: ascending ids, their values (leaf)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"

    def forward(self, ids):
        ids = torch.as_tensor(ids)
        if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.dim() not in (1, 2):
            raise CoachError(f"Embedding {self._name!r}: give integer ids of shape (B, F) "
                             f"or (B,), got {ids.dtype} {list(ids.shape)}")
        if self._job is None:
            raise CoachError("Embedding used before coach.torch.init registered it: its rows "
                             "are Coach's")
        flat = ids.reshape(-1).to(torch.int64).contiguous()
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= self.num_embeddings):
            bad = int(flat.min()) if int(flat.min()) < 0 else int(flat.max())
            raise CoachError(f"Embedding {self._name!r}: id {bad} is outside [0, "
                             f"{self.num_embeddings})")
        row_ids, weight = self._job._rows_of(self, flat)
        flat = flat.to(weight.device)
        row_ids = row_ids.to(weight.device)
        pos = torch.searchsorted(row_ids, flat).clamp_(max=max(len(row_ids) - 1, 0))
        if len(row_ids) == 0 or not bool((row_ids[pos] == flat).all()):
            bad = int(flat[0]) if len(row_ids) == 0 else int(flat[row_ids[pos] != flat][0])
            raise CoachError(f"Embedding {self._name!r}: id {bad} is not among the rows of this "
                             "step (the ids init's lookups gave for its samples)")
        rows = weight[pos].view(*ids.shape, self.embedding_dim)
        if ids.dim() == 1:
            return rows
        return rows.sum(1) if self.mode == "sum" else rows.mean(1)


def _tables(model):
    """[(name, Embedding)] of `model`, in named_modules() order (the model itself may be one)."""
    return [(name or "embedding", m) for name, m in model.named_modules()
            if isinstance(m, Embedding)]


def _owner(model, name):
    prefix, _, attr = name.rpartition(".")
    return (model.get_submodule(prefix) if prefix else model), attr


def layout(model):
    """[(name, shape, kind)] that init registers for `model`: named_parameters() in order
    ("param", or "buffer" when requires_grad is False), then the float32 persistent buffers
    ("buffer"). Raises CoachError for a parameter that is not float32."""
    return [(e.name, e.shape, e.kind) for e in _entries(model)]


def _entries(model):
    out = []
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise CoachError(f"parameter {name!r} is {str(p.dtype).replace('torch.', '')}: "
                             "Coach's shards hold float32; call model.float()")
        module, attr = _owner(model, name)
        out.append(_Entry(name, module, attr, True, "param" if p.requires_grad else "buffer",
                          tuple(p.shape)))
    for name, b in model.named_buffers():
        module, attr = _owner(model, name)
        if b.dtype == torch.float32 and attr not in module._non_persistent_buffers_set:
            out.append(_Entry(name, module, attr, False, "buffer", tuple(b.shape)))
    return out


def _shares(tensor):
    """Whether the model's tensor becomes a view of the shared region (a CPU tensor)."""
    return tensor.device.type == "cpu"


def _one_cuda_device(entries):
    """The CUDA device that holds every registered tensor, or None."""
    devices = {e.tensor().device for e in entries}
    device = devices.pop() if len(devices) == 1 else None
    return device if device is not None and device.type == "cuda" else None


class _FlatDevice:
    """A model whose every registered tensor is on one CUDA device: its tensors become views of
    one flat device buffer (their gradients of another), so a step's parameters go in with one
    copy and its gradient comes out with one, from and to the shared regions (pinned with
    cudaHostRegister where the driver allows), instead of a few per tensor."""

    def __init__(self, core, entries, device):
        self.entries = entries
        n = core.params.size
        self.hparams, self.hgrads = torch.from_numpy(core.params), torch.from_numpy(core.grads)
        self.dparams = torch.empty(n, device=device)
        self.dgrads = torch.zeros(n, device=device)
        self.pinned = all(self._pin(t) for t in (self.hparams, self.hgrads))
        offset = 0
        for e in entries:
            size = int(np.prod(e.shape, dtype=np.int64))
            e.flat = slice(offset, offset + size)
            offset += size

    @staticmethod
    def _pin(host):
        try:
            rc = torch.cuda.cudart().cudaHostRegister(host.data_ptr(),
                                                      host.numel() * host.element_size(), 0)
            return int(rc) == 0
        except Exception:  # noqa: BLE001 (not pinned: the copies still work, slower)
            return False

    @torch.no_grad()
    def attach(self, grads):
        self.dparams.copy_(self.hparams, non_blocking=self.pinned)
        if grads:
            self.dgrads.zero_()
        for e in self.entries:
            t = e.tensor()
            view = self.dparams[e.flat].view(e.shape)
            if t.data_ptr() != view.data_ptr():
                t.data = view
            if grads and e.kind == "param":
                g = self.dgrads[e.flat].view(e.shape)
                if t.grad is None or t.grad.data_ptr() != g.data_ptr():
                    t.grad = g

    @torch.no_grad()
    def push(self, samples, scale, check_shape):
        for e in self.entries:
            t = e.tensor()
            if e.kind == "param" and t.grad is not None:
                check_shape(e, t.grad)
                if t.grad.data_ptr() != self.dgrads[e.flat].data_ptr():
                    self.dgrads[e.flat].copy_(t.grad.flatten())
        if scale != 1:
            self.dgrads.mul_(scale)
        for e in self.entries:
            if e.kind == "buffer":
                t = e.tensor()
                check_shape(e, t)
                self.dgrads[e.flat].copy_(t.flatten()).mul_(samples)
        self.hgrads.copy_(self.dgrads, non_blocking=self.pinned)
        if self.dgrads.is_cuda:
            torch.cuda.current_stream(self.dgrads.device).synchronize()


class Step:
    """One training step: ``step``, ``rank``, ``indices`` (the int64 NumPy array of training-sample
    indices: ``x[step.indices]`` works for a tensor on any device; ``torch.from_numpy`` makes it
    a tensor without a copy), ``samples`` (their count). Compute the loss, call backward(), then
    push(loss)."""

    __slots__ = ("_job", "_core")

    def __init__(self, job, core_step):
        self._job, self._core = job, core_step

    indices = property(lambda self: self._core.indices)
    step = property(lambda self: self._core.step)
    rank = property(lambda self: self._core.rank)
    samples = property(lambda self: self._core.samples)

    row_ids = property(lambda self: self._core.row_ids)

    def push(self, loss):
        """Hands the gradients to Coach. ``loss``: the batch's loss (a one-element tensor or a
        number; the mean over the batch unless init's loss_reduction="sum"; None reports 0).
        Once per step."""
        self._job._push(self._core, loss)

    def __repr__(self):
        return f"Step(step={self.step}, rank={self.rank}, samples={self.samples})"


class Job:
    """The model's connection to Coach, made by ``init``. ``core`` is the coach.Job beneath."""

    def __init__(self, core, model, entries, evaluate, reduction, tables=()):
        self.core, self.model = core, model
        self._tables = list(tables)  # [(name, Embedding)], table t the t-th
        # The rows go where the model is: a CUDA model gets them on its (first) device.
        cuda = [e.tensor().device for e in entries if e.tensor().device.type == "cuda"]
        self._rows_device = cuda[0] if cuda else None
        for t, (name, emb) in enumerate(self._tables):
            emb._job, emb._table, emb._name = self, t, name
        self.samples, self.test_samples = core.samples, core.test_samples
        self.first, self.seed = core.first, core.seed
        self._entries, self._evaluate_fn, self._mean = entries, evaluate, reduction == "mean"
        staged = 0
        for e in entries:
            e.pview = torch.from_numpy(core.param(e.name))
            e.gview = torch.from_numpy(core.grad(e.name))
            e.local = not _shares(e.tensor())
            if e.local:
                e.stage = (staged, staged + e.pview.numel())
                staged = e.stage[1]
        self._local = [e for e in entries if e.local]
        self._cuda = any(e.tensor().device.type == "cuda" for e in self._local)
        device = _one_cuda_device(entries)
        self._flat = None  # every tensor on one CUDA device: one copy each way (_FlatDevice)
        if device is not None:
            self._flat = _FlatDevice(core, entries, device)
            self._local, staged = [], 0
        pin = self._cuda and torch.cuda.is_available()
        self._pstage = torch.empty(staged, pin_memory=pin) if staged else None
        self._gstage = torch.empty(staged, pin_memory=pin) if staged else None
        self._attach(grads=True)

    def steps(self):
        """Yields each Step, the model holding the step's parameters; answers evaluations while
        waiting. Ends on Coach's stop (the model then holds the last step's parameters)."""
        for core_step in self.core.steps():
            start = time.perf_counter()
            self._attach(grads=True)
            self._attach_rows(core_step)
            core_step.handoff_s += time.perf_counter() - start
            yield Step(self, core_step)

    def serve(self):
        """Answers evaluations until stop, for a process that never iterates steps()."""
        self.core.serve()

    def _attach_rows(self, core_step):
        """Each Embedding's rows of the step: its ids, and a leaf tensor of their values (a view
        of the rows region) whose gradient is a view of the region's gradient part."""
        for t, (_, emb) in enumerate(self._tables):
            emb._ids = torch.from_numpy(core_step.row_ids[t])
            w = torch.from_numpy(core_step.rows[t])
            if self._rows_device is not None:  # copied in; its gradient copied out at push
                emb._ids = emb._ids.to(self._rows_device)
                emb._weight = w.to(self._rows_device).requires_grad_(True)
                continue
            w.requires_grad_(True)
            w.grad = torch.from_numpy(core_step.row_grads[t])
            emb._weight = w

    def _rows_of(self, emb, flat):
        """(ascending ids, values) an Embedding's forward gathers from: the step's rows, or in
        an evaluation the rows of `flat` pulled from Coach."""
        if self.core._evaluating:
            ids = [np.zeros(0, np.int64)] * len(self._tables)
            ids[emb._table] = flat.cpu().numpy()
            got, values = self.core.pull(ids)
            got, values = torch.from_numpy(got[emb._table]), torch.from_numpy(values[emb._table])
            if self._rows_device is not None:
                got, values = got.to(self._rows_device), values.to(self._rows_device)
            return got, values
        if self.core._current is None or emb._weight is None:
            raise CoachError(f"Embedding {emb._name!r} has rows only within a step or Coach's "
                             "evaluate(model)")
        return emb._ids, emb._weight

    @torch.no_grad()
    def _push_rows(self, core_step, scale):
        for t, (_, emb) in enumerate(self._tables):
            w, gview = emb._weight, torch.from_numpy(core_step.row_grads[t])
            if w is not None and w.grad is not None and w.grad.data_ptr() != gview.data_ptr():
                gview.copy_(w.grad)
            if scale != 1:
                gview.mul_(scale)
            emb._weight = emb._ids = None

    def _sync(self):
        if self._cuda:
            torch.cuda.synchronize()

    def _slice(self, stage, e):
        return stage[e.stage[0]:e.stage[1]].view(e.shape)

    @torch.no_grad()
    def _attach(self, grads):
        """The model's tensors hold the parameter region's values: CPU ones as views of it (and
        their gradients as views of the gradient region), others by copy."""
        if self._flat is not None:
            self._flat.attach(grads)
            return
        for e in self._entries:
            t = e.tensor()
            if e.local:
                continue
            if t.data_ptr() != e.pview.data_ptr() or t.shape != e.pview.shape:
                t.data = e.pview
            if grads and e.kind == "param" and (t.grad is None
                                                or t.grad.data_ptr() != e.gview.data_ptr()):
                t.grad = e.gview
        if not self._local:
            return
        for e in self._local:
            self._slice(self._pstage, e).copy_(e.pview)
        for e in self._local:
            t = e.tensor()
            t.copy_(self._slice(self._pstage, e), non_blocking=True)
            if grads and e.kind == "param":
                t.grad = None
        self._sync()

    @torch.no_grad()
    def _push(self, core_step, loss):
        core = self.core
        if core_step.pushed:
            raise CoachError(f"step {core_step.step} was pushed already: push once per step")
        if core_step is not core._current:
            raise CoachError(f"step {core_step.step} is not the step in progress")
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise CoachError(f"step {core_step.step}: the loss has {loss.numel()} elements; "
                                 "push the batch's loss as one number")
            loss = loss.item()
        value = None if loss is None else coach._number(loss)
        if value is None and loss is not None:
            raise CoachError(f"step {core_step.step}: loss {loss!r:.60} is not a finite number")
        start = time.perf_counter()
        n = core_step.samples
        scale = n if self._mean else 1
        if self._flat is not None:
            self._flat.push(n, scale, lambda e, t: self._check_shape(core, e, t))
            self._push_rows(core_step, scale)
            core_step.handoff_s += time.perf_counter() - start
            core_step.push(None if value is None else value * scale)
            return
        staged = []
        for e in self._entries:
            t = e.tensor()
            value_or_grad = t if e.kind == "buffer" else t.grad
            if value_or_grad is None:
                continue  # no gradient: its slot stays 0
            self._check_shape(core, e, value_or_grad)
            if e.local:
                self._slice(self._gstage, e).copy_(value_or_grad, non_blocking=True)
                staged.append(e)
            elif value_or_grad.data_ptr() != e.gview.data_ptr():
                e.gview.copy_(value_or_grad)
        if staged:
            self._sync()
            for e in staged:
                e.gview.copy_(self._slice(self._gstage, e))
        for e in self._entries:
            factor = n if e.kind == "buffer" else scale
            if factor != 1:
                e.gview.mul_(factor)
        self._push_rows(core_step, scale)
        core_step.handoff_s += time.perf_counter() - start
        core_step.push(None if value is None else value * scale)

    @staticmethod
    def _check_shape(core, e, value_or_grad):
        if tuple(value_or_grad.shape) != e.shape:
            what = "value" if e.kind == "buffer" else "gradient"
            raise core._error(f"the {what} of {e.name!r} has shape "
                              f"{list(value_or_grad.shape)} where the layout has "
                              f"{list(e.shape)}")

    def _evaluate(self, core):
        self._attach(grads=False)
        training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                result = self._evaluate_fn(self.model)
        finally:
            self.model.train(training)
        samples, extra = self.test_samples, {}
        if isinstance(result, dict):
            loss, accuracy = result.get("loss"), result.get("accuracy")
            samples = result.get("samples", samples)
            extra = {k: result[k] for k in ("auc", "log_loss") if k in result}
        elif isinstance(result, (tuple, list)) and len(result) == 2:
            loss, accuracy = result
        else:
            raise CoachError(f"evaluate returned {result!r:.60}: give (mean_loss, accuracy) or "
                             "{'loss': ..., 'accuracy': ...}")
        loss, accuracy = coach._number(loss), coach._number(accuracy)
        samples = coach._count(samples)
        if loss is None or accuracy is None or not 0 <= accuracy <= 1 or not samples:
            raise CoachError(f"evaluate returned {result!r:.80}: give the mean loss (a finite "
                             "number) and the accuracy in [0, 1]")
        return loss * samples, round(accuracy * samples), samples, extra


def init(model, samples, evaluate=None, test_samples=0, loss_reduction="mean", lookups=None):
    """Connects `model` (a torch.nn.Module) to Coach and returns its Job.

    samples: the training set's size N (step indices lie in [0, N)). evaluate(model) ->
    (mean_loss, accuracy) or {"loss", "accuracy", optional "samples"} over the test set of
    test_samples (> 0 with evaluate), run under model.eval() and torch.no_grad().
    loss_reduction: "mean" (the pushed loss is the batch's mean: gradients are multiplied by the
    samples) or "sum". In the job's first process the model's values are the initial ones.
    lookups(indices) -> {Embedding: ids}: for a model with coach.torch.Embedding tables, each
    table's ids that the training samples `indices` (an int64 NumPy array) look up (an integer
    tensor or array of any shape; repeats allowed); a table it leaves out looks up nothing.
    Raises CoachError (one line); exits 1 when Coach refuses the layout.
    """
    if loss_reduction not in ("mean", "sum"):
        raise CoachError(f"loss_reduction {loss_reduction!r:.40}: give 'mean' or 'sum'")
    if not isinstance(model, torch.nn.Module):
        raise CoachError(f"model is a {type(model).__name__}: give a torch.nn.Module")
    entries = _entries(model)
    tables = _tables(model)
    if tables and lookups is None:
        raise CoachError(f"the model has Embedding tables ({tables[0][0]!r}...): give "
                         "init(..., lookups=fn), fn(indices) -> {embedding: ids}")
    if lookups is not None and not tables:
        raise CoachError("lookups is for a model with coach.torch.Embedding tables; this has none")
    holder = []

    def table_ids(indices):
        got = lookups(indices)
        if not isinstance(got, dict):
            raise CoachError(f"lookups returned {type(got).__name__}: give {{embedding: ids}}")
        known = {id(emb) for _, emb in tables}
        for emb in got:
            if id(emb) not in known:
                raise CoachError(f"lookups returned a key {type(emb).__name__} that is not one "
                                 "of the model's Embedding tables")
        out = []
        for _, emb in tables:
            ids = got.get(emb)
            ids = np.zeros(0, np.int64) if ids is None else (
                ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids))
            out.append(ids)
        return out

    @torch.no_grad()
    def initial(core):
        for e in entries:
            core.param(e.name)[...] = e.tensor().detach().cpu().numpy()

    core = coach.init([(e.name, e.shape, e.kind) for e in entries], samples, initial=initial,
                      evaluate=(lambda core: holder[0]._evaluate(core)) if evaluate else None,
                      test_samples=test_samples, framework=f"torch {torch.__version__}",
                      tables=[(n, e.num_embeddings, e.embedding_dim, e.init_scale)
                              for n, e in tables],
                      lookups=table_ids if tables else None)
    holder.append(Job(core, model, entries, evaluate, loss_reduction, tables))
    return holder[0]
