"""The model on the tape: embeddings, blocks (sequential and parallel), the head, soft-capping, the stages a
rule runs and the loss.

A mixin of :class:`.ops.Ops` (analytic/tape/ops.py), which composes the op families.
"""

from __future__ import annotations

import numpy as np

from .. import layers as L
from .buffers import FLOAT32, INT64, Buf, bytes_
from .values import Stream, Value


class ModelOps:
    """The model-level ops of :class:`.ops.Ops`: embeddings, blocks, head, stages, loss."""

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
        rotary and a relative bias where the stack's positions act inside it) or the FFN (a mixture's dense first
        blocks': dense_ff wide)."""
        if L.KINDS[branch.kind].family == "moe":  # a mixture of experts (tape/moe.py)
            from .moe import mixture

            return mixture(self, x)
        if branch.kind == "latent_attention":  # DeepSeek's multi-head latent attention (tape/latent.py)
            from .latent import latent_attention

            return latent_attention(self, x)
        if L.KINDS[branch.kind].family == "attention":
            return self.attention(x, memory if branch.reads_memory else x, rotary=self.g.rotary and branch.positional,
                                  bias=self.bias if branch.positional else None,
                                  causal=branch.kind == "masked_self_attention")
        hidden = self.up(x, self.g.ffn_width(None))
        out = self.linear(hidden, self.g.d, "ffn.down", bias=self.g.out_bias)
        self.t.drop(hidden.buf)
        return out

    def branches(self, stack: str, index: int | None = None) -> tuple[L.Branch, ...]:
        """The branches of block ``index`` of ``stack`` (``Block.branches``: :func:`layers.describe_block`; a
        mixture's dense first blocks a dense FFN; None: a mixture block)."""
        return L.describe_block(self.g.arch, stack, self.g.pre, self.g.parallel, self.g.block_moe(index),
                                bool(self.g.post_norms), self.g.output, bool(self.g.kv_lora_rank)).branches

    def sublayer(self, branch: L.Branch, x: Value, memory: Value | None) -> Value:
        """``Block.sublayer``: post-LN norm(x + branch(x)), pre-LN x + branch(norm(x)), output-LN x + norm(branch(x));
        the branch's output (and the normalised input) go when it returns."""
        h = self.norm(x) if self.g.pre else x
        out = self.branch(branch, h, memory)
        if branch.post_norm or self.g.output:  # Gemma 2's post-norm, output-LN's norm: the branch's output
            normed = self.norm(out)  # normalised (the branch's output goes when rebound)
            self.t.drop(out.buf)
            out = normed
        y = self.add(x, out) if self.g.pre or self.g.output else self.add_norm(x, out)
        self.t.drop(out.buf)
        if h is not x:
            self.t.drop(h.buf)
        return y

    def block(self, stack: str, x: Value, memory: Value | None, index: int | None = None) -> Value:
        """One block (``Block.forward``, one ``Block.sublayer`` per branch); the block's input stays with the caller.
        ``index``: the block's, where a mixture's first blocks are dense (None: a mixture block)."""
        if self.g.parallel != "none":
            return self.parallel_block(stack, x, memory)
        for branch in self.branches(stack, index):
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
    bias: "Value | None" = None  # the relative position bias of the stream being run (Stream.bias)


    def run_block(self, stack: str, x: Value, memory: Value | None, keep_input: bool = False,
                  index: int | None = None) -> Value:
        """``s.x = block(s.x, s.memory)``: the caller's reference to the block input goes after the block."""
        self._block_input = x
        y = self.block(stack, x, memory, index)
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
        """(kind, stack, branch) of every stage but the head, in order (``Transformer.stages(by)``); a block's third
        item is its index."""
        out = []
        for stack in self.g.stacks:
            out.append(("embedding", stack, None))
            for index in range(self.g.depth[stack]):
                if by == "sublayer" and self.g.parallel == "none":  # (a parallel block runs whole)
                    out += [("sublayer", stack, branch) for branch in self.branches(stack, index)]
                else:
                    out.append(("block", stack, index))
            if self.g.final:
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
            if self.g.mtp_depth:  # s.hidden = s.x: multi-token prediction reads the stream before the final norm
                self.t.hold(s.x.buf)
                self.t.drop(s.hidden.buf if s.hidden is not None else None)
                s.hidden = s.x
            y = self.norm(s.x)
            self.t.drop(s.x.buf)
            s.x = y
        else:  # a block: ``branch`` is its index
            s.x = self.run_block(stack, s.x, s.memory, index=branch)

    def forward(self, more: list | None = None) -> Value:
        """``Transformer.forward``: the stages in order; the stream's references go when it returns. ``more``: a
        list given (``forward(tokens, mtp=True)``) takes multi-token prediction's logits (tape/mtp.py)."""
        s = Stream()
        for kind, stack, index in self.stages():
            self.run_stage(kind, stack, s, branch=index)
        logits = self.head(s.x)
        if more is not None:
            from .mtp import predict_more

            more += predict_more(self, s)
        s.close(self.t)
        return logits

    def loss(self, logits: Value, target: Buf | None = None) -> tuple[Buf, Value | None]:
        """:meth:`cross_entropy` of ``logits`` (``target``: a targets tensor of the step's own that the loss saves;
        None: the batch's)."""
        return self.cross_entropy(logits, target)

    def cross_entropy(self, logits: Value, target: Buf | None = None) -> tuple[Buf, Value | None]:
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
            self._node(loss_value, nll_backward, [log_probs.buf, total_weight, *([target] if target else [])])
        self.t.drop(total_weight, log_probs.buf)
        if wide is not logits:
            self.t.drop(wide.buf)
        return loss, (loss_value if loss_value.tracked else None)
