"""MEMPEPITA (Pau & Aymone 2023; Algorithm 2 of Pau & Aymone 2024).

PEPITA's updates, but the standard pass keeps nothing but its output error.
The modulated pass runs stage by stage (embedding, each sublayer with its add &
norm, head) beside a second standard pass that recomputes the clean activations
of the same stage, so only one sublayer's activations of each pass are alive at
a time: the paper's "two adjacent layers", as near as a residual block allows. Three
forward passes in all; the updates equal PEPITA's on the same batch.
"""

from __future__ import annotations

from ..pepita.step import Pepita


class MemPepita(Pepita):
    recompute = True
