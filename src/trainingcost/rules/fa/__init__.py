"""Feedback alignment (Lillicrap et al. 2016): a fixed random B of W's shape in place of Wᵀ in the backward.

B has Wᵀ's shape, so every product keeps BP's cost.
"""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="fa",
    label="FA",
    color="#d55e00",
    marker="P",
    order=40,
    source="Lillicrap et al. 2016",
    phases=("forward", "backward", "optimizer_step"),
    recipe={
        "forward": (("forward", 1),),
        "backward": (("backward_total", 1),),
        "weight_update": (("weight_grad", 1),),
    },
    memory=RuleMemory(activations="autograd", feedback="weights"),
    defaults={"weight_decay": 0.0},
)
