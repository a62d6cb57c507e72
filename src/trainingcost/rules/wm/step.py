"""Weight mirror (Akrout et al. 2019; Franceschi, Backpropagation Free Transformers, section 4.2).

Feedback alignment, plus mirror steps after every training step. In a mirror
step each weight matrix is driven by zero-mean noise x (as many rows as it saw
in the training step), y = x Wᵀ (the linear part; the bias adds nothing in
expectation), and its feedback matrix takes the Hebbian update

    B <- B + eta * yᵀ x / rows - lambda * B,

whose expectation is eta * sigma^2 * W - lambda * B: B drifts towards W (Wᵀ as
a backward matrix). B is then rescaled to its initial Frobenius norm, so it
cannot grow without bound (the normalisation in Srinivasan et al.'s code; the
original numpy code's normalisation is a no-op).
"""

from __future__ import annotations

import torch

from ...train import attribution
from ...train.rule import no_phases
from ..fa.step import FeedbackAlignment


def _norm(matrix: torch.Tensor) -> torch.Tensor:
    """The Frobenius norm accumulated in float64, without a float64 copy of the matrix (``.double().norm()``
    made one: 8 bytes per entry, a head-sized B's worth, WM's step peak; found by the executed memory model)."""
    return torch.linalg.vector_norm(matrix, dtype=torch.float64)


class WeightMirror(FeedbackAlignment):

    def setup(self) -> None:
        super().setup()
        self.linears = self.model.linears()
        self.layer_of = {name: self.model.layer_of(name) for name in self.linears}
        self.rows: dict[str, int] = {}
        self.norms = {name: _norm(linear.feedback) for name, linear in self.linears.items()}
        for name, linear in self.linears.items():
            linear.register_forward_hook(self._count_rows(name))

    def _count_rows(self, name: str):
        def hook(module, args, output):
            self.rows[name] = args[0].numel() // args[0].shape[-1]

        return hook

    def step(self, batch, phase=no_phases) -> torch.Tensor:
        self.rows.clear()  # the rows of this step (an expert of a mixture may see none)
        loss = super().step(batch, phase)
        with phase("mirror"):
            for _ in range(self.options.mirror_steps):
                self.mirror()
        return loss

    @torch.no_grad()
    def mirror(self) -> None:
        for name, linear in self.linears.items():
            with attribution.layer(self.layer_of[name]):
                rows = self.rows.get(name, 0)
                if not rows:  # an expert no row was routed to this step: no noise to drive it with
                    continue
                x = self.randn(rows, linear.in_features, std=self.hp('mirror_noise'))
                y = x @ linear.weight.t()
                feedback = linear.feedback
                feedback.mul_(1.0 - self.hp('mirror_decay')).add_(y.t() @ x, alpha=self.hp('mirror_lr') / rows)
                feedback.mul_(float(self.norms[name] / _norm(feedback)))
