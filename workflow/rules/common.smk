# Validation first: one readable line and exit status 1 for any config mistake,
# before a job runs. The package's checks print the line; snakemake.utils.validate
# then applies the same schema and fills in its defaults.
import os
import shlex
import sys

from snakemake.utils import validate

from trainingcost.config import ConfigError, validate_config
from trainingcost.findings import FIGURES as FIGURE_FILES
from trainingcost.findings import check_figures, figure_names
from trainingcost.pipeline import config_hash, train_command, train_jobs

try:
    FILLED = validate_config(config)  # the config with every default filled in
    TRAIN_JOBS = train_jobs(FILLED)
    FIGURE_NAMES = figure_names(FILLED)
    check_figures(FILLED)
except ConfigError as error:
    sys.stderr.write(f"config error: {error}\n")
    sys.exit(1)

validate(config, "../schemas/config.schema.yaml")

# The outputs that exist only when there are runs to measure.
FINDINGS = (
    [
        "results/tables/measured.parquet",
        "results/tables/steps.parquet",
        "results/tables/comparison.parquet",
        "results/tables/rule_ratios.parquet",
        "results/summary.md",
    ]
    + [f"results/figures/{FIGURE_FILES[n]}.{ext}" for n in FIGURE_NAMES for ext in ("png", "pdf")]
    if TRAIN_JOBS
    else []
)

# The config's hash reaches every job's tables as metadata through the environment, not as a job
# parameter: editing, say, the figures section must not make the training jobs run again.
os.environ["TRAININGCOST_CONFIG_HASH"] = config_hash(FILLED)

# The package's command line, run by the interpreter that runs this workflow (no PATH needed).
TRAININGCOST = f"{shlex.quote(sys.executable)} -m trainingcost"

# The measured runs and each one's command-line arguments, keyed by the train rule's wildcards.
TRAIN = FILLED["train"]
# Every argument is shell-quoted: nothing from the config is ever read by the shell as code.
TRAIN_ARGS = {
    (job.config_id, job.rule, job.seed): shlex.join(train_command(job, FILLED))
    for job in TRAIN_JOBS
}
