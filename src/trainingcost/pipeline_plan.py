"""The workflow's plan steps (the config's ``plan`` section): its PlanSpec per configuration, the checks before
any job runs, the plan table with its memory curves and figures, and the strong-scaling layout search.
:mod:`.pipeline` re-exports them beside the workflow's other steps; Snakemake rules call them through it."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd

from .analytic.plan import Efficiency, PlanSpec, memory_curve, plan_table
from .config import ConfigError
from .config.frameworks import cluster, framework
from .io import write_parquet
from .planning import DEFAULT_MFU, PREDICTED_SOURCE, system_fields, token_budget


def section_spec(section: dict, cfg, gpu, where: str = "plan", count: bool = True) -> PlanSpec:
    """A validated config's ``plan`` section as a PlanSpec for one configuration. ``count=False`` (the check before
    any job runs): Chinchilla's budget is not counted (one token), so a sweep of thousands is checked in moments."""
    from .analytic.plan import model_facts

    tokens = section["tokens"]
    if isinstance(tokens, str) and tokens != "chinchilla" or not isinstance(tokens, str) and not tokens > 0:
        raise ConfigError(f"{where}.tokens: {tokens!r} is not allowed (allowed: a positive number of tokens, or chinchilla)")
    micro = section["micro_batch"]
    if isinstance(micro, str) and micro != "max" or not isinstance(micro, str) and not micro >= 1:
        raise ConfigError(f"{where}.micro_batch: {micro!r} is not allowed (allowed: a positive integer, or max)")
    chinchilla = tokens == "chinchilla"
    parameters = (model_facts(cfg, ["bp"], section["optimizer"]).parameters if count else 1) if chinchilla else 0
    tokens, source = token_budget(None if chinchilla else tokens, None, None, chinchilla, parameters, f"{where}.")
    given = [k for k in ("mfu", "hfu", "tokens_per_s") if section["efficiency"].get(k) is not None]
    if len(given) > 1:
        raise ConfigError(f"{where}.efficiency: give at most one of mfu, hfu, tokens_per_s (got {', '.join(given)}; "
                          "none: the step time predicted)")
    kind = given[0] if given else "predicted"
    defaults = PlanSpec(tokens=1, gpus=1, efficiency=Efficiency("mfu", DEFAULT_MFU, ""))
    measured = section["efficiency"].get("measured_rule", "bp")
    if section.get("power_limit") is not None and kind != "predicted":
        raise ConfigError(f"{where}.power_limit: slows the predicted step (the step-time model); with "
                          f"{where}.efficiency.{kind} the step's rate is given and holds its own power, so drop one")
    if section.get("compile") is not None and kind != "predicted":
        raise ConfigError(f"{where}.compile: prices the predicted step's elementwise kernels; with "
                          f"{where}.efficiency.{kind} the step's rate is given, so drop one")
    system = system_fields(section.get("framework"), section.get("cluster"), None, None, gpu,
                           {"framework": f"{where}.framework", "attention": f"{where}.attention",
                            "compile": f"{where}.compile", "recompute_tail": f"{where}.recompute_tail"},
                           section.get("attention"), section.get("compile"), section.get("recompute_tail"))
    fw = framework(section.get("framework"), f"{where}.framework")
    return PlanSpec(
        tokens=tokens, tokens_source=source, gpus=section["gpus"], tp=section["tp"], pp=section["pp"], cp=section["cp"],
        replicate=section["replicate"], sharding=section.get("sharding") or fw.sharding, zero3_gather=section.get("zero3_gather") or fw.zero3_gather,
        **system, tp_overlap=fw.tp_overlap, dp_overlap=fw.dp_overlap, precision=section["precision"],
        checkpointing=section["checkpointing"],
        checkpoint_every=section["checkpoint_every"], optimizer=section["optimizer"],
        global_batch=section.get("global_batch"),
        micro_batch=None if section["micro_batch"] == "max" else section["micro_batch"],
        efficiency=(Efficiency(kind, section["efficiency"][kind], f"{where}.efficiency.{kind}", rule=measured)
                    if kind != "predicted" else Efficiency("predicted", 1.0, PREDICTED_SOURCE)),
        power_utilisation=section["power_utilisation"],
        power_source=f"TDP x {section['power_utilisation']:g} ({where}.power_utilisation)",
        pue=section["pue"], pue_source=f"{where}.pue" if section["pue"] != defaults.pue else defaults.pue_source,
        carbon_intensity=section["carbon_intensity"],
        carbon_source=(f"{where}.carbon_intensity" if section["carbon_intensity"] != defaults.carbon_intensity
                       else defaults.carbon_source),
        price=section.get("price"), price_source=f"{where}.price" if section.get("price") is not None else "not given",
    )


def plan_configs(config: dict) -> list:
    """(name, ModelConfig) of the configurations the plan section selects (every sweep configuration if none)."""
    from .config import enumerate_sweep, select_sweep

    section = config["plan"]
    if section["select"]:
        return select_sweep(config["sweep"], section["select"], "plan.select")
    return enumerate_sweep(config["sweep"])


def check_plan(config: dict) -> None:
    """The plan section of a validated config, before any job runs: its values, the GPU, and the degrees and batch
    of every selected configuration (one line naming the field). Whether each plan fits is the plan job's check."""
    from .analytic.plan import check_run_length, check_spec

    gpu = plan_gpu(config)
    section = config["plan"]
    figure, names = section["figure"], set()
    for name, cfg in plan_configs(config):
        names |= {name, cfg.config_id}
        try:
            spec = section_spec(section, cfg, gpu, count=False)
            check_spec(spec, cfg, gpu)
            if section["tokens"] != "chinchilla":  # a run of at least one step (Chinchilla's budget is counted later)
                check_run_length(spec, cfg)
            if spec.efficiency.kind == "tokens_per_s":  # the rate against the device's peak, as the command line
                from .analytic.plan import plan_table  # checks it, not after every other job (issue 66, N12)

                plan_table(cfg, spec, gpu, [spec.efficiency.rule], ["executed"])
        except ConfigError as exc:
            text = str(exc)
            raise ConfigError(text if text.startswith("plan") else f"plan: configuration {name or cfg.config_id!r}: "
                              f"{text}") from None
    if figure and figure not in names:
        raise ConfigError(f"plan.figure: {figure!r} is not a planned configuration (plan.select's entries or their "
                          "config_ids)")


def check_strong_scaling(config: dict) -> None:
    """plan.strong_scaling before any job runs: its configuration, and a price where the objective is cost."""
    scaling = config["plan"].get("strong_scaling")
    if scaling is None:
        return
    if scaling["objective"] == "cost" and config["plan"].get("price") is None:
        raise ConfigError("plan.strong_scaling.objective: cost needs plan.price (money per GPU-hour)")
    R, cp = config["plan"].get("replicate", 1), config["plan"].get("cp", 1)
    if scaling.get("search_replicate") and R > 1:
        raise ConfigError(f"plan.strong_scaling.search_replicate: searches the replica groups; plan.replicate "
                          f"{R} would fix them (allowed: plan.replicate 1, or search_replicate false)")
    for n in scaling["gpus"]:  # the most replicas any layout has at n GPUs: tp = pp = 1, dp = n / cp
        if R > 1 and n % cp == 0 and (n // cp % R or n // cp // R * cp < 2):
            raise ConfigError(f"plan.strong_scaling.gpus: {n} GPUs do not split into plan.replicate {R} replica "
                              f"groups of two ranks or more at any layout (allowed: counts whose {'GPUs / cp' if cp > 1 else 'GPUs'} "
                              f"are a multiple of {R}, at least {R * (2 if cp == 1 else 1) * cp} GPUs, or "
                              "plan.replicate 1)")
    figure_config(config)


def figure_config(config: dict) -> tuple:
    """(name, ModelConfig) of the plan's figure configuration: plan.figure, else the first planned one."""
    figure = config["plan"]["figure"]
    chosen = plan_configs(config)
    for name, cfg in chosen:
        if not figure or figure in (name, cfg.config_id):
            return name, cfg
    raise ConfigError(f"plan.figure: {figure!r} is not a planned configuration (plan.select's entries or their "
                      "config_ids)")


def build_strong_scaling(config: dict):
    """``plan --gpus LIST --layout search`` for the plan's figure configuration (plan.strong_scaling): every layout
    field searched per rule and GPU count, with the plan section's device, tokens, batch, precision and price; the
    step time predicted (the search ranks layouts by it, so plan.efficiency does not apply), under the executed
    cost model (the work the code runs; else plan.cost_models' first). A
    :class:`trainingcost.plan_search.SearchPlan`."""
    import argparse

    from .plan_search import AUTO_FIELDS, run

    section = config["plan"]
    scaling = section["strong_scaling"]
    gpu = plan_gpu(config)
    name, cfg = figure_config(config)
    base = dataclasses.replace(section_spec(section, cfg, gpu),
                               efficiency=Efficiency("predicted", 1.0, PREDICTED_SOURCE))
    args = argparse.Namespace(layout="search", gpus=list(scaling["gpus"]), objective=scaling["objective"],
                              price=section.get("price"), tp_across_nodes=False,
                              # as given (--layout search keeps it, SEARCH_ALL), or searched (--replicate auto)
                              replicate="auto" if scaling["search_replicate"] else section["replicate"],
                              **{attr: "auto" for name, attr in AUTO_FIELDS.items() if name != "replicate"})

    def spec_of(a) -> PlanSpec:
        return dataclasses.replace(base, gpus=a.gpus, tp=a.tp, pp=a.pp, interleave=a.interleave, ep=a.ep,
                                   micro_batch=a.micro_batch, checkpointing=a.checkpointing,
                                   sharding=a.sharding or base.sharding, sequence_parallel=a.sequence_parallel)

    try:
        models = ["executed"] if "executed" in section["cost_models"] else section["cost_models"][:1]
        result = run(args, cfg, gpu, section["rules"], models, spec_of)
    except ConfigError as exc:
        raise ConfigError(f"plan.strong_scaling: configuration {name or cfg.config_id!r}: {exc}") from None
    result.table.insert(0, "name", name)
    return result


def write_strong_scaling(config: dict, table_out, layouts_out, figure_out) -> None:
    """results/tables/plan_scaling.parquet (each rule's best layout per GPU count, the plan's columns),
    plan_layouts.parquet (each rule's five best layouts per count) and the strong-scaling figure."""
    from .findings import figures as F
    from .findings.plan_figures import strong_scaling

    result = build_strong_scaling(config)
    best = {rule: str(count) for rule, count in result.best_count.items()}
    write_parquet(result.table, table_out, {"objective": result.objective, "best_count": json.dumps(best)})
    write_parquet(result.layouts, layouts_out)
    F.style()
    first = result.table.iloc[0]
    F.save(strong_scaling(result.table, f"{first['name'] or first['config_id']}: {first['tokens']:.3g} tokens on "
                                        f"{first['gpu']}, each rule at its best layout per GPU count"), figure_out)


def plan_gpu(config: dict):
    from .config.hardware import device, with_user_devices

    table = with_user_devices(config.get("hardware") or None)
    section = config["plan"]
    if section.get("framework") is not None:
        framework(section["framework"], "plan.framework")
    name = section.get("gpu")
    if name is None:
        name = cluster(section["cluster"], "plan.cluster").gpu if section.get("cluster") is not None else "a100-80gb"
    try:
        gpu = device(name, table)  # the catalogue's name, or another spelling of it or of an alias
    except ConfigError as err:
        raise ConfigError(f"plan.{err}") from None
    if section.get("power_limit") is not None:
        from .analytic.steptime.device import power_limited

        gpu = power_limited(gpu, section["power_limit"], "plan.power_limit")
    return gpu


def build_plan(config: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The plan table of every selected configuration and the memory-against-micro-batch curves of the figure's."""
    section = config["plan"]
    gpu = plan_gpu(config)
    rules, models = section["rules"], section["cost_models"]
    frames, curves = [], None
    chosen = plan_configs(config)
    figure = section["figure"]
    for name, cfg in chosen:
        spec = section_spec(section, cfg, gpu)
        try:
            frame = plan_table(cfg, spec, gpu, rules, models)
        except ConfigError as exc:
            raise ConfigError(f"plan: configuration {name or cfg.config_id!r}: {exc}") from None
        frames.append(frame.assign(name=name))
        if curves is None and (not figure or figure in (name, cfg.config_id)):
            curves = memory_curve(cfg, spec, gpu, rules, section["micro_batches"] or None).assign(name=name)
    if figure and curves is None:
        raise ConfigError(f"plan.figure: {figure!r} is not a planned configuration (plan.select's entries or their "
                          "config_ids)")
    plan = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(plan):
        plan = plan.assign(currency=section.get("currency", "USD"))  # the currency of the cost column
    return plan, curves if curves is not None else pd.DataFrame()


def write_plan(config: dict, table_out, curves_out, figure_outs: dict) -> None:
    """results/tables/plan.parquet, the memory curves, and the two figures (findings/figures.py)."""
    from .findings import figures as F
    from .findings.plan_figures import plan_cost, plan_memory

    plan, curves = build_plan(config)
    write_parquet(plan, table_out)
    write_parquet(curves, curves_out)
    F.style()
    F.save(plan_cost(plan), figure_outs["plan_cost"])
    F.save(plan_memory(curves), figure_outs["plan_memory"])
