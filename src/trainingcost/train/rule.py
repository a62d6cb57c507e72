"""The interface every learning rule implements, and what rules share.

A rule owns the model's optimizer and any feedback matrices, and runs one
training step as a sequence of named *phases*. The caller passes a phase
factory: ``phase(name)`` returns a context manager around each piece of work,
so a measurement layer can time or count each phase without the rule knowing.
A phase may be entered several times per step (MEMPEPITA alternates its
passes block by block); a measurement should accumulate.

Execution phases (what the code runs, in order of appearance):

- ``forward``: a standard forward pass (MEMPEPITA: also its block-by-block recomputation);
- ``backward``: autograd's backward pass, input and weight gradients together
  (the weight-gradient products carry an ``attribution.phase('weight_update')``
  mark, so a FLOP count can split them off);
- ``error_projection``: PEPITA's F·e, DFA's B·e per block;
- ``modulated_pass``: PEPITA's forward pass on the modulated input;
- ``target_propagation``: TP's, DTP's and LRA's targets, carried down the units;
- ``weight_update``: PEPITA's hand-written weight updates, written into ``.grad``;
- ``feedback_update``: TP's and DTP's inverse training, LRA's error-weight gradients;
- ``optimizer_step``: the optimizer applies ``.grad`` (KP: to W and B alike);
- ``mirror``: WM's weight-mirror steps.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict
from typing import Callable, ClassVar, ContextManager

import torch

from ..analytic.spec import EXECUTION_PHASES, RuleSpec  # noqa: F401 (re-exported)
from ..config.training import OPTIMIZERS, RuleOptions
from .model import Transformer
from .objective import Batch

MOMENTUM = 0.9

PhaseFactory = Callable[[str], ContextManager]


def no_phases(name: str) -> ContextManager:
    return nullcontext()


def make_optimizer(params, options: RuleOptions, weight_decay: float) -> torch.optim.Optimizer:
    """SGD, SGD with momentum 0.9, or Adam with decoupled weight decay (AdamW).

    Decoupled decay keeps Kolen-Pollack exact under Adam: W and B receive the
    same gradient, hence the same Adam step, and both shrink by (1 - lr*wd).
    """
    params = list(params)
    if options.optimizer == "sgd":
        return torch.optim.SGD(params, lr=options.lr, weight_decay=weight_decay)
    if options.optimizer == "momentum":
        return torch.optim.SGD(params, lr=options.lr, momentum=MOMENTUM, weight_decay=weight_decay)
    if options.optimizer == "adam":
        return torch.optim.AdamW(params, lr=options.lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {options.optimizer!r} (allowed: {', '.join(OPTIMIZERS)})")


class Rule:
    """One learning rule bound to one model.

    Subclasses may install feedback in :meth:`setup` and implement :meth:`step`.
    The rule's declaration (``spec``: its name, phases and default
    hyperparameters) is attached by :mod:`.registry` from the rule's folder.
    ``generator`` seeds every random matrix the rule draws, on the model's device.
    """

    spec: ClassVar[RuleSpec]

    def __init__(self, model: Transformer, options: RuleOptions, generator: torch.Generator):
        self.model = model
        self.options = options
        self.generator = generator
        self.weight_decay = self.hp("weight_decay")
        self.setup()
        self.optimizer = make_optimizer(self.parameters(), options, self.weight_decay)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def phases(self) -> tuple[str, ...]:
        return self.spec.phases

    def hp(self, name: str) -> float:
        """A hyperparameter: the run's option if it sets one, else the rule's declared default."""
        value = asdict(self.options).get(name)
        if value is not None:
            return value
        if name not in self.spec.defaults:
            raise KeyError(f"rule {self.spec.name!r} declares no default for {name!r}")
        return self.spec.defaults[name]

    # -- hooks for subclasses ---------------------------------------------------
    def setup(self) -> None:
        """Install feedback matrices, hooks, ... before the optimizer is built."""

    def parameters(self):
        return self.model.parameters()

    def step(self, batch: Batch, phase: PhaseFactory = no_phases) -> torch.Tensor:
        """One training step; returns the loss of its (first) forward pass, detached."""
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def randn(self, *shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, device=self.device, dtype=torch.float32).mul_(std).to(self.dtype)

    def like_weight_init(self, weight: torch.Tensor) -> torch.Tensor:
        """A random matrix drawn as ``nn.Linear`` draws its weight: U(-1/sqrt(in), 1/sqrt(in))."""
        bound = 1.0 / weight.shape[1] ** 0.5
        fresh = torch.rand(weight.shape, generator=self.generator, device=self.device, dtype=torch.float32)
        return fresh.mul_(2 * bound).sub_(bound).to(weight.dtype)
