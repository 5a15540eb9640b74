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

__all__ = ["CoachError", "Job", "Step", "init"]


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

    def push(self, loss):
        """Hands the gradients to Coach. ``loss``: the batch's loss (a one-element tensor or a
        number; the mean over the batch unless init's loss_reduction="sum"; None reports 0).
        Once per step."""
        self._job._push(self._core, loss)

    def __repr__(self):
        return f"Step(step={self.step}, rank={self.rank}, samples={self.samples})"


class Job:
    """The model's connection to Coach, made by ``init``. ``core`` is the coach.Job beneath."""

    def __init__(self, core, model, entries, evaluate, reduction):
        self.core, self.model = core, model
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
            core_step.handoff_s += time.perf_counter() - start
            yield Step(self, core_step)

    def serve(self):
        """Answers evaluations until stop, for a process that never iterates steps()."""
        self.core.serve()

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
        samples = self.test_samples
        if isinstance(result, dict):
            loss, accuracy = result.get("loss"), result.get("accuracy")
            samples = result.get("samples", samples)
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
        return loss * samples, round(accuracy * samples), samples


def init(model, samples, evaluate=None, test_samples=0, loss_reduction="mean"):
    """Connects `model` (a torch.nn.Module) to Coach and returns its Job.

    samples: the training set's size N (step indices lie in [0, N)). evaluate(model) ->
    (mean_loss, accuracy) or {"loss", "accuracy", optional "samples"} over the test set of
    test_samples (> 0 with evaluate), run under model.eval() and torch.no_grad().
    loss_reduction: "mean" (the pushed loss is the batch's mean: gradients are multiplied by the
    samples) or "sum". In the job's first process the model's values are the initial ones.
    Raises CoachError (one line); exits 1 when Coach refuses the layout.
    """
    if loss_reduction not in ("mean", "sum"):
        raise CoachError(f"loss_reduction {loss_reduction!r:.40}: give 'mean' or 'sum'")
    if not isinstance(model, torch.nn.Module):
        raise CoachError(f"model is a {type(model).__name__}: give a torch.nn.Module")
    entries = _entries(model)
    holder = []

    @torch.no_grad()
    def initial(core):
        for e in entries:
            core.param(e.name)[...] = e.tensor().detach().cpu().numpy()

    core = coach.init([(e.name, e.shape, e.kind) for e in entries], samples, initial=initial,
                      evaluate=(lambda core: holder[0]._evaluate(core)) if evaluate else None,
                      test_samples=test_samples, framework=f"torch {torch.__version__}")
    holder.append(Job(core, model, entries, evaluate, loss_reduction))
    return holder[0]
