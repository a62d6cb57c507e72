"""Norms on the tape: LayerNorm, RMSNorm (torch's and transformers' written-out form), the post-LN add-and-norm
and the classifier's mean over rows.

A mixin of :class:`.ops.Ops` (analytic/tape/ops.py), which composes the op families.
"""

from __future__ import annotations

from .buffers import FLOAT32, bytes_
from .values import Value


class NormOps:
    """The norms of :class:`.ops.Ops`."""

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
                self.derivative(x, [s], [], [(bytes_(rows * d, z), "_to_copy")])  # (s's size: it may be a view)
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
            if self.split:  # the gain's gradient later (tape/split.py)
                def weights():
                    product = self.t.new(big, "mul")
                    total = self.t.new(bytes_(d, f), "sum")
                    self.t.drop(product)
                    if wide:
                        self.param_grad(d, label="grad_weight")
                        self.t.drop(total)
                    self.release(grad, saved)

                self.defer(weights)
                self.deliver(n, grad_n)
                return
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
            if self.split and not self.g.plain_norm:  # gain and bias later (tape/split.py)
                def weights():
                    self.param_grad(self.g.d, label="grad_gamma")
                    if self.g.norm_bias:
                        self.param_grad(self.g.d, label="grad_beta")
                    self.release(grad, saved)

                self.defer(weights)
                self.deliver(s, grad_s)
                return
            if not self.g.plain_norm:
                self.param_grad(self.g.d, label="grad_gamma")
                if self.g.norm_bias:
                    self.param_grad(self.g.d, label="grad_beta")
            self.release(grad, saved)
            self.deliver(s, grad_s)

        if s.tracked or not self.g.plain_norm:  # (no gain, no bias and a constant input: nothing to differentiate)
            self._node(y, backward, [s.buf, mean, rstd])
        self.t.drop(mean, rstd)
        if self.hook is not None:
            self.hook("plain norm" if self.g.plain_norm else "norm" if self.g.norm_bias else "norm without bias", s, y)
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
