"""Figures that the CPU workflow cannot draw: the energy figure, from synthetic runs."""

import matplotlib.image
import numpy as np
import pandas as pd

from trainingcost.findings import figures as F
from trainingcost.analytic import rule_names


def test_energy_figure_from_synthetic_runs(tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"config_id": f"c{i}", "rule": rule, "seed": 0, "energy_per_step_j": (1 + 0.1 * rank) * (1 + 0.05 * rng.standard_normal())}
            for i in range(4) for rank, rule in enumerate(rule_names())]
    F.style()
    fig = F.energy(pd.DataFrame(rows))
    assert "PEPITA 1.1" in fig._suptitle.get_text()  # PEPITA is the second rule: about 1.1x BP by construction
    png, pdf = F.save(fig, tmp_path / "8_energy.png")
    image = matplotlib.image.imread(png)
    assert image.shape[0] > 300 and image[..., :3].std() > 0.05 and pdf.stat().st_size > 5_000


def test_every_rule_has_its_own_colour_and_marker():
    assert len(set(F.RULE_COLORS.values())) == len(rule_names()) == len(set(F.RULE_MARKERS.values()))


def test_energy_figure_leaves_out_coarse_readings():
    # two coarse runs (NVML's counter advanced on too few of their steps) would pull PEPITA's median to 5x BP; they are
    # left out, and the title says how many
    rows = [{"config_id": "c0", "rule": rule, "seed": 0, "energy_per_step_j": 1.0 + (rule == "pepita") * 0.1,
             "energy_quality": "ok"} for rule in ("bp", "pepita")]
    coarse = "coarse: NVML's energy counter advanced on 2 of 7 timed steps"
    for i in (1, 2):
        rows += [{"config_id": f"c{i}", "rule": "bp", "seed": 0, "energy_per_step_j": 1.0, "energy_quality": "ok"},
                 {"config_id": f"c{i}", "rule": "pepita", "seed": 0, "energy_per_step_j": 5.0, "energy_quality": coarse}]
    F.style()
    title = F.energy(pd.DataFrame(rows))._suptitle.get_text()
    assert "PEPITA 1.10x BP" in title and "2 runs left out" in title
    kept = F.energy(pd.DataFrame(rows).drop(columns="energy_quality"))._suptitle.get_text()  # no column: every run
    assert "PEPITA 5.00x BP" in kept and "left out" not in kept


def test_energy_quality_counts_the_counters_advances():
    from trainingcost.measure.recorder import ENERGY_ADVANCES, energy_quality

    none = energy_quality(pd.Series([np.nan, np.nan]))  # no NVML (a CPU run): null, not "coarse"
    assert none["energy_quality"] is None and np.isnan(none["energy_advances"])
    ok = energy_quality(pd.Series([0.5] * ENERGY_ADVANCES + [0.0, 0.0]))
    assert ok == {"energy_advances": ENERGY_ADVANCES, "energy_quality": "ok"}
    coarse = energy_quality(pd.Series([0.0] * 5 + [1.2, 1.3]))
    assert coarse["energy_advances"] == 2 and coarse["energy_quality"].startswith("coarse: ") and "2 of 7" in coarse["energy_quality"]


def test_a_step_time_figure_with_no_trusted_run_says_so_in_words():
    """Issue 63: on a busy machine every run is flagged, and figure 5's title read "by nan% ... Spearman nan"."""
    import pandas as pd

    from trainingcost.findings.figures import step_time

    rows = [dict(granularity="step", cost_model="executed", rule=rule, device_name="cpu", predicted_time_s=0.01 * k,
                 measured_time_s=0.012 * k, timing_quality="contended") for k, rule in enumerate(["bp", "dfa"], 1)]
    fig = step_time(pd.DataFrame(rows))
    texts = [fig._suptitle.get_text(), *(ax.get_title() for ax in fig.axes)]
    assert "no trusted" in texts[0].lower() and not any("nan" in t.lower() for t in texts), texts
    one = step_time(pd.DataFrame([{**rows[0], "timing_quality": "ok"}]))  # one trusted run: no rank correlation
    assert not any("nan" in t.lower() for t in [one._suptitle.get_text() if one._suptitle else "",
                                                *(ax.get_title() for ax in one.axes)])


def test_figure_numbers_are_unique():
    """Issue 63: two figures were numbered 12_ (the scaling study's and the plan's strong scaling)."""
    import re
    from pathlib import Path

    from trainingcost.findings.scaling import SCALING_FIGURES
    from trainingcost.pipeline import FIGURES

    root = Path(__file__).resolve().parents[1]
    names = [*FIGURES.values(), *SCALING_FIGURES.values()]
    for rules in (root / "workflow" / "rules").glob("*.smk"):
        names += re.findall(r'"(?:results/figures/)?([0-9]+_[a-z_]+)', rules.read_text())
    numbers = {}
    for name in set(names):
        numbers.setdefault(name.split("_")[0], set()).add(name)
    assert all(len(found) == 1 for found in numbers.values()), {k: v for k, v in numbers.items() if len(v) > 1}
