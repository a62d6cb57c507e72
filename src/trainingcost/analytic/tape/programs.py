"""The programs every rule shares: autograd's step (the default), the optimizer, and the output error.

A tape program replays one training step: ``program(t, g, run)`` with a :class:`~.buffers.Tape`, a
:class:`~.group.Group` and the run's settings (:class:`Run`). A rule declares its program in its spec
(``RuleSpec.tape``): autograd's (:func:`autograd_step`), its own (``tape.py`` beside its ``step.py``), or none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .buffers import BOOL, FLOAT32, INT64, Buf, Tape, bytes_
from .group import Group
from .ops import Ops


@dataclass(frozen=True)
class Run:
    """The settings of a step that change its allocations."""

    optimizer: str  # sgd, momentum, adam
    weight_decay: float = 0.0
    mirror_steps: int = 1  # WM's mirror steps per training step
    feedback_parameters: bool = False  # the rule trains a feedback matrix per weight matrix (KP): a gradient each


# The optimizer (torch's single-tensor loops on CPU): its state tensors per parameter, each a parameter's size, and
# the bytes of its per-tensor scalars (Adam's float32 `step`). memory.py's component model reads them too.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}
STEP_SCALAR_BYTES = {"sgd": 0, "momentum": 0, "adam": 4}


# The optimizer (torch's single-tensor loops on CPU)


def optimizer_step(t: Tape, g: Group, run: Run) -> None:
    """``optimizer.step()`` over every parameter (and trained feedback matrix) with a gradient, in
    ``model.parameters()``'s order. A mixture's expert that held no optimizer state when the step began (no row
    reached it in any step before) gets it here, where torch.optim makes it: AdamW's ``_init_group``, before its loop,
    a float32 ``step`` scalar, ``exp_avg`` and ``exp_avg_sq`` per parameter; SGD with momentum, in its loop,
    ``momentum_buffer`` as a clone of the gradient (after weight decay)."""
    if not (run.optimizer == "adam" or run.weight_decay or run.optimizer == "momentum"):
        return  # plain SGD: p.add_(grad, alpha=-lr) in place, nothing allocated
    parameters = [(bytes_(elements, g.z), owner) for elements, owner in g.parameter_owners(run.feedback_parameters)]
    if g.experts:
        from .moe import held_experts, used_experts

        used, stated = used_experts(g), held_experts(g, "state")
        stepped = [(size, owner is not None and not stated[owner[0]][owner[1]])  # (bytes, state made now)
                   for size, owner in parameters if owner is None or used[owner[0]][owner[1]]]
    else:
        stepped = [(size, False) for size, _ in parameters]
    if run.optimizer == "adam":  # AdamW: decay in place; denom = sqrt(v) / c2 + eps, kept until the next one
        for size, fresh in stepped:
            if fresh:
                t.new(np.full_like(t.live, FLOAT32), "step")
                t.new(size, "exp_avg")
                t.new(size, "exp_avg_sq")
        if t.events is None and stepped:  # the loop's highest point at once: the last denominator, then
            sizes = np.stack([np.broadcast_to(size, t.live.shape) for size, _ in stepped])  # this parameter's root and denominator (below)
            before = np.concatenate([np.zeros_like(sizes[:1]), sizes[:-1]])
            t.drop(t.new((before + 2 * sizes).max(axis=0), "sqrt, div"))
            return
        previous = None
        for size, _ in stepped:
            root = t.new(size, "sqrt")
            denom = t.new(size, "div")
            t.drop(root, previous)
            previous = denom
        t.drop(previous)
    elif run.weight_decay or run.optimizer == "momentum":
        for size, fresh in stepped:  # grad = grad + wd * param, one parameter at a time; a first momentum buffer
            decayed = t.new(size, "add") if run.weight_decay else None
            if fresh and run.optimizer == "momentum":
                t.new(size, "clone")  # buf = grad.clone(), kept in the state
            t.drop(decayed)


# ---------------------------------------------------------------------------
# Autograd's step: the program of every rule that declares none of its own


def autograd_step(t: Tape, g: Group, run: Run) -> Ops:
    """BP, FA, KP (and WM before its mirror): the model's forward, the loss, autograd's backward, the optimizer
    (``Backprop.step``). Trained feedback matrices (KP) get a gradient beside each weight's."""
    ops = Ops(t, g, graph=True, kp=run.feedback_parameters)
    with t.in_phase("forward"):
        if g.mtp_depth:  # multi-token prediction: its modules' logits and losses too (tape/mtp.py)
            from .mtp import mtp_loss

            extra: list = []
            logits = ops.forward(extra)
            loss, root = mtp_loss(ops, logits, extra)
            t.drop(logits.buf, *(x.buf for x in extra))
        else:
            logits = ops.forward()
            loss, root = ops.loss(logits)
            t.drop(logits.buf)
    with t.in_phase("backward"):
        seed = t.new(np.full_like(t.live, FLOAT32), "ones_like")
        t.hold(seed)  # the engine keeps the root gradient until the backward ends
        ops.backward([(root, seed)])
        t.drop(seed)
    with t.in_phase("optimizer_step"):
        optimizer_step(t, g, run)
    return ops


def output_error(t: Tape, g: Group) -> Buf:
    """``objective.output_error``: softmax(logits) - onehot(targets) in place on the float32 softmax, in the
    logits' dtype."""
    rows, width = g.out_rows, g.out
    valid = t.new(bytes_(rows, BOOL), "targets != IGNORE")
    if g.z < FLOAT32:
        wide = t.new(bytes_(rows * width, FLOAT32), "to_float32")
        error = t.new(bytes_(rows * width, FLOAT32), "softmax")
        t.drop(wide)
    else:
        error = t.new(bytes_(rows * width, FLOAT32), "softmax")
    index = t.new(bytes_(rows, INT64), "clamp")
    ones = t.new(bytes_(rows, FLOAT32), "valid.to")
    negative = t.new(bytes_(rows, FLOAT32), "neg")
    t.drop(ones, index, negative)
    narrow = t.new(bytes_(rows * width, g.z), "error.to") if g.z < FLOAT32 else None  # return error.to(dtype),
    t.drop(t.new(np.full_like(t.live, INT64), "valid.sum"))  # int(valid.sum())
    if narrow is not None:
        t.drop(error)
        error = narrow
    t.drop(valid)
    return error
