# trainingcost workflow: `snakemake --cores 2` runs the default sweep of config/config.yaml;
# `--configfile my.yaml` runs my.yaml instead (it replaces the default, it does not extend it).


import os

if not config:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/configs.smk"
include: "workflow/rules/analytic.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/findings.smk"


rule all:
    default_target: True
    input:
        "results/configs.parquet",
        "results/tables/analytic.parquet",
        "results/tables/memory.parquet",
        "results/tables/measured.parquet",
        "results/tables/steps.parquet",
        "results/tables/comparison.parquet",
        "results/tables/rule_ratios.parquet",
        "results/summary.md",
        expand(
            "results/figures/{file}.{ext}",
            file=[FIGURE_FILES[n] for n in FIGURE_NAMES],
            ext=["png", "pdf"],
        ),


onsuccess:
    if os.path.exists("results/summary.md"):
        print(open("results/summary.md").read())
    if "energy" not in FIGURE_NAMES:
        print(
            "Energy figure skipped: figures.energy is false (CPU runs measure no energy; set it for NVIDIA GPU runs)."
        )
