"""PEPITA (Dellaferrera & Kreiman 2022; Algorithm 1 of Pau & Aymone 2024): two forward passes, no backward.

Table 2 of the paper: 2 forward passes + weight update + error projection, the
embedding updated by a dense product. What the code runs (``executed``): the
modulated pass stops before the head, and the embedding update is an index-add.
"""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="pepita",
    label="PEPITA",
    color="#de8f05",
    marker="X",
    order=20,
    source="Dellaferrera & Kreiman 2022; Pau & Aymone 2024, Algorithm 1",
    phases=("forward", "error_projection", "modulated_pass", "weight_update", "optimizer_step"),
    recipe={
        "forward": (("forward", 2),),
        "error_projection": (("error_projection", 1),),
        "weight_update": (("weight_grad", 1), ("weight_grad_dense", 1)),
    },
    recipe_overrides={
        "executed": {
            "forward": (("forward", 1), ("forward_modulated", 1)),
            "weight_update": (("weight_grad", 1),),
        }
    },
    memory=RuleMemory(activations="pepita", feedback="output"),
    tape="own",
    # a mixture of experts: the clean and modulated passes may route a token to different experts, so an expert's
    # rows in one pass have no partner in the other for the update h - h_mod (docs/learning_rules.md)
    trains_experts=False,
    defaults={"weight_decay": 0.0, "pepita_f_scale": 0.05},
)
