"""Target propagation (Bengio 2014; as Bartunov et al. 2018 state it), on the units of ``rules/_targets/``.

The first target is DTP's, ``t_L = h_L - eta dL/dh_L``; below, ``t_{l-1} = g_l(t_l)``: the inverse of the
unit above applied to its target, with no difference correction.
"""

from __future__ import annotations

from .._targets.step import InverseRule, Unit, target_step


class TargetPropagation(InverseRule):

    def down(self, upper: Unit, lower: Unit, error):
        return target_step(error, upper.output.detach(), lower.output.detach(), self.inverse[upper.name],
                           self.inverse_bias[upper.name])
