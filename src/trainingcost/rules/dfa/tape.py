"""DFA's step on the executed memory tape (``analytic/tape``)."""

from __future__ import annotations

import numpy as np

from ...analytic.tape import FLOAT32, Group, Ops, Run, Tape, Value, bytes_, optimizer_step


def program(t: Tape, g: Group, run: Run) -> None:
    """``DirectFeedbackAlignment.step``: detached segments, the head's backward, B_i e per point, their backward."""
    ops = Ops(t, g, graph=True)
    with t.in_phase("forward"):
        points: list[tuple[str, Value]] = []  # (stack, a stage's output): kept by the step until it returns
        x = memory = last_out = None
        for stack in g.stacks:
            if stack == "decoder" and x is not None:
                memory = x
            elif x is not None:
                t.drop(x.buf)
            out = ops.embed(stack)
            if g.relative is not None:  # stream.position_bias, set by the embedding stage
                bias = ops.relative_bias(stack)
                t.drop(ops.bias.buf if ops.bias is not None else None)
                ops.bias = bias
            points.append((stack, out))
            x = ops.detach(out)
            for index in range(g.depth[stack]):
                out = ops.run_block(stack, x, memory, index=index)
                points.append((stack, out))
                x = ops.detach(out)
            if g.final:  # the final norm ends the last block's segment; the step's local `out` keeps the block's output
                _, out = points.pop()
                t.drop(x.buf)  # stream.x = out, normalised
                normed = ops.norm(out)
                points.append((stack, normed))
                x = ops.detach(normed)
                t.drop(last_out.buf if last_out is not None else None)
                last_out = out
        if g.classifier:
            pooled = ops.value(g.B, g.d, "mean")  # of a detached tensor: no graph
            head_input = Value(pooled.buf, g.B, g.d, True)
        else:
            head_input = ops.detach(x, leaf=True)
        before_head = len(ops.nodes)
        logits = ops.capped_logits(ops.linear(head_input, g.out, "head", bias=g.head_bias, table=True))
        loss, root = ops.loss(logits)
        t.drop(logits.buf)
    with t.in_phase("backward"):
        seed = t.new(np.full_like(t.live, FLOAT32), "ones_like")
        t.hold(seed)
        ops.backward([(root, seed)], since=before_head)
        t.drop(seed)
    # head_input.grad, DFA's error, stays alive to the end of the step
    grads = []
    with t.in_phase("error_projection"):
        for stack, out in points:
            if g.aligned(stack):
                grads.append(t.new(bytes_(g.M(stack) * g.d, g.z), "error @ B"))
                continue
            summed = None if g.classifier else t.new(bytes_(g.B * g.d, g.z), "sum")
            product = t.new(bytes_(g.B * g.d, g.z), "mm")
            grads.append(t.new(bytes_(g.B * g.d, g.z), "div"))
            grads[-1].expanded = True  # (unsqueeze(1).expand_as(out): a view over the positions)
            t.drop(product, summed)
    with t.in_phase("backward"):
        t.hold(*grads)  # the list `grads` keeps them
        ops.backward(list(zip([out for _, out in points], grads)))
    with t.in_phase("optimizer_step"):
        optimizer_step(t, g, run)
    t.drop(last_out.buf if last_out is not None else None, ops.bias.buf if ops.bias is not None else None)
