"""trainingcost against the real implementation: Hugging Face ``transformers`` models of each supported model_type.

Each test builds the model from a small config, with random weights, ``attn_implementation="sdpa"`` and no
download, and counts one training step (forward, loss, backward) with torch's ``FlopCounterMode``, given the same
CPU attention formulas as the project's meter. trainingcost reads the same config (as ``config.json`` data) and
must count the same parameters, and its ``executed`` model the same FLOPs, but for terms this test computes from
the architecture where Hugging Face's model does work trainingcost does not model:

- BERT's MLM transform (a d x d dense layer before the decoder: 2 B S d^2 forward, twice that backward).

After that term the residual must be 0. T5's relative position bias needs a gradient, so torch runs its self-attention
on the unfused math path (8 B M N d backward FLOPs, not the fused kernel's 10): trainingcost's model runs the same
path and its executed model counts it, so no term remains. Dropout is off: Hugging Face passes its rate to SDPA,
and a non-zero rate also takes CPU attention off the fused kernel. (Hugging Face's rotary angles are elementwise products, not a counted
matmul, in the transformers release the dev extra installs; were they a matmul, the test would fail and say so.) docs/cost_models.md says what they amount to at the presets' sizes.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from trainingcost.analytic import layer_table
from trainingcost.config import canonical_model, configs_frame
from trainingcost.config.hf import check_window, hf_entry, with_overrides
from trainingcost.analytic.memory import memory_table
from trainingcost.measure.flops import CPU_SDPA_FORMULAS

transformers = pytest.importorskip("transformers")

B, S, T = 2, 12, 7  # batch, (source) length, target length of an encoder-decoder


def _raw(formula):
    """A formula of torch's registry, already shape-wrapped, marked so FlopCounterMode does not wrap it twice."""
    def counted(*args, **kwargs):
        return formula(*args, **kwargs)
    counted._get_raw = True
    return counted


CPU_ATTENTION = {op: _raw(formula) for op, formula in CPU_SDPA_FORMULAS.items()}


def _llama_like(config_class, model_class, **extra):
    def build():
        config = getattr(transformers, config_class)(
            hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
            vocab_size=61, max_position_embeddings=64, attn_implementation="sdpa", **extra)
        return config, getattr(transformers, model_class)(config)
    return build


MODELS = {
    "gpt2": lambda: (lambda c: (c, transformers.GPT2LMHeadModel(c)))(transformers.GPT2Config(
        n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=61, attn_implementation="sdpa")),
    "bert": lambda: (lambda c: (c, transformers.BertForMaskedLM(c)))(transformers.BertConfig(
        hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=40, vocab_size=61,
        max_position_embeddings=64, attn_implementation="sdpa")),
    "t5": lambda: (lambda c: (c, transformers.T5ForConditionalGeneration(c)))(transformers.T5Config(
        d_model=32, d_kv=8, d_ff=40, num_layers=2, num_decoder_layers=1, num_heads=4, vocab_size=61,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0, pad_token_id=0,
        dropout_rate=0.0, attn_implementation="sdpa")),
    "llama": _llama_like("LlamaConfig", "LlamaForCausalLM"),
    # attention_bias without mlp_bias: biases on q, k, v and o, none in the MLP (bias "attention")
    "llama:attention_bias": _llama_like("LlamaConfig", "LlamaForCausalLM", attention_bias=True),
    "mistral": _llama_like("MistralConfig", "MistralForCausalLM", sliding_window=None),
    "qwen2": _llama_like("Qwen2Config", "Qwen2ForCausalLM", tie_word_embeddings=True),
}


def hf_step_flops(model, config) -> int:
    torch.manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (B, S))
    labels = torch.randint(0, config.vocab_size, (B, T)) if config.is_encoder_decoder else ids
    model.train()
    for module in model.modules():  # dropout does no counted work; off, so the step is deterministic
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_parameters_and_executed_flops_equal_the_hugging_face_model(model_type):
    config, model = MODELS[model_type]()
    data = config.to_dict()
    assert data["model_type"] == model_type.split(":")[0]
    lengths = {"seq_len": S, "tgt_len": T} if data.get("is_encoder_decoder") else {"seq_len": S}
    entry = check_window(with_overrides(hf_entry(data), {**lengths, "batch": B}), "test")
    cfg = canonical_model(entry)
    frame = configs_frame([("", cfg)])
    d = cfg.d_model

    # Parameters: the same, but BERT's MLM transform (dense d x d with bias, LayerNorm).
    transform = d * d + d + 2 * d if model_type == "bert" else 0
    params = int(memory_table(frame, ["bp"]).parameter_count.iloc[0])
    assert params + transform == model.num_parameters()

    # One training step: executed (BP, every phase) against FlopCounterMode on the real model.
    executed = int(layer_table(frame, ["bp"], ["executed"]).flops.sum())
    measured = hf_step_flops(model, config)
    terms = 0
    if model_type == "bert":
        terms += 3 * 2 * B * S * d * d  # the MLM transform: forward, input gradient, weight gradient
    assert measured - executed == terms, (model_type, measured, executed, terms)
