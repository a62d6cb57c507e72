"""The configuration schema and its one-line error messages.

One JSON schema (``schemas/config.schema.yaml``) validates the workflow config
and every model entry. The learning rules and cost models it allows are those
of the catalogue (:mod:`trainingcost.analytic.catalogue`); the file lists them
for readers and for tools, and a test keeps the file equal to the catalogue.
Callers that know the catalogue pass its names as ``vocabulary`` (enum name ->
allowed values), which replaces the file's enums and the defaults that list
every value.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping, Sequence

import jsonschema
import yaml

from .errors import ConfigError

Vocabulary = Mapping[str, Sequence[str]]


@lru_cache(maxsize=1)
def _file_schema() -> dict:
    text = resources.files("trainingcost.config").joinpath("schemas/config.schema.yaml").read_text()
    return yaml.safe_load(text)


def _lists_every(prop: dict, name: str) -> bool:
    return prop.get("type") == "array" and prop.get("items") == {"$ref": f"#/$defs/{name}"}


def _replace_enums(node: Any, vocabulary: Vocabulary) -> None:
    """Defaults that list an enum's every value follow the vocabulary (analytic.rules, train.rules, ...)."""
    if isinstance(node, dict):
        for name, values in vocabulary.items():
            if _lists_every(node, name) and "default" in node:
                node["default"] = list(values)
        for value in node.values():
            _replace_enums(value, vocabulary)
    elif isinstance(node, list):
        for value in node:
            _replace_enums(value, vocabulary)


def schema(vocabulary: Vocabulary | None = None) -> dict:
    """The schema, with the enums of ``vocabulary`` in place of the file's."""
    if not vocabulary:
        return _file_schema()
    return _schema_with(tuple((k, tuple(v)) for k, v in sorted(vocabulary.items())))


@lru_cache(maxsize=8)
def _schema_with(vocabulary: tuple) -> dict:
    filled = copy.deepcopy(_file_schema())
    for name, values in vocabulary:
        filled["$defs"][name] = {"enum": list(values)}
    _replace_enums(filled["properties"], dict(vocabulary))
    return filled


def schema_enum(name: str, vocabulary: Vocabulary | None = None) -> tuple[str, ...]:
    """The allowed values of a ``$defs`` enum, e.g. ``schema_enum('preset')``."""
    return tuple(schema(vocabulary)["$defs"][name]["enum"])


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _one_line(error: jsonschema.ValidationError, root: str) -> str:
    where = _path([root, *error.absolute_path] if root else error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"{where}: unknown key {', '.join(repr(k) for k in unknown)} (allowed: {', '.join(allowed)})"
    if error.validator == "enum":
        return f"{where}: {error.instance!r} is not allowed (allowed: {', '.join(map(str, error.validator_value))})"
    if error.validator == "type":
        return f"{where}: {error.instance!r} is not of type {error.validator_value!r}"
    return f"{where}: {error.message}"


@lru_cache(maxsize=64)
def _validator(key: str, vocabulary: tuple) -> jsonschema.Draft202012Validator:
    full_schema = schema(dict(vocabulary))
    sub = full_schema if key == "" else {"$ref": key}
    return jsonschema.Draft202012Validator({**sub, "$defs": full_schema["$defs"]})


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


def fill_defaults(instance: dict, subschema: dict) -> dict:
    """``instance`` with the schema's defaults filled in, recursively (in place)."""
    for key, prop in subschema.get("properties", {}).items():
        if key not in instance and "default" in prop:
            instance[key] = copy.deepcopy(prop["default"])
        if isinstance(instance.get(key), dict) and prop.get("type") == "object":
            fill_defaults(instance[key], prop)
    return instance
