"""The model families of issue 28 against Hugging Face ``transformers``' own models (the dev extra), as
tests/test_hf_models.py checks GPT-2, BERT, T5, Llama, Mistral and Qwen2: each ``model_type`` built from a small
config with random weights (no download), ``attn_implementation="sdpa"``, dropout off. trainingcost reads the same
config as ``config.json`` data and must count the same parameters (``num_parameters()``), and its ``executed`` model
the same forward and backward FLOPs as torch's ``FlopCounterMode`` on one training step, at two sequence lengths.

Parallel blocks (GPT-J, GPT-NeoX, Phi-1/2, Falcon, StableLM), partial rotary (rotary_pct, rotary_dim,
partial_rotary_factor), a LayerNorm without parameters (OLMo), fused projections (GPT-NeoX's and Falcon's
query_key_value, Phi-3's qkv_proj and gate_up_proj: one product of the widths they join, the same FLOPs as trainingcost's
separate ones).
Two families run another attention kernel in transformers (Falcon's multi-query attention: SDPA's math path; Gemma 2
uncapped: eager attention); `estimate --hf-config` says so in one line, and the test checks the difference it states.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from trainingcost.analytic import layer_table
from trainingcost.analytic.memory import memory_table
from trainingcost.config import ConfigError, canonical_model, configs_frame
from trainingcost.config.hf import FALCON_FUSED_FROM, check_window, hf_entry, transformers_attention, with_overrides
from trainingcost.measure.flops import CPU_SDPA_FORMULAS

transformers = pytest.importorskip("transformers")

B = 2
LENGTHS = (7, 12)  # two sequence lengths per family


def _raw(formula):
    def counted(*args, **kwargs):
        return formula(*args, **kwargs)
    counted._get_raw = True
    return counted


CPU_ATTENTION = {op: _raw(formula) for op, formula in CPU_SDPA_FORMULAS.items()}
SMALL = dict(vocab_size=61, attn_implementation="sdpa")
# a config.json of the keys a family must have, the rest left to its class's defaults (SPARSE_CONFIGS, below)
SPARSE = dict(hidden_size=256, intermediate_size=320, num_hidden_layers=2, num_attention_heads=4, vocab_size=97,
              max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _model(config_class: str, model_class: str, **keys):
    def build():
        config = getattr(transformers, config_class)(**{**SMALL, **keys})
        return config, getattr(transformers, model_class)(config)
    return build


NEOX = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=48,
            max_position_embeddings=64)
PHI = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=40, max_position_embeddings=64)
FALCON = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=64)

MODELS = {
    "gpt_neox": _model("GPTNeoXConfig", "GPTNeoXForCausalLM", **NEOX, rotary_pct=0.5),
    "gpt_neox:sequential": _model("GPTNeoXConfig", "GPTNeoXForCausalLM", **NEOX, use_parallel_residual=False,
                                  attention_bias=False, tie_word_embeddings=True),
    "gptj": _model("GPTJConfig", "GPTJForCausalLM", n_embd=32, n_head=4, n_layer=2, n_positions=64, rotary_dim=4),
    "phi": _model("PhiConfig", "PhiForCausalLM", **PHI, partial_rotary_factor=0.5),
    "phi:gqa": _model("PhiConfig", "PhiForCausalLM", **PHI, num_key_value_heads=2, partial_rotary_factor=0.25),
    "falcon": _model("FalconConfig", "FalconForCausalLM", **FALCON),  # falcon-7b's kind: multi-query, one norm
    "falcon:new": _model("FalconConfig", "FalconForCausalLM", **FALCON, new_decoder_architecture=True, num_kv_heads=2,
                         bias=True),
    "falcon:sequential": _model("FalconConfig", "FalconForCausalLM", **FALCON, parallel_attn=False,
                                multi_query=False, tie_word_embeddings=False),
    "stablelm": _model("StableLmConfig", "StableLmForCausalLM", **PHI, num_key_value_heads=2, partial_rotary_factor=0.5),
    "stablelm:parallel": _model("StableLmConfig", "StableLmForCausalLM", **PHI, num_key_value_heads=4, use_parallel_residual=True,
                                use_qkv_bias=True),
    "olmo": _model("OlmoConfig", "OlmoForCausalLM", **PHI, num_key_value_heads=2),
    "olmo:attention_bias": _model("OlmoConfig", "OlmoForCausalLM", **PHI, attention_bias=True, clip_qkv=8.0,
                                  tie_word_embeddings=True),
    "starcoder2": _model("Starcoder2Config", "Starcoder2ForCausalLM", **PHI, num_key_value_heads=2),
    "starcoder2:no_bias": _model("Starcoder2Config", "Starcoder2ForCausalLM", **PHI, num_key_value_heads=1,
                                 use_bias=False, tie_word_embeddings=False),
    "phi3": _model("Phi3Config", "Phi3ForCausalLM", **PHI, num_key_value_heads=2, pad_token_id=0),
    "phi3:partial": _model("Phi3Config", "Phi3ForCausalLM", **PHI, partial_rotary_factor=0.5, pad_token_id=0),
    # Sliding windows of 4 positions over both lengths: transformers masks SDPA, which runs the dense product
    "mistral:window": _model("MistralConfig", "MistralForCausalLM", **PHI, num_key_value_heads=2, sliding_window=4),
    "qwen2:window": _model("Qwen2Config", "Qwen2ForCausalLM", **PHI, num_key_value_heads=2, use_sliding_window=True,
                           sliding_window=4, max_window_layers=0),
    "starcoder2:window": _model("Starcoder2Config", "Starcoder2ForCausalLM", **PHI, num_key_value_heads=2,
                                sliding_window=4),
    "phi3:window": _model("Phi3Config", "Phi3ForCausalLM", **PHI, sliding_window=4, pad_token_id=0),
    # Gemma: the embedding scaled by sqrt(d), GeGLU (tanh), heads 12 wide beside d 32, one key/value head, tied
    "gemma": _model("GemmaConfig", "GemmaForCausalLM", **PHI, num_key_value_heads=1, head_dim=12),
    "gemma:gqa": _model("GemmaConfig", "GemmaForCausalLM", **PHI, num_key_value_heads=2, head_dim=8,
                        attention_bias=True),
    # Gemma 2: Gemma's block with a norm after each branch too, scores soft-capped and scaled by query_pre_attn_scalar,
    # logits soft-capped, local (a window of 4) and global layers alternating. transformers runs Gemma 2 on its eager
    # attention only (_supports_sdpa = False: SDPA cannot cap), as trainingcost's model runs soft-capped attention.
    "gemma2:window": _model("Gemma2Config", "Gemma2ForCausalLM", **{**PHI, "num_hidden_layers": 3}, num_key_value_heads=2,
                            head_dim=12, sliding_window=4, query_pre_attn_scalar=16, attn_implementation="eager"),
    "gemma2:uncapped:window": _model("Gemma2Config", "Gemma2ForCausalLM", **PHI, num_key_value_heads=1, head_dim=8,
                                     sliding_window=4, attn_logit_softcapping=None, final_logit_softcapping=None,
                                     attention_bias=True, attn_implementation="eager"),
    # Qwen3: Llama's block with an RMSNorm on each head of q and k (q_norm, k_norm), heads 12 wide beside d 32, the
    # four products of attention biased where attention_bias
    "qwen3": _model("Qwen3Config", "Qwen3ForCausalLM", **PHI, num_key_value_heads=2, head_dim=12),
    "qwen3:attention_bias": _model("Qwen3Config", "Qwen3ForCausalLM", **PHI, num_key_value_heads=1, head_dim=8,
                                   attention_bias=True, tie_word_embeddings=True),
    # Gemma 3's text model: Gemma 2's block with q and k normalised per head, no soft-capping, one global layer in
    # three here (sliding_window_pattern 6 by default), SDPA
    # OLMo 2: the norm on each branch's output and none on its input, q and k normalised over each whole projection
    "olmo2": _model("Olmo2Config", "Olmo2ForCausalLM", **PHI, num_key_value_heads=2),
    "olmo2:attention_bias": _model("Olmo2Config", "Olmo2ForCausalLM", **PHI, attention_bias=True,
                                   tie_word_embeddings=True),
    "gemma3_text:window": _model("Gemma3TextConfig", "Gemma3ForCausalLM", **{**PHI, "num_hidden_layers": 3},
                                 num_key_value_heads=2, head_dim=12, sliding_window=4, query_pre_attn_scalar=16,
                                 layer_types=["sliding_attention", "sliding_attention", "full_attention"]),
    # Granite: Llama's block and biases with scalars on the embedding, each branch, the scores and the logits
    "granite": _model("GraniteConfig", "GraniteForCausalLM", **PHI, num_key_value_heads=2, attention_bias=True,
                      mlp_bias=True, embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0156,
                      logits_scaling=8.0),
    # SmolLM3: Llama's block, the head tied, no rotary positions on every fourth layer (the fourth of four here)
    "smollm3": _model("SmolLM3Config", "SmolLM3ForCausalLM", **{**PHI, "num_hidden_layers": 4}, num_key_value_heads=2,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2),
    # GLM-4: a norm before and after each branch, q, k and v biased, half of each head turned (interleaved)
    "glm4": _model("Glm4Config", "Glm4ForCausalLM", **PHI, num_key_value_heads=2, head_dim=12, pad_token_id=0,
                   eos_token_id=2),
    "glm4:no_bias": _model("Glm4Config", "Glm4ForCausalLM", **PHI, num_key_value_heads=1, head_dim=8,
                           attention_bias=False, tie_word_embeddings=True, pad_token_id=0, eos_token_id=2),
    # The 2025-26 families of config/hf_recent.py. Seed-OSS: q, k, v biased, o and the MLP as their own keys say
    "seed_oss": _model("SeedOssConfig", "SeedOssForCausalLM", **PHI, num_key_value_heads=2, head_dim=12,
                       attention_dropout=0.0, residual_dropout=0.0),
    "seed_oss:all_bias": _model("SeedOssConfig", "SeedOssForCausalLM", **PHI, num_key_value_heads=1, head_dim=8,
                                attention_out_bias=True, mlp_bias=True, attention_dropout=0.0, residual_dropout=0.0,
                                tie_word_embeddings=True),
    # ERNIE 4.5's dense model: every product biased where use_bias, the head tied by default
    "ernie4_5": _model("Ernie4_5Config", "Ernie4_5ForCausalLM", **PHI, num_key_value_heads=2, head_dim=12),
    "ernie4_5:use_bias": _model("Ernie4_5Config", "Ernie4_5ForCausalLM", **PHI, num_key_value_heads=1, head_dim=8,
                                use_bias=True, tie_word_embeddings=False),
    # Hunyuan dense: q and k normalised per head, attention biased where attention_bias
    "hunyuan_v1_dense": _model("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", **PHI, num_key_value_heads=2,
                               head_dim=12, attention_bias=True),  # (transformers' model needs head_dim written)
    # Ministral: a window on every layer (4 positions: masked over both lengths); Ministral 3: none by default
    "ministral:window": _model("MinistralConfig", "MinistralForCausalLM", **PHI, num_key_value_heads=2, head_dim=8,
                               sliding_window=4),  # (transformers' model needs head_dim written)
    "ministral3": _model("Ministral3Config", "Ministral3ForCausalLM", **PHI, num_key_value_heads=2, head_dim=12),
    # OLMo 3: OLMo 2's block, three windowed layers to one global (layer_types absent)
    "olmo3:window": _model("Olmo3Config", "Olmo3ForCausalLM", **{**PHI, "num_hidden_layers": 4}, num_key_value_heads=2,
                           sliding_window=4),
    # Cohere: one LayerNorm with a gain and no bias read by both parallel branches, attention biased, the head tied
    "cohere": _model("CohereConfig", "CohereForCausalLM", **PHI, num_key_value_heads=2, attention_bias=True,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2),
    # Command R7B / A: Cohere's block, three windowed layers to one global
    "cohere2:window": _model("Cohere2Config", "Cohere2ForCausalLM", **{**PHI, "num_hidden_layers": 4},
                             num_key_value_heads=2, sliding_window=4, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    # EXAONE 4.0: norms on the branches' outputs, q and k per head, one global layer in sliding_window_pattern
    "exaone4:window": _model("Exaone4Config", "Exaone4ForCausalLM", **{**PHI, "num_hidden_layers": 4},
                             num_key_value_heads=2, sliding_window=4, sliding_window_pattern=2),
}
ENCODER_DECODER = {  # T5 v1.1: gated GELU, the stacks sharing one table, the head its own
    "t5:v1.1": lambda: (lambda c: (c, transformers.T5ForConditionalGeneration(c)))(transformers.T5Config(
        d_model=32, d_kv=8, d_ff=40, num_layers=2, num_decoder_layers=1, num_heads=4, vocab_size=61,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0, pad_token_id=0,
        dropout_rate=0.0, feed_forward_proj="gated-gelu", tie_word_embeddings=False, attn_implementation="sdpa")),
}
MODELS.update(ENCODER_DECODER)
WINDOWED = {name for name in MODELS if name.endswith(":window")}


def hf_step_flops(model, config, length: int) -> int:
    torch.manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (B, length))
    labels = torch.randint(0, config.vocab_size, (B, length - 2)) if config.is_encoder_decoder else ids
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        model(input_ids=ids, labels=labels).loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("model_type", sorted(MODELS))
def test_parameters_and_executed_flops_equal_the_hugging_face_model(model_type):
    config, model = MODELS[model_type]()
    data = config.to_dict()
    assert data["model_type"] == model_type.split(":")[0]
    untied = 0  # parameters of a head transformers ties where the model's own config.json unties it
    if model_type == "t5:v1.1":
        # google/t5-v1_1-*'s config.json writes tie_word_embeddings false: the checkpoint has its own lm_head (and
        # transformers 4 builds it). transformers 5 ties T5's head always (configuration_t5.py: "we tie weights always
        # and force it to be True"), keeping only the flag's other meaning (no rescaled decoder output). trainingcost
        # reads the file as written; the products, and so the FLOPs, are the same either way.
        data["tie_word_embeddings"] = False
        if model.lm_head.weight is model.shared.weight:
            untied = config.vocab_size * config.d_model
    for length in LENGTHS:
        lengths = {"seq_len": length, "tgt_len": length - 2} if data.get("is_encoder_decoder") else {"seq_len": length}
        cfg = canonical_model(check_window(with_overrides(hf_entry(data), {**lengths, "batch": B}), "test"))
        assert cfg.sliding_window == (4 if model_type in WINDOWED else 0), cfg.options()
        assert cfg.shared_embedding == (model_type == "t5:v1.1") and cfg.tie_embeddings != cfg.shared_embedding or \
            not cfg.encdec, cfg.options()
        frame = configs_frame([("", cfg)])
        assert int(memory_table(frame, ["bp"]).parameter_count.iloc[0]) == model.num_parameters() + untied
        executed = int(layer_table(frame, ["bp"], ["executed"]).flops.sum())
        # Where transformers runs another attention kernel than the fused one trainingcost prices (Falcon's
        # multi-query attention: SDPA's math path; Gemma 2 uncapped: eager attention), `estimate --hf-config` says so
        # and states the difference (config/hf.py, attention_note): four batched products backward (8 M N a), not the
        # fused kernel's 10 M N a. Every other family: the same FLOPs exactly.
        installed = tuple(int(part) for part in transformers.__version__.split(".")[:2])
        other = transformers_attention(data, installed)
        math_path = ("falcon",) if installed < FALCON_FUSED_FROM else ()
        assert (other is not None) == (model_type in (*math_path, "gemma2:uncapped:window")), (model_type, other)
        terms = -cfg.dec_layers * 2 * B * length * length * cfg.attn_width if other else 0
        assert hf_step_flops(model, config, length) - executed == terms, (model_type, length, cfg.options())


# -- config.json files as transformers writes them, and as the hub holds them -----------------------------------------
PUBLISHED = {  # the presets' config.json keys (the hub's files; older key names: rotary_pct, rotary_dim)
    "pythia-1.4b": dict(model_type="gpt_neox", hidden_size=2048, intermediate_size=8192, num_attention_heads=16,
                        num_hidden_layers=24, rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=2048,
                        vocab_size=50304, use_parallel_residual=True, tie_word_embeddings=False, hidden_act="gelu"),
    "gpt-j-6b": dict(model_type="gptj", n_embd=4096, n_head=16, n_layer=28, n_positions=2048, rotary_dim=64,
                     vocab_size=50400, activation_function="gelu_new", n_inner=None),
    "phi-2": dict(model_type="phi", hidden_size=2560, intermediate_size=10240, num_attention_heads=32,
                  num_hidden_layers=32, partial_rotary_factor=0.4, vocab_size=51200, max_position_embeddings=2048,
                  hidden_act="gelu_new", num_key_value_heads=None, qk_layernorm=False),
    "falcon-7b": dict(model_type="falcon", hidden_size=4544, num_attention_heads=71, num_hidden_layers=32,
                      multi_query=True, parallel_attn=True, bias=False, alibi=False, new_decoder_architecture=False,
                      vocab_size=65024),
    "olmo-1b": dict(model_type="olmo", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=16, num_key_value_heads=16, vocab_size=50304, max_position_embeddings=2048,
                    tie_word_embeddings=True, attention_bias=False, clip_qkv=None, hidden_act="silu"),
    "starcoder2-3b": dict(model_type="starcoder2", hidden_size=3072, intermediate_size=12288, num_hidden_layers=30,
                          num_attention_heads=24, num_key_value_heads=2, vocab_size=49152,
                          max_position_embeddings=16384, sliding_window=4096, use_bias=True,
                          hidden_act="gelu_pytorch_tanh"),
    "phi-3-mini-4k": dict(model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                          num_attention_heads=32, num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096,
                          sliding_window=2047, tie_word_embeddings=False, hidden_act="silu"),
    "stablelm-2-1.6b": dict(model_type="stablelm", hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                            num_attention_heads=32, num_key_value_heads=32, vocab_size=100352,
                            max_position_embeddings=4096, partial_rotary_factor=0.25, use_qkv_bias=True,
                            tie_word_embeddings=False, hidden_act="silu"),
    "t5-v1.1-small": dict(model_type="t5", d_model=512, d_ff=1024, d_kv=64, num_heads=6, num_layers=8,
                          num_decoder_layers=8, vocab_size=32128, feed_forward_proj="gated-gelu",
                          tie_word_embeddings=False, relative_attention_num_buckets=32, is_encoder_decoder=True),
    "gemma-2b": dict(model_type="gemma", hidden_size=2048, intermediate_size=16384, num_hidden_layers=18,
                     num_attention_heads=8, num_key_value_heads=1, head_dim=256, vocab_size=256000,
                     max_position_embeddings=8192, hidden_act="gelu_pytorch_tanh"),
    "gemma-7b": dict(model_type="gemma", hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                     num_attention_heads=16, num_key_value_heads=16, head_dim=256, vocab_size=256000,
                     max_position_embeddings=8192, hidden_act="gelu_pytorch_tanh"),
    # Qwen/Qwen3-8B's and Qwen/Qwen3-30B-A3B's config.json (the keys that matter; num_experts as the hub writes it)
    "qwen3-8b": dict(model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     max_position_embeddings=40960, tie_word_embeddings=False, attention_bias=False,
                     use_sliding_window=False, sliding_window=None, max_window_layers=36, hidden_act="silu"),
    "qwen3-30b-a3b": dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
                          num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936,
                          max_position_embeddings=40960, tie_word_embeddings=False, attention_bias=False,
                          use_sliding_window=False, sliding_window=None, max_window_layers=48, hidden_act="silu",
                          decoder_sparse_step=1, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                          norm_topk_prob=True, mlp_only_layers=[]),
    # allenai/OLMo-2-1124-7B's and -13B's config.json (the keys that matter)
    "olmo2-7b": dict(model_type="olmo2", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, vocab_size=100352, max_position_embeddings=4096,
                     rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=False, hidden_act="silu",
                     rope_theta=500000),
    "olmo2-13b": dict(model_type="olmo2", hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                      num_attention_heads=40, num_key_value_heads=40, vocab_size=100352, max_position_embeddings=4096,
                      rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=False, hidden_act="silu",
                      rope_theta=500000),
    # allenai/OLMoE-1B-7B-0924's config.json (the keys that matter)
    "olmoe-1b-7b": dict(model_type="olmoe", hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
                        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
                        norm_topk_prob=False, vocab_size=50304, max_position_embeddings=4096, rms_norm_eps=1e-5,
                        attention_bias=False, tie_word_embeddings=False, hidden_act="silu", clip_qkv=None),
    # google/gemma-2-2b and google/gemma-2-9b's config.json (the keys that matter; layer_types absent: alternating)
    "gemma-2-2b": dict(model_type="gemma2", hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                       num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
                       max_position_embeddings=8192, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256,
                       sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
    "gemma-2-9b": dict(model_type="gemma2", hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=256, vocab_size=256000,
                       max_position_embeddings=8192, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256,
                       sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_published_config_json_reads_as_its_preset(name):
    """The file's shape is the preset's, and a plan of the file trains at the preset's length (its served context
    where that is longer: Qwen3's 40,960, Qwen2.5's 32,768 against their 4,096-token pretraining)."""
    from trainingcost.config import PRESETS
    from trainingcost.config.hf import preset_of, training_length

    entry = hf_entry(PUBLISHED[name])
    assert preset_of(entry) == name
    length, note = training_length(PUBLISHED[name], entry.get("seq_len"), entry.get("positions"), entry)
    if length is not None:
        assert note.startswith(f"seq_len {length}: the pretraining length of {name}, the preset of this shape")
        entry = {**entry, "seq_len": length}
    assert canonical_model(entry).config_id == canonical_model(PRESETS[name]).config_id


@pytest.mark.parametrize("data, message", [
    (dict(PUBLISHED["falcon-7b"], alibi=True), "alibi: ALiBi positions are not supported"),
    (dict(PUBLISHED["phi-2"], qk_layernorm=True), "qk_layernorm: norms on the queries and keys are not supported"),
    (dict(PUBLISHED["falcon-7b"], new_decoder_architecture=True, parallel_attn=False), "parallel_attn: false with "),
    (dict(PUBLISHED["pythia-1.4b"], rotary_pct=0.2), "rotary_pct: turns 25 features of a 128-wide head"),
    (dict(PUBLISHED["gpt-j-6b"], rotary_dim=512), "rotary_dim: turns 512 features of a 256-wide head"),
    (dict(PUBLISHED["gemma-2-2b"], layer_types=["full_attention", "sliding_attention"] * 13),
     "layer_types: global layers other than every n-th are not supported"),
    (dict(PUBLISHED["gemma-2-2b"], attn_logit_softcapping="50"), "attn_logit_softcapping: '50' is not a positive number"),
    (dict(PUBLISHED["qwen3-30b-a3b"], mlp_only_layers=[0]), "mlp_only_layers: dense MLP layers among the sparse ones"),
    (dict(PUBLISHED["gemma-2-2b"], model_type="gemma3"), "model_type: 'gemma3' is Gemma 3's multimodal model"),
    (dict(SPARSE, model_type="seed_oss", num_attention_heads=16, attention_bias=False, attention_out_bias=True),
     "attention_out_bias: attention_bias False, attention_out_bias True and mlp_bias False together are not supported"),
    (dict(SPARSE, model_type="olmo3", layer_types=["full_attention", "sliding_attention"]),
     "layer_types: global layers other than every n-th are not supported"),
    (dict(SPARSE, model_type="olmo3", layer_types=["sliding_attention"]), "layer_types: ['sliding_attention'] is not a "
     "list of 2 full_attention and sliding_attention"),
    (dict(SPARSE, model_type="olmo3", layer_types=[["x"], {}]), "layer_types: [['x'], {}] is not a list of 2"),
    (dict(SPARSE, model_type="cohere", use_qk_norm=True), "use_qk_norm: a LayerNorm per head of q and k"),
    (dict(SPARSE, model_type="exaone4", num_attention_heads=32, sliding_window_pattern="LLLG"),
     "sliding_window_pattern: 'LLLG' is not supported (supported: a positive integer, or layer_types)"),
])
def test_unsupported_variants_get_one_line(data, message):
    with pytest.raises(ConfigError) as err:
        hf_entry(data, "config.json")
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)


# google/gemma-3-4b-it's and -12b-it's config.json: the text_config as the hub holds it, which transformers wrote as
# its difference from Gemma3TextConfig's defaults (no heads, head_dim, vocabulary or context)
GEMMA3_TEXT_CONFIGS = {
    "gemma-3-4b": dict(hidden_size=2560, intermediate_size=10240, model_type="gemma3_text", num_hidden_layers=34,
                       rope_scaling={"factor": 8.0, "rope_type": "linear"}, sliding_window=1024),
    "gemma-3-12b": dict(hidden_size=3840, intermediate_size=15360, model_type="gemma3_text", num_attention_heads=16,
                        num_hidden_layers=48, num_key_value_heads=8, rope_scaling={"factor": 8.0, "rope_type": "linear"},
                        sliding_window=1024),
}


# config.json files that leave keys to the class's defaults (a hand-written file, or transformers' difference from
# them): the count must be the one transformers builds from the same dict
SPARSE_CONFIGS = {
    "smollm3": dict(SPARSE, model_type="smollm3"),  # SmolLM3Config: 4 key/value heads, the head tied
    "smollm3:null_kv": dict(SPARSE, model_type="smollm3", num_key_value_heads=None),  # null: every head its own
    "glm4": dict(SPARSE, model_type="glm4"),  # Glm4Config: 2 key/value heads, head_dim 128, q/k/v biased, half turned
    "glm4:head_dim_64": dict(SPARSE, model_type="glm4", hidden_size=512, num_attention_heads=4, head_dim=64),
    "granite": dict(SPARSE, model_type="granite", embedding_multiplier=12.0),  # every head its own, untied
    "granite:tied": dict(SPARSE, model_type="granite", tie_word_embeddings=True, attention_bias=True, mlp_bias=True),
    "qwen3": dict(SPARSE, model_type="qwen3", num_attention_heads=32),  # Qwen3Config: 32 key/value heads, head_dim 128
    "mistral": dict(SPARSE, model_type="mistral", num_attention_heads=16),  # MistralConfig: 8 key/value heads
    "gemma2": dict(SPARSE, model_type="gemma2"),  # Gemma2Config: 4 key/value heads of 256
    # config/hf_recent.py's families: their classes' numbers for the keys left out
    "seed_oss": dict(SPARSE, model_type="seed_oss", num_attention_heads=16),  # 8 key/value heads of 128, q/k/v biased
    "ernie4_5": dict(SPARSE, model_type="ernie4_5"),  # Ernie4_5Config: 2 key/value heads of 128, the head tied
    "ministral3": dict(SPARSE, model_type="ministral3", num_attention_heads=16),  # 8 key/value heads of 128
    "olmo3": dict(SPARSE, model_type="olmo3", num_hidden_layers=4),  # every head its own, a window but every 4th
    "exaone4": dict(SPARSE, model_type="exaone4", num_attention_heads=32, num_hidden_layers=4),  # 32 key/value heads
    "cohere2": dict(SPARSE, model_type="cohere2", num_hidden_layers=4, head_dim=32),  # every head its own, tied
    # Tencent's dense Hunyuan files carry the MoE template's num_experts, which HunYuanDenseV1 ignores
    "hunyuan_v1_dense": dict(SPARSE, model_type="hunyuan_v1_dense", head_dim=64, num_experts=1),
}


@pytest.mark.parametrize("name", sorted(SPARSE_CONFIGS))
def test_a_config_json_that_leaves_keys_out_counts_as_transformers_reads_it(name):
    data = SPARSE_CONFIGS[name]
    config = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    cfg = canonical_model(hf_entry(dict(data), "config.json"))
    assert int(memory_table(configs_frame([("", cfg)]), ["bp"]).parameter_count.iloc[0]) == model.num_parameters()
    assert cfg.kv_heads == config.num_key_value_heads and cfg.tie_embeddings == config.tie_word_embeddings


def test_an_absent_key_value_count_that_cannot_serve_the_heads_is_one_line():
    """Qwen2Config's 32 key/value heads for a file with 28 heads and no num_key_value_heads: refused, naming the key."""
    with pytest.raises(ConfigError, match=r"num_key_value_heads: absent, so the class's 32, which does not divide "
                                          r"num_attention_heads 28") as err:
        hf_entry(dict(SPARSE, model_type="qwen2", num_attention_heads=28, hidden_size=3584), "config.json")
    assert "\n" not in str(err.value)


def test_glm4_refuses_a_null_head_dim_in_one_line():
    with pytest.raises(ConfigError, match=r"head_dim: null is not supported") as err:
        hf_entry(dict(SPARSE, model_type="glm4", head_dim=None), "config.json")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", sorted(GEMMA3_TEXT_CONFIGS))
def test_a_gemma3_text_config_as_shipped_counts_as_transformers_reads_it(name):
    """The keys the file leaves out take Gemma3TextConfig's values (8 heads, 4 of keys and values, head_dim 256 where
    d / heads would be 320, a vocabulary of 262,208): the parameters of the model transformers builds from the same
    dict (on the meta device: no weights), 3,880,263,168 for the 4B."""
    data = GEMMA3_TEXT_CONFIGS[name]
    cfg = canonical_model(hf_entry(data, "config.json"))
    assert (cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.vocab) == (data.get("num_attention_heads", 8),
                                                                  data.get("num_key_value_heads", 4), 256, 262208)
    config = transformers.Gemma3TextConfig(**{k: v for k, v in data.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.Gemma3ForCausalLM(config)
    ours = int(memory_table(configs_frame([("", cfg)]), ["bp"]).parameter_count.iloc[0])
    assert ours == model.num_parameters()
    if name == "gemma-3-4b":
        assert ours == 3_880_263_168
    # the context it serves is the class's 131,072 (rope_scaling linear, no original length stated): planned at a
    # pretraining length, and the note says why though the file names no max_position_embeddings
    from trainingcost.config.hf import length_note

    assert "seq_len 8192: a pretraining length" in length_note(data, None)


def test_estimate_names_the_attention_kernel_where_transformers_runs_another(tmp_path, capsys):
    """Issue 39: `estimate --hf-config` on falcon-7b priced the fused kernel's backward without a word; it now says
    which kernel it prices and by how much transformers' own step differs. A family that runs the fused kernel in
    transformers gets no such line."""
    import json

    from trainingcost.cli import main

    outputs = {}
    for name in ("falcon-7b", "gemma-2b", "starcoder2-3b"):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(PUBLISHED[name]))
        assert main(["estimate", "--hf-config", str(path), "--seq-len", "2048", "--batch", "1", "--rule", "bp"]) == 0
        outputs[name] = " ".join(capsys.readouterr().out.split())
    assert "attention: priced as torch's fused SDPA kernel" in outputs["falcon-7b"]
    assert "torch's math path" in outputs["falcon-7b"]
    # 2 B M N a per layer: 2 x 1 x 2048^2 x 4544 x 32 fewer FLOPs in transformers' step
    assert f"its BP step has {2 * 2048 * 2048 * 4544 * 32:.3g} fewer FLOPs" in outputs["falcon-7b"]
    assert not any("attention: priced as" in outputs[name] for name in ("gemma-2b", "starcoder2-3b"))


def test_olmo2_computes_transformers_function():
    """norm_position output and qk_norm projection are OLMo 2's block, not only its costs: with transformers' weights
    (the norms' gains moved off 1), trainingcost's model gives Olmo2ForCausalLM's logits (eps as ours, 1e-6)."""
    import torch

    from trainingcost.train.model import Transformer

    torch.manual_seed(0)
    config = transformers.Olmo2Config(**{**PHI, "vocab_size": 61}, num_key_value_heads=2, rms_norm_eps=1e-6,
                                      eos_token_id=None, pad_token_id=None, attn_implementation="sdpa")
    theirs = transformers.Olmo2ForCausalLM(config).eval()
    ours = Transformer(canonical_model({**hf_entry(config.to_dict()), "batch": 2, "seq_len": 7}, "")).eval()
    own = {"decoder.embedding.weight": "model.embed_tokens.weight", "decoder.final_norm.weight": "model.norm.weight",
           "head.weight": "lm_head.weight"}
    renamed = [("self_attention_norm.norm", "post_attention_layernorm"), ("ffn_norm.norm", "post_feedforward_layernorm"),
               ("self_attention.", "self_attn."), ("ffn.", "mlp.")] + \
        [(f"self_attn.{p}.", f"self_attn.{p}_proj.") for p in "qkvo"] + [(f"mlp.{p}.", f"mlp.{p}_proj.") for p in ("gate", "up", "down")]
    source = dict(theirs.named_parameters())
    with torch.no_grad():
        for name, parameter in ours.named_parameters():
            if name not in own:
                _, index, rest = name.split(".", 2)
                for old, new in renamed:
                    rest = rest.replace(old, new)
                own[name] = f"model.layers.{index}.{rest}"
            parameter.copy_(source[own[name]] + 0.1 * torch.randn_like(parameter))
            source[own[name]].copy_(parameter)
        assert len(own) == len(source)
        tokens = torch.randint(0, 61, (2, 7))
        assert torch.allclose(ours({"decoder": tokens}), theirs(input_ids=tokens).logits, atol=1e-5, rtol=0)


def test_the_training_length_reads_transformers_5s_rope_parameters():
    """transformers 5 writes original_max_position_embeddings inside rope_parameters (flat, or one dict per layer type,
    as OLMo 3's): a plan trains at that length, not at the served context, as it does from rope_scaling."""
    from trainingcost.config.hf import training_length

    flat = dict(SPARSE, model_type="ministral3", max_position_embeddings=262144,
                rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16384})
    per_type = dict(SPARSE, model_type="olmo3", max_position_embeddings=65536,
                    rope_parameters={"sliding_attention": {"rope_type": "default"},
                                     "full_attention": {"rope_type": "yarn", "original_max_position_embeddings": 8192}})
    assert training_length(flat, 262144, "rotary")[0] == 16384
    assert training_length(per_type, 65536, "rotary")[0] == 8192
    assert "rope_parameters.original_max_position_embeddings" in training_length(flat, 262144, "rotary")[1]
