"""Property-based tests (Hypothesis): random model flags and sweep configs, valid and invalid.

Every input either succeeds, with tables whose invariants hold, or fails with exit status 2 (the command line)
or a ConfigError (the workflow's validation) and one line; never a traceback. The CI profile keeps each
property to a few seconds; `pytest tests/test_properties.py --hypothesis-profile long` runs many more examples.
"""

import contextlib
import copy
import io
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainingcost.analytic import phase_totals, rule_names
from trainingcost.cli import main
from trainingcost.config import ConfigError, canonical_model, configs_frame
from trainingcost.pipeline import load

# The profiles "ci" (the default, 40 examples per property) and "long" are registered in conftest.py.

# -- the command line ---------------------------------------------------------------------------------

SIZES = st.one_of(st.integers(-3, 12), st.integers(1, 4096), st.integers(-(10**15), 10**15), st.sampled_from([0, 2**62, 2**63]))
TEXT = st.one_of(st.text(max_size=6), st.sampled_from(["1e3", "nan", "inf", "-1", "0x10", "", " 4", "3.5"]))
FLAGS = {
    "--arch": st.one_of(st.sampled_from(["encoder", "decoder", "encoder-decoder"]), TEXT),
    "--layers": st.one_of(SIZES, TEXT), "--enc-layers": SIZES, "--dec-layers": SIZES,
    "--d-model": st.one_of(SIZES, TEXT), "--heads": SIZES, "--d-ff": SIZES, "--vocab": SIZES,
    "--seq-len": st.one_of(SIZES, TEXT), "--tgt-len": SIZES, "--batch": SIZES, "--classes": SIZES,
    "--preset": st.one_of(st.sampled_from(["paper-example", "bert-base", "t5-small", "gpt2-small"]), TEXT),
    "--rule": st.one_of(st.sampled_from([*rule_names(), "all"]), TEXT),
    "--mirror-steps": SIZES,
}


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse
            status = exc.code
    return status, out.getvalue(), err.getvalue()


@given(st.dictionaries(st.sampled_from(sorted(FLAGS)), st.none(), max_size=7).flatmap(
    lambda keys: st.fixed_dictionaries({k: FLAGS[k] for k in keys})))
def test_estimate_succeeds_with_sound_tables_or_fails_with_one_line(flags):
    argv = ["estimate", "--format", "csv", "--cost-model", "executed"]
    for flag, value in flags.items():
        argv += [flag, str(value)]
    if "--rule" not in flags:
        argv += ["--rule", "bp"]
    status, stdout, stderr = run_cli(argv)  # any other exception fails the test: that would be a traceback
    if status == 0:
        table = pd.read_csv(io.StringIO(stdout))
        assert len(table) > 0 and (table[["maccs", "flops"]] >= 0).all().all()
        assert table["flops"].dtype == np.int64
    else:
        assert status == 2 and stdout == "", (argv, stderr)
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("trainingcost") and "error:" in lines[0], (argv, stderr)


# -- invariants of the analytic tables ----------------------------------------------------------------

MODELS = st.fixed_dictionaries({
    "arch": st.sampled_from(["encoder", "decoder"]),
    "heads": st.integers(1, 8),
    "d_head": st.integers(1, 32),
    "d_ff": st.integers(1, 512),
    "vocab": st.integers(2, 5000),
    "seq_len": st.integers(1, 512),
    "batch": st.integers(1, 64),
    "classes": st.sampled_from([0, 0, 2, 10]),
})


def totals(entry: dict, **changes) -> dict:
    fields = {k: v for k, v in {**entry, **changes}.items() if k != "d_head" and not (k == "classes" and v == 0)}
    fields["d_model"] = entry["heads"] * entry["d_head"]
    frame = configs_frame([("p", canonical_model(fields, "p"))])
    return {key: (int(m[0]), int(f[0])) for key, (m, f) in phase_totals(frame, None, ["paper", "executed", "kaplan"]).items()}


@given(MODELS, st.integers(2, 5))
def test_costs_are_linear_in_batch_and_in_depth(entry, n):
    one, two, many = totals(entry, layers=1), totals(entry, layers=2), totals(entry, layers=n)
    for key in one:
        for unit in (0, 1):
            block = two[key][unit] - one[key][unit]
            ends = one[key][unit] - block
            assert block >= 0 and ends >= 0, key
            assert many[key][unit] == n * block + ends, key  # n blocks = n x one block + the ends
    doubled = totals(entry, layers=2, batch=2 * entry["batch"])
    for key, (maccs, flops) in two.items():
        assert doubled[key] == (2 * maccs, 2 * flops), key
        assert maccs >= 0 and flops >= 0


# -- the workflow's validation --------------------------------------------------------------------------

VALID = {
    "sweep": {
        "presets": ["paper-example"],
        "grids": [{"name": "g", "arch": ["encoder", "decoder"], "d_model": [32], "heads": [4], "ff_mult": [2], "layers": [1, 2],
                   "seq_len": [16], "vocab": [256], "batch": [2]}],
        "models": [{"name": "m", "arch": "encoder-decoder", "layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "vocab": 256,
                    "seq_len": 8, "batch": 2}],
    },
    "analytic": {"rules": ["bp", "fa"], "cost_models": ["paper", "executed"]},
    "train": {"select": ["m"], "steps": 5, "lr": 0.05},
}
PATHS = [("sweep",), ("sweep", "presets"), ("sweep", "grids", 0, "d_model"), ("sweep", "grids", 0, "layers"),
         ("sweep", "grids", 0, "name"), ("sweep", "models", 0, "heads"), ("sweep", "models", 0, "seq_len"),
         ("sweep", "models", 0, "name"), ("sweep", "models", 0, "batch"), ("analytic", "rules"), ("analytic", "cost_models"),
         ("train", "select"), ("train", "steps"), ("train", "lr"), ("train",), ("memory",), ("figures",)]
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**13), 10**13), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.lists(st.integers(-5, 10**13), max_size=3), st.lists(st.text(max_size=5), max_size=2),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
EDITS = st.lists(st.tuples(st.sampled_from(["set", "delete", "extra"]), st.sampled_from(PATHS), VALUES), max_size=3)


def edited(edits) -> dict:
    config = copy.deepcopy(VALID)
    for action, path, value in edits:
        parent = config
        for key in path[:-1]:
            try:
                parent = parent[key]
            except (KeyError, IndexError, TypeError):
                break
        else:
            if not isinstance(parent, (dict, list)):
                continue
            key = path[-1]
            if action == "set":
                if isinstance(parent, dict) or (isinstance(key, int) and key < len(parent)):
                    parent[key] = value
            elif action == "delete" and isinstance(parent, dict):
                parent.pop(key, None)
            elif action == "extra" and isinstance(parent, dict):
                parent[f"unknown_{key}"] = value
    return config


@given(EDITS)
@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_the_workflows_validation_accepts_or_names_one_field(tmp_path, edits):
    from snakemake.utils import validate

    from trainingcost.pipeline import write_schema

    config = edited(edits)
    try:
        filled = load(config)
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text and text, edits
        return
    # Accepted: Snakemake's validation of the same schema agrees, and every number is finite.
    validate(copy.deepcopy(config), write_schema(tmp_path / "schema.yaml"))
    assert math.isfinite(filled["train"]["lr"])


@pytest.mark.parametrize("edits", [[], [("set", ("train", "lr"), float("nan"))]])
def test_the_mutation_helper_reaches_both_outcomes(edits):
    """The property above can fail: the valid config is accepted and a NaN learning rate is refused."""
    if edits:
        with pytest.raises(ConfigError, match="train.lr"):
            load(edited(edits))
    else:
        assert load(edited(edits))["train"]["steps"] == 5
