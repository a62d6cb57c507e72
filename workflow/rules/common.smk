# Validation first: one readable line and exit status 1 for any config mistake, before a job runs.
# The package validates the config once (the schema with the catalogue's rules and cost models, every
# configuration, the training jobs, the figures' names); snakemake.utils.validate then applies the same
# schema, written out with the catalogue's enums, and fills in its defaults.
import os
import shlex
import sys

from snakemake.utils import validate

from trainingcost.config import ConfigError
from trainingcost.pipeline import FIGURES as FIGURE_FILES
from trainingcost.pipeline import RETRIES, as_check_reads, config_hash, figure_names, load, repair_results, train_command, train_jobs, write_schema
from trainingcost.pipeline import step_comm, step_comparison, step_measured, step_plan, step_scaling_table, step_strong_scaling, step_summary

try:
    # The config files read as `trainingcost check` reads them (issue 66, D12 and D20): a key given twice refused,
    # numbers as written (1e-3 is a number, not YAML 1.1's string); then --config's overrides on top, as Snakemake
    # applies them.
    FILLED = load(as_check_reads(config, workflow.configfiles, dict(workflow.config_settings.config)))
    TRAIN_JOBS = train_jobs(FILLED)
    FIGURE_NAMES = figure_names(FILLED)
except ConfigError as error:
    sys.stderr.write(f"config error: {error}\n")
    sys.exit(1)

validate(FILLED, write_schema(".snakemake/trainingcost/config.schema.yaml"))
config.update(FILLED)  # the report's captions read the config with its defaults, as the jobs do

# The config's hash reaches every job's tables as metadata through the environment, not as a job
# parameter: editing, say, the figures section must not make the training jobs run again.
os.environ["TRAININGCOST_CONFIG_HASH"] = config_hash(FILLED)


# Training jobs die with the Snakemake process that runs them (src/trainingcost/lifeline.py): a sweep killed with
# SIGKILL leaves no trainer behind to race its rerun in the same run folder. Set at every parse, so that a job that
# Snakemake runs in a process of its own (a cluster job) watches that process, not the one that submitted it.
os.environ["TRAININGCOST_WORKFLOW_PID"] = str(os.getpid())


envvars:
    "TRAININGCOST_CONFIG_HASH",
    "TRAININGCOST_WORKFLOW_PID",

# The package's command line, run by the interpreter that runs this workflow (no PATH needed).
TRAININGCOST = f"{shlex.quote(sys.executable)} -m trainingcost"
# A training job's command: the same command line, run by a fork of a warm process that has imported torch and the
# package already (src/trainingcost/warm.py: one per Snakemake process; TRAININGCOST_WARM=0 turns it off).
TRAININGCOST_WARM = f"{shlex.quote(sys.executable)} -m trainingcost.warm"

# The measured runs and each one's command-line arguments, keyed by the train rule's wildcards.
TRAIN = FILLED["train"]
_NPROC = TRAIN["parallel"]["nproc"]
TRAIN_RESOURCES = dict(
    mem_mb=TRAIN["resources"]["mem_mb"] * _NPROC,
    runtime=TRAIN["resources"]["runtime"],
    gpu=TRAIN["resources"]["gpu"] * _NPROC,
    # a data-parallel job is one task whose launcher starts its ranks on one node (docs/distributed.md);
    # tasks_per_gpu 0: with GPUs the SLURM plugin otherwise asks --ntasks-per-gpu=tasks, N tasks of N x threads
    # CPUs each, which no node of N x threads CPUs holds (tests/cluster/test_slurm.py)
    **(dict(tasks=1, tasks_per_gpu=0, cpus_per_task=TRAIN["resources"]["threads"] * _NPROC) if _NPROC > 1 else {}),
)
# Timed training jobs at once: train.timed_at_once (the config, never the command line: a job that Snakemake runs
# in a process of its own parses this file again without the command line's --resources, and a value that differed
# there changed the calibrate job's parameters, so that job ran a second time beside its consumers). The `timed`
# resource comes from it unless --resources or a profile sets one (profiles/slurm: no limit, separate GPUs).
if "timed" not in workflow.global_resources:
    workflow.register_resource("timed", TRAIN["timed_at_once"])
TIMED_AT_ONCE = max(1, min(TRAIN["timed_at_once"], (os.cpu_count() or 1) // max(TRAIN["resources"]["threads"] * _NPROC, 1)))
# Broken or deleted results are redone by a rerun (docs/failures.md, "Retrying"): a parquet table cut short is removed
# (not in a dry run, -n), and the gathered tables are marked out of date while a training run's files are missing.
import re as _re

_DRY_RUN = any(_re.fullmatch(r"--dry-?run|--dry_run|-[A-Za-z]*n[A-Za-z]*", arg) for arg in sys.argv[1:])
for _line in repair_results(TRAIN_JOBS, remove=not _DRY_RUN):
    print(_line, file=sys.stderr)

# Every argument is shell-quoted: nothing from the config is ever read by the shell as code.
TRAIN_ARGS = {
    (job.config_id, job.rule, job.seed): shlex.join(train_command(job, FILLED))
    for job in TRAIN_JOBS
}

# The scaling study (the `scaling` section), or None.
from trainingcost.findings.scaling import SCALING_FIGURES as _SCALING_FIGURES
from trainingcost.pipeline import scaling_study

SCALING = scaling_study(FILLED)
SCALING_FIGURE_FILES = _SCALING_FIGURES
