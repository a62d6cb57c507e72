"""Sweeps: a workflow config validated once, its configurations enumerated, selected and tabulated.

The workflow and the command line validate with the same JSON schema
(:mod:`.schema`) and the same relational checks (:mod:`.model`), and report
every mistake as one line that names the field, through :class:`ConfigError`.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from pathlib import Path
from typing import Iterable

import pandas as pd
import yaml

from .errors import ConfigError, regular_file
from .model import (BOOL_FIELDS, CANONICAL_FIELDS, FLOAT_FIELDS, LATE_OPTIONS, OPTION_DEFAULTS, STR_FIELDS, ModelConfig, canonical_model,
                    config_from_row, preset_entry)
from .schema import CATALOGUE_ENUMS, Vocabulary, fill_defaults, schema, validate, whole_integers

CONFIG_COLUMNS = ("config_id", "name", *CANONICAL_FIELDS)

# The most configurations one sweep may enumerate: the analytic tables of 100,000 configurations take
# about a second and a few hundred MB (benchmarks/bench_analytic.py); beyond it, split the sweep.
MAX_CONFIGURATIONS = 100_000


# YAML 1.1 (PyYAML, and Snakemake's loader) reads 1e-3 and 1e10 as strings: a float needs a dot there. Users write
# them as numbers (issue 40), so a string in this form is read as one, wherever it stands.
SCIENTIFIC = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


def numbers_as_written(value):
    """``value`` with every string in scientific notation (``1e-3``) turned into the float it writes."""
    if isinstance(value, str) and SCIENTIFIC.match(value.strip()):
        return float(value.replace("_", ""))
    if isinstance(value, dict):
        return {k: numbers_as_written(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers_as_written(v) for v in value]
    return value


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML says keys are unique; PyYAML keeps the
    last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"{key}: given twice in one mapping (lines {seen[key] + 1} and "
                                  f"{key_node.start_mark.line + 1}); give each key once")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


# The most values (mappings, lists and scalars, counted as written out) a config may hold. The largest real config
# (a 100,000-configuration grid written out axis by axis) holds far fewer; a YAML alias bomb ("billion laughs": ten
# aliases of ten aliases of ...) holds 10^9 and would keep every check that walks the config busy for minutes.
MAX_CONFIG_VALUES = 1_000_000


def check_size(value, where: str = "config") -> None:
    """Refuse a config that expands to more than MAX_CONFIG_VALUES values, before anything walks it: YAML aliases
    make one mapping or list appear many times, and the walk here stops at the budget instead of expanding them."""
    budget = MAX_CONFIG_VALUES
    stack = [value]
    while stack:
        item = stack.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(f"{where}: more than {MAX_CONFIG_VALUES:,} values once its YAML aliases (*name) are "
                              "expanded; write the config out without nested aliases")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def validate_config(config: dict, vocabulary: Vocabulary) -> dict:
    """Validate a whole workflow config; return a copy with defaults filled in.

    ``vocabulary`` gives the catalogue's rules and cost models (:func:`trainingcost.analytic.vocabulary`; see
    :mod:`.schema`): the schema file does not list them.
    """
    missing = [name for name in CATALOGUE_ENUMS if name not in (vocabulary or {})]
    if missing:
        raise TypeError(f"validate_config: the vocabulary lacks {', '.join(missing)} (pass trainingcost.analytic.vocabulary())")
    if not isinstance(config, dict):
        raise ConfigError("config: expected a mapping with a 'sweep' section")
    check_size(config)
    config = numbers_as_written(config)
    check_finite(config, "")
    validate(config, "", vocabulary=vocabulary)
    check_unique_names(config["sweep"])
    full = schema(vocabulary)
    filled = whole_integers(fill_defaults(copy.deepcopy(config), full), full, full)
    enumerate_sweep(filled["sweep"])  # relational checks on every configuration
    return filled


def read_config(path: str | Path) -> dict:
    """A YAML config file, parsed (not yet validated)."""
    path = regular_file(path, "config file", "a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read ({exc.strerror})") from None
    try:
        config = yaml.load(text, Loader=_Loader)
        if config is None:
            raise ConfigError(f"config file {path}: empty; a config needs at least a 'sweep' section")
        if not isinstance(config, dict):
            raise ConfigError(f"config file {path}: a {type(config).__name__}, not a mapping with a 'sweep' section")
        check_size(config, f"config file {path}")
        return config
    except ConfigError as exc:
        if str(exc).startswith("config file "):
            raise
        raise ConfigError(f"config file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path}: invalid YAML{where}") from None


def check_finite(value, where: str) -> None:
    """Refuse NaN and infinities anywhere in a config (YAML reads ``.nan`` and ``.inf`` as numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where or 'config'}: {value} is not a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            check_finite(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_finite(item, f"{where}[{i}]")


def check_unique_names(sweep: dict) -> None:
    """Each sweep entry's name names one entry: train.select and the figures pick entries by name."""
    owners: dict[str, str] = {}
    for i, preset in enumerate(sweep.get("presets", [])):
        owners.setdefault(preset, f"sweep.presets[{i}]")
    for key in ("grids", "models"):
        for i, entry in enumerate(sweep.get(key, [])):
            name, where = entry.get("name"), f"sweep.{key}[{i}].name"
            if not name:
                continue
            if name in owners:
                raise ConfigError(f"{where}: {name!r} is already the name of {owners[name]}; give each entry its own name")
            owners[name] = where


def count_configurations(sweep: dict) -> int:
    """How many configurations a sweep enumerates at most (before duplicates are merged), without enumerating."""
    grids = sum(math.prod(len(v) for k, v in grid.items() if k != "name") for grid in sweep.get("grids", []))
    return len(sweep.get("presets", [])) + grids + len(sweep.get("models", []))


def _grid_entries(grid: dict) -> Iterable[dict]:
    axes = {k: v for k, v in grid.items() if k != "name"}
    keys = list(axes)
    for values in itertools.product(*(axes[k] for k in keys)):
        yield dict(zip(keys, values))


def enumerate_sweep(sweep: dict) -> list[tuple[str, ModelConfig]]:
    """All (name, configuration) pairs of a sweep, in order, without duplicates."""
    total = count_configurations(sweep)
    if total > MAX_CONFIGURATIONS:
        sizes = ", ".join(f"sweep.grids[{i}] {math.prod(len(v) for k, v in g.items() if k != 'name'):,}"
                          for i, g in enumerate(sweep.get("grids", [])))
        raise ConfigError(f"sweep: {total:,} configurations ({sizes}); the limit is {MAX_CONFIGURATIONS:,} per sweep: "
                          "narrow the grids or split the sweep")
    seen: dict[str, tuple[str, ModelConfig]] = {}

    def add(name: str, cfg: ModelConfig) -> None:
        seen.setdefault(cfg.config_id, (name, cfg))

    for i, preset in enumerate(sweep.get("presets", [])):
        where = f"sweep.presets[{i}]"
        add(preset, canonical_model(preset_entry(preset, where), where))
    for i, grid in enumerate(sweep.get("grids", [])):
        where = f"sweep.grids[{i}]"
        for entry in _grid_entries(grid):
            add(grid.get("name", ""), canonical_model(entry, where, strict=False))
    for i, model in enumerate(sweep.get("models", [])):
        where = f"sweep.models[{i}]"
        entry = {k: v for k, v in model.items() if k != "name"}
        if "hf_config" in entry:
            from .hf import check_window, read_hf_config, with_overrides

            entry = check_window(with_overrides(read_hf_config(entry.pop("hf_config"), f"{where}.hf_config"), entry), where)
        add(model.get("name", ""), canonical_model(entry, where))
    if not seen:
        raise ConfigError("sweep: no configurations (give presets, grids or models)")
    return list(seen.values())


def entry_names(sweep: dict) -> list[str]:
    """The names a sweep's entries answer to: presets by their own name, grids and models by ``name``."""
    names = list(sweep.get("presets", []))
    names += [entry["name"] for key in ("grids", "models") for entry in sweep.get(key, []) if entry.get("name")]
    return list(dict.fromkeys(names))


def select_sweep(sweep: dict, names: list[str], where: str, one: bool = False) -> list[tuple[str, ModelConfig]]:
    """The configurations of the sweep entries called ``names`` (train.select), in sweep order; ``one``: ``where``
    names a single entry (figures.breakdown), not a list."""
    known = entry_names(sweep)
    for i, name in enumerate(names):
        if name not in known:
            field = where if one else f"{where}[{i}]"
            raise ConfigError(f"{field}: no sweep entry is named {name!r} (names: {', '.join(known) or 'none'})")
    if not names:
        return []
    chosen = set(names)
    sub = {
        "presets": [p for p in sweep.get("presets", []) if p in chosen],
        "grids": [g for g in sweep.get("grids", []) if g.get("name") in chosen],
        "models": [m for m in sweep.get("models", []) if m.get("name") in chosen],
    }
    return enumerate_sweep(sub)


def entry_config(config: dict, name: str, where: str) -> ModelConfig:
    """The first configuration of sweep entry ``name``, or the configuration whose config_id is ``name``.

    Empty: the first trained configuration, else the sweep's first.
    """
    if not name:
        chosen = select_sweep(config["sweep"], config["train"]["select"], "train.select") or enumerate_sweep(config["sweep"])
        return chosen[0][1]
    for _, cfg in enumerate_sweep(config["sweep"]):
        if cfg.config_id == name:
            return cfg
    pairs = select_sweep(config["sweep"], [name], where, one=True)
    if not pairs:
        raise ConfigError(f"{where}: sweep entry {name!r} has no configuration")
    return pairs[0][1]


def configs_frame(pairs: list[tuple[str, ModelConfig]]) -> pd.DataFrame:
    """One row per configuration, every parameter a column: int64 sizes, str and bool options."""
    rows = [{"config_id": cfg.config_id, "name": name, **cfg.as_dict()} for name, cfg in pairs]
    frame = pd.DataFrame(rows, columns=list(CONFIG_COLUMNS))
    for column in CANONICAL_FIELDS:
        kind = str if column in STR_FIELDS else bool if column in BOOL_FIELDS else \
            "float64" if column in FLOAT_FIELDS else "int64"
        frame[column] = frame[column].astype(kind)
    frame["name"] = frame["name"].astype(str)
    frame["config_id"] = frame["config_id"].astype(str)
    # A later option's column only where some row sets it (LATE_OPTIONS: the earlier frames keep their bytes; a
    # missing column reads as the default, templates.option_columns)
    unset = [name for name in LATE_OPTIONS if (frame[name] == OPTION_DEFAULTS[name]).all()]
    return frame.drop(columns=unset)


def frame_configs(frame: pd.DataFrame) -> list[ModelConfig]:
    """The configurations of a configs frame, in row order."""
    return [config_from_row(row) for row in frame[[c for c in CANONICAL_FIELDS if c in frame]].to_dict("records")]


def sweep_frame(config: dict) -> pd.DataFrame:
    """The configurations of a validated workflow config."""
    return configs_frame(enumerate_sweep(config["sweep"]))
