"""Analytic training costs from shapes alone (no torch)."""

from .engine import COST_MODELS, DEFAULT_COST_MODELS, PHASES, RULES, REGISTRY, evaluate, layer_table, phase_totals

__all__ = ["COST_MODELS", "DEFAULT_COST_MODELS", "PHASES", "RULES", "REGISTRY", "evaluate", "layer_table", "phase_totals"]
