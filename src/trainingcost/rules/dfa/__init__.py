"""Direct feedback alignment (Nøkland 2016; on transformers Launay et al. 2020).

No gradient leaves a block; the output error reaches each block through its own projection.
"""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="dfa",
    label="DFA",
    color="#fbafe4",
    marker="v",
    order=70,
    source="Nøkland 2016; Launay et al. 2020",
    phases=("forward", "backward", "error_projection", "optimizer_step"),
    recipe={
        "forward": (("forward", 1),),
        "backward": (("backward_dfa", 1),),
        "error_projection": (("dfa_projection", 1),),
        "weight_update": (("weight_grad", 1),),
    },
    memory=RuleMemory(activations="autograd", feedback="blocks"),
    tape="own",
    defaults={"weight_decay": 0.0},
)
