"""Difference target propagation (Lee et al. 2015), on the units of ``rules/_targets/``.

The first target sits at the top unit, ``t_L = h_L - eta dL/dh_L`` (the head learns from its true gradient);
below, ``t_{l-1} = h_{l-1} + g_l(t_l) - g_l(h_l)``, i.e. ``e_{l-1} = e_l V_l^T`` with the affine inverse.
"""

from __future__ import annotations

from .._targets.step import InverseRule, Unit, difference_step


class DifferenceTargetPropagation(InverseRule):

    def down(self, upper: Unit, lower: Unit, error):
        return difference_step(error, self.inverse[upper.name])
