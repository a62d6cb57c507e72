"""``python -m trainingcost``: the command line, without relying on PATH."""

import sys

from .cli import main

sys.exit(main())
