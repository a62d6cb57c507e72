"""The allowed values the configuration decides: arches, architecture options and run settings.

Declared once here, imported by :mod:`.model` and :mod:`.training`, and filled into the schema's enums when
:mod:`.schema` loads it: the shipped schema file lists none of them. (The learning rules and cost models are
the catalogue's, :func:`trainingcost.analytic.catalogue.vocabulary`, passed in by callers that know it.)
"""

from __future__ import annotations

ARCHES = ("encoder", "decoder", "encoder-decoder")

# Architecture options. Each has a default that is the 2017 transformer (Vaswani et al. 2017), which trainingcost
# costed first (config/model.py's option declarations; a new option may write its values there instead).
NORMS = ("layernorm", "rmsnorm", "nonparametric")  # nonparametric: LayerNorm without gain or bias (OLMo)
NORM_POSITIONS = ("post", "pre")
FFNS = ("gelu", "relu", "swiglu", "geglu")
POSITIONS = ("sinusoidal", "learned", "rotary", "relative", "none")
# qkv: biases on the query, key and value projections only (Qwen2); attention: on q, k, v and o, none in the FFN
# (Llama's attention_bias without mlp_bias); ffn: on the FFN's matrices only (GPT-J; GPT-NeoX without attention_bias)
BIASES = ("all", "none", "qkv", "attention", "ffn")
# Parallel attention and FFN (GPT-J, GPT-NeoX, Phi-1/2, Falcon): x + attn(norm(x)) + ffn(norm(x)) with one norm
# read by both branches (one_norm), or a norm each (two_norms); none: the branches in sequence.
PARALLEL_BLOCKS = ("none", "one_norm", "two_norms")
# (Which option takes which values is its declaration's, config/model.py's option(): OPTION_CHOICES there.)

# What a training run may be asked for (config/training.py checks a run's settings against them).
TASKS = ("lm", "classify", "copy", "reverse")
DEVICES = ("auto", "cpu", "cuda")
TRAIN_DTYPES = ("fp32", "bf16")
OPTIMIZERS = ("sgd", "momentum", "adam")
PARALLEL = ("ddp", "zero2", "fsdp")  # data-parallel runs (docs/distributed.md)
BACKENDS = ("auto", "gloo", "nccl")
