"""TP's, DTP's and LRA's step on the executed memory tape (``analytic/tape``): :class:`.step.TargetRule`'s step.

The step (``TargetRule.step``), allocation by allocation:

- ``forward``: the units (``forward_units``): each stack's embedding and blocks, each unit run from a detached
  input, the unit keeping its output (with its graph) and its input (``below``), the runners keeping the encoder
  output and the stack's relative bias; a pre-LN stack's final norm ends its last block's unit; the head on a
  detached copy of the top unit's output (TP, DTP: a leaf that requires its gradient), and the loss;
- ``backward``: the loss's backward through the head only (LRA: ``logits.retain_grad()``, a copy of the
  logits' gradient); outside any phase, the count of the loss's terms and (LRA) the output error
  ``logits.grad * terms``; the logits go;
- ``target_propagation``: the top unit's error (TP, DTP: ``eta R dL/dh_L``; LRA: ``beta e E_head``), an
  encoder-decoder's encoder top error spread from the decoder's bottom (a mean over target positions,
  expanded), then each unit's error from the one above (:func:`down`);
- ``feedback_update``: TP, DTP: per block, a noisy input, the block (and its final norm) rerun without a graph,
  the inverse's two gradients; LRA: per block, its error weights' gradient, then ``E_head``'s (a scaled copy
  of the head's weight gradient);
- ``backward``: every unit's local loss at once (each error divided by its mean's divisor: a new tensor per
  unit, alive until the call returns), as DFA's step runs it;
- ``optimizer_step``: the model's parameters, then the feedback parameters (a second group, no weight decay).

A matrix product of an expanded error (a per-sequence error over positions) folds it to rows first: a copy, but
for a batch of one sequence (a view).
"""

from __future__ import annotations

import numpy as np

from ...analytic.tape import BOOL, FLOAT32, INT64, Buf, Group, Ops, Run, Tape, Value, bytes_
from ...analytic.tape.programs import optimizer_step


class Error:
    """A unit's error: its storage, rows x d, and whether it is a per-sequence error expanded over positions."""

    __slots__ = ("buf", "rows", "expanded")

    def __init__(self, buf: Buf, rows, expanded: bool = False):
        self.buf, self.rows, self.expanded = buf, rows, expanded


class Unit:
    """A unit on the tape: its output (with its graph), its input and what its runner keeps (the stream's memory
    and relative bias)."""

    __slots__ = ("stack", "output", "below", "memory", "bias", "index")

    def __init__(self, stack: str, output: Value, below: Value | None = None, index: int | None = None):
        self.stack, self.output, self.below, self.memory, self.bias = stack, output, below, None, None
        self.index = index  # the block's (a mixture's first blocks are dense)


def forward_units(t: Tape, g: Group, ops: Ops, head_input_grad: bool):
    """``forward_units``: the units per stack, the head's input and the logits (with the nodes made before the
    head, so that the loss's backward runs the head's only)."""
    units: dict[str, list[Unit]] = {}
    x: Value | None = None  # stream.x: a detached reference to the last unit's output
    memory: Value | None = None  # stream.memory
    stream_bias: Value | None = None  # stream.position_bias
    for kind, stack, index in ops.stages():
        if kind == "embedding":
            if stack == "decoder" and x is not None:
                memory, x = x, None  # s.memory = s.x, then s.x rebound: the reference moves
            t.drop(x.buf if x is not None else None)
            out = ops.embed(stack)
            if g.relative is not None:
                bias = ops.relative_bias(stack)
                t.drop(stream_bias.buf if stream_bias is not None else None)
                stream_bias = bias
            units.setdefault(stack, []).append(Unit(stack, out))
            x = ops.detach(out)  # stream.x = stream.x.detach(): the stream's reference, the unit's
        elif kind == "block":
            t.hold(x.buf)  # below = stream.x
            below = x
            ops.bias = stream_bias
            out = ops.run_block(stack, x, memory, index=index)  # s.x rebound: the stream's reference to the input goes
            unit = Unit(stack, out, below, index)
            unit.memory, unit.bias = memory, stream_bias
            for kept in (memory, stream_bias):  # the unit's runner keeps the stream's memory and bias
                t.hold(kept.buf if kept is not None else None)
            units[stack].append(unit)
            x = ops.detach(out)
        else:  # the stack's final norm ends the last block's unit
            last = units[stack][-1]
            t.drop(x.buf)  # stream.x = last.output (the same storage)
            normed = ops.norm(last.output)
            t.drop(last.output.buf)  # last.output = stream.x
            last.output = normed
            x = ops.detach(normed)
    head_input = Value(x.buf, x.rows, x.width, head_input_grad)  # stream.x.detach().requires_grad_(...)
    t.hold(x.buf)
    before_head = len(ops.nodes)
    if g.classifier:  # model.pool: the mean over positions, a temporary the head's node saves
        pooled = ops.mean_rows(head_input) if head_input_grad else ops.value(g.B, g.d, "mean")
        logits = ops.capped_logits(ops.linear(pooled, g.out, "head", unit=False, bias=g.head_bias, table=True))
        t.drop(pooled.buf)
    else:
        logits = ops.capped_logits(ops.linear(head_input, g.out, "head", unit=False, bias=g.head_bias, table=True))
    for value in (x, memory, stream_bias):  # forward_units returns: its stream goes
        t.drop(value.buf if value is not None else None)
    return units, head_input, logits, before_head


def target_program(t: Tape, g: Group, run: Run, rule: str) -> None:
    """The step of ``rule`` (``"tp"``, ``"dtp"`` or ``"lra"``)."""
    z = g.z
    inverse = rule in ("tp", "dtp")
    ops = Ops(t, g, graph=True)
    with t.in_phase("forward"):
        units, head_input, logits, before_head = forward_units(t, g, ops, head_input_grad=inverse)
        loss, root = ops.loss(logits)
    retained = []
    if not inverse:  # logits.retain_grad(): the gradient reaching the logits is copied before the head's node runs
        for i, (out, backward, saved) in enumerate(ops.nodes):
            if out is logits:
                def copied(grad, saved_, backward=backward):
                    retained.append(t.new(logits.buf.nbytes, "retain_grad"))
                    backward(grad, saved_)

                ops.nodes[i] = (out, copied, saved)
    with t.in_phase("backward"):
        seed = t.new(np.full_like(t.live, FLOAT32), "ones_like")
        t.hold(seed)
        ops.backward([(root, seed)], since=before_head)
        t.drop(seed)
    with t.in_phase(None):  # terms = int((targets != IGNORE).sum()); LRA: output_error = logits.grad * terms
        valid = t.new(bytes_(g.out_rows, BOOL), "targets != IGNORE")
        total = t.new(np.full_like(t.live, INT64), "sum")
        t.drop(valid, total)
        output_error = None if inverse else t.new(logits.buf.nbytes, "logits.grad * terms")
        t.drop(logits.buf, *retained)  # del logits (and its .grad)
    d = g.d
    stacks = list(units)
    errors: dict[int, Error] = {}  # id(unit) -> its error, alive to the end of the step

    def down(upper: Unit, lower: Unit, error: Error) -> Error:
        rows = g.M(lower.stack)
        if rule == "dtp":  # error @ V^T
            return Error(product(error, "e V^T"), rows)
        if rule == "lra":  # beta * (error @ E)
            made = product(error, "e E")
            scaled = t.new(bytes_(rows * d, z), "beta *")
            t.drop(made)
            return Error(scaled, rows)
        # TP: below - ((output - error) @ V^T + c)
        difference = t.new(bytes_(rows * d, z), "output - error")
        made = t.new(bytes_(rows * d, z), "@ V^T")
        t.drop(difference)
        shifted = t.new(bytes_(rows * d, z), "+ c")
        t.drop(made)
        out = t.new(bytes_(rows * d, z), "below -")
        t.drop(shifted)
        return Error(out, rows)

    def fold(error: Error) -> Buf | None:
        """``error.reshape(-1, d)``: an expanded error's rows are a copy, but for one sequence (a view)."""
        return t.new(bytes_(np.where(g.B > 1, error.rows * d, 0), z), "reshape") if error.expanded else None

    def product(error: Error, label: str) -> Buf:
        folded = fold(error)
        out = t.new(bytes_(error.rows * d, z), label)
        t.drop(folded)
        return out

    with t.in_phase("target_propagation"):
        top_stack = stacks[-1]
        if inverse:  # (eta R) * head_input.grad
            top = Error(t.new(bytes_(g.M(top_stack) * d, z), "eta R dL/dh"), g.M(top_stack))
        else:  # beta * (output_error @ E_head), a classifier's expanded over positions
            made = t.new(bytes_(g.out_rows * d, z), "e E_head")
            top = Error(t.new(bytes_(g.out_rows * d, z), "beta *"), g.M(top_stack), expanded=bool(g.classifier))
            t.drop(made)
        previous = None
        for stack in reversed(stacks):
            chain = units[stack]
            if previous is not None:  # spread_to_memory: the decoder's bottom error averaged over its positions
                top = Error(t.new(bytes_(g.B * d, z), "mean"), g.M(stack), expanded=True)
            errors[id(chain[-1])] = top
            for upper, lower in zip(chain[::-1], chain[-2::-1]):
                errors[id(lower)] = down(upper, lower, errors[id(upper)])
            previous = chain
    with t.in_phase("feedback_update"):
        if inverse:
            train_inverses(t, g, units)
        else:
            for stack in stacks:
                for unit in units[stack][1:]:  # gamma * (rows(e)^T @ rows(below))
                    error = errors[id(unit)]
                    folded = fold(error)
                    made = t.new(bytes_(d * d, z), "e^T h")
                    t.drop(folded)
                    t.new(bytes_(d * d, z), "E grad")  # becomes .grad
                    t.drop(made)
            t.new(bytes_(g.out * d, z), "E_head grad")  # gamma * head.weight.grad: becomes .grad
    with t.in_phase("backward"):
        outputs, grads = [], []
        for stack in stacks:
            for unit in units[stack]:
                error = errors[id(unit)]
                grads.append(t.new(bytes_(error.rows * d, z), "e / divisor"))
                outputs.append(unit.output)
        t.hold(*grads)  # the list passed to torch.autograd.backward keeps them until it returns
        ops.backward(list(zip(outputs, grads)))
        t.drop(*grads)
    with t.in_phase("optimizer_step"):
        optimizer_step(t, g, run)
        feedback = Run(run.optimizer)  # the feedback parameters' group: no weight decay
        sizes = ([d * d, d] if inverse else [d * d]) * sum(len(units[s]) - 1 for s in stacks)
        feedback_step(t, g, feedback, sizes + ([] if inverse else [g.out * d]))


def feedback_step(t: Tape, g: Group, run: Run, sizes) -> None:
    """The optimizer over the feedback parameters' group (torch's loop per group: nothing carried over)."""
    if run.optimizer == "adam":
        previous = None
        for size in sizes:
            root = t.new(bytes_(size, g.z), "sqrt")
            denom = t.new(bytes_(size, g.z), "div")
            t.drop(root, previous)
            previous = denom
        t.drop(previous)


def train_inverses(t: Tape, g: Group, units) -> None:
    """``InverseRule.train_feedback``: per block, h + eps (float32 noise cast to the dtype), the block (and its
    stack's final norm) rerun on it without a graph, and the inverse's gradients."""
    z, d = g.z, g.d
    ops = Ops(t, g, graph=False)
    noisy = reconstructed = None
    for stack, chain in units.items():
        last = chain[-1]
        for unit in chain[1:]:
            rows = g.M(stack)
            noise = t.new(bytes_(rows * d, FLOAT32), "randn")
            if z != FLOAT32:
                cast = t.new(bytes_(rows * d, z), "to")
                t.drop(noise)
                noise = cast
            made = ops.value(rows, d, "below + noise")
            t.drop(noise, noisy.buf if noisy is not None else None)
            noisy = made
            memory = unit.memory
            ops.bias = unit.bias  # (it requires a gradient: SDPA's math path, even without a graph)
            t.hold(noisy.buf)  # the runner's stream.x
            out = ops.run_block(stack, noisy, memory, index=unit.index)
            if g.final and unit is last:  # the unit's stages end with the stack's final norm
                normed = ops.norm(out)
                t.drop(out.buf)
                out = normed
            t.drop(reconstructed.buf if reconstructed is not None else None)
            reconstructed = out
            # inverse_gradients: residual = y V^T + c - x; r^T y / R; sum(r) / R
            made = t.new(bytes_(rows * d, z), "y V^T")
            shifted = t.new(bytes_(rows * d, z), "+ c")
            t.drop(made)
            residual = t.new(bytes_(rows * d, z), "- x")
            t.drop(shifted)
            made = t.new(bytes_(d * d, z), "r^T y")
            t.new(bytes_(d * d, z), "V grad")  # becomes .grad
            t.drop(made)
            made = t.new(bytes_(d, z), "sum")
            t.new(bytes_(d, z), "c grad")  # becomes .grad
            t.drop(made, residual)
    t.drop(noisy.buf if noisy is not None else None, reconstructed.buf if reconstructed is not None else None)
