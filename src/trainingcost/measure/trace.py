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
  replays with real tensors of the same layout (:mod:`trainingcost.findings.calibration`).

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
TRACE_COLUMNS = ["layer", "phase", "timed_phase", "op", "cls", "count", "flops", "bytes_read", "bytes_written", "signature"]


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
        self.records[(layer, phase, self.timed_phase, str(func), cls, flops, read, written, signature(args, kwargs))] += 1
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
            with meter:
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
