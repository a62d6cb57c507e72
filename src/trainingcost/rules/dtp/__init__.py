"""Difference target propagation (Lee et al. 2015; Franceschi, Backpropagation Free Transformers, section 5):
targets move down the units through learned inverses with the difference correction; each unit learns from its local
loss.

Per step: the forward; the head's backward (its weights and dL/dh_L); one product with each block's inverse
V (d x d) to carry the target difference down; the inverse training, a noisy forward of every block and two
products with V (g's forward on it, V's gradient); the local backward, which stays inside each unit (what
DFA runs); the optimizer step.
"""

from ...analytic.spec import RuleMemory, RuleSpec

PHASES = ("forward", "backward", "target_propagation", "feedback_update", "optimizer_step")

SPEC = RuleSpec(
    name="dtp",
    label="DTP",
    color="#56b4e9",
    marker="p",
    order=80,
    source="Lee et al. 2015 (code: donghyunlee/dtp); Bartunov et al. 2018",
    phases=PHASES,
    recipe={
        "forward": (("forward", 1),),
        "backward": (("backward_dfa", 1),),
        "target_propagation": (("target_projection", 1),),
        "weight_update": (("weight_grad", 1),),
        "feedback_update": (("forward_unit", 1), ("feedback_forward", 1), ("feedback_weight_grad", 1)),
    },
    memory=RuleMemory(activations="targets", feedback="inverses", trains_feedback=True),
    tape="own",
    # Lee et al. 2015's code, exp(0.3277, 0.01489, 0.005011, 0.3598): the first target's step, the forward and
    # inverse learning rates (their ratio, 0.3365, gives the inverse rate from the run's) and the noise's std.
    defaults={"weight_decay": 0.0, "target_step": 0.3277, "target_noise": 0.3598, "inverse_lr_ratio": 0.3365},
)
