"""The planner page's computation, without the web framework: a query (the page's fields as text, as they stand in its
URL) checked and turned into the Python API's keywords, and the plan's answer as JSON-ready data.

The page takes the API's own keywords (``trainingcost.plan``'s parameters, which are the command line's flags with
underscores) under the same names, so a shared link, the command line and a Python call say the same thing. It never
takes a path on the server: a model comes as a preset, a Hugging Face Hub name or a pasted ``config.json``; a device
as a catalogue name or a pasted entry in the catalogue's format. Inputs that only name server files (``--hardware``,
``--calibration``, ``--measured-run``, ``--device-model``, ``--frontiers``, ``--figure``) are refused in one line.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping

from ..api import Error, _declared

MAX_QUERY_BYTES = 16_384  # a pasted config.json of the largest models is about 2 KB; uvicorn's h11 reads up to 16 KiB
MAX_PASTED_BYTES = 12_000
SERVER_FILES = ("hardware", "calibration", "measured_run", "device_model", "frontiers", "figure")
PASTED = ("hf_config", "gpu")  # text that may be a pasted JSON object instead of a name
PREFIX = "trainingcost plan: error: "


def _actions() -> dict:
    actions, _ = _declared("plan")
    return {dest: a for dest, a in actions.items() if dest not in ("help", "format", "explain", "require_fit")}


def fields() -> list[str]:
    """The keywords a page's query may carry, in the command line's order."""
    return [dest for dest in _actions() if dest not in SERVER_FILES]


def refuse(field: str, message: str) -> Error:
    """A user mistake in ``field``: the command line's line."""
    flag = "--" + field.replace("_", "-")
    return Error(f"{PREFIX}argument {flag}: {message}")


def field_of(message: str) -> str | None:
    """The page's field that a one-line error names (``argument --gpus: ...`` or ``gpus: ...``), if one does."""
    text = message.removeprefix(PREFIX)
    found = re.match(r"argument --([a-z0-9-]+)", text) or re.match(r"--?([a-z][a-z0-9_-]*)[:, ]", text) \
        or re.match(r"([a-z][a-z0-9_]*): ", text)
    if not found:
        return None
    name = found.group(1).replace("-", "_")
    return name if name in _actions() else None


def _pasted(field: str, text: str) -> dict:
    from ..config.errors import parse_json

    if len(text.encode()) > MAX_PASTED_BYTES:
        raise refuse(field, f"the pasted JSON is {len(text.encode()):,} bytes, more than the {MAX_PASTED_BYTES:,} the "
                            "page reads")
    try:
        data = parse_json(text, field)
    except Error as err:
        raise refuse(field, str(err).removeprefix(f"{field}: ")) from None
    if not isinstance(data, dict):
        raise refuse(field, f"a pasted JSON object, not {type(data).__name__}")
    return data


def _hub(text: str) -> dict:
    """A Hub name's config.json, fetched as ``--hf-config`` does (never a path on this server)."""
    from ..config.errors import read_json
    from ..config.hf import HUB_NAME, hub_config

    if not HUB_NAME.fullmatch(text):
        raise refuse("hf_config", f"{text[:60]!r}: give a Hugging Face Hub name (owner/model, e.g. "
                                  "meta-llama/Llama-3.1-8B) or paste a config.json; the page reads no file on its server")
    return read_json(hub_config(text, "--hf-config"), "--hf-config", "a config.json")


def plan_kwargs(query: Mapping[str, str]) -> dict:
    """``trainingcost.plan``'s keywords from a page's query (text values): booleans as true/false, a pasted JSON
    object for ``hf_config`` or ``gpu``, every other value as its flag's text. Raises :class:`Error`, the command
    line's one line."""
    try:
        return _kwargs(query)
    except Error as err:
        text = str(err)
        raise Error(text if text.startswith("trainingcost ") else PREFIX + text) from None


def _kwargs(query: Mapping[str, str]) -> dict:
    import argparse

    actions = _actions()
    kwargs = {}
    for name, value in query.items():
        if name in SERVER_FILES:
            raise refuse(name, "names a file on the server, which the page never reads; use the command line")
        if name not in actions:
            close = sorted(actions, key=lambda a: -_similar(a, name))[:2]
            raise Error(f"{PREFIX}{name[:40]!r} is not an input of the page (closest: {', '.join(close)})")
        if not isinstance(value, str):
            raise refuse(name, f"expected text, got {type(value).__name__}")
        value = value.strip()
        if value == "":
            continue
        action = actions[name]
        if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
            word = value.lower()
            if word not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
                raise refuse(name, f"expected true or false, got {value[:40]!r}")
            kwargs[name] = word in ("true", "1", "on", "yes")
        elif name in PASTED and value.startswith("{"):
            kwargs[name] = _pasted(name, value)
        elif name == "hf_config":
            kwargs[name] = _hub(value)
        else:
            kwargs[name] = value
    return kwargs


def _similar(a: str, b: str) -> float:
    import difflib

    return difflib.SequenceMatcher(None, a, b).ratio()


def command_line(query: Mapping[str, str]) -> str:
    """The equivalent ``trainingcost plan`` command (a pasted JSON goes into a file the command names)."""
    actions = _actions()
    words = ["trainingcost", "plan"]
    for name, value in query.items():
        value = value.strip()
        if not value or name not in actions:
            continue
        flag = actions[name].option_strings[0]
        if isinstance(actions[name].default, bool) or actions[name].nargs == 0:
            on = value.lower() in ("true", "1", "on", "yes")
            no = f"--no-{flag[2:]}" if any(o.startswith("--no-") for o in actions[name].option_strings) else None
            words += [flag] if on else [no] if no else []
        elif name in PASTED and value.startswith("{"):
            words += ["--hardware", "device.json", "--gpu", _device_name(value)] if name == "gpu" \
                else [flag, "config.json"]
        else:
            words += [flag, value]
    return " ".join(shlex.quote(w) for w in words)


def _device_name(text: str) -> str:
    """The name a pasted device goes by (its ``name``, else custom, as the API names it)."""
    try:
        data = json.loads(text)
    except ValueError:
        return "custom"
    return str(data.get("name", "custom")) if isinstance(data, dict) else "custom"


def python_call(query: Mapping[str, str]) -> str:
    """The equivalent ``trainingcost.plan(...)`` call."""
    actions = _actions()
    parts = []
    for name, value in query.items():
        value = value.strip()
        if not value or name not in actions:
            continue
        if isinstance(actions[name].default, bool) or actions[name].nargs == 0 or \
                type(actions[name]).__name__ == "BooleanOptionalAction":
            parts.append(f"{name}={value.lower() in ('true', '1', 'on', 'yes')}")
        elif name in PASTED and value.startswith("{"):
            parts.append(f"{name}=json.load(open({'device.json' if name == 'gpu' else 'config.json'!r}))")
        elif name == "rule" and "," in value:
            parts.append(f"rule={[r.strip() for r in value.split(',')]!r}")
        elif re.fullmatch(r"-?\d+", value) or re.fullmatch(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", value):
            parts.append(f"{name}={value}")
        else:
            parts.append(f"{name}={value!r}")
    head = "import json, trainingcost\n" if any("json.load" in p for p in parts) else "import trainingcost\n"
    return head + "result = trainingcost.plan(" + ", ".join(parts) + ")\nprint(result.text)"


def _number(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        value = value.item()
        return None if isinstance(value, float) and not math.isfinite(value) else value
    return value


def records(frame) -> list[dict]:
    """A DataFrame as JSON-ready rows (NaN as null)."""
    return [{k: _number(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


MEMORY_PARTS = (("mem_parameters", "weights"), ("mem_feedback", "feedback"), ("mem_gradients", "gradients"),
                ("mem_master_weights", "master"), ("mem_optimizer_state", "optimizer"), ("mem_gathered", "gathered"),
                ("mem_activations", "activations"))
ASSUMPTIONS = (("source_finetune", "fine-tuning"), ("source_precision", "precision"), ("source_peak", "peak FLOP/s"), ("source_memory_capacity", "memory"),
               ("source_power", "power"), ("source_pue", "PUE"), ("source_carbon", "carbon intensity"),
               ("source_price", "price"), ("source_efficiency", "step time"), ("source_interval", "error bar"),
               ("source_framework", "framework"), ("source_network", "network"), ("source_tokens", "tokens"),
               ("source_batch", "global batch"))


def answer(query: Mapping[str, str]) -> dict:
    """The page's answer to ``query``: the plan through ``trainingcost.plan``, or the one-line error and its field."""
    from .. import api

    try:
        kwargs = plan_kwargs(query)
        result = api.plan(**kwargs)
    except Error as err:
        text = str(err)
        return {"ok": False, "error": text, "field": field_of(text)}
    table = result.table
    first = table.iloc[0]
    shown = table[table["cost_model"] == first["cost_model"]]
    keys = [k for k in ("gpus", "rule") if k in shown.columns]
    memory = shown.drop_duplicates(keys)
    return {
        "ok": True,
        "text": result.text,
        "header": list(result.cells.columns),
        "rows": result.cells.values.tolist(),
        "memory": {"capacity": _number(first["memory_capacity"]), "parts": [label for _, label in MEMORY_PARTS],
                   "rows": [{"rule": r["rule"], "gpus": int(r["gpus"]), "fits": bool(r["fits"]),
                             "total": _number(r["mem_total"]),
                             "parts": [_number(r[column]) for column, _ in MEMORY_PARTS]}
                            for _, r in memory.iterrows()]},
        "scaling": [{"rule": r["rule"], "gpus": int(r["gpus"]), "wall_clock_s": _number(r["wall_clock_s"]),
                     "gpu_hours": _number(r["gpu_hours"]), "fits": bool(r["fits"])}
                    for _, r in shown.drop_duplicates(["rule", "gpus"]).iterrows()],
        "assumptions": [[label, str(first[key])] for key, label in ASSUMPTIONS
                        if key in table.columns and str(first[key]) and not (key == "source_finetune"
                                                                             and first["finetune"] == "full")],
        "notes": list(result.notes) + ([result.verdict] if result.verdict else []),
        "cli": command_line(query),
        "python": python_call(query),
    }


def table_of(query: Mapping[str, str]):
    """The plan's whole table (every column, as ``--format csv`` prints it), for the page's downloads."""
    from .. import api

    return api.plan(**plan_kwargs(query)).table


def options() -> dict:
    """What the page's form offers: the catalogues' names, each choice field's choices, and every field's default."""
    from ..analytic.catalogue import rule_names
    from ..config.frameworks import clusters, frameworks
    from ..config.hardware import devices
    from ..config.presets import PRESETS

    actions = _actions()
    names = fields()
    return {
        "fields": names,
        "presets": list(PRESETS),
        "gpus": [[name, d.label] for name, d in devices().items()],
        "frameworks": list(frameworks()),
        "clusters": list(clusters()),
        "rules": list(rule_names()),
        "choices": {name: [str(c) for c in actions[name].choices] for name in names if actions[name].choices},
        "defaults": {name: (None if actions[name].default is None else str(actions[name].default).lower()
                            if isinstance(actions[name].default, bool) else str(actions[name].default))
                     for name in names},
        "help": {name: (actions[name].help or "").split(";")[0][:200] for name in names},
    }
