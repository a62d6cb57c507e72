"""Multi-token prediction on the tape (DeepSeek-V3 Technical Report, section 2.2): ``Transformer._predict_more``
and ``objective.mtp_loss`` of train/model.py and train/objective.py, as BP's step runs them.

Module k: the sequence's ids rolled (a new int64 tensor, which the embedding's node saves), the model's table
gathered, an RMSNorm of it and one of the hidden state before, their concatenation, the projection, a block of the
decoder's kind, a norm and the model's head. The loss: the main cross-entropy, then each module's against its
rolled targets (saved by its nll node), summed from 0 (Python's ``sum``), times lambda / D, added to the main one:
float32 scalars, each op a new one.
"""

from __future__ import annotations

from .buffers import FLOAT32, INT64, Buf, bytes_
from .values import Stream, Value


def predict_more(ops, s: Stream) -> list[Value]:
    """The modules' logits, in order, after the main head (``s``: the stream, its ``hidden`` the decoder's output
    before its final norm). The caller's stream keeps its references until the forward returns."""
    g, t = ops.g, ops.t
    M, d = g.M("decoder"), g.d
    t.hold(s.hidden.buf)  # _predict_more's `hidden`
    hidden, normed, extra = s.hidden, None, []
    for _ in range(g.mtp_depth):
        ids = t.new(bytes_(M, INT64), "roll")  # torch.roll(ids, -(k + 1), dims=1)
        emb = ops.value(M, d, "mtp embedding")

        def embedding_backward(grad, saved):
            ops.table_grad(label="embedding grad", then=lambda: ops.release(grad, saved))

        ops._node(emb, embedding_backward, [ids])  # (the indices, saved)
        t.drop(ids)
        e = ops.norm(emb)
        t.drop(emb.buf)
        h = ops.norm(hidden)
        joined = concat(ops, e, h)
        t.drop(e.buf, h.buf)
        x = ops.linear(joined, d, "mtp.projection", bias=False)
        t.drop(joined.buf)
        y = ops.run_block("decoder", x, None)  # (the projection's output goes once the block returns)
        out = ops.norm(y)
        t.drop(hidden.buf, normed.buf if normed is not None else None)  # hidden, normed = module.predict(...)
        hidden, normed = y, out
        extra.append(ops.capped_logits(ops.linear(normed, g.out, "head", unit=False, bias=g.head_bias, table=True)))
    t.drop(hidden.buf, normed.buf if normed is not None else None)
    return extra


def concat(ops, a: Value, b: Value) -> Value:
    """``torch.cat([a, b], dim=-1)``: a new tensor; its backward hands each input a view of the gradient."""
    out = ops.value(a.rows, a.width + b.width, "cat")

    def backward(grad, saved):
        for piece in (a, b):
            ops.t.hold(grad)
            ops.deliver(piece, grad)
        ops.t.drop(grad)

    return ops._node(out, backward) if (a.tracked or b.tracked) else out


def _scalar(ops, label: str) -> Value:
    return Value(ops.t.new(bytes_(1, FLOAT32), label), 1, 1, False)


def _sum(ops, a: Value, b: Value | None, label: str) -> Value:
    """a + b of float32 scalars (b None: a Python number): a new scalar; its backward hands the gradient on."""
    out = _scalar(ops, label)

    def backward(grad, saved):
        for operand in (a, b):
            if operand is not None and operand.tracked:
                ops.t.hold(grad)
                ops.deliver(operand, grad)
        ops.t.drop(grad)

    return ops._node(out, backward) if (a.tracked or (b is not None and b.tracked)) else out


def mtp_loss(ops, logits: Value, extra: list[Value]) -> tuple[Buf, Value | None]:
    """``objective.mtp_loss``: the main loss plus lambda / D times the modules' summed losses. Returns the loss
    scalar and, with a graph, the value to seed."""
    t, rows = ops.t, ops.g.out_rows
    total_buf, total = ops.loss(logits)
    total = total if total is not None else Value(total_buf, 1, 1, False)
    summed = None
    for x in extra:
        shifted = t.new(bytes_(rows, INT64), "roll targets")  # objective.shifted_targets, then filled in place
        t.drop(t.new(bytes_(1, INT64), "lift_fresh"))  # (with IGNORE, a scalar tensor made for the assignment)
        buf, value = ops.loss(x, shifted)
        t.drop(shifted)  # (saved by its nll node)
        value = value if value is not None else Value(buf, 1, 1, False)
        added = _sum(ops, value, None, "0 + loss") if summed is None else _sum(ops, summed, value, "+ loss")
        t.drop(buf, summed.buf if summed is not None else None)
        summed = added
    scaled = ops.scalar(summed, "* weight / D")
    t.drop(summed.buf)
    out = _sum(ops, total, scaled, "total")
    t.drop(total.buf, scaled.buf)
    return out.buf, (out if out.tracked else None)
