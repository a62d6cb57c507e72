"""Multi-head latent attention on the tape (DeepSeek-V2, section 2.1): train/model.py's ``LatentAttention.forward``,
op by op, as torch runs it on the CPU.

Its tensors are views of a few storages: the projections' outputs split into their parts (``torch.split``: one
node for all the parts, whose backward concatenates the parts' gradients into one new tensor once they have all
arrived; under a transpose, viewed back through a copy), the rotary parts turned (``rotate``: the slices' zero
tensors in the backward are the part's size), the queries and keys assembled by ``torch.cat`` (the key's rotary
part expanded over the heads: its gradient summed back), then SDPA: the fused kernel where the query and value
heads are alike wide, else its math path.

A mixin-free module of functions over :class:`.ops.Ops` (the tape's other op families are mixins of it).
"""

from __future__ import annotations

from .buffers import FLOAT32, bytes_
from .values import Value


def _size(ops, v: Value, dtype=None):
    return bytes_(v.rows * v.width, ops.g.z if dtype is None else dtype)


def split(ops, parent: Value, widths: list, transposed: bool) -> list[Value]:
    """``torch.split(parent, widths, dim=-1)`` (``transposed``: of a ``.view(...).transpose(1, 2)`` of it): views
    sharing the parent's storage. One node: its backward concatenates the parts' gradients (a new tensor of the
    parent's size; through the transpose, a second one, the view's reshape) and hands it to the parent."""
    parts = []
    for width in widths:
        ops.t.hold(parent.buf)
        parts.append(Value(parent.buf, parent.rows, width, False))
    if not parent.tracked or not ops.graph:
        return parts
    for part in parts[1:]:
        part.tracked = True

    def backward(grad, saved):
        grads = [grad] + [part.grad for part in parts[1:]]
        for part in parts[1:]:
            part.grad = None
        full = ops.t.new(_size(ops, parent), "split_with_sizes_backward")
        ops.t.drop(*grads)
        if transposed:  # ViewBackward: the transposed gradient reshaped, a copy
            copy = ops.t.new(_size(ops, parent), "reshape")
            ops.t.drop(full)
            full = copy
        ops.deliver(parent, full)

    ops._node(parts[0], backward)
    return parts


def slice_view(ops, x: Value, width, label: str) -> Value:
    """A slice of ``x`` (a view): its backward makes a zero tensor of ``x``'s size holding the gradient."""
    ops.t.hold(x.buf)
    out = Value(x.buf, x.rows, width, False)

    def backward(grad, saved):
        full = ops.t.new(_size(ops, x), "slice_backward")
        ops.release(grad, saved)
        ops.deliver(x, full)

    return ops._node(out, backward) if x.tracked else out


def rotate(ops, x: Value) -> Value:
    """``rotate(x, cos, sin)`` over the whole part (:meth:`.ops_attention.AttentionOps.rotate`'s ops), sized by the
    part, not by the storage it views."""
    t, rows, width = ops.t, x.rows, x.width
    size, half = _size(ops, x), bytes_(x.rows * x.width, ops.g.z) // 2
    second = slice_view(ops, x, width / 2, "x[..., half:]")
    negated = Value(t.new(half, "neg"), rows, width / 2, False)
    if x.tracked:
        def neg_backward(grad, saved):
            made = t.new(half, "neg")
            ops.release(grad, saved)
            ops.deliver(second, made)

        ops._node(negated, neg_backward)
    t.drop(second.buf)
    first = slice_view(ops, x, width / 2, "x[..., :half]")
    cat = Value(t.new(size, "cat"), rows, width, False)
    if x.tracked:
        def cat_backward(grad, saved):
            for piece in (first, negated):
                t.hold(grad)
                ops.deliver(piece, grad)
            t.drop(grad)

        ops._node(cat, cat_backward)
    t.drop(negated.buf, first.buf)

    def product(a: Value, label: str) -> Value:
        out = Value(t.new(size, label), rows, width, False)

        def backward(grad, saved):
            made = t.new(size, "mul")
            ops.release(grad, saved)
            ops.deliver(a, made)

        return ops._node(out, backward) if a.tracked else out

    with_cos = product(x, "x cos")
    with_sin = product(cat, "turned sin")
    out = ops.add(with_cos, with_sin, "rotated")
    t.drop(with_cos.buf, with_sin.buf, cat.buf)
    return out


def assemble(ops, passing: Value, turned: Value, expanded: bool, width) -> Value:
    """``torch.cat([passing, turned], dim=-1)`` into a new tensor ``width`` wide per row of heads; its backward hands
    each part a view of the gradient; ``expanded``: the turned part is the key's one rotary part expanded over the
    heads, whose gradient is summed back (a new tensor of its own size)."""
    t = ops.t
    out = ops.value(passing.rows, width, "cat")

    def backward(grad, saved):
        t.hold(grad)
        ops.deliver(passing, grad)
        if expanded:
            summed = t.new(_size(ops, turned), "sum")
            t.drop(grad)
            ops.deliver(turned, summed)
        else:
            ops.deliver(turned, grad)

    return ops._node(out, backward) if (passing.tracked or turned.tracked) else out


def latent_attention(ops, x: Value) -> Value:
    """``LatentAttention.forward`` on ``x`` (rows x d); returns o's output. The caller drops ``x``. The function's
    locals (the projections' outputs and their parts, the turned parts, the query, the key, SDPA's output) live
    until it returns, after o."""
    g, t = ops.g, ops.t
    h, nope, rope, dv = g.h, g.head_dim, g.rope, g.v_head
    rkv = g.kv_lora_rank
    dq = nope + rope
    if g.q_latent:
        qa = ops.linear(x, g.q_rank, "q_a", bias=False)
        qn = ops.rms_norm(qa)
        t.drop(qa.buf)
        q = ops.linear(qn, h * dq, "q_b", bias=False)
        t.drop(qn.buf)
    else:
        q = ops.linear(x, h * dq, "q", bias=False)
    q_pass, q_rot = split(ops, q, [h * nope, h * rope], transposed=True)
    compressed = ops.linear(x, rkv + rope, "kv_a", bias=False)
    latent, k_rot = split(ops, compressed, [rkv, rope], transposed=False)
    kn = ops.rms_norm(latent)
    kv = ops.linear(kn, h * (nope + dv), "kv_b", bias=False)
    t.drop(kn.buf)
    k_pass, v = split(ops, kv, [h * nope, h * dv], transposed=True)
    turned_q = rotate(ops, q_rot)
    t.drop(q_rot.buf)  # (q_rot = rotate(q_rot, ...): the part's view goes)
    k_view = ops.passing(Value(k_rot.buf, k_rot.rows, k_rot.width, False), k_rot)  # .view(batch, 1, rows, rope)
    t.hold(k_view.buf)
    turned_k = rotate(ops, k_view)
    t.drop(k_view.buf, k_rot.buf)
    query = assemble(ops, q_pass, turned_q, False, h * dq)
    key = assemble(ops, k_pass, turned_k, True, h * dq)
    y = fused(ops, query, key, v) if g.latent_fused else math(ops, query, key, v)
    a = ops.passing(ops.value(y.rows, y.width, "transpose reshape"), y)  # y.transpose(1, 2).reshape(...): a copy
    o = ops.linear(a, g.d, "o", bias=False)
    t.drop(a.buf)
    t.drop(q.buf, q_pass.buf, turned_q.buf, compressed.buf, latent.buf, turned_k.buf, kv.buf, k_pass.buf, v.buf,
           query.buf, key.buf, y.buf)  # (the function's locals, at its return)
    return o


def fused(ops, q: Value, k: Value, v: Value) -> Value:
    """SDPA's fused kernel on the CPU (query and value heads alike wide): its output and float32 log-sum-exp; it
    saves q, k, v (a view of kv_b's output: its storage), the output and the log-sum-exp; its backward makes the
    three gradients, each its input's size."""
    g, t = ops.g, ops.t
    a = ops.value(q.rows, v.width, "sdpa")
    lse = t.new(bytes_(g.h * q.rows, FLOAT32), "logsumexp")

    def backward(grad, saved):
        dq = t.new(_size(ops, q), "dq")
        dk = t.new(_size(ops, k), "dk")
        dv = t.new(_size(ops, v), "dv")
        ops.release(grad, saved)
        ops.deliver(q, dq)
        ops.deliver(k, dk)
        ops.deliver(v, dv)

    ops._node(a, backward, [q.buf, k.buf, v.buf, a.buf, lse])
    t.drop(lse)
    return a


def math(ops, q: Value, k: Value, v: Value) -> Value:
    """SDPA's math path on the CPU (query heads wider than value heads: no fused kernel takes them), as torch 2.13
    composes it: under bf16, q, k and v copied to float32 first; q scaled; the causal mask built (ones, tril,
    then ``where`` into float32: two scalar tensors); k transposed and scaled; the scores (bmm), the mask added (a
    new tensor), ``_safe_softmax`` (it saves its output; under bf16 a copy cast back, unused), v copied contiguous,
    the product with v (under bf16 cast back); the mask and the copies go as the function returns."""
    g, t = ops.g, ops.t
    wide = g.z < FLOAT32
    f = FLOAT32 if wide else g.z
    L = q.rows // g.B  # query rows per sequence (keys alike: self-attention)
    scores_rows = g.h * q.rows * L
    widened = []
    for x in (q, k, v):
        if wide:
            widened.append(ops.derivative(ops.value(x.rows, x.width, "to float32", f), [x], [],
                                          [(_size(ops, x), "_to_copy")]))
        else:
            widened.append(x)
    q32, k32, v32 = widened
    qs = ops.scalar(q32, "q * s")  # (its backward: the gradient scaled, a new tensor)
    ones = t.new(bytes_(L * L, 1), "ones")
    lower = t.new(bytes_(L * L, 1), "tril")
    t.drop(ones)
    zero, minus = t.new(bytes_(1, FLOAT32), "scalar_tensor"), t.new(bytes_(1, FLOAT32), "scalar_tensor")
    mask = t.new(bytes_(L * L, f), "where")
    t.drop(lower, zero, minus)
    ks = ops.scalar(k32, "kT * s")
    scores = ops.derivative(ops.value(scores_rows, 1, "q kT", f), [qs, ks], [qs.buf, ks.buf],
                            [(_size(ops, qs, f), "bmm"), (_size(ops, ks, f), "bmm")])
    t.drop(ks.buf)  # (k's scaled transpose is the product's temporary; the scaled q a local to the return)
    added = ops.passing(ops.value(scores_rows, 1, "+ mask", f), scores)  # (a new tensor; its gradient passes on)
    t.drop(scores.buf)
    attn = ops.derivative(ops.value(scores_rows, 1, "_safe_softmax", f), [added], [],
                          [(bytes_(scores_rows, f), "_softmax_backward_data")])
    if attn.tracked:
        ops.nodes[-1][2].append(attn.buf)  # softmax saves its output
        t.hold(attn.buf)
    t.drop(added.buf)
    narrow = t.new(bytes_(scores_rows, g.z), "attn.to") if wide else None  # the weights returned, unused
    vc = ops.passing(ops.value(v.rows, v.width, "v contiguous", f), v32)
    y = ops.value(q.rows, v.width, "attn v", f)

    def values_backward(grad, saved_):
        contiguous = t.new(_size(ops, y, f), "clone")
        t.drop(grad)
        dv = t.new(_size(ops, vc, f), "bmm")
        dattn = t.new(bytes_(scores_rows, f), "bmm")
        t.drop(contiguous)
        t.drop(*saved_)
        ops.deliver(vc, dv)
        ops.deliver(attn, dattn)

    if attn.tracked or vc.tracked:
        ops._node(y, values_backward, [attn.buf, vc.buf])
    t.drop(vc.buf, attn.buf)
    out = y
    if wide:
        out = ops.derivative(ops.value(y.rows, y.width, "to", g.z), [y], [], [(_size(ops, y, f), "_to_copy")])
        t.drop(y.buf)
    t.drop(qs.buf, mask, narrow, *(x.buf for x in widened if wide))
    return out
