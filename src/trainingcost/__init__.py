"""trainingcost: what training a transformer costs, under backpropagation and backprop-free rules.

The Python API (src/trainingcost/api.py), the core the command line sits on::

    import trainingcost
    result = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpu="h100-sxm", gpus=64, rule=["bp", "dfa"])
    result.table

:func:`plan` and :func:`estimate` are imported on first use, so that ``import trainingcost`` stays light.
"""

__version__ = "0.1.0"
__all__ = ["plan", "estimate", "Error", "PlanResult", "EstimateResult", "__version__"]


def __getattr__(name):
    if name in __all__ and name != "__version__":
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainingcost' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
