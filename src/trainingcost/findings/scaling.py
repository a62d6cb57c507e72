"""The cost of reaching a quality: frontiers, fits and compute multipliers from the scaling study.

Inputs: ``scaling.parquet`` (one row per evaluation of each (point, rule, seed) run: the measured training
FLOPs so far and the validation loss; :mod:`trainingcost.measure.curve`). Per rule:

- **frontier**: the lowest validation loss reached with at most C training FLOPs, over the grid's sizes.
  Each point's curve (the mean over its seeds) is interpolated linearly in log C between its evaluations,
  never beyond them; the frontier at C is the lowest of the curves that reach C, then its running minimum.
- **fit**: L(C) = a C^-b + c (Filipovich et al. 2022, eq. 1; Kaplan et al. 2020's form with an irreducible
  loss c) on the frontier from ``FIT_FROM`` times the smallest compute (the first decade is the start of
  training, which no power law describes). Least squares on log L; c is profiled on a grid in [0, min L),
  a and b are then a linear fit of log(L - c) on log C.
- **multiplier against BP** at a target loss L: C_rule(L) / C_BP(L), each the least compute at which the
  frontier reaches L (interpolated in log C between the study's grid points). Where the rule's frontier
  stays above L over the whole measured range it *never reaches* L: no number is given, and nothing is
  extrapolated; the fit is reported beside it, never used for it.
- **confidence intervals**: a bootstrap over seeds. Each replicate draws, for every (rule, point), as many
  seeds as the study has, with replacement, and recomputes the frontiers, fits and multipliers; intervals
  are the 5th and 95th percentiles, and ``never_share`` the share of replicates in which the rule never
  reaches the target.
- **depth at equal compute**: each depth's own frontier (over the widths) at one compute that every rule's
  frontier at every depth reaches: Franceschi's (Backpropagation Free Transformers) claims that KP tracks BP at every depth and that FA fails
  beyond 2 layers.

The plan (``plan --target-loss --frontiers``) reads the frontier rows back through :func:`multiplier_at`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

REFERENCE = "bp"
GRID_POINTS = 64  # compute grid of the frontiers (log-spaced over the study's measured range)
FIT_FROM = 10.0  # the fit starts at 10x the smallest compute of the grid
TARGETS = 16  # target losses of the multiplier curves, between BP's frontier at FIT_FROM and its lowest loss
QUANTILES = (0.05, 0.95)
OK = "ok"
# The study's figures (findings/scaling_figures.py), by name: their file names under results/figures/.
SCALING_FIGURES = {
    "loss_vs_compute": "12_loss_vs_compute",
    "frontiers": "13_frontiers",
    "multiplier": "14_compute_multiplier",
    "depth_equal_compute": "15_loss_by_depth_equal_compute",
}

FRONTIER_COLUMNS = [
    "kind", "rule", "layers", "compute", "loss", "loss_lo", "loss_hi", "target_loss", "multiplier", "multiplier_lo",
    "multiplier_hi", "never_share", "reaches", "headline", "a", "b", "b_lo", "b_hi", "c", "c_lo", "c_hi",
    "fit_from", "fit_rmse", "gap_to_bp", "gap_lo", "gap_hi", "replicates",
]


# -- the pieces, on plain arrays ------------------------------------------------------------------------
def fit_power_law(compute, loss) -> tuple[float, float, float, float]:
    """(a, b, c, rmse of log L) of L = a C^-b + c by least squares on log L, c >= 0 profiled.

    For a fixed c, log(L - c) = log a - b log C is linear; c runs over a grid of [0, min L) refined five
    times around the best value, and the fit with the least squared error in log L wins. NaN if fewer than 3
    points, or if the loss does not fall with compute (b <= 0).
    """
    C, L = np.asarray(compute, float), np.asarray(loss, float)
    keep = np.isfinite(C) & np.isfinite(L) & (C > 0) & (L > 0)
    C, L = C[keep], L[keep]
    if len(C) < 3 or np.ptp(np.log(C)) == 0:
        return (math.nan,) * 4
    x, y = np.log(C), np.log(L)
    top = L.min()
    xm = x - x.mean()

    def at(cs: np.ndarray):
        """Per c of ``cs``: the squared error in log L, a and b."""
        z = np.log(L[None, :] - cs[:, None])
        slope = (z * xm).sum(axis=1) / (xm * xm).sum()
        intercept = z.mean(axis=1) - slope * x.mean()
        pred = np.log(np.exp(intercept[:, None] + slope[:, None] * x[None, :]) + cs[:, None])
        return ((pred - y[None, :]) ** 2).mean(axis=1), np.exp(intercept), -slope

    lo, hi = 0.0, float(top)
    for _ in range(6):  # each round narrows c's interval 20-fold
        cs = np.linspace(lo, hi, 41)
        cs = cs[cs < top]
        sse, a_s, b_s = at(cs)
        i = int(np.nanargmin(sse))
        best = (float(sse[i]), float(a_s[i]), float(b_s[i]), float(cs[i]))
        step = (hi - lo) / 40
        lo, hi = max(0.0, best[3] - step), min(float(top), best[3] + step)
    sse, a, b, c = best
    if not b > 0:
        return (math.nan,) * 4
    return a, b, c, math.sqrt(sse)


def frontier(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """The lowest loss reached with at most each grid compute, over the curves (compute, loss), each
    interpolated in log compute within its own range; NaN below every curve's first compute and beyond the
    largest compute any curve measured (no claim is made where nothing ran)."""
    best = np.full(len(grid), np.inf)
    lg = np.log(grid)
    reach = -np.inf  # the largest compute any curve measured: the frontier ends there
    for compute, loss in curves:
        ok = np.isfinite(compute) & np.isfinite(loss) & (compute > 0)
        c, l = np.log(compute[ok]), loss[ok]
        if len(c) == 0:
            continue
        order = np.argsort(c)
        c, l = c[order], l[order]
        reach = max(reach, c[-1])
        inside = (lg >= c[0]) & (lg <= c[-1])
        values = np.interp(lg[inside], c, l) if len(c) > 1 else np.full(inside.sum(), l[0])
        best[inside] = np.minimum(best[inside], values)
    best = np.minimum.accumulate(best)
    return np.where(np.isfinite(best) & (lg <= reach + 1e-12), best, np.nan)


def compute_to_reach(grid: np.ndarray, front: np.ndarray, target: float) -> float:
    """The least compute at which ``front`` reaches ``target`` (log-linear between grid points); NaN if never."""
    ok = np.isfinite(front)
    reached = np.nonzero(ok & (front <= target))[0]
    if len(reached) == 0:
        return math.nan
    i = reached[0]
    if i == 0 or not ok[i - 1]:
        return float(grid[i])
    l0, l1 = front[i - 1], front[i]
    t = 0.0 if l0 == l1 else (l0 - target) / (l0 - l1)
    return float(math.exp(math.log(grid[i - 1]) + t * (math.log(grid[i]) - math.log(grid[i - 1]))))


# -- the study's curves -----------------------------------------------------------------------------------
@dataclass
class Curves:
    """Per (rule, config_id): the layers, and per seed the (compute, loss) of the evaluations run."""

    runs: dict  # (rule, config_id) -> {seed: (compute, loss)}
    layers: dict  # config_id -> layers
    seeds: tuple

    @classmethod
    def of(cls, scaling: pd.DataFrame) -> "Curves":
        rows = scaling[(scaling["step"] > 0) & scaling["val_loss"].notna() & scaling["flops"].notna()]
        runs: dict = {}
        for (rule, cid, seed), g in rows.groupby(["rule", "config_id", "seed"], sort=True):
            g = g.sort_values("step")
            runs.setdefault((rule, cid), {})[int(seed)] = (g["flops"].to_numpy(float), g["val_loss"].to_numpy(float))
        layers = dict(zip(scaling["config_id"], scaling["layers"].astype(int)))
        return cls(runs, layers, tuple(sorted(int(s) for s in scaling["seed"].unique())))

    def rules(self) -> list[str]:
        """BP first, then the catalogue's order."""
        from ..analytic import rule_names

        order = {r: i for i, r in enumerate(rule_names())}
        return sorted({r for r, _ in self.runs}, key=lambda r: (r != REFERENCE, order.get(r, len(order)), r))

    def mean(self, rule: str, cid: str, seeds) -> tuple[np.ndarray, np.ndarray] | None:
        """The mean curve over ``seeds`` (repeats allowed): at each compute evaluated, the mean of the seeds
        that reached it (a diverged seed's curve ends where it diverged)."""
        per = self.runs.get((rule, cid), {})
        drawn = [per[s] for s in seeds if s in per]
        if not drawn:
            return None
        computes = np.unique(np.concatenate([c for c, _ in drawn]))
        sums, counts = np.zeros(len(computes)), np.zeros(len(computes))
        for c, l in drawn:
            idx = np.searchsorted(computes, c)
            np.add.at(sums, idx, l)
            np.add.at(counts, idx, 1)
        return computes, sums / counts

    def frontier(self, rule: str, grid: np.ndarray, draw=None, layers: int | None = None) -> np.ndarray:
        curves = []
        for (r, cid) in self.runs:
            if r != rule or (layers is not None and self.layers[cid] != layers):
                continue
            seeds = draw(rule, cid) if draw else self.seeds
            mean = self.mean(rule, cid, seeds)
            if mean is not None:
                curves.append(mean)
        return frontier(curves, grid)

    def grid(self) -> np.ndarray:
        computes = np.concatenate([c for per in self.runs.values() for c, _ in per.values()])
        computes = computes[computes > 0]
        return np.geomspace(computes.min(), computes.max(), GRID_POINTS)


def _quantiles(values) -> tuple[float, float]:
    v = np.asarray([x for x in values if np.isfinite(x)], float)
    if len(v) == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(v, QUANTILES)
    return float(lo), float(hi)


def targets_of(grid: np.ndarray, bp_front: np.ndarray) -> np.ndarray:
    start = np.searchsorted(grid, grid[0] * FIT_FROM)
    finite = bp_front[np.isfinite(bp_front)]
    if len(finite) == 0:
        return np.array([])
    high = bp_front[start] if start < len(grid) and np.isfinite(bp_front[start]) else finite.max()
    return np.linspace(high, finite.min(), TARGETS)


def headline_target(grid: np.ndarray, bp_front: np.ndarray, fraction: float) -> tuple[float, float]:
    """(compute, loss): BP's frontier at ``fraction`` of the largest compute at which it has a loss."""
    ok = np.nonzero(np.isfinite(bp_front))[0]
    if len(ok) == 0:
        return math.nan, math.nan
    compute = grid[ok[-1]] * fraction
    return float(compute), float(np.interp(math.log(compute), np.log(grid[ok]), bp_front[ok]))


def frontiers_table(scaling: pd.DataFrame, bootstrap: int = 200, target_compute_fraction: float = 0.1,
                    seed: int = 0) -> pd.DataFrame:
    """Frontier, fit, multiplier and depth rows for every rule of the study (module docstring)."""
    curves = Curves.of(scaling)
    rules = curves.rules()
    if REFERENCE not in rules:
        raise ValueError("frontiers: the study has no BP run with a validation loss; no multiplier can be given")
    grid = curves.grid()
    fronts = {r: curves.frontier(r, grid) for r in rules}
    targets = targets_of(grid, fronts[REFERENCE])
    head_compute, head_loss = headline_target(grid, fronts[REFERENCE], target_compute_fraction)
    all_targets = np.append(targets, head_loss)
    depths = sorted(set(curves.layers.values()))
    depth_fronts = {(r, d): curves.frontier(r, grid, layers=d) for r in rules for d in depths}
    # equal compute for the depth comparison: the largest that every rule's frontier at every depth reaches
    reach = [grid[np.nonzero(np.isfinite(f))[0][-1]] for f in depth_fronts.values() if np.isfinite(f).any()]
    depth_compute = float(min(reach)) if reach else math.nan
    fit_mask = grid >= grid[0] * FIT_FROM

    # the bootstrap: every replicate redraws the seeds of every (rule, point)
    rng = np.random.default_rng(seed)
    n_seeds = len(curves.seeds)
    reps = {"front": {r: [] for r in rules}, "fit": {r: [] for r in rules}, "mult": {r: [] for r in rules},
            "depth": {k: [] for k in depth_fronts}}
    for _ in range(bootstrap):
        draws = {key: tuple(rng.choice(curves.seeds, n_seeds, replace=True)) for key in curves.runs}

        def draw(rule, cid):
            return draws[(rule, cid)]

        rep = {r: curves.frontier(r, grid, draw) for r in rules}
        bp_need = [compute_to_reach(grid, rep[REFERENCE], t) for t in all_targets]
        for r in rules:
            reps["front"][r].append(rep[r])
            reps["fit"][r].append(fit_power_law(grid[fit_mask], rep[r][fit_mask]))
            need = [compute_to_reach(grid, rep[r], t) for t in all_targets]
            # inf: BP reaches the target and the rule does not; NaN: BP does not (the replicate says nothing)
            reps["mult"][r].append([math.nan if not (np.isfinite(b) and b > 0) else n / b if np.isfinite(n) else math.inf
                                    for n, b in zip(need, bp_need)])
        for (r, d) in depth_fronts:
            f = curves.frontier(r, grid, draw, layers=d)
            reps["depth"][(r, d)].append(_at(grid, f, depth_compute))

    rows = []
    for r in rules:
        front = fronts[r]
        stack = np.array(reps["front"][r]) if bootstrap else np.empty((0, len(grid)))
        for i, (c, l) in enumerate(zip(grid, front)):
            if not np.isfinite(l):
                continue
            lo, hi = _quantiles(stack[:, i]) if bootstrap else (math.nan, math.nan)
            rows.append({"kind": "frontier", "rule": r, "compute": float(c), "loss": float(l), "loss_lo": lo,
                         "loss_hi": hi})
        a, b, c, rmse = fit_power_law(grid[fit_mask], front[fit_mask])
        fits = np.array(reps["fit"][r]) if bootstrap else np.full((1, 4), np.nan)
        b_lo, b_hi = _quantiles(fits[:, 1])
        c_lo, c_hi = _quantiles(fits[:, 2])
        rows.append({"kind": "fit", "rule": r, "a": a, "b": b, "b_lo": b_lo, "b_hi": b_hi, "c": c, "c_lo": c_lo,
                     "c_hi": c_hi, "fit_from": float(grid[0] * FIT_FROM), "fit_rmse": rmse, "replicates": bootstrap})
        mults = np.array(reps["mult"][r]) if bootstrap else np.full((1, len(all_targets)), np.nan)
        for j, t in enumerate(all_targets):
            need_r, need_bp = compute_to_reach(grid, front, t), compute_to_reach(grid, fronts[REFERENCE], t)
            m = need_r / need_bp if np.isfinite(need_r) and np.isfinite(need_bp) else math.nan
            lo, hi = _quantiles(mults[:, j])
            said = mults[:, j][~np.isnan(mults[:, j])]  # the replicates in which BP reaches the target
            never = float(np.mean(np.isinf(said))) if bootstrap and len(said) else math.nan
            rows.append({"kind": "multiplier", "rule": r, "target_loss": float(t), "compute": need_r, "multiplier": m,
                         "multiplier_lo": lo, "multiplier_hi": hi, "never_share": never,
                         "reaches": bool(np.isfinite(need_r)), "headline": j == len(all_targets) - 1,
                         "replicates": bootstrap})
        for d in depths:
            loss = _at(grid, depth_fronts[(r, d)], depth_compute)
            ref = _at(grid, depth_fronts[(REFERENCE, d)], depth_compute)
            samples = np.array(reps["depth"][(r, d)]) if bootstrap else np.array([])
            ref_samples = np.array(reps["depth"][(REFERENCE, d)]) if bootstrap else np.array([])
            lo, hi = _quantiles(samples)
            g_lo, g_hi = _quantiles(samples - ref_samples) if bootstrap else (math.nan, math.nan)
            rows.append({"kind": "depth", "rule": r, "layers": d, "compute": depth_compute, "loss": loss,
                         "loss_lo": lo, "loss_hi": hi, "gap_to_bp": loss - ref, "gap_lo": g_lo, "gap_hi": g_hi,
                         "replicates": bootstrap})
    table = pd.DataFrame(rows).reindex(columns=FRONTIER_COLUMNS)
    table["layers"] = table["layers"].astype("Int64")
    table["replicates"] = table["replicates"].astype("Int64")
    table["reaches"] = table["reaches"].astype("boolean")
    table["headline"] = table["headline"].astype("boolean")
    table.attrs["headline_compute"] = head_compute
    return table


def _at(grid: np.ndarray, front: np.ndarray, compute: float) -> float:
    ok = np.isfinite(front)
    if not np.isfinite(compute) or not ok.any() or compute > grid[ok][-1] or compute < grid[ok][0]:
        return math.nan
    return float(np.interp(math.log(compute), np.log(grid[ok]), front[ok]))


# -- what the plan reads ----------------------------------------------------------------------------------
def multiplier_at(frontiers: pd.DataFrame, rule: str, target: float) -> float:
    """Compute to reach ``target`` under ``rule`` / under BP, from the frontier rows; NaN if the rule's
    frontier never gets there in the measured range. ValueError if BP's does not (the target is out of range)."""
    def front(r):
        rows = frontiers[(frontiers["kind"] == "frontier") & (frontiers["rule"] == r)].sort_values("compute")
        return rows["compute"].to_numpy(float), rows["loss"].to_numpy(float)

    c_bp, l_bp = front(REFERENCE)
    if len(c_bp) == 0:
        raise ValueError("the frontiers have no BP frontier")
    need_bp = compute_to_reach(c_bp, l_bp, target)
    if not np.isfinite(need_bp):
        raise ValueError(f"BP's frontier reaches losses from {np.nanmax(l_bp):.4g} down to {np.nanmin(l_bp):.4g}; "
                         f"{target:g} is below them")
    if target > np.nanmax(l_bp):  # equal: reached at the first evaluation, which is a compute to reach it
        raise ValueError(f"BP's frontier reaches losses from {np.nanmax(l_bp):.4g} down to {np.nanmin(l_bp):.4g}; "
                         f"{target:g} is above them (reached at the study's first evaluation)")
    c_r, l_r = front(rule)
    if len(c_r) == 0:
        raise KeyError(rule)
    return compute_to_reach(c_r, l_r, target) / need_bp


# -- the summary's section --------------------------------------------------------------------------------
def _x(value: float) -> str:
    return "n/a" if not np.isfinite(value) else (f"{value:.3g}x" if value < 100 else f"{value:,.0f}x")


def _span(lo: float, hi: float, fmt=_x) -> str:
    """The interval, or nothing where there is none (no replicates, or one seed: every replicate the same)."""
    return "" if not (np.isfinite(lo) and np.isfinite(hi)) or lo == hi else f" [{fmt(lo)}, {fmt(hi)}]"


def summary_section(frontiers: pd.DataFrame, scaling: pd.DataFrame, lr: pd.DataFrame | None, labels: dict) -> str:
    """Markdown: the study's protocol in one paragraph, then per rule its multiplier at the stated target,
    whether any target in range makes it cheaper than BP, its fit, and the depth claims of Franceschi (Backpropagation Free Transformers)."""
    runs = scaling.drop_duplicates(["config_id", "rule", "seed"])
    seeds = sorted(scaling["seed"].unique())
    points = scaling.drop_duplicates("config_id")
    steps = int(scaling["step"].max())
    reps = int(frontiers["replicates"].dropna().max()) if frontiers["replicates"].notna().any() else 0
    head = frontiers[(frontiers["kind"] == "multiplier") & frontiers["headline"].fillna(False)]
    target = float(head["target_loss"].iloc[0]) if len(head) else math.nan
    head_compute = frontiers.attrs.get("headline_compute", math.nan)
    bad = runs[runs["status"] != OK]
    out = ["## Cost to a quality (the scaling study)", ""]
    out.append(
        f"{len(points)} decoders (d_model {', '.join(map(str, sorted(points['d_model'].unique())))}; "
        f"{', '.join(map(str, sorted(points['layers'].unique())))} layers) on byte-level lm, {steps} steps each, "
        f"under {scaling['rule'].nunique()} rules and {len(seeds)} seed{'s' if len(seeds) != 1 else ''}; the compute "
        f"is the measured training FLOPs (step 1 metered, equal to the executed model). Intervals: 5-95% of "
        f"{reps} bootstrap replicates over seeds" + (" (one seed: no spread can be shown)." if len(seeds) < 2 else ".")
    )
    if len(bad):
        out.append(f"{len(bad)} of {len(runs)} runs did not end ok: "
                   + ", ".join(f"{r.rule} d{r.d_model}x{r.layers} seed {r.seed} ({r.status})" for r in bad.itertuples())
                   + ".")
    if lr is not None and len(lr) and not lr["searched"].any():
        out.append(f"Learning rate: {lr['lr'].iloc[0]:g} for every rule (one rate: not searched).")
    elif lr is not None and len(lr):
        chosen = lr[lr["chosen"]].set_index("rule")["lr"]
        searched = sorted(lr["lr"].unique())
        edge = [labels.get(r, r) for r in chosen.index if len(searched) > 1 and chosen[r] in (searched[0], searched[-1])]
        out.append("Learning rates (searched over " + ", ".join(f"{v:g}" for v in searched) + "): "
                   + ", ".join(f"{labels.get(r, r)} {chosen[r]:g}" if r in chosen else f"{labels.get(r, r)} none "
                               "(diverged at every rate)" for r in lr["rule"].unique()) + "."
                   + (f" At the edge of the searched range (a rate beyond it may do better): {', '.join(edge)}."
                      if edge else ""))
    out += ["", f"Target: the loss BP's frontier reaches with {head_compute:.3g} FLOPs, **{target:.3f}**.", "",
            "| rule | compute to reach the target / BP's | cheaper than BP at some target in range | fit L = a C^-b + c: b, c |",
            "|---|---|---|---|"]
    mult = frontiers[frontiers["kind"] == "multiplier"]
    fits = frontiers[frontiers["kind"] == "fit"].set_index("rule")
    for rule in frontiers["rule"].unique():
        h = head[head["rule"] == rule]
        if not len(h):
            continue
        h = h.iloc[0]
        if not h["reaches"]:
            at = f"never reaches it (in {1 - h['never_share']:.0%} of replicates it does)" \
                if np.isfinite(h["never_share"]) and h["never_share"] < 1 else "never reaches it"
        else:
            at = _x(h["multiplier"]) + _span(h["multiplier_lo"], h["multiplier_hi"])
        m = mult[(mult["rule"] == rule) & ~mult["headline"].fillna(False)]
        cheaper = m[m["multiplier"] < 1]
        if rule == REFERENCE:
            verdict = "(the reference)"
        elif len(cheaper):
            robust = cheaper[cheaper["multiplier_hi"] < 1]
            verdict = (f"yes, at {len(cheaper)} of {len(m)} targets (from loss {cheaper['target_loss'].max():.3f}; "
                       f"{len(robust)} with the whole interval below 1)")
        else:
            reached = m[m["reaches"].fillna(False)]
            verdict = (f"no: at least {reached['multiplier'].min():.3g}x at every target it reaches "
                       f"({len(reached)} of {len(m)})") if len(reached) else f"no: it reaches none of the {len(m)} targets"
        f = fits.loc[rule] if rule in fits.index else None
        fit = "n/a" if f is None or not np.isfinite(f["b"]) else (
            f"b {f['b']:.3f}{_span(f['b_lo'], f['b_hi'], lambda v: f'{v:.3f}')}, "
            f"c {f['c']:.3f}{_span(f['c_lo'], f['c_hi'], lambda v: f'{v:.3f}')}")
        out.append(f"| {labels.get(rule, rule)} | {at} | {verdict} | {fit} |")
    out += ["", *depth_lines(frontiers, labels)]
    return "\n".join(out) + "\n"


def depth_lines(frontiers: pd.DataFrame, labels: dict) -> list[str]:
    """Franceschi's (Backpropagation Free Transformers) depth claims, tested: the loss gap to BP at each depth, at one compute."""
    depth = frontiers[frontiers["kind"] == "depth"]
    layers = sorted(depth["layers"].dropna().unique())
    if len(layers) < 2:
        return ["Depth: the study has one depth; Franceschi's (Backpropagation Free Transformers) depth claims need two or more."]
    compute = float(depth["compute"].iloc[0])
    out = [f"Loss gap to BP at equal compute ({compute:.3g} FLOPs), by depth (positive: worse than BP):", "",
           "| rule | " + " | ".join(f"{d} layer{'s' if d != 1 else ''}" for d in layers) + " |", "|---|" + "---|" * len(layers)]
    gaps = {}
    for rule in depth["rule"].unique():
        if rule == REFERENCE:
            continue
        cells = []
        for d in layers:
            row = depth[(depth["rule"] == rule) & (depth["layers"] == d)].iloc[0]
            gaps[(rule, d)] = row
            cells.append(f"{row['gap_to_bp']:+.3f}" + _span(row["gap_lo"], row["gap_hi"], lambda v: f"{v:+.3f}"))
        out.append(f"| {labels.get(rule, rule)} | " + " | ".join(cells) + " |")
    out.append("")
    lo, hi = layers[0], layers[-1]
    spread = any(np.isfinite(g["gap_lo"]) and g["gap_lo"] != g["gap_hi"] for g in gaps.values())
    if ("kp", lo) in gaps:
        worst = max(abs(gaps[("kp", d)]["gap_to_bp"]) for d in layers)
        within = all(gaps[("kp", d)]["gap_lo"] <= 0 <= gaps[("kp", d)]["gap_hi"] for d in layers
                     if np.isfinite(gaps[("kp", d)]["gap_lo"]))
        out.append(f"- Franceschi (Backpropagation Free Transformers): KP tracks BP at every depth. Here its largest gap is {worst:.3f} nats"
                   + ("; one seed gives no spread to judge it by." if not spread else
                      " and every interval contains 0: it tracks BP." if within else
                      "; not every interval contains 0: it does not track BP at every depth."))
    if ("fa", lo) in gaps and any(d > 2 for d in layers) and any(d <= 2 for d in layers):
        shallow = max(d for d in layers if d <= 2)
        deep = max(layers)
        g2, gd = gaps[("fa", shallow)], gaps[("fa", deep)]
        grows = gd["gap_to_bp"] > g2["gap_to_bp"]
        separated = np.isfinite(gd["gap_lo"]) and np.isfinite(g2["gap_hi"]) and gd["gap_lo"] > g2["gap_hi"]
        out.append(f"- Franceschi (Backpropagation Free Transformers): FA fails beyond 2 layers. Its gap to BP goes from {g2['gap_to_bp']:+.3f} at {shallow} "
                   f"layers to {gd['gap_to_bp']:+.3f} at {deep}: "
                   + ("it degrades with depth (one seed: no spread to judge it by)." if grows and not spread else
                      "it degrades with depth, beyond the spread." if grows and separated else
                      "it degrades with depth, within the spread." if grows else "it does not degrade with depth here."))
    elif hi <= 2:
        out.append("- Franceschi's (Backpropagation Free Transformers) FA claim (beyond 2 layers) needs a depth above 2.")
    return out
