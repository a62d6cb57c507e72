"""The training steps of the learning rules: each rule folder's ``step.py``, found from the catalogue.

The one :class:`~.rule.Rule` subclass that a rule's ``step.py`` defines is its
training step; the registry attaches the rule's declaration to it.
"""

from __future__ import annotations

import importlib
import inspect
from functools import lru_cache

import torch

from ..analytic.catalogue import package, rule, rule_names
from ..config.training import RuleOptions
from .rule import Rule


@lru_cache(maxsize=None)
def rule_class(name: str) -> type[Rule]:
    """The training step of rule ``name``."""
    spec = rule(name)
    module = importlib.import_module(f"{package(name)}.step")
    defined = [cls for _, cls in inspect.getmembers(module, inspect.isclass)
               if issubclass(cls, Rule) and cls is not Rule and cls.__module__ == module.__name__]
    if len(defined) != 1:
        raise TypeError(f"{module.__name__}: defines {len(defined)} Rule subclasses; a rule's step.py defines exactly one")
    cls = defined[0]
    cls.spec = spec
    return cls


def make_rule(name: str, model, options: RuleOptions | None = None, seed: int = 0) -> Rule:
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    return rule_class(name)(model, options or RuleOptions(), generator)


__all__ = ["make_rule", "rule_class", "rule_names"]
