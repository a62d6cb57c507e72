"""A training job dies with the workflow that started it (issue 40: orphaned trainers after a SIGKILL of Snakemake).

The workflow's train rule runs ``bash -c "trainingcost train ... || trainingcost train ... --record-failure $?"``
with ``TRAININGCOST_WORKFLOW_PID`` set to the Snakemake process that runs the job. Two ways a trainer could
outlive it, both closed here:

- **its shell is killed** (``kill -9`` of the job's process): Linux's parent-death signal
  (``prctl(PR_SET_PDEATHSIG)``, prctl(2)) sends this process SIGTERM when its parent dies;
- **Snakemake is killed** (``kill -9``, a lost login node) while the shell lives on: a daemon thread checks every
  second that the workflow's process still exists (``kill(pid, 0)``, kill(2)) and sends this process SIGTERM when
  it does not.

SIGTERM then ends the command as any SIGTERM does (cli.main): ``terminated; nothing written``, the files it had
written removed, death by SIGTERM. The ``--record-failure`` fallback that the shell may then start meets a dead
workflow too and writes nothing. A rerun (``snakemake --unlock``, then ``snakemake --rerun-incomplete``) finds no
trainer racing it in the same run folder.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

ENV = "TRAININGCOST_WORKFLOW_PID"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists (kill(2) with signal 0) and is not a zombie, a process that has ended
    and waits for its parent to collect its status (proc(5): state Z in /proc/PID/stat)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _watch(pid: int, period: float) -> None:
    event = threading.Event()
    while _alive(pid):
        event.wait(period)
    os.kill(os.getpid(), signal.SIGTERM)


def hold(period: float = 1.0) -> bool:
    """Tie this process's life to the workflow's, if ``TRAININGCOST_WORKFLOW_PID`` names it. Returns whether it did.

    Called by ``trainingcost train`` before any work: a workflow already gone (or a stale variable) is refused at
    once, in one line (ConfigError)."""
    value = os.environ.get(ENV, "")
    if not value.isdigit() or int(value) <= 1:
        return False
    pid = int(value)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the thread below still notices a dead workflow
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect (prctl(2)): as if the signal came
            os.kill(os.getpid(), signal.SIGTERM)
    if not _alive(pid):  # a workflow already gone, or a variable left from one (issue 66, N19): say which, do nothing
        from .config.errors import ConfigError

        raise ConfigError(f"{ENV}: process {pid} is not running, so the workflow that started this command has "
                          f"ended; nothing was run (by hand: unset {ENV})")
    threading.Thread(target=_watch, args=(pid, period), name="trainingcost-lifeline", daemon=True).start()
    return True
