"""Local representation alignment, LRA-E (Ororbia & Mali 2019), on the units of ``rules/_targets/``.

Error units ``e_l = h_l - t_l``; ``t_{l-1} = h_{l-1} - beta e_l E_l``; the head's output error reaches the top
unit through ``E_head``; each unit learns from its local loss, each E from ``gamma e_l^T h_{l-1}``.
"""

from __future__ import annotations

from .._targets.step import AlignmentRule


class LocalRepresentationAlignment(AlignmentRule):
    pass
