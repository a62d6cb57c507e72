"""The rule catalogue: every learning rule, discovered from its own folder under ``trainingcost/rules/``.

A rule is a folder ``rules/<name>/``: its ``__init__.py`` declares ``SPEC``, a
:class:`~.spec.RuleSpec` (torch-free), and its ``step.py`` holds the training
step (torch; read by :mod:`trainingcost.train.registry`). Nothing lists the
rules by hand: the tables, the memory model, the predictor, the figures, the
schema's enums and the command line's choices all read :func:`rules`.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from .spec import RuleSpec

RULES_PACKAGE = "trainingcost.rules"
# The rule every other is compared with: the command line's "x BP" ratios and ``trainingcost train``'s default.
REFERENCE_RULE = "bp"


def _register(found: dict[str, RuleSpec], spec: RuleSpec, where: str) -> None:
    if not isinstance(spec, RuleSpec):
        raise TypeError(f"{where}: SPEC must be a RuleSpec, not {type(spec).__name__}")
    if spec.name in found:
        raise ValueError(f"rule {spec.name!r} is declared twice ({where})")
    found[spec.name] = spec


_PACKAGES: dict[str, str] = {}  # rule name -> the package that declares it


@lru_cache(maxsize=1)
def _catalogue() -> dict[str, RuleSpec]:
    package = importlib.import_module(RULES_PACKAGE)
    found: dict[str, RuleSpec] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg or info.name.startswith("_"):
            continue
        where = f"{RULES_PACKAGE}.{info.name}"
        spec = getattr(importlib.import_module(where), "SPEC", None)
        if spec is None:
            raise ValueError(f"{where}: a rule folder must declare SPEC")
        _register(found, spec, where)
        _PACKAGES[spec.name] = where
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def package(name: str) -> str:
    """The package that declares rule ``name`` (its training step is ``<package>.step``)."""
    rule(name)
    return _PACKAGES[name]


def rules() -> tuple[RuleSpec, ...]:
    """Every rule, in table order."""
    return tuple(_catalogue().values())


def rule_names() -> tuple[str, ...]:
    return tuple(_catalogue())


def rule(name: str) -> RuleSpec:
    try:
        return _catalogue()[name]
    except KeyError:
        raise KeyError(f"unknown rule {name!r} (allowed: {', '.join(rule_names())})") from None


def untrained(name: str, cfg) -> str:
    """What of ``cfg`` rule ``name`` does not train ("" where it trains the whole model): a mixture of experts
    under a rule whose spec says ``trains_experts=False``, multi-token prediction under one that says not
    ``trains_mtp`` (no source defines their feedback for its modules)."""
    spec = rule(name)
    if cfg.moe and not spec.trains_experts:
        return "a mixture of experts"
    if getattr(cfg, "mtp_depth", 0) and not spec.trains_mtp:
        return "multi-token prediction"
    return ""


def check_architecture(name: str, cfg, where: str = "rule") -> None:
    """One line (a ConfigError naming ``where``) where rule ``name`` does not train ``cfg``'s architecture
    (:func:`untrained`); before any job runs."""
    what = untrained(name, cfg)
    if what:
        from ..config.errors import ConfigError

        if what == "a mixture of experts":
            allowed = ", ".join(spec.name for spec in rules() if spec.trains_experts)
            raise ConfigError(f"{where}: {name} does not train a mixture of experts (experts {cfg.experts}; "
                              f"docs/learning_rules.md); allowed with experts: {allowed}")
        allowed = ", ".join(spec.name for spec in rules() if spec.trains_mtp)
        raise ConfigError(f"{where}: {name} does not train multi-token prediction (mtp_depth {cfg.mtp_depth}; no "
                          f"source defines its feedback for the modules); allowed with mtp_depth: {allowed}")


def vocabulary() -> dict[str, tuple[str, ...]]:
    """The schema enums the catalogue decides: rules and cost models."""
    from .registry import cost_model_names

    return {"rule": rule_names(), "cost_model": cost_model_names()}
