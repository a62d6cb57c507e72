"""A mixture of experts on the tape: ``train.model.MixtureOfExperts``, op by op, for the rows each expert gets.

What a mixture allocates depends on its routing: expert ``e`` gathers the ``n_e`` rows routed to it (``x[rows]``),
runs its FFN on them, weights and adds them back (``index_add_``), and ``torch.where`` gives the rows as an
``n_e x 2`` int64 tensor. Shapes alone do not give ``n_e``; a :class:`Routing` does, one call of a mixture at a
time, in call order:

- **token-balanced** (the analytic tables, ``step_peaks`` without a routing): each call routes its ``M`` rows
  (tokens) to ``k`` experts each, ``M k`` rows in all, spread evenly: every expert gets ``floor(M k / E)`` rows
  and the first ``M k mod E`` experts one more. An assumption (docs/cost_models.md): a trained router is near
  balanced, a random one is not;
- **recorded** (a measured step): the rows each expert got in each call of the metered step
  (``train.model.recording_routing``, ``MemoryReading.routing``, the run's ``tensor_routing`` column). Replayed with
  it, the tape equals the tensor meter to the byte (tests/test_moe.py).

An expert no row was routed to runs nothing: no gathered rows, no FFN, no gradient for its weights (``.grad`` stays
None: the optimizer skips it, and WM's mirror too). The steps before the replayed one decide which experts begin it
primed: holding last step's gradient (a row reached them in the step before) and optimizer state (a row reached them
in any step before; momentum, Adam). A recorded routing says which (``MemoryReading.primed``,
``train.model.primed_experts``; :meth:`Routing.held`): the step's start leaves out the others' gradients and state
(``table.unprimed_bytes``), and an expert stepped for the first time gets its state where torch.optim makes it
(``programs.optimizer_step``). Token-balanced, or with a record of only the calls (older runs), every expert is
primed. A mixture's configuration is replayed alone (its own group of
one): a routing's counts are scalars, and which experts run is the same for the whole group.

The forward (``MixtureOfExperts.forward``) and what autograd makes of it:

- the router: a linear layer (no bias), widened to float32 under a narrower dtype (``.float()``: a copy), softmax
  (saves its output), top k (values in float32, int64 indices that its node saves), renormalised (``router_norm``:
  the sum over the k, then a division that saves both), cast back to the model's dtype (a copy);
- ``y = zeros_like(x)``; per expert: ``chosen == e`` (bool, M x k), ``torch.where`` (n_e x 2 int64; rows and slot
  are its columns, views that three nodes save), ``x[rows]`` (its node saves the indices), the FFN,
  ``weights[rows, slot, None]`` (n_e x 1), their product (saves both), ``y.index_add_`` (in place; its node saves
  the indices and the product);
- Qwen-MoE's shared expert on every row: its gate (a linear layer d -> 1, sigmoid, which saves its output), its FFN,
  their product, added to ``y`` (a new tensor);
- backward: an index's gradient is a zero tensor of the source's size and an ``index_put`` (a second one, out of
  place); ``index_add_``'s is the incoming gradient passed on to ``y``, and ``index_select`` for the product; a
  product broadcast over features (n_e x 1, M x 1) sums its factor's gradient after the node (the engine's
  ``sum_to``: a full-size temporary); the division's gradients as torch's ``div_tensor_other_backward`` makes them;
  top k's a zero tensor and a ``scatter``.
"""

from __future__ import annotations

import numpy as np

from .. import layers as L
from .buffers import BOOL, FLOAT32, INT64, bytes_


class Routing:
    """Rows routed to each expert, one call of a mixture at a time, in the step's call order: recorded ``calls``
    ((layer, rows per expert), as ``MemoryReading.routing`` has them; or a record, ``MemoryReading.routing_record``,
    with the experts primed when the step began), or token-balanced (``calls`` None)."""

    def __init__(self, calls=None):
        primed = None
        if isinstance(calls, dict):  # a record (``MemoryReading.routing_record``, the ``tensor_routing`` JSON)
            calls, primed = calls.get("calls"), calls.get("primed")
        self.calls = None if calls is None else [(str(layer), tuple(int(n) for n in counts)) for layer, counts in calls]
        # Per mixture layer, which experts held a gradient ("grad") and optimizer state ("state") when the step began;
        # None (token-balanced, or a record of before it was kept): every expert held both.
        self.primed = None if primed is None else {
            str(layer): {what: [bool(x) for x in flags[what]] for what in ("grad", "state")}
            for layer, flags in primed.items()}
        self.taken = 0

    @staticmethod
    def balanced(rows, k, experts: int) -> list:
        """``rows`` tokens, ``k`` experts each, over ``experts`` experts: ``floor(rows k / E)`` rows per expert, and the
        first ``rows k mod E`` experts one more."""
        total = np.asarray(rows, dtype=np.int64) * np.asarray(k, dtype=np.int64)
        order = np.arange(experts).reshape((experts,) + (1,) * total.ndim)
        return list(total // experts + (order < total % experts))

    def next(self, g, rows) -> list:
        """The rows of each expert in the next call (arrays over the group)."""
        if self.calls is None:
            return self.balanced(rows, g.k, g.expert_count)
        if self.taken >= len(self.calls):
            raise ValueError(f"routing: the step calls a mixture of experts more than the {len(self.calls)} times recorded")
        layer, counts = self.calls[self.taken]
        self.taken += 1
        if len(counts) != g.expert_count:
            raise ValueError(f"routing: {layer} has {len(counts)} experts recorded, the model {g.expert_count}")
        return [np.broadcast_to(np.int64(n), np.shape(rows)) for n in counts]

    def used(self, g, layer: str, rows) -> list[bool]:
        """Whether each expert of ``layer`` got rows in the step's forward (else it has no gradient): the layer's first
        call (TP's and DTP's reruns without a graph come after)."""
        if self.calls is None:
            return [bool(np.all(n > 0)) for n in self.balanced(rows, g.k, g.expert_count)]
        first = next((counts for name, counts in self.calls if name == layer), None)
        return [True] * g.expert_count if first is None else [n > 0 for n in first]

    def held(self, g, layer: str, what: str) -> list[bool]:
        """Whether each expert of ``layer`` held ``what`` ("grad": last step's gradient; "state": optimizer state)
        when the step began: as recorded, or (token-balanced, no record) every one."""
        flags = (self.primed or {}).get(layer, {}).get(what)
        if flags is None:
            return [True] * g.expert_count
        if len(flags) != g.expert_count:
            raise ValueError(f"routing: {layer} has {len(flags)} experts primed, the model {g.expert_count}")
        return list(flags)

    def rows(self, g, layer: str, rows) -> list:
        """The rows each expert of ``layer`` saw last in the step (WM's mirror drives each matrix with as many)."""
        if self.calls is None:
            return self.balanced(rows, g.k, g.expert_count)
        last = [counts for name, counts in self.calls if name == layer]
        return list(last[-1]) if last else self.balanced(rows, g.k, g.expert_count)

    def check_consumed(self) -> None:
        if self.calls is not None and self.taken != len(self.calls):
            raise ValueError(f"routing: {len(self.calls)} calls recorded, the tape replayed {self.taken}")


def moe_layers(g) -> list[tuple[str, str]]:
    """(layer name, stack) of every mixture of the model, in ``model.parameters()``'s order."""
    out = []
    blocks = [(stack, index, stack) for stack in g.stacks for index in range(g.depth[stack]) if g.block_moe(index)]
    blocks += [(L.MTP, k, "decoder") for k in range(g.mtp_depth)]  # (multi-token prediction's, after the head)
    for name, index, stack in blocks:  # (a mixture's dense first blocks have none)
        for sub in L.block_sublayers(g.arch, stack, g.pre, g.parallel, True):
            if L.KINDS[sub.kind].family == "moe":
                out.append((L.block_layer_name(name, index, sub.name), stack))
    return out


def used_experts(g) -> dict[str, list[bool]]:
    """Per mixture layer, whether each expert runs in the step (has a gradient)."""
    routing = g.routing if g.routing is not None else Routing()
    return {layer: routing.used(g, layer, g.M(stack)) for layer, stack in moe_layers(g)}


def held_experts(g, what: str) -> dict[str, list[bool]]:
    """Per mixture layer, whether each expert held ``what`` ("grad", "state") when the step began."""
    routing = g.routing if g.routing is not None else Routing()
    return {layer: routing.held(g, layer, what) for layer, _ in moe_layers(g)}


def mixture(ops, x):
    """``MixtureOfExperts.forward`` on ``x`` (its rows: the tokens), with the next call's routing; returns ``y``."""
    g, t = ops.g, ops.t
    z, f = g.z, FLOAT32
    M, E, k, d = x.rows, g.expert_count, g.k, g.d
    wide = z < FLOAT32
    counts = (g.routing if g.routing is not None else Routing()).next(g, M)
    reshaped = type(x)(x.buf, M, d, False)  # x.reshape(-1, d): a view, whose node gathers x's gradients inside
    t.hold(x.buf)
    x = _passing(ops, reshaped, x)

    # route(x): chosen [M, k] int64, weights [M, k] in the model's dtype
    logits = ops.linear(x, E, "router", bias=False)
    wide_logits = logits
    if wide:  # .float(): a copy
        wide_logits = ops.derivative(ops.value(M, E, "router.float", f), [logits], [], [(logits.buf.nbytes, "_to_copy")])
        t.drop(logits.buf)
    probabilities = ops.value(M, E, "softmax", f)
    probabilities = ops.derivative(probabilities, [wide_logits], [probabilities.buf],
                                   [(bytes_(M * E, f), "_softmax_backward_data")])
    t.drop(wide_logits.buf)
    values = ops.value(M, k, "topk", f)
    chosen = t.new(bytes_(M * k, INT64), "topk indices")
    values = ops.derivative(values, [probabilities], [chosen],
                            [(bytes_(M * E, f), "new_zeros"), (bytes_(M * E, f), "scatter")])
    weights = values
    if g.router_norm:
        total = ops.value(M, 1, "sum", f)
        total = _passing(ops, total, values)  # sum's backward: the gradient expanded (a view)
        weights = ops.value(M, k, "div", f)
        if values.tracked:
            ops._node(weights, _div_backward(ops, values, total, M, k), [values.buf, total.buf])
        t.drop(total.buf, values.buf)  # (weights = weights / ...: the top k's values go with the rebinding)
    returned = weights
    if wide:  # .to(x.dtype): a copy
        returned = ops.derivative(ops.value(M, k, "weights.to", z), [weights], [], [(bytes_(M * k, f), "_to_copy")])
    t.drop(probabilities.buf, weights.buf if weights is not returned else None)  # route returns: its locals go
    weights = returned

    # the experts, each on its rows; a run of experts with the same rows, fast-forwarded (_runs, _skipped)
    state = {"y": ops.value(M, d, "zeros_like"), "where": None}

    def expert(e):
        n = counts[e]
        mask = t.new(bytes_(M * k, BOOL), "chosen == e")
        found = t.new(bytes_(n * 2, INT64), "nonzero") if np.any(n > 0) else None  # rows, slot: its columns
        t.drop(mask, state["where"])
        state["where"] = found
        if not np.any(n > 0):
            return
        gathered = _index(ops, x, n, d, found, M * d, "x[rows]")
        hidden = _ffn(ops, gathered, g.ff, n)
        t.drop(gathered.buf)
        weight = _index(ops, weights, n, 1, found, M * k, "weights[rows, slot]")
        product = _broadcast_mul(ops, hidden, weight, n, d)
        t.drop(hidden.buf, weight.buf)
        state["y"] = _index_add(ops, state["y"], product, n, d, found)
        t.drop(product.buf)

    for first, last in _runs(counts):
        if FAST_FORWARD and last - first >= 4 and t.events is None and np.all(counts[first] > 0):
            _skipped(ops, expert, first, last)
        else:
            for e in range(first, last + 1):
                expert(e)
    y, where = state["y"], state["where"]
    if g.shared_expert:  # y + sigmoid(gate(x)) * shared_expert(x), or (DeepSeek-MoE, ungated) y + shared_expert(x)
        if g.shared_expert_gate:
            gate = ops.linear(x, 1, "shared_expert_gate", bias=False)
            sigmoid = ops.value(M, 1, "sigmoid")
            sigmoid = ops.derivative(sigmoid, [gate], [sigmoid.buf], [(bytes_(M, z), "sigmoid_backward")])
            t.drop(gate.buf)
        shared = _ffn(ops, x, g.sff, M)
        if g.shared_expert_gate:
            product = _broadcast_mul(ops, shared, sigmoid, M, d, broadcast_first=True)
            t.drop(shared.buf, sigmoid.buf)
            shared = product
        out = ops.add(y, shared)
        t.drop(y.buf, shared.buf)
        y = out
    t.drop(x.buf, where, chosen, weights.buf)  # forward's locals go when it returns
    return _output_view(ops, y)


# Replay a run of experts that get the same rows by its two first and two last experts only (exact; tests/test_moe.py
# checks it against the expert-by-expert replay under every rule). Such experts run the same ops, so expert j of
# the run starts with L + j D bytes alive (D: what one expert's forward leaves, its saved tensors) and reaches
# L + j D + f(t) inside: over the run the maximum, of the step and of each phase, is at its first or its last
# expert. The middle experts change the bytes alive by D each and are not replayed: the tape shifts by their
# count times D, measured on the run's second expert (the first of the mixture drops no earlier indices), and
# their backward, which autograd runs between the last two experts' and the first two's, shifts by their count
# times what the second-to-last expert's backward left (the last expert of a mixture gets the first gradient of
# its input, and of the routing weights, which later ones add to). A token-balanced mixture has two such runs
# (Routing.balanced): 128 experts replay as 8.
FAST_FORWARD = True


class _Mark:
    """The output of a bookkeeping node (nothing flows into it)."""

    __slots__ = ("grad",)

    def __init__(self):
        self.grad = None


def _runs(counts) -> list[tuple[int, int]]:
    """(first, last) of each run of consecutive experts that get the same rows."""
    out, first = [], 0
    for e in range(1, len(counts) + 1):
        if e == len(counts) or not np.array_equal(counts[e], counts[first]):
            out.append((first, e - 1))
            first = e
    return out


def _skipped(ops, expert, first: int, last: int) -> None:
    """Experts ``first`` to ``last`` (at least five, the same rows each), the middle ones fast-forwarded."""
    t = ops.t
    middle = last - first - 3
    expert(first)
    before = t.live
    expert(first + 1)
    t.live = t.live + middle * (t.live - before)  # (no event: the peaks are reached by the experts replayed)
    backward = {}
    if ops.graph:
        def skipped(grad, saved):
            t.live = t.live + middle * (backward["after"] - backward["before"])

        ops.nodes.append((_Mark(), skipped, ()))
        # run after the second-to-last expert's backward, then before it (autograd runs the nodes last first)
        ops.nodes.append((_Mark(), lambda grad, saved: backward.__setitem__("after", t.live), ()))
    expert(last - 1)
    if ops.graph:
        ops.nodes.append((_Mark(), lambda grad, saved: backward.__setitem__("before", t.live), ()))
    expert(last)


def _passing(ops, out, x):
    """A node whose backward hands its gradient on as it is (a view, an expand)."""
    def backward(grad, saved):
        ops.deliver(x, grad)

    return ops._node(out, backward) if x.tracked else out


def _output_view(ops, y):
    """``y.view(shape)``: its backward reshapes the gradient, a view but for an expanded one (DFA's per-sequence error
    through a pre-LN residual), which it copies."""
    t = ops.t
    t.hold(y.buf)
    out = type(y)(y.buf, y.rows, y.width, False)
    t.drop(y.buf)

    def backward(grad, saved):
        if grad is not None and grad.expanded:
            copied = t.new(y.buf.nbytes, "reshape")
            t.drop(grad)
            grad = copied
        ops.deliver(y, grad)

    return ops._node(out, backward) if y.tracked else out


def _index(ops, source, n, width, where, source_elements, label: str):
    """``source[rows]`` (or ``weights[rows, slot, None]``): n rows; its node saves the indices; its backward makes a
    zero tensor of the source's size and ``index_put`` (out of place)."""
    out = ops.value(n, width, label)
    if not source.tracked:
        return out
    size = bytes_(source_elements, ops.g.z)
    return ops.derivative(out, [source], [where], [(size, "new_zeros"), (size, "index_put")])


def _ffn(ops, x, width, rows):
    """An expert's ``FeedForward`` (``width`` wide) on ``x``: ``Ops.up`` and the down matrix, any width."""
    g, t = ops.g, ops.t
    bias = g.out_bias
    if g.gated:
        pre = ops.linear(x, width, "expert.gate", bias=bias)
        act = ops.activation(pre)
        t.drop(pre.buf)
        u = ops.linear(x, width, "expert.up", bias=bias)
        hidden = ops.mul(act, u)
        t.drop(act.buf, u.buf)
    else:
        u = ops.linear(x, width, "expert.up", bias=bias)
        hidden = ops.activation(u, saves_output=g.relu)
        t.drop(u.buf)
    out = ops.linear(hidden, g.d, "expert.down", bias=bias)
    t.drop(hidden.buf)
    return out


def _broadcast_mul(ops, full, column, rows, width, broadcast_first: bool = False):
    """``full * column`` (``column`` rows x 1, broadcast over features; ``broadcast_first``: written column * full).
    The node saves both; its backward makes both factors' products (``grad * other``, the column's full-size), then
    the engine sums the column's over features (``sum_to``) and frees the full-size one."""
    g, t = ops.g, ops.t
    out = ops.value(rows, width, "mul")
    big, small = bytes_(rows * width, g.z), bytes_(rows, g.z)

    def backward(grad, saved):
        made = [t.new(big, "mul"), t.new(big, "mul")]  # (self's, then other's)
        column_full = made[0] if broadcast_first else made[1]
        full_grad = made[1] if broadcast_first else made[0]
        column_grad = t.new(small, "sum")
        t.drop(column_full)
        ops.release(grad, saved)
        ops.deliver(full, full_grad)
        ops.deliver(column, column_grad)

    if not (full.tracked or column.tracked):
        return out
    return ops._node(out, backward, [full.buf, column.buf])


def _index_add(ops, y, product, n, width, where):
    """``y.index_add_(0, rows, product)``: in place (``y``'s storage); the node saves the indices and the product; its
    backward hands the gradient on to ``y`` and makes the product's (``index_select``)."""
    t = ops.t
    t.hold(y.buf)
    out = type(y)(y.buf, y.rows, y.width, False)
    t.drop(y.buf)
    if not product.tracked:
        return out

    def backward(grad, saved):
        selected = t.new(bytes_(n * width, ops.g.z), "index_select")
        t.drop(*saved)
        ops.deliver(y, grad)
        ops.deliver(product, selected)

    return ops._node(out, backward, [where, product.buf])


def _div_backward(ops, values, total, M, k):
    """``values / total`` (``total`` M x 1): torch's div_tensor_other_backward, -grad * ((self / other) / other), then
    the self's gradient, grad / other; the engine then sums the other's over the k (``sum_to``; not for k = 1). One
    configuration at a time (``k`` of one value)."""
    t, f = ops.t, FLOAT32

    def backward(grad, saved):
        size = bytes_(M * k, f)
        temporaries = [t.new(size, "div"), t.new(size, "div"), t.new(size, "neg")]
        other_full = t.new(size, "mul")
        t.drop(*temporaries)
        self_grad = t.new(size, "div")
        if np.all(k > 1):  # the other's gradient summed over the k to its own size (k = 1: it has it)
            other_grad = t.new(bytes_(M, f), "sum")
            t.drop(other_full)
        else:
            other_grad = other_full
        ops.release(grad, saved)
        ops.deliver(values, self_grad)
        ops.deliver(total, other_grad)

    return backward
