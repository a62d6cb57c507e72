"""One look per rule in every figure: the catalogue's label, colour and marker, made unique.

Each rule declares its label, colour and marker (``rules/<name>/__init__.py``).
Where two rules declare the same one (a rule copied from another), the later
rule in table order takes the first unused colour of seaborn's colour-blind
palette, the first unused marker, and its name beside the label.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..analytic.catalogue import rules

# seaborn's "colorblind" palette, then "dark", as hex (no seaborn import needed to read it).
PALETTE = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133", "#56b4e9",
           "#001c7f", "#b1400d", "#12711c", "#8c0800", "#591e71", "#592f0d", "#a23582", "#3c3c3c", "#b8850a", "#006374")
MARKERS = ("o", "X", "s", "P", "D", "^", "v", "<", ">", "p", "h", "*", "d", "H", "8")


@dataclass(frozen=True)
class Style:
    label: str
    color: str
    marker: str


@lru_cache(maxsize=1)
def rule_styles() -> dict[str, Style]:
    """name -> Style, in table order, every label, colour and marker distinct."""
    styles: dict[str, Style] = {}
    for spec in rules():
        used = styles.values()
        label = spec.label if spec.label not in {s.label for s in used} else f"{spec.label} ({spec.name})"
        colors = [s.color for s in used]
        color = spec.color if spec.color not in colors else next((c for c in PALETTE if c not in colors), spec.color)
        markers = [s.marker for s in used]
        marker = spec.marker if spec.marker not in markers else next((m for m in MARKERS if m not in markers), spec.marker)
        styles[spec.name] = Style(label, color, marker)
    return styles
