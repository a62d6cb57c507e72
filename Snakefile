# trainingcost workflow: `snakemake --cores 2` runs the default sweep of config/config.yaml;
# `--configfile my.yaml` runs my.yaml instead (it replaces the default, it does not extend it);
# `--config key=value` changes one value of whichever file runs (the default one without --configfile).


import os

if not workflow.configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/configs.smk"
include: "workflow/rules/analytic.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/findings.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/scaling.smk"


rule all:
    default_target: True
    input:
        rules.configs.output,
        rules.analytic.output,
        rules.plan.output,
        # How many GPUs, when the plan section has strong_scaling.
        ([rules.plan_scaling.output] if "strong_scaling" in FILLED["plan"] else []),
        # Measured runs and their findings, when train.select names any configuration.
        (
            [
                rules.measured.output,
                rules.comparison.output,
                rules.summary.output,
                rules.figures.output,
            ]
            if TRAIN_JOBS
            else []
        ),
        # A data-parallel sweep's communication findings (train.parallel.nproc > 1).
        ([rules.comm.output] if TRAIN_JOBS and _NPROC > 1 else []),
        # The scaling study, when the config has a scaling section.
        ([rules.frontiers.output, rules.scaling_findings.output] if SCALING else []),


onsuccess:
    if TRAIN_JOBS and os.path.exists("results/summary.md"):
        print(open("results/summary.md").read())
    elif SCALING and os.path.exists("results/scaling.md"):
        print(open("results/scaling.md").read())
    if TRAIN_JOBS and os.path.exists("results/tables/measured.parquet"):
        from trainingcost.findings.summary import flagged_runs_warning

        warning = flagged_runs_warning("results/tables/measured.parquet")
        if warning:
            print(warning)
    if TRAIN_JOBS and "energy" not in FIGURE_NAMES:
        print(
            "Energy figure skipped: figures.energy is false (CPU runs measure no energy; set it for NVIDIA GPU runs)."
        )
