"""Learning rules, one module each, registered by name.

Adding a rule is one file in this package: a :class:`~.base.Rule` subclass
decorated with :func:`register`. The names are those of the analytic engine.
"""

from __future__ import annotations

import importlib
import pkgutil

import torch

from ..analytic.engine import RULES as ANALYTIC_RULES
from .base import EXECUTION_PHASES, OPTIMIZERS, Rule, RuleOptions, no_phases

REGISTRY: dict[str, type[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")


def rule_names() -> tuple[str, ...]:
    """Registered rules, in the analytic engine's order, then any others."""
    _load()
    return tuple([r for r in ANALYTIC_RULES if r in REGISTRY] + sorted(set(REGISTRY) - set(ANALYTIC_RULES)))


def make_rule(name: str, model, options: RuleOptions | None = None, seed: int = 0) -> Rule:
    _load()
    if name not in REGISTRY:
        raise ValueError(f"unknown rule {name!r} (allowed: {', '.join(rule_names())})")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    return REGISTRY[name](model, options or RuleOptions(), generator)


__all__ = ["EXECUTION_PHASES", "OPTIMIZERS", "REGISTRY", "Rule", "RuleOptions", "make_rule", "no_phases", "register", "rule_names"]
