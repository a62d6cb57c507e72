"""The model's ops on a tape: ``train/model.py``'s forward, with or without autograd, and autograd's backward.

Each op allocates what our PyTorch code allocates (its output, what its autograd node saves, its transients)
and frees it when the last reference goes; a node's backward makes its input gradients, releases what it
saved, and hands the gradients on. The block structure comes from :mod:`..layers` (``describe_block``), the
one description the model and the analytic engine read too.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from .buffers import Buf, Tape, bytes_
from .group import Group
from .ops_attention import AttentionOps
from .ops_model import ModelOps
from .ops_norms import NormOps
from .values import Stream, Value  # noqa: F401 - re-exported (tape/__init__.py)


class Ops(AttentionOps, NormOps, ModelOps):
    """The model's ops on a tape. With ``graph`` they record autograd nodes (run by :meth:`backward` in
    reverse order of creation); without, they run as under ``torch.no_grad()``.

    Each op returns a :class:`Value` holding one reference (the caller's variable); ``t.drop(v.buf)``
    is the variable going out of scope. ``feedback``: the linear layers' backward matrix is a trained
    parameter whose gradient is a copy of the weight's (KP). ``hook``: called with (kind, input, output)
    for every linear and LayerNorm output under no_grad (PEPITA's recording hooks).
    """

    def __init__(self, tape: Tape, g: Group, graph: bool = True, kp: bool = False):
        self.t, self.g, self.graph, self.kp = tape, g, graph, kp
        self.nodes: list = []  # (output value, backward function), in order of creation
        self.hook = None
        self.table_has_grad = False  # a tied table's first gradient becomes its .grad; later ones are added to it
        self.run = self.table_run = 0  # which backward call is running; which one made the table's .grad
        self.shared_grads: dict = {}  # a parameter several modules read (multi-token prediction's heads): its .grad
        # A split backward (torch.distributed.pipelining's stage_backward_input, then stage_backward_weight; tape/split.py):
        # while ``split``, nodes compute input gradients only and keep what they saved (retain_graph=True); a node with
        # weights keeps its output's gradient too and leaves its weights' gradients to ``weight_work`` (its creation
        # index, the work); ``retained``: (creation index, saved) of the other nodes, freed with the graph.
        self.split = False
        self.weight_work: list = []
        self.retained: list = []
        self.current = 0  # the creation index of the node running

    def table_grad(self, phase: str | None = None, label: str = "table grad", then=None, pending: list | None = None) -> None:
        """The gradient of the V x d table (an embedding's, or a tied head's weight): its own ``.grad``, or, tied,
        the first becomes the shared ``.grad`` and each later one is made, added in place, and freed."""
        if not (self.g.tied or self.g.shared_table or self.g.mtp_depth) or not self.table_has_grad:
            self.table_buf = self.param_grad(self.g.V * self.g.d, phase, label)
            self.table_has_grad, self.table_run = True, self.run
            if then is not None:
                then()
            return
        size = bytes_(self.g.V * self.g.d, self.g.z)
        with (self.t.in_phase(phase) if phase is not None else nullcontext()):
            new = self.t.new(size, label)
            if then is not None:  # the node releases its inputs before the engine accumulates its output
                then()
            if self.table_run == self.run:  # two gradients in one backward: the engine sums them out of place
                def accumulate():  # (``pending``: once the node has released its inputs, outside its phase)
                    total = self.t.new(size, "add")
                    self.t.drop(new, self.table_buf)
                    self.table_buf = total

                if pending is not None:
                    pending.append(accumulate)
                else:
                    accumulate()
            else:  # .grad from an earlier backward: AccumulateGrad adds in place
                self.t.drop(new)

    def shared_grad(self, key: str, elements, phase: str | None, label: str, pending: list) -> None:
        """The gradient of a parameter several modules read (the head's weight and bias, read by multi-token
        prediction's heads too): the first becomes its ``.grad``; a later one is made, and once its node has
        released what it saved (``pending``, run by the caller), the engine sums the two out of place."""
        made = self.param_grad(elements, phase, label)
        if key not in self.shared_grads:
            self.shared_grads[key] = made
            return

        def accumulate():
            total = self.t.new(made.nbytes, "add")
            self.t.drop(made, self.shared_grads[key])
            self.shared_grads[key] = total

        pending.append(accumulate)

    # -- autograd ------------------------------------------------------------------------
    def _node(self, out: Value, backward, saved=()) -> Value:
        if self.graph:
            self.t.hold(*saved)
            out.tracked = True
            self.nodes.append((out, backward, saved))
        return out

    def deliver(self, value: Value, grad: Buf | None) -> None:
        """Hand ``grad`` (its reference is transferred) to ``value``; a second gradient is summed out of place."""
        if grad is None:
            return
        if not value.tracked:
            self.t.drop(grad)
        elif value.grad is None:
            value.grad = grad
        else:
            total = self.t.new(value.buf.nbytes, "accumulate")
            self.t.drop(value.grad, grad)
            value.grad = total

    def backward(self, seeds: list[tuple[Value, Buf]], since: int = 0) -> None:
        """Seed ``values`` with gradients (references transferred) and run the nodes created after the first
        ``since``, last first."""
        self.run += 1
        for value, grad in seeds:
            self.deliver(value, grad)
        while len(self.nodes) > since:
            out, backward, saved = self.nodes.pop()
            grad, out.grad = out.grad, None
            self.current = len(self.nodes)
            backward(grad, saved)

    def release(self, grad: Buf | None, saved) -> None:
        self.t.drop(grad)
        if self.split:  # the graph is retained: what the node saved lives until the graph goes
            self.retained.append((self.current, saved))
        else:
            self.t.drop(*saved)

    def defer(self, work) -> None:
        """A node with weights under a split backward: its weights' gradients later (stage_backward_weight), in
        creation order; it keeps its output's gradient and what it saved until then."""
        if self.kp:
            raise ValueError("tape: a split backward of trained feedback matrices (KP) is not replayed")
        self.weight_work.append((self.current, work))

    def param_grad(self, elements, phase: str | None = None, label: str = "grad") -> Buf:
        """A parameter's gradient (it becomes ``.grad``: never dropped within the step)."""
        if phase is None:
            return self.t.new(bytes_(elements, self.g.z), label)
        with self.t.in_phase(phase):
            return self.t.new(bytes_(elements, self.g.z), label)

    # -- ops ------------------------------------------------------------------------------
    def value(self, elements_rows, width, label: str, size: int | None = None) -> Value:
        size = self.g.z if size is None else size
        return Value(self.t.new(bytes_(elements_rows * width, size), label), elements_rows, width, False)

    def embedding(self, stack: str) -> Value:
        out = self.value(self.g.M(stack), self.g.d, "embedding")

        def backward(grad, saved):
            self.table_grad(label="embedding grad", then=lambda: self.release(grad, saved))

        return self._node(out, backward)

    def add(self, a: Value, b: Value | None, label: str = "add") -> Value:
        """a + b (``b`` None: a constant, such as the positional table; ``b`` with fewer rows, a learned position
        table's rows broadcast over the batch: its gradient is summed over the batch, a new tensor)."""
        out = self.value(a.rows, a.width, label)

        def backward(grad, saved):
            for operand in (a, b):
                if operand is not None and operand.tracked:
                    if operand is b and not np.array_equal(b.rows, a.rows):
                        self.deliver(b, self.t.new(bytes_(b.rows * b.width, self.g.z), "sum"))
                        continue
                    self.t.hold(grad)
                    self.deliver(operand, grad)
            self.t.drop(grad)

        return self._node(out, backward) if (a.tracked or (b is not None and b.tracked)) else out

    def linear(self, x: Value, n_out, label: str = "linear", unit: bool = True, bias: bool = True,
               table: bool = False) -> Value:
        """A linear layer; ``unit``: a module PEPITA's hooks record (every linear but the head); ``table``: its
        weight is the (possibly tied) V x d table."""
        n_in = x.width
        out = self.value(x.rows, n_out, label)
        if unit and self.hook is not None:
            self.hook("linear" if bias else "linear without bias", x, out)

        def backward(grad, saved):
            # A strided gradient is replaced by one contiguous copy; an expanded one (DFA's per-sequence error reaching
            # a linear through a pre-LN residual) is copied by each product that reads it: the input's gradient, the
            # weight's, the bias's sum (Buf.expanded, Buf.strided).
            if grad is not None and grad.strided:
                copied = self.t.new(bytes_(x.rows * n_out, self.g.z), "clone")
                self.t.drop(grad)
                grad = copied
            expanded = grad is not None and grad.expanded
            if self.split:  # input gradient now, the weights' (its output's gradient and input kept) later
                if table and (self.g.tied or self.g.mtp_depth):
                    raise ValueError("tape: a split backward of a shared table's gradient is not replayed")
                first = self.param_grad(x.rows * n_out, label="clone") if expanded else None
                grad_x = self.t.new(bytes_(x.rows * n_in, self.g.z), "grad_x") if x.tracked else None
                self.t.drop(first)

                def weights():  # (each product that reads an expanded gradient reads its own contiguous copy)
                    copies = [self.param_grad(x.rows * n_out, label="clone") if expanded else None]
                    self.param_grad(n_in * n_out, label="grad_w")
                    if bias:
                        copies.append(self.param_grad(x.rows * n_out, label="clone") if expanded else None)
                        self.param_grad(n_out, label="grad_b")
                    self.t.drop(*copies)
                    self.release(grad, saved)

                self.defer(weights)
                self.deliver(x, grad_x)
                return

            def copy(phase):
                return self.param_grad(x.rows * n_out, phase, "clone") if expanded else None

            first = copy(None)
            grad_x = self.t.new(bytes_(x.rows * n_in, self.g.z), "grad_x") if x.tracked else None
            self.t.drop(first)
            copies = [copy("weight_update")]
            pending: list = []  # a shared parameter's sums, once the node has released its inputs
            if table and self.g.tied:
                self.table_grad("weight_update", "grad_w", pending=pending)
            elif table and self.g.mtp_depth:  # the head's weight, read by multi-token prediction's heads too
                self.shared_grad("head weight", n_in * n_out, "weight_update", "grad_w", pending)
            else:
                self.param_grad(n_in * n_out, "weight_update", "grad_w")
            if self.kp:
                self.param_grad(n_in * n_out, "weight_update", "grad_feedback")
            if bias:
                copies.append(copy("weight_update"))
                if table and self.g.mtp_depth:
                    self.shared_grad("head bias", n_out, "weight_update", "grad_b", pending)
                else:
                    self.param_grad(n_out, "weight_update", "grad_b")
            with self.t.in_phase("weight_update"):
                self.t.drop(*copies)
            self.release(grad, saved)
            for accumulate in pending:
                accumulate()
            self.deliver(x, grad_x)

        return self._node(out, backward, [x.buf])

    def activation(self, u: Value, saves_output: bool = False) -> Value:
        """An elementwise activation: GELU and SiLU save their input; ReLU saves its output (``threshold_backward``
        reads the result), so ``u`` goes as soon as the caller drops it."""
        out = self.value(u.rows, u.width, "activation")

        def backward(grad, saved):
            grad_u = self.t.new(u.buf.nbytes, "activation_backward")
            self.release(grad, saved)
            self.deliver(u, grad_u)

        return self._node(out, backward, [out.buf if saves_output else u.buf])

    def mul(self, a: Value, b: Value) -> Value:
        """a * b; the node saves both and its backward makes each one's gradient (``grad * b``, then ``grad * a``)."""
        out = self.value(a.rows, a.width, "mul")

        def backward(grad, saved):
            grad_a = self.t.new(a.buf.nbytes, "mul")
            grad_b = self.t.new(b.buf.nbytes, "mul")
            self.release(grad, saved)
            self.deliver(a, grad_a)
            self.deliver(b, grad_b)

        return self._node(out, backward, [a.buf, b.buf])

    def up(self, x: Value, width=None) -> Value:
        """The FFN's hidden layer: its first matrix with the activation (``Linear(activation='gelu' or 'relu')``);
        gated, the gate's matrix with the activation (SiLU or GELU: each saves its input) times the up matrix's
        output (``FeedForward.forward``). ``width``: the hidden width (default d_ff)."""
        ff = self.g.ff if width is None else width
        if self.g.gated:
            pre = self.linear(x, ff, "ffn.gate", unit=False, bias=self.g.out_bias)
            act = self.activation(pre)
            self.t.drop(pre.buf)
            if self.hook is not None:
                self.hook("linear" if self.g.out_bias else "linear without bias", x, act)
            u = self.linear(x, ff, "ffn.up", bias=self.g.out_bias)
            y = self.mul(act, u)
            self.t.drop(act.buf, u.buf)
            return y
        u = self.linear(x, ff, "ffn.up", unit=False, bias=self.g.out_bias)
        y = self.activation(u, saves_output=self.g.relu)
        self.t.drop(u.buf)
        if self.hook is not None:
            self.hook("linear" if self.g.out_bias else "linear without bias", x, y)
        return y

    def view(self, x: Value, width, label: str) -> Value:
        """A view of ``x`` (its storage, one more reference) that autograd tracks with a node of its own: a slice,
        whose backward makes a zero tensor of ``x``'s size holding the gradient (``slice_backward``)."""
        self.t.hold(x.buf)
        out = Value(x.buf, x.rows, width, False)

        def backward(grad, saved):
            full = self.t.new(x.buf.nbytes, "slice_backward")
            self.release(grad, saved)
            self.deliver(x, full)

        return self._node(out, backward) if x.tracked else out


    def passing(self, out: Value, x: Value) -> Value:
        """``out``, a contiguous copy or a view of ``x`` whose backward hands the gradient on as it is."""
        def backward(grad, saved_):
            self.deliver(x, grad)

        return self._node(out, backward) if x.tracked else out


    def derivative(self, out: Value, inputs: list, saved: list, made: list, layouts=()) -> Value:
        """A node of one op whose backward makes the tensors ``made`` ((bytes, label), in order: temporaries first,
        freed at once, then one gradient per input), releases its gradient and saved tensors, and hands each input
        its gradient (``layouts``: the flags a linear layer's backward reads, per input). No input tracked: no node."""
        def backward(grad, saved_):
            bufs = [self.t.new(size, label) for size, label in made]
            grads = bufs[len(bufs) - len(inputs):]
            self.t.drop(*bufs[:len(bufs) - len(inputs)])
            for buf, layout in zip(grads, layouts):
                if layout:
                    setattr(buf, layout, True)
            self.release(grad, saved_)
            for value, buf in zip(inputs, grads):
                self.deliver(value, buf)

        return self._node(out, backward, saved) if any(x.tracked for x in inputs) else out


