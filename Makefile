# Two entry points for a fresh machine: `make run` and `make test`.
# TORCH pins a CPU build; with a GPU, pre-install your own torch build in .venv
# (or run `make TORCH=torch run`) before the first `make`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
CORES ?= 2
BIN := $(VENV)/bin
# The full install's mark: a light install in .venv (README, "Try it") is completed by the first make target.
STAMP := $(VENV)/.installed-dev

.PHONY: install run scaling dry-run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

install: $(STAMP)

run: install
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --cores $(CORES) --report results/report.html

# The scaling study (docs/learning_rules.md, "Cost to a quality"): about 25 minutes on a quiet 2-core CPU.
scaling: install
	$(BIN)/snakemake --cores $(CORES) --configfile config/scaling.yaml

dry-run: install
	$(BIN)/snakemake -n

test: install
	$(BIN)/pytest -q -n 2 --dist loadfile

bench: install
	$(BIN)/python benchmarks/bench_install.py
	$(BIN)/python benchmarks/bench_install.py --extras web
	$(BIN)/python benchmarks/bench_page.py
	$(BIN)/python benchmarks/bench_cli.py
	$(BIN)/python benchmarks/bench_analytic.py
	$(BIN)/python benchmarks/bench_predictor.py
	$(BIN)/python benchmarks/bench_tracing.py
	$(BIN)/python benchmarks/bench_plan_accuracy.py
	$(BIN)/python benchmarks/bench_plan_accuracy.py --csv benchmarks/published_runs_blackwell.csv --no-loso
	$(BIN)/python benchmarks/bench_plan_accuracy.py --csv benchmarks/published_runs_moe.csv --no-loso
	$(BIN)/python benchmarks/bench_plan_accuracy.py --csv benchmarks/published_runs_amd.csv --no-loso
	$(BIN)/python benchmarks/bench_plan_accuracy.py --csv benchmarks/published_runs_schedules.csv --no-loso
	$(BIN)/python benchmarks/bench_plan_accuracy.py --csv benchmarks/published_runs_offload.csv --no-loso
	$(BIN)/python benchmarks/bench_plan_memory.py
	$(BIN)/python benchmarks/bench_plan_intervals.py
	$(BIN)/python benchmarks/bench_collectives.py
	$(BIN)/python benchmarks/bench_layout_search.py
	$(BIN)/pytest -q tests/test_input_properties.py tests/test_properties.py --hypothesis-profile bench -p no:cacheprovider

clean:
	rm -rf results/configs.parquet results/tables results/runs results/scaling results/device results/logs results/figures results/summary.md results/scaling.md results/report.html .snakemake
