"""YAML files shipped with the package (the hardware, framework and cluster catalogues, the config schema).

They are large (the catalogues are a few thousand lines) and read on every ``plan``: PyYAML's pure-Python loader
spends about 0.3 s on them, libyaml's C loader a tenth of that. Both are PyYAML's *safe* loaders and share one
resolver, so they build the same objects (tests/test_shipped_yaml.py checks every shipped file both ways). User
files go through ``config.sweep``'s own loader, which refuses duplicate keys.
"""

from __future__ import annotations

from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_shipped(text: str) -> Any:
    """Parse a shipped YAML text with the fastest safe loader this PyYAML has."""
    return yaml.load(text, Loader=SAFE_LOADER)
