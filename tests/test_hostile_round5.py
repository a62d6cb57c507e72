"""Issue 65, review leftovers and the hostile reviews of 2026-12-07 (night): each defect as found, now a correct result
or one line naming the field (exit status 2, no traceback) before any work."""

import json

import pytest

from trainingcost import cli


@pytest.mark.parametrize("argv, command, extra", [
    (["plan", "--preset", "gpt2-small", "--bogus", "1"], "plan", "--bogus 1"),
    (["estimate", "--preset", "gpt2-small", "stray"], "estimate", "stray"),
    (["hardware", "--nope"], "hardware", "--nope"),
])
def test_an_unknown_flag_is_named_with_its_subcommand(capsys, argv, command, extra):
    with pytest.raises(SystemExit) as stop:  # argparse's exit, before any work
        cli.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"trainingcost {command}: error: unrecognized arguments: {extra}"]


def test_the_hardware_json_is_plain_json_with_its_slashes_unescaped(capsys):
    assert cli.main(["hardware", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "\\/" not in out and '"bandwidth GB/s"' in out
    rows = json.loads(out)
    h100 = next(r for r in rows if r["device"] == "h100-sxm")
    assert h100["bf16 TFLOP/s"] == pytest.approx(989.5) and h100["bandwidth GB/s"] == pytest.approx(3350)
    assert any(value is None for row in rows for value in row.values())  # a peak a part lacks is null, not NaN


def test_the_top_level_help_names_every_subcommand_in_plain_text(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    head = out.split("positional arguments")[0]
    assert "``" not in head
    for command in ("estimate", "plan", "train", "calibrate", "hardware", "curves", "serve", "configs", "check",
                    "analytic"):
        assert command in head.split("Command line:")[1]


def test_a_framework_date_before_the_familys_first_entry_says_so(capsys):
    assert cli.main(["plan", "--preset", "gpt2-small", "--tokens", "1e9", "--gpu", "a100-80gb",
                     "--framework", "megatron-lm@1999"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "megatron-lm@2021 for 'megatron-lm@1999'" in out
    assert "the family's earliest entry, read for any date before its successor's" in out


def test_the_multiplier_figure_puts_unreached_targets_in_their_own_strip_not_at_a_multiplier():
    import numpy as np
    import pandas as pd

    from trainingcost.findings.scaling_figures import multiplier_figure

    rows = []
    for rule, values in {"fa": [2.0, 2.5, np.nan], "dfa": [3.0, np.nan, np.nan], "tp": [1.2, 1.3, 1.4]}.items():
        for target, value in zip([4.0, 3.5, 3.0], values):
            rows.append({"kind": "multiplier", "headline": False, "rule": rule, "target_loss": target, "multiplier": value,
                         "multiplier_lo": np.nan, "multiplier_hi": np.nan, "reaches": bool(np.isfinite(value))})
    fig = multiplier_figure(pd.DataFrame(rows))
    strip, main = fig.axes
    assert [t.get_text() for t in strip.get_yticklabels()] == ["FA", "DFA"]  # TP reaches every target: no row
    crosses = np.concatenate([c.get_offsets() for c in strip.collections])
    assert sorted(map(tuple, crosses.tolist())) == [(3.0, 0.0), (3.0, 1.0), (3.5, 1.0)]
    assert not main.collections  # the main axis holds the multipliers only
    assert main.get_ylim()[1] == pytest.approx(3.0 * 1.5)


def test_the_cost_figure_says_when_the_cost_models_agree_on_time():
    import pandas as pd

    import trainingcost
    from trainingcost.findings.plan_figures import plan_cost

    table = trainingcost.plan(preset="gpt2-small", tokens=1e9, gpu="a100-80gb", gpus=8, rule=["bp", "pepita"],
                              cost_model="all").table
    fig = plan_cost(pd.DataFrame(table))
    title = fig._suptitle.get_text()
    assert "dashes on them (time is priced from what runs" in title  # the step-time model: one time per rule
    flat = trainingcost.plan(preset="gpt2-small", tokens=1e9, gpu="a100-80gb", gpus=8, rule=["bp", "pepita"],
                             cost_model="all", mfu=0.4).table  # a flat MFU: each cost model's FLOPs, its own time
    assert "dashes the other cost models" in plan_cost(pd.DataFrame(flat))._suptitle.get_text()


# -- the model families' review (config.json, presets, transformers) ------------------------------------------------
MIXTRAL = dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
               num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5, rope_theta=1e6, sliding_window=None,
               tie_word_embeddings=False, hidden_act="silu")  # mistralai/Mixtral-8x7B-v0.1's config.json
LLAMA31 = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
               tie_word_embeddings=False, hidden_act="silu")  # meta-llama/Llama-3.1-8B's


def test_a_sweeps_config_json_trains_at_the_length_estimate_and_plan_use(tmp_path):
    from trainingcost.config.sweep import enumerate_sweep

    for name, data, length in (("l31", LLAMA31, 8192), ("mixtral", MIXTRAL, 32768)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    configs = dict(enumerate(enumerate_sweep({"models": [{"name": "l31", "hf_config": str(tmp_path / "l31.json")},
                                                 {"name": "mixtral", "hf_config": str(tmp_path / "mixtral.json")}]})))
    lengths = {name: cfg.seq_len for name, cfg in configs.values()}
    assert lengths == {"l31": 8192, "mixtral": 32768}
    given = enumerate_sweep({"models": [{"name": "l31", "hf_config": str(tmp_path / "l31.json"), "seq_len": 2048}]})
    assert [cfg.seq_len for _, cfg in given] == [2048]


@pytest.mark.parametrize("preset, data", [("mixtral-8x7b", MIXTRAL)])
def test_a_config_json_of_a_presets_shape_plans_as_the_preset(tmp_path, preset, data):
    import trainingcost

    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    kwargs = dict(tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp")
    from_file = trainingcost.plan(hf_config=str(path), **kwargs)
    from_preset = trainingcost.plan(preset=preset, **kwargs)
    assert from_file.table["gpu_hours"].iloc[0] == pytest.approx(from_preset.table["gpu_hours"].iloc[0])
    assert any("the pretraining length of mixtral-8x7b" in note for note in from_file.notes) is False  # served = trained


@pytest.mark.parametrize("preset, length", [("qwen2.5-0.5b", 4096), ("qwen3-8b", 4096), ("qwen3-30b-a3b", 4096),
                                            ("mixtral-8x7b", 32768)])
def test_presets_train_at_their_cited_pretraining_length(preset, length):
    from trainingcost.config import PRESETS

    assert PRESETS[preset]["seq_len"] == length


def test_a_top_level_original_length_is_the_training_length(capsys, tmp_path):
    phi3 = dict(model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=32, vocab_size=32064, max_position_embeddings=131072,
                original_max_position_embeddings=4096, sliding_window=262144, tie_word_embeddings=False,
                rope_scaling={"type": "longrope", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(phi3))  # microsoft/Phi-3-mini-128k-instruct's layout
    assert cli.main(["estimate", "--hf-config", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "seq_len 4096: original_max_position_embeddings" in out


def _transformers_parameters(data: dict) -> int:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.AutoConfig.for_model(**data)
    auto = transformers.AutoModelForSeq2SeqLM if data.get("is_encoder_decoder") else transformers.AutoModelForCausalLM
    with torch.device("meta"):
        return auto.from_config(config).num_parameters()


def _our_parameters(data) -> int:
    import trainingcost

    return int(trainingcost.estimate(hf_config=data, seq_len=16).memory["parameter_count"].iloc[0])


def test_phi_reads_head_dim_as_transformers_does():
    phi = {"model_type": "phi", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
           "num_attention_heads": 4, "vocab_size": 512, "max_position_embeddings": 64, "head_dim": 48}
    assert _our_parameters(phi) == _transformers_parameters(phi) == 507_440


def test_stablelm_refuses_a_head_dim_its_attention_does_not_use(capsys, tmp_path):
    stablelm = {"model_type": "stablelm", "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 512, "max_position_embeddings": 64,
                "head_dim": 48}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(stablelm))
    assert cli.main(["estimate", "--hf-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "head_dim: 48 is not supported: StableLM's attention" in err


def test_a_t5_v11_config_object_counts_as_its_file():
    transformers = pytest.importorskip("transformers")
    t5 = dict(model_type="t5", d_model=512, d_ff=1024, d_kv=64, num_heads=6, num_layers=8, num_decoder_layers=8,
              vocab_size=32128, feed_forward_proj="gated-gelu", tie_word_embeddings=False, is_encoder_decoder=True)
    config = transformers.T5Config(**{k: v for k, v in t5.items() if k != "model_type"})
    assert _our_parameters(config) == _our_parameters(t5) == 76_961_152


def test_a_legacy_hub_name_without_its_organisation_reads_the_cache_only(tmp_path, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub")
    import importlib

    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = tmp_path / "hub" / "models--gpt2"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True)
    gpt2 = dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)
    (folder / "snapshots" / commit / "config.json").write_text(json.dumps(gpt2))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    importlib.reload(huggingface_hub.constants)  # it reads the environment at import
    try:
        monkeypatch.chdir(tmp_path)
        assert cli.main(["estimate", "--hf-config", "gpt2", "--rule", "bp", "--memory"]) == 0
        assert "124,439,808" in capsys.readouterr().out  # GPT2LMHeadModel's parameters
        assert cli.main(["estimate", "--hf-config", "t5-small"]) == 2  # not cached: no network tried, one line
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "nor a cached Hugging Face model of that name (a Hub name is org/name" in err
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)


# -- the review of check, configs, analytic, calibrate and curves --------------------------------------------------
def test_check_refuses_a_plan_shorter_than_one_step_as_the_workflow_would(capsys, tmp_path):
    path = tmp_path / "gb.yaml"
    path.write_text("sweep:\n  models:\n    - {name: m, arch: decoder, layers: 2, d_model: 8, heads: 2, d_ff: 32, "
                    "seq_len: 4, vocab: 16}\nplan:\n  tokens: 100\n  global_batch: 1000\n")
    assert cli.main(["check", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["trainingcost check: error: plan: configuration 'm': tokens: 100 tokens are less than "
                                "one optimizer step of 1000 sequences of 4 tokens (4,000); give more tokens or a "
                                "smaller global batch"]
    path.write_text(path.read_text().replace("tokens: 100", "tokens: 4000"))
    assert cli.main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("valid; 1 configuration, 0 training jobs")


def test_an_output_is_never_an_input_or_another_output(capsys, tmp_path):
    config = tmp_path / "x.yaml"
    config.write_text("sweep:\n  presets: [gpt2-small]\n")
    before = config.read_text()
    configs = tmp_path / "c.parquet"
    for argv, words in [
        (["configs", "--config", str(config), "--out", str(config)], f"--out: {config} is also --config, an input"),
        (["analytic", "--config", str(config), "--configs", str(configs), "--out", str(tmp_path / "a.parquet"),
          "--memory-out", str(tmp_path / "a.parquet")], "--memory-out: " + str(tmp_path / "a.parquet") +
         " is also --out, another output"),
        (["calibrate", "--trace", str(configs), "--out", str(configs)], f"--out: {configs} is also --trace, an input"),
    ]:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and words in err, err
    assert config.read_text() == before and not (tmp_path / "a.parquet").exists()


@pytest.mark.parametrize("extra, words", [
    (["--collectives", "--max-bytes", "0"], "--max-bytes: must be 16384"),
    (["--collectives", "--max-bytes", "100"], "--max-bytes: must be 16384"),
    (["--collectives", "--backend", "nccl", "--device", "cpu"], "--backend: nccl needs CUDA GPUs"),
    (["--collectives", "--nproc", "100000"], "--nproc: --collectives needs 2 to this machine's"),
    (["--collectives", "--after-compute-ms", "-5"], "--after-compute-ms: must be 0 or more"),
    (["--trace", "t.parquet", "--threads", "100000"], "--threads: must be 1 to this machine's"),
    (["--trace", "t.parquet", "--neighbours", "100000"], "--neighbours: must be 0 to"),
    (["--trace", "t.parquet", "--nproc", "3"], "--nproc: for --collectives only"),
    (["--device-model", "--max-bytes", "65536"], "--max-bytes: for --collectives only"),
    (["--trace", "t.parquet", "--collectives"], "--collectives: give one of --trace, --collectives and --device-model"),
    (["--collectives", "--device-model"], "--device-model: give one of"),
])
def test_calibrates_flags_are_checked_before_any_work(capsys, tmp_path, extra, words):
    assert cli.main(["calibrate", *extra, "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "c.json").exists()


def test_the_curves_table_counts_its_parameters_where_the_memory_table_has_bytes():
    from trainingcost.config.columns import describe
    from trainingcost.measure.curve import CURVE_COLUMNS

    assert "parameter_count" in CURVE_COLUMNS and "parameters" not in CURVE_COLUMNS
    assert describe("parameter_count")[0] == "count" and describe("parameters")[0] == "bytes"


def test_the_host_fit_is_non_negative_least_squares_as_a_brute_force_finds_it():
    """A call costs the host time: the fit is NNLS (Lawson and Hanson), checked against every subset's least squares."""
    import itertools

    import numpy as np

    from trainingcost.measure.host import nnls, solve

    def brute(a, b):
        best, chosen = np.inf, None
        for k in range(a.shape[1] + 1):
            for subset in itertools.combinations(range(a.shape[1]), k):
                x = np.zeros(a.shape[1])
                if subset:
                    z = np.linalg.lstsq(a[:, list(subset)], b, rcond=None)[0]
                    if (z < 0).any():
                        continue
                    x[list(subset)] = z
                if np.linalg.norm(a @ x - b) < best - 1e-12:
                    best, chosen = np.linalg.norm(a @ x - b), x
        return chosen

    rng = np.random.default_rng(0)
    for _ in range(100):
        a, b = rng.normal(size=(6, 4)), rng.normal(size=6)
        x = nnls(a, b)
        assert (x >= 0).all()
        assert np.linalg.norm(a @ x - b) == pytest.approx(np.linalg.norm(a @ brute(a, b) - b), abs=1e-9)
    # the review's case: a per-tensor cost that least squares fits below zero is 0 here, the others still fit
    import pandas as pd

    counts = {"s1": pd.Series({"call": 1.0, "tensor": 10.0}), "s2": pd.Series({"call": 2.0, "tensor": 30.0}),
              "s3": pd.Series({"call": 3.0, "tensor": 40.0})}
    residuals = {"s1": 1.0e-4, "s2": 1.9e-4, "s3": 3.1e-4}
    fitted = solve(residuals, counts)
    assert fitted["tensor"] >= 0 and fitted["call"] > 0


def test_a_busy_device_model_writes_nothing_unless_kept(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from trainingcost.measure import device_model

    busy = {"trusted": False, "untrusted": {"gemm 256": 0.119}, "bandwidth": [(2e6, 1e10)], "device_name": "cpu",
            "gemm_flops": 1e11, "flash_forward_flops": 1e10, "flash_backward_flops": 1e10, "launch_s": 1e-5,
            "kind": "device_model"}
    monkeypatch.setattr(device_model, "measure_device_model", lambda device, dtype: dict(busy))
    out = tmp_path / "dm.json"
    assert cli.main(["calibrate", "--device-model", "--device", "cpu", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["trainingcost calibrate: the machine is busy: the repeats of gemm 256 12% spread by "
                                "more than 10% of their medians; nothing written (--keep-untrusted keeps them, marked "
                                "untrusted)"]
    assert not out.exists()
    assert cli.main(["calibrate", "--device-model", "--device", "cpu", "--keep-untrusted", "--out", str(out)]) == 0
    assert "untrusted (the device is busy; interquartile spread gemm 256 12%)" in capsys.readouterr().out
    assert out.exists()


def test_config_aliases_read_as_transformers_reads_them():
    """MixtralConfig's attribute_map (num_experts for num_local_experts) and T5Config's (head_dim for d_kv)."""
    mixtral = {**{k: v for k, v in MIXTRAL.items() if k != "num_local_experts"}, "num_experts": 4,
               "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "vocab_size": 128}
    t5 = dict(model_type="t5", d_model=128, d_ff=256, num_heads=4, num_layers=2, vocab_size=128, head_dim=48,
              feed_forward_proj="relu", is_encoder_decoder=True)
    for data in (mixtral, t5):
        assert _our_parameters(data) == _transformers_parameters(data)


def test_a_converged_but_contended_calibration_is_not_trusted_in_the_summary():
    from trainingcost.findings.summary import untrusted_calibration

    quiet = {"trusted": True, "load": {"timing_quality": "ok", "cpu_time_per_wall": 0.98, "runnable_others_median": 0,
                                       "cores": 2}}
    contended = {"trusted": True, "load": {"timing_quality": "contended", "cpu_time_per_wall": 0.41,
                                           "runnable_others_median": 4, "cores": 2}}
    assert untrusted_calibration(quiet) == "" and untrusted_calibration(None) == ""
    line = untrusted_calibration(contended)
    assert line.startswith("**No trusted calibration**: the device's calibration converged, but its own timing was "
                           "contended (it got 0.41 of a core per second of wall-clock, beside a median of 4 other "
                           "runnable tasks on 2 cores)")
    busy = {"trusted": False, "untrusted": "no convergence in 60 s"}
    assert "(no convergence in 60 s)" in untrusted_calibration(busy)


@pytest.mark.parametrize("text, line", [
    ("sweep:\n  presets: [gpt2-small]\nhardware:\n  - {label: mine}\n",
     "hardware: must be a mapping of names to entries, not a list ([{'label': 'mine'}])"),
    ("sweep: [1, 2]\n", "sweep: must be a mapping (keys such as grids, models, presets), not a list ([1, 2])"),
])
def test_a_section_of_the_wrong_shape_says_what_shape_it_needs(capsys, tmp_path, text, line):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert cli.main(["check", "--config", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"trainingcost check: error: {line}"]


def test_a_sequence_past_the_learned_position_table_is_said(capsys, tmp_path):
    assert cli.main(["estimate", "--preset", "gpt2-small", "--seq-len", "2048"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("positions: a learned table of 2,048 positions for --seq-len 2,048, 1,024 more than the model's 1,024: "
            "rows (and parameters) the published model does not have") in out
    gpt2 = dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, n_positions=128, vocab_size=97)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(gpt2))
    assert cli.main(["estimate", "--hf-config", str(path), "--seq-len", "256"]) == 0
    assert "256 positions for --seq-len 256, 128 more than the model's 128" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["estimate", "--hf-config", str(path), "--seq-len", "64"]) == 0
    assert "more than the model's" not in capsys.readouterr().out


# -- the review of distributed training and its communication meters ------------------------------------------------
TINY = ["--d-model", "24", "--heads", "2", "--d-ff", "40", "--layers", "2", "--seq-len", "16", "--batch", "4"]


def test_zero2_with_evaluations_meters_the_models_bytes_and_documents_every_column(capsys, tmp_path):
    """An evaluation under no_grad left zero2's (reshard_after_forward=False) parameters gathered: the next step's
    forward gathered nothing, 107,520 bytes per step against the model's 172,032."""
    pytest.importorskip("torch")
    import pandas as pd

    from trainingcost.config.columns import describe

    out = tmp_path / "run"
    assert cli.main(["train", "--nproc", "2", "--parallel", "zero2", "--rule", "bp", *TINY, "--steps", "3",
                     "--warmup", "0", "--eval-every", "1", "--out-dir", str(out)]) == 0
    line = capsys.readouterr().out
    assert "communication per step: 172,032 bytes (the model's: equal) in 6 collectives" in line, line
    comm = pd.read_parquet(out / "comm.parquet")
    assert comm.groupby("step")["bytes"].sum().tolist() == [172032] * 3
    for table in ("comm", "steps", "measured"):
        frame = pd.read_parquet(out / f"{table}.parquet")
        assert [c for c in frame.columns if describe(c) is None] == [], table


@pytest.mark.parametrize("extra, words", [
    (["--parallel", "ddp", "--experts", "4", "--experts-per-token", "1"], "--parallel: ddp with a mixture of experts"),
    (["--backend", "nccl", "--device", "cpu"], "--backend: nccl needs CUDA GPUs"),
])
def test_a_distributed_run_that_cannot_run_is_one_line_before_any_process(capsys, extra, words):
    pytest.importorskip("torch")
    assert cli.main(["train", "--nproc", "2", "--rule", "bp", *TINY, "--steps", "2", *extra]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and words in err, err


def test_a_rank_without_a_target_fails_the_job_and_says_why(capsys):
    """Masked-token modelling on a tiny batch: a rank whose shard has no masked token fails the job (docs/
    distributed.md), not "diverged ... the forward pass overflowed"."""
    pytest.importorskip("torch")
    assert cli.main(["train", "--nproc", "2", "--parallel", "ddp", "--rule", "bp", "--arch", "encoder", "--d-model",
                     "24", "--heads", "2", "--layers", "1", "--seq-len", "4", "--batch", "1", "--steps", "6"]) == 0
    captured = capsys.readouterr()
    assert "status failed" in captured.out and "diverged" not in captured.out
    assert "this rank's shard of the batch has no target" in captured.err


def test_parallel_flags_with_one_process_are_refused(capsys):
    pytest.importorskip("torch")
    assert cli.main(["train", "--nproc", "1", "--parallel", "fsdp", "--steps", "1", *TINY]) == 2
    assert "--parallel: --parallel fsdp is for a run of several processes; with --nproc 1" in capsys.readouterr().err
