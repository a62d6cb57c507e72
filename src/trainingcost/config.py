"""Configuration: validation, sweep enumeration and stable configuration ids.

The workflow and the command line validate with the same JSON schema
(``schemas/config.schema.yaml``) and the same relational checks, and report
every mistake as one line that names the field, through :class:`ConfigError`.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import pandas as pd
import yaml

from .presets import PRESETS

# The canonical parameters of a model configuration, in column order. The
# config_id is a hash of exactly these.
CANONICAL_FIELDS = (
    "arch",
    "d_model",
    "heads",
    "d_ff",
    "enc_layers",
    "dec_layers",
    "seq_len",
    "tgt_len",
    "vocab",
    "batch",
    "classes",
)
CONFIG_COLUMNS = ("config_id", "name", *CANONICAL_FIELDS)


class ConfigError(ValueError):
    """A user mistake in a configuration; its message is one line naming the field."""


@lru_cache(maxsize=1)
def schema() -> dict:
    text = resources.files("trainingcost").joinpath("schemas/config.schema.yaml").read_text()
    return yaml.safe_load(text)


def schema_enum(name: str) -> tuple[str, ...]:
    """The allowed values of a ``$defs`` enum, e.g. ``schema_enum('rule')``."""
    return tuple(schema()["$defs"][name]["enum"])


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
    if error.validator == "required":
        return f"{where}: {error.message}"
    return f"{where}: {error.message}"


def _validate(instance: Any, subschema: dict, root: str) -> None:
    full = {**subschema, "$defs": schema()["$defs"]}
    validator = jsonschema.Draft202012Validator(full)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    if errors:
        # Report the deepest error first: it names the most specific field.
        error = max(errors, key=lambda e: len(e.absolute_path))
        raise ConfigError(_one_line(error, root))


def _fill_defaults(instance: dict, subschema: dict) -> dict:
    for key, prop in subschema.get("properties", {}).items():
        if key not in instance and "default" in prop:
            instance[key] = copy.deepcopy(prop["default"])
        if isinstance(instance.get(key), dict) and prop.get("type") == "object":
            _fill_defaults(instance[key], prop)
    return instance


def validate_config(config: dict) -> dict:
    """Validate a whole workflow config and return a copy with defaults filled in."""
    if not isinstance(config, dict):
        raise ConfigError("config: expected a mapping with a 'sweep' section")
    _validate(config, schema(), "")
    filled = _fill_defaults(copy.deepcopy(config), schema())
    enumerate_sweep(filled["sweep"])  # relational checks on every configuration
    return filled


def load_config(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file: no such file: {path}")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path}: invalid YAML{where}") from None
    return validate_config(config or {})


# ---------------------------------------------------------------------------
# One model configuration


def _describe(entry: dict) -> str:
    keys = ("arch", "d_model", "heads", "layers", "enc_layers", "dec_layers", "seq_len")
    return ", ".join(f"{k}={entry[k]}" for k in keys if k in entry)


def _field(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def canonical_model(entry: dict, where: str, *, strict: bool = True) -> dict:
    """Check one model entry and return its canonical parameters.

    ``strict`` entries (explicit models, command-line flags) reject fields that
    do not apply to their arch; grid combinations drop them instead.
    """
    if strict:  # grid combinations were validated as part of their grid
        _validate(entry, {"$ref": "#/$defs/model"}, where)
    e = dict(entry)
    arch = e["arch"]
    encdec = arch == "encoder-decoder"
    if not encdec:
        for key in ("enc_layers", "dec_layers", "tgt_len"):
            if key in e:
                if strict:
                    raise ConfigError(f"{_field(where, key)}: applies only to arch encoder-decoder (arch is {arch})")
                del e[key]
        if "layers" not in e:
            raise ConfigError(f"{_field(where, 'layers')}: required for arch {arch}")
        enc_layers, dec_layers = (e["layers"], 0) if arch == "encoder" else (0, e["layers"])
    else:
        if strict and "layers" in e and ("enc_layers" in e or "dec_layers" in e):
            raise ConfigError(f"{_field(where, 'layers')}: give either layers or enc_layers and dec_layers, not both")
        enc_layers = e.get("enc_layers", e.get("layers"))
        dec_layers = e.get("dec_layers", e.get("layers"))
        for key, value in (("enc_layers", enc_layers), ("dec_layers", dec_layers)):
            if value is None:
                raise ConfigError(f"{_field(where, key)}: encoder-decoder needs both stacks (give {key} or layers)")
    if ("d_ff" in e) == ("ff_mult" in e):
        raise ConfigError(f"{_field(where, 'd_ff')}: give exactly one of d_ff and ff_mult")
    d_model, heads = int(e["d_model"]), int(e["heads"])
    if d_model % heads:
        raise ConfigError(f"{_field(where, 'heads')}: {heads} does not divide d_model {d_model} ({_describe(e)})")
    d_ff = int(e["d_ff"]) if "d_ff" in e else int(e["ff_mult"]) * d_model
    classes = int(e.get("classes", 0))
    if classes and encdec:
        raise ConfigError(f"{_field(where, 'classes')}: a classification head needs arch encoder or decoder")
    seq_len = int(e["seq_len"])
    return {
        "arch": arch,
        "d_model": d_model,
        "heads": heads,
        "d_ff": d_ff,
        "enc_layers": int(enc_layers),
        "dec_layers": int(dec_layers),
        "seq_len": seq_len,
        "tgt_len": int(e.get("tgt_len", seq_len)) if encdec else seq_len,
        "vocab": int(e["vocab"]),
        "batch": int(e.get("batch", 1)),
        "classes": classes,
    }


def config_id(canonical: dict) -> str:
    """A stable 10-hex-digit id: the hash of the canonical parameters."""
    text = json.dumps({k: canonical[k] for k in CANONICAL_FIELDS}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def preset_entry(name: str, where: str = "preset") -> dict:
    if name not in PRESETS:
        raise ConfigError(f"{where}: unknown preset {name!r} (allowed: {', '.join(PRESETS)})")
    return dict(PRESETS[name])


# ---------------------------------------------------------------------------
# Sweeps


def _grid_entries(grid: dict, where: str) -> Iterable[dict]:
    axes = {k: v for k, v in grid.items() if k != "name"}
    keys = list(axes)
    for values in itertools.product(*(axes[k] for k in keys)):
        yield dict(zip(keys, values))


def enumerate_sweep(sweep: dict) -> list[tuple[str, dict]]:
    """All (name, canonical) pairs of a sweep, in order, without duplicates."""
    seen: dict[str, tuple[str, dict]] = {}

    def add(name: str, canonical: dict) -> None:
        seen.setdefault(config_id(canonical), (name, canonical))

    for i, preset in enumerate(sweep.get("presets", [])):
        where = f"sweep.presets[{i}]"
        add(preset, canonical_model(preset_entry(preset, where), where))
    for i, grid in enumerate(sweep.get("grids", [])):
        where = f"sweep.grids[{i}]"
        for entry in _grid_entries(grid, where):
            add(grid.get("name", ""), canonical_model(entry, where, strict=False))
    for i, model in enumerate(sweep.get("models", [])):
        where = f"sweep.models[{i}]"
        add(model.get("name", ""), canonical_model({k: v for k, v in model.items() if k != "name"}, where))
    if not seen:
        raise ConfigError("sweep: no configurations (give presets, grids or models)")
    return list(seen.values())


def entry_names(sweep: dict) -> list[str]:
    """The names a sweep's entries answer to: presets by their own name, grids and models by ``name``."""
    names = list(sweep.get("presets", []))
    names += [entry["name"] for key in ("grids", "models") for entry in sweep.get(key, []) if entry.get("name")]
    return list(dict.fromkeys(names))


def select_sweep(sweep: dict, names: list[str], where: str) -> list[tuple[str, dict]]:
    """The configurations of the sweep entries called ``names`` (train.select), in sweep order."""
    known = entry_names(sweep)
    for i, name in enumerate(names):
        if name not in known:
            raise ConfigError(f"{where}[{i}]: no sweep entry is named {name!r} (names: {', '.join(known) or 'none'})")
    if not names:
        return []
    chosen = set(names)
    sub = {
        "presets": [p for p in sweep.get("presets", []) if p in chosen],
        "grids": [g for g in sweep.get("grids", []) if g.get("name") in chosen],
        "models": [m for m in sweep.get("models", []) if m.get("name") in chosen],
    }
    return enumerate_sweep(sub)


def configs_frame(pairs: list[tuple[str, dict]]) -> pd.DataFrame:
    """One row per configuration, every parameter a column, int64 sizes."""
    rows = [{"config_id": config_id(c), "name": name, **c} for name, c in pairs]
    frame = pd.DataFrame(rows, columns=list(CONFIG_COLUMNS))
    for column in CANONICAL_FIELDS:
        if column != "arch":
            frame[column] = frame[column].astype("int64")
    frame["arch"] = frame["arch"].astype(str)
    frame["name"] = frame["name"].astype(str)
    frame["config_id"] = frame["config_id"].astype(str)
    return frame


def sweep_frame(config: dict) -> pd.DataFrame:
    """The configurations of a validated workflow config."""
    return configs_frame(enumerate_sweep(config["sweep"]))
