"""One readable transformer in three arches: encoder-only, decoder-only and encoder-decoder.

By default, the transformer of Vaswani et al. 2017 and of the paper's figures: post-LN
blocks, LayerNorm(x + Sublayer(x)); a GELU feed-forward network; attention with explicit
q, k, v and o projections around PyTorch's fused scaled-dot-product attention; a token
embedding (a gather) plus sinusoidal positions; and a final linear layer, an LM head over
the vocabulary or a classifier over one mean-pooled row per sequence. The architecture
options of :class:`~trainingcost.config.ModelConfig` give the models trained today:
pre-LN blocks with a final norm per stack, RMSNorm, ReLU or gated (SwiGLU, GeGLU)
feed-forward networks, grouped-query attention, heads of any width, learned, rotary or no
positions, a head tied to the embedding, biases on or off, BERT's token types and
embedding norm.

Module names are the analytic engine's layer names (:mod:`trainingcost.analytic.layers`):
``encoder.embedding``, ``encoder.3.self_attention``, ``decoder.0.cross_attention_norm``,
``head``. The weight matrices inside a layer are its children (``.q``, ``.k``,
``.v``, ``.o`` for attention, ``.up`` and ``.down`` for the FFN).

The forward pass is a list of :class:`Stage` objects run in order over a
:class:`Stream` (an embedding, one per block, the head). Learning rules that
need to stop between stages (DFA detaches at block outputs, MEMPEPITA runs two
passes in lockstep) iterate over the stages themselves; everybody else calls
the model.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..analytic import layers as L
from ..config.model import ModelConfig
from .feedback_linear import FeedbackLinearFunction

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}
FFN_ACTIVATION = {"gelu": "gelu", "relu": "relu", "swiglu": "silu", "geglu": "gelu"}


class Linear(nn.Linear):
    """``nn.Linear`` with an optional elementwise activation and an optional feedback matrix.

    With ``feedback`` set (a tensor of the weight's shape, ``[out, in]``), the
    backward pass sends the error through it instead of through the weight:
    feedback alignment and its relatives. With ``explicit_backward`` and no
    feedback, the backward is BP's, written out. Otherwise this is ``nn.Linear``.
    """

    def __init__(self, in_features: int, out_features: int, activation: str | None = None, bias: bool = True):
        super().__init__(in_features, out_features, bias=bias)
        self.activation = activation
        self.register_buffer("feedback", None, persistent=False)
        self.explicit_backward = False  # BP through FeedbackLinearFunction (feedback = the weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.feedback is None and not self.explicit_backward:
            y = F.linear(x, self.weight, self.bias)
        else:
            y = FeedbackLinearFunction.apply(x, self.weight, self.bias, self.feedback)
        return ACTIVATIONS[self.activation](y) if self.activation else y


def rotary_tables(length: int, head_dim: int, base: float = 10000.0, turned: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of rotary positions (Su et al. 2021, eq. 34), [length, head_dim], in the half-split layout
    of GPT-NeoX and Llama: feature i and i + r / 2 turn together by position x base^(-2i / r), r the ``turned``
    features of a head (partial rotary: GPT-NeoX's rotary_pct; 0: all); the others get angle 0 (cos 1, sin 0)."""
    turned = turned or head_dim
    inverse = base ** (-torch.arange(0, turned, 2, dtype=torch.float64) / turned)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inverse[None, :]
    angles = torch.cat([angles, angles, torch.zeros(length, head_dim - turned, dtype=torch.float64)], dim=-1)
    return angles.cos().float(), angles.sin().float()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, turned: int = 0) -> torch.Tensor:
    """x turned by its positions' angles: x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1) over the first
    ``turned`` features (0: all); the rest pass through rotate_half unchanged, where sin is 0 (partial rotary)."""
    width = x.shape[-1]
    turned = turned or width
    half = turned // 2
    if turned == width:
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    else:
        rotated = torch.cat([-x[..., half:turned], x[..., :half], x[..., turned:]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Multi-head attention with explicit q, k, v, o projections and fused attention.

    ``kv_heads`` key/value heads serve ``heads`` query heads (grouped-query attention; one: multi-query):
    each is repeated to its group before the fused kernel, as Hugging Face's ``repeat_kv`` does. Heads are
    ``head_dim`` wide; with ``rotary`` the queries and keys are turned by their positions (Su et al. 2021).
    """

    def __init__(self, cfg: ModelConfig, causal: bool, rotary_rows: int = 0):
        super().__init__()
        d, a, kv = cfg.d_model, cfg.attn_width, cfg.kv_width
        self.heads, self.kv_heads, self.head_dim, self.causal = cfg.heads, cfg.kv_heads, cfg.head_dim, causal
        self.q = Linear(d, a, bias=cfg.qkv_bias)
        self.k = Linear(d, kv, bias=cfg.qkv_bias)
        self.v = Linear(d, kv, bias=cfg.qkv_bias)
        self.o = Linear(a, d, bias=cfg.o_bias)
        self.rotary = rotary_rows > 0
        self.turned = cfg.rotary_width
        self.windowed = causal and cfg.sliding_window > 0  # its bias is the stack's sliding-window mask ...
        self.global_layer = False  # ... but for a global layer among windowed ones (window_period: Block sets it)
        self.softcap = cfg.attention_softcap  # Gemma 2: c tanh(scores / c), attention written out
        self.scale = cfg.query_scale ** -0.5 if cfg.query_scale else None  # Gemma 2's query_pre_attn_scalar
        # qk_norm: an RMSNorm over each head of q and of k (Qwen3, Gemma 3: one head_dim weight each), or over each
        # whole projection before it is split into heads (OLMo 2)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm == "head":
            self.q_norm = nn.RMSNorm(cfg.head_dim, eps=1e-6)
            self.k_norm = nn.RMSNorm(cfg.head_dim, eps=1e-6)
        elif cfg.qk_norm == "projection":
            self.q_norm = nn.RMSNorm(a, eps=1e-6)
            self.k_norm = nn.RMSNorm(kv, eps=1e-6)
        else:
            self.q_norm = self.k_norm = None
        if self.rotary:
            cos, sin = rotary_tables(rotary_rows, cfg.head_dim, turned=cfg.rotary_width)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

    def _heads(self, x: torch.Tensor, heads: int, norm: nn.Module | None = None) -> torch.Tensor:
        """[batch, rows, heads x head_dim] as [batch, heads, rows, head_dim]; with ``norm`` (qk_norm), normalised first:
        the whole projection (OLMo 2), or each head on the [batch, rows, heads, head_dim] view (Qwen3, Gemma 3), as
        transformers' models do."""
        batch, rows, _ = x.shape
        if norm is not None and self.qk_norm == "projection":
            x = norm(x)
        x = x.view(batch, rows, heads, self.head_dim)
        return (x if norm is None or self.qk_norm == "projection" else norm(x)).transpose(1, 2)

    def _capped(self, q, k, v, mask):
        return capped_attention(self, q, k, v, mask)

    def _repeat(self, x: torch.Tensor) -> torch.Tensor:
        group = self.heads // self.kv_heads
        if group == 1:
            return x
        batch, _, rows, width = x.shape
        return x[:, :, None].expand(batch, self.kv_heads, group, rows, width).reshape(batch, self.heads, rows, width)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
        source = x if memory is None else memory  # cross-attention reads keys and values from the encoder
        batch, rows, _ = x.shape
        q = self._heads(self.q(x), self.heads, self.q_norm)
        k = self._heads(self.k(source), self.kv_heads, self.k_norm)
        v = self._heads(self.v(source), self.kv_heads)
        if self.rotary:
            q = rotate(q, self.cos[:rows].to(q.dtype), self.sin[:rows].to(q.dtype), self.turned)
            k = rotate(k, self.cos[: k.shape[2]].to(k.dtype), self.sin[: k.shape[2]].to(k.dtype), self.turned)
        if self.softcap:  # bias: the stack's attention_masks, [the window's (or causal), causal] (Stack)
            mask = (bias[1] if self.global_layer or not self.windowed else bias[0]) if self.causal else None
            y = self._capped(q, self._repeat(k), self._repeat(v), mask)
            return self.o(y.transpose(1, 2).reshape(batch, rows, self.heads * self.head_dim))
        if self.global_layer:
            bias = None  # every earlier position: the plain causal attention
        if bias is None:
            y = F.scaled_dot_product_attention(q, self._repeat(k), self._repeat(v), is_causal=self.causal,
                                               scale=self.scale)
        elif self.windowed:  # an additive mask (0 or -inf), causal and banded: the fused kernel, the dense product
            y = F.scaled_dot_product_attention(q, self._repeat(k), self._repeat(v), attn_mask=bias, scale=self.scale)
        else:  # T5: the relative bias (causal mask included) on unscaled scores (Raffel et al. 2020)
            y = F.scaled_dot_product_attention(q, self._repeat(k), self._repeat(v), attn_mask=bias.to(q.dtype), scale=1.0)
        return self.o(y.transpose(1, 2).reshape(batch, rows, self.heads * self.head_dim))


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-AI 2024, DeepSeek-V2, arXiv 2405.04434, section 2.1), as transformers'
    ``DeepseekV3Attention`` computes it in training (no cache): queries d -> heads x (head_dim + rope), or through a
    latent (``q_a``, an RMSNorm, ``q_b``); keys and values from a latent, ``kv_a``: d -> kv_lora_rank + rope (the keys'
    rotary part, one for every head), an RMSNorm on the latent, ``kv_b``: -> heads x (head_dim + v_head_dim); the
    rotary parts turned, each head's query and key assembled (its head_dim part and its rotary part), the fused
    kernel, ``o``: heads x v_head_dim -> d. Module names: ``.q`` or ``.q_a``, ``.q_norm``, ``.q_b``; ``.kv_a``,
    ``.kv_norm``, ``.kv_b``; ``.o``."""

    def __init__(self, cfg: ModelConfig, rows: int):
        super().__init__()
        d, h = cfg.d_model, cfg.heads
        self.heads, self.nope, self.rope, self.value = h, cfg.head_dim, cfg.qk_rope_head_dim, cfg.v_head
        self.latent = cfg.kv_lora_rank
        if cfg.q_lora_rank:
            self.q_a = Linear(d, cfg.q_lora_rank, bias=False)
            self.q_norm = nn.RMSNorm(cfg.q_lora_rank, eps=1e-6)
            self.q_b = Linear(cfg.q_lora_rank, h * cfg.q_head, bias=False)
        else:
            self.q = Linear(d, h * cfg.q_head, bias=False)
        self.kv_a = Linear(d, cfg.kv_lora_rank + cfg.qk_rope_head_dim, bias=False)
        self.kv_norm = nn.RMSNorm(cfg.kv_lora_rank, eps=1e-6)
        self.kv_b = Linear(cfg.kv_lora_rank, h * (cfg.head_dim + cfg.v_head), bias=False)
        self.o = Linear(h * cfg.v_head, d, bias=False)
        cos, sin = rotary_tables(rows, cfg.qk_rope_head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
        batch, rows, _ = x.shape
        h, nope, rope = self.heads, self.nope, self.rope
        q = self.q_b(self.q_norm(self.q_a(x))) if hasattr(self, "q_a") else self.q(x)
        q = q.view(batch, rows, h, nope + rope).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [nope, rope], dim=-1)
        compressed = self.kv_a(x)
        latent, k_rot = torch.split(compressed, [self.latent, rope], dim=-1)
        kv = self.kv_b(self.kv_norm(latent)).view(batch, rows, h, nope + self.value).transpose(1, 2)
        k_pass, v = torch.split(kv, [nope, self.value], dim=-1)
        cos, sin = self.cos[:rows].to(x.dtype), self.sin[:rows].to(x.dtype)
        q_rot = rotate(q_rot, cos, sin)
        k_rot = rotate(k_rot.view(batch, 1, rows, rope), cos, sin)
        query = torch.cat([q_pass, q_rot], dim=-1)
        key = torch.cat([k_pass, k_rot.expand(batch, h, rows, rope)], dim=-1)
        y = F.scaled_dot_product_attention(query, key, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(batch, rows, h * self.value))


def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """Soft-capping (Gemma 2, arXiv 2408.00118, section 2): cap tanh(x / cap), as transformers' Gemma 2 writes it."""
    return torch.tanh(x / cap) * cap


def capped_attention(module: "Attention", q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor | None) -> torch.Tensor:
    """Attention with soft-capped scores, written out as transformers' Gemma 2 ``eager_attention_forward`` runs it
    (no fused kernel caps): scores q k^T times the scale, capped, the additive mask (a view of the stack's buffer:
    the sliding window's, or the causal one; none for an encoder's or a cross-attention), softmax in float32, times
    v."""
    scale = module.scale if module.scale is not None else module.head_dim ** -0.5
    scores = softcap(torch.matmul(q, k.transpose(2, 3)) * scale, module.softcap)
    if mask is not None:
        scores = scores + mask.to(scores.dtype)
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v)


class FeedForward(nn.Module):
    """d -> d_ff, activation, d_ff -> d; gated (SwiGLU, GeGLU; Shazeer 2020): act(x W_gate) * (x W_up), then W_down."""

    def __init__(self, cfg: ModelConfig, width: int = 0):
        super().__init__()
        d, ff, bias = cfg.d_model, width or cfg.d_ff, cfg.out_bias
        self.gated = cfg.gated
        if self.gated:
            self.gate = Linear(d, ff, activation=FFN_ACTIVATION[cfg.ffn], bias=bias)
            self.up = Linear(d, ff, bias=bias)
        else:
            self.up = Linear(d, ff, activation=FFN_ACTIVATION[cfg.ffn], bias=bias)
        self.down = Linear(ff, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down(self.gate(x) * self.up(x))
        return self.down(self.up(x))


class MixtureOfExperts(nn.Module):
    """A mixture of experts in place of the FFN (Shazeer et al. 2017; Mixtral, Jiang et al. 2024; transformers'
    ``MixtralSparseMoeBlock``, ``Qwen2MoeSparseMoeBlock``): per token, the router's softmax over the experts
    p = softmax(x W_r), its top k, renormalised to sum to 1 (``router_norm``; Qwen-MoE keeps the softmax's),
    and y = sum over the k chosen experts e of p_e FFN_e(x). Each expert runs on the rows routed to it (gathered,
    then added back in place, ``index_add_``). Qwen-MoE's shared expert runs on every row, scaled by
    sigmoid(x w_gate); DeepSeek-MoE's is added as it is (``shared_expert_gate`` false). Module names: ``.router``, ``.experts.<e>`` (FFNs), ``.shared_expert``, ``.shared_expert_gate``.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.top_k, self.renormalise = cfg.experts_per_token, cfg.router_norm
        self.router = Linear(cfg.d_model, cfg.experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(cfg) for _ in range(cfg.experts))
        self.shared_expert = FeedForward(cfg, cfg.shared_expert_ff) if cfg.shared_expert_ff else None
        gated = cfg.shared_expert_ff and cfg.shared_expert_gate  # DeepSeek-MoE adds its shared experts ungated
        self.shared_expert_gate = Linear(cfg.d_model, 1, bias=False) if gated else None
        self.routed: Callable[[tuple[int, ...]], None] | None = None  # told each call's rows per expert (recording_routing)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's k experts (indices, [rows, k]) and their weights (softmax, top k, renormalised)."""
        probabilities = F.softmax(self.router(x).float(), dim=-1)
        weights, chosen = probabilities.topk(self.top_k, dim=-1)
        if self.renormalise:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return chosen, weights.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        chosen, weights = self.route(x)
        y = torch.zeros_like(x)
        counts = []
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)  # the rows routed to expert e, and where it ranks among their k
            counts.append(len(rows))
            if len(rows):
                y.index_add_(0, rows, expert(x[rows]) * weights[rows, slot, None])
        if self.routed is not None:
            self.routed(tuple(counts))
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            y = y + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        elif self.shared_expert is not None:
            y = y + self.shared_expert(x)
        return y.view(shape)


@contextmanager
def recording_routing(model: nn.Module) -> Iterator[list[tuple[str, tuple[int, ...]]]]:
    """While active, every call of a :class:`MixtureOfExperts` of ``model`` appends (its module name, the rows routed
    to each of its experts) to the list it yields, in call order: Python ints read off shapes, no tensor made (the
    tensor meter sees nothing of it). The executed memory tape replays a step with it (analytic/tape/moe.py)."""
    calls: list[tuple[str, tuple[int, ...]]] = []
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, MixtureOfExperts)]
    for name, module in modules:
        module.routed = lambda counts, name=name: calls.append((name, counts))
    try:
        yield calls
    finally:
        for _, module in modules:
            module.routed = None


def primed_experts(model: nn.Module, optimizer=None) -> dict[str, dict[str, list[bool]]]:
    """Per :class:`MixtureOfExperts` of ``model`` (its module name), whether each expert holds a gradient ("grad": every
    parameter's ``.grad`` set, by the step before) and optimizer state ("state": an entry in ``optimizer.state`` for
    every parameter, made the first step a row reached it; never for plain SGD), now: Python bools, no tensor made.
    An expert no row reached in the steps before holds neither; the tape leaves them out (analytic/tape/moe.py)."""
    state = optimizer.state if optimizer is not None else {}
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, MixtureOfExperts):
            experts = [list(expert.parameters()) for expert in module.experts]
            out[name] = {"grad": [all(p.grad is not None for p in ps) for ps in experts],
                         "state": [all(len(state.get(p, ())) > 0 for p in ps) for ps in experts]}
    return out


def make_norm(cfg: ModelConfig) -> nn.Module:
    """LayerNorm (Ba et al. 2016), RMSNorm (Zhang & Sennrich 2019) or a LayerNorm without gain and bias (OLMo,
    Groeneveld et al. 2024) over d_model."""
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=1e-6)
    return nn.LayerNorm(cfg.d_model, elementwise_affine=cfg.norm != "nonparametric", bias=cfg.norm == "layernorm")


NORMS = (nn.LayerNorm, nn.RMSNorm)


class AddNorm(nn.Module):
    """A residual and its norm. Post-LN: ``add_norm(x, f_out)`` is norm(x + f_out). Pre-LN: ``add_norm(x)`` is the
    branch's normalised input, norm(x), and ``add_norm(x, f_out)`` the residual, x + f_out. Output-LN (OLMo 2):
    ``add_norm(x, f_out)`` is x + norm(f_out)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre, self.output = cfg.pre_norm, cfg.output_norm
        self.norm = make_norm(cfg)

    def forward(self, x: torch.Tensor, branch: torch.Tensor | None = None) -> torch.Tensor:
        if branch is None:
            return self.norm(x)
        if self.output:
            return x + self.norm(branch)
        return x + branch if self.pre else self.norm(x + branch)


# The module of each layer-kind family inside a block (analytic/layers.py declares each kind's family).
BLOCK_MODULES: dict[str, Callable[[str, ModelConfig, int], nn.Module]] = {
    "attention": lambda kind, c, rows: LatentAttention(c, rows) if kind == "latent_attention" else
    Attention(c, causal=kind == "masked_self_attention",
              rotary_rows=rows if c.positions == "rotary" and kind != "cross_attention" else 0),
    "ffn": lambda kind, c, rows: FeedForward(c, c.dense_width if c.moe else 0),  # (a mixture's dense first blocks)
    "moe": lambda kind, c, rows: MixtureOfExperts(c),
    "norm": lambda kind, c, rows: AddNorm(c),
}


class Block(nn.Module):
    """One block, as :func:`layers.describe_block` describes it: a module per sublayer under its name, and the
    branches run in order, each with its norm: after the residual (post-LN), on the branch's input (pre-LN) or on
    its output (output-LN: ``AddNorm``); or, ``parallel``, each on the normalised block input, their outputs added to it."""

    def __init__(self, description: L.BlockDescription, cfg: ModelConfig, rows: int, index: int = 0):
        super().__init__()
        self.pre = description.pre
        self.parallel = description.parallel
        self.branches = description.branches
        for sub in description.sublayers:
            module = BLOCK_MODULES[L.KINDS[sub.kind].family](sub.kind, cfg, rows)
            if isinstance(module, Attention) and cfg.window_period and (index + 1) % cfg.window_period == 0:
                module.global_layer = True  # window_period: every period-th layer attends to every earlier position
            self.add_module(sub.name, module)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.parallel:  # x + attn(norm(x)) + ffn(norm(x)): a norm shared by the branches that name it
            out, h, normed = x, None, None
            for branch in self.branches:
                if branch.norm != normed:
                    h, normed = getattr(self, branch.norm)(x), branch.norm
                out = out + self._branch(branch, h, memory, bias)
            return out
        for branch in self.branches:
            x = self.sublayer(branch, x, memory, bias)
        return x

    def _branch(self, branch: L.Branch, h: torch.Tensor, memory: torch.Tensor | None, bias: torch.Tensor | None):
        f = getattr(self, branch.name)
        if branch.reads_memory:
            return f(h, memory)
        if branch.positional and bias is not None:
            return f(h, bias=bias)
        return f(h)

    def sublayer(self, branch: L.Branch, x: torch.Tensor, memory: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
        """One branch of :meth:`forward` with its norm; ``bias``: the stack's relative position bias."""
        add_norm = getattr(self, branch.norm)
        h = add_norm(x) if self.pre else x
        out = self._branch(branch, h, memory, bias)
        if branch.post_norm:  # Gemma 2: the branch's output normalised before the residual
            out = getattr(self, branch.post_norm)(out)
        return add_norm(x, out)


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """Vaswani et al. 2017, section 3.5: sin on even features, cos on odd ones."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : d_model // 2]
    return table.float()


class PositionalEncoding(nn.Module):
    """Positions added to the embedding: the sinusoidal table (a buffer) or a learned one (a parameter)."""

    def __init__(self, length: int, d_model: int, learned: bool = False):
        super().__init__()
        self.learned = learned
        if learned:
            self.table = nn.Embedding(length, d_model)
        else:
            self.register_buffer("table", sinusoidal_positions(length, d_model), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[1]
        if self.learned:
            return x + self.table(torch.arange(rows, device=x.device))
        return x + self.table[:rows].to(x.dtype)


class TokenTypes(nn.Module):
    """Token-type (segment) embeddings added to the token embedding (Devlin et al. 2019); every token is of type 0,
    as in a single-segment batch."""

    def __init__(self, types: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(types, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        types = torch.zeros(x.shape[:2], dtype=torch.long, device=x.device)
        return x + self.table(types)


def relative_buckets(length: int, causal: bool, buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of each (query, key) distance (Raffel et al. 2020; Mesh TensorFlow's relative_position_bucket):
    half the buckets hold exact small distances, the rest grow logarithmically up to ``max_distance``; a
    bidirectional bias splits them between keys before and after the query, a causal one sees keys before only."""
    position = torch.arange(length)
    distance = position[None, :] - position[:, None]  # key - query
    bucket = torch.zeros_like(distance)
    if causal:
        distance = -torch.clamp(distance, max=0)
    else:
        buckets //= 2
        bucket += (distance > 0).long() * buckets
        distance = distance.abs()
    exact = buckets // 2
    large = exact + (torch.log(distance.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (buckets - exact)).long()
    return bucket + torch.where(distance < exact, distance, large.clamp(max=buckets - 1))


class RelativePositionBias(nn.Module):
    """A stack's relative position bias: a (buckets x heads) table, gathered into [1, heads, rows, rows] and
    added to the scores of every self-attention of the stack (T5); a causal stack's bias carries the mask."""

    def __init__(self, cfg: ModelConfig, rows: int, causal: bool):
        super().__init__()
        self.table = nn.Embedding(cfg.relative_buckets, cfg.heads)
        self.register_buffer("buckets", relative_buckets(rows, causal, cfg.relative_buckets, cfg.relative_max_distance),
                             persistent=False)
        self.causal = causal

    def forward(self, rows: int) -> torch.Tensor:
        bias = self.table(self.buckets[:rows, :rows]).permute(2, 0, 1).unsqueeze(0)
        if self.causal:
            allowed = torch.ones(rows, rows, dtype=torch.bool, device=bias.device).tril()
            bias = bias.masked_fill(~allowed, float("-inf"))
        return bias


def window_mask(rows: int, window: int) -> torch.Tensor:
    """A sliding window's additive mask, [rows, rows]: 0 where key j is one of the last ``window`` positions up to
    query i (i - window < j <= i, as transformers' sliding_window_overlay), -inf elsewhere."""
    position = torch.arange(rows)
    distance = position[:, None] - position[None, :]
    allowed = (distance >= 0) & (distance < window)
    return torch.zeros(rows, rows).masked_fill(~allowed, float("-inf"))


class Stack(nn.Module):
    """The embedding (token, token types, positions, a norm), the blocks ``0 .. n-1`` and, pre-LN, a final norm.
    A decoder with a sliding window keeps its mask (a buffer in the model's dtype), read by every self-attention."""

    def __init__(self, cfg: ModelConfig, stack: str):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab, cfg.d_model)
        self.scale = math.sqrt(cfg.d_model) if cfg.embedding_scale else None
        self.token_type_embedding = TokenTypes(cfg.type_vocab, cfg.d_model) if cfg.type_vocab else None
        self.positional_encoding = (PositionalEncoding(cfg.position_rows(stack), cfg.d_model, cfg.positions == "learned")
                                    if cfg.added_positions else None)
        self.embedding_norm = make_norm(cfg) if cfg.embedding_norm else None
        causal = stack == "decoder"  # a decoder stack's self-attention is masked
        self.relative_position = (RelativePositionBias(cfg, cfg.rows(stack), causal) if cfg.positions == "relative"
                                  else None)
        capped = causal and cfg.attention_softcap > 0  # soft-capped attention takes its masks as additive buffers
        self.register_buffer("window_mask", window_mask(cfg.rows(stack), cfg.sliding_window)
                             if causal and cfg.sliding_window and not capped else None, persistent=False)
        rows = cfg.rows(stack)
        self.register_buffer("attention_masks", torch.stack([window_mask(rows, cfg.sliding_window or rows),
                                                             window_mask(rows, rows)]) if capped else None,
                             persistent=False)  # [the window's (or causal), causal]: global layers read the second
        self.depth = cfg.depth(stack)
        for index in range(self.depth):  # (a mixture of experts' first dense_blocks keep a dense FFN)
            self.add_module(str(index), Block(L.config_block(cfg, stack, index), cfg, cfg.rows(stack), index))
        self.final_norm = make_norm(cfg) if cfg.final_norm else None

    def blocks(self) -> list[Block]:
        return [getattr(self, str(i)) for i in range(self.depth)]

    def embed(self, tokens: torch.Tensor, modulation: torch.Tensor | None = None) -> torch.Tensor:
        """The stack's input: the tables' sum (plus PEPITA's modulation, where the tables meet), then its norm."""
        x = self.embedding(tokens)
        if self.scale is not None:  # Gemma: times sqrt(d_model)
            x = x * self.scale
        for table in (self.token_type_embedding, self.positional_encoding):
            if table is not None:
                x = table(x)
        if modulation is not None:  # per position, or per sequence
            x = x + (modulation if modulation.dim() == x.dim() else modulation.unsqueeze(1))
        return self.embedding_norm(x) if self.embedding_norm is not None else x


class MultiTokenPrediction(Block):
    """One multi-token prediction module (DeepSeek-V3 Technical Report, section 2.2, eq. 21-22): h' = M [enorm(Emb(t
    shifted)); hnorm(h)], a block of the decoder's kind, then the shared head after a norm. Its embedding and head
    are modules of their own that hold the model's tables (one Parameter each), so the meter names their work
    ``mtp.<k>.embedding`` and ``mtp.<k>.head``."""

    def __init__(self, cfg: ModelConfig, embedding: nn.Embedding, head: Linear, index: int):
        super().__init__(L.mtp_block(cfg), cfg, cfg.tgt_len, cfg.dec_layers + index)
        self.embedding = nn.Embedding(cfg.vocab, cfg.d_model)
        self.embedding.weight = embedding.weight
        self.embedding_norm, self.hidden_norm = make_norm(cfg), make_norm(cfg)
        self.projection = Linear(2 * cfg.d_model, cfg.d_model, bias=False)
        self.final_norm = make_norm(cfg)
        self.head = Linear(cfg.d_model, cfg.out_width, bias=cfg.head_bias)
        self.head.weight = head.weight
        if cfg.head_bias:
            self.head.bias = head.bias
        # registered in the layer plan's order (the block's sublayers after the projection), as model.parameters()
        # lists them for the communication model's buckets (analytic/comm.py)
        self._modules = {name: self._modules[name] for name, _ in L.mtp_layers(cfg)}

    def predict(self, hidden: torch.Tensor, tokens: torch.Tensor, bias: torch.Tensor | None = None):
        """(this module's hidden state, the head's input): ``hidden`` the one before (the decoder's, before its
        final norm), ``tokens`` the sequence shifted left by this module's depth (token i+k at position i)."""
        x = self.projection(torch.cat([self.embedding_norm(self.embedding(tokens)), self.hidden_norm(hidden)], dim=-1))
        x = self.forward(x, None, bias)
        return x, self.final_norm(x)


@dataclass
class Stream:
    """What flows between stages: the token inputs per stack, the residual stream,
    the encoder output (encoder-decoder), optional input modulations per stack, and the logits."""

    tokens: dict[str, torch.Tensor]
    modulation: dict[str, torch.Tensor] = field(default_factory=dict)
    x: torch.Tensor | None = None
    memory: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    position_bias: torch.Tensor | None = None  # the running stack's relative position bias
    hidden: torch.Tensor | None = None  # the residual stream before the last final norm (multi-token prediction reads it)


@dataclass(frozen=True)
class Stage:
    name: str  # 'encoder.embedding', 'encoder.0', ..., 'head'
    kind: str  # 'embedding', 'block' or 'head'
    stack: str  # 'encoder', 'decoder', or '' for the head
    run: Callable[[Stream], None]


class Transformer(nn.Module):
    """A transformer of one configuration (:class:`~trainingcost.config.ModelConfig`)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.arch = cfg.arch
        for stack in cfg.stacks:
            self.add_module(stack, Stack(cfg, stack))
        self.stack_names = cfg.stacks
        self.classes = cfg.classes
        self.out_features = cfg.out_width
        self.head = Linear(cfg.d_model, self.out_features, bias=cfg.head_bias)
        if cfg.shared_embedding:  # one V x d table read by both stacks, the head its own (T5 v1.1)
            self.decoder.embedding.weight = self.encoder.embedding.weight
        if cfg.tie_embeddings:  # one V x d table: the head's and every stack's embedding (Vaswani et al. 2017, 3.4)
            shared = getattr(self, cfg.stacks[0]).embedding.weight
            for stack in cfg.stacks[1:]:
                getattr(self, stack).embedding.weight = shared
            self.head.weight = shared
        if cfg.mtp_depth:  # multi-token prediction's modules, "mtp.0" ... (BP trains them: Transformer.predict_all)
            self.mtp = nn.Module()
            for k in range(cfg.mtp_depth):
                self.mtp.add_module(str(k), MultiTokenPrediction(cfg, self.decoder.embedding, self.head, k))

    def error_aligned(self, stack: str) -> bool:
        """Whether the output error has one row per position of ``stack`` (:meth:`ModelConfig.error_aligned`)."""
        return self.cfg.error_aligned(stack)

    # -- the forward pass as stages -------------------------------------------------
    def stages(self, by: str = "block") -> list[Stage]:
        """The embedding of each stack, its blocks (``by="sublayer"``: each block's branches with their norms,
        kind ``sublayer``, but a parallel block whole), its final norm (pre-LN, kind ``norm``), and the head."""
        stages = []
        for stack_name in self.cfg.stacks:
            stack = getattr(self, stack_name)
            stages.append(Stage(f"{stack_name}.embedding", "embedding", stack_name, self._embed_stage(stack_name)))
            for index, block in enumerate(stack.blocks()):
                if by == "sublayer" and not block.parallel:  # (a parallel block's branches run together)
                    stages += [Stage(f"{stack_name}.{index}.{branch.name}", "sublayer", stack_name,
                                     self._sublayer_stage(block, branch)) for branch in block.branches]
                else:
                    stages.append(Stage(f"{stack_name}.{index}", "block", stack_name, self._block_stage(block)))
            if stack.final_norm is not None:
                stages.append(Stage(f"{stack_name}.{L.FINAL_NORM}", "norm", stack_name, self._norm_stage(stack.final_norm)))
        stages.append(Stage(L.HEAD, "head", "", self._head_stage))
        return stages

    @staticmethod
    def _sublayer_stage(block: Block, branch: L.Branch) -> Callable[[Stream], None]:
        def run(s: Stream) -> None:
            s.x = block.sublayer(branch, s.x, s.memory, s.position_bias)

        return run

    def _norm_stage(self, norm: nn.Module) -> Callable[[Stream], None]:
        keep = self.cfg.mtp  # multi-token prediction reads the stream before the final norm (else it is let go)

        def run(s: Stream) -> None:
            if keep:
                s.hidden = s.x
            s.x = norm(s.x)

        return run

    def _embed_stage(self, stack_name: str) -> Callable[[Stream], None]:
        stack = getattr(self, stack_name)

        def run(s: Stream) -> None:
            if stack_name == "decoder" and s.x is not None:
                s.memory = s.x  # the encoder output, read by every cross-attention
            # PEPITA's modulated input is added where the embedding's tables meet
            s.x = stack.embed(s.tokens[stack_name], s.modulation.get(stack_name))
            s.position_bias = stack.relative_position(s.x.shape[1]) if stack.relative_position is not None else None
            if stack.window_mask is not None:
                s.position_bias = stack.window_mask
            if stack.attention_masks is not None:
                s.position_bias = stack.attention_masks

        return run

    @staticmethod
    def _block_stage(block: Block) -> Callable[[Stream], None]:
        def run(s: Stream) -> None:
            s.x = block(s.x, s.memory, s.position_bias)

        return run

    def _head_stage(self, s: Stream) -> None:
        s.logits = self.output(self.pool(s.x))

    def output(self, pooled: torch.Tensor) -> torch.Tensor:
        """The logits of the head's input: the head, then Gemma 2's soft-capping (final_logit_softcapping)."""
        logits = self.head(pooled)
        return softcap(logits, self.cfg.logit_softcap) if self.cfg.logit_softcap else logits

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """The head's input: every position for an LM head, the mean over positions for a classifier."""
        return x.mean(dim=1) if self.classes else x

    def forward(self, tokens: dict[str, torch.Tensor], modulation: dict[str, torch.Tensor] | None = None, *,
                mtp: bool = False):
        """The logits; with ``mtp`` (a model with multi-token prediction), (the logits, each module's logits)."""
        stream = Stream(tokens, modulation or {})
        for stage in self.stages():
            stage.run(stream)
        return self._predict_more(stream) if mtp else stream.logits

    def _predict_more(self, stream: Stream) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The logits, and each multi-token prediction module's (module k's at position i predict token i + k + 2;
        DeepSeek-V3, section 2.2): the modules run after the head, each on the hidden state of the one before
        (the decoder's before its final norm)."""
        tokens = stream.tokens
        hidden, extra = stream.hidden, []
        ids = tokens["decoder"]
        for k in range(self.cfg.mtp_depth):
            module = getattr(self.mtp, str(k))
            # token i + k + 1 at position i (the last k + 1 positions wrap around; their targets are ignored)
            hidden, normed = module.predict(hidden, torch.roll(ids, -(k + 1), dims=1), stream.position_bias)
            extra.append(self._mtp_output(module, normed))
        return stream.logits, extra

    def _mtp_output(self, module: MultiTokenPrediction, normed: torch.Tensor) -> torch.Tensor:
        logits = module.head(normed)
        return softcap(logits, self.cfg.logit_softcap) if self.cfg.logit_softcap else logits

    # -- introspection ----------------------------------------------------------------
    def layer_modules(self) -> dict[str, nn.Module]:
        """The model's layers under their analytic names (``layers.layer_plan``)."""
        return {name: self.get_submodule(name) for name, _ in self.layer_plan()}

    def layer_plan(self) -> list[tuple[str, str]]:
        return L.layer_plan(self.cfg)

    def layer_of(self, module_name: str) -> str:
        """The analytic layer that contains a module: ``encoder.0.ffn.up`` -> ``encoder.0.ffn``."""
        names = {name for name, _ in self.layer_plan()}
        parts = module_name.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in names:
                return ".".join(parts[:end])
        raise KeyError(f"{module_name!r} is in no analytic layer")

    def linears(self) -> dict[str, Linear]:
        """Every weight matrix, by module name (``encoder.0.self_attention.q`` ... ``head``)."""
        return {name: m for name, m in self.named_modules() if isinstance(m, Linear)}
