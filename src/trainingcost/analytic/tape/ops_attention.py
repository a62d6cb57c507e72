"""Attention on the tape: rotary positions, the fused kernel, T5's relative bias, the written-out (soft-capped or
biased) attention and grouped-query repeats, as train/model.py runs them.

A mixin of :class:`.ops.Ops` (analytic/tape/ops.py), which composes the op families.
"""

from __future__ import annotations

from .buffers import BOOL, FLOAT32, bytes_
from .values import Value


class AttentionOps:
    """The attention ops of :class:`.ops.Ops`."""

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

    def head_norm(self, x: Value) -> Value:
        """``Attention._heads`` with qk_norm: on each whole projection (OLMo 2), an RMSNorm of its width; on each head
        (Qwen3, Gemma 3), the projection's output viewed as rows x heads rows of head_dim (a view: autograd's view node
        makes nothing), an RMSNorm on each (:meth:`rms_norm`: its weight's gradient head_dim wide), its output viewed
        back as rows of heads x head_dim. The projection's output goes when the caller rebinds it, kept only where the
        norm saves it. Without qk_norm, ``x`` itself."""
        if not self.g.qk_norm:
            return x
        if self.g.qk_norm == 2:
            normed = self.rms_norm(x)
            self.t.drop(x.buf)
            return normed
        heads = x.width // self.g.head_dim
        self.t.hold(x.buf)
        per_head = self.passing(Value(x.buf, x.rows * heads, self.g.head_dim, False), x)
        normed = self.rms_norm(per_head)
        self.t.drop(per_head.buf, x.buf)
        self.t.hold(normed.buf)
        out = self.passing(Value(normed.buf, x.rows, x.width, False), normed)
        self.t.drop(normed.buf)
        return out

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
        q = self.head_norm(self.linear(x, width, "q", bias=self.g.qkv_bias))
        k = self.head_norm(self.linear(source, kv_width, "k", bias=self.g.qkv_bias))
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
