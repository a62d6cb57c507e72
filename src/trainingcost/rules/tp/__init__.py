"""Target propagation (Bengio 2014; Bartunov et al. 2018 section 2.1.2; Franceschi, Backpropagation Free
Transformers, section 5): each target is the learned inverse of the target above, t_{l-1} = g_l(t_l); each unit
learns from its local loss.

It costs what DTP costs (one product with each inverse per unit, the same inverse training); only the
target recursion differs. Its hyperparameters are DTP's: no source tunes TP's own.
"""

from ...analytic.spec import RuleMemory, RuleSpec
from ..dtp import PHASES, SPEC as DTP

SPEC = RuleSpec(
    name="tp",
    label="TP",
    color="#949494",
    marker="h",
    order=75,
    source="Bengio 2014; Bartunov et al. 2018",
    phases=PHASES,
    recipe=DTP.recipe,
    memory=RuleMemory(activations="targets", feedback="inverses", trains_feedback=True),
    tape="own",
    defaults=dict(DTP.defaults),
)
