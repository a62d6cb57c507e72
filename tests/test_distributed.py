"""Data-parallel runs (docs/distributed.md): N = 2 ranks give one process's parameters on the same global batch,
for every rule under ddp and every admitted rule under zero2 and fsdp; the meter sees every kind of collective;
refusals are one line. Each launch starts two CPU processes (gloo): a few seconds."""

import pytest
import torch

from trainingcost.analytic.comm import admitted, check_parallel, mechanism
from trainingcost.analytic.catalogue import rule_names
from trainingcost.config.errors import ConfigError
from trainingcost.config.model import canonical_model
from trainingcost.config.training import TrainSpec
from trainingcost.measure.distributed import exact_dtype, launch_each
from trainingcost.train import run as train_run

STEPS, WORLD, PER_RANK = 3, 2, 2
CASES = [(rule, "ddp") for rule in rule_names()] + [(rule, p) for p in ("zero2", "fsdp") for rule in rule_names()
                                                      if admitted(rule, p)]


def spec(batch: int, rule: str) -> TrainSpec:
    cfg = canonical_model(dict(arch="decoder", layers=2, d_model=16, heads=2, d_ff=32, vocab=256, seq_len=8,
                               batch=batch), "")
    return TrainSpec(cfg=cfg, task="lm", rule=rule, steps=STEPS)


def reference(rule: str, monkeypatch) -> dict:
    """One process, the global batch, float64: the optimizer's parameters and the model's buffers."""
    monkeypatch.setattr(train_run, "DTYPES", dict(train_run.DTYPES))
    exact_dtype()
    done = train_run.run_steps(spec(WORLD * PER_RANK, rule))
    assert done.status == "ok", done.message
    state = {f"param.{i}": p.detach().clone() for i, p in
             enumerate(p for g in done.rule.optimizer.param_groups for p in g["params"])}
    state.update({f"buffer.{n}": b.detach().clone() for n, b in done.model.named_buffers()})
    return state, done.losses


@pytest.fixture(scope="module")
def runs():
    """Every case, one launch per sharding (starting two processes costs more than training this model)."""
    out = {}
    for parallel in ("ddp", "zero2", "fsdp"):
        rules = [rule for rule, p in CASES if p == parallel]
        for rule, run in zip(rules, launch_each([spec(PER_RANK, r) for r in rules], WORLD, parallel,
                                                want_state=True, exact=True)):
            out[rule, parallel] = run
    return out


@pytest.mark.parametrize("rule,parallel", CASES)
def test_two_ranks_equal_one_process(rule, parallel, runs, monkeypatch):
    run = runs[rule, parallel]
    assert run.status == "ok", run.message
    expected, losses = reference(rule, monkeypatch)
    for rank in range(WORLD):
        state = run.ranks[rank]["state"]
        assert state.keys() == expected.keys()
        for name, tensor in expected.items():
            assert state[name].dtype == torch.float64
            assert torch.allclose(state[name], tensor, rtol=0, atol=1e-10), (rule, parallel, rank, name)
    assert [r["loss"] for r in run.first["records"]] == pytest.approx(losses, abs=1e-10)
    # The meter saw this mechanism's collectives, every step.
    comm = run.comm()
    ops = set(comm.op)
    if mechanism(rule) == "explicit":
        assert set(comm.phase) == {"optimizer_step"} and ops == {"all_reduce"}
    elif parallel == "ddp":
        assert "all_reduce" in ops and set(comm[comm.op == "all_reduce"].phase) == {"backward"}
    else:
        assert {"all_gather", "reduce_scatter"} <= ops
        assert ("all_gather" in set(comm[comm.phase == "backward"].op)) == (parallel == "fsdp")
    assert sorted(set(comm.step)) == list(range(1, STEPS + 1))
    assert (comm.group == WORLD).all()


def test_refusals_are_one_line():
    sharded = [r for r in rule_names() if admitted(r, "fsdp")]
    assert set(sharded) == {"bp", "fa", "kp"}
    with pytest.raises(ConfigError, match=r"^parallel: fsdp .* allowed with fsdp: bp, fa, kp; every rule runs under ddp$"):
        check_parallel("pepita", "fsdp", 2)
    with pytest.raises(ConfigError, match=r"^parallel: 'zero3' is not allowed \(allowed: ddp, zero2, fsdp\)$"):
        check_parallel("bp", "zero3", 2)
    with pytest.raises(ConfigError, match=r"^nproc: must be at least 1"):
        check_parallel("bp", "ddp", 0)
    for rule in rule_names():
        check_parallel(rule, "ddp", 2)


def _ranks(parent, count: int, timeout: float = 120.0):
    """The launcher's rank processes under ``parent`` (psutil), once ``count`` of them run."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = [p for p in psutil.Process(parent.pid).children(recursive=True)
                 if "spawn_main" in " ".join(p.cmdline())]
        if len(ranks) == count:
            return ranks
        time.sleep(0.2)
    raise AssertionError(f"{count} ranks never started")


def _train(out_dir):
    import subprocess
    import sys

    command = [sys.executable, "-m", "trainingcost", "train", "--nproc", "2", "--steps", "100000", "--layers", "1",
               "--d-model", "16", "--heads", "2", "--d-ff", "32", "--seq-len", "8", "--batch", "2",
               "--out-dir", str(out_dir)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_dying_rank_ends_the_job_with_a_status_row(tmp_path):
    import pandas as pd
    import psutil

    job = _train(tmp_path / "run")
    ranks = _ranks(job, 2)
    ranks[1].kill()
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    assert "status failed" in out and "rank 1 exited" in err
    steps = pd.read_parquet(tmp_path / "run" / "steps.parquet")
    assert set(steps.status) == {"failed"}
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)  # the other rank reaped


@pytest.mark.parametrize("name, status, words", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_ctrl_c_or_sigterm_stops_every_rank_and_writes_nothing(tmp_path, name, status, words):
    """Ctrl-C exits 130, SIGTERM 143 (docs/distributed.md, "Robustness"): torch's launcher turns either into its own
    SignalException, which keeps the signal's number."""
    import signal

    import psutil

    job = _train(tmp_path / "run")
    ranks = _ranks(job, 2)
    job.send_signal(getattr(signal, name))
    out, err = job.communicate(timeout=120)
    assert job.returncode in (status, -getattr(signal, name)), err
    assert f"{words}; nothing written" in err
    assert not (tmp_path / "run").exists()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)


def test_a_tiny_distributed_sweep_through_the_workflow(tmp_path):
    """train.parallel: two ranks per job, through Snakemake; the gathered tables carry the communication."""
    import copy

    import pandas as pd
    from test_workflow import TINY, snakemake

    config = copy.deepcopy(TINY)
    config["train"].update(rules=["bp", "pepita"], steps=4, parallel={"nproc": 2, "parallel": "ddp"})
    config["sweep"]["models"][0].update(arch="decoder")
    result = snakemake(tmp_path, config, "results/tables/measured.parquet", "results/tables/comm.parquet")
    assert result.returncode == 0, result.stderr[-3000:]
    measured = pd.read_parquet(tmp_path / "results/tables/measured.parquet")
    comm = pd.read_parquet(tmp_path / "results/tables/comm.parquet")  # findings/comm.py
    assert set(comm.rule) == {"bp", "pepita"} and comm.bytes_exact.all() and (comm.comm_share > 0).all()
    assert (tmp_path / "results/figures/comm.png").exists()
    assert "what each rule communicates that bp does not" in (tmp_path / "results/comm.md").read_text().lower()
    assert set(measured.rule) == {"bp", "pepita"} and set(measured.status) == {"ok"}
    assert (measured.nproc == 2).all() and (measured.comm_bytes_per_step > 0).all()
    assert set(measured.collectives_per_step) == {1.0}  # DDP's one bucket; PEPITA's one all-reduce
    config["train"]["parallel"]["parallel"] = "fsdp"
    (tmp_path / "refused").mkdir()
    refused = snakemake(tmp_path / "refused", config, "-n")
    assert refused.returncode != 0 and "train.parallel.parallel: fsdp" in refused.stderr
