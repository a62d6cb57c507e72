"""``python -m trainingcost``: the command line, without relying on PATH."""

from .cli import run

run()
