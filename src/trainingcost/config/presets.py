"""Named model shapes with their published dimensions.

Sequence lengths are the lengths the models were pretrained at, each cited (the
Transformer paper fixes none; we use 512 as for BERT and T5); for most that is
their published context, for those whose context was extended at the end of
pretraining (Qwen2.5, Qwen3) the length before it. A config.json of a preset's
shape plans at the preset's length (config/hf.py, training_length). Batch
defaults to 1 sequence. Shapes only: no weights are ever loaded.
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    # Pau & Aymone 2024, section 6: a one-block encoder-only model. The paper gives
    # the structure but no sizes; we fill in the base Transformer's sizes.
    "paper-example": dict(
        arch="encoder", layers=1, d_model=512, heads=8, d_ff=2048, vocab=37000, seq_len=512
    ),
    # Vaswani et al. 2017, base model: 6+6 layers, shared source/target vocabulary of 37000.
    "vaswani-base": dict(
        arch="encoder-decoder",
        enc_layers=6,
        dec_layers=6,
        d_model=512,
        heads=8,
        d_ff=2048,
        vocab=37000,
        seq_len=512,
        tgt_len=512,
    ),
    # Devlin et al. 2019, as Hugging Face's BertForMaskedLM (bert-base-uncased): post-LN, word + token-type +
    # learned position embeddings and their LayerNorm, the MLM decoder tied to the word embeddings with its own
    # bias. 108,922,170 parameters: BertForMaskedLM's 109,514,298 without the MLM transform (a 768 x 768 dense
    # layer and a LayerNorm, 592,128), which trainingcost does not model; the paper's "110M" is BertModel's
    # 109,482,240 (with the pooler, without the MLM head).
    "bert-base": dict(arch="encoder", layers=12, d_model=768, heads=12, d_ff=3072, vocab=30522, seq_len=512,
                      positions="learned", type_vocab=2, embedding_norm=True, tie_embeddings=True),
    # Sanh et al. 2019: BERT-base with half the layers (the 2017 transformer's shape; not the exact model).
    "distilbert": dict(arch="encoder", layers=6, d_model=768, heads=12, d_ff=3072, vocab=30522, seq_len=512),
    # Radford et al. 2019, the 124M model (Hugging Face gpt2): pre-LN with a final LayerNorm, learned positions,
    # the head tied to the token embedding and without bias. 124,439,808 parameters.
    "gpt2-small": dict(arch="decoder", layers=12, d_model=768, heads=12, d_ff=3072, vocab=50257, seq_len=1024,
                       norm_position="pre", positions="learned", tie_embeddings=True, head_bias=False),
    # Radford et al. 2019, the 1.5B model (Hugging Face gpt2-xl): gpt2-small's blocks, 48 of width 1600 with 25 heads.
    # 1,557,611,200 parameters.
    "gpt2-xl": dict(arch="decoder", layers=48, d_model=1600, heads=25, d_ff=6400, vocab=50257, seq_len=1024,
                    norm_position="pre", positions="learned", tie_embeddings=True, head_bias=False),
    # Brown et al. 2020 (GPT-3 175B), Table 2.1: 96 layers, d_model 12288, 96 heads of 128, context 2048; GPT-2's
    # blocks (the sparse attention layers GPT-3 alternates with dense ones are priced dense here) and vocabulary.
    # trainingcost counts 174,604,259,328 parameters; the paper rounds to 175.0B and publishes no exact count.
    "gpt3-175b": dict(arch="decoder", layers=96, d_model=12288, heads=96, d_ff=49152, vocab=50257, seq_len=2048,
                      norm_position="pre", positions="learned", tie_embeddings=True, head_bias=False),
    # Raffel et al. 2020, Hugging Face t5-small (T5ForConditionalGeneration): pre-RMSNorm, ReLU, no biases, a relative
    # position bias per stack (32 buckets, distance 128), one embedding shared by both stacks and the head.
    # 60,506,624 parameters.
    "t5-small": dict(arch="encoder-decoder", enc_layers=6, dec_layers=6, d_model=512, heads=8, d_ff=2048, vocab=32128,
                     seq_len=512, tgt_len=512, norm="rmsnorm", norm_position="pre", ffn="relu", positions="relative",
                     tie_embeddings=True, bias="none"),
    # Touvron et al. 2023 (Llama 2), Hugging Face meta-llama/Llama-2-7b-hf: pre-RMSNorm, SwiGLU, rotary positions,
    # no biases, an untied head. 6,738,415,616 parameters.
    "llama-2-7b": dict(arch="decoder", layers=32, d_model=4096, heads=32, d_ff=11008, vocab=32000, seq_len=4096,
                       norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none"),
    # Touvron et al. 2023 (Llama 2), meta-llama/Llama-2-13b-hf and Llama-2-70b-hf: Llama 2 7B's blocks, wider; the 70B
    # with 8 key/value heads (grouped-query attention). 13,015,864,320 and 68,976,648,192 parameters.
    "llama-2-13b": dict(arch="decoder", layers=40, d_model=5120, heads=40, d_ff=13824, vocab=32000, seq_len=4096,
                        norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none"),
    "llama-2-70b": dict(arch="decoder", layers=80, d_model=8192, heads=64, kv_heads=8, d_ff=28672, vocab=32000,
                        seq_len=4096, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none"),
    # Meta 2024 (Llama 3), meta-llama/Meta-Llama-3-8B: as Llama 2 with 8 key/value heads and a 128,256 vocabulary.
    # 8,030,261,248 parameters.
    "llama-3-8b": dict(arch="decoder", layers=32, d_model=4096, heads=32, kv_heads=8, d_ff=14336, vocab=128256,
                       seq_len=8192, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none"),
    # Jiang et al. 2023 (Mistral 7B), mistralai/Mistral-7B-v0.1: Llama's blocks with 8 key/value heads and a
    # 4,096-token sliding window, which masks nothing at the 4,096-token sequence used here (a longer --seq-len keeps
    # it: the option sliding_window). 7,241,732,096 parameters.
    "mistral-7b": dict(arch="decoder", layers=32, d_model=4096, heads=32, kv_heads=8, d_ff=14336, vocab=32000,
                       seq_len=4096, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                       sliding_window=4096),
    # Qwen team 2024 (Qwen2.5), Qwen/Qwen2.5-0.5B: 14 query and 2 key/value heads of 64, biases on q, k and v only,
    # the head tied to the embedding. 494,032,768 parameters. Pretrained at 4,096 tokens, the context extended to
    # 32,768 in the final stage (Qwen2.5 Technical Report, arXiv 2412.15115, section 3.3).
    "qwen2.5-0.5b": dict(arch="decoder", layers=24, d_model=896, heads=14, kv_heads=2, d_ff=4864, vocab=151936,
                         seq_len=4096, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                         bias="qkv", tie_embeddings=True),
    # Biderman et al. 2023 (Pythia), EleutherAI/pythia-1.4b (GPT-NeoX): attention and MLP in parallel, each with its
    # LayerNorm (use_parallel_residual), rotary positions on a quarter of each head (rotary_pct 0.25: 32 of 128
    # features), biases everywhere but the untied head. 1,414,647,808 parameters.
    "pythia-1.4b": dict(arch="decoder", layers=24, d_model=2048, heads=16, d_ff=8192, vocab=50304, seq_len=2048,
                        norm_position="pre", positions="rotary", rotary_dim=32, parallel_block="two_norms",
                        head_bias=False),
    # Wang & Komatsuzaki 2021, EleutherAI/gpt-j-6b: one LayerNorm read by attention and MLP in parallel, rotary on
    # 64 of 256 features per head (rotary_dim), no attention biases, MLP biases, an untied head with a bias.
    # 6,050,882,784 parameters.
    "gpt-j-6b": dict(arch="decoder", layers=28, d_model=4096, heads=16, d_ff=16384, vocab=50400, seq_len=2048,
                     norm_position="pre", positions="rotary", rotary_dim=64, parallel_block="one_norm", bias="ffn",
                     head_bias=True),
    # Microsoft 2023 (Phi-2), microsoft/phi-2: GPT-J's parallel block with biases everywhere, rotary on 32 of 80
    # features per head (partial_rotary_factor 0.4), an untied head with a bias. 2,779,683,840 parameters.
    "phi-2": dict(arch="decoder", layers=32, d_model=2560, heads=32, d_ff=10240, vocab=51200, seq_len=2048,
                  norm_position="pre", positions="rotary", rotary_dim=32, parallel_block="one_norm", head_bias=True),
    # Almazrouei et al. 2023 (Falcon), tiiuae/falcon-7b: multi-query attention (71 heads of 64, one key/value head),
    # one LayerNorm read by attention and MLP in parallel, rotary positions, no biases, the head tied to the
    # embedding. 6,921,720,704 parameters.
    "falcon-7b": dict(arch="decoder", layers=32, d_model=4544, heads=71, kv_heads=1, d_ff=18176, vocab=65024,
                      seq_len=2048, norm_position="pre", positions="rotary", parallel_block="one_norm", bias="none",
                      head_bias=False, tie_embeddings=True),
    # Groeneveld et al. 2024 (OLMo), allenai/OLMo-1B-hf: Llama's block with a LayerNorm without gain or bias, no biases,
    # the head tied. 1,176,764,416 parameters.
    "olmo-1b": dict(arch="decoder", layers=16, d_model=2048, heads=16, d_ff=8192, vocab=50304, seq_len=2048,
                    norm="nonparametric", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                    tie_embeddings=True),
    # Lozhkov et al. 2024 (StarCoder2), bigcode/starcoder2-3b: pre-LayerNorm, a GELU MLP, biases everywhere but the
    # tied head, 24 heads and 2 key/value heads, a 4,096-token sliding window over 16,384 positions.
    # 3,030,371,328 parameters.
    "starcoder2-3b": dict(arch="decoder", layers=30, d_model=3072, heads=24, kv_heads=2, d_ff=12288, vocab=49152,
                          seq_len=16384, norm_position="pre", positions="rotary", head_bias=False, tie_embeddings=True,
                          sliding_window=4096),
    # Abdin et al. 2024 (Phi-3), microsoft/Phi-3-mini-4k-instruct: Llama's block (fused qkv and gate_up projections),
    # a 2,047-token sliding window over 4,096 positions, an untied head. 3,821,079,552 parameters.
    "phi-3-mini-4k": dict(arch="decoder", layers=32, d_model=3072, heads=32, d_ff=8192, vocab=32064, seq_len=4096,
                          norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                          sliding_window=2047),
    # Stability AI 2024 (StableLM 2), stabilityai/stablelm-2-1_6b: pre-LayerNorm, SwiGLU, q, k and v biased, rotary on
    # a quarter of each head (16 of 64 features), an untied head. 1,644,515,328 parameters.
    "stablelm-2-1.6b": dict(arch="decoder", layers=24, d_model=2048, heads=32, d_ff=5632, vocab=100352, seq_len=4096,
                            norm_position="pre", ffn="swiglu", positions="rotary", rotary_dim=16, bias="qkv",
                            head_bias=False),
    # Raffel et al. 2020 (T5 v1.1), google/t5-v1_1-small: gated GELU, no biases, a relative bias per stack, heads of 64
    # (6 beside d_model 512), one table for both stacks and the head its own (tie_word_embeddings false).
    # 76,961,152 parameters (transformers 4's T5ForConditionalGeneration; transformers 5 ties T5's head always).
    "t5-v1.1-small": dict(arch="encoder-decoder", enc_layers=8, dec_layers=8, d_model=512, heads=6, head_dim=64,
                          d_ff=1024, vocab=32128, seq_len=512, tgt_len=512, norm="rmsnorm", norm_position="pre",
                          ffn="geglu", positions="relative", bias="none", head_bias=False, shared_embedding=True),
    # Gemma Team 2024 (Gemma), google/gemma-2b and google/gemma-7b: the embedding scaled by sqrt(d_model), GeGLU, RMSNorm
    # (its gain as 1 + w: the same parameters), heads 256 wide (the 2B: one key/value head; the 7B: 16 heads of 256
    # beside d_model 3072), no biases, the head tied to the embedding. 2,506,172,416 and 8,537,680,896 parameters.
    "gemma-2b": dict(arch="decoder", layers=18, d_model=2048, heads=8, kv_heads=1, d_ff=16384, vocab=256000,
                     seq_len=8192, norm="rmsnorm", norm_position="pre", ffn="geglu", positions="rotary", bias="none",
                     embedding_scale=True, tie_embeddings=True),
    "gemma-7b": dict(arch="decoder", layers=28, d_model=3072, heads=16, head_dim=256, d_ff=24576, vocab=256000,
                     seq_len=8192, norm="rmsnorm", norm_position="pre", ffn="geglu", positions="rotary", bias="none",
                     embedding_scale=True, tie_embeddings=True),
    # Gemma Team 2024 (Gemma 2, arXiv 2408.00118), google/gemma-2-2b and google/gemma-2-9b: Gemma's block with a norm
    # on each branch's output too, attention scores and logits soft-capped (50, 30), local layers (a 4,096-token
    # window) and global ones alternating, heads 256 wide (query_pre_attn_scalar 256: the head's own scale), grouped
    # key/value heads, tied. 2,614,341,888 and 9,241,705,984 parameters.
    "gemma-2-2b": dict(arch="decoder", layers=26, d_model=2304, heads=8, kv_heads=4, head_dim=256, d_ff=9216,
                       vocab=256000, seq_len=8192, norm="rmsnorm", norm_position="pre", ffn="geglu", positions="rotary",
                       bias="none", embedding_scale=True, tie_embeddings=True, post_norms=True,
                       attention_softcap=50.0, logit_softcap=30.0, sliding_window=4096, window_period=2),
    "gemma-2-9b": dict(arch="decoder", layers=42, d_model=3584, heads=16, kv_heads=8, head_dim=256, d_ff=14336,
                       vocab=256000, seq_len=8192, norm="rmsnorm", norm_position="pre", ffn="geglu", positions="rotary",
                       bias="none", embedding_scale=True, tie_embeddings=True, post_norms=True,
                       attention_softcap=50.0, logit_softcap=30.0, sliding_window=4096, window_period=2),
    # Jiang et al. 2024 (Mixtral of Experts), mistralai/Mixtral-8x7B-v0.1: Mistral 7B's blocks with 8 SwiGLU experts of
    # 14,336 per block, 2 per token (top-2, renormalised), no sliding window, trained at a 32k-token context (the
    # paper's introduction).
    # 46,702,792,704 parameters (about 12.9B used per token).
    "mixtral-8x7b": dict(arch="decoder", layers=32, d_model=4096, heads=32, kv_heads=8, d_ff=14336, vocab=32000,
                         seq_len=32768, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                         bias="none", experts=8, experts_per_token=2),
    # Qwen team 2024 (Qwen1.5-MoE), Qwen/Qwen1.5-MoE-A2.7B: 24 blocks of 16 heads (q, k, v biased), 60 SwiGLU experts
    # of 1,408, 4 per token, their softmax weights not renormalised, and a shared expert of 5,632 gated by
    # sigmoid(x w). 14,315,784,192 parameters (about 2.7B used per token).
    "qwen1.5-moe-a2.7b": dict(arch="decoder", layers=24, d_model=2048, heads=16, d_ff=1408, vocab=151936,
                              seq_len=8192, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                              bias="qkv", experts=60, experts_per_token=4, shared_expert_ff=5632, router_norm=False),
    # Qwen team 2025 (Qwen3, arXiv 2505.09388), Qwen/Qwen3-8B: Llama's block with q and k normalised per head (an
    # RMSNorm of 128 on each), 32 heads of 128 and 8 key/value heads, no biases, an untied head. 8,190,735,360
    # parameters (the model card's 8.2B, 6.95B without the embeddings). Pretrained at 4,096 tokens (stages 1 and 2),
    # a long-context stage at 32,768 last (the report's section 3.2); the card's context is 40,960.
    "qwen3-8b": dict(arch="decoder", layers=36, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=12288,
                     vocab=151936, seq_len=4096, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                     bias="none", qk_norm="head"),
    # Qwen/Qwen3-30B-A3B: Qwen3's attention (32 heads of 128 beside d_model 2048, 4 key/value heads) and 128 SwiGLU
    # experts of 768 per block, 8 per token (renormalised: norm_topk_prob), no shared expert. 30,532,122,624
    # parameters (the model card's 30.5B, 3.3B used per token); pretrained at 4,096 tokens, as Qwen3-8B.
    "qwen3-30b-a3b": dict(arch="decoder", layers=48, d_model=2048, heads=32, kv_heads=4, head_dim=128, d_ff=768,
                          vocab=151936, seq_len=4096, norm="rmsnorm", norm_position="pre", ffn="swiglu",
                          positions="rotary", bias="none", qk_norm="head", experts=128, experts_per_token=8),
    # Team OLMo 2024 ("2 OLMo 2 Furious", arXiv 2501.00656), allenai/OLMo-2-1124-7B and -13B: the norm on each
    # branch's output, none on its input (norm_position output), q and k normalised over each whole projection
    # (qk_norm projection), SwiGLU, no biases, an untied head, 4,096 tokens of context, the 100,352-token vocabulary.
    # 7,298,617,344 and 13,716,198,400 parameters (the model card's 7B and 13B).
    "olmo2-7b": dict(arch="decoder", layers=32, d_model=4096, heads=32, d_ff=11008, vocab=100352, seq_len=4096,
                     norm="rmsnorm", norm_position="output", ffn="swiglu", positions="rotary", bias="none",
                     qk_norm="projection"),
    "olmo2-13b": dict(arch="decoder", layers=40, d_model=5120, heads=40, d_ff=13824, vocab=100352, seq_len=4096,
                      norm="rmsnorm", norm_position="output", ffn="swiglu", positions="rotary", bias="none",
                      qk_norm="projection"),
    # Muennighoff et al. 2024 (OLMoE, arXiv 2409.02060), allenai/OLMoE-1B-7B-0924: Llama's pre-RMSNorm block with q and
    # k normalised over each whole projection, 64 SwiGLU experts of 1,024 per block, 8 per token (not renormalised:
    # norm_topk_prob false), no shared expert. 6,919,161,856 parameters (the model card's 7B, 1B used per token).
    "olmoe-1b-7b": dict(arch="decoder", layers=16, d_model=2048, heads=16, d_ff=1024, vocab=50304, seq_len=4096,
                        norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                        qk_norm="projection", experts=64, experts_per_token=8, router_norm=False),
    # DeepSeek-AI 2024 (DeepSeek-V3 Technical Report, arXiv 2412.19437), deepseek-ai/DeepSeek-V3 (config.json, as
    # transformers' DeepseekV3Config defaults): 61 blocks of multi-head latent attention (128 heads, queries through a
    # latent of 1,536, keys and values through one of 512, heads 128 + 64 rotary wide, values 128), the first 3 with a
    # dense SwiGLU FFN of 18,432, the other 58 with 256 routed experts of 2,048 (top 8, renormalised) and one shared
    # expert of 2,048, ungated, each token's experts in at most 4 of 8 groups (node-limited routing, section 2.1.2);
    # pre-trained on 4,096-token sequences (section 4.2). 671,026,404,352 parameters
    # (DeepseekV3ForCausalLM; the multi-token prediction module, which transformers does not train, left out).
    "deepseek-v3": dict(arch="decoder", layers=61, d_model=7168, heads=128, head_dim=128, d_ff=2048, vocab=129280,
                        seq_len=4096, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                        bias="none", kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128,
                        experts=256, experts_per_token=8, shared_expert_ff=2048, shared_expert_gate=False,
                        dense_blocks=3, dense_ff=18432, expert_groups=8, group_limit=4),
    # DeepSeek-AI 2024 (DeepSeek-V2, arXiv 2405.04434, appendix B), deepseek-ai/DeepSeek-V2-Lite: 27 blocks of latent
    # attention (16 heads, one q projection, a key/value latent of 512), the first with a dense SwiGLU FFN of 10,944,
    # the others 64 routed experts of 1,408 (top 6, not renormalised) and two shared experts (2,816), ungated; 4,096-token
    # pre-training sequences. 15,706,484,224 parameters (DeepseekV2ForCausalLM).
    "deepseek-v2-lite": dict(arch="decoder", layers=27, d_model=2048, heads=16, head_dim=128, d_ff=1408, vocab=102400,
                             seq_len=4096, norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                             bias="none", kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128, experts=64,
                             experts_per_token=6, shared_expert_ff=2816, shared_expert_gate=False, router_norm=False,
                             dense_blocks=1, dense_ff=10944),
}

# The parameter count each preset's source publishes (Hugging Face's num_parameters() of the named model class),
# and what trainingcost counts where they differ; tests/test_presets.py checks both, the README prints them.
PUBLISHED_PARAMETERS: dict[str, tuple[int, str]] = {
    "bert-base": (109_514_298, "BertForMaskedLM; trainingcost omits the MLM transform, 592,128"),
    "gpt2-small": (124_439_808, "GPT2LMHeadModel"),
    "t5-small": (60_506_624, "T5ForConditionalGeneration"),
    "llama-2-7b": (6_738_415_616, "LlamaForCausalLM"),
    "llama-2-13b": (13_015_864_320, "LlamaForCausalLM"),
    "llama-2-70b": (68_976_648_192, "LlamaForCausalLM"),
    "gpt2-xl": (1_557_611_200, "GPT2LMHeadModel"),
    "llama-3-8b": (8_030_261_248, "LlamaForCausalLM"),
    "mistral-7b": (7_241_732_096, "MistralForCausalLM"),
    "qwen2.5-0.5b": (494_032_768, "Qwen2ForCausalLM"),
    "pythia-1.4b": (1_414_647_808, "GPTNeoXForCausalLM"),
    "gpt-j-6b": (6_050_882_784, "GPTJForCausalLM"),
    "phi-2": (2_779_683_840, "PhiForCausalLM"),
    "falcon-7b": (6_921_720_704, "FalconForCausalLM"),
    "t5-v1.1-small": (76_961_152, "T5ForConditionalGeneration (transformers 4; transformers 5 ties the head: "
                                  "60,511,616)"),
    "olmo-1b": (1_176_764_416, "OlmoForCausalLM"),
    "starcoder2-3b": (3_030_371_328, "Starcoder2ForCausalLM"),
    "phi-3-mini-4k": (3_821_079_552, "Phi3ForCausalLM"),
    "stablelm-2-1.6b": (1_644_515_328, "StableLmForCausalLM"),
    "gemma-2b": (2_506_172_416, "GemmaForCausalLM"),
    "gemma-7b": (8_537_680_896, "GemmaForCausalLM"),
    "gemma-2-2b": (2_614_341_888, "Gemma2ForCausalLM"),
    "gemma-2-9b": (9_241_705_984, "Gemma2ForCausalLM"),
    "mixtral-8x7b": (46_702_792_704, "MixtralForCausalLM"),
    "qwen1.5-moe-a2.7b": (14_315_784_192, "Qwen2MoeForCausalLM"),
    "qwen3-8b": (8_190_735_360, "Qwen3ForCausalLM"),
    "qwen3-30b-a3b": (30_532_122_624, "Qwen3MoeForCausalLM"),
    "olmo2-7b": (7_298_617_344, "Olmo2ForCausalLM"),
    "olmo2-13b": (13_716_198_400, "Olmo2ForCausalLM"),
    "olmoe-1b-7b": (6_919_161_856, "OlmoeForCausalLM"),
    "deepseek-v3": (671_026_404_352, "DeepseekV3ForCausalLM (without the multi-token prediction module)"),
    "deepseek-v2-lite": (15_706_484_224, "DeepseekV2ForCausalLM"),
}
MLM_TRANSFORM = {"bert-base": 768 * 768 + 768 + 2 * 768}  # what a preset leaves out of its source's count
