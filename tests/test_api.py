"""Issue 63: the Python API is the core. ``trainingcost.plan`` and ``trainingcost.estimate`` have named, typed
keyword parameters (the command line's inputs, declared once in flags.py, with the same defaults), take Python
objects where the command line takes files, raise TypeError for a keyword they do not take and trainingcost.Error
for a value the tool refuses, and build no command line; no module the API imports imports the command line."""

import argparse
import inspect
import json

import pandas as pd
import pytest

import trainingcost
from trainingcost import api, cli, flags
from trainingcost.args import gpu_counts, rule_list
from test_catalogue import _package_modules, import_graph

BASE = dict(preset="gpt2-small", tokens=1e10, gpu="a100-80gb", gpus=8, rule=["bp", "dfa"])


def test_the_api_is_in_dir_and_has_named_parameters():
    assert {"plan", "estimate", "Error", "PlanResult", "EstimateResult"} <= set(dir(trainingcost))
    for function in (trainingcost.plan, trainingcost.estimate):
        parameters = inspect.signature(function).parameters
        assert len(parameters) > 40 and all(p.kind is p.KEYWORD_ONLY for p in parameters.values())
        assert all(p.annotation is not inspect.Parameter.empty for p in parameters.values())
        for name in parameters:  # every parameter documented
            assert f"        {name} (--" in function.__doc__, name


@pytest.mark.parametrize("command, declare, function", [("plan", flags.plan_flags, trainingcost.plan),
                                                         ("estimate", flags.estimate_flags, trainingcost.estimate)])
def test_the_api_takes_the_command_lines_inputs_with_its_defaults(command, declare, function):
    table = argparse.ArgumentParser(add_help=False)
    declare(table)
    declared = {a.dest: a.default for a in table._actions if a.dest not in api.CLI_ONLY}
    parameters = inspect.signature(function).parameters
    assert set(parameters) == set(declared)
    for name, default in declared.items():
        given = parameters[name].default
        if name == "gpus":
            assert gpu_counts(str(given)) == default
        elif name == "rule":
            assert given == default == "all"
        else:
            assert given == default, name
    # the command line's parser has the same inputs and defaults
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    assert {a.dest: a.default for a in sub._actions if a.dest in declared} == declared


def test_a_misspelled_or_abbreviated_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="tokns"):
        trainingcost.plan(preset="gpt2-small", tokns=2e12, gpu="a100-80gb")
    with pytest.raises(TypeError, match="tok"):  # the command line's parser took --tok for --tokens (N17)
        trainingcost.plan(preset="gpt2-small", tok=2e12, gpu="a100-80gb")
    with pytest.raises(TypeError):
        trainingcost.estimate(presets="gpt2-small")


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp="three"), "trainingcost plan: error: argument --tp: expected an integer, got 'three'"),
    (dict(tp=2.5), "trainingcost plan: error: argument --tp: expected an integer, got '2.5'"),
    (dict(gpus=[8, "x"]), "argument --gpus: expected GPU counts (integers)"),
    (dict(rule=["bp", "sgd"]), "argument --rule: 'sgd' is not a rule"),
    (dict(epochs=2), "argument --epochs: not allowed with argument --tokens"),
    (dict(gpu="h900"), "--gpu: 'h900' is not in the hardware catalogue"),
    (dict(precision="fp4"), "argument --precision: invalid choice: 'fp4'"),
    (dict(compile="yes"), "argument --compile: expected True or False"),
    (dict(hf_config=[1, 2], preset=None), "--hf-config: a path, a dict in the config.json format or a transformers config"),
])
def test_a_refused_value_is_one_error_line(kwargs, message):
    with pytest.raises(trainingcost.Error) as caught:
        trainingcost.plan(**{**BASE, **kwargs})
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_numbers_are_used_as_given():
    """N15: the argv the API built rounded every float to 6 significant digits."""
    tokens = 1234567890123.0
    table = trainingcost.plan(**{**BASE, "tokens": tokens}).table
    assert (table["tokens"] == tokens).all()
    assert (trainingcost.plan(**{**BASE, "tokens": 1234567890123}).table["tokens"] == tokens).all()


def test_the_api_writes_the_figure_it_is_asked_for(tmp_path):
    """N14: figure= was ignored."""
    path = tmp_path / "scaling.png"
    trainingcost.plan(**{**BASE, "gpus": [8, 16]}, figure=path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(trainingcost.Error, match="figure: .* must end in .png"):
        trainingcost.plan(**{**BASE, "gpus": [8, 16]}, figure=tmp_path / "scaling.txt")


LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8,
         "num_hidden_layers": 4, "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 2048}


def test_a_model_as_a_dict_or_a_transformers_config_equals_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    base = {k: v for k, v in BASE.items() if k != "preset"}
    from_file = trainingcost.plan(**base, hf_config=str(path)).table
    from_dict = trainingcost.plan(**base, hf_config=LLAMA).table
    pd.testing.assert_frame_equal(from_file.drop(columns=["config_id"], errors="ignore"),
                                  from_dict.drop(columns=["config_id"], errors="ignore"))
    assert trainingcost.estimate(hf_config=LLAMA).table.equals(trainingcost.estimate(hf_config=path).table)
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(**{k: v for k, v in LLAMA.items() if k != "model_type"})
    from_object = trainingcost.plan(**base, hf_config=config).table
    assert from_object["step_time_s"].tolist() == from_dict["step_time_s"].tolist()


def test_a_frontiers_table_as_a_dataframe_equals_the_file(tmp_path):
    rows = [{"kind": "frontier", "rule": rule, "compute": c * scale, "loss": loss}
            for rule, scale in (("bp", 1.0), ("dfa", 3.0)) for c, loss in ((1e9, 3.0), (1e10, 2.0), (1e11, 1.5))]
    frame = pd.DataFrame(rows)
    pytest.importorskip("pyarrow")
    frame.to_parquet(tmp_path / "frontiers.parquet")
    given = dict(BASE, target_loss=2.0)
    from_file = trainingcost.plan(**given, frontiers=tmp_path / "frontiers.parquet").table
    from_frame = trainingcost.plan(**given, frontiers=frame).table
    assert from_file["tokens"].tolist() == from_frame["tokens"].tolist()
    assert from_frame.set_index("rule").loc["dfa", "compute_multiplier"] == pytest.approx(3.0)


def test_the_api_and_the_command_line_give_the_same_plan(capsys):
    assert cli.main(["plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb", "--gpus", "8",
                     "--rule", "bp,dfa", "--format", "json"]) == 0
    shown = pd.DataFrame(json.loads(capsys.readouterr().out))
    table = trainingcost.plan(**BASE).table
    assert shown["step_time_s"].tolist() == table["step_time_s"].tolist()
    assert shown["mem_total"].tolist() == table["mem_total"].tolist()
    estimated = trainingcost.estimate(preset="gpt2-small", rule="bp")  # the CLI's default view: executed
    assert set(estimated.table["cost_model"]) == {"executed"}
    assert set(trainingcost.estimate(preset="gpt2-small", rule="bp", cost_model="all").table["cost_model"]) > {"executed"}
    assert rule_list("all") == list(dict.fromkeys(trainingcost.estimate(preset="gpt2-small").table["rule"]))


CLI_MODULES = {"trainingcost.cli", "trainingcost.plan_command", "trainingcost.curves", "trainingcost.entry",
               "trainingcost.__main__", "trainingcost.warm"}


def test_no_module_the_api_imports_imports_the_command_line():
    graph = import_graph(_package_modules())
    seen, todo = set(), ["trainingcost.api"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += sorted(graph.get(module, ()))
    assert not seen & CLI_MODULES, sorted(seen & CLI_MODULES)
    assert "trainingcost.planning" in seen and "trainingcost.estimating" in seen


LLAMA_31 = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
            "rope_scaling": {"factor": 8.0, "original_max_position_embeddings": 8192, "rope_type": "llama3",
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0},
            "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False}  # meta-llama/Llama-3.1-8B


def test_the_training_length_is_never_taken_silently_from_the_served_context():
    """Issue 63: Llama 3.1's config.json planned 131,072-token sequences (1.72 TiB per step at batch 1)."""
    result = trainingcost.plan(hf_config=LLAMA_31, tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp")
    assert (result.table["tokens_per_sequence"] == 8192).all()
    assert len(result.notes) == 1 and "original_max_position_embeddings" in result.notes[0]
    no_scaling = {k: v for k, v in LLAMA_31.items() if k != "rope_scaling"}
    result = trainingcost.plan(hf_config=no_scaling, tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp")
    assert (result.table["tokens_per_sequence"] == 8192).all() and "pretraining length" in result.notes[0]
    given = trainingcost.plan(hf_config=LLAMA_31, tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp", seq_len=4096)
    assert (given.table["tokens_per_sequence"] == 4096).all() and given.notes == []
    assert "original_max_position_embeddings" in " ".join(trainingcost.estimate(hf_config=LLAMA_31, rule="bp").notes)


MI355X = {"label": "AMD Instinct MI355X", "peak_tflops": {"fp32": 157.3, "tf32": None, "bf16": 2500, "fp16": 2500,
                                                          "fp8": 5000},
          "memory_gb": 288, "bandwidth_gbs": 8000, "power_w": 1400, "source": "AMD Instinct MI355X data sheet (2025)"}


def test_a_device_from_a_file_or_a_dict_is_checked_as_the_catalogues_own(tmp_path, capsys):
    """Issue 63: `plan --gpu mi355x` was refused and no flag read a hardware file."""
    import yaml

    path = tmp_path / "devices.yaml"
    path.write_text(yaml.safe_dump({"mi355x": MI355X}))
    base = ["plan", "--preset", "llama-3-8b", "--tokens", "1e12", "--gpus", "64", "--rule", "bp", "--format", "json"]
    assert cli.main([*base, "--gpu", "mi355x", "--hardware", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)[0]
    from_file = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpus=64, rule="bp", gpu="mi355x", hardware=path)
    from_dict = trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpus=64, rule="bp", gpu={"name": "mi355x", **MI355X})
    assert shown["step_time_s"] == from_file.table["step_time_s"].iloc[0] == from_dict.table["step_time_s"].iloc[0]
    assert shown["gpu"] == "mi355x" and shown["fits"]
    # checked as the catalogue's entries are: one line naming the field
    path.write_text(yaml.safe_dump({"mi355x": {k: v for k, v in MI355X.items() if k != "memory_gb"}}))
    assert cli.main([*base, "--gpu", "mi355x", "--hardware", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hardware: hardware.mi355x.memory_gb: missing" in err
    with pytest.raises(trainingcost.Error, match=r"gpu: hardware.x.peak_tflops: must map dtypes"):
        trainingcost.plan(preset="llama-3-8b", tokens=1e12, gpus=64, gpu={"name": "x", **MI355X, "peak_tflops": 5})


def _hub_cache(root, repo_id: str, config: dict) -> None:
    """A Hugging Face Hub cache holding one model's config.json, laid out as huggingface_hub writes it
    (models--ORG--NAME/refs/main, snapshots/COMMIT/config.json): no network, no weights."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = root / f"models--{repo_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "snapshots" / commit / "config.json").write_text(json.dumps(config))


def test_a_hub_name_reads_its_config_json_from_the_hub_cache(tmp_path, monkeypatch, capsys):
    """Issue 63: --hf-config takes a Hub name, fetching only its config.json through huggingface_hub and its cache,
    honouring HF_HUB_OFFLINE; tested on a cache built here (no network)."""
    pytest.importorskip("huggingface_hub")
    cache = tmp_path / "hub"
    _hub_cache(cache, "meta-llama/Llama-3.1-8B", LLAMA_31)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import importlib

    import huggingface_hub.constants

    importlib.reload(huggingface_hub.constants)  # it reads the environment at import
    try:
        monkeypatch.chdir(tmp_path)
        assert cli.main(["plan", "--hf-config", "meta-llama/Llama-3.1-8B", "--tokens", "1e12", "--gpu", "h100-sxm",
                         "--gpus", "64", "--rule", "bp", "--format", "json"]) == 0
        by_name = json.loads(capsys.readouterr().out)[0]
        by_dict = trainingcost.plan(hf_config=LLAMA_31, tokens=1e12, gpu="h100-sxm", gpus=64, rule="bp").table
        assert by_name["step_time_s"] == by_dict["step_time_s"].iloc[0] and by_name["tokens_per_sequence"] == 8192
        assert cli.main(["estimate", "--hf-config", "meta-llama/Llama-3.1-70B", "--rule", "bp"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "the Hub did not give its config.json (not cached" in err, err
        assert len(err.strip()) <= 200
    finally:
        monkeypatch.undo()
        importlib.reload(huggingface_hub.constants)


def test_money_carries_its_currency(capsys):
    """Issue 63: `cost` had no currency."""
    table = trainingcost.plan(**BASE, price=2.1, currency="eur").table
    assert (table["currency"] == "EUR").all() and table["cost"].gt(0).all()
    assert (trainingcost.plan(**BASE).table["currency"] == "USD").all()
    assert cli.main(["plan", "--preset", "gpt2-small", "--tokens", "1e10", "--gpu", "a100-80gb", "--gpus", "8",
                     "--rule", "bp", "--price", "2"]) == 0
    out = capsys.readouterr().out
    assert "USD" in next(line for line in out.splitlines() if line.startswith("rule ")).split()  # the column's title
    assert "money: USD (--price, --currency)" in out
    with pytest.raises(trainingcost.Error, match="argument --currency: expected an ISO 4217 currency code"):
        trainingcost.plan(**BASE, currency="dollars")


def test_the_hubs_retries_say_nothing_the_failure_one_line(monkeypatch, capsys):
    """Out of the Hub's reach, huggingface_hub logs a line per retry (\"Retrying in 1s\"): the command says one."""
    import logging

    import huggingface_hub

    def unreachable(repo_id, filename, **kwargs):
        for n in range(1, 6):
            logging.getLogger("huggingface_hub.utils._http").warning(f"Retrying in {n}s [Retry {n}/5].")
        raise huggingface_hub.errors.LocalEntryNotFoundError("unreachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    before = logging.getLogger("huggingface_hub").level
    assert cli.main(["plan", "--hf-config", "meta-llama/Llama-3.1-8B", "--tokens", "1e12", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Retrying" not in err and len(err.strip()) <= 200, err
    assert logging.getLogger("huggingface_hub").level == before  # put back as it was


def test_the_hf_config_help_lists_every_model_type_read():
    """The API's docstrings name every model_type --hf-config reads (config/hf.py's SUPPORTED), as --help does."""
    import re

    from trainingcost.config.hf import SUPPORTED

    for function in (trainingcost.estimate, trainingcost.plan):
        listed = re.search(r"hf_config \(--hf-config\):.*?\((gpt2,.*?)\);", function.__doc__, re.S).group(1)
        assert [name.strip() for name in listed.split(",")] == list(SUPPORTED), function.__name__

