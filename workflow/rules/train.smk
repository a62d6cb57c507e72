# Measured training runs: one job per (config_id, rule, seed) of train.select, then one table each.


rule train:
    output:
        measured="results/runs/{config_id}/{rule}/seed{seed}/measured.parquet",
        steps="results/runs/{config_id}/{rule}/seed{seed}/steps.parquet",
        trace="results/runs/{config_id}/{rule}/seed{seed}/trace.parquet",
    log:
        "results/runs/{config_id}/{rule}/seed{seed}/train.log",
    wildcard_constraints:
        config_id="[0-9a-f]{10}",
        seed="[0-9]+",
    # A data-parallel job (train.parallel.nproc N) is one task whose launcher starts N ranks on its node, as
    # torchrun does: N x the threads (SLURM: cpus_per_task) and, on GPUs, N x the GPUs (docs/distributed.md).
    threads: TRAIN["resources"]["threads"] * TRAIN["parallel"]["nproc"]
    resources:
        # tasks and cpus_per_task only for a data-parallel job: set on every job, they made a SLURM group job of
        # two single-process jobs ask for 4 nodes (tests/cluster/test_slurm.py)
        **TRAIN_RESOURCES,
        # one unit of the `timed` resource, of which the workflow provides train.timed_at_once (default 2; 1: a
        # timed step shares no core, cache or memory bus with another training job; docs/measurement.md)
        timed=1,
    params:
        command=TRAININGCOST_WARM,
        args=lambda w: TRAIN_ARGS[(w.config_id, w.rule, int(w.seed))],
    conda:
        "../../environment.yml"
    shell:
        # A process that dies (a crash, a kill) leaves its run recorded as failed, so the sweep's
        # tables and summary name it; a run that ends on its own (ok, diverged, oom, error) exits 0.
        "{params.command} {params.args} > {log} 2>&1"
        " || {params.command} {params.args} --record-failure $? >> {log} 2>&1"


rule calibrate:
    input:
        "results/tables/trace.parquet",
    output:
        report(
            f"results/device/{TRAIN['device']}-{TRAIN['dtype']}.json",
            caption="../report/calibration.rst",
            category="Device",
        ),
    log:
        f"results/device/{TRAIN['device']}-{TRAIN['dtype']}.log",
    threads: TRAIN["resources"]["threads"]
    resources:
        mem_mb=TRAIN["resources"]["mem_mb"],
        runtime=TRAIN["resources"]["runtime"],
        gpu=TRAIN["resources"]["gpu"],
    params:
        command=TRAININGCOST,
        device=TRAIN["device"],
        dtype=TRAIN["dtype"],
        tolerance=TRAIN["calibration"]["tolerance"],
        time_cap=TRAIN["calibration"]["time_cap"],
        probe="--probe" if TRAIN["calibration"]["probe"] else "",
        # training processes beside it (train.calibration.neighbours, default 0: alone), on a CPU only, never more
        # than this machine's other cores (timed jobs on other nodes share nothing with it)
        neighbours=min(TRAIN["calibration"]["neighbours"], (os.cpu_count() or 1) - 1) if TRAIN["device"] in ("cpu", "auto") else 0,
    conda:
        "../../environment.yml"
    shell:
        # After the training jobs (it reads their traces); beside --neighbours training processes if asked.
        "{params.command} calibrate --trace {input:q} --device {params.device:q} --dtype {params.dtype:q} "
        "--neighbours {params.neighbours} "
        # A busy machine keeps the unconverged rounds, marked untrusted: the findings say "no trusted calibration".
        "--tolerance {params.tolerance} --time-cap {params.time_cap} {params.probe} --keep-untrusted --threads {threads} "
        "--out {output:q} "
        "> {log:q} 2>&1"


rule measured:
    input:
        measured=[f"{job.run_dir}/measured.parquet" for job in TRAIN_JOBS],
        steps=[f"{job.run_dir}/steps.parquet" for job in TRAIN_JOBS],
        traces=[f"{job.run_dir}/trace.parquet" for job in TRAIN_JOBS],
        # a line is added when a run's files went missing after gathering (repair_results in common.smk); an input
        # only once it exists, so that a parse, and a dry run above all, writes nothing (issue 66, N4)
        retries=[RETRIES] if os.path.exists(RETRIES) else [],
    output:
        measured="results/tables/measured.parquet",
        steps="results/tables/steps.parquet",
        trace="results/tables/trace.parquet",
    log:
        "results/logs/measured.log",
    localrule: True
    run:
        step_measured(input, output, log)
