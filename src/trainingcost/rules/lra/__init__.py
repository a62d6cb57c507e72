"""Local representation alignment, LRA-E (Ororbia & Mali 2019; Franceschi, Backpropagation Free Transformers,
section 6): error units and error weights E in place of inverses; each unit learns from its local loss, each E from
its own local rule.

Per step: the forward; the head's weight gradient (the loss's backward stops at the head: no dL/dh_L, no
weight transport); the output error through E_head (the head's shape) and one product with each block's E
(d x d); E's updates, one product per block (the head's E copies W_head's gradient); the local backward,
inside each unit; the optimizer step.
"""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="lra",
    label="LRA",
    color="#b8860b",
    marker="*",
    order=85,
    source="Ororbia & Mali 2019 (LRA-E; code: AnkurMali/LRA-E)",
    phases=("forward", "backward", "target_propagation", "feedback_update", "optimizer_step"),
    recipe={
        "forward": (("forward", 1),),
        "backward": (("backward_local", 1),),
        "target_propagation": (("target_projection", 1), ("head_projection", 1)),
        "weight_update": (("weight_grad", 1),),
        "feedback_update": (("feedback_weight_grad", 1), ("head_feedback_copy", 1)),
    },
    memory=RuleMemory(activations="targets", feedback="error_weights", trains_feedback=True),
    tape="own",
    # Ororbia & Mali's code (compute_lra_updates): beta = 0.1, gamma = 1.0.
    defaults={"weight_decay": 0.0, "lra_beta": 0.1, "lra_gamma": 1.0},
)
