"""``trainingcost serve``: the planner page's subcommand (cli.build_parser adds it)."""

from __future__ import annotations

import argparse

from ..args import count


def _port(text: str) -> int:
    value = count(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535 (0: any free port), got {text[:20]}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text[:20]!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be 0.1 to 3600 seconds, got {text[:20]}")
    return value


def _workers(text: str) -> int:
    value = count(text)
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be 1 to 64, got {text[:20]}")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="the planner page in a browser (the web extra): every input of plan, its table, "
                                     "memory and strong scaling, shareable links")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1, this machine "
                                                       "only; every request needs the printed token)")
    p.add_argument("--port", type=_port, default=8000, help="the port (default 8000; 0: any free one)")
    p.add_argument("--token", default=None, help="the access token (default: a new random one each start)")
    p.add_argument("--time-limit", type=_seconds, default=20.0, help="seconds a plan may run before it is stopped "
                                                                       "with one line (default 20)")
    p.add_argument("--workers", type=_workers, default=None, help="plans computed at once (default: the cores, at "
                                                                  "most 4)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from . import serve

    if args.token is not None and not 16 <= len(args.token) <= 200:
        from ..config import ConfigError

        raise ConfigError("--token: 16 to 200 characters (a guessable token lets another local user in)")
    try:
        serve(args.host, args.port, args.token, args.time_limit, args.workers)
    except KeyboardInterrupt:
        return 0
    return 0
