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
