"""The executed memory model: tensor bytes alive through one training step, op by op, from shapes alone.

The hand model (:mod:`.memory`) adds up components. Peaks are set by what is alive *together*, so this
module replays one step of our PyTorch code (``train/model.py`` and each rule's ``step.py``) as a tape of
allocations and frees, on CPU and without torch: every op output the tensor meter
(:class:`trainingcost.measure.memory.TensorMeter`) would count, freed when the last reference to it goes
(a Python variable reassigned, a saved tensor released by its autograd node, a gradient consumed). The tape
is vectorised: each event's size is an array over a group of configurations of the same structure.

What the tape follows, and where it comes from:

- the forward pass of the model's stages, with what autograd saves (the inputs of each linear layer, the
  fused attention's q, k, v, output and float32 log-sum-exp, LayerNorm's input, mean and rstd, GELU's
  input, ReLU's output, a gated FFN's two factors, the ids of learned positions and token types) and what
  Python variables keep alive (a branch's output until its sublayer returns, a pre-LN branch's normalised
  input while the branch runs);
- autograd's backward in reverse order of creation (the engine's order when every node leads to the loss):
  a node allocates its outputs, then releases its input gradient and its saved tensors, then hands its
  outputs on; a tensor that receives a second gradient allocates their sum (``add``). Weight gradients
  become ``.grad`` without a copy;
- the loss in at least float32 (a bf16 model's logits are widened: one more float32 copy);
- PEPITA's and MEMPEPITA's passes without a graph, the outputs their forward hooks keep, their per-layer
  updates (``sub``, ``mm``, the division by the row count, LayerNorm's recomputed normalisation);
- DFA's detached segments and projections, WM's mirror steps, KP's copied feedback gradients;
- the optimizer on CPU: torch's single-tensor loops (``foreach`` is off on CPU). Adam keeps one
  ``denom`` from the previous parameter while it builds the next (``sqrt``, then ``div``); SGD with weight
  decay builds ``grad + wd * param`` per parameter.

Not modelled: the batch (token ids and targets: the input pipeline's, not the step's; the meter counts it
separately) and CUDA's ``foreach`` optimizers (a GPU run's optimizer transients differ).

The tests compare this tape with the meter's reading to the byte (``tests/test_peaks.py``).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np

from . import catalogue
from . import layers as L
from .spec import EXECUTION_PHASES

FLOAT32, INT64, BOOL = 4, 8, 1
STEP_PHASES = EXECUTION_PHASES


class Buf:
    """One storage on the tape: its bytes (an array over the group) and how many references hold it."""

    __slots__ = ("nbytes", "refs", "label", "expanded", "strided")

    def __init__(self, nbytes: np.ndarray, label: str):
        self.nbytes, self.refs, self.label = nbytes, 1, label
        # How a linear layer's backward reads this gradient: ``expanded`` (seen through expand(), or the math
        # attention's k gradient, transposed): each of its three products reads a contiguous copy; ``strided`` (the
        # math attention's q and v gradients): one contiguous copy, which replaces it.
        self.expanded = self.strided = False


class Tape:
    """Live bytes of a group of configurations, event by event, with the peak of every phase."""

    def __init__(self, start: np.ndarray):
        self.live = np.asarray(start, dtype=np.int64).copy()
        self.start = self.live.copy()
        self.peak = self.live.copy()
        self.phase = "forward"
        self.phase_peaks: dict[str, np.ndarray] = {}
        self.events: list[tuple[str, np.ndarray, str, str]] | None = None  # (+/-, bytes, label, phase) to debug

    def new(self, nbytes, label: str = "") -> Buf:
        buf = Buf(np.broadcast_to(np.asarray(nbytes, dtype=np.int64), self.live.shape), label)
        self.live = self.live + buf.nbytes
        self._mark()
        if self.events is not None:
            self.events.append(("+", buf.nbytes, label, self.phase))
        return buf

    def hold(self, *bufs: Buf | None) -> None:
        for buf in bufs:
            if buf is not None:
                buf.refs += 1

    def drop(self, *bufs: Buf | None) -> None:
        for buf in bufs:
            if buf is None:
                continue
            if buf.refs <= 0:
                raise RuntimeError(f"tape: {buf.label} dropped twice")
            buf.refs -= 1
            if buf.refs == 0:
                self.live = self.live - buf.nbytes
                if self.events is not None:
                    self.events.append(("-", buf.nbytes, buf.label, self.phase))

    def _mark(self) -> None:
        self.peak = np.maximum(self.peak, self.live)
        if self.phase in self.phase_peaks:
            self.phase_peaks[self.phase] = np.maximum(self.phase_peaks[self.phase], self.live)
        else:
            self.phase_peaks[self.phase] = self.live.copy()

    @contextmanager
    def in_phase(self, name: str):
        previous, self.phase = self.phase, name
        self._mark()  # a phase's peak counts what is alive when it begins
        try:
            yield
        finally:
            self.phase = previous


def bytes_(elements, size: int) -> np.ndarray:
    return np.asarray(elements, dtype=np.int64) * size


# ---------------------------------------------------------------------------
# Shapes of a group


@dataclass
class Group:
    """Configurations of one structure (arch, depths, head): the sizes are arrays, the structure is shared."""

    arch: str
    depth: dict[str, int]  # stack -> blocks
    classifier: bool
    B: np.ndarray
    d: np.ndarray
    ff: np.ndarray
    h: np.ndarray
    V: np.ndarray
    C: np.ndarray
    rows: dict[str, np.ndarray]  # stack -> positions per sequence
    z: int  # bytes per element of the model's dtype
    qkv_bias: bool = True  # the architecture options the tape follows (issue 14): biases of q, k, v ...
    out_bias: bool = True  # ... of o and the FFN's matrices ...
    head_bias: bool = True  # ... and of the head
    tied: bool = False  # one V x d table: every stack's embedding and the head
    grouped: bool = False  # fewer key/value heads than heads: K and V repeated to every head (a copy each) ...
    single_kv: bool = False  # ... but for one key/value head (a view)
    a: np.ndarray | None = None  # heads x head_dim: queries and attention output (None: d)
    kv: np.ndarray | None = None  # kv_heads x head_dim: keys and values (None: d)
    relu: bool = False  # the FFN's activation is ReLU (saves its output) instead of GELU (saves its input)
    gated: bool = False  # a gated FFN (SwiGLU, GeGLU): act(x W_gate) * (x W_up), then W_down
    positions: str = "sinusoidal"  # "sinusoidal" (a buffer added), "learned" (a table gathered), "none"
    types: np.ndarray | None = None  # rows of BERT's token-type table (None: no token types)
    max_pos: np.ndarray | None = None  # rows of a learned position table (0: the stack's rows)
    embedding_norm: bool = False  # a norm after the embedding's tables (BERT)
    pre: bool = False  # pre-LN: x + branch(norm(x)), and a final norm per stack
    rms: bool = False  # RMSNorm (a weight, no bias) instead of LayerNorm
    rotary: bool = False  # rotary positions: q and k of every self-attention turned before SDPA
    relative: np.ndarray | None = None  # T5's relative bias: the table's buckets (None: no relative bias)

    @property
    def norm_parameters(self) -> list[np.ndarray]:
        """A norm's parameter tensors: LayerNorm's gamma and beta, RMSNorm's weight."""
        return [self.d] if self.rms else [self.d, self.d]

    def position_rows(self, stack: str) -> np.ndarray:
        """Rows of a stack's learned position table (``ModelConfig.position_rows``)."""
        return np.where(self.max_pos > 0, self.max_pos, self.rows[stack])

    @property
    def q_width(self) -> np.ndarray:
        return self.d if self.a is None else self.a

    @property
    def kv_width(self) -> np.ndarray:
        return self.d if self.kv is None else self.kv

    @property
    def stacks(self) -> tuple[str, ...]:
        return L.stacks(self.arch)

    @property
    def out(self) -> np.ndarray:
        return np.where(self.classifier, self.C, self.V)

    @property
    def out_stack(self) -> str:
        return self.stacks[-1]

    def M(self, stack: str) -> np.ndarray:
        return self.B * self.rows[stack]

    @property
    def out_rows(self) -> np.ndarray:
        """Rows of logits (and of targets): one per sequence for a classifier, else one per output position."""
        return self.B if self.classifier else self.M(self.out_stack)

    def aligned(self, stack: str) -> bool:
        """Whether the output error has one row per position of ``stack`` (ModelConfig.error_aligned)."""
        return not self.classifier and stack == self.out_stack

    def linears(self) -> list[tuple[int, int]]:
        """(in, out) of every weight matrix, in the order of ``model.parameters()``; sizes are arrays."""
        out: list[tuple] = []
        for stack in self.stacks:
            for _ in range(self.depth[stack]):
                for sub in L.block_sublayers(self.arch, stack):
                    family = L.KINDS[sub.kind].family
                    if family == "attention":
                        out += [(self.d, self.q_width), (self.d, self.kv_width), (self.d, self.kv_width),
                                (self.q_width, self.d)]
                    elif family == "ffn":
                        out += [(self.d, self.ff)] * (2 if self.gated else 1) + [(self.ff, self.d)]
        return out + [(self.d, self.out)]

    def parameters(self, feedback_parameters: bool = False) -> list[np.ndarray]:
        """Elements of every parameter tensor, in the order of ``model.parameters()`` (KP: W, b, B per linear)."""
        sizes: list[np.ndarray] = []

        def linear(n_in, n_out, bias):
            sizes.extend([n_in * n_out] + ([n_out] if bias else []) + ([n_in * n_out] if feedback_parameters else []))

        for stack in self.stacks:
            if not (self.tied and stack != self.stacks[0]):
                sizes.append(self.V * self.d)  # token embedding (a tied table once, with the first stack)
            if self.types is not None:
                sizes.append(self.types * self.d)
            if self.positions == "learned":
                sizes.append(self.position_rows(stack) * self.d)
            if self.embedding_norm:
                sizes.extend(self.norm_parameters)
            for _ in range(self.depth[stack]):
                for sub in L.block_sublayers(self.arch, stack, self.pre):  # (pre-LN: each norm before its branch)
                    family = L.KINDS[sub.kind].family
                    if family == "attention":
                        linear(self.d, self.q_width, self.qkv_bias)
                        linear(self.d, self.kv_width, self.qkv_bias)
                        linear(self.d, self.kv_width, self.qkv_bias)
                        linear(self.q_width, self.d, self.out_bias)
                    elif family == "ffn":
                        for _ in range(2 if self.gated else 1):  # (gated: the gate's matrix, then the up one)
                            linear(self.d, self.ff, self.out_bias)
                        linear(self.ff, self.d, self.out_bias)
                    else:
                        sizes.extend(self.norm_parameters)
            if self.pre:
                sizes.extend(self.norm_parameters)  # the stack's final norm
        if self.tied:  # the head's weight is the table: only its bias (and KP's B) are its own
            sizes.extend(([self.out] if self.head_bias else []) + ([self.d * self.out] if feedback_parameters else []))
        else:
            linear(self.d, self.out, self.head_bias)
        return sizes


# ---------------------------------------------------------------------------
# The model's ops, with or without autograd


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
        if not self.g.tied or not self.table_has_grad:
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
        rebinds it."""
        rows, width = x.rows, x.width
        second = self.view(x, width / 2, "x[..., half:]")
        negated = self.value(rows, width / 2, "neg")
        if x.tracked:
            def neg_backward(grad, saved):
                made = self.t.new(negated.buf.nbytes, "neg")
                self.release(grad, saved)
                self.deliver(second, made)

            self._node(negated, neg_backward)
        self.t.drop(second.buf)
        first = self.view(x, width / 2, "x[..., :half]")
        turned = self.value(rows, width, "cat")
        if x.tracked:
            def cat_backward(grad, saved):  # each input's gradient is a view of this one
                self.t.hold(grad)
                self.deliver(first, grad)
                self.deliver(negated, grad)

            self._node(turned, cat_backward)
        self.t.drop(negated.buf, first.buf)

        def product(a: Value, label: str) -> Value:
            out = self.value(rows, width, label)

            def backward(grad, saved):
                made = self.t.new(a.buf.nbytes, "mul")
                self.release(grad, saved)
                self.deliver(a, made)

            return self._node(out, backward) if a.tracked else out

        with_cos = product(x, "x cos")
        with_sin = product(turned, "turned sin")
        out = self.add(with_cos, with_sin, "rotated")
        self.t.drop(with_cos.buf, with_sin.buf, turned.buf)
        return out

    def attention(self, x: Value, source: Value, rotary: bool = False, bias: Value | None = None) -> Value:
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
            o = self.linear(a, self.g.d, "o", bias=self.g.out_bias)
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
        o = self.linear(a, self.g.d, "o", bias=self.g.out_bias)
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
        self.t.drop(ks.buf)
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
        out = y
        if wide:
            out = self.derivative(self.value(q.rows, q.width, "to", g.z), [y], [], [(y.buf.nbytes, "_to_copy")])
            self.t.drop(y.buf)
        self.t.drop(qs.buf, qc.buf, attn.buf, weights, *(x.buf for x in widened if wide),
                    *([] if k_dense else [kc.buf]), *([] if v_dense else [vc.buf]))
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
            self.param_grad(self.g.d, label="grad_gamma")
            self.param_grad(self.g.d, label="grad_beta")
            self.release(grad, saved)
            self.deliver(s, grad_s)

        self._node(y, backward, [s.buf, mean, rstd])
        self.t.drop(mean, rstd)
        if self.hook is not None:
            self.hook("norm", s, y)
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

    def branch(self, sub, x: Value, memory: Value | None) -> Value:
        """A sublayer's branch output: attention (cross-attention reads the encoder output) or the FFN."""
        if L.KINDS[sub.kind].family == "attention":
            cross = sub.kind == "cross_attention"
            return self.attention(x, memory if cross else x, rotary=self.g.rotary and not cross,
                                  bias=self.bias if sub.name == "self_attention" else None)
        hidden = self.up(x)
        out = self.linear(hidden, self.g.d, "ffn.down", bias=self.g.out_bias)
        self.t.drop(hidden.buf)
        return out

    def pairs(self, stack: str) -> list[tuple]:
        """(branch, add & norm) sublayers of one block of ``stack`` (``Block.pairs``)."""
        subs = L.block_sublayers(self.g.arch, stack)
        return [(subs[i], subs[i + 1]) for i in range(0, len(subs), 2)]

    def sublayer(self, branch, x: Value, memory: Value | None) -> Value:
        """``Block.sublayer``: post-LN norm(x + branch(x)), pre-LN x + branch(norm(x)); the branch's output (and
        the normalised input) go when it returns."""
        h = self.norm(x) if self.g.pre else x
        out = self.branch(branch, h, memory)
        y = self.add(x, out) if self.g.pre else self.add_norm(x, out)
        self.t.drop(out.buf)
        if h is not x:
            self.t.drop(h.buf)
        return y

    def block(self, stack: str, x: Value, memory: Value | None) -> Value:
        """One block (``Block.forward``, one ``Block.sublayer`` per pair); the block's input stays with the caller."""
        for branch, _ in self.pairs(stack):
            y = self.sublayer(branch, x, memory)
            if x is not self._block_input:
                self.t.drop(x.buf)
            x = y
        return x

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
        if self.g.classifier:
            pooled = self.mean_rows(x)
            logits = self.linear(pooled, self.g.out, "head", unit=False, bias=self.g.head_bias, table=True)
            self.t.drop(pooled.buf)
            return logits
        return self.linear(x, self.g.out, "head", unit=False, bias=self.g.head_bias, table=True)

    def stages(self, by: str = "block") -> list[tuple]:
        """(kind, stack, pair) of every stage but the head, in order (``Transformer.stages(by)``)."""
        out = []
        for stack in self.g.stacks:
            out.append(("embedding", stack, None))
            for _ in range(self.g.depth[stack]):
                if by == "sublayer":
                    out += [("sublayer", stack, pair) for pair in self.pairs(stack)]
                else:
                    out.append(("block", stack, None))
            if self.g.pre:
                out.append(("norm", stack, None))  # the stack's final norm
        return out

    def run_stage(self, kind: str, stack: str, s: "Stream", modulation: Value | None = None, pair=None) -> None:
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
            y = self.sublayer(pair[0], s.x, s.memory)
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


# ---------------------------------------------------------------------------
# The optimizer (torch's single-tensor loops on CPU)


def optimizer_step(t: Tape, g: Group, optimizer: str, weight_decay: float, kp: bool = False) -> None:
    sizes = [bytes_(p, g.z) for p in g.parameters(kp)]
    if optimizer == "adam":  # AdamW: decay in place; denom = sqrt(v) / c2 + eps, kept until the next one
        previous = None
        for size in sizes:
            root = t.new(size, "sqrt")
            denom = t.new(size, "div")
            t.drop(root, previous)
            previous = denom
        t.drop(previous)
    elif weight_decay:  # SGD (with or without momentum): grad = grad + wd * param, one parameter at a time
        for size in sizes:
            t.drop(t.new(size, "add"))


# ---------------------------------------------------------------------------
# The rules' steps


def autograd_step(t: Tape, g: Group, optimizer: str, weight_decay: float, kp: bool = False) -> Ops:
    """BP, FA, KP, WM: the model's forward, the loss, autograd's backward, the optimizer (Backprop.step)."""
    ops = Ops(t, g, graph=True, kp=kp)
    with t.in_phase("forward"):
        logits = ops.forward()
        loss, root = ops.loss(logits)
        t.drop(logits.buf)
    with t.in_phase("backward"):
        seed = t.new(np.full_like(t.live, FLOAT32), "ones_like")
        t.hold(seed)  # the engine keeps the root gradient until the backward ends
        ops.backward([(root, seed)])
        t.drop(seed)
    with t.in_phase("optimizer_step"):
        optimizer_step(t, g, optimizer, weight_decay, kp)
    return ops


def mirror(t: Tape, g: Group, steps: int) -> None:
    """WM's mirror steps (``WeightMirror.mirror``): per weight matrix, float32 noise x (cast to the dtype),
    y = x Wᵀ, B += yᵀx, and B rescaled by its norm accumulated in float64; x and y live until the next matrix
    replaces them."""
    seen = {"encoder": g.M("encoder") if "encoder" in g.stacks else None, "decoder": g.M("decoder") if "decoder" in g.stacks else None}
    rows = []  # rows each weight matrix saw in the step, in the order of model.linears()
    for stack in g.stacks:
        for _ in range(g.depth[stack]):
            for sub in L.block_sublayers(g.arch, stack):
                family = L.KINDS[sub.kind].family
                if family == "attention":
                    source = seen["encoder"] if sub.kind == "cross_attention" else seen[stack]
                    rows += [seen[stack], source, source, seen[stack]]
                elif family == "ffn":
                    rows += [seen[stack]] * (3 if g.gated else 2)
    rows.append(g.out_rows)
    for _ in range(steps):
        x = y = None
        for (n_in, n_out), r in zip(g.linears(), rows):
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


def dfa_step(t: Tape, g: Group, optimizer: str, weight_decay: float) -> None:
    """``DirectFeedbackAlignment.step``: detached segments, the head's backward, B_i e per point, their backward."""
    ops = Ops(t, g, graph=True)
    with t.in_phase("forward"):
        points: list[tuple[str, Value]] = []  # (stack, a stage's output): kept by the step until it returns
        x = memory = last_out = None
        for stack in g.stacks:
            if stack == "decoder" and x is not None:
                memory = x
            elif x is not None:
                t.drop(x.buf)
            out = ops.embed(stack)
            if g.relative is not None:  # stream.position_bias, set by the embedding stage
                bias = ops.relative_bias(stack)
                t.drop(ops.bias.buf if ops.bias is not None else None)
                ops.bias = bias
            points.append((stack, out))
            x = ops.detach(out)
            for _ in range(g.depth[stack]):
                out = ops.run_block(stack, x, memory)
                points.append((stack, out))
                x = ops.detach(out)
            if g.pre:  # the final norm ends the last block's segment; the step's local `out` keeps the block's output
                _, out = points.pop()
                t.drop(x.buf)  # stream.x = out, normalised
                normed = ops.norm(out)
                points.append((stack, normed))
                x = ops.detach(normed)
                t.drop(last_out.buf if last_out is not None else None)
                last_out = out
        if g.classifier:
            pooled = ops.value(g.B, g.d, "mean")  # of a detached tensor: no graph
            head_input = Value(pooled.buf, g.B, g.d, True)
        else:
            head_input = ops.detach(x, leaf=True)
        before_head = len(ops.nodes)
        logits = ops.linear(head_input, g.out, "head", bias=g.head_bias, table=True)
        loss, root = ops.loss(logits)
        t.drop(logits.buf)
    with t.in_phase("backward"):
        seed = t.new(np.full_like(t.live, FLOAT32), "ones_like")
        t.hold(seed)
        ops.backward([(root, seed)], since=before_head)
        t.drop(seed)
    # head_input.grad, DFA's error, stays alive to the end of the step
    grads = []
    with t.in_phase("error_projection"):
        for stack, out in points:
            if g.aligned(stack):
                grads.append(t.new(bytes_(g.M(stack) * g.d, g.z), "error @ B"))
                continue
            summed = None if g.classifier else t.new(bytes_(g.B * g.d, g.z), "sum")
            product = t.new(bytes_(g.B * g.d, g.z), "mm")
            grads.append(t.new(bytes_(g.B * g.d, g.z), "div"))
            grads[-1].expanded = True  # (unsqueeze(1).expand_as(out): a view over the positions)
            t.drop(product, summed)
    with t.in_phase("backward"):
        t.hold(*grads)  # the list `grads` keeps them
        ops.backward(list(zip([out for _, out in points], grads)))
    with t.in_phase("optimizer_step"):
        optimizer_step(t, g, optimizer, weight_decay)
    t.drop(last_out.buf if last_out is not None else None, ops.bias.buf if ops.bias is not None else None)


def wm_step(t: Tape, g: Group, optimizer: str, weight_decay: float, mirror_steps: int = 1) -> None:
    autograd_step(t, g, optimizer, weight_decay)
    with t.in_phase("mirror"):
        mirror(t, g, mirror_steps)


def output_error(t: Tape, g: Group) -> Buf:
    """``objective.output_error``: softmax(logits) - onehot(targets) in place on the float32 softmax, in the
    logits' dtype."""
    rows, width = g.out_rows, g.out
    valid = t.new(bytes_(rows, BOOL), "targets != IGNORE")
    if g.z < FLOAT32:
        wide = t.new(bytes_(rows * width, FLOAT32), "to_float32")
        error = t.new(bytes_(rows * width, FLOAT32), "softmax")
        t.drop(wide)
    else:
        error = t.new(bytes_(rows * width, FLOAT32), "softmax")
    index = t.new(bytes_(rows, INT64), "clamp")
    ones = t.new(bytes_(rows, FLOAT32), "valid.to")
    negative = t.new(bytes_(rows, FLOAT32), "neg")
    t.drop(ones, index, negative)
    narrow = t.new(bytes_(rows * width, g.z), "error.to") if g.z < FLOAT32 else None  # return error.to(dtype),
    t.drop(t.new(np.full_like(t.live, INT64), "valid.sum"))  # int(valid.sum())
    if narrow is not None:
        t.drop(error)
        error = narrow
    t.drop(valid)
    return error


def pepita_step(t: Tape, g: Group, optimizer: str, weight_decay: float, recompute: bool = False) -> None:
    """``Pepita.step`` (``recompute``: MEMPEPITA's): a standard pass without a graph whose unit outputs the
    forward hooks keep (MEMPEPITA: none), the output error, F e per stack, then stage by stage (embedding, each
    sublayer with its add & norm, head) the modulated pass (hooks keep each unit's input and output) and the
    updates, which free them stage by stage."""
    ops = Ops(t, g, graph=False)
    clean: list[Buf] = []  # the standard pass's unit outputs, in order, until their update pops them
    modulated: list[tuple[Value, Value]] = []  # this stage's (input, output) per unit

    def keep_clean(kind, x, out):
        t.hold(out.buf)
        clean.append(out.buf)

    def keep_modulated(kind, x, out):
        t.hold(x.buf, out.buf)
        modulated.append((kind, x, out))

    with t.in_phase("forward"):
        ops.hook = None if recompute else keep_clean
        logits = ops.forward()
        ops.hook = None
        loss, _ = ops.loss(logits)
        error = output_error(t, g)
        t.drop(logits.buf)
    modulation: dict[str, Value] = {}
    with t.in_phase("error_projection"):
        mean = None  # `per_sequence`, a local of Pepita.modulation: alive until it returns
        for stack in g.stacks:
            if g.aligned(stack):
                modulation[stack] = ops.value(g.M(stack), g.d, "e F")
                continue
            if not g.classifier:
                mean = t.new(bytes_(g.B * g.out, g.z), "mean")
            modulation[stack] = ops.value(g.B, g.d, "e F")
        t.drop(mean)
    mod, reference = Stream(), Stream()
    for kind, stack, pair in ops.stages(by="sublayer"):
        if recompute:
            with t.in_phase("forward"):
                ops.hook = keep_clean
                ops.run_stage(kind, stack, reference, pair=pair)
        with t.in_phase("modulated_pass"):
            ops.hook = keep_modulated
            ops.run_stage(kind, stack, mod, modulation[stack] if kind == "embedding" else None, pair)
            ops.hook = None
        with t.in_phase("weight_update"):
            if kind == "embedding":  # Pepita._update_embedding
                # the per-sequence shift, expanded over positions, then flattened: a copy (a local to the end)
                flat = None if g.aligned(stack) else t.new(bytes_(g.M(stack) * g.d, g.z), "shift.reshape")
                grad = t.new(bytes_(g.V * g.d, g.z), "zeros_like")  # becomes .grad ...
                if not (g.tied and ops.table_has_grad):  # ... or, tied, is added into it (freed when rebound)
                    t.hold(grad)
                ops.table_has_grad = True
                smaller = []  # token types: row 0 gets the shift summed over rows; learned positions: per position
                if g.types is not None:
                    smaller.append((g.types, np.ones_like(g.d)))
                if g.positions == "learned":
                    smaller.append((g.position_rows(stack), g.rows[stack]))
                for table_rows, rows in smaller:
                    new = t.new(bytes_(table_rows * g.d, g.z), "zeros_like")  # becomes the table's .grad
                    t.drop(grad)
                    grad = new
                    t.hold(grad)
                    total = t.new(bytes_(rows * g.d, g.z), "sum")
                    t.drop(t.new(bytes_(rows * g.d, g.z), "mul"), total)
                t.drop(grad, flat)
            for unit, x_mod, h_mod in modulated:
                h = clean.pop(0)
                rows, n_in, n_out = x_mod.rows, x_mod.width, h_mod.width
                diff = t.new(bytes_(rows * n_out, g.z), "h - h_mod")
                if unit in ("norm", "rms norm"):
                    if unit == "norm":
                        normalised = t.new(bytes_(rows * n_out, g.z), "layer_norm")
                        t.drop(t.new(bytes_(rows, g.z), "mean"), t.new(bytes_(rows, g.z), "rstd"))
                    else:  # F.rms_norm without a weight: the composite of Ops.rms_norm, in float32 for bf16
                        wide = g.z < FLOAT32
                        widened = t.new(bytes_(rows * n_out, FLOAT32), "to_float32") if wide else None
                        square = t.new(bytes_(rows * n_out, FLOAT32), "pow")
                        mean = t.new(bytes_(rows, FLOAT32), "mean")
                        r = t.new(bytes_(rows, FLOAT32), "rsqrt")
                        t.drop(mean, square)
                        normalised = t.new(bytes_(rows * n_out, FLOAT32), "mul")
                        t.drop(widened)
                        if wide:
                            narrow = t.new(bytes_(rows * n_out, g.z), "to")
                            t.drop(normalised)
                            normalised = narrow
                        t.drop(r)
                    product = t.new(bytes_(rows * n_out, g.z), "diff * normalised")
                    total = t.new(bytes_(n_out, g.z), "sum")
                    t.drop(product)
                    t.new(bytes_(n_out, g.z), "grad_gamma")
                    t.drop(total)
                    to_drop = [normalised]
                else:
                    product = t.new(bytes_(n_out * n_in, g.z), "mm")
                    t.new(bytes_(n_out * n_in, g.z), "grad_w")
                    t.drop(product)
                    to_drop = []
                if unit not in ("linear without bias", "rms norm"):
                    total = t.new(bytes_(n_out, g.z), "sum")
                    t.new(bytes_(n_out, g.z), "grad_b")
                    t.drop(total)
                t.drop(*to_drop, diff, h)
            for _, x_mod, h_mod in modulated:
                t.drop(x_mod.buf, h_mod.buf)
            modulated.clear()
    with t.in_phase("modulated_pass"):
        head_input = ops.value(g.B, g.d, "mean") if g.classifier else ops.detach(mod.x)
    with t.in_phase("weight_update"):
        product = t.new(bytes_(g.out * g.d, g.z), "mm")
        head_grad = t.new(bytes_(g.out * g.d, g.z), "head grad_w")
        t.drop(product)
        if g.tied:  # added into the table's .grad (the embedding's update made it), then freed
            t.drop(head_grad)
        if g.head_bias:
            total = t.new(bytes_(g.out, g.z), "sum")
            t.new(bytes_(g.out, g.z), "head grad_b")
            t.drop(total)
    with t.in_phase("optimizer_step"):
        optimizer_step(t, g, optimizer, weight_decay)


def replays(rule_name: str) -> bool:
    """Whether the tape replays ``rule_name``'s step (not yet TP, DTP, LRA: their peaks are -1)."""
    return program(rule_name) is not None


def program(rule_name: str):
    """The tape of a rule's step, chosen from its catalogue declaration (so a copied rule needs no entry here):
    PEPITA's or MEMPEPITA's activations, DFA's per-block feedback, a mirror phase (WM), trained feedback (KP),
    or autograd's step (BP, FA)."""
    spec = catalogue.rule(rule_name)
    memory = spec.memory
    if memory.activations == "targets":
        return None  # TP, DTP, LRA: not replayed yet (their peaks are -1; the component model covers them)
    if memory.activations in ("pepita", "mempepita"):
        recompute = memory.activations == "mempepita"
        return lambda t, g, o, wd, steps: pepita_step(t, g, o, wd, recompute=recompute)
    if memory.feedback == "blocks":
        return lambda t, g, o, wd, steps: dfa_step(t, g, o, wd)
    if "mirror" in spec.phases:
        return wm_step
    return lambda t, g, o, wd, steps: autograd_step(t, g, o, wd, kp=memory.trains_feedback)




# ---------------------------------------------------------------------------
# The table

PEAK_PHASE_COLUMNS = tuple(f"peak_{phase}" for phase in STEP_PHASES)
# The tape replays every block (about a millisecond per block and rule): deeper models get -1 (not replayed).
MAX_TAPE_BLOCKS = 1024


def groups(configs) -> list[tuple[np.ndarray, tuple]]:
    """Row indices of ``configs`` per structure (arch, encoder and decoder depth, classifier or not)."""
    from .templates import option_columns

    options = option_columns(configs)
    keys = list(zip(configs["arch"], configs["enc_layers"].astype(int), configs["dec_layers"].astype(int),
                    configs["classes"].astype(int) > 0, options["qkv_bias"] > 0, options["out_bias"] > 0,
                    options["head_bias"] > 0, options["tied"] > 0, options["kv_heads"] < configs["heads"].to_numpy(),
                    (options["kv_heads"] == 1) & (configs["heads"].to_numpy() > 1), options["relu"] > 0,
                    options["gated"] > 0, options["learned"] > 0, options["added_positions"] > 0,
                    options["type_vocab"] > 0, options["embedding_norm"] > 0, options["pre"] > 0, options["rms"] > 0,
                    options["rotary"] > 0, options["relative"] > 0))
    out: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        out.setdefault(key, []).append(i)
    return [(np.array(rows), key) for key, rows in out.items()]


def group_of(configs, rows: np.ndarray, key: tuple, dtype_bytes: int) -> Group:
    (arch, enc, dec, classifier, qkv_bias, out_bias, head_bias, tied, grouped, single_kv, relu, gated, learned, added,
     types, embedding_norm, pre, rms, rotary, relative) = key
    from .templates import option_columns

    options = option_columns(configs)
    col = {c: configs[c].to_numpy(dtype=np.int64)[rows] for c in
           ("batch", "d_model", "d_ff", "heads", "vocab", "classes", "seq_len", "tgt_len")}
    depth = {"encoder": enc, "decoder": dec}
    return Group(arch, {s: depth[s] for s in L.stacks(arch)}, bool(classifier), col["batch"], col["d_model"],
                 col["d_ff"], col["heads"], col["vocab"], col["classes"],
                 {"encoder": col["seq_len"], "decoder": col["tgt_len"]}, dtype_bytes, bool(qkv_bias), bool(out_bias),
                 bool(head_bias), bool(tied), bool(grouped), bool(single_kv), options["attn_width"][rows],
                 options["kv_width"][rows], bool(relu), bool(gated),
                 "learned" if learned else "sinusoidal" if added else "none",
                 options["type_vocab"][rows] if types else None, options["max_positions"][rows], bool(embedding_norm),
                 bool(pre), bool(rms), bool(rotary), options["relative_buckets"][rows] if relative else None)


def step_peaks(configs, rule_name: str, optimizer: str, dtype_bytes: int, start: np.ndarray, gradients: np.ndarray,
               weight_decay: float = 0.0, mirror_steps: int = 1) -> dict[str, np.ndarray]:
    """The step's peak and each phase's peak (bytes, -1 where the rule has no such phase), per configuration,
    for a step that begins with ``start`` bytes alive, ``gradients`` of them last step's gradients. A model of
    more than :data:`MAX_TAPE_BLOCKS` blocks is not replayed: -1 everywhere. Every architecture option is followed
    (issue 14)."""
    n = len(configs)
    out = {"peak": np.full(n, -1, dtype=np.int64), **{c: np.full(n, -1, dtype=np.int64) for c in PEAK_PHASE_COLUMNS}}
    replay = program(rule_name)
    if replay is None:
        return out
    for rows, key in groups(configs):
        if key[1] + key[2] > MAX_TAPE_BLOCKS:
            continue
        g = group_of(configs, rows, key, dtype_bytes)
        t = Tape(start[rows])
        t.live = t.live - gradients[rows]  # zero_grad(set_to_none=True), every rule's first line
        replay(t, g, optimizer, weight_decay, mirror_steps)
        out["peak"][rows] = t.peak
        for phase, values in t.phase_peaks.items():
            out[f"peak_{phase}"][rows] = values
    return out
