"""MEMPEPITA's step on the executed memory tape: PEPITA's, recomputing the clean pass stage by stage."""

from __future__ import annotations

from ...analytic.tape import Group, Run, Tape
from ..pepita.tape import pepita_step


def program(t: Tape, g: Group, run: Run) -> None:
    pepita_step(t, g, run, recompute=True)
