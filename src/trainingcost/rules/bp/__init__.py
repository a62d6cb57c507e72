"""Backpropagation (Rumelhart et al. 1986): autograd computes every gradient, an optimizer applies it."""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="bp",
    label="BP",
    color="#0173b2",
    marker="o",
    order=10,
    source="Rumelhart, Hinton & Williams 1986",
    phases=("forward", "backward", "optimizer_step"),
    recipe={
        "forward": (("forward", 1),),
        "backward": (("backward_total", 1),),
        "weight_update": (("weight_grad", 1),),
    },
    memory=RuleMemory(activations="autograd", feedback="none"),
    defaults={"weight_decay": 0.0},
    trains_mtp=True,  # DeepSeek-V3's multi-token prediction: its modules' losses backpropagated (section 2.2)
)
