"""Analytic training costs from shapes alone (no torch).

- :mod:`.spec`: the catalogue's declaration types; :mod:`.layers`: every layer kind and the arches' structure;
- :mod:`.catalogue`: the learning rules, discovered from ``trainingcost/rules/*/``;
- :mod:`.registry`: the cost models, discovered from ``analytic/models/``;
- :mod:`.engine`: formulas × recipes, vectorised over configurations; :mod:`.memory`: bytes per step.
"""

from .catalogue import rule, rule_names, rules, vocabulary
from .engine import PHASES, evaluate, layer_rows, layer_table, phase_totals, recipe
from .registry import cost_model, cost_model_names

__all__ = [
    "PHASES", "cost_model", "cost_model_names", "evaluate", "layer_rows", "layer_table", "phase_totals", "recipe", "rule",
    "rule_names", "rules", "vocabulary",
]
