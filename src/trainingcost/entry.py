"""The program's first lines: ``trainingcost`` and ``python -m trainingcost`` start here (issue 66).

Importing the command line takes seconds on a busy machine (numpy, pandas, then torch for ``train``). A Ctrl-C or a
SIGTERM in that time must give what it gives later, one line and death by the same signal, not an import's
``KeyboardInterrupt`` traceback or a silent end. Nothing has been written yet, so there is nothing to undo; once
:func:`trainingcost.cli.main` runs, its own handlers take over and remove what the command wrote.
"""

import os
import signal
import sys

CAUGHT = (signal.SIGINT, signal.SIGTERM)


def _command() -> str:
    return next((word for word in sys.argv[1:] if not word.startswith("-")), "").strip()[:40]


def _early(signum, frame):  # noqa: ARG001 - a signal handler's signature
    how = "interrupted" if signum == signal.SIGINT else "terminated"
    name = _command()
    try:
        sys.stderr.write(f"trainingcost{' ' + name if name else ''}: {how}; nothing written\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # die of it, so that a calling shell stops too (cli.run's docstring)
    os._exit(128 + signum)


def run() -> None:
    """Catch the signals first, then import and run the command line (:func:`trainingcost.cli.run`)."""
    for signum in CAUGHT:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # `nohup` and `cmd &` ignore some: keep them ignored
            signal.signal(signum, _early)
    from .cli import run as command_line

    command_line()
