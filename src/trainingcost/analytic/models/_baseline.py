"""What the published whole-model baselines share: a forward cost split into phases.

Each baseline gives a forward cost per sequence; its own convention puts the
backward pass at twice the forward. We split that evenly between the input
gradient (``backward``) and the weight gradient (``weight_update``) so that the
phases line up with the paper's. Under the other rules the same multiples
apply (Table 2 generalised: PEPITA 2F + W, MEMPEPITA 3F + W, KP adds one more
weight-gradient product, WM adds forward and weight-gradient products of the
weight matrices per mirror step). The baselines cannot see error projections or
what DFA leaves out; see docs/cost_models.md.

Shapes: N source tokens (``src_len``), M target tokens (``tgt_len``); outside
encoder-decoder both are the sequence length and only one stack exists.
"""

from __future__ import annotations

from ..registry import cost


def phases(weights_flops, attention_flops) -> dict:
    """Quantities from a forward split into products with weights and attention scores."""
    forward = weights_flops + attention_flops
    return {
        "forward": cost(forward // 2, forward),
        "backward": cost(forward // 2, forward),
        "weight_grad": cost(forward // 2, forward),
        "linear_forward": cost(weights_flops // 2, weights_flops),
        "linear_weight_grad": cost(weights_flops // 2, weights_flops),
    }
