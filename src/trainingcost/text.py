"""The command line's human-readable output: numbers with units, text tables, a model in one paragraph.
Read by ``cli.py``, ``plan_command.py`` and ``plan_search.py``; imports no other top-level module.
"""

from __future__ import annotations

import math

from .config import ModelConfig

UNITS = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K"))


def human(value: float, suffix: str = "") -> str:
    for scale, unit in UNITS:
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}{suffix}"
    return f"{int(value)} {suffix}".rstrip() if float(value).is_integer() else f"{value:.2f} {suffix}".rstrip()


def human_bytes(value: float) -> str:
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{int(value)} B"


def grid(header: list[str], rows: list[list[str]]) -> str:
    """A text table: the first two columns left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for n, row in enumerate([header, *rows]):
        cells = [str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def describe_config(c: ModelConfig) -> str:
    if c.encdec:
        depth = f"{c.enc_layers}+{c.dec_layers} layers, source {c.seq_len}, target {c.tgt_len} tokens"
    else:
        depth = f"{c.layers} layer{'s' if c.layers != 1 else ''}, {c.seq_len} tokens"
    head = f"{c.classes} classes" if c.classes else f"vocab {c.vocab}"
    options = c.options()
    extra = ("\n" + ", ".join(f"{k} {v}" for k, v in options.items())) if options else ""
    return (
        f"{c.arch}, {depth}, d_model {c.d_model}, {c.heads} heads, d_ff {c.d_ff}, {head}, "
        f"batch {c.batch} (config_id {c.config_id}){extra}"
    )


def wrapped(text: str, width: int = 100) -> str:
    """Each line of ``text`` broken after a comma or before a parenthesis to fit ``width`` columns."""
    import textwrap

    return "\n".join(part for line in text.splitlines()
                     for part in (textwrap.wrap(line, width, break_long_words=False, subsequent_indent="  ") or [""]))


def _si(value: float, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 1e12:  # beyond giga: scientific notation, short
        return f"{value:.{max(1, digits - 1)}e}".replace("e+", "e")
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{unit}"
    return f"{value:.{digits}g}"


def _duration_range(seconds: float, low: float, high: float) -> str:
    """A duration and its interval in the same unit, compact: ``25.0 d (23-30)``, its ends to two figures; the duration alone where the
    interval is NaN (a step given, not predicted)."""
    text = _duration(seconds)
    if math.isnan(seconds) or math.isnan(low) or math.isnan(high) or seconds >= 86400 * 1e6:
        return text
    unit = text.split(" ")[-1]
    scale = {"d": 86400, "h": 3600, "min": 60, "s": 1, "ms": 1e-3}[unit]
    def short(x):  # two significant figures: the interval is itself good to a few percent
        return f"{x:.0f}" if x >= 10 else f"{x:.1f}" if x >= 1 else f"{x:.2g}"

    return f"{text} ({short(low / scale)}-{short(high / scale)})"


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"  # a rule that never reaches the target loss: no run to time
    if seconds >= 86400 * 1e6:  # a million days and more: scientific notation, short
        return f"{seconds / 86400:.2e} d".replace("e+", "e")
    if seconds >= 86400 * 1000:  # a thousand days and more: whole days (the cell stays within a screen's table)
        return f"{seconds / 86400:.0f} d"
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.3g} ms"
