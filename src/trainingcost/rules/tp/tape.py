"""TP's step on the executed memory tape (``analytic/tape``): the target rules' shared step (``rules/_targets/tape.py``)."""

from __future__ import annotations

from ...analytic.tape import Group, Run, Tape
from .._targets.tape import target_program


def program(t: Tape, g: Group, run: Run) -> None:
    target_program(t, g, run, "tp")
