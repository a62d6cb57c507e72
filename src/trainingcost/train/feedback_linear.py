"""A linear layer whose backward pass uses a feedback matrix B in place of the weight.

Feedback alignment (Lillicrap et al. 2016) and its relatives keep the forward
pass y = x Wᵀ + b and replace the error sent to the input, g W, by g B, with B
of W's shape ``[out, in]`` (so B plays the role of Wᵀ in column convention).
The weight and bias gradients are the usual ones. When B itself requires a
gradient (Kolen-Pollack, Akrout et al. 2019), it receives W's gradient, so an
optimizer gives both the same update.

With no feedback matrix (``feedback=None``) the backward uses W itself: this
is backpropagation, with autograd's products, written out so that the weight
gradient can be attributed to the ``weight_update`` phase
(:mod:`trainingcost.train.attribution`) apart from the input gradient.

Works on any number of leading dimensions ([batch, tokens, features]), unlike
implementations that call ``mm`` on 2-D inputs only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import attribution


class FeedbackLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, feedback: torch.Tensor | None):
        ctx.save_for_backward(x, weight if feedback is None else feedback)
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, feedback = ctx.saved_tensors
        need_x, need_w, need_b, need_feedback = ctx.needs_input_grad
        grad_x = grad_w = grad_b = grad_feedback = None
        if need_x:
            grad_x = grad_out @ feedback  # the error travels through B, not W
        with attribution.phase("weight_update"):
            if need_w or need_feedback:
                rows_out = grad_out.reshape(-1, grad_out.shape[-1])
                rows_in = x.reshape(-1, x.shape[-1])
                grad_w = rows_out.t() @ rows_in
                if need_feedback:  # Kolen-Pollack: B receives W's update (a copy: optimizers may work in place)
                    grad_feedback = grad_w.clone() if need_w else grad_w
                if not need_w:
                    grad_w = None
            if need_b and ctx.has_bias:
                grad_b = grad_out.reshape(-1, grad_out.shape[-1]).sum(0)
        return grad_x, grad_w, grad_b, grad_feedback
