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


# Every file and directory this process created through atomic_write, in order: an interrupted
# command removes what it wrote (see :func:`undo_since`), so an interruption leaves nothing behind. A file that
# replaced one already there is kept as (path, the old file's copy) until the command ends (:func:`keep_since`), so
# that undoing it puts the old file back: a rerun into a folder leaves it as it was, or wholly new.
_created: list = []


_commands = 0  # commands running whose writes may be undone (cli.main: begin_command ... keep_since)


def created_count() -> int:
    return len(_created)


def begin_command() -> int:
    """A command begins whose writes an interruption undoes: its mark for :func:`undo_since` and :func:`keep_since`.
    Within it, a file that replaces another keeps the old one until it ends; outside (a library call) it does not."""
    global _commands
    _commands += 1
    return len(_created)


def undo_since(mark: int) -> int:
    """Remove the files and (then empty) directories created since ``created_count()`` returned ``mark``."""
    undone = 0
    while len(_created) > mark:
        entry = _created.pop()
        try:
            if isinstance(entry, tuple):  # it replaced a file: the old one back in its place
                path, old = entry
                os.replace(old, path)
            else:
                entry.rmdir() if entry.is_dir() else entry.unlink()
            undone += 1
        except OSError:
            pass  # a directory that someone else filled meanwhile stays
    return undone


def keep_since(mark: int) -> None:
    """The command that began at ``mark`` ended: the old files its writes replaced are dropped (its own stay, as
    created files)."""
    global _commands
    _commands = max(0, _commands - 1)
    for i in range(mark, len(_created)):
        if isinstance(_created[i], tuple):
            path, old = _created[i]
            Path(old).unlink(missing_ok=True)
            _created[i] = path


def _make_parents(directory: Path) -> None:
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        _created.append(d)


def _second_name(path: Path) -> Path:
    """A hidden hard link to ``path`` beside it (a copy where the file system has no hard links)."""
    import shutil

    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent)
    os.close(fd)
    os.unlink(name)
    try:
        os.link(path, name)
    except OSError:
        shutil.copy2(path, name)
    return Path(name)


def atomic_write(path: str | Path, write) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place.

    Readers see the old file or the whole new one, never half; a failure or an
    interruption leaves no temporary file behind.
    """
    path = Path(path)
    _make_parents(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    old = None
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        if _commands and path.is_file():  # a second name for the old file until the command ends: undo restores it
            old = _second_name(path)
        os.replace(tmp, path)  # readers see the old file or the new one, at its name throughout
        _created.append((path, old) if old else path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        if old is not None and (not _created or _created[-1] != (path, old)):
            old.unlink(missing_ok=True)
        raise
    return path


METADATA_PREFIX = "trainingcost."


def write_parquet(frame: pd.DataFrame, path: str | Path, metadata: dict | None = None) -> Path:
    """Write ``frame`` atomically; ``metadata`` becomes the file's key-value metadata (keys prefixed ``trainingcost.``),
    and each column's field carries its unit and description (config/columns.py, docs/columns.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .config.columns import field_metadata

    table = pa.Table.from_pandas(frame, preserve_index=False)
    schema = table.schema
    for i, field in enumerate(schema):
        described = field_metadata(field.name)
        if described:
            schema = schema.set(i, field.with_metadata({**(field.metadata or {}), **described}))
    table = table.cast(schema)
    extra = {f"{METADATA_PREFIX}{key}".encode(): ("" if value is None else str(value)).encode()
             for key, value in (metadata or {}).items()}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **extra})
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def read_metadata(path: str | Path) -> dict:
    """The ``trainingcost.`` key-value metadata of a parquet file, without the prefix."""
    import pyarrow.parquet as pq

    raw = pq.read_schema(path).metadata or {}
    return {k.decode()[len(METADATA_PREFIX):]: v.decode() for k, v in raw.items() if k.decode().startswith(METADATA_PREFIX)}


def write_text(text: str, path: str | Path) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


FIGURE_SUFFIXES = (".png", ".pdf", ".svg")  # what plan --figure writes (matplotlib's savefig, by the name's suffix)


def check_output(path: str, field: str, directory: bool) -> None:
    """Refuse an output path that cannot be written, before any work: a directory where a file goes (or the
    reverse), a file in the way of its parent, or a place this process may not create files in."""
    from .config.errors import ConfigError

    target = Path(path)
    if field.lstrip("-") == "figure" and target.suffix.lower() not in FIGURE_SUFFIXES:
        raise ConfigError(f"{field}: {path} must end in {', '.join(FIGURE_SUFFIXES)} (the figure's format)")
    if directory and target.exists() and not target.is_dir():
        raise ConfigError(f"{field}: {path} is a file, not a directory")
    if not directory and target.is_dir():
        raise ConfigError(f"{field}: {path} is a directory; give a file name")
    parent = target if directory and target.is_dir() else target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{field}: {parent} is a file, so {path} cannot be created")
    try:  # the one reliable test (root passes os.access, /proc refuses files): create and remove a file
        fd, probe = tempfile.mkstemp(prefix=".trainingcost-probe.", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{field}: cannot create files in {parent} ({exc.strerror})") from None
