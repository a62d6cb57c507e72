"""trainingcost: what training a transformer costs, under backpropagation and backprop-free rules."""

__version__ = "0.1.0"


def __getattr__(name):
    """``trainingcost.plan``, ``trainingcost.estimate``, ``trainingcost.Error`` (src/trainingcost/api.py), imported
    on first use so that ``import trainingcost`` stays light."""
    if name in ("plan", "estimate", "Error", "PlanResult", "EstimateResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainingcost' has no attribute {name!r}")
