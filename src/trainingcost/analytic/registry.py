"""The cost-model registry: (cost model, layer kind) -> formula, one function each.

Cost models are modules of ``analytic/models/``, discovered, never listed: each
calls :func:`declare` once (its name, its place in tables, its granularity)
and :func:`register` once per layer kind it prices. This module imports none
of them at import time; :func:`cost_models` loads them on first use.
Registration raises on a duplicate.

A formula returns *quantities* for one layer kind, per sequence, each a pair
(MACCs, FLOPs) or a triple with the elementwise FLOPs; see :mod:`.engine`.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

MODELS_PACKAGE = "trainingcost.analytic.models"


def half(values):
    """``values // 2``: in float64 (exact integers) as floor(values x 0.5), the same numbers without a floating
    division, which is many times slower; integers (and scalars) as ``values // 2``."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        halved = values * 0.5
        return np.floor(halved, out=halved)
    return values // 2


def cost(maccs, flops, elementwise=None, where=None) -> tuple:
    """A quantity: MACCs and FLOPs per sequence, optionally the elementwise FLOPs, and optionally ``where``,
    a bool array: the templates that have the quantity at all (default: every template of the kind)."""
    if where is not None:
        return (maccs, flops, elementwise, where)
    return (maccs, flops) if elementwise is None else (maccs, flops, elementwise)


@dataclass
class CostModel:
    name: str
    order: int  # place in tables and figures
    granularity: str  # 'layer' (per layer instance) or 'model' (one row named 'model')
    description: str
    recipes: str = ""  # the cost model whose recipe overrides (RuleSpec.recipe_overrides) it follows; '': its own
    scope: str = "any"  # 'any' architecture, or 'default': only the 2017 transformer (every option at its default)
    formulas: dict[str, Callable] = field(default_factory=dict)  # layer kind -> formula


REGISTRY: dict[str, CostModel] = {}


SCOPES = ("any", "default")


def declare(name: str, *, order: int, granularity: str = "layer", description: str = "", scope: str = "any",
            recipes: str = "") -> CostModel:
    """Declare a cost model (once). ``scope='default'``: it defines the 2017 transformer only, and configurations
    with another architecture have no rows under it."""
    if name in REGISTRY:
        raise ValueError(f"cost model {name!r} is declared twice")
    if granularity not in ("layer", "model"):
        raise ValueError(f"cost model {name!r}: granularity must be 'layer' or 'model', not {granularity!r}")
    if scope not in SCOPES:
        raise ValueError(f"cost model {name!r}: scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    REGISTRY[name] = CostModel(name, order, granularity, description, recipes=recipes or name, scope=scope)
    return REGISTRY[name]


def register(cost_model: str, *kinds: str):
    """Decorator: ``formula`` prices each of ``kinds`` under ``cost_model`` (declared first)."""

    def decorate(formula: Callable) -> Callable:
        if cost_model not in REGISTRY:
            raise KeyError(f"cost model {cost_model!r} is not declared")
        model = REGISTRY[cost_model]
        for kind in kinds:
            if kind in model.formulas:
                raise ValueError(f"cost model {cost_model!r} has two formulas for layer kind {kind!r}")
            model.formulas[kind] = formula
        return formula

    return decorate


@lru_cache(maxsize=1)
def _load() -> tuple[str, ...]:
    package = importlib.import_module(MODELS_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{MODELS_PACKAGE}.{info.name}")
    return tuple(sorted(REGISTRY, key=lambda name: (REGISTRY[name].order, name)))


def cost_model_names() -> tuple[str, ...]:
    """Every cost model, in table order."""
    return _load()


def cost_model(name: str) -> CostModel:
    _load()
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown cost model {name!r} (allowed: {', '.join(cost_model_names())})") from None
