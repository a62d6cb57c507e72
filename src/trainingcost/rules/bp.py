"""Backpropagation: autograd computes every gradient, a torch optimizer applies it."""

from __future__ import annotations

import torch

from .. import objective
from . import register
from .base import Rule, no_phases


@register
class Backprop(Rule):
    name = "bp"
    phases = ("forward", "backward", "optimizer_step")

    def step(self, batch, phase=no_phases) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with phase("forward"):
            loss = objective.loss(self.model(batch.tokens), batch.targets)
        with phase("backward"):
            loss.backward()
        with phase("optimizer_step"):
            self.optimizer.step()
        return loss.detach()
