"""WM's step on the executed memory tape (``analytic/tape``): autograd's step, then the mirror's allocations."""

from __future__ import annotations

import numpy as np

from ...analytic import layers as L
from ...analytic.tape import FLOAT32, Group, Run, Tape, autograd_step, bytes_
from ...analytic.tape.moe import Routing


def mirror(t: Tape, g: Group, steps: int) -> None:
    """WM's mirror steps (``WeightMirror.mirror``): per weight matrix, float32 noise x (cast to the dtype),
    y = x Wᵀ, B += yᵀx, and B rescaled by its norm accumulated in float64; x and y live until the next matrix
    replaces them."""
    seen = {"encoder": g.M("encoder") if "encoder" in g.stacks else None, "decoder": g.M("decoder") if "decoder" in g.stacks else None}
    rows = []  # rows each weight matrix saw in the step, in the order of model.linears()
    routing = g.routing if g.routing is not None else Routing()
    for stack in g.stacks:
        for index in range(g.depth[stack]):
            for sub in L.block_sublayers(g.arch, stack, g.pre, g.parallel, g.block_moe(index), bool(g.post_norms),
                                         bool(g.kv_lora_rank)):
                family = L.KINDS[sub.kind].family
                if sub.kind == "latent_attention":  # every Linear of it on the block's rows
                    rows += [seen[stack]] * sum(len(shape) == 2 for shape, _ in g.latent_tensors())
                elif family == "attention":
                    source = seen["encoder"] if sub.kind == "cross_attention" else seen[stack]
                    rows += [seen[stack], source, source, seen[stack]]
                elif family == "ffn":
                    rows += [seen[stack]] * (3 if g.gated else 2)
                elif family == "moe":  # the router; each expert its routed rows; the shared expert and its gate
                    routed = routing.rows(g, L.block_layer_name(stack, index, sub.name), seen[stack])
                    rows += [seen[stack]] + [n for n in routed for _ in range(3 if g.gated else 2)]
                    rows += [seen[stack]] * ((3 if g.gated else 2) + g.shared_expert_gate if g.shared_expert else 0)
    rows.append(g.out_rows)
    for _ in range(steps):
        x = y = None
        for (n_in, n_out), r in zip(g.linears(), rows):
            if not np.any(r):  # an expert no row reached: the mirror skips it
                continue
            noise = t.new(bytes_(r * n_in, FLOAT32), "randn")
            if g.z != FLOAT32:
                cast = t.new(bytes_(r * n_in, g.z), "to_dtype")
                t.drop(noise)
                noise = cast
            t.drop(x)
            x = noise
            product = t.new(bytes_(r * n_out, g.z), "y")
            t.drop(y)
            y = product
            t.drop(t.new(bytes_(n_in * n_out, g.z), "ytx"))
            norm = t.new(np.full_like(t.live, 8), "norm")  # vector_norm(B, dtype=float64): no float64 copy of B
            t.drop(t.new(np.full_like(t.live, 8), "ratio"))
            t.drop(norm)
        t.drop(x, y)

def program(t: Tape, g: Group, run: Run) -> None:
    """``WeightMirror.step``: autograd's step, then the mirror steps."""
    autograd_step(t, g, run)
    with t.in_phase("mirror"):
        mirror(t, g, run.mirror_steps)

