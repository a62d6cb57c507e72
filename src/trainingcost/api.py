"""The Python API: :func:`plan` and :func:`estimate`, the commands as functions that return DataFrames.

Each takes the command line's flags as keywords (``--gpus 64-1024x2`` is ``gpus="64-1024x2"`` or
``gpus=[64, 128]``; ``--rule bp,dfa`` is ``rule=["bp", "dfa"]``; a flag without a value, such as ``--explain``, is
``explain=True``), parses them with the command line's own parser, and runs the same code. A mistake raises
:class:`trainingcost.Error` (the configuration error the command line reports), whose message is the command
line's one line::

    import trainingcost
    result = trainingcost.plan(preset="llama-2-70b", tokens=2e12, gpu="h100-sxm", gpus=512, layout="search",
                               rule=["bp", "dfa"])
    result.table[["rule", "layout", "step_time_s", "gpu_hours", "mfu"]]
"""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd

from .args import Parser, flag_message
from .config import ConfigError

Error = ConfigError


class _RaisingParser(Parser):
    """The command line's parser, raising :class:`Error` with its one line instead of exiting."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise Error(f"{self.prog}: error: {message}")

    def exit(self, status: int = 0, message: str | None = None):  # --help, --version
        raise Error((message or "").strip() or f"{self.prog}: exited")


@dataclasses.dataclass
class PlanResult:
    """``table``: the plan's rows (one per rule and cost model; per GPU count with several); ``layouts``: with a
    search, every rule's best few layouts per GPU count (rank 1 the best); ``at_bp_layout``: each rule at BP's best
    layout; ``memory``: the memory per GPU by part, per rule (and GPU count)."""

    table: pd.DataFrame
    layouts: pd.DataFrame
    at_bp_layout: pd.DataFrame
    memory: pd.DataFrame
    verdict: str | None = None


@dataclasses.dataclass
class EstimateResult:
    """``table``: FLOPs per phase (per layer with ``per_layer=True``), rule and cost model; ``memory``: the memory
    model's parts and peaks per rule."""

    table: pd.DataFrame
    memory: pd.DataFrame


def _argv(command: str, kwargs: dict, negatable: frozenset = frozenset()) -> list[str]:
    """The command line of ``kwargs``: True a flag, False its ``--no-`` form where the flag has one (``negatable``:
    those flags, e.g. ``--compile``, ``--tie-embeddings``) and nothing otherwise, lists joined by commas."""
    argv = [command]
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is False and flag in negatable:
            argv.append("--no-" + flag[2:])
            continue
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, format(value, "g") if isinstance(value, float) else str(value)]
    return argv


def _parse(command: str, kwargs: dict) -> argparse.Namespace:
    from .cli import build_parser

    parser = build_parser(_RaisingParser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    negatable = frozenset(o for a in sub._actions if isinstance(a, argparse.BooleanOptionalAction)
                          for o in a.option_strings if not o.startswith("--no-"))
    return parser.parse_args(_argv(command, kwargs, negatable))


def plan(**kwargs) -> PlanResult:
    """``trainingcost plan`` with the flags as keywords; see the module's doc."""
    from .plan_command import plan_outcome

    args = _parse("plan", kwargs)
    try:
        out = plan_outcome(args)
    except ConfigError as err:
        raise Error(f"trainingcost plan: error: {flag_message(str(err))}") from None
    table = out.table
    keys = [c for c in ("gpus", "rule") if c in table.columns]
    memory = table.drop_duplicates(keys)[[*keys, *(c for c in table.columns if c.startswith("mem_")), "fits"]]
    search = out.search
    return PlanResult(table, search.layouts if search is not None else pd.DataFrame(),
                      search.at_bp_layout if search is not None else pd.DataFrame(), memory.reset_index(drop=True),
                      out.verdict)


def estimate(per_layer: bool = False, **kwargs) -> EstimateResult:
    """``trainingcost estimate`` with the flags as keywords: every cost model's FLOPs per phase (``per_layer``:
    per layer) unless ``cost_model`` names one, and the memory model."""
    from .cli import estimate_outcome

    kwargs.setdefault("cost_model", "all")
    args = _parse("estimate", {**kwargs, "per_layer": per_layer, "format": "json"})
    args.format = "table" if not per_layer else args.format  # phase totals unless per layer (no printing here)
    try:
        out = estimate_outcome(args)
    except ConfigError as err:
        raise Error(f"trainingcost estimate: error: {flag_message(str(err))}") from None
    return EstimateResult(out.table, out.memory)
