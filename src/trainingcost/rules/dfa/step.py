"""Direct feedback alignment (Nøkland 2016; on transformers Launay et al. 2020).

The error is taken at d_model, before the head: e = dL/d(head input), the
gradient that the head's own backward produces (as in Launay et al.'s default,
``dfa_after_vocab=False``); the head itself learns from its true gradient.
A fixed random d×d matrix B_i per feedback point projects e straight onto the
point's output, and gradients flow only inside the segment that ends there:

- feedback points are the output of every block and of every stack's
  embedding (Launay et al.'s ``dfa_embed``); a pre-LN stack's final norm
  belongs to its last block's segment (the point is after it), so no gradient leaves a block and
  no global backward chain runs: block inputs (and, in an encoder-decoder, the
  encoder output read by cross-attention) are detached and need no gradient,
  so autograd does not compute the gradients that would leave a block;
- where the error's positions are the block's own (an LM head), each position
  receives its own e_t B_i; where they are not (a classifier's pooled error,
  the encoder blocks of an encoder-decoder), the per-sequence error (summed
  over output positions) is projected once and spread evenly over the block's
  positions, (e B_i) / T, as a mean-pooling backward would spread it.
"""

from __future__ import annotations

import torch

from ...train import attribution, objective
from ...train.model import Stream
from ...train.rule import Rule, no_phases


class DirectFeedbackAlignment(Rule):

    def setup(self) -> None:
        for linear in self.model.linears().values():
            linear.explicit_backward = True  # BP inside blocks, with weight gradients attributable
        d = self.model.cfg.d_model
        self.feedback = {
            stage.name: self.randn(d, d, std=d**-0.5) for stage in self.model.stages() if stage.kind in ("embedding", "block")
        }

    def step(self, batch, phase=no_phases) -> torch.Tensor:
        model = self.model
        self.optimizer.zero_grad(set_to_none=True)
        with phase("forward"):
            stream = Stream(batch.tokens)
            points = []  # (stage, its output) where the projected error enters
            for stage in model.stages():
                if stage.kind == "head":
                    head_input = model.pool(stream.x).detach().requires_grad_()
                    logits = model.output(head_input)
                    continue
                if stage.kind == "norm":  # a stack's final norm ends its last block's segment
                    last, out = points.pop()
                    stream.x = out
                    stage.run(stream)
                    points.append((last, stream.x))
                else:
                    stage.run(stream)
                    points.append((stage, stream.x))
                stream.x = stream.x.detach()  # the next segment starts from a constant
            loss = objective.loss(logits, batch.targets)
            del logits  # vocabulary-wide: released before the backward, which does not need it
        with phase("backward"):
            loss.backward()  # the head's gradients, and the error at its input
        error = head_input.grad
        with phase("error_projection"):
            grads = [self.project(error, stage.name, model.error_aligned(stage.stack), out) for stage, out in points]
        with phase("backward"):
            torch.autograd.backward([out for _, out in points], grads)
        with phase("optimizer_step"):
            self.optimizer.step()
        return loss.detach()

    def project(self, error: torch.Tensor, point: str, aligned: bool, out: torch.Tensor) -> torch.Tensor:
        feedback = self.feedback[point]
        with attribution.layer(f"{point}.dfa_projection"):
            if aligned:
                return error @ feedback
            per_sequence = error if error.dim() == 2 else error.sum(dim=1)
            projected = (per_sequence @ feedback) / out.shape[1]
            return projected.unsqueeze(1).expand_as(out)
