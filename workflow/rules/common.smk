# Validation first: one readable line and exit status 1 for any config mistake,
# before a job runs. The package's checks print the line; snakemake.utils.validate
# then applies the same schema and fills in its defaults.
import sys

from snakemake.utils import validate

from trainingcost.config import ConfigError, validate_config

try:
    validate_config(config)
except ConfigError as error:
    sys.stderr.write(f"config error: {error}\n")
    sys.exit(1)

validate(config, "../schemas/config.schema.yaml")
