"""Atomic output: a table is written to a temporary file beside its target, then renamed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place.

    Readers see the old file or the whole new one, never half; a failure or an
    interruption leaves no temporary file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_parquet(frame: pd.DataFrame, path: str | Path) -> Path:
    return atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_text(text: str, path: str | Path) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))
