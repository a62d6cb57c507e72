"""PEPITA's step on the executed memory tape (``analytic/tape``); MEMPEPITA's is the same with ``recompute``."""

from __future__ import annotations

import numpy as np

from ...analytic.tape import FLOAT32, Buf, Group, Ops, Run, Stream, Tape, Value, bytes_, optimizer_step, output_error


def pepita_step(t: Tape, g: Group, run: Run, recompute: bool = False) -> None:
    """``Pepita.step`` (``recompute``: MEMPEPITA's): a standard pass without a graph whose unit outputs the
    forward hooks keep (MEMPEPITA: none), the output error, F e per stack, then stage by stage (embedding, each
    sublayer with its add & norm, head) the modulated pass (hooks keep each unit's input and output) and the
    updates, which free them stage by stage."""
    ops = Ops(t, g, graph=False)
    clean: list[Buf] = []  # the standard pass's unit outputs, in order, until their update pops them
    modulated: list[tuple[Value, Value]] = []  # this stage's (input, output) per unit

    def keep_clean(kind, x, out):
        t.hold(out.buf)
        clean.append(out.buf)

    def keep_modulated(kind, x, out):
        t.hold(x.buf, out.buf)
        modulated.append((kind, x, out))

    with t.in_phase("forward"):
        ops.hook = None if recompute else keep_clean
        logits = ops.forward()
        ops.hook = None
        loss, _ = ops.loss(logits)
        error = output_error(t, g)
        t.drop(logits.buf)
    modulation: dict[str, Value] = {}
    with t.in_phase("error_projection"):
        mean = None  # `per_sequence`, a local of Pepita.modulation: alive until it returns
        for stack in g.stacks:
            if g.aligned(stack):
                modulation[stack] = ops.value(g.M(stack), g.d, "e F")
                continue
            if not g.classifier:
                mean = t.new(bytes_(g.B * g.out, g.z), "mean")
            modulation[stack] = ops.value(g.B, g.d, "e F")
        t.drop(mean)
    mod, reference = Stream(), Stream()
    for kind, stack, branch in ops.stages(by="sublayer"):
        if recompute:
            with t.in_phase("forward"):
                ops.hook = keep_clean
                ops.run_stage(kind, stack, reference, branch=branch)
        with t.in_phase("modulated_pass"):
            ops.hook = keep_modulated
            ops.run_stage(kind, stack, mod, modulation[stack] if kind == "embedding" else None, branch)
            ops.hook = None
        with t.in_phase("weight_update"):
            if kind == "embedding":  # Pepita._update_embedding
                # the per-sequence shift, expanded over positions, then flattened: a copy (a local to the end)
                flat = None if g.aligned(stack) else t.new(bytes_(g.M(stack) * g.d, g.z), "shift.reshape")
                grad = t.new(bytes_(g.V * g.d, g.z), "zeros_like")  # becomes .grad ...
                if not ((g.tied or g.shared_table) and ops.table_has_grad):  # ... or, shared, is added into it
                    t.hold(grad)
                ops.table_has_grad = True
                smaller = []  # token types: row 0 gets the shift summed over rows; learned positions: per position
                if g.types is not None:
                    smaller.append((g.types, np.ones_like(g.d)))
                if g.positions == "learned":
                    smaller.append((g.position_rows(stack), g.rows[stack]))
                for table_rows, rows in smaller:
                    new = t.new(bytes_(table_rows * g.d, g.z), "zeros_like")  # becomes the table's .grad
                    t.drop(grad)
                    grad = new
                    t.hold(grad)
                    total = t.new(bytes_(rows * g.d, g.z), "sum")
                    t.drop(t.new(bytes_(rows * g.d, g.z), "mul"), total)
                t.drop(grad, flat)
            for unit, x_mod, h_mod in modulated:
                h = clean.pop(0)
                rows, n_in, n_out = x_mod.rows, x_mod.width, h_mod.width
                diff = t.new(bytes_(rows * n_out, g.z), "h - h_mod")
                if unit == "plain norm":  # no gain, no bias: (y - y_mod) alone, and no update
                    to_drop = []
                elif unit in ("norm", "norm without bias", "rms norm"):
                    if unit != "rms norm":
                        normalised = t.new(bytes_(rows * n_out, g.z), "layer_norm")
                        t.drop(t.new(bytes_(rows, g.z), "mean"), t.new(bytes_(rows, g.z), "rstd"))
                    else:  # F.rms_norm without a weight: the composite of Ops.rms_norm, in float32 for bf16
                        wide = g.z < FLOAT32
                        widened = t.new(bytes_(rows * n_out, FLOAT32), "to_float32") if wide else None
                        square = t.new(bytes_(rows * n_out, FLOAT32), "pow")
                        mean = t.new(bytes_(rows, FLOAT32), "mean")
                        r = t.new(bytes_(rows, FLOAT32), "rsqrt")
                        t.drop(mean, square)
                        normalised = t.new(bytes_(rows * n_out, FLOAT32), "mul")
                        t.drop(widened)
                        if wide:
                            narrow = t.new(bytes_(rows * n_out, g.z), "to")
                            t.drop(normalised)
                            normalised = narrow
                        t.drop(r)
                    product = t.new(bytes_(rows * n_out, g.z), "diff * normalised")
                    total = t.new(bytes_(n_out, g.z), "sum")
                    t.drop(product)
                    t.new(bytes_(n_out, g.z), "grad_gamma")
                    t.drop(total)
                    to_drop = [normalised]
                else:
                    product = t.new(bytes_(n_out * n_in, g.z), "mm")
                    t.new(bytes_(n_out * n_in, g.z), "grad_w")
                    t.drop(product)
                    to_drop = []
                if unit not in ("linear without bias", "rms norm", "plain norm", "norm without bias"):
                    total = t.new(bytes_(n_out, g.z), "sum")
                    t.new(bytes_(n_out, g.z), "grad_b")
                    t.drop(total)
                t.drop(*to_drop, diff, h)
            for _, x_mod, h_mod in modulated:
                t.drop(x_mod.buf, h_mod.buf)
            modulated.clear()
    with t.in_phase("modulated_pass"):
        head_input = ops.value(g.B, g.d, "mean") if g.classifier else ops.detach(mod.x)
    with t.in_phase("weight_update"):
        product = t.new(bytes_(g.out * g.d, g.z), "mm")
        head_grad = t.new(bytes_(g.out * g.d, g.z), "head grad_w")
        t.drop(product)
        if g.tied:  # added into the table's .grad (the embedding's update made it), then freed
            t.drop(head_grad)
        if g.head_bias:
            total = t.new(bytes_(g.out, g.z), "sum")
            t.new(bytes_(g.out, g.z), "head grad_b")
            t.drop(total)
    with t.in_phase("optimizer_step"):
        optimizer_step(t, g, run)


def program(t: Tape, g: Group, run: Run) -> None:
    pepita_step(t, g, run)
