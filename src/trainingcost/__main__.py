"""``python -m trainingcost``: the command line, without relying on PATH."""

from .entry import run

run()
