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


MAX_JSON_BYTES = 64 * 2**20  # a config.json, calibration or device file is kilobytes; this bounds the memory a read takes
MAX_JSON_DEPTH = 64  # the deepest real config.json nests 3 levels (rope_scaling, text_config); calibrations 4


def read_json(path, where: str, what: str = "a JSON file"):
    """The parsed JSON of a user's file, or one line naming it: missing, not a file, too large, not UTF-8, invalid,
    nested too deep, or holding an integer too long to convert (Python refuses over 4,300 digits)."""
    path = regular_file(path, where, what)
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise ConfigError(f"{where}: {path} is {size:,} bytes, more than the {MAX_JSON_BYTES:,} read; give {what}")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{where}: {path}: cannot be read ({exc.strerror})") from None
    return parse_json(text, f"{where}: {path}")


def parse_json(text: str, where: str):
    """``json.loads`` with every failure a ConfigError of one line (issue 66, N5): deep nesting is refused before the
    parser recurses, and an over-long integer is named rather than raised as Python's ValueError."""
    import json
    import math

    depth = 0
    in_string = escaped = False
    for char in text:  # a linear scan: brackets outside strings
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ConfigError(f"{where}: nested more than {MAX_JSON_DEPTH} levels deep; not a configuration")
        elif char in "]}":
            depth -= 1
    def integer(digits: str) -> int:  # every count this tool reads fits 64 bits; a longer one is a typo or an attack
        if len(digits.lstrip("-")) > 19 or abs(int(digits)) > 2**63 - 1:
            raise _Refused(f"the number {digits[:20]}{'...' if len(digits) > 20 else ''} is beyond 64-bit integers")
        return int(digits)

    def real(digits: str) -> float:
        value = float(digits)
        if math.isinf(value):  # 1e400: beyond float64, read as infinity
            raise _Refused(f"the number {digits[:20]} is beyond 64-bit floating point")
        return value

    try:
        return json.loads(text, parse_int=integer, parse_float=real)
    except _Refused as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: invalid JSON at line {exc.lineno}, column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # ValueError: an integer of more than 4,300 digits
        reason = "an integer too long to read (over 4,300 digits)" if "digits" in str(exc) else "cannot be parsed"
        raise ConfigError(f"{where}: {reason}") from None


class _Refused(Exception):
    """A number parse_json refuses (not a ValueError, which json.loads would turn into its own message)."""


def not_in(field: str, name, what: str, allowed, listed_by: str, more: str = "") -> ConfigError:
    """A name that is not in a catalogue, in one short line (issue 66, N18: the whole catalogue ran past 500
    characters): the closest names, and the command that lists them all."""
    import difflib

    names = list(dict.fromkeys(allowed))
    close = difflib.get_close_matches(str(name).lower(), names, n=2, cutoff=0.4)
    shown = f"closest: {', '.join(close)}" if close else f"e.g. {', '.join(names[:2])}"
    return ConfigError(f"{field}: {str(name)[:30]!r} is not {what} ({shown}; all {len(names)}: {listed_by}{more})")


def reraise_interrupt(exc: BaseException) -> None:
    """Raise the interrupt (Ctrl-C's KeyboardInterrupt, the command line's SIGTERM exception: any BaseException that
    is not an Exception) that ``exc`` was raised from, if any, so that a handler recording an ordinary error does not
    swallow a signal. Python wraps an exception raised inside some machinery in one of its own: a signal that lands
    while a class body runs ``__set_name__`` (torch importing a dataclass lazily) comes back as ``RuntimeError: Error
    calling __set_name__ ...`` whose ``__cause__`` is the interrupt."""
    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if not isinstance(cause, Exception):
            raise cause
        cause = cause.__cause__ or cause.__context__


class Terminated(BaseException):
    """SIGTERM, raised where the process is, so that it unwinds like Ctrl-C (exit status 143, cli.main)."""
