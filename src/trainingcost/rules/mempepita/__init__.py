"""MEMPEPITA (Pau & Aymone 2023; Algorithm 2 of Pau & Aymone 2024): PEPITA, recomputing the clean pass.

Table 2 of the paper: 3 forward passes + weight update + error projection.
What the code runs (``executed``): the clean recomputation and the modulated
pass stop before the head, and the embedding update is an index-add.
"""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="mempepita",
    label="MEMPEPITA",
    color="#029e73",
    marker="s",
    order=30,
    source="Pau & Aymone 2023; Pau & Aymone 2024, Algorithm 2",
    phases=("forward", "error_projection", "modulated_pass", "weight_update", "optimizer_step"),
    recipe={
        "forward": (("forward", 3),),
        "error_projection": (("error_projection", 1),),
        "weight_update": (("weight_grad", 1), ("weight_grad_dense", 1)),
    },
    recipe_overrides={
        "executed": {
            "forward": (("forward", 1), ("forward_modulated", 2)),
            "weight_update": (("weight_grad", 1),),
        }
    },
    memory=RuleMemory(activations="mempepita", feedback="output"),
    tape="own",
    # a mixture of experts: the clean and modulated passes may route a token to different experts, so an expert's
    # rows in one pass have no partner in the other for the update h - h_mod (docs/learning_rules.md)
    trains_experts=False,
    defaults={"weight_decay": 0.0, "pepita_f_scale": 0.05},
)
