"""Each rule's step replayed on the tape, per group of configurations: the step's peak and each phase's peak."""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Callable

import numpy as np

from .. import catalogue
from .buffers import STEP_PHASES, Tape
from .group import Group, groups
from .programs import Run, autograd_step

PEAK_PHASE_COLUMNS = tuple(f"peak_{phase}" for phase in STEP_PHASES)
# The tape replays every block (about a millisecond per block and rule): deeper models get -1 (not replayed).
MAX_TAPE_BLOCKS = 1024
# A mixture of experts is not replayed (-1) under any rule: the sizes of its dispatch (each expert's gathered rows,
# hidden tensors and weighted output) follow the routing of the step's data, which shapes alone do not give; the
# hand model (memory.py) gives its components under the token-balanced assumption (docs/cost_models.md).

Program = Callable[[Tape, Group, Run], object]


@lru_cache(maxsize=None)
def program(rule_name: str) -> Program | None:
    """The tape program of a rule's step, as its spec declares it (``RuleSpec.tape``): autograd's, the one in the
    rule's own ``tape.py``, or None (not replayed)."""
    spec = catalogue.rule(rule_name)
    if spec.tape == "none":
        return None
    if spec.tape == "autograd":
        return autograd_step
    where = f"{catalogue.package(rule_name)}.tape"
    found = getattr(importlib.import_module(where), "program", None)
    if not callable(found):
        raise TypeError(f"{where}: a rule whose spec says tape='own' defines program(t, g, run)")
    return found


def replays(rule_name: str) -> bool:
    """Whether the tape replays ``rule_name``'s step (a rule that declares ``tape='none'`` has peaks of -1)."""
    return program(rule_name) is not None


def run_settings(rule_name: str, optimizer: str, weight_decay: float = 0.0, mirror_steps: int = 1) -> Run:
    memory = catalogue.rule(rule_name).memory
    return Run(optimizer, weight_decay, mirror_steps, memory.trains_feedback and memory.feedback == "weights")


def step_peaks(configs, rule_name: str, optimizer: str, dtype_bytes: int, start: np.ndarray, gradients: np.ndarray,
               weight_decay: float = 0.0, mirror_steps: int = 1) -> dict[str, np.ndarray]:
    """The step's peak and each phase's peak (bytes, -1 where the rule has no such phase), per configuration,
    for a step that begins with ``start`` bytes alive, ``gradients`` of them last step's gradients. A model of
    more than :data:`MAX_TAPE_BLOCKS` blocks is not replayed: -1 everywhere."""
    n = len(configs)
    out = {"peak": np.full(n, -1, dtype=np.int64), **{c: np.full(n, -1, dtype=np.int64) for c in PEAK_PHASE_COLUMNS}}
    replay = program(rule_name)
    if replay is None:
        return out
    run = run_settings(rule_name, optimizer, weight_decay, mirror_steps)
    for rows, key in groups(configs):
        if key.blocks > MAX_TAPE_BLOCKS or key.experts:
            continue
        g = Group.of(configs, rows, key, dtype_bytes)
        t = Tape(start[rows])
        t.live = t.live - gradients[rows]  # zero_grad(set_to_none=True), every rule's first line
        replay(t, g, run)
        out["peak"][rows] = t.peak
        for phase, values in t.phase_peaks.items():
            out[f"peak_{phase}"][rows] = values
    return out
