"""The one exception type for user mistakes."""


class ConfigError(ValueError):
    """A user mistake in a configuration; its message is one line that starts with the field it names.

    Domain code names configuration fields (``heads``, ``train.lr``); the command line
    maps a leading field name to its flag (``--heads``).
    """


class SizeOverflowError(ConfigError, OverflowError):
    """A configuration whose costs leave exact 64-bit integers; the message names the fields that make them."""
