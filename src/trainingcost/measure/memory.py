"""Tensor memory of one training step, per layer and phase, on any device.

:class:`TensorMeter` is a ``TorchDispatchMode`` that follows tensor *storages*: the storage behind every
op's output is counted once, when first seen, and uncounted when it is freed (a weakref finalizer on the
storage). Views and in-place results share a storage and cost nothing more. The storages alive when the
meter starts (parameters, last step's gradients, optimizer state, feedback matrices, the batch) are found
through the garbage collector and counted as the step's starting bytes.

What it reports for the step:

- ``start``: tensor bytes alive when the step begins;
- ``peak``: the most bytes alive at once, the (layer, phase) running then, and the op whose output set it;
- each execution phase's own peak;
- what was alive at the peak: parameters, gradients, feedback matrices (module tensors named ``feedback``,
  a rule's ``feedback`` and ``projection``), optimizer state, other persistent tensors (buffers), and everything else (saved activations and transients of the step).

Why not torch's own tools alone: ``torch.distributed._tools.mem_tracker.MemTracker`` raises
``NotImplementedError`` when a module runs twice in one step (PEPITA's two passes), and the profiler's
memory events (``profile_memory=True``) give allocator sizes without layers or phases. The tests check this
meter against the profiler on BP, where both work, and against hand counts.

The meter sees tensors, not the allocator: CUDA's caching allocator rounds and reserves more
(``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` are recorded beside it on CUDA), and kernel
workspaces that never become tensors (e.g. a fused attention's scratch) are invisible to it.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..train import attribution
from .flops import UNATTRIBUTED, running_layer

CATEGORIES = ("parameters", "gradients", "feedback", "optimizer_state", "other_persistent", "batch", "activations")
FEEDBACK_NAMES = ("feedback", "projection")  # module tensors and rule attributes that hold feedback matrices


def _storage_key(storage: torch.UntypedStorage) -> tuple[int, str]:
    return storage.data_ptr(), str(storage.device)


@dataclass
class MemoryReading:
    """What one metered step held."""

    start: int  # bytes alive when the step began
    peak: int  # most bytes alive at once
    peak_layer: str
    peak_phase: str
    peak_op: str
    end: int  # bytes alive when the step ended
    phase_peaks: dict[str, int] = field(default_factory=dict)  # execution phase -> its own peak
    at_peak: dict[str, int] = field(default_factory=dict)  # category -> bytes alive at the peak
    at_start: dict[str, int] = field(default_factory=dict)  # category -> bytes alive at the start
    # A mixture of experts' routing in the step: (layer, rows routed to each expert) per call, in call order
    # (train.model.recording_routing; set by the recorder). The tape replays the step with it (analytic/tape/moe.py).
    routing: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    # ... and, per mixture layer, which experts held a gradient and optimizer state when the step began
    # (train.model.primed_experts: {layer: {"grad": [bool per expert], "state": [...]}}; set by the recorder).
    primed: dict[str, dict[str, list[bool]]] = field(default_factory=dict)

    def routing_record(self) -> dict | None:
        """What the tape replays a mixture's step with (``memory_table(..., routing=)``) and the run's
        ``tensor_routing`` column holds (as JSON): {"calls": [[layer, rows per expert], ...], "primed": {layer:
        {"grad": [...], "state": [...]}}}; None without a mixture. (A record of only the calls, a list, as older
        runs have it, replays as if every expert were primed.)"""
        if not self.routing:
            return None
        return {"calls": [[layer, list(counts)] for layer, counts in self.routing],
                "primed": {layer: {what: list(flags[what]) for what in ("grad", "state")}
                           for layer, flags in self.primed.items()}}


class TensorMeter(TorchDispatchMode):
    """Live tensor bytes while active; see the module's docstring."""

    def __init__(self):
        super().__init__()
        self.sizes: dict[tuple[int, str], int] = {}  # storage key -> bytes, for every live storage
        self.finalizers: list[weakref.finalize] = []
        self.live = 0
        self.phase: str | None = None  # None outside the rule's phases (zero_grad, the returned loss's detach)
        self.phase_peaks: dict[str, int] = defaultdict(int)
        self.peak = 0
        self.peak_where = (UNATTRIBUTED, "forward", "")  # (layer, phase, op)
        self.peak_keys: frozenset = frozenset()
        self.freed_since_peak: dict[tuple[int, str], int] = {}
        self.start = 0
        self.outside = 0  # bytes alive at the start that the step does not own (not reported)
        self.outside_keys: frozenset = frozenset()
        self.batch_keys: frozenset = frozenset()
        self.at_start: dict[str, int] = {}
        # (+/-, bytes, op, phase) of every counted storage, when a caller sets a list here: to set the executed memory
        # model's tape (analytic/tape, whose Tape.events has the same form) beside the meter, event by event.
        self.events: list[tuple[str, int, str, str | None]] | None = None

    # -- counting ---------------------------------------------------------------------
    def _track(self, tensor: torch.Tensor, op: str = "") -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
            return
        storage = tensor.untyped_storage()
        size = storage.nbytes()
        if size == 0:
            return
        key = _storage_key(storage)
        if key in self.sizes:
            return
        self.sizes[key] = size
        self.live += size
        self.finalizers.append(weakref.finalize(storage, self._free, key))
        if self.events is not None:
            self.events.append(("+", size, op, attribution.current_phase_override() or self.phase))

    def _free(self, key) -> None:
        size = self.sizes.pop(key, None)
        if size is not None:
            self.live -= size
            if self.events is not None:
                self.events.append(("-", size, "", attribution.current_phase_override() or self.phase))
            if key in self.peak_keys:  # still part of the peak's breakdown; the first free is the peak's storage
                self.freed_since_peak.setdefault(key, size)  # (a later storage may reuse the address)

    def begin(self, model: torch.nn.Module | None = None, optimizer=None, persistent=(), batch=()) -> None:
        """Start the step: find every tensor alive now (the garbage collector's view, so that a view of an old
        tensor is never taken for a new one), and set aside those the step does not own (data sets, caches):
        the model's state, the optimizer's, the rule's own tensors and the batch are the step's starting bytes."""
        gc.collect()
        with warnings.catch_warnings():  # isinstance() on some lazy module proxies warns
            warnings.simplefilter("ignore")
            for obj in gc.get_objects():
                try:
                    if isinstance(obj, torch.Tensor):
                        self._track(obj)
                except (ReferenceError, RuntimeError, NotImplementedError):  # a dead proxy; no storage (sparse)
                    continue
        owned = owners(model, optimizer, persistent)
        for tensor in batch:
            if isinstance(tensor, torch.Tensor):
                owned.setdefault(_storage_key(tensor.untyped_storage()), "batch")
        self.batch_keys = frozenset(key for key, category in owned.items() if category == "batch")
        self.at_start = dict.fromkeys(CATEGORIES, 0)
        for key, size in self.sizes.items():
            if key in owned:
                self.at_start[owned[key]] += size
        self.outside = sum(size for key, size in self.sizes.items() if key not in owned)
        self.outside_keys = frozenset(key for key in self.sizes if key not in owned)
        self.start = self.peak = self.live
        self.peak_keys = frozenset(self.sizes)

    @contextmanager
    def in_phase(self, name: str):
        """A rule's phase factory: work inside counts under phase ``name``."""
        previous, self.phase = self.phase, name
        self.phase_peaks[name] = max(self.phase_peaks[name], self.live)
        try:
            yield
        finally:
            self.phase = previous

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            self._track(tensor, func._overloadpacket.__name__)
        phase = attribution.current_phase_override() or self.phase
        if phase is not None and self.live > self.phase_peaks[phase]:
            self.phase_peaks[phase] = self.live
        if self.live > self.peak:
            self.peak = self.live
            self.peak_where = (running_layer(), phase or "forward", str(func._overloadpacket.__name__))
            self.peak_keys = frozenset(self.sizes)
            self.freed_since_peak = {}
        return out

    def __exit__(self, *exc):
        for finalizer in self.finalizers:  # storages that outlive the step no longer report to this meter
            finalizer.detach()
        self.finalizers.clear()
        return super().__exit__(*exc)

    # -- the reading ----------------------------------------------------------------------
    def reading(self, model: torch.nn.Module | None = None, optimizer=None, persistent=()) -> MemoryReading:
        """The step's reading, without the bytes it does not own; the model, optimizer and the rule's own
        tensors sort the bytes alive at the peak."""
        owned = owners(model, optimizer, persistent)
        owned.update(dict.fromkeys(self.batch_keys, "batch"))
        at_peak = dict.fromkeys(CATEGORIES, 0)
        sizes = {**self.sizes, **self.freed_since_peak}
        for key in self.peak_keys - self.outside_keys:
            at_peak[owned.get(key, "activations")] += sizes.get(key, 0)
        layer, phase, op = self.peak_where
        less = self.outside
        return MemoryReading(self.start - less, self.peak - less, layer, phase, op, self.live - less,
                             {name: value - less for name, value in self.phase_peaks.items()}, at_peak,
                             dict(self.at_start))


def owners(model: torch.nn.Module | None, optimizer=None, persistent=()) -> dict[tuple[int, str], str]:
    """Storage key -> category, for the tensors a training step keeps between steps."""
    owned: dict[tuple[int, str], str] = {}

    def claim(tensors, category):
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().nbytes():
                owned.setdefault(_storage_key(tensor.untyped_storage()), category)

    def is_feedback(name: str) -> bool:
        return name.rsplit(".", 1)[-1] in FEEDBACK_NAMES

    rule_owned = persistent if isinstance(persistent, RuleTensors) else RuleTensors([], list(persistent))
    feedback, others = rule_owned.feedback, rule_owned.other
    if model is not None:
        named = [*model.named_parameters(), *model.named_buffers()]
        claim((t for name, t in named if is_feedback(name)), "feedback")  # FA, WM: buffers; KP: parameters
        claim(model.parameters(), "parameters")
        claim((p.grad for p in model.parameters() if p.grad is not None), "gradients")
        claim(model.buffers(), "other_persistent")
    if optimizer is not None:
        claim((v for state in optimizer.state.values() for v in state.values()), "optimizer_state")
    claim(feedback, "feedback")  # DFA's B_i, PEPITA's F; TP's and DTP's inverses, LRA's error weights
    claim((t.grad for t in feedback if t.grad is not None), "gradients")  # (the trained ones: TP, DTP, LRA)
    claim(others, "other_persistent")
    return owned


@dataclass
class RuleTensors:
    feedback: list  # feedback matrices a rule keeps itself (DFA's B_i, PEPITA's F; TP, DTP, LRA: trained ones)
    other: list  # its other tensors (e.g. WM's norms)

    def __iter__(self):  # all of them, as a plain sequence of tensors
        return iter([*self.feedback, *self.other])


def rule_tensors(rule) -> RuleTensors:
    """Tensors a rule keeps as its own attributes, one level into dicts and lists, sorted by attribute name."""
    found = RuleTensors([], [])
    for name, value in vars(rule).items():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        tensors = [item for item in items if isinstance(item, torch.Tensor)]
        (found.feedback if name in FEEDBACK_NAMES else found.other).extend(tensors)
    return found
