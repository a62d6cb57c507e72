"""The model's ops on a tape: ``train/model.py``'s forward, with or without autograd, and autograd's backward.

Each op allocates what our PyTorch code allocates (its output, what its autograd node saves, its transients)
and frees it when the last reference goes; a node's backward makes its input gradients, releases what it
saved, and hands the gradients on. The block structure comes from :mod:`..layers` (``describe_block``), the
one description the model and the analytic engine read too.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from .. import layers as L
from .buffers import BOOL, FLOAT32, INT64, Buf, Tape, bytes_
from .group import Group


class Value:
    """A forward tensor: its storage, rows x width, and whether autograd tracks it."""

    __slots__ = ("buf", "rows", "width", "tracked", "grad")

    def __init__(self, buf: Buf, rows, width, tracked: bool):
        self.buf, self.rows, self.width, self.tracked, self.grad = buf, rows, width, tracked, None


class Stream:
    """The residual stream and the encoder output, as a :class:`train.model.Stream` holds them."""

    def __init__(self):
        self.x: Value | None = None
        self.memory: Value | None = None
        self.bias: Value | None = None  # the running stack's relative position bias

    def close(self, t: Tape) -> None:
        for value in (self.x, self.memory, self.bias):
            if value is not None:
                t.drop(value.buf)
        self.x = self.memory = self.bias = None


class Ops:
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

    def table_grad(self, phase: str | None = None, label: str = "table grad", then=None) -> None:
        """The gradient of the V x d table (an embedding's, or a tied head's weight): its own ``.grad``, or, tied,
        the first becomes the shared ``.grad`` and each later one is made, added in place, and freed."""
        if not (self.g.tied or self.g.shared_table) or not self.table_has_grad:
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
                total = self.t.new(size, "add")
                self.t.drop(new, self.table_buf)
                self.table_buf = total
            else:  # .grad from an earlier backward: AccumulateGrad adds in place
                self.t.drop(new)

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
            backward(grad, saved)

    def release(self, grad: Buf | None, saved) -> None:
        self.t.drop(grad)
        self.t.drop(*saved)

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

            def copy(phase):
                return self.param_grad(x.rows * n_out, phase, "clone") if expanded else None

            first = copy(None)
            grad_x = self.t.new(bytes_(x.rows * n_in, self.g.z), "grad_x") if x.tracked else None
            self.t.drop(first)
            copies = [copy("weight_update")]
            if table and self.g.tied:
                self.table_grad("weight_update", "grad_w")
            else:
                self.param_grad(n_in * n_out, "weight_update", "grad_w")
            if self.kp:
                self.param_grad(n_in * n_out, "weight_update", "grad_feedback")
            if bias:
                copies.append(copy("weight_update"))
                self.param_grad(n_out, "weight_update", "grad_b")
            with self.t.in_phase("weight_update"):
                self.t.drop(*copies)
            self.release(grad, saved)
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

    def up(self, x: Value) -> Value:
        """The FFN's hidden layer: its first matrix with the activation (``Linear(activation='gelu' or 'relu')``);
        gated, the gate's matrix with the activation (SiLU or GELU: each saves its input) times the up matrix's
        output (``FeedForward.forward``)."""
        if self.g.gated:
            pre = self.linear(x, self.g.ff, "ffn.gate", unit=False, bias=self.g.out_bias)
            act = self.activation(pre)
            self.t.drop(pre.buf)
            if self.hook is not None:
                self.hook("linear" if self.g.out_bias else "linear without bias", x, act)
            u = self.linear(x, self.g.ff, "ffn.up", bias=self.g.out_bias)
            y = self.mul(act, u)
            self.t.drop(act.buf, u.buf)
            return y
        u = self.linear(x, self.g.ff, "ffn.up", unit=False, bias=self.g.out_bias)
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

    def rotate(self, x: Value) -> Value:
        """``rotate``: x cos + cat(-x₂, x₁) sin, cos and sin views of the rotary tables (buffers in the model's
        dtype: ``.to`` copies nothing). Nodes: the two slices, neg, cat (its gradient goes to its inputs as views),
        the two products (each saves only its table, a view) and the sum; the original x goes when the caller
        rebinds it. Partial rotary: x₁ and x₂ halve the turned features, and a third slice, the features passed
        through, joins the cat."""
        rows, width = x.rows, x.width
        turned = width * self.g.rotary_dim // self.g.head_dim if self.g.partial_rotary else width
        second = self.view(x, turned / 2, "x[..., half:]")
        negated = self.value(rows, turned / 2, "neg")
        if x.tracked:
            def neg_backward(grad, saved):
                made = self.t.new(negated.buf.nbytes, "neg")
                self.release(grad, saved)
                self.deliver(second, made)

            self._node(negated, neg_backward)
        self.t.drop(second.buf)
        first = self.view(x, turned / 2, "x[..., :half]")
        rest = self.view(x, width - turned, "x[..., turned:]") if self.g.partial_rotary else None
        cat = self.value(rows, width, "cat")
        if x.tracked:
            def cat_backward(grad, saved):  # each input's gradient is a view of this one
                for piece in (first, negated) if rest is None else (first, negated, rest):
                    self.t.hold(grad)
                    self.deliver(piece, grad)
                self.t.drop(grad)

            self._node(cat, cat_backward)
        self.t.drop(negated.buf, first.buf, rest.buf if rest is not None else None)

        def product(a: Value, label: str) -> Value:
            out = self.value(rows, width, label)

            def backward(grad, saved):
                made = self.t.new(a.buf.nbytes, "mul")
                self.release(grad, saved)
                self.deliver(a, made)

            return self._node(out, backward) if a.tracked else out

        with_cos = product(x, "x cos")
        with_sin = product(cat, "turned sin")
        out = self.add(with_cos, with_sin, "rotated")
        self.t.drop(with_cos.buf, with_sin.buf, cat.buf)
        return out

    def passing(self, out: Value, x: Value) -> Value:
        """``out``, a contiguous copy or a view of ``x`` whose backward hands the gradient on as it is."""
        def backward(grad, saved_):
            self.deliver(x, grad)

        return self._node(out, backward) if x.tracked else out

    def capped_attention(self, q: Value, k: Value, v: Value, causal: bool) -> Value:
        """``capped_attention`` (Gemma 2's soft-capped scores, as transformers' eager attention): q and k^T copied
        contiguous for the batched product (k not, where grouped-query attention repeated it into a copy); the
        scores (B h M N), times the scale, capped (``softcap``), plus the stack's additive mask (a view of a buffer;
        a causal self-attention only), softmax in float32 (under bf16: the scores widened first, the weights cast
        back), the product with v (copied likewise). The scores, the weights and their float32 softmax live to the
        function's end (its locals). Returns its output, [B, h, M, dh]."""
        g, f = self.g, FLOAT32
        wide = g.z < FLOAT32
        scores_rows = g.h * q.rows * (k.rows // g.B)
        dense = g.grouped and not g.single_kv  # repeated into copies; one key/value head is an expanded view
        qc = self.passing(self.value(q.rows, q.width, "q contiguous"), q)
        kc = k if dense else self.passing(self.value(k.rows, k.width, "k transposed contiguous"), k)
        product = self.derivative(self.value(scores_rows, 1, "q kT"), [qc, kc], [qc.buf, kc.buf],
                                  [(qc.buf.nbytes, "bmm"), (kc.buf.nbytes, "bmm")],
                                  ["strided", None if dense else "expanded"])
        self.t.drop(qc.buf, *([] if dense else [kc.buf]))
        scaled = self.scalar(product, "* scale")
        self.t.drop(product.buf)
        scores = self.softcap(scaled)
        self.t.drop(scaled.buf)
        if causal:
            masked = self.add(scores, None, "+ mask")
            self.t.drop(scores.buf)
            scores = masked
        widened = scores
        if wide:
            widened = self.derivative(self.value(scores_rows, 1, "to float32", f), [scores], [],
                                      [(scores.buf.nbytes, "_to_copy")])
        attn = self.derivative(self.value(scores_rows, 1, "softmax", f), [widened], [],
                               [(bytes_(scores_rows, f), "_softmax_backward_data")])
        if attn.tracked:
            self.nodes[-1][2].append(attn.buf)  # softmax saves its output
            self.t.hold(attn.buf)
        if wide:
            self.t.drop(widened.buf)
            weights = self.derivative(self.value(scores_rows, 1, "to"), [attn], [], [(attn.buf.nbytes, "_to_copy")])
            self.t.drop(attn.buf)
        else:
            weights = attn
        vc = v if dense else self.passing(self.value(v.rows, v.width, "v contiguous"), v)
        y = self.value(q.rows, q.width, "attn v")

        def values_backward(grad, saved_):
            contiguous = self.t.new(y.buf.nbytes, "clone")
            self.t.drop(grad)
            dv = self.t.new(vc.buf.nbytes, "bmm")
            dv.strided = True
            dweights = self.t.new(weights.buf.nbytes, "bmm")
            self.t.drop(contiguous)
            self.t.drop(*saved_)
            self.deliver(vc, dv)
            self.deliver(weights, dweights)

        if weights.tracked or vc.tracked:
            self._node(y, values_backward, [weights.buf, vc.buf])
        if not dense:
            self.t.drop(vc.buf)
        self.t.drop(scores.buf, weights.buf)
        return y

    def attention(self, x: Value, source: Value, rotary: bool = False, bias: Value | None = None,
                  causal: bool = False) -> Value:
        """q, k, v projections, (rotary: q and k turned), fused attention (output and float32 log-sum-exp), o
        projection."""
        width, kv_width = self.g.q_width, self.g.kv_width
        q = self.linear(x, width, "q", bias=self.g.qkv_bias)
        k = self.linear(source, kv_width, "k", bias=self.g.qkv_bias)
        v = self.linear(source, kv_width, "v", bias=self.g.qkv_bias)
        if rotary:  # q = rotate(q, ...); k = rotate(k, ...): the projections' outputs go as each is rebound
            for name in ("q", "k"):
                value = q if name == "q" else k
                turned = self.rotate(value)
                self.t.drop(value.buf)
                q, k = (turned, k) if name == "q" else (q, turned)
        if bias is not None and bias.tracked:  # a bias that needs a gradient: SDPA's math path (T5)
            kr, vr = (self.repeat(k, width), self.repeat(v, width)) if self.g.grouped else (k, v)
            a, y = self.math_attention(q, kr, vr, bias)
            if self.g.grouped:
                self.t.drop(kr.buf, vr.buf)
            o = self.linear(a, self.g.d, "o", bias=self.g.o_bias)
            self.t.drop(q.buf, k.buf, v.buf, y.buf, a.buf)
            return o
        if self.g.attention_softcap:  # Gemma 2: attention written out (train/model.py's capped_attention)
            kr, vr = (self.repeat(k, width), self.repeat(v, width)) if self.g.grouped else (k, v)
            y = self.capped_attention(q, kr, vr, causal)
            if self.g.grouped:
                self.t.drop(kr.buf, vr.buf)
            a = self.passing(self.value(x.rows, width, "transpose reshape"), y)
            o = self.linear(a, self.g.d, "o", bias=self.g.o_bias)
            self.t.drop(q.buf, k.buf, v.buf, y.buf, a.buf)
            return o
        # Grouped-query attention: K, then V, repeated to every head (expand, then reshape: a copy each), passed to
        # SDPA as temporaries that only its saved tensors keep.
        kr, vr = (self.repeat(k, width), self.repeat(v, width)) if self.g.grouped else (k, v)
        a = self.value(x.rows, width, "sdpa")
        lse = self.t.new(bytes_(self.g.h * x.rows, FLOAT32), "logsumexp")

        def backward(grad, saved):
            dq = self.t.new(q.buf.nbytes, "dq")
            dk = self.t.new(bytes_(kr.rows * kr.width, self.g.z), "dk")
            dv = self.t.new(bytes_(vr.rows * vr.width, self.g.z), "dv")
            self.release(grad, saved)
            self.deliver(q, dq)
            self.deliver(kr, dk)
            self.deliver(vr, dv)

        self._node(a, backward, [q.buf, kr.buf, vr.buf, a.buf, lse])
        if self.g.grouped:
            self.t.drop(kr.buf, vr.buf)
        self.t.drop(lse)
        o = self.linear(a, self.g.d, "o", bias=self.g.o_bias)
        self.t.drop(q.buf, k.buf, v.buf, a.buf)
        return o

    def relative_bias(self, stack: str) -> Value:
        """``RelativePositionBias``: the (buckets x heads) table gathered at every (query, key) pair; a causal
        stack's bias carries the mask (ones, tril and its negation, saved by masked_fill with -inf)."""
        g, rows = self.g, self.g.rows[stack]
        gathered = self.value(rows * rows, g.h, "relative bias")

        def gather_backward(grad, saved):
            self.param_grad(g.relative * g.h, label="relative table grad")
            self.release(grad, saved)

        self._node(gathered, gather_backward)
        if stack != "decoder":
            return gathered
        ones = self.t.new(bytes_(rows * rows, BOOL), "ones")
        lower = self.t.new(bytes_(rows * rows, BOOL), "tril")
        self.t.drop(ones)
        mask = self.t.new(bytes_(rows * rows, BOOL), "bitwise_not")
        out = self.value(rows * rows, g.h, "masked_fill")

        def masked_backward(grad, saved):
            made = self.t.new(out.buf.nbytes, "masked_fill")
            self.release(grad, saved)
            self.deliver(gathered, made)

        self._node(out, masked_backward, [mask])
        self.t.drop(gathered.buf, lower, mask)
        return out

    def math_attention(self, q: Value, k: Value, v: Value, bias: Value) -> tuple[Value, Value]:
        """SDPA's math path with an additive bias that needs a gradient (T5): under bf16, q, k and v widened to
        float32 first; q and k scaled (by 1: still a product each) and copied contiguous; their scores (B h L L'),
        plus the bias (its gradient summed over the batch, in float32, cast to the bias's dtype); softmax (saves
        its output; under bf16 also cast back, unused); v copied; the product with v (cast back under bf16); then
        the caller's transpose and reshape (a copy: o's input). The projections' gradients come back in layouts
        their linear layers copy: q's and v's once (``strided``), k's, transposed, for each product
        (``expanded``). Returns (o's input, the attention's output: a local of Attention.forward)."""
        g, f = self.g, FLOAT32
        wide = g.z < FLOAT32
        scores_rows = g.h * q.rows * (k.rows // g.B)

        def passing(out: Value, x: Value) -> Value:  # a contiguous copy or a view: the gradient goes on as it is
            def backward(grad, saved_):
                self.deliver(x, grad)

            return self._node(out, backward) if x.tracked else out

        widened = []
        for x, layout in ((q, "strided"), (k, "expanded"), (v, "strided")):
            if wide:
                x32 = self.derivative(self.value(x.rows, x.width, "to float32", f), [x], [],
                                      [(x.buf.nbytes, "_to_copy")], [layout])
                widened.append(x32)
            else:
                widened.append(x)
        q32, k32, v32 = widened
        qs = self.derivative(self.value(q.rows, q.width, "q * s", f), [q32], [], [(bytes_(q.rows * q.width, f), "mul")],
                             [None if wide else "strided"])
        ks = self.derivative(self.value(k.rows, k.width, "k * s", f), [k32], [], [(bytes_(k.rows * k.width, f), "mul")],
                             [None if wide else "expanded"])
        # q, k and v are views across heads that bmm copies contiguous first, except grouped-query attention's K
        # and V: repeated into copies, or, with one key/value head, an expanded view, which the scaling (k) and the
        # cast to float32 (v, under bf16) make dense.
        k_dense = self.g.grouped
        v_dense = self.g.grouped and (wide or not self.g.single_kv)
        qc = passing(self.value(q.rows, q.width, "q contiguous", f), qs)
        kc = ks if k_dense else passing(self.value(k.rows, k.width, "k transposed contiguous", f), ks)
        scores = self.derivative(self.value(scores_rows, 1, "q kT", f), [qc, kc], [qc.buf, kc.buf],
                                 [(qc.buf.nbytes, "bmm"), (kc.buf.nbytes, "bmm")])
        self.t.drop(ks.buf, qc.buf, *([] if k_dense else [kc.buf]))  # (the scores' node keeps them with a graph)
        biased = self.value(scores_rows, 1, "+ bias", f)

        def bias_backward(grad, saved_):
            if bias.tracked:
                total = self.t.new(bytes_(bias.rows * bias.width, f), "sum")
                if wide:
                    narrow = self.t.new(bytes_(bias.rows * bias.width, g.z), "_to_copy")
                    self.t.drop(total)
                    total = narrow
                self.t.hold(grad)
                self.deliver(scores, grad)
                self.release(grad, saved_)
                self.deliver(bias, total)
            else:
                self.deliver(scores, grad)

        if scores.tracked or bias.tracked:
            self._node(biased, bias_backward)
        self.t.drop(scores.buf)
        attn = self.derivative(self.value(scores_rows, 1, "softmax", f), [biased], [],
                               [(bytes_(scores_rows, f), "_softmax_backward_data")])
        if attn.tracked:
            self.nodes[-1][2].append(attn.buf)  # softmax saves its output
            self.t.hold(attn.buf)
        self.t.drop(biased.buf)
        weights = self.t.new(bytes_(scores_rows, g.z), "attn.to") if wide else None  # returned weights, unused
        vc = v32 if v_dense else passing(self.value(v.rows, v.width, "v contiguous", f), v32)
        y = self.value(q.rows, q.width, "attn v", f)

        def values_backward(grad, saved_):
            contiguous = self.t.new(y.buf.nbytes, "clone")
            self.t.drop(grad)
            dv = self.t.new(vc.buf.nbytes, "bmm")
            if not wide:
                dv.strided = True
            dattn = self.t.new(attn.buf.nbytes, "bmm")
            self.t.drop(contiguous)
            self.t.drop(*saved_)
            self.deliver(vc, dv)
            self.deliver(attn, dattn)

        if attn.tracked or vc.tracked:
            self._node(y, values_backward, [attn.buf, vc.buf])
        if not v_dense:  # bmm's contiguous copy of v (the node keeps it with a graph)
            self.t.drop(vc.buf)
        out = y
        if wide:
            out = self.derivative(self.value(q.rows, q.width, "to", g.z), [y], [], [(y.buf.nbytes, "_to_copy")])
            self.t.drop(y.buf)
        self.t.drop(qs.buf, attn.buf, weights, *(x.buf for x in widened if wide))
        a = passing(self.value(q.rows, q.width, "transpose reshape"), out)
        return a, out

    def repeat(self, kv: Value, width) -> Value:
        """``Attention._repeat``: K or V expanded to every head and reshaped (a copy); its backward sums each
        group's gradients into a K- or V-sized tensor."""
        if self.g.single_kv:  # one key/value head: [B, 1, h, N, dh] reshapes to [B, h, N, dh] as a view
            self.t.hold(kv.buf)
            out = Value(kv.buf, kv.rows, width, False)
        else:
            out = self.value(kv.rows, width, "repeat_kv")

        def backward(grad, saved):
            summed = self.t.new(bytes_(kv.rows * kv.width, self.g.z), "sum_to_size")
            self.release(grad, saved)
            self.deliver(kv, summed)

        return self._node(out, backward) if kv.tracked else out

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

    def norm(self, s: Value) -> Value:
        return self.rms_norm(s) if self.g.rms else self.layer_norm(s)

    def rms_norm(self, s: Value) -> Value:
        """``nn.RMSNorm`` on CPU, torch's composite: x = s (a float32 copy for a narrower dtype), r = rsqrt(mean(x²)
        + eps), n = x r, y = n w (cast back). Nodes: pow saves x, rsqrt its result, x r both factors, n w n; a
        constant input (a DFA segment's start) leaves only the weight's node. The weight's gradient is summed in
        float32 and cast."""
        rows, d, z, f = s.rows, s.width, self.g.z, FLOAT32
        wide = z < FLOAT32

        big, small = bytes_(rows * d, f), bytes_(rows, f)
        x = s
        if wide:
            x = self.value(rows, d, "to_float32", f)
            if s.tracked:
                self.derivative(x, [s], [], [(s.buf.nbytes, "_to_copy")])
        tracked = x.tracked and self.graph
        square = self.value(rows, d, "pow", f)
        if tracked:
            self.derivative(square, [x], [x.buf], [(big, "pow"), (big, "mul"), (big, "mul")])
        mean = self.value(rows, 1, "mean", f)
        if tracked:
            self.derivative(mean, [square], [], [(big, "div")])
        r = self.value(rows, 1, "rsqrt", f)
        if tracked:
            self.derivative(r, [mean], [r.buf], [(small, "pow"), (small, "mul"), (small, "mul")])
        self.t.drop(mean.buf, square.buf)
        n = self.value(rows, d, "mul", f)
        if tracked:  # x r: x's gradient, then a product summed over features for r's
            def mul_backward(grad, saved):
                grad_x = self.t.new(big, "mul")
                product = self.t.new(big, "mul")
                grad_r = self.t.new(small, "sum")
                self.t.drop(product)
                self.release(grad, saved)
                self.deliver(x, grad_x)
                self.deliver(r, grad_r)

            self._node(n, mul_backward, [x.buf, r.buf])
        y = self.value(rows, d, "mul weight", f)

        def weight_backward(grad, saved):
            grad_n = self.t.new(big, "mul") if n.tracked else None
            product = self.t.new(big, "mul")
            total = self.t.new(bytes_(d, f), "sum")
            self.t.drop(product)
            if wide:
                self.param_grad(d, label="grad_weight")
                self.t.drop(total)
            self.release(grad, saved)
            self.deliver(n, grad_n)

        self._node(y, weight_backward, [n.buf])
        self.t.drop(n.buf)
        if x is not s:
            self.t.drop(x.buf)
        if wide:
            narrow = self.value(rows, d, "to", z)
            self.derivative(narrow, [y], [], [(y.buf.nbytes, "_to_copy")])
            self.t.drop(y.buf)
            y = narrow
        self.t.drop(r.buf)
        if self.hook is not None:
            self.hook("rms norm", s, y)
        return y

    def layer_norm(self, s: Value) -> Value:
        y = self.value(s.rows, s.width, "layer_norm")
        mean = self.t.new(bytes_(s.rows, self.g.z), "mean")
        rstd = self.t.new(bytes_(s.rows, self.g.z), "rstd")

        def backward(grad, saved):  # (an input without a graph, a DFA segment's start: no input gradient)
            grad_s = self.t.new(s.buf.nbytes, "layer_norm_backward") if s.tracked else None
            if not self.g.plain_norm:
                self.param_grad(self.g.d, label="grad_gamma")
                self.param_grad(self.g.d, label="grad_beta")
            self.release(grad, saved)
            self.deliver(s, grad_s)

        if s.tracked or not self.g.plain_norm:  # (no gain, no bias and a constant input: nothing to differentiate)
            self._node(y, backward, [s.buf, mean, rstd])
        self.t.drop(mean, rstd)
        if self.hook is not None:
            self.hook("plain norm" if self.g.plain_norm else "norm", s, y)
        return y

    def add_norm(self, x: Value, branch: Value) -> Value:
        s = self.add(x, branch)
        y = self.norm(s)
        self.t.drop(s.buf)
        return y

    def mean_rows(self, x: Value) -> Value:
        """The classifier's mean over positions: [B, L, d] -> [B, d]."""
        out = self.value(self.g.B, x.width, "mean")

        def backward(grad, saved):
            grad_x = self.t.new(x.buf.nbytes, "mean_backward")
            self.release(grad, saved)
            self.deliver(x, grad_x)

        return self._node(out, backward)

    def lookup(self, ids, rows, table_rows, label: str, ids_temporary: bool) -> tuple[Value, Buf]:
        """A gather from a small trained table (token types, learned positions): its int64 ids are saved by the
        node, whose backward makes the table's gradient. Returns the rows and the ids' storage, or None where
        ``ids_temporary`` (built in the call: freed at once without a graph)."""
        ids_buf = self.t.new(bytes_(ids, INT64), f"{label} ids")
        out = self.value(rows, self.g.d, label)

        def backward(grad, saved):
            self.param_grad(table_rows * self.g.d, label=f"{label} grad")
            self.release(grad, saved)

        self._node(out, backward, [ids_buf])
        if ids_temporary:
            self.t.drop(ids_buf)
            ids_buf = None
        return out, ids_buf

    def embed(self, stack: str, modulation: Value | None = None) -> Value:
        """``Stack.embed``: the token table, token types (every token of type 0), positions (a sinusoidal buffer
        added, or a learned table's rows broadcast over the batch), PEPITA's modulation, the embedding norm."""
        x = self.embedding(stack)
        if self.g.embedding_scale:  # x * sqrt(d_model): its backward multiplies the gradient (a new tensor)
            scaled = self.value(x.rows, x.width, "* sqrt(d)")
            if x.tracked:
                def backward(grad, saved, x=x):
                    made = self.t.new(x.buf.nbytes, "mul")
                    self.release(grad, saved)
                    self.deliver(x, made)

                self._node(scaled, backward)
            self.t.drop(x.buf)
            x = scaled
        tables = []
        if self.g.types is not None:
            tables.append((self.g.M(stack), self.g.M(stack), self.g.types, "token types", False))
        if self.g.positions == "learned":
            tables.append((self.g.rows[stack], self.g.rows[stack], self.g.position_rows(stack), "positions", True))
        for ids, rows, table_rows, label, temporary in tables:
            rows_of, ids_buf = self.lookup(ids, rows, table_rows, label, temporary)
            summed = self.add(x, rows_of, f"+ {label}")
            self.t.drop(rows_of.buf, ids_buf, x.buf)
            x = summed
        if self.g.positions == "sinusoidal":
            summed = self.add(x, None, "positions")
            self.t.drop(x.buf)
            x = summed
        if modulation is not None:
            modulated = self.add(x, modulation, "modulate")
            self.t.drop(x.buf)
            x = modulated
        if self.g.embedding_norm:
            normed = self.norm(x)
            self.t.drop(x.buf)
            x = normed
        return x

    def branch(self, branch: L.Branch, x: Value, memory: Value | None) -> Value:
        """A branch's output: attention (its keys and values from the encoder output where it reads the memory;
        rotary and a relative bias where the stack's positions act inside it) or the FFN."""
        if L.KINDS[branch.kind].family == "moe":  # a mixture of experts (tape/moe.py)
            from .moe import mixture

            return mixture(self, x)
        if L.KINDS[branch.kind].family == "attention":
            return self.attention(x, memory if branch.reads_memory else x, rotary=self.g.rotary and branch.positional,
                                  bias=self.bias if branch.positional else None,
                                  causal=branch.kind == "masked_self_attention")
        hidden = self.up(x)
        out = self.linear(hidden, self.g.d, "ffn.down", bias=self.g.out_bias)
        self.t.drop(hidden.buf)
        return out

    def branches(self, stack: str) -> tuple[L.Branch, ...]:
        """The branches of one block of ``stack`` (``Block.branches``: :func:`layers.describe_block`)."""
        return L.describe_block(self.g.arch, stack, self.g.pre, self.g.parallel, self.g.experts,
                              bool(self.g.post_norms)).branches

    def sublayer(self, branch: L.Branch, x: Value, memory: Value | None) -> Value:
        """``Block.sublayer``: post-LN norm(x + branch(x)), pre-LN x + branch(norm(x)); the branch's output (and
        the normalised input) go when it returns."""
        h = self.norm(x) if self.g.pre else x
        out = self.branch(branch, h, memory)
        if branch.post_norm:  # Gemma 2: the branch's output normalised (the branch's output goes when rebound)
            normed = self.norm(out)
            self.t.drop(out.buf)
            out = normed
        y = self.add(x, out) if self.g.pre else self.add_norm(x, out)
        self.t.drop(out.buf)
        if h is not x:
            self.t.drop(h.buf)
        return y

    def block(self, stack: str, x: Value, memory: Value | None) -> Value:
        """One block (``Block.forward``, one ``Block.sublayer`` per branch); the block's input stays with the caller."""
        if self.g.parallel != "none":
            return self.parallel_block(stack, x, memory)
        for branch in self.branches(stack):
            y = self.sublayer(branch, x, memory)
            if x is not self._block_input:
                self.t.drop(x.buf)
            x = y
        return x

    def parallel_block(self, stack: str, x: Value, memory: Value | None) -> Value:
        """``Block.forward`` of a parallel block: out = x; per branch, its norm of x (computed once where branches
        share it; the previous one goes when rebound), then out = out + branch(h)."""
        out, h, normed = x, None, None
        for branch in self.branches(stack):
            if branch.norm != normed:
                new = self.norm(x)
                self.t.drop(h.buf if h is not None else None)
                h, normed = new, branch.norm
            f = self.branch(branch, h, memory)
            y = self.add(out, f)
            self.t.drop(f.buf)
            if out is not x:
                self.t.drop(out.buf)
            out = y
        self.t.drop(h.buf)
        return out

    _block_input = None
    bias: Value | None = None  # the relative position bias of the stream being run (Stream.bias)

    def run_block(self, stack: str, x: Value, memory: Value | None, keep_input: bool = False) -> Value:
        """``s.x = block(s.x, s.memory)``: the caller's reference to the block input goes after the block."""
        self._block_input = x
        y = self.block(stack, x, memory)
        self._block_input = None
        if not keep_input:
            self.t.drop(x.buf)
        return y

    def detach(self, x: Value, leaf: bool = False) -> Value:
        """``x.detach()`` (a new reference to the same storage); ``leaf``: then ``.requires_grad_()``."""
        self.t.hold(x.buf)
        return Value(x.buf, x.rows, x.width, leaf)

    def head(self, x: Value) -> Value:
        """``Transformer.output(pool(x))``: the head, then the logits' soft-capping (Gemma 2)."""
        if self.g.classifier:
            pooled = self.mean_rows(x)
            logits = self.capped_logits(self.linear(pooled, self.g.out, "head", unit=False, bias=self.g.head_bias,
                                                    table=True))
            self.t.drop(pooled.buf)
            return logits
        return self.capped_logits(self.linear(x, self.g.out, "head", unit=False, bias=self.g.head_bias, table=True))

    def capped_logits(self, logits: Value) -> Value:
        """``Transformer.output``'s soft-capping where the model has it (logit_softcap; else ``logits``); the head's
        own output goes when the caller's variable is rebound."""
        if not self.g.logit_softcap:
            return logits
        capped = self.softcap(logits)
        self.t.drop(logits.buf)
        return capped

    def scalar(self, x: Value, label: str) -> Value:
        """x times or over a number: a new tensor; its backward a new one (the gradient scaled), nothing saved."""
        out = Value(self.t.new(x.buf.nbytes, label), x.rows, x.width, False)

        def backward(grad, saved):
            made = self.t.new(x.buf.nbytes, label)
            self.release(grad, saved)
            self.deliver(x, made)

        return self._node(out, backward) if x.tracked else out

    def softcap(self, x: Value) -> Value:
        """``softcap``: tanh(x / c) * c. The quotient goes once tanh has read it; tanh saves its output (which goes,
        without a graph, once multiplied)."""
        divided = self.scalar(x, "/ c")
        t = Value(self.t.new(x.buf.nbytes, "tanh"), x.rows, x.width, False)

        def tanh_backward(grad, saved):
            made = self.t.new(x.buf.nbytes, "tanh_backward")
            self.release(grad, saved)
            self.deliver(divided, made)

        if divided.tracked:
            self._node(t, tanh_backward, [t.buf])
        self.t.drop(divided.buf)
        out = self.scalar(t, "* c")
        self.t.drop(t.buf)
        return out

    def stages(self, by: str = "block") -> list[tuple]:
        """(kind, stack, branch) of every stage but the head, in order (``Transformer.stages(by)``)."""
        out = []
        for stack in self.g.stacks:
            out.append(("embedding", stack, None))
            for _ in range(self.g.depth[stack]):
                if by == "sublayer" and self.g.parallel == "none":  # (a parallel block runs whole)
                    out += [("sublayer", stack, branch) for branch in self.branches(stack)]
                else:
                    out.append(("block", stack, None))
            if self.g.pre:
                out.append(("norm", stack, None))  # the stack's final norm
        return out

    def run_stage(self, kind: str, stack: str, s: "Stream", modulation: Value | None = None,
                  branch: L.Branch | None = None) -> None:
        """One stage on stream ``s`` (``Stage.run``); the blocks read the stream's relative bias (``self.bias``)."""
        self.bias = s.bias
        if kind == "embedding":
            if stack == "decoder" and s.x is not None:
                s.memory, s.x = s.x, None  # s.memory = s.x: the same reference moves
            self.t.drop(s.x.buf if s.x is not None else None)
            s.x = self.embed(stack, modulation)
            if self.g.relative is not None:  # s.position_bias = stack.relative_position(rows)
                bias = self.relative_bias(stack)
                self.t.drop(s.bias.buf if s.bias is not None else None)
                s.bias = bias
        elif kind == "sublayer":
            y = self.sublayer(branch, s.x, s.memory)
            self.t.drop(s.x.buf)
            s.x = y
        elif kind == "norm":
            y = self.norm(s.x)
            self.t.drop(s.x.buf)
            s.x = y
        else:
            s.x = self.run_block(stack, s.x, s.memory)

    def forward(self) -> Value:
        """``Transformer.forward``: the stages in order; the stream's references go when it returns."""
        s = Stream()
        for kind, stack, _ in self.stages():
            self.run_stage(kind, stack, s)
        logits = self.head(s.x)
        s.close(self.t)
        return logits

    def loss(self, logits: Value) -> tuple[Buf, Value | None]:
        """``objective.loss``: cross-entropy in at least float32. Returns the loss scalar and, with a graph,
        the node to seed (the loss value)."""
        wide = logits
        if self.g.z < FLOAT32:
            wide = self.value(logits.rows, logits.width, "to_float32", FLOAT32)
            if self.graph and logits.tracked:
                def to_backward(grad, saved):
                    narrow = self.t.new(logits.buf.nbytes, "to_dtype")
                    self.release(grad, saved)
                    self.deliver(logits, narrow)

                self._node(wide, to_backward)
        log_probs = self.value(logits.rows, logits.width, "log_softmax", FLOAT32)

        def log_softmax_backward(grad, saved):
            grad_wide = self.t.new(wide.buf.nbytes if wide is not logits else logits.buf.nbytes, "log_softmax_backward")
            self.release(grad, saved)
            self.deliver(wide, grad_wide)

        if wide.tracked:
            self._node(log_probs, log_softmax_backward, [log_probs.buf])
        loss = self.t.new(np.full_like(self.t.live, FLOAT32), "loss")
        total_weight = self.t.new(np.full_like(self.t.live, FLOAT32), "total_weight")
        loss_value = Value(loss, 1, 1, False)

        def nll_backward(grad, saved):
            grad_log_probs = self.t.new(log_probs.buf.nbytes, "nll_loss_backward")
            self.release(grad, saved)
            self.deliver(log_probs, grad_log_probs)

        if log_probs.tracked:
            self._node(loss_value, nll_backward, [log_probs.buf, total_weight])
        self.t.drop(total_weight, log_probs.buf)
        if wide is not logits:
            self.t.drop(wide.buf)
        return loss, (loss_value if loss_value.tracked else None)

