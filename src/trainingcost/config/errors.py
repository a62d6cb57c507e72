"""The one exception type for user mistakes."""


class ConfigError(ValueError):
    """A user mistake in a configuration; its message is one line that starts with the field it names.

    Domain code names configuration fields (``heads``, ``train.lr``); the command line
    maps a leading field name to its flag (``--heads``).
    """


class SizeOverflowError(ConfigError, OverflowError):
    """A configuration whose costs leave exact 64-bit integers; the message names the fields that make them."""


def regular_file(path, where: str, what: str = "a file"):
    """``path`` as a Path if it names a regular file; else one line saying what it is instead (missing, a directory,
    a device, FIFO or socket, a symlink loop), so that nothing reads a device until memory runs out or waits on a
    FIFO forever."""
    import os
    import stat
    from pathlib import Path

    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise ConfigError(f"{where}: {path} is a broken symlink; give {what}") from None
        raise ConfigError(f"{where}: no such file: {path}") from None
    except OSError as exc:  # ELOOP (a symlink loop), ENAMETOOLONG, EACCES on a parent
        raise ConfigError(f"{where}: {path} cannot be opened ({exc.strerror}); give {what}") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{where}: {path} is a directory; give {what}")
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise ConfigError(f"{where}: {path} is {kind}; give {what}")
    return path


def read_table(path, where: str, columns=(), what: str = "a parquet table"):
    """A parquet table at ``path``, or one line naming ``where``: not a regular file, not a parquet table (empty,
    truncated, another format), or lacking one of ``columns``."""
    import pandas as pd

    regular_file(path, where, what)
    try:
        table = pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a truncated or foreign file: one line
        raise ConfigError(f"{where}: {path} is not a readable parquet table ({type(exc).__name__}); give {what}") \
            from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        named = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ConfigError(f"{where}: {path} lacks the column{'s' if len(missing) > 1 else ''} {named}; give {what}")
    return table
