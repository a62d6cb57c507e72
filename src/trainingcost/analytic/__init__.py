"""Analytic training costs from shapes alone (no torch)."""

from .engine import DEFAULT_COST_MODELS, PHASES, RULES, REGISTRY, evaluate, layer_table, phase_totals

__all__ = ["DEFAULT_COST_MODELS", "PHASES", "RULES", "REGISTRY", "evaluate", "layer_table", "phase_totals"]
