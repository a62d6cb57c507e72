"""The configuration schema and its one-line error messages.

One JSON schema (``schemas/config.schema.yaml``) validates the workflow config
and every model entry. The file writes no enum that the code decides: the
loader fills them in. The configuration's own (presets, arches, tasks, training
dtypes, devices, optimizers) come from :mod:`.presets` and :mod:`.choices`; the
architecture options' keys in a model entry and a grid, and a string option's
enum, from their declarations (:mod:`.model`'s ``option()``, through
:func:`declare_options`); the learning rules and cost models are the
catalogue's (:func:`trainingcost.analytic.catalogue.vocabulary`), which
``config`` may not import: callers that know the catalogue pass its names as
``vocabulary`` (enum name -> allowed values). A list whose items are one of
these enums and that has no default in the file defaults to every value
(``analytic.rules``, ``train.rules``, ``memory.optimizers`` ...).
"""

from __future__ import annotations

import copy
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

import jsonschema

from . import choices
from .errors import ConfigError
from .shipped import load_shipped
from .presets import PRESETS

Vocabulary = Mapping[str, Sequence[str]]

# The enums the configuration decides, by $defs name.
CONFIG_ENUMS: dict[str, tuple[str, ...]] = {
    "preset": tuple(PRESETS),
    "arch": choices.ARCHES,
    "task": ("auto", *choices.TASKS),
    "train_dtype": choices.TRAIN_DTYPES,
    "device": choices.DEVICES,
    "optimizer": choices.OPTIMIZERS,
    "parallel": choices.PARALLEL,
    "backend": choices.BACKENDS,
}
# The enums the catalogue decides: open (any string) in a schema loaded without its vocabulary.
CATALOGUE_ENUMS = ("rule", "cost_model")
# The architecture options' keys, from their declarations (config/model.py's option(), which calls
# declare_options when it loads): name -> (a model entry's property, a grid's property, the $defs entry of a
# string option's enum or None). The file writes none of them.
OPTION_PROPERTIES: dict[str, tuple[dict, dict, dict | None]] = {}


def declare_options(properties: dict[str, tuple[dict, dict, dict | None]]) -> None:
    """Set the architecture options' schema keys (config/model.py, once, when it loads)."""
    OPTION_PROPERTIES.clear()
    OPTION_PROPERTIES.update(properties)
    _schema_with.cache_clear()
    _validator.cache_clear()


@lru_cache(maxsize=1)
def file_schema() -> dict:
    """The shipped file, as written (no enum the code decides)."""
    text = resources.files("trainingcost.config").joinpath("schemas/config.schema.yaml").read_text()
    return load_shipped(text)


def _every_by_default(node: Any, vocabulary: Vocabulary) -> None:
    """A list of one filled enum without a default in the file defaults to every value of the enum."""
    if isinstance(node, dict):
        for name, values in vocabulary.items():
            if node.get("type") == "array" and node.get("items") == {"$ref": f"#/$defs/{name}"} \
                    and "default" not in node:
                node["default"] = list(values)
        for value in node.values():
            _every_by_default(value, vocabulary)
    elif isinstance(node, list):
        for value in node:
            _every_by_default(value, vocabulary)


def schema(vocabulary: Vocabulary | None = None) -> dict:
    """The schema with its enums filled in: the configuration's own, and the catalogue's from ``vocabulary``."""
    return _schema_with(tuple((k, tuple(v)) for k, v in sorted((vocabulary or {}).items())))


@lru_cache(maxsize=8)
def _schema_with(vocabulary: tuple) -> dict:
    filled = copy.deepcopy(file_schema())
    for name, (model, grid, enum) in OPTION_PROPERTIES.items():
        filled["$defs"]["model"]["properties"][name] = copy.deepcopy(model)
        filled["$defs"]["grid"]["properties"][name] = copy.deepcopy(grid)
        if enum is not None:
            filled["$defs"][name] = copy.deepcopy(enum)
    enums = {**CONFIG_ENUMS, **dict(vocabulary)}
    for name, values in enums.items():
        if name not in filled["$defs"]:
            raise ValueError(f"schema: no $defs entry {name!r} to fill (the file's $defs: {', '.join(filled['$defs'])})")
        filled["$defs"][name] = {**filled["$defs"][name], "enum": list(values)}
    for name in CATALOGUE_ENUMS:
        filled["$defs"][name].setdefault("type", "string")
    _every_by_default(filled["properties"], enums)
    return filled


def schema_enum(name: str, vocabulary: Vocabulary | None = None) -> tuple[str, ...]:
    """The allowed values of a ``$defs`` enum, e.g. ``schema_enum('preset')``; the catalogue's (``rule``,
    ``cost_model``) need its ``vocabulary``."""
    definition = schema(vocabulary)["$defs"][name]
    if "enum" not in definition:
        raise ValueError(f"schema_enum: {name!r} is the catalogue's; pass trainingcost.analytic.vocabulary()")
    return tuple(definition["enum"])


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "config"


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: a message stays one readable line whatever the value holds."""
    text = repr(value) if not isinstance(value, (dict, list)) or len(value) < 100 else f"<a {type(value).__name__} of {len(value)} items>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(error: jsonschema.ValidationError, root: str) -> str:
    where = _path([root, *error.absolute_path] if root else error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        listed = ", ".join(allowed)
        if len(listed) > 100:  # a model entry allows 40-odd keys: name the nearest ones and the count
            import difflib

            near = difflib.get_close_matches(str(unknown[0]), allowed, n=3)
            listed = (f"did you mean {' or '.join(near)}? " if near else "") + f"{len(allowed)} keys are allowed here"
        else:
            listed = f"allowed: {listed}"
        return f"{where}: unknown key {', '.join(_short(k, 40) for k in unknown[:3])} ({listed})"
    if error.validator == "enum":
        return f"{where}: {_short(error.instance)} is not allowed (allowed: {', '.join(map(str, error.validator_value))})"
    if error.validator == "type":
        if error.validator_value == "integer" and jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(
                error.instance, "integer"):
            return f"{where}: {error.instance:.3g} is beyond 64-bit integers (at most 2^63 - 1)"
        if error.validator_value == "object":  # YAML's words: a mapping of keys to values, not a list or a scalar
            keys = ", ".join(sorted(error.schema.get("properties", {}))[:6])
            what = f"a mapping (keys such as {keys})" if keys else "a mapping of names to entries"
            kind = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
                type(error.instance), type(error.instance).__name__)
            return f"{where}: must be {what}, not {kind} ({_short(error.instance, 40)})"
        return f"{where}: {_short(error.instance)} is not of type {error.validator_value!r}"
    message = error.message
    if len(message) > 160:  # jsonschema's own message quotes the whole value
        message = f"{_short(error.instance)} does not satisfy the schema's {error.validator!r} ({_short(error.validator_value, 40)})"
    return f"{where}: {message}"


def _is_integer(checker, instance) -> bool:
    """JSON Schema's integer (a whole float too: YAML's 1e3), within 64 bits: 1e308 or 10**30 would pass as an integer
    and overflow the first table it enters (issue 40)."""
    return (jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(instance, "integer")
            and abs(instance) < 2**63)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


@lru_cache(maxsize=64)
def _validator(key: str, vocabulary: tuple) -> jsonschema.Draft202012Validator:
    full_schema = schema(dict(vocabulary))
    sub = full_schema if key == "" else {"$ref": key}
    return _Validator({**sub, "$defs": full_schema["$defs"]})


def validate(instance: Any, root: str, ref: str = "", vocabulary: Vocabulary | None = None) -> None:
    """Raise a one-line :class:`ConfigError` for the most specific schema violation of ``instance``.

    ``ref`` is a ``$ref`` into the schema (``#/$defs/model``), or empty for the whole config.
    """
    key = tuple((k, tuple(v)) for k, v in sorted((vocabulary or {}).items()))
    errors = list(_validator(ref, key).iter_errors(instance))
    if errors:
        # Report the deepest error first: it names the most specific field.
        errors.sort(key=lambda e: (list(map(str, e.absolute_path)), e.validator))
        error = max(errors, key=lambda e: len(e.absolute_path))
        raise ConfigError(_one_line(error, root))


def whole_integers(instance: Any, node: dict, root: dict) -> Any:
    """``instance`` (valid against ``node`` of the schema ``root``) with each whole float where the schema asks for
    an integer made an int (YAML's ``1e3`` and ``20.0``, which the integer type accepts, in place): a job's command
    line and every table then get ``20``, not ``20.0``, which ``--steps`` and the scaling study refused."""
    while "$ref" in node:
        node = {**root["$defs"][node["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
    for key in ("anyOf", "oneOf"):
        for branch in node.get(key, ()):
            if _Validator({**branch, "$defs": root["$defs"]}).is_valid(instance):
                return whole_integers(instance, branch, root)
    types = node.get("type")
    types = types if isinstance(types, list) else [types]
    if isinstance(instance, float) and "integer" in types and "number" not in types and instance.is_integer():
        return int(instance)
    if isinstance(instance, dict):
        extra = node.get("additionalProperties")
        for key, value in instance.items():
            sub = node.get("properties", {}).get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                instance[key] = whole_integers(value, sub, root)
    elif isinstance(instance, list) and isinstance(node.get("items"), dict):
        instance[:] = [whole_integers(value, node["items"], root) for value in instance]
    return instance


def fill_defaults(instance: dict, subschema: dict) -> dict:
    """``instance`` with the schema's defaults filled in, recursively (in place)."""
    for key, prop in subschema.get("properties", {}).items():
        if key not in instance and "default" in prop:
            instance[key] = copy.deepcopy(prop["default"])
        if isinstance(instance.get(key), dict) and prop.get("type") == "object":
            fill_defaults(instance[key], prop)
    return instance
