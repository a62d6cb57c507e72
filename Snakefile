# trainingcost workflow: `snakemake --cores 2` runs the default sweep of config/config.yaml;
# `--configfile my.yaml` runs my.yaml instead (it replaces the default, it does not extend it).


if not config:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/configs.smk"
include: "workflow/rules/analytic.smk"
include: "workflow/rules/train.smk"


rule all:
    default_target: True
    input:
        "results/configs.parquet",
        "results/tables/analytic.parquet",
        "results/tables/memory.parquet",
        "results/tables/measured.parquet",
        "results/tables/steps.parquet",
