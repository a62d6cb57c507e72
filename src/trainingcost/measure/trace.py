"""The operations one training step runs, per (layer, phase), traced without arithmetic.

:func:`trace_step` builds the model and the rule with fake tensors (``FakeTensorMode``: shapes, strides and
dtypes, no storage, no arithmetic), runs one untraced step (the optimizer's state and any lazy feedback come
into being) and then traces the next, steady-state step. Every aten op the step dispatches becomes one record:

- the op, its **class**: ``matmul`` (``mm``, ``addmm``, ``bmm``, ``baddbmm``), ``attention``
  (the fused scaled-dot-product kernels, forward and backward), ``view`` (an op whose output aliases its input:
  no kernel), ``host`` (an op that returns no tensor: a device query, a scalar read) or ``elementwise``
  (every other kernel: pointwise ops, reductions, norms, softmax, copies, the optimizer's updates);
- its **layer and phase**, attributed exactly as the FLOP meter attributes them (:mod:`.flops`: the layer that
  created the running autograd node in the backward, the innermost running layer otherwise; the step's
  execution phase unless the code overrides it), and its ``timed_phase``: the phase a phase timer times it in
  (the execution phase without the override: BP's weight gradients run inside ``backward``), or
  :data:`BETWEEN` outside every phase;
- **FLOPs** with FlopCounterMode's formula where one is registered (the meter's formulas);
- **bytes read and written**: every tensor argument's and every output's ``numel × itemsize`` (0 for views;
  an in-place op reads and writes its target);
- its **signature**: a JSON encoding of its arguments, tensors as (shape, stride, dtype), which a calibration
  replays with real tensors of the same layout (:mod:`trainingcost.findings.calibration`);
- its **host context** (``context``, :data:`HOST_CONTEXTS`), the host work around the op besides its dispatch:
  ``record`` (grad mode on and an input requires grad: autograd records a node), ``engine`` (run by autograd's
  engine in a backward), ``optimizer`` (inside a ``torch.optim`` optimizer's ``step``: its per-tensor Python loop)
  or ``plain`` (the rest: no-grad Python). Host work that is not an op is recorded as ``host`` rows (no
  kernel, no bytes) of pseudo-ops (:data:`HOST_CALLS`): each ``step`` of a torch.optim optimizer
  (:data:`OPTIMIZER_CALL`, the call's fixed overhead, signature the optimizer's class) and the parameter tensors
  it updates (:data:`OPTIMIZER_TENSOR`: torch.optim's per-tensor Python loop on CPU), each ``apply`` of a Python ``torch.autograd.Function``
  (:data:`FUNCTION_APPLY`: the Python node autograd records) and each such node's backward run by the engine
  (:data:`FUNCTION_BACKWARD`). The predictor prices each context's ops and each pseudo-op at the calibration's
  host seconds (:mod:`trainingcost.findings.calibration`, the host micro-steps).

Identical records (same layer, phase, op and signature) are counted, not repeated. A scalar read
(``.item()``, ``float(t)``) returns 1 under the trace: the values are fake, so data-dependent Python
(a loss's row count, WM's norm ratio) proceeds with a placeholder; it never changes which ops run.
"""

from __future__ import annotations

import json
from collections import Counter
from contextlib import contextmanager

import pandas as pd
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd.function import BackwardCFunction
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten

from ..config.training import TrainSpec
from ..train import attribution
from ..train.data import make_task
from ..train.model import Transformer
from ..train.objective import Batch
from ..train.registry import make_rule
from ..train.rule import no_phases
from ..train.run import DTYPES
from .flops import FORMULAS, FlopMeter, LayerHooks, analytic_phase

aten = torch.ops.aten
KERNEL_CLASSES = ("matmul", "attention", "elementwise")  # the classes that launch a kernel
BETWEEN = "between_phases"  # work of a step outside every phase (the step's time includes it)
MATMUL_OPS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm}
TRACE_COLUMNS = ["layer", "phase", "timed_phase", "op", "cls", "count", "flops", "bytes_read", "bytes_written", "signature",
                 "context"]
HOST_CONTEXTS = ("plain", "record", "engine", "optimizer")
OPTIMIZER_CALL = "torch.optim.Optimizer.step"  # a trace row per optimizer step call (class host, no kernel)
OPTIMIZER_TENSOR = "torch.optim.Optimizer.step/tensor"  # counts the parameter tensors (with a gradient) it updates
FUNCTION_APPLY = "torch.autograd.Function.apply"  # per apply of a Python autograd Function (its forward)
FUNCTION_BACKWARD = "torch.autograd.Function.backward"  # per Python Function node the engine runs
HOST_CALLS = (OPTIMIZER_CALL, OPTIMIZER_TENSOR, FUNCTION_APPLY, FUNCTION_BACKWARD)


def host_context(args, kwargs, in_optimizer: bool) -> str:
    """The host work around an op besides its dispatch (:data:`HOST_CONTEXTS`), from inside a dispatch mode."""
    if in_optimizer:
        return "optimizer"
    if torch._C._current_autograd_node() is not None:
        return "engine"
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                       for t in tree_flatten((args, kwargs))[0]):
        return "record"
    return "plain"


@contextmanager
def host_calls(on_optimizer, on_apply):
    """While inside: ``on_optimizer(optimizer)`` as any torch.optim optimizer's ``step`` begins, ``on_optimizer(None)``
    as it ends, and ``on_apply()`` at each ``apply`` of a Python autograd Function."""
    from torch.autograd.function import Function
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    pre = register_optimizer_step_pre_hook(lambda optimizer, *a: on_optimizer(optimizer))
    post = register_optimizer_step_post_hook(lambda *a: on_optimizer(None))
    original = Function.__dict__["apply"]
    apply = original.__func__

    def counted(cls, *args, **kwargs):
        on_apply()
        return apply(cls, *args, **kwargs)

    Function.apply = classmethod(counted)
    try:
        yield
    finally:
        Function.apply = original
        pre.remove()
        post.remove()


def placeholder(tensor: torch.Tensor):
    """What a scalar read of a fake tensor returns (its values are fake; no rule's ops depend on them)."""
    return True if tensor.dtype == torch.bool else 1.0 if tensor.dtype.is_floating_point else 1


def _storages(values) -> set:
    return {t.untyped_storage()._cdata for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor)}


def op_class(func, out, args=(), kwargs=None) -> str:
    packet = func._overloadpacket
    if packet in MATMUL_OPS:
        return "matmul"
    name = packet.__name__
    if "scaled_dot_product" in name or "flash_attention" in name or "efficient_attention" in name:
        return "attention"
    if not any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]):
        return "host"
    if func.is_view or func is aten.lift_fresh.default:
        return "view"
    if not func._schema.is_mutable and _storages(out) & _storages((args, kwargs or {})):
        return "view"  # an output shares an input's storage: an alias such as _unsafe_view, no kernel
    return "elementwise"


def _encode(value):
    """Arguments as JSON: tensors as {"t": [shape, stride, dtype]}, torch enums as strings."""
    if isinstance(value, torch.Tensor):
        return {"t": [list(value.shape), list(value.stride()), str(value.dtype).removeprefix("torch.")]}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"kw": {k: _encode(v) for k, v in value.items()}}
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return {"e": str(value)}
    if isinstance(value, float) and value != value:
        return {"nan": True}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return {"e": str(value)}


def signature(args, kwargs) -> str:
    return json.dumps([_encode(list(args)), _encode(kwargs)], separators=(",", ":"))


def _nbytes(values) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(values)[0] if isinstance(t, torch.Tensor))


class TraceMeter(FlopMeter):
    """The FLOP meter, recording every op with its class, bytes and signature besides the FLOPs."""

    def __init__(self):
        super().__init__()
        self.records: Counter = Counter()
        self.timed_phase = BETWEEN
        self.in_optimizer = 0
        self.python_nodes: set = set()

    def host_call(self, op: str, context: str, what: str = "", count: int = 1) -> None:
        """``count`` calls of a pseudo-op (:data:`HOST_CALLS`) where the step is now (a ``host`` row)."""
        self.records[(self.layer_now(), analytic_phase(self.phase_now()), self.timed_phase, op, "host", 0, 0, 0, what,
                      context)] += count

    def optimizer_call(self, optimizer) -> None:
        """An optimizer's step begins (rows of :data:`OPTIMIZER_CALL` and :data:`OPTIMIZER_TENSOR`) or ends (None)."""
        if optimizer is not None:
            name = type(optimizer).__name__
            self.host_call(OPTIMIZER_CALL, "optimizer", name)
            tensors = sum(p.grad is not None for group in optimizer.param_groups for p in group["params"])
            if tensors:
                self.host_call(OPTIMIZER_TENSOR, "optimizer", name, tensors)
        self.in_optimizer += 1 if optimizer is not None else -1

    def function_apply(self) -> None:
        self.host_call(FUNCTION_APPLY, "record" if torch.is_grad_enabled() else "plain")

    @contextmanager
    def in_phase(self, name: str):
        """The phase factory: besides the FLOP meter's phase, the phase a timer would time the work in."""
        previous, self.timed_phase = self.timed_phase, analytic_phase(name)
        try:
            with super().in_phase(name):
                yield
        finally:
            self.timed_phase = previous

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = placeholder(args[0]) if func is aten._local_scalar_dense.default else func(*args, **kwargs)
        cls = op_class(func, out, args, kwargs)
        formula = FORMULAS.get(func._overloadpacket)
        flops = int(formula(*args, **kwargs, out_val=out)) if formula is not None else 0
        phase = analytic_phase(self.phase_now())
        layer = self.layer_now()
        if flops:
            self.counts[(layer, self.phase_now())] += flops
        if cls in ("view", "host"):
            read = written = 0
        else:
            read, written = _nbytes((args, kwargs)), _nbytes(out)
        context = host_context(args, kwargs, self.in_optimizer > 0)
        node = torch._C._current_autograd_node() if context == "engine" else None
        if isinstance(node, BackwardCFunction) and id(node) not in self.python_nodes:
            self.python_nodes.add(id(node))  # the step's graph lives until the trace ends: ids stay unique
            self.host_call(FUNCTION_BACKWARD, "engine")
        self.records[(layer, phase, self.timed_phase, str(func), cls, flops, read, written, signature(args, kwargs),
                      context)] += 1
        return out

    def phase_now(self) -> str:
        return attribution.current_phase_override() or self.phase

    def frame(self) -> pd.DataFrame:
        keys = [c for c in TRACE_COLUMNS if c != "count"]
        rows = [dict(zip(keys, key), count=n) for key, n in self.records.items()]
        return pd.DataFrame(rows, columns=TRACE_COLUMNS)


def fake_model(spec: TrainSpec, device: torch.device):
    """The spec's model and rule with fake parameters on ``device`` (call inside a FakeTensorMode)."""
    with _disable_current_modes(), torch.device("meta"):
        meta = Transformer(spec.cfg).to(DTYPES[spec.dtype])
    for module in meta.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                fake = torch.empty_strided(p.shape, p.stride(), dtype=p.dtype, device=device)
                module._parameters[name] = torch.nn.Parameter(fake, requires_grad=p.requires_grad)
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = torch.empty_strided(b.shape, b.stride(), dtype=b.dtype, device=device)
    return meta, make_rule(spec.rule, meta, spec.options, seed=spec.seed + 1)


def trace_step(spec: TrainSpec, device: str | torch.device = "cpu") -> pd.DataFrame:
    """The ops of one steady-state training step of ``spec`` on ``device`` (no real tensor is allocated)."""
    device = torch.device(device)
    task = make_task(spec.task, spec.cfg, spec.corpus)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode, _ScalarReads():
        model, rule = fake_model(spec, device)
        batch = task.batch(torch.Generator().manual_seed(spec.seed + 2))
        batch = Batch({stack: mode.from_tensor(ids) for stack, ids in batch.tokens.items()}, mode.from_tensor(batch.targets))
        batch = batch.to(device)
        rule.step(batch, no_phases)  # untraced: the optimizer's state, lazy feedback
        meter = TraceMeter()
        hooks = LayerHooks(model)
        try:
            with meter, host_calls(meter.optimizer_call, meter.function_apply):
                rule.step(batch, meter.in_phase)
        finally:
            hooks.remove()
    return meter.frame()


class _ScalarReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Outside the traced step: a scalar read of a fake tensor returns a placeholder."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return placeholder(args[0]) if func is aten._local_scalar_dense.default else func(*args, **(kwargs or {}))


def class_times(profile: pd.DataFrame, trace: pd.DataFrame, profiled_s: float, step_s: float) -> dict:
    """A profiled step's time per class of work, scaled to the run's median step ``step_s``.

    ``profile``: one row per aten op event of a step that took ``profiled_s`` (``name`` as ``aten::addmm``, its
    ``total_s`` with the ops it calls, and the aten ops it ran ``inside``, ``|``-joined). An event counts where
    the trace sees it: its op is in the run's trace (by overload packet) and it runs inside no op the trace has
    (ops that kernels call internally, such as the ``copy_`` inside ``_to_copy``, belong to their caller). Its
    total time goes to its trace class. ``launch`` is the rest of the median timed step ``step_s``: views,
    composite ops' glue, autograd's nodes, the optimizer's Python, the interpreter between ops. The profiler's own
    overhead (a few microseconds per event) slows the profiled step around the ops, not inside them, so the ops'
    totals stand as they are and the overhead falls out of ``launch``.
    """
    classes = {op.split(".")[1]: cls for op, cls in zip(trace["op"], trace["cls"]) if op.startswith("aten.")}
    seconds = dict.fromkeys(KERNEL_CLASSES, 0.0)
    for name, total, inside in zip(profile["name"], profile["total_s"], profile["inside"]):
        cls = classes.get(name.removeprefix("aten::"))
        if cls in seconds and not any(classes.get(p.removeprefix("aten::")) for p in inside.split("|") if p):
            seconds[cls] += float(total)
    if not profiled_s > 0 or not step_s > 0:
        return {f"measured_{c}_s": float("nan") for c in (*KERNEL_CLASSES, "launch")}
    out = {f"measured_{c}_s": v for c, v in seconds.items()}
    out["measured_launch_s"] = max(step_s - sum(seconds.values()), 0.0)
    return out
