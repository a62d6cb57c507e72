"""Kolen-Pollack (Akrout et al. 2019, eqs. 16-17; Franceschi, Backpropagation Free Transformers, section 4.3).

Feedback alignment in which each B is a parameter that receives exactly W's
gradient (transposed, in column convention; B has W's ``[out, in]`` layout here)
and the same weight decay, from the same optimizer. Then W - B shrinks by the
decay factor at every step, so B converges to W (Wᵀ as a backward matrix).
The gradient of B is a copy of W's: no product of its own is computed.
"""

from __future__ import annotations

from torch import nn

from ..bp.step import Backprop


class KolenPollack(Backprop):

    def setup(self) -> None:
        for linear in self.model.linears().values():
            initial = self.like_weight_init(linear.weight)
            del linear.feedback  # the buffer slot becomes a trainable parameter
            linear.feedback = nn.Parameter(initial)

    def feedback_distance(self) -> float:
        """sqrt(sum over weight matrices of |W - B|_F^2): what KP drives to 0."""
        total = 0.0
        for linear in self.model.linears().values():
            total += float((linear.weight.detach().double() - linear.feedback.detach().double()).pow(2).sum())
        return total**0.5
