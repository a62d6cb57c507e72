"""Backpropagation: autograd computes every gradient, a torch optimizer applies it.

Linear layers run their backward through
:class:`~trainingcost.train.feedback_linear.FeedbackLinearFunction` with the weight
itself as the backward matrix: the same products as autograd's own linear
backward (tested), with the weight gradient attributable to its own phase.
"""

from __future__ import annotations

import torch

from ...train import objective
from ...train.rule import Rule, no_phases


class Backprop(Rule):
    mtp = False  # multi-token prediction's losses added (set in setup; the rules built on this one train no modules)

    def setup(self) -> None:
        for linear in self.model.linears().values():
            linear.explicit_backward = True
        self.mtp = self.model.cfg.mtp_depth > 0  # (read before a data-parallel wrapper hides the model's cfg)

    def step(self, batch, phase=no_phases) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with phase("forward"):
            if self.mtp:  # multi-token prediction: its modules' losses added (objective.mtp_loss)
                loss = objective.mtp_loss(*self.model(batch.tokens, mtp=True), batch.targets)
            else:
                loss = objective.loss(self.model(batch.tokens), batch.targets)
        with phase("backward"):
            loss.backward()
        with phase("optimizer_step"):
            self.optimizer.step()
        return loss.detach()
