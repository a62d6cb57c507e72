"""Weight mirror (Akrout et al. 2019; Franceschi, Backpropagation Free Transformers, section 4.2): FA plus Hebbian
mirror steps that pull B towards W.

Each mirror step drives every weight matrix with noise and accumulates x yᵀ into B.
"""

from ...analytic.spec import RuleMemory, RuleSpec

SPEC = RuleSpec(
    name="wm",
    label="WM",
    color="#ca9161",
    marker="^",
    order=60,
    source="Akrout et al. 2019",
    phases=("forward", "backward", "optimizer_step", "mirror"),
    recipe={
        "forward": (("forward", 1),),
        "backward": (("backward_total", 1),),
        "weight_update": (("weight_grad", 1),),
        "mirror": (("linear_forward", "mirror_steps"), ("linear_weight_grad", "mirror_steps")),
    },
    memory=RuleMemory(activations="autograd", feedback="weights", matrix_buffer_bytes=8),  # float64 norm of each B
    tape="own",
    defaults={"weight_decay": 0.0, "mirror_lr": 0.1, "mirror_decay": 0.1, "mirror_noise": 1.0},
)
