"""Issue 65, the hostile reviews of 2026-12-08 (the docs against the code; the SLURM profile, the report and the
scaling study): each defect as found, now a correct result or one line naming the field before any work."""

import copy

import pandas as pd
import pytest
import yaml

from trainingcost import cli
from trainingcost.analytic import vocabulary
from trainingcost.config import ConfigError, canonical_model
from trainingcost.config.sweep import validate_config


def test_train_refuses_a_step_beyond_exact_64_bit_integers_before_any_work(capsys, tmp_path):
    """`estimate` refused it; `train` built the model until the kernel killed it."""
    status = cli.main(["train", "--layers", "1000000000", "--d-model", "4096", "--steps", "4",
                       "--out-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and not (tmp_path / "run").exists()
    assert err[0].startswith("trainingcost train: error: --layers, --d-model: 1000000000 and 4096 make a step's executed cost")
    assert "beyond exact 64-bit integers" in err[0]


def test_the_memory_check_prices_a_model_the_tape_does_not_replay():
    """Over MAX_TAPE_BLOCKS blocks the tape's peak is -1: the check read it as no tensors at all (10,000 layers of
    width 64 passed as 0.5 GB). Now the hand model's total stands in, and the run is refused."""
    from trainingcost.analytic.memory import memory_table
    from trainingcost.analytic.tape import MAX_TAPE_BLOCKS
    from trainingcost.config import configs_frame
    from trainingcost.pipeline import TRAIN_PROCESS_BYTES, check_command_train_memory, tensor_bytes

    cfg = canonical_model(dict(arch="decoder", layers=MAX_TAPE_BLOCKS + 1, d_model=64, heads=4, d_ff=256, vocab=256,
                               seq_len=64, batch=16))
    table = memory_table(configs_frame([("", cfg)]), ["bp"], ["fp32"], ["adam"])
    assert table["peak"].iloc[0] == -1 and tensor_bytes(table).iloc[0] == table["total"].iloc[0] > 10**9
    small = canonical_model(dict(arch="decoder", layers=2, d_model=64, heads=4, d_ff=256, vocab=256, seq_len=64, batch=16))
    replayed = memory_table(configs_frame([("", small)]), ["bp"], ["fp32"], ["adam"])
    assert tensor_bytes(replayed).iloc[0] == replayed["peak"].iloc[0] > 0  # the replayed peak where there is one
    need = table["total"].iloc[0] + TRAIN_PROCESS_BYTES
    check_command_train_memory(cfg, "bp", "fp32", "adam", 1, "cpu", memory=int(need / 0.8) + 2**20)  # just fits
    with pytest.raises(ConfigError, match="over 80% of the"):
        check_command_train_memory(cfg, "bp", "fp32", "adam", 1, "cpu", memory=int(need / 0.8) - 2**20)


def test_whole_floats_where_the_schema_asks_for_integers_become_integers():
    """`train.steps: 20.0` and `scaling.widths: [32.0]` passed the schema (YAML's 1e3 is an integer there) and then
    failed every job (`--steps 20.0`, `widths: [32.0] is not a list of counts`)."""
    config = yaml.safe_load(open("config/config.yaml"))
    config["train"]["steps"] = 20.0
    config["scaling"].update(widths=[32.0], steps=1e2)
    config["sweep"]["models"] = [{"name": "m", "arch": "decoder", "layers": 1.0, "d_model": 16, "heads": 2, "d_ff": 32,
                                  "vocab": 256, "seq_len": 8.0, "batch": 2}]
    filled = validate_config(copy.deepcopy(config), vocabulary())
    assert filled["train"]["steps"] == 20 and type(filled["train"]["steps"]) is int
    assert filled["scaling"]["widths"] == [32] and type(filled["scaling"]["widths"][0]) is int
    assert type(filled["scaling"]["steps"]) is int
    model = filled["sweep"]["models"][0]
    assert type(model["layers"]) is int and type(model["seq_len"]) is int
    assert type(filled["train"]["lr"]) is float  # a number stays a number
    config["train"]["steps"] = 20.5
    with pytest.raises(ConfigError, match="train.steps: 20.5 is not of type 'integer'"):
        validate_config(config, vocabulary())


def test_a_run_on_another_device_than_the_calibrations_gets_no_predicted_time():
    from trainingcost.findings.comparison import other_device_runs

    measured = pd.DataFrame({"config_id": ["a", "a", "b"], "rule": ["bp", "bp", "bp"], "seed": [0, 0, 0],
                             "device_name": ["NVIDIA H100 80GB HBM3"] * 2 + ["NVIDIA A100-SXM4-80GB"]})
    other = other_device_runs(measured, {"device_name": "NVIDIA H100 80GB HBM3"})
    assert other[["config_id", "device_name"]].values.tolist() == [["b", "NVIDIA A100-SXM4-80GB"]]
    assert other_device_runs(measured, {}).empty and other_device_runs(measured, None).empty


def test_the_slurm_profile_sets_no_resources_and_no_groups():
    """Groups ran their members one after another (snakemake-executor-plugin-slurm#469); a profile's set-resources
    overrode a data-parallel job's GPUs and memory, which the workflow works out from the config."""
    profile = yaml.safe_load(open("profiles/slurm/profile.yaml"))
    assert not {"set-resources", "groups", "group-components"} & set(profile)


@pytest.mark.parametrize("scaling, message", [
    ({"widths": [32], "depths": [10000000]}, "under kp needs"),
    ({"widths": [32], "depths": [1], "seq_len": 1000000000}, "beyond exact 64-bit integers"),
    ({"widths": [512], "depths": [24], "steps": 100000000}, "; train.resources.runtime 30 min"),
])
def test_the_scaling_studys_largest_run_is_checked_before_any_job(scaling, message):
    """The train section's runs were refused before any job; the scaling study's passed the dry run and failed
    at run time."""
    from trainingcost.pipeline import load

    with pytest.raises(ConfigError) as error:
        load({"sweep": {"presets": ["bert-base"]}, "train": {"device": "cpu"}, "scaling": scaling})
    line = str(error.value)
    assert line.startswith("scaling: its largest run (width ") and message in line and "\n" not in line
    assert len(f"trainingcost check: error: {line}") <= 200


def test_each_scaling_figure_has_its_own_caption():
    from trainingcost.findings.scaling import SCALING_FIGURES

    smk = open("workflow/rules/scaling.smk").read()
    assert 'caption=f"../report/{key}.rst"' in smk
    for key, name in SCALING_FIGURES.items():
        caption = open(f"workflow/report/{key}.rst").read()
        assert len(caption) > 200, key


# -- the plan at its edges (a review helper, 2026-12-08) -------------------------------------------------------------
def test_the_default_batch_gives_each_replica_a_count_that_micro_batches_divide():
    """A 4M-token batch over 136 replicas left 31 sequences each, a prime: micro-batch 1 whatever fits, and twice
    the GPU-hours of 120 GPUs."""
    import trainingcost as tc
    from trainingcost.analytic.plan import splittable

    assert [splittable(c) for c in (1, 7, 16, 17, 31, 33, 129, 1000)] == [1, 7, 16, 18, 32, 36, 144, 1024]
    for count in range(1, 5000):
        s = splittable(count)
        assert count <= s <= count * 1.125 and (s & -s) >= count / 16
    runs = {n: tc.plan(preset="gpt2-xl", tokens=1e11, gpu="a100-80gb", gpus=n, rule="bp").table.iloc[0]
            for n in (120, 136)}
    assert runs[136]["micro_batch"] > 1 and runs[136]["global_batch"] % 136 == 0
    assert runs[136]["gpu_hours"] < 1.3 * runs[120]["gpu_hours"]


@pytest.mark.parametrize("keywords, flag, words", [
    (dict(preset=3), "--preset", "expected a string, got int 3"),
    (dict(preset="llama-2-7b", gpu=["h100-sxm"]), "--gpu", "expected a string, got list"),
    (dict(preset="llama-2-7b", gpu="h100-sxm", framework=["fsdp2"]), "--framework", "expected a string, got list"),
    (dict(preset="llama-2-7b", gpu="h100-sxm", hardware=5), "--hardware", "expected a string, got int 5"),
    (dict(preset="llama-2-7b", gpu="h100-sxm", etp="x"), "--etp", "invalid int value: 'x'"),
])
def test_the_api_refuses_a_wrong_type_in_one_line(keywords, flag, words):
    import trainingcost as tc

    with pytest.raises(tc.Error) as error:
        tc.plan(tokens=1e9, gpus=8, **keywords)
    assert str(error.value) == f"trainingcost plan: error: argument {flag}: {words}" or \
        str(error.value).startswith(f"trainingcost plan: error: argument {flag}: {words}")


def test_all_among_other_rules_is_named_as_such(capsys):
    with pytest.raises(SystemExit) as stop:  # argparse's exit, before any work
        cli.main(["plan", "--preset", "llama-2-7b", "--gpu", "h100-sxm", "--tokens", "1e9", "--rule", "all,bp"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip() == ("trainingcost plan: error: argument --rule: 'all,bp': all stands alone "
                                               "(every rule), not in a list of rules")


@pytest.mark.parametrize("argv, label, change", [
    # the micro-batch given is what does not fit: the verdict said "at micro-batch 1" and advised --tp 4
    (["--preset", "llama-2-70b", "--gpu", "a100-80gb", "--gpus", "64", "--tp", "8", "--micro-batch", "2"],
     "at micro-batch 2 on a100-80gb", "The smallest change that fits: --micro-batch 1."),
    # 61 blocks on 16 stages (uneven): recompute alone fits; the search tried only pipeline degrees dividing 61, and
    # dropped the batch given (advising a layout the batch does not divide over)
    (["--preset", "deepseek-v3", "--gpu", "h100-sxm", "--gpus", "2048", "--ep", "64", "--pp", "16", "--global-batch",
      "4096"], "at micro-batch 1 on h100-sxm", "The smallest change that fits: --checkpointing full."),
])
def test_the_fit_verdict_names_the_micro_batch_priced_and_a_change_that_runs(capsys, argv, label, change):
    assert cli.main(["plan", *argv, "--tokens", "1e9", "--rule", "bp"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert label in out and change in out
    flags = change.split(": ", 1)[1].rstrip(".").split()
    assert cli.main(["plan", *argv, *flags, "--tokens", "1e9", "--rule", "bp"]) == 0  # the change runs, and fits
    assert "Does not fit" not in capsys.readouterr().out


def test_figure_5_claims_no_accuracy_under_a_calibration_not_trusted():
    """The summary said "No trusted calibration ... no accuracy is claimed" while figure 5 scored the same runs."""
    from trainingcost.findings.figures import step_time

    steps = pd.DataFrame({"granularity": "step", "cost_model": "executed", "rule": ["bp", "dfa"], "device_name": "cpu",
                          "timing_quality": "ok", "predicted_time_s": [0.010, 0.020], "measured_time_s": [0.011, 0.019]})
    trusted, untrusted = step_time(steps), step_time(steps, calibration_trusted=False)
    assert "misses the measured step time" in trusted._suptitle.get_text()
    assert untrusted._suptitle.get_text().startswith("No trusted calibration")
    assert "no accuracy claimed" in untrusted.axes[0].get_title()
