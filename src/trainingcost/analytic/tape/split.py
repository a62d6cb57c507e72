"""A pipeline stage's backward split into input and weight gradients, as the zero-bubble schedules run it.

torch.distributed.pipelining runs a zero-bubble or DualPipe schedule's backward in two actions per micro-batch
(``torch/distributed/pipelining/_backward.py``, torch 2.13): ``stage_backward_input`` (B) asks autograd for the
stage input's gradient alone, with ``retain_graph=True`` and a hook on every node that reads a weight (the
"intermediates": each linear's product, each norm with a gain) that keeps the gradient of that node's output; then
``stage_backward_weight`` (W), one parameter group at a time in the stage's parameter order, asks autograd for the
weights' gradients from those kept gradients, without retaining the graph. What that holds, replayed here:

- B: every node runs for its input gradient only and frees nothing it saved (the graph is retained); a node with
  weights keeps its output's gradient besides. Once B returns, the stage's outputs are detached: the nodes created
  after the last node with weights (the loss's, on the last stage) go, and what they saved with them.
- W: each node with weights, in creation order (the parameters' order, for the blocks of this project's model),
  makes its weights' gradients, then frees what it saved and its output's gradient (``retain_graph=False``, ``del
  param_group["grads"]``). The rest of the graph goes when the last group lets go of it.

The stage replayed is the last one of a pipeline (:func:`last_stage_step`): its input the residual stream after the
embedding (a leaf that requires a gradient), its blocks, the final norm, the head and the loss. A first stage is not
split by torch (its input needs no gradient: the schedule runs its whole backward at W), and a middle stage is the
last one without its head and loss. Checked to the byte against the tensor meter on torch's own functions
(tests/test_split_backward.py) for BP on models whose weights sit in linear layers and LayerNorms (RMSNorm's written-out
form, experts, latent attention and tied tables are refused in one line).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .buffers import FLOAT32, Buf, Tape, bytes_
from .group import Group
from .ops import Ops
from .values import Stream, Value

PHASES = ("forward", "backward_input", "backward_weight")


def supported(g: Group) -> str | None:
    """Why the split backward of ``g``'s stage is not replayed, or None."""
    if g.attention_softcap:
        return "soft-capped attention written out (its keys' gradient read through expand) is not split"
    if g.experts or g.kv_lora_rank or g.mtp_depth:
        return "a mixture of experts, latent attention and multi-token prediction are not split"
    if g.tied or g.shared_table:
        return "a tied table's gradient is not split"
    if g.enc_layers and g.dec_layers:
        return "an encoder-decoder's stages are not split"
    if g.relative:
        return "T5's relative bias (made by the first stage) is not split"
    return None


def split_stage_bytes(configs, dtype_bytes: int) -> dict[str, np.ndarray]:
    """Per configuration of the frame ``configs`` (its blocks as one last pipeline stage; :func:`last_stage_step`),
    beyond the stage's parameters and its received input: ``after_forward`` (a micro-batch between its forward and
    its B), ``after_input`` (between its B and its W: the retained graph, every weight node's output gradient and the
    input's gradient), and the peak of each phase. -1 where the stage is not replayed (:func:`supported`)."""
    from .group import groups

    n = len(configs)
    out = {name: np.full(n, -1, dtype=np.int64) for name in ("after_forward", "after_input", *(f"peak_{p}" for p in PHASES))}
    for rows, key in groups(configs):
        g = Group.of(configs, rows, key, dtype_bytes)
        if supported(g):
            continue
        t = Tape(np.zeros(len(rows), dtype=np.int64))
        marks: dict = {}
        last_stage_step(t, g, marks)
        out["after_forward"][rows], out["after_input"][rows] = marks["forward"], marks["backward_input"]
        for phase in PHASES:
            out[f"peak_{phase}"][rows] = t.phase_peaks[phase]
    return out


def last_stage_step(t: Tape, g: Group, marks: dict | None = None) -> Ops:
    """The last pipeline stage's step (BP): forward from the stream after the embedding, the loss, B, then W. The
    stage's input is not counted on ``t`` (the caller's start holds it, as the tensor meter's does)."""
    reason = supported(g)
    if reason:
        raise ValueError(f"tape: split backward: {reason}")
    ops = Ops(t, g, graph=True)
    with t.in_phase("forward"):
        s = Stream()
        for kind, stack, index in ops.stages():
            if kind == "embedding":  # the stage's input: the stream as the previous stage sent it
                if stack == "decoder" and s.x is not None:
                    s.memory, s.x = s.x, None
                # (the previous stage's activations, received before the step: counted in the step's start, as the
                # meter counts them, and held by the schedule beyond it)
                received = Buf(bytes_(g.M(stack) * g.d, g.z), "stage input")
                t.hold(received)
                s.x = Value(received, g.M(stack), g.d, True)
                continue
            ops.run_stage(kind, stack, s, branch=index)
        logits = ops.head(s.x)
        s.close(t)
        loss, root = ops.loss(logits)
        t.drop(logits.buf)
    if marks is not None:
        marks["forward"] = t.live.copy()
    with t.in_phase("backward_input"):
        seed = t.new(np.full_like(t.live, FLOAT32), "ones_like")
        t.hold(seed)  # (stage_backward_input's list of output gradients holds it until B returns)
        ops.split = True
        ops.backward([(root, seed)])
        ops.split = False
        last = max((index for index, _ in ops.weight_work), default=-1)
        kept = []
        for index, saved in ops.retained:  # the outputs detached: the nodes above the last one with weights go
            if index > last:
                t.drop(*saved)
            else:
                kept.append(saved)
        t.drop(seed)
    if marks is not None:
        marks["backward_input"] = t.live.copy()
    with t.in_phase("backward_weight"):
        for _, work in sorted(ops.weight_work, key=lambda item: item[0]):
            work()
        for saved in kept:
            t.drop(*saved)
    t.drop(loss)
    return ops


@lru_cache(maxsize=64)
def retained_ratio(cfg, z: int) -> float:
    """What one block keeps between its B and its W over what it keeps after its forward, under torch's split
    (the retained graph, its weight nodes' output gradients), at ``z`` bytes per activation element: the difference
    of two replays of a last stage, of two blocks and of one (one sequence). 1.0 where the split is not replayed."""
    from dataclasses import replace

    from ...config.sweep import configs_frame

    if cfg.enc_layers and cfg.dec_layers:
        return 1.0
    depth = "dec_layers" if cfg.dec_layers else "enc_layers"
    # (the blocks' difference: the head, its table tied or not, cancels out)
    frame = configs_frame([(str(n), replace(cfg, **{depth: n}, batch=1, tie_embeddings=False)) for n in (1, 2)])
    out = split_stage_bytes(frame, z)
    if (out["after_input"] < 0).any():
        return 1.0
    kept = out["after_forward"][1] - out["after_forward"][0]
    held = out["after_input"][1] - out["after_input"][0]
    return float(held / kept) if kept > 0 else 1.0
