"""Host time in the step predictor: the trace's host contexts and host calls, the micro-steps' fit, and the
pricing of the host terms against a hand computation. Structure and formulas only: nothing here is timed."""

import numpy as np
import pandas as pd
import pytest
import torch

from trainingcost.config import RuleOptions, TrainSpec, canonical_model
from trainingcost.findings import calibration as C
from trainingcost.findings.predictor import predict_phases, price
from trainingcost.measure import host as H
from trainingcost.measure.trace import (FUNCTION_APPLY, FUNCTION_BACKWARD, HOST_CONTEXTS, OPTIMIZER_CALL,
                                        OPTIMIZER_TENSOR, trace_step)
from trainingcost.train.run import build_model

RULES = ["bp", "pepita", "mempepita", "fa", "kp", "wm", "dfa", "tp", "dtp", "lra"]


def spec(rule, optimizer="sgd", arch="decoder"):
    cfg = canonical_model(dict(arch=arch, layers=2, d_model=32, heads=4, d_ff=64, seq_len=16, batch=4, vocab=256), "")
    return TrainSpec(cfg=cfg, task="reverse" if arch == "encoder-decoder" else "lm", rule=rule, steps=3, seed=0,
                     measure=True, options=RuleOptions(optimizer=optimizer))


def calls(trace, op):
    return int(trace.loc[trace["op"] == op, "count"].sum())


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_bp_trace_counts_its_host_work(optimizer):
    """Every op has a host context; one optimizer call updating every parameter tensor; one Python Function node
    per linear, recorded in the forward and run by the engine in the backward."""
    s = spec("bp", optimizer)
    trace = trace_step(s)
    assert set(trace["context"]) <= set(HOST_CONTEXTS)
    model, rule = build_model(s, torch.device("cpu"))
    tensors = sum(1 for p in rule.optimizer.param_groups[0]["params"] if p.requires_grad)
    assert calls(trace, OPTIMIZER_CALL) == 1 and calls(trace, OPTIMIZER_TENSOR) == tensors
    optim = trace[trace["op"] == OPTIMIZER_TENSOR]
    assert set(optim["signature"]) == {"SGD" if optimizer == "sgd" else "AdamW"}
    linears = sum(1 for m in model.modules() if type(m).__name__ == "Linear" and hasattr(m, "feedback"))
    assert calls(trace, FUNCTION_APPLY) == calls(trace, FUNCTION_BACKWARD) == linears > 0
    timed = trace.groupby("context")["timed_phase"].agg(set)
    assert timed["engine"] == {"backward"} and timed["optimizer"] == {"optimizer_step"}
    assert "forward" in timed["record"]
    # the optimizer's kernels are its own: torch.optim's for-loop on CPU, one add_ per tensor under SGD
    if optimizer == "sgd":
        ops = trace[(trace["context"] == "optimizer") & (trace["cls"] != "host")]
        assert set(ops["op"]) == {"aten.add_.Tensor"} and ops["count"].sum() == tensors


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_traces_host_terms(rule):
    """Every rule's trace has host terms (PEPITA's forward passes record no graph: plain ops) and one or more
    optimizer calls; a rule that runs autograd records ops."""
    trace = trace_step(spec(rule))
    terms = H.term_counts(trace)
    assert terms.get(f"{OPTIMIZER_CALL}[SGD]", 0) >= 1 and (terms > 0).all()
    assert (terms.get("engine", 0) > 0) == (terms.get("record", 0) > 0) == (rule not in ("pepita", "mempepita"))


def test_the_host_terms_priced_by_hand():
    """Each row's host seconds: its term's coefficient times its count; added to the row's seconds and to launch_s."""
    rows = [
        dict(op="aten.add.Tensor", cls="elementwise", context="record", count=3),
        dict(op="aten.view.default", cls="view", context="engine", count=5),
        dict(op="aten.mul.Tensor", cls="elementwise", context="plain", count=2),
        dict(op="prim.device.default", cls="host", context="record", count=7),  # a device query: no host term
        dict(op=FUNCTION_APPLY, cls="host", context="record", count=4),
        dict(op=FUNCTION_BACKWARD, cls="host", context="engine", count=4),
        dict(op=OPTIMIZER_CALL, cls="host", context="optimizer", count=1, signature="SGD"),
        dict(op=OPTIMIZER_TENSOR, cls="host", context="optimizer", count=12, signature="SGD"),
        dict(op="aten.add_.Tensor", cls="elementwise", context="optimizer", count=12),  # priced by its tensors
    ]
    trace = pd.DataFrame(rows).fillna({"signature": "[]"}).assign(
        layer="x", phase="forward", timed_phase="forward", flops=0, bytes_read=0, bytes_written=0)
    coefficients = {"record": 1e-6, "engine": 2e-6, "plain": 3e-7, f"{FUNCTION_APPLY}[record]": 8e-6,
                    f"{FUNCTION_BACKWARD}[engine]": 9e-6, f"{OPTIMIZER_CALL}[SGD]": 5e-5,
                    f"{OPTIMIZER_TENSOR}[SGD]": 1.5e-6}
    expected = [3e-6, 10e-6, 6e-7, 0.0, 32e-6, 36e-6, 5e-5, 18e-6, 0.0]
    assert np.allclose(H.host_seconds(trace, coefficients), expected, rtol=1e-12, atol=0)
    # another optimizer class than the calibration stepped: the mean of the classes it did
    adam = trace.assign(signature=trace["signature"].replace("SGD", "AdamW"))
    both = {**coefficients, f"{OPTIMIZER_CALL}[AdamW]": 7e-5, f"{OPTIMIZER_TENSOR}[AdamW]": 2.5e-6}
    assert np.allclose(H.host_seconds(adam, {k: v for k, v in both.items() if "SGD" not in k})[-3:-1], [7e-5, 30e-6])
    cal = {"launch_overhead_s": 1e-6, "view_overhead_s": 5e-7, "kernels": [],
           "copy_ladder": [{"bytes": 1000, "seconds": 2e-6}, {"bytes": 1_000_000, "seconds": 1.01e-4}],
           "host": {"coefficients": coefficients}}
    priced = price(trace, cal)
    assert np.allclose(priced["host_s"], expected)
    assert np.allclose(priced["seconds"], priced["op_seconds"] + priced["host_s"])
    assert priced["launch_s"].sum() == pytest.approx(5 * 5e-7 + sum(expected))
    assert priced["elementwise_s"].sum() == pytest.approx(priced.loc[priced["cls"] == "elementwise", "op_seconds"].sum())
    # without a host fit (an older calibration, a GPU's): the ops alone
    plain = price(trace, {k: v for k, v in cal.items() if k != "host"})
    assert np.allclose(plain["seconds"], plain["op_seconds"]) and (plain["host_s"] == 0).all()
    # an older trace without contexts: no host terms
    assert (H.host_seconds(trace.drop(columns="context"), coefficients) == 0).all()


def test_the_fit_recovers_known_host_seconds():
    """Residuals made from known coefficients: least squares gives them back."""
    truth = {"plain": 1e-6, "record": 3e-6, "engine": 4e-6, "f[record]": 9e-6}
    counts = {"a": pd.Series({"plain": 70}), "b": pd.Series({"plain": 2, "record": 50}),
              "c": pd.Series({"engine": 100, "record": 1}), "d": pd.Series({"plain": 30, "record": 40, "f[record]": 8})}
    residuals = {k: sum(truth[t] * n for t, n in c.items()) for k, c in counts.items()}
    fitted = H.solve(residuals, counts)
    assert fitted.keys() == truth.keys()
    assert all(fitted[k] == pytest.approx(v, rel=1e-9) for k, v in truth.items())


def test_the_micro_steps_cover_every_host_term():
    """The segments' design has a row per segment and determines every term (full column rank)."""
    segments = H.segments(torch.device("cpu"), torch.float32, ("sgd", "adam"))
    counts = {s.name: H.term_counts(s.trace) for s in segments}
    names = sorted({t for c in counts.values() for t in c.index})
    design = np.array([[float(c.get(t, 0.0)) for t in names] for c in counts.values()])
    assert np.linalg.matrix_rank(design) == len(names)
    assert {"plain", "record", "engine", f"{FUNCTION_APPLY}[record]", f"{FUNCTION_BACKWARD}[engine]",
            f"{OPTIMIZER_CALL}[SGD]", f"{OPTIMIZER_TENSOR}[SGD]", f"{OPTIMIZER_CALL}[AdamW]",
            f"{OPTIMIZER_TENSOR}[AdamW]", H.OPTIMIZER_BYTES} <= set(names)


def test_a_calibration_fits_the_host_terms_with_a_steady_clock():
    """Every segment is timed in the rounds (a fake clock: 1e-5 s a call), its ops priced, and the fit stored."""
    trace = trace_step(spec("fa"))
    cal = C.calibrate(torch.device("cpu"), "fp32", trace, clock=lambda fn, calls: 1e-5)
    fit = cal["host"]
    assert {s["segment"] for s in fit["segments"]} >= {"native/record", "function/engine", "optimizer/sgd/4x4"}
    assert set(fit["coefficients"]) >= set(H.term_counts(trace).index)
    assert all(np.isfinite(v) for v in fit["coefficients"].values())
    # the micro-steps' own kernels are not the trace's: the file's kernels are the trace's alone
    assert len(cal["kernels"]) == len(C.kernels(trace))
    phases = predict_phases(trace.assign(config_id="c", rule="fa", seed=0), cal)
    assert np.isfinite(phases["launch_s"]).all()  # a fake clock: the fitted values mean nothing
    off = C.calibrate(torch.device("cpu"), "fp32", trace, clock=lambda fn, calls: 1e-5, host=False)
    assert off["host"] == {"coefficients": {}, "segments": []}


def test_neighbours_train_beside_the_calibration_and_are_killed_by_pid():
    """calibrate --neighbours N: N processes run the traced runs' steps while inside, none is left after."""
    from trainingcost.measure.probe import spec_json

    with H.neighbours(1, [spec_json(spec("bp"))]) as crowd:
        assert len(crowd.processes) == 1 and crowd.processes[0].poll() is None  # still training
    assert all(p.poll() is not None for p in crowd.processes)
    with H.neighbours(2, []) as nobody:  # no traced run to train: nobody starts
        assert nobody.processes == []


def test_timed_jobs_at_once_come_from_the_config_alone(tmp_path):
    """train.timed_at_once (default 2) gives the `timed` resource and train.calibration.neighbours (default 0) the
    calibration's neighbours; the command line's --resources never changes a job's parameters (a job Snakemake runs
    in a process of its own parses the Snakefile again without it: a parameter that differed there, the neighbours
    once derived from it, made the calibrate job run twice)."""
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]

    def dry_run(config: Path, *extra: str) -> str:
        out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "2", "-d", str(tmp_path), "-s",
                              str(root / "Snakefile"), "--configfile", str(config), *extra],
                             capture_output=True, text=True, cwd=root, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        text = out.stdout + out.stderr
        train = text[text.index("rule train:"):]
        assert "timed=1" in train[: train.index("\n\n")]  # each training job takes one of them
        return text[text.index("trainingcost calibrate"):].split("\n", 1)[0]

    default = root / "config" / "config.yaml"
    assert "--neighbours 0 " in dry_run(default)
    assert "--neighbours 0 " in dry_run(default, "--resources", "timed=5")
    config = yaml.safe_load(default.read_text())
    config["train"]["calibration"] = {"neighbours": 1}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(config))
    assert "--neighbours 1 " in dry_run(tmp_path / "one.yaml")
