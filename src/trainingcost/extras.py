"""What each install extra adds, and the one line a command gives when it needs one that is not installed.

``pip install trainingcost`` (no extras) estimates, plans, lists the hardware and checks a workflow config: numpy,
pandas, PyYAML and jsonschema. The rest comes in layers (pyproject.toml):

========== ================================================ ==============================================
extra      adds                                             for
========== ================================================ ==============================================
tables     pyarrow                                          parquet tables: --out, --frontiers, --measured-run
figures    seaborn (matplotlib)                             plan --figure
hf         huggingface_hub                                  --hf-config with a Hub name (meta-llama/Llama-3.1-8B)
train      torch, pyarrow, NVML                             train, calibrate, curves
workflow   Snakemake, its SLURM plugin, pyarrow, seaborn    the workflow (make run)
web        FastAPI, uvicorn                                 the planner page: trainingcost serve
dev        all of the above, transformers and the test tools make test
========== ================================================ ==============================================
"""

from __future__ import annotations

import importlib.util

from .config.errors import ConfigError

EXTRA_OF = {"torch": "train", "pynvml": "train", "pyarrow": "tables", "matplotlib": "figures", "seaborn": "figures",
            "snakemake": "workflow", "transformers": "dev", "huggingface_hub": "hf",
            "fastapi": "web", "uvicorn": "web"}
NEEDED_FOR = {"train": "training", "tables": "a parquet table", "figures": "a figure", "workflow": "the workflow",
              "hf": "a Hugging Face Hub name", "web": "the planner page", "dev": "this"}


class MissingExtra(ConfigError):
    """A command needs a library that this install leaves out; the message names the extra to install."""


def message(module: str) -> str:
    name = module.split(".")[0]
    extra = EXTRA_OF.get(name, "dev")
    return (f"{name} is not installed; {NEEDED_FOR[extra]} needs the {extra} extra: pip install '.[{extra}]' in the "
            "trainingcost folder")


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, field: str | None = None) -> None:
    """Refuse, before any work, a command (or its flag ``field``) that needs ``module`` where it is not installed."""
    if not installed(module):
        raise MissingExtra(f"{field}: {message(module)}" if field else message(module))


def is_missing_extra(exc: BaseException) -> bool:
    """A ModuleNotFoundError for one of the extras' libraries (not a bug's import error)."""
    return isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in EXTRA_OF
