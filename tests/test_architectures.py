"""Architecture options (issue 14): configuration, ids, presets, config.json files, the baselines and the causal
convention. The executed model under every option is checked against the meter in tests/test_executed.py, and
against Hugging Face's own models in tests/test_hf_models.py."""

import hashlib
import json

import pytest
import torch
import yaml

from conftest import costs, phase_sum
from test_train import run_here
from trainingcost.analytic import layer_table
from trainingcost.analytic.catalogue import vocabulary
from trainingcost.analytic.memory import memory_table
from trainingcost.config import ConfigError, PRESETS, canonical_model, configs_frame
from trainingcost.config.hf import hf_entry, read_hf_config
from trainingcost.config.presets import MLM_TRANSFORM, PUBLISHED_PARAMETERS
from trainingcost.config.sweep import sweep_frame, validate_config
from trainingcost.train.model import Transformer

DECODER = dict(arch="decoder", layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6)


# -- configuration ----------------------------------------------------------------------------------------
def test_existing_configurations_keep_their_config_id():
    # Ids computed before the options existed (f24ae0d): a default option, given or not, changes nothing.
    assert canonical_model(DECODER).config_id == "2485eb0d48"
    same = dict(DECODER, norm="layernorm", norm_position="post", ffn="gelu", kv_heads=4, head_dim=4,
                positions="sinusoidal", tie_embeddings=False, bias="all", head_bias=True, embedding_norm=False)
    assert canonical_model(same).config_id == "2485eb0d48"
    ids = {canonical_model(dict(DECODER, **change)).config_id for change in (
        dict(norm="rmsnorm"), dict(norm_position="pre"), dict(ffn="swiglu"), dict(kv_heads=2), dict(head_dim=8),
        dict(positions="rotary"), dict(tie_embeddings=True), dict(bias="none"), dict(head_bias=False),
        dict(type_vocab=2), dict(embedding_norm=True), dict(positions="learned", max_positions=8))}
    assert len(ids) == 12 and "2485eb0d48" not in ids


def test_default_sweep_keeps_its_ids_and_analytic_tables_byte_for_byte():
    """The default sweep's configurations whose shape did not change (all but the two presets made exact) give
    the same configs, costs and memory tables, to the byte, as before the options existed (hashes from f24ae0d).
    The presets made exact (gpt2-small, bert-base, t5-small) have new shapes, so new ids (README). The rules of that
    time only: TP, DTP and LRA (issue 15) add their own rows, and the memory table its new phases' peak columns."""
    config = validate_config(yaml.safe_load(open("tests/data/config_issue14.yaml")), vocabulary())
    frame = sweep_frame(config)
    frame = frame[~frame["name"].isin(["gpt2-small", "bert-base", "t5-small"])].reset_index(drop=True)
    sizes = ["config_id", "name", "arch", "d_model", "heads", "d_ff", "enc_layers", "dec_layers", "seq_len", "tgt_len",
             "vocab", "batch", "classes"]
    rules = ["bp", "pepita", "mempepita", "fa", "kp", "wm", "dfa"]
    table = layer_table(frame, rules, ["paper", "executed", "kaplan", "textbook", "survey"])
    memory = memory_table(frame, rules, config["memory"]["dtypes"], config["memory"]["optimizers"])
    memory = memory.drop(columns=["peak_target_propagation", "peak_feedback_update"])
    digest = [hashlib.sha256(t.to_csv(index=False).encode()).hexdigest()[:16] for t in (frame[sizes], table, memory)]
    assert len(frame) == 46
    assert digest == ["92fe9a703b13d8e4", "4e8abe25a5d70929", "29b882c3cef21f51"]


@pytest.mark.parametrize("change, message", [
    (dict(kv_heads=3), "kv_heads: 3 does not divide heads 4"),
    (dict(norm="batchnorm"), "norm: 'batchnorm' is not allowed (allowed: layernorm, rmsnorm, nonparametric, layernorm_nobias)"),
    (dict(ffn="swish"), "ffn: 'swish' is not allowed (allowed: gelu, relu, swiglu, geglu)"),
    (dict(positions="alibi"), "positions: 'alibi' is not allowed (allowed: sinusoidal, learned, rotary, relative, none)"),
    (dict(relative_buckets=16), "relative_buckets: applies only to positions relative (positions is sinusoidal)"),
    (dict(tie_embeddings="yes"), "tie_embeddings: 'yes' is not of type 'boolean'"),
    (dict(max_positions=8), "max_positions: applies only to positions learned (positions is sinusoidal)"),
    (dict(positions="learned", max_positions=4), "max_positions: 4 rows cannot hold a sequence of 6 positions"),
    (dict(positions="rotary", head_dim=5), "head_dim: rotary positions turn pairs of features, so a head's width must be even (it is 5)"),
    (dict(positions="rotary", d_model=12, heads=4), "positions: rotary positions turn pairs of features, so a head's width must be even (it is 3)"),
    (dict(classes=3, tie_embeddings=True), "tie_embeddings: a classification head has no vocabulary to share (classes is 3)"),
    (dict(heads=5), "heads: 5 does not divide d_model 16"),
    (dict(bias="some"), "bias: 'some' is not allowed (allowed: all, none, qkv, attention, ffn)"),
    (dict(parallel_block="yes"), "parallel_block: 'yes' is not allowed (allowed: none, one_norm, two_norms)"),
    (dict(parallel_block="one_norm"), "parallel_block: one_norm needs norm_position pre"),
    (dict(rotary_dim=2), "rotary_dim: applies only to positions rotary (positions is sinusoidal)"),
    (dict(positions="rotary", rotary_dim=3), "rotary_dim: 3 features cannot be turned in pairs within a head of 4"),
    (dict(positions="rotary", rotary_dim=6), "rotary_dim: 6 features cannot be turned in pairs within a head of 4"),
])
def test_bad_options_get_one_line_naming_the_field(change, message):
    with pytest.raises(ConfigError) as err:
        canonical_model(dict(DECODER, **change), "sweep.models[0]")
    text = str(err.value)
    assert "\n" not in text and text.startswith("sweep.models[0].") and message in text


def test_a_grid_sweeps_options():
    config = {"sweep": {"grids": [dict(name="g", arch=["decoder"], d_model=[16], heads=[4], ff_mult=[2], layers=[1],
                                       seq_len=[8], vocab=[32], norm=["layernorm", "rmsnorm"], kv_heads=[1, 2, 4],
                                       ffn=["gelu", "swiglu"])]}}
    frame = sweep_frame(validate_config(config, vocabulary()))
    assert len(frame) == 12 and frame["config_id"].is_unique
    assert set(frame["norm"]) == {"layernorm", "rmsnorm"} and set(frame["kv_heads"]) == {1, 2, 4}


# -- parameters ---------------------------------------------------------------------------------------------
OPTION_MODELS = [
    dict(DECODER, norm="rmsnorm", norm_position="pre", ffn="swiglu", kv_heads=2, positions="rotary", bias="none"),
    dict(DECODER, norm_position="pre", positions="learned", max_positions=10, tie_embeddings=True, head_bias=False),
    dict(DECODER, arch="encoder", positions="learned", type_vocab=2, embedding_norm=True, tie_embeddings=True),
    dict({k: v for k, v in DECODER.items() if k != "layers"}, arch="encoder-decoder", enc_layers=1, dec_layers=2,
         tgt_len=4, tie_embeddings=True, bias="qkv", ffn="geglu", head_dim=6, kv_heads=1, norm_position="pre"),
    dict(DECODER, ffn="relu", bias="none", head_bias=True, classes=3, positions="none"),
    dict(DECODER, arch="encoder", positions="relative", relative_buckets=8, norm="rmsnorm"),
    # issue 28's options: a parallel block (one norm, none with parameters), partial rotary, FFN biases, a window, Gemma's
    # scale; GPT-NeoX's two norms; T5 v1.1's shared table with its own head
    dict(DECODER, norm_position="pre", parallel_block="one_norm", positions="rotary", rotary_dim=2, bias="ffn",
         head_bias=True, norm="nonparametric", embedding_scale=True, sliding_window=3),
    dict(DECODER, norm_position="pre", parallel_block="two_norms", kv_heads=2),
    dict({k: v for k, v in DECODER.items() if k != "layers"}, arch="encoder-decoder", enc_layers=1, dec_layers=2,
         tgt_len=4, shared_embedding=True, ffn="geglu", norm="rmsnorm", norm_position="pre"),
]


@pytest.mark.parametrize("entry", OPTION_MODELS)
def test_the_memory_model_counts_the_torch_models_parameters(entry):
    cfg = canonical_model(entry)
    model = Transformer(cfg)
    memory = memory_table(configs_frame([("", cfg)]), ["bp"], ["fp32"], ["adam"]).iloc[0]
    assert memory["parameter_count"] == sum(p.numel() for p in model.parameters())  # a tied table counted once
    # Adam's float32 step per parameter tensor: the tensors the model has (biases off, tables shared).
    tensors = len(list(model.parameters()))
    assert memory["optimizer_state"] == 4 * (2 * memory["parameter_count"] + tensors)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_presets_have_their_published_parameter_counts(name):
    cfg = canonical_model(PRESETS[name])
    count = int(memory_table(configs_frame([("", cfg)]), ["bp"]).parameter_count.iloc[0])
    assert count + MLM_TRANSFORM.get(name, 0) == PUBLISHED_PARAMETERS[name][0]


def test_a_small_preset_builds_with_its_parameter_count():
    cfg = canonical_model(PRESETS["gpt2-small"])
    with torch.device("meta"):
        model = Transformer(cfg)
    assert sum(p.numel() for p in model.parameters()) == 124_439_808


# -- config.json ------------------------------------------------------------------------------------------
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
         "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
         "hidden_act": "silu", "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "rope_theta": 10000.0}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257,
        "n_inner": None, "activation_function": "gelu_new"}
BERT = {"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
        "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2,
        "hidden_act": "gelu", "position_embedding_type": "absolute"}
QWEN = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
        "hidden_act": "silu", "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 32768}
T5 = {"model_type": "t5", "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_decoder_layers": 6,
      "num_heads": 8, "vocab_size": 32128, "n_positions": 512, "feed_forward_proj": "relu", "is_encoder_decoder": True,
      "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "tie_word_embeddings": True}
MISTRAL = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
           "hidden_act": "silu", "sliding_window": 4096}


@pytest.mark.parametrize("data, preset", [(LLAMA, "llama-2-7b"), (GPT2, "gpt2-small"), (BERT, "bert-base"),
                                          (QWEN, "qwen2.5-0.5b"), (T5, "t5-small"), (dict(MISTRAL, max_position_embeddings=4096), "mistral-7b")])
def test_a_config_json_reads_as_its_preset(data, preset):
    """The file's shape, at the length a plan of it trains (Qwen2.5's 4,096-token pretraining, not its 32,768-token
    context: config/hf.py, training_length), is the preset."""
    from trainingcost.config.hf import check_window, training_length

    entry = hf_entry(data)
    length, _ = training_length(data, entry.get("seq_len"), entry.get("positions"), entry)
    entry = entry if length is None else {**entry, "seq_len": length}
    assert canonical_model(check_window(entry, "x")).config_id == canonical_model(PRESETS[preset]).config_id


@pytest.mark.parametrize("data, message", [
    (dict(LLAMA, model_type="jamba"), "model_type: 'jamba' is not supported (`trainingcost estimate --help` lists the 37 supported)"),
    (dict(T5, feed_forward_proj="gated-swish"), "feed_forward_proj: 'gated-swish' is not supported"),
    ({k: v for k, v in LLAMA.items() if k != "model_type"}, "model_type: missing"),
    ({k: v for k, v in LLAMA.items() if k != "hidden_size"}, "hidden_size: missing (model_type llama)"),
    (dict(LLAMA, num_attention_heads="32"), "num_attention_heads: '32' is not an integer (model_type llama)"),
    (dict(LLAMA, tie_word_embeddings="no"), "tie_word_embeddings: 'no' is not a boolean"),
    (dict(LLAMA, num_local_experts=8), "num_local_experts: mixture of experts is not supported"),
    (dict(QWEN, use_sliding_window=True, max_window_layers=21), "max_window_layers: a sliding window on 3 of 24 layers "
     "is not supported"),
    (dict(LLAMA, hidden_act="tanh"), "hidden_act: 'tanh' is not supported"),
    (dict(LLAMA, mlp_bias=True), "mlp_bias: mlp_bias true with attention_bias false is not supported"),
    (dict(BERT, position_embedding_type="relative_key"), "position_embedding_type: 'relative_key' is not supported"),
])
def test_bad_config_json_gets_one_line(data, message):
    with pytest.raises(ConfigError) as err:
        hf_entry(data, "config.json")
    assert "\n" not in str(err.value) and message in str(err.value)


def test_a_sliding_window_over_a_longer_sequence_is_an_option(tmp_path, capsys):
    """Mistral's 4096-token window over 32768 positions: the option sliding_window; over 4096 it masks nothing (the
    preset's configuration, no option)."""
    (tmp_path / "config.json").write_text(json.dumps(MISTRAL))
    status, out, err = run_here(capsys, "estimate", "--hf-config", str(tmp_path), "--rule", "bp", "--seq-len", "32768")
    assert status == 0 and "32768 tokens" in out, err
    # without --seq-len: a pretraining length, not the 32768 positions it serves, and a note saying so (issue 63)
    status, out, err = run_here(capsys, "estimate", "--hf-config", str(tmp_path), "--rule", "bp")
    assert status == 0 and "8192 tokens" in out and "not max_position_embeddings 32768" in " ".join(out.split()), err
    assert canonical_model(hf_entry(MISTRAL)).sliding_window == 4096
    assert canonical_model(dict(hf_entry(MISTRAL), seq_len=4096)).config_id == canonical_model(PRESETS["mistral-7b"]).config_id


def test_a_sliding_window_under_the_baselines_and_the_causal_convention_by_hand():
    """The executed model counts what SDPA with the window's mask computes: the dense product, as without a window.
    The baselines and the causal convention assume a windowed kernel: a query sees min(M, w) keys (the baselines),
    or the last w up to itself (causal: w (w + 1) / 2 over the first w queries, w each after)."""
    d, h, L, n, w, B = 32, 4, 2, 12, 5, 2
    entry = dict(arch="decoder", layers=L, d_model=d, heads=h, d_ff=48, vocab=50, seq_len=n, batch=B, norm="rmsnorm",
                 norm_position="pre", positions="rotary", ffn="swiglu", bias="none")
    models = ("executed", "causal", "kaplan", "textbook", "survey")
    dense, windowed = (costs(dict(entry, **extra), cost_models=models) for extra in ({}, dict(sliding_window=w)))

    def total(t, model, phase="forward"):
        return phase_sum(t, phase, "bp", "flops", model)

    for phase in ("forward", "backward", "weight_update"):
        assert total(windowed, "executed", phase) == total(dense, "executed", phase)
    keys = w * (w + 1) // 2 + (n - w) * w  # per sequence and head
    assert total(dense, "causal") - total(windowed, "causal") == B * L * 4 * d * (n * n // 2 - keys)
    assert total(dense, "causal", "backward") - total(windowed, "causal", "backward") == B * L * 10 * d * (n * n // 2 - keys)
    assert total(dense, "kaplan") - total(windowed, "kaplan") == B * 2 * L * n * (n - w) * d
    assert total(dense, "textbook") - total(windowed, "textbook") == B * 4 * L * n * (n - w) * d
    assert total(dense, "survey") - total(windowed, "survey") == B * 4 * L * n * (n - w) * d


def test_unreadable_config_json_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        read_hf_config(tmp_path / "missing.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="invalid JSON at line 1"):
        read_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        read_hf_config(tmp_path)


def test_estimate_reads_a_llama_config_and_declares_the_paper_model_out_of_scope(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    status, out, err = run_here(capsys, "estimate", "--hf-config", str(tmp_path / "config.json"), "--rule", "all",
                                "--per-layer", "--seq-len", "128")
    assert status == 0, err
    assert "paper: out of scope: the paper cost model defines the 2017 transformer only" in out
    assert "decoder.31.ffn" in out and "decoder.final_norm" in out
    assert "6,738,415,616 parameters" in out
    status, out, err = run_here(capsys, "estimate", "--hf-config", str(tmp_path), "--cost-model", "paper")
    assert status == 2 and err.count("\n") == 1 and "--cost-model paper: out of scope" in err


def test_flags_override_a_config_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    status, out, err = run_here(capsys, "estimate", "--hf-config", str(tmp_path), "--layers", "2", "--kv-heads", "8",
                                "--no-tie-embeddings", "--seq-len", "64", "--format", "csv", "--rule", "bp",
                                "--cost-model", "executed")
    assert status == 0, err
    expected = canonical_model(dict(PRESETS["llama-2-7b"], layers=2, kv_heads=8, seq_len=64))
    assert expected.config_id in out


def test_a_sweep_entry_reads_a_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GPT2))
    config = {"sweep": {"models": [{"name": "small-gpt2", "hf_config": str(tmp_path), "layers": 2, "seq_len": 128}]}}
    frame = sweep_frame(validate_config(config, vocabulary()))
    assert list(frame["name"]) == ["small-gpt2"]
    row = frame.iloc[0]
    assert (row["layers"] if "layers" in row else row["dec_layers"]) == 2 and row["seq_len"] == 128
    assert row["tie_embeddings"] and row["positions"] == "learned" and row["max_positions"] == 1024
    with pytest.raises(ConfigError, match=r"sweep.models\[0\].hf_config: no such file"):
        validate_config({"sweep": {"models": [{"hf_config": str(tmp_path / "nothing")}]}}, vocabulary())


def test_train_trains_a_tiny_llama_under_every_rule(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    tiny = ["--layers", "1", "--d-model", "16", "--heads", "4", "--kv-heads", "2", "--d-ff", "24", "--seq-len", "8",
            "--vocab", "256", "--batch", "2", "--steps", "3", "--eval-batches", "1"]
    from trainingcost.analytic.catalogue import rule_names

    for rule in rule_names():
        status, out, err = run_here(capsys, "train", "--hf-config", str(tmp_path), *tiny, "--rule", rule)
        assert status == 0, (rule, err)


# -- the baselines and the causal convention -------------------------------------------------------------------
def test_baselines_under_grouped_query_attention_and_a_gated_ffn_by_hand():
    d, h, kvh, ff, L, n = 64, 8, 2, 96, 3, 32
    a, kv = d, kvh * (d // h)
    entry = dict(arch="decoder", layers=L, d_model=d, heads=h, kv_heads=kvh, d_ff=ff, vocab=100, seq_len=n,
                 ffn="swiglu", norm_position="pre", norm="rmsnorm", positions="rotary", bias="none")
    t = costs(entry, cost_models=("kaplan", "textbook", "survey"))
    # Seed 004 eqs. 10.82-10.90 with Q, O d x a, K, V d x kv and three FFN matrices.
    textbook = L * (4 * n * d * a + 4 * n * d * kv + 6 * n * d * ff + 4 * n * n * a)
    assert phase_sum(t, "forward", "bp", "flops", "textbook") == textbook
    # Seed 002: multiplications, twice for FLOPs.
    survey = 2 * L * (2 * n * d * a + 2 * n * d * kv + 3 * n * d * ff + 2 * n * n * a)
    assert phase_sum(t, "forward", "bp", "flops", "survey") == survey
    # Kaplan et al. 2020, Table 1: 2N + 2 n_layer n_ctx d_attn per token, N the non-embedding weights.
    N = L * (2 * d * a + 2 * d * kv + 3 * d * ff)
    assert phase_sum(t, "forward", "bp", "flops", "kaplan") == n * (2 * N + 2 * L * n * a)


def test_the_causal_convention_halves_masked_attention_and_nothing_else():
    entry = dict(arch="encoder-decoder", enc_layers=1, dec_layers=2, d_model=16, heads=4, d_ff=24, vocab=11, seq_len=6,
                 tgt_len=4, batch=2)
    t = costs(entry, rules=("bp",), cost_models=("executed", "causal"))
    cells = t.pivot_table(index=["layer", "phase"], columns="cost_model", values="flops", aggfunc="sum")
    masked = cells.index.get_level_values("layer").str.endswith("self_attention") & \
        cells.index.get_level_values("layer").str.startswith("decoder")
    assert (cells.loc[~masked, "executed"] == cells.loc[~masked, "causal"]).all()
    B, M, a = 2, 4, 16
    diff = cells.loc[masked, "executed"] - cells.loc[masked, "causal"]
    for (layer, phase), value in diff.items():
        # half of 4 M M a forward, half of 10 M M a backward (the products of masked scores), per sequence
        assert value == {"forward": B * 2 * M * M * a, "backward": B * 5 * M * M * a, "weight_update": 0}[phase], (layer, phase)


def test_a_workflow_train_job_passes_every_option_to_train():
    """The train rule's command line rebuilds the configuration it names: same options, same config_id."""
    from test_executed import MODERN, OPTION_CASES
    from trainingcost.cli import build_parser, model_entry
    from trainingcost.pipeline import TrainJob, option_flags, train_command

    config = validate_config({"sweep": {"models": [dict(DECODER, name="m")]}, "train": {"select": ["m"]}}, vocabulary())
    for options in [*OPTION_CASES.values(), *MODERN.values(), dict(head_bias=False, tie_embeddings=False, bias="qkv")]:
        base = dict(DECODER, seq_len=8)
        if options.get("shared_embedding"):  # (an encoder-decoder's option)
            base = dict({k: v for k, v in base.items() if k != "layers"}, arch="encoder-decoder", enc_layers=1,
                        dec_layers=2)
        cfg = canonical_model(dict(base, **options))
        args = train_command(TrainJob(cfg.config_id, "bp", 0, "m", cfg, "lm"), config)
        assert args[-len(option_flags(cfg)) or len(args):] == option_flags(cfg)
        parsed = build_parser().parse_args(args)
        assert model_entry(parsed).config_id == cfg.config_id, options


def test_train_refuses_a_tied_head_on_a_classification_task(capsys):
    status, out, err = run_here(capsys, "train", "--task", "classify", "--tie-embeddings", "--steps", "1")
    assert status == 2 and err.count("\n") == 1 and "--tie-embeddings: task classify trains a classification head" in err


def test_a_changed_width_keeps_derived_head_widths():
    """The scaling figures and the probe resize a configuration: d_model / heads and kv_heads = heads follow."""
    base = canonical_model(dict(DECODER, d_model=64, d_ff=256))
    wider = base.replace(d_model=128, d_ff=512)
    assert wider.default_architecture and wider.head_dim == 32
    assert wider.config_id == canonical_model(dict(DECODER, d_model=128, d_ff=512)).config_id
    gqa = canonical_model(dict(DECODER, kv_heads=2, head_dim=8))
    assert gqa.replace(d_model=32).head_dim == 8 and gqa.replace(heads=8).kv_heads == 2


def test_the_probe_of_a_rotary_model_runs(tmp_path):
    from trainingcost.config import RuleOptions, TrainSpec
    from trainingcost.measure.probe import Probe

    cfg = canonical_model(dict(DECODER, vocab=256, **{"norm": "rmsnorm", "norm_position": "pre", "ffn": "swiglu",
                                                      "kv_heads": 2, "positions": "rotary", "bias": "none"}))
    spec = TrainSpec(cfg=cfg, task="lm", rule="bp", steps=3, seed=0, options=RuleOptions())
    probe = Probe(spec, torch.device("cpu"))
    assert probe.spec.cfg.head_dim == 2 and probe.spec.cfg.positions == "rotary"
    phases = probe()
    assert phases["forward"] > 0 and phases["backward"] > 0
