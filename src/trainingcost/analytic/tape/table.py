"""Each rule's step replayed on the tape, per group of configurations: the step's peak and each phase's peak."""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Callable

import numpy as np

from .. import catalogue
from .buffers import STEP_PHASES, Tape
from .group import Group, groups
from .moe import Routing
from .programs import Run, autograd_step

PEAK_PHASE_COLUMNS = tuple(f"peak_{phase}" for phase in STEP_PHASES)
# The tape replays every block (about a millisecond per block and rule): deeper models get -1 (not replayed).
MAX_TAPE_BLOCKS = 1024
# A mixture of experts is replayed for the rows each expert gets (tape/moe.py): token-balanced by default (the
# assumption of the analytic model, docs/cost_models.md, every expert primed), or a measured step's recorded
# routing (``routing``: its calls, and which experts held a gradient and optimizer state when it began).

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
               weight_decay: float = 0.0, mirror_steps: int = 1, routing=None) -> dict[str, np.ndarray]:
    """The step's peak and each phase's peak (bytes, -1 where the rule has no such phase), per configuration,
    for a step that begins with ``start`` bytes alive, ``gradients`` of them last step's gradients. A model of
    more than :data:`MAX_TAPE_BLOCKS` blocks is not replayed: -1 everywhere, nor a mixture of experts under a rule
    that does not train one (``RuleSpec.trains_experts``), nor latent attention or multi-token prediction (no tape of them yet). A mixture of experts is replayed
    token-balanced, or, given ``routing`` (a measured step's ``MemoryReading.routing``: (layer, rows per expert) per
    call), with the rows its experts got (every configuration of ``configs`` with it): :mod:`.moe`. Returns too the
    step's start the tape began with (``step_start``): ``start``, less, given a routing record with the experts
    primed when the step began, the gradients and optimizer state of those that held none (:func:`unprimed_bytes`)."""
    n = len(configs)
    out = {"peak": np.full(n, -1, dtype=np.int64), **{c: np.full(n, -1, dtype=np.int64) for c in PEAK_PHASE_COLUMNS}}
    replay = program(rule_name)
    if replay is None:
        return out
    out["step_start"] = np.array(start, dtype=np.int64)
    run = run_settings(rule_name, optimizer, weight_decay, mirror_steps)
    trains_experts = catalogue.rule(rule_name).trains_experts
    for rows, key in groups(configs):
        if key.blocks > MAX_TAPE_BLOCKS or (key.experts and not trains_experts):  # (a rule that refuses a mixture)
            continue
        if key.mtp_depth and not catalogue.rule(rule_name).trains_mtp:  # (a rule that does not train the modules)
            continue
        for part in ([rows[i:i + 1] for i in range(len(rows))] if key.experts else [rows]):  # (a mixture: one by one)
            _replay(configs, part, key, dtype_bytes, start, gradients, replay, run, routing, out)
    return out


def unprimed_bytes(g: Group, run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(gradient bytes, optimizer state bytes) that the step's start, counted for every parameter, holds for a
    mixture's experts that held no gradient, or no optimizer state, when the step began (``moe.held_experts``;
    none token-balanced)."""
    if not g.experts:
        return np.zeros_like(g.B), np.zeros_like(g.B)
    from .moe import held_experts
    from .programs import OPTIMIZER_SLOTS, STEP_SCALAR_BYTES

    owners = [(elements, owner) for elements, owner in g.parameter_owners(run.feedback_parameters) if owner is not None]
    grad, state = held_experts(g, "grad"), held_experts(g, "state")
    no_grad = sum((elements for elements, (layer, e) in owners if not grad[layer][e]), np.zeros_like(g.B))
    stateless = [elements for elements, (layer, e) in owners if not state[layer][e]]
    no_state = (OPTIMIZER_SLOTS[run.optimizer] * g.z * sum(stateless, np.zeros_like(g.B))
                + STEP_SCALAR_BYTES[run.optimizer] * len(stateless))
    return no_grad * g.z, no_state


def _replay(configs, rows, key, dtype_bytes, start, gradients, replay, run, routing, out) -> None:
    g = Group.of(configs, rows, key, dtype_bytes)
    if key.experts:
        g.routing = Routing(routing) if routing is not None else None
    no_grad, no_state = unprimed_bytes(g, run)
    out["step_start"][rows] = start[rows] - no_grad - no_state
    t = Tape(out["step_start"][rows])
    t.live = t.live - (gradients[rows] - no_grad)  # zero_grad(set_to_none=True), every rule's first line
    replay(t, g, run)
    if g.routing is not None:
        g.routing.check_consumed()
    out["peak"][rows] = t.peak
    for phase, values in t.phase_peaks.items():
        out[f"peak_{phase}"][rows] = values
