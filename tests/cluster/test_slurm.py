"""The tiny sweep through Snakemake's SLURM executor plugin on a real single-node SLURM cluster.

`slurm_local.sh start` installs slurm-wlm and munge when they are missing and starts munged, slurmctld
and slurmd with two fake GPUs; the test stops them again, also when it fails. The sweep runs with the
project's `profiles/slurm` plus the overrides a test cluster needs (partition, small memory, fast status
checks), and its results must equal a local run of the same config.
"""

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml


REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests/cluster/slurm_local.sh"
LOCK = Path("/tmp/trainingcost-slurm.lock")
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TINY = {
    "sweep": {"models": [{"name": "bytes", "arch": "encoder-decoder", "layers": 1, "d_model": 16, "heads": 2, "d_ff": 32,
                          "vocab": 256, "seq_len": 8, "batch": 2}]},
    "memory": {"dtypes": ["fp32"], "optimizers": ["sgd"]},
    # Three rules (an odd number: one group of two jobs and one of one) keep the test short; the analytic tables
    # still cover every rule.
    # What each training job and the calibration ask for comes from the config (profiles/slurm sets no resources).
    "train": {"select": ["bytes"], "rules": ["bp", "mempepita", "dfa"], "steps": 5, "eval_batches": 1, "resources": {"threads": 1, "mem_mb": 600, "runtime": 10, "gpu": 1}},
}
# What a test cluster needs on top of profiles/slurm: its partition, memory that fits the node, fast status checks.
SLURM_OVERRIDES = [
    "--default-resources", "slurm_partition=debug", "mem_mb=400", "runtime=10",
    "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2", "--jobs", "4",
]

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("apt-get"), reason="needs root and apt-get to install SLURM"),
]


def slurm_env() -> dict:
    """This process's environment with the machine's SLURM configuration (conftest blanks it for every other test)."""
    env = {key: value for key, value in os.environ.items() if key not in ("SLURM_CONF", "MACHINE_SLURM_CONF")}
    machine = os.environ.get("MACHINE_SLURM_CONF")
    return {**env, "SLURM_CONF": machine} if machine else env


def run_sweep(workdir: Path, *extra: str, config: dict = TINY) -> subprocess.CompletedProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    command = [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile",
               str(workdir / "config.yaml"), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=slurm_env())


@pytest.fixture(scope="module")
def cluster():
    """The machine's one test cluster, held under a lock for the module's tests: a second test process on the
    machine (another pytest worker, another run) waits for it instead of starting or stopping it under them
    (`make test` keeps this file in one worker: --dist loadfile)."""
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=600,
                                 env=slurm_env())
        try:
            assert started.returncode == 0, started.stdout + started.stderr
            yield
        finally:
            subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, text=True, timeout=120, env=slurm_env())


def test_tiny_sweep_through_slurm_equals_the_local_run(cluster, tmp_path):
    # the local run makes only the tables compared below (no calibration, findings, figures or report)
    local = run_sweep(tmp_path / "local", "--cores", "2", "--workflow-profile", "none", "results/tables/analytic.parquet",
                      "results/tables/memory.parquet", "results/tables/measured.parquet", "results/tables/steps.parquet")
    assert local.returncode == 0, local.stderr[-3000:]
    before = set(job_records())
    # the remote run makes the same tables and the summary (the figures and the report: tests/test_workflow.py)
    remote = run_sweep(tmp_path / "slurm", "--profile", str(REPO / "profiles/slurm"), *SLURM_OVERRIDES,
                       "results/tables/analytic.parquet", "results/tables/memory.parquet",
                       "results/tables/measured.parquet", "results/tables/steps.parquet", "results/summary.md")
    assert remote.returncode == 0, remote.stderr[-3000:]

    # Each training job and the calibration went through sbatch, asking for the config's one GPU (no groups: the
    # plugin runs a group's members one after another); the cheap rules ran locally.
    jobs = [job for key, job in job_records().items() if key not in before]
    train = [job for job in jobs if job.get("Comment", "").startswith("rule_train_")]
    assert len(train) == len(TINY["train"]["rules"]), jobs
    assert all(job["TresPerJob"] == "gres:gpu:1" and job["JobState"] == "COMPLETED" and job["NumCPUs"] == "1"
               for job in train), train
    calibrate = [job for job in jobs if job.get("Comment", "").startswith("rule_calibrate")]
    assert len(calibrate) == 1 and calibrate[0]["TresPerJob"] == "gres:gpu:1", jobs
    assert not [job for job in jobs if any(rule in job.get("Comment", "") for rule in ("analytic", "measured", "figures"))]

    # The same results: byte-identical analytic tables, the same measured FLOPs with status ok, the same losses.
    for table in ("results/configs.parquet", "results/tables/analytic.parquet", "results/tables/memory.parquet"):
        assert (tmp_path / "local" / table).read_bytes() == (tmp_path / "slurm" / table).read_bytes(), table
    keys = ["config_id", "rule", "seed", "layer", "phase"]
    local_measured, remote_measured = (pd.read_parquet(tmp_path / where / "results/tables/measured.parquet")
                                       .sort_values(keys).reset_index(drop=True) for where in ("local", "slurm"))
    assert set(remote_measured.status) == {"ok"} and set(remote_measured.rule) == set(local_measured.rule)
    pd.testing.assert_frame_equal(local_measured[keys + ["flops"]], remote_measured[keys + ["flops"]])
    local_steps, remote_steps = (pd.read_parquet(tmp_path / where / "results/tables/steps.parquet").sort_values(["rule", "step"])
                                 for where in ("local", "slurm"))
    assert list(local_steps.loss) == list(remote_steps.loss)
    assert (tmp_path / "slurm/results/summary.md").exists()


# A data-parallel sweep (train.parallel; docs/distributed.md): each training job is one SLURM task whose launcher
# starts two ranks, so it asks for 2 x threads CPUs and, with the config's one GPU per rank, 2 GPUs and twice the
# memory: what the workflow works out, which no profile setting overrides.
TINY_DP = {
    "sweep": {"models": [{"name": "dp", "arch": "decoder", "layers": 1, "d_model": 16, "heads": 2, "d_ff": 32,
                          "vocab": 256, "seq_len": 8, "batch": 2}]},
    "memory": {"dtypes": ["fp32"], "optimizers": ["sgd"]},
    # BP (DDP's bucket hooks) and PEPITA (its update bypasses autograd: an explicit all-reduce)
    "train": {"select": ["dp"], "rules": ["bp", "pepita"], "steps": 4, "eval_batches": 1,
              "parallel": {"nproc": 2, "parallel": "ddp"},
              "resources": {"threads": 1, "mem_mb": 600, "runtime": 10, "gpu": 1}},  # per rank: 2 GPUs, 1,200 MB a job
}
SLURM_DP_OVERRIDES = SLURM_OVERRIDES


def test_data_parallel_sweep_through_slurm(cluster, tmp_path):
    """Two ranks per training job through sbatch: one task, 2 CPUs, 2 GPUs each; the gathered tables carry the
    communication, its bytes equal to the model's."""
    before = set(job_records())
    remote = run_sweep(tmp_path / "slurm", "--profile", str(REPO / "profiles/slurm"), *SLURM_DP_OVERRIDES,
                       "results/tables/measured.parquet", "results/tables/comm.parquet", config=TINY_DP)
    assert remote.returncode == 0, remote.stderr[-3000:]
    jobs = [job for key, job in job_records().items() if key not in before]
    train = [job for job in jobs if job.get("Comment", "").startswith("rule_train_")]
    assert len(train) == 2, jobs
    assert all(job["JobState"] == "COMPLETED" and job["NumTasks"] == "1" and job["NumCPUs"] == "2"
               and job["TresPerJob"] == "gres:gpu:2" for job in train), train
    measured = pd.read_parquet(tmp_path / "slurm/results/tables/measured.parquet")
    assert set(measured.rule) == {"bp", "pepita"} and set(measured.status) == {"ok"}
    assert (measured.nproc == 2).all() and (measured.comm_bytes_per_step > 0).all()
    comm = pd.read_parquet(tmp_path / "slurm/results/tables/comm.parquet")
    assert set(comm.rule) == {"bp", "pepita"} and comm.bytes_exact.all()


def job_records() -> dict:
    """Every job SLURM still remembers (MinJobAge keeps finished ones for 10 minutes), by job id and array task."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, env=slurm_env()).stdout
    records = {}
    for line in out.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "JobId" in fields:
            records[(fields["JobId"], fields.get("ArrayTaskId", ""))] = fields
    return records
