"""One readable transformer in three arches: encoder-only, decoder-only and encoder-decoder.

Post-LN blocks, LayerNorm(x + Sublayer(x)), as in Vaswani et al. 2017 and in the
paper's figures; a GELU feed-forward network; attention with explicit q, k, v
and o projections around PyTorch's fused scaled-dot-product attention; a token
embedding (a gather) plus sinusoidal positions; and a final linear layer, an LM
head over the vocabulary or a classifier over one mean-pooled row per sequence.

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
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..analytic import layers as L
from ..config.model import ModelConfig
from .feedback_linear import FeedbackLinearFunction

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}


class Linear(nn.Linear):
    """``nn.Linear`` with an optional elementwise activation and an optional feedback matrix.

    With ``feedback`` set (a tensor of the weight's shape, ``[out, in]``), the
    backward pass sends the error through it instead of through the weight:
    feedback alignment and its relatives. With ``explicit_backward`` and no
    feedback, the backward is BP's, written out. Otherwise this is ``nn.Linear``.
    """

    def __init__(self, in_features: int, out_features: int, activation: str | None = None):
        super().__init__(in_features, out_features)
        self.activation = activation
        self.register_buffer("feedback", None, persistent=False)
        self.explicit_backward = False  # BP through FeedbackLinearFunction (feedback = the weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.feedback is None and not self.explicit_backward:
            y = F.linear(x, self.weight, self.bias)
        else:
            y = FeedbackLinearFunction.apply(x, self.weight, self.bias, self.feedback)
        return ACTIVATIONS[self.activation](y) if self.activation else y


class Attention(nn.Module):
    """Multi-head attention with explicit q, k, v, o projections and fused attention."""

    def __init__(self, d_model: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.q = Linear(d_model, d_model)
        self.k = Linear(d_model, d_model)
        self.v = Linear(d_model, d_model)
        self.o = Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        source = x if memory is None else memory  # cross-attention reads keys and values from the encoder
        batch, rows, width = x.shape
        split = (batch, -1, self.heads, width // self.heads)
        q = self.q(x).view(split).transpose(1, 2)
        k = self.k(source).view(split).transpose(1, 2)
        v = self.v(source).view(split).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.o(y.transpose(1, 2).reshape(batch, rows, width))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.up = Linear(d_model, d_ff, activation="gelu")
        self.down = Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x))


class AddNorm(nn.Module):
    """Post-LN residual: LayerNorm(x + sublayer output)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        return self.norm(x + branch)


# The module of each layer-kind family inside a block (analytic/layers.py declares each kind's family).
BLOCK_MODULES: dict[str, Callable[[str, ModelConfig], nn.Module]] = {
    "attention": lambda kind, c: Attention(c.d_model, c.heads, causal=kind == "masked_self_attention"),
    "ffn": lambda kind, c: FeedForward(c.d_model, c.d_ff),
    "norm": lambda kind, c: AddNorm(c.d_model),
}


class Block(nn.Module):
    """One block; its sublayers and their names come from :func:`layers.block_sublayers`.

    A sublayer is a branch (attention, FFN) or the add & norm that closes the branch before it.
    """

    def __init__(self, sublayers: tuple[L.Sublayer, ...], cfg: ModelConfig):
        super().__init__()
        self.pairs: list[tuple[str, str]] = []  # (branch, its add & norm), in order
        branch = None
        for sub in sublayers:
            family = L.KINDS[sub.kind].family
            self.add_module(sub.name, BLOCK_MODULES[family](sub.kind, cfg))
            if family == "norm":
                self.pairs.append((branch, sub.name))
            else:
                branch = sub.name

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        for branch_name, norm_name in self.pairs:
            branch = getattr(self, branch_name)
            out = branch(x, memory) if branch_name == "cross_attention" else branch(x)
            x = getattr(self, norm_name)(x, out)
        return x

    def sublayer(self, pair: tuple[str, str], x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        """One (branch, add & norm) pair of :meth:`forward` on its own."""
        branch_name, norm_name = pair
        branch = getattr(self, branch_name)
        out = branch(x, memory) if branch_name == "cross_attention" else branch(x)
        return getattr(self, norm_name)(x, out)


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """Vaswani et al. 2017, section 3.5: sin on even features, cos on odd ones."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : d_model // 2]
    return table.float()


class PositionalEncoding(nn.Module):
    def __init__(self, length: int, d_model: int):
        super().__init__()
        self.register_buffer("table", sinusoidal_positions(length, d_model), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table[: x.shape[1]].to(x.dtype)


class Stack(nn.Module):
    """Embedding, positions and the blocks ``0 .. n-1`` of one stack."""

    def __init__(self, cfg: ModelConfig, stack: str):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab, cfg.d_model)
        self.positional_encoding = PositionalEncoding(cfg.rows(stack), cfg.d_model)
        sublayers = L.block_sublayers(cfg.arch, stack)
        self.depth = cfg.depth(stack)
        for index in range(self.depth):
            self.add_module(str(index), Block(sublayers, cfg))

    def blocks(self) -> list[Block]:
        return [getattr(self, str(i)) for i in range(self.depth)]

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.positional_encoding(self.embedding(tokens))


@dataclass
class Stream:
    """What flows between stages: the token inputs per stack, the residual stream,
    the encoder output (encoder-decoder), optional input modulations per stack, and the logits."""

    tokens: dict[str, torch.Tensor]
    modulation: dict[str, torch.Tensor] = field(default_factory=dict)
    x: torch.Tensor | None = None
    memory: torch.Tensor | None = None
    logits: torch.Tensor | None = None


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
        self.head = Linear(cfg.d_model, self.out_features)

    def error_aligned(self, stack: str) -> bool:
        """Whether the output error has one row per position of ``stack`` (:meth:`ModelConfig.error_aligned`)."""
        return self.cfg.error_aligned(stack)

    # -- the forward pass as stages -------------------------------------------------
    def stages(self, by: str = "block") -> list[Stage]:
        """The embedding of each stack, its blocks (``by="sublayer"``: each block's (branch, add & norm) pairs,
        kind ``sublayer``), and the head."""
        stages = []
        for stack_name in self.cfg.stacks:
            stack = getattr(self, stack_name)
            stages.append(Stage(f"{stack_name}.embedding", "embedding", stack_name, self._embed_stage(stack_name)))
            for index, block in enumerate(stack.blocks()):
                if by == "sublayer":
                    stages += [Stage(f"{stack_name}.{index}.{pair[0]}", "sublayer", stack_name,
                                     self._sublayer_stage(block, pair)) for pair in block.pairs]
                else:
                    stages.append(Stage(f"{stack_name}.{index}", "block", stack_name, self._block_stage(block)))
        stages.append(Stage(L.HEAD, "head", "", self._head_stage))
        return stages

    @staticmethod
    def _sublayer_stage(block: Block, pair: tuple[str, str]) -> Callable[[Stream], None]:
        def run(s: Stream) -> None:
            s.x = block.sublayer(pair, s.x, s.memory)

        return run

    def _embed_stage(self, stack_name: str) -> Callable[[Stream], None]:
        stack = getattr(self, stack_name)

        def run(s: Stream) -> None:
            if stack_name == "decoder" and s.x is not None:
                s.memory = s.x  # the encoder output, read by every cross-attention
            x = stack.embed(s.tokens[stack_name])
            if stack_name in s.modulation:  # PEPITA's modulated input: per position, or per sequence
                m = s.modulation[stack_name]
                x = x + (m if m.dim() == x.dim() else m.unsqueeze(1))
            s.x = x

        return run

    @staticmethod
    def _block_stage(block: Block) -> Callable[[Stream], None]:
        def run(s: Stream) -> None:
            s.x = block(s.x, s.memory)

        return run

    def _head_stage(self, s: Stream) -> None:
        s.logits = self.head(self.pool(s.x))

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """The head's input: every position for an LM head, the mean over positions for a classifier."""
        return x.mean(dim=1) if self.classes else x

    def forward(self, tokens: dict[str, torch.Tensor], modulation: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        stream = Stream(tokens, modulation or {})
        for stage in self.stages():
            stage.run(stream)
        return stream.logits

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
