import os

import pandas as pd
import pytest
from hypothesis import HealthCheck, settings

from trainingcost.analytic import layer_table
from trainingcost.config import canonical_model, configs_frame


# Hypothesis: a few seconds per property in CI; `pytest --hypothesis-profile long` for a thorough local run.
# derandomize: CI and `make bench` (the "bench" profile, 200 examples) draw the same examples every run (a red run is
# reproducible, never a chance find); "long" draws new ones each time, and what it finds becomes an @example.
settings.register_profile("ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=True)
settings.register_profile("bench", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=True)
settings.register_profile("long", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


def frame_of(**entries) -> pd.DataFrame:
    """A configs frame from keyword model entries: frame_of(a=dict(arch=...), ...)."""
    return configs_frame([(name, canonical_model(entry, name)) for name, entry in entries.items()])


def costs(entry: dict, rules=("bp",), cost_models=("paper",), **kw) -> pd.DataFrame:
    return layer_table(frame_of(m=entry), list(rules), list(cost_models), **kw)


def cell(table: pd.DataFrame, layer: str, phase: str, rule: str = "bp", model: str = "paper") -> tuple[int, int]:
    row = table[(table.layer == layer) & (table.phase == phase) & (table.rule == rule) & (table.cost_model == model)]
    assert len(row) == 1, (layer, phase, rule, model, len(row))
    return int(row.maccs.iloc[0]), int(row.flops.iloc[0])


def phase_sum(table: pd.DataFrame, phase: str, rule: str, unit: str = "maccs", model: str = "paper") -> int:
    part = table[(table.phase == phase) & (table.rule == rule) & (table.cost_model == model)]
    return int(part[unit].sum())


@pytest.fixture
def tiny_encoder():
    return dict(arch="encoder", layers=2, d_model=16, heads=4, d_ff=32, vocab=50, seq_len=8, batch=1)


# Every snakemake call imports the SLURM executor plugin, whose help text runs `scontrol show config`. On a machine
# with SLURM's tools and a slurm.conf but no controller answering (one where tests/cluster has run), that call waits
# out its 10 s timeout: every workflow test would pay it. An empty configuration makes scontrol fail at once; the
# real-SLURM test gives its own subprocesses the machine's configuration back (tests/cluster/test_slurm.py).
if os.environ.get("SLURM_CONF") != os.devnull:
    os.environ["MACHINE_SLURM_CONF"] = os.environ.get("SLURM_CONF", "")  # "": SLURM's default location
os.environ["SLURM_CONF"] = os.devnull


def pytest_collection_modifyitems(config, items):
    """The real-SLURM tests run first: under `make test`'s two workers (one of them takes their file, which
    installs and starts a cluster) they then overlap the rest instead of ending the run alone. Safe in any order:
    every other test's snakemake calls see the empty SLURM configuration above."""
    items.sort(key=lambda item: item.get_closest_marker("slurm") is None)


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: starts a local SLURM cluster (root; runs first)")



def pytest_collection_finish(session):
    """Freeze what collection left alive (the imported modules: torch, transformers, ...; gc.freeze moves them to a
    permanent generation). The tensor meter (measure/memory.py) begins every metered step with a full collection
    and a walk over the collector's objects to find the tensors alive; in a test process those are hundreds of
    thousands of module objects, 0.7 s a step, where the step itself takes 0.05 s. A tensor created at import
    time is frozen too, so the meter does not see it alive: no test feeds one to a metered step (every model, batch
    and rule tensor is made inside the test), and the meter's readings are the same (checked on a BP, DFA, TP
    and WM step with transformers imported)."""
    import gc

    gc.collect()
    gc.freeze()
