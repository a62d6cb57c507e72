"""Kolen-Pollack (Akrout et al. 2019, eqs. 16-17; Franceschi, Backpropagation Free Transformers, section 4.3): B
receives W's update and decay.

Analytically, B's update is its own outer product (eq. 17); the code copies W's gradient instead.
"""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="kp",
    label="KP",
    color="#cc78bc",
    marker="D",
    order=50,
    source="Akrout et al. 2019 (after Kolen & Pollack 1994)",
    phases=("forward", "backward", "optimizer_step"),
    recipe={
        "forward": (("forward", 1),),
        "backward": (("backward_total", 1),),
        "weight_update": (("weight_grad", 1),),
        "feedback_update": (("linear_weight_grad", 1),),
    },
    recipe_overrides={"executed": {"feedback_update": (("feedback_copy", 1),)}},
    memory=RuleMemory(activations="autograd", feedback="weights", trains_feedback=True),
    defaults={"weight_decay": 1e-3},  # without decay KP is FA: W - B never changes
)
