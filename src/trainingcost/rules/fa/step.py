"""Feedback alignment (Lillicrap et al. 2016).

Every weight matrix (q, k, v, o, both FFN matrices and the head) sends the
error to its input through a fixed random matrix B of its own shape, drawn like
its weight, instead of through the weight itself
(:class:`~trainingcost.train.feedback_linear.FeedbackLinearFunction`). Attention
scores, softmax, LayerNorm, residuals and the embedding propagate as in BP.
"""

from __future__ import annotations

from ..bp.step import Backprop


class FeedbackAlignment(Backprop):

    def setup(self) -> None:
        for linear in self.model.linears().values():
            linear.feedback = self.like_weight_init(linear.weight)
