"""``trainingcost plan`` on the command line: the subcommand (its inputs are declared in flags.py), and the plan's
rows (computed by planning.py) printed as a table, CSV or JSON. docs/planning.md documents every formula and source.
"""

from __future__ import annotations

import argparse
import json
import sys

from .flags import PLAN_HELP, plan_flags
from .plan_text import SCREEN_WIDTH, plan_text
from .planning import plan_outcome
from .text import wrapped


def add_parser(sub) -> None:
    """The ``plan`` subcommand (cli.build_parser calls this)."""
    p = sub.add_parser("plan", help=PLAN_HELP)
    plan_flags(p)
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from . import plan_search

    out = plan_outcome(args)
    table, verdict = out.table, out.verdict
    if out.search is not None and args.figure:
        plan_search.figure(out.search, args.figure)
    if args.format == "json":
        records = table.astype(object).where(table.notna(), None).to_dict(orient="records")  # NaN -> null
        print(json.dumps(records, indent=1))
    elif args.format == "csv":
        table.to_csv(sys.stdout, index=False)
    else:
        sys.stdout.write(plan_text(out, args.cost_model == "all", args.explain))
    if args.format != "table":
        for note in out.notes:  # what the plan assumed about the model
            print(wrapped(f"Note: {note}", SCREEN_WIDTH), file=sys.stderr)
        if args.explain:  # the runs behind the error bar, beside the machine-readable table
            print("\n".join(plan_search.interval_lines(table, SCREEN_WIDTH, True)).lstrip("\n"), file=sys.stderr)
    if out.search is not None:
        return 1 if (args.require_fit and not table["fits"].astype(bool).all()) else 0
    if verdict:
        sys.stdout.flush()
        if args.format != "table":
            print(verdict, file=sys.stderr)
        return 1 if args.require_fit else 0
    return 0
