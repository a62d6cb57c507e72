"""The Python API, the core that the command line sits on: :func:`plan` and :func:`estimate` return DataFrames.

Each function takes its inputs as keyword arguments, with the names, defaults and meaning of the command line's
flags (flags.py declares them once for both): ``--gpus 64-1024x2`` is ``gpus="64-1024x2"`` or ``gpus=[64, 128]``,
``--rule bp,dfa`` is ``rule=["bp", "dfa"]``, ``--explain``-style switches are ``True``. Python objects go where the
command line takes a file: a model as a ``dict`` in the ``config.json`` format or a ``transformers`` config
(``hf_config=``), a frontiers table as a DataFrame (``frontiers=``). A misspelled keyword raises ``TypeError``; a
value the tool refuses raises :class:`trainingcost.Error`, whose message is the command line's one line. Numbers
are used as given (no rounding). The command line parses its flags into the same inputs and calls the same
computations (planning.py, estimating.py); nothing here builds or parses a command line::

    import trainingcost
    result = trainingcost.plan(preset="llama-2-70b", tokens=2e12, gpu="h100-sxm", gpus=512, layout="search",
                               rule=["bp", "dfa"])
    result.table[["rule", "layout", "step_time_s", "gpu_hours", "mfu"]]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Literal

import pandas as pd

from .args import flag_message, gpu_counts, rule_list
from .config import ConfigError

Error = ConfigError  # a user mistake: its message is one line naming the input


@dataclasses.dataclass
class PlanResult:
    """``table``: the plan's rows (one per rule and cost model; per GPU count with several); ``layouts``: with a
    search, every rule's best few layouts per GPU count (rank 1 the best); ``at_bp_layout``: each rule at BP's best
    layout; ``memory``: the memory per GPU by part (bytes), per rule (and GPU count); ``verdict``: for a given layout
    that does not fit, which rules do not and the smallest change that fits; ``notes``: what the plan assumed about the
    model (a config.json's training length); ``text``: the plan as ``trainingcost plan`` prints it (its table format,
    the view the cost model asks for); ``cells``: the main table of ``text``, cell for cell, as text;
    ``error_bar_runs``: the published runs each row's 80% interval was read from (what ``--explain`` names): the
    row's ``source_interval``, each run's ``role`` (``alike``: the runs most like the plan; ``generation``,
    ``scale``, ``sequence``: the runs a widening of the interval read), source, name and measured / predicted step
    (``ratio``)."""

    table: pd.DataFrame
    layouts: pd.DataFrame
    at_bp_layout: pd.DataFrame
    memory: pd.DataFrame
    verdict: str | None = None
    notes: list = dataclasses.field(default_factory=list)
    text: str = ""
    cells: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    error_bar_runs: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)


@dataclasses.dataclass
class EstimateResult:
    """``table``: FLOPs and MACCs per phase (per layer with ``per_layer=True``), rule and cost model; ``memory``: the
    memory model's parts and peaks per rule (bytes); ``notes``: what the table leaves out and why."""

    table: pd.DataFrame
    memory: pd.DataFrame
    notes: list


# -- from keywords to the computations' inputs ---------------------------------------------------------------------

CLI_ONLY = {"help", "format", "explain", "require_fit", "metric", "memory"}  # how the command line prints


@functools.cache
def _declared(command: str) -> tuple[dict, list]:
    """{dest: action} of ``command``'s declared inputs (flags.py) and its mutually exclusive groups."""
    from . import flags

    table = argparse.ArgumentParser(add_help=False)
    {"plan": flags.plan_flags, "estimate": flags.estimate_flags}[command](table)
    actions = {a.dest: a for a in table._actions}
    groups = [[a.dest for a in group._group_actions] for group in table._mutually_exclusive_groups]
    return actions, groups


def _given(action: argparse.Action, value) -> bool:
    return value is not None and not (value is False and isinstance(action, argparse._StoreTrueAction))


# what a flag's converter takes, in words (argparse's metavar where the flag has one)
_FORMS = {"count": "a positive integer", "integer": "an integer", "number": "a number",
          "count_or_auto": "a positive integer or 'auto'", "count_or_max": "a positive integer or 'max'",
          "count_max_or_auto": "a positive integer, 'max' or 'auto'"}


def _plain_number(value):
    """A numpy (or other numbers-ABC) scalar as Python's int or float, so that a value read from a result's table
    is taken as the literal would be; bools, strings and the rest unchanged."""
    if isinstance(value, bool) or not isinstance(value, numbers.Number) or type(value) in (int, float):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


# Inputs the API also takes as objects (their functions' docstrings): a config.json as a dict or a transformers
# config, a frontiers table as a DataFrame, a device or a file of devices as a dict.
OBJECT_INPUTS = ("hf_config", "frontiers", "gpu", "hardware")


def _value(command: str, action: argparse.Action, value):
    """``value`` checked and converted as the command line converts the flag's text, without making text of it
    (a float stays the float given)."""
    flag = action.option_strings[0]

    def refuse(message: str):
        raise Error(f"trainingcost {command}: error: argument {flag}: {message}")

    if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
        if not isinstance(value, bool):
            refuse(f"expected True or False, got {value!r}")
        return value
    convert = action.type
    value = _plain_number(value)
    if isinstance(value, bool) and action.choices is not None and {"on", "off"} <= set(action.choices):
        value = "on" if value else "off"  # an on/off flag (--sequence-parallel) takes Python's True and False
    try:
        if convert is gpu_counts and not isinstance(value, str):
            values = [_plain_number(v) for v in (list(value) if isinstance(value, Sequence) else [value])]
            values = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]
            if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
                refuse(f"expected GPU counts (integers), got {value!r}")
            value = gpu_counts(",".join(str(v) for v in values))
        elif convert is rule_list and not isinstance(value, str):
            if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
                refuse(f"expected a rule name or a list of them, got {value!r}")
            value = rule_list(",".join(value))
        elif isinstance(value, str) and convert is not None:
            value = convert(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and convert is not None:
            # the flag's own checks (range, finiteness, integrality); a whole float is the integer (16.0 is 16),
            # as for --gpus
            text = repr(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)
            checked = convert(text)
            value = checked if isinstance(checked, str) or checked is None else type(checked)(value)
        elif convert is not None and not (action.dest in ("hf_config", "frontiers") or isinstance(value, os.PathLike)):
            form = (f"one of {', '.join(map(str, action.choices))}" if action.choices else
                    action.metavar if isinstance(action.metavar, str) else
                    _FORMS.get(getattr(convert, "__name__", ""), "a string"))
            refuse(f"expected {form}, got {type(value).__name__} {value!r}")
        elif isinstance(value, os.PathLike):
            value = os.fspath(value)
        elif convert is None and not isinstance(value, str) and action.dest != "hf_config" and (
                action.dest not in OBJECT_INPUTS or isinstance(value, (numbers.Number, list, tuple, set))):
            # a name or a file: text (or a path), as typed (hf_config checks its own: a path, a dict or a config)
            form = f"one of {', '.join(map(str, action.choices))}" if action.choices else "a string"
            refuse(f"expected {form}, got {type(value).__name__} {value!r}")
    except argparse.ArgumentTypeError as exc:
        refuse(str(exc))
    except Error:
        raise
    except ValueError:  # a plain converter (int): argparse's words
        refuse(f"invalid {getattr(convert, '__name__', 'value')} value: {value!r}")
    if action.choices is not None and value not in action.choices:
        try:  # argparse's own words, as the command line says them
            argparse.ArgumentParser()._check_value(action, value)
        except argparse.ArgumentError as err:
            refuse(err.message)
        refuse(f"invalid choice: {value!r}")
    return value


def _inputs(command: str, given: dict) -> argparse.Namespace:
    """The computations' inputs: every declared input, the given ones checked and converted, the rest defaulted."""
    actions, groups = _declared(command)
    for group in groups:
        chosen = [dest for dest in group if _given(actions[dest], given.get(dest))]
        if len(chosen) > 1:
            raise Error(f"trainingcost {command}: error: argument {actions[chosen[1]].option_strings[0]}: not allowed "
                        f"with argument {actions[chosen[0]].option_strings[0]}")
    values = {"command": command}
    for dest, action in actions.items():
        if dest in CLI_ONLY:
            values[dest] = action.default if dest != "format" else "table"
            continue
        value = given.get(dest)
        values[dest] = _value(command, action, value) if _given(action, value) else action.default
    return argparse.Namespace(**values)


def _run(command: str, compute, inputs: argparse.Namespace):
    try:
        return compute(inputs)
    except ConfigError as err:
        text = str(err)
        raise Error(text if text.startswith("trainingcost ") else
                    f"trainingcost {command}: error: {flag_message(text)}") from None


# -- the functions -------------------------------------------------------------------------------------------------

def plan(
    *,
    preset: str | None = None,
    arch: str | None = None,
    layers: int | None = None,
    enc_layers: int | None = None,
    dec_layers: int | None = None,
    d_model: int | None = None,
    heads: int | None = None,
    d_ff: int | None = None,
    vocab: int | None = None,
    seq_len: int | None = None,
    tgt_len: int | None = None,
    batch: int | None = None,
    classes: int | None = None,
    hf_config: str | os.PathLike | Mapping | None = None,
    norm: str | None = None,
    norm_position: str | None = None,
    ffn: str | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    positions: str | None = None,
    max_positions: int | None = None,
    tie_embeddings: bool | None = None,
    bias: str | None = None,
    head_bias: bool | None = None,
    type_vocab: int | None = None,
    embedding_norm: bool | None = None,
    relative_buckets: int | None = None,
    relative_max_distance: int | None = None,
    parallel_block: str | None = None,
    rotary_dim: int | None = None,
    sliding_window: int | None = None,
    embedding_scale: bool | None = None,
    shared_embedding: bool | None = None,
    experts: int | None = None,
    experts_per_token: int | None = None,
    shared_expert_ff: int | None = None,
    router_norm: bool | None = None,
    post_norms: bool | None = None,
    attention_softcap: float | None = None,
    logit_softcap: float | None = None,
    window_period: int | None = None,
    query_scale: int | None = None,
    qk_norm: str | None = None,
    shared_expert_gate: bool | None = None,
    kv_lora_rank: int | None = None,
    q_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
    v_head_dim: int | None = None,
    dense_blocks: int | None = None,
    dense_ff: int | None = None,
    expert_groups: int | None = None,
    group_limit: int | None = None,
    mtp_depth: int | None = None,
    rule: str | Sequence[str] = 'all',
    cost_model: str = 'executed',
    tokens: float | None = None,
    epochs: float | None = None,
    chinchilla: bool = False,
    dataset_tokens: float | None = None,
    global_batch: int | None = None,
    global_batch_tokens: float | None = None,
    micro_batch: int | Literal["max", "auto"] | None = None,
    gpu: str | Mapping | None = None,
    hardware: str | os.PathLike | Mapping | None = None,
    gpus: int | str | Sequence[int] = 1,
    layout: str = 'given',
    objective: str = 'time',
    tp_across_nodes: bool = False,
    figure: str | None = None,
    tp: int | Literal["auto"] = 1,
    pp: int | Literal["auto"] = 1,
    cp: int = 1,
    replicate: int | Literal["auto"] = 1,
    ep: int | Literal["auto"] = 1,
    etp: str | None = None,
    framework: str | None = None,
    attention: str | None = None,
    compile: bool | None = None,
    recompute_tail: str | None = None,
    cluster: str | None = None,
    sharding: str | None = None,
    zero3_gather: str | None = None,
    precision: str | None = None,
    checkpointing: str = 'none',
    checkpoint_every: int | None = None,
    optimizer: str = 'adam',
    interleave: int | Literal["auto"] = 1,
    offload: str = 'none',
    finetune: str = 'full',
    lora_rank: int | None = None,
    lora_targets: str | None = None,
    schedule: str | None = None,
    sequence_parallel: str | None = None,
    gpus_per_node: int | None = None,
    nic_gbps: float | None = None,
    dp_overlap: float | None = None,
    tp_overlap: float | None = None,
    mfu: float | None = None,
    hfu: float | None = None,
    tokens_per_s: float | None = None,
    calibration: str | None = None,
    measured_run: str | None = None,
    device_model: str | None = None,
    measured_rule: str = 'bp',
    joules_per_token: float | None = None,
    power_utilisation: float = 1.0,
    power_limit: float | None = None,
    goodput: float = 1.0,
    pue: float | None = None,
    carbon_intensity: float | None = None,
    price: float | None = None,
    currency: str = 'USD',
    mirror_steps: int = 1,
    target_loss: float | None = None,
    frontiers: str | os.PathLike | pd.DataFrame | None = None,
) -> PlanResult:
    """What a whole training run costs on named GPUs: time, GPU-hours, money, energy, CO2e and memory, per rule and
    cost model (``trainingcost plan``; docs/planning.md has every formula and source).

    Give a model (``preset``, ``hf_config`` or the shape's fields), a token budget (``tokens``, ``epochs`` with
    ``dataset_tokens``, or ``chinchilla``) and a device (``gpu`` or ``cluster``). Every input:

        preset (--preset): a named shape: paper-example, vaswani-base, bert-base, distilbert, gpt2-small, gpt2-xl,
            gpt3-175b, t5-small, llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, mistral-7b, qwen2.5-0.5b,
            pythia-1.4b, gpt-j-6b, phi-2, falcon-7b, olmo-1b, starcoder2-3b, phi-3-mini-4k, stablelm-2-1.6b,
            t5-v1.1-small, gemma-2b, gemma-7b, gemma-2-2b, gemma-2-9b, mixtral-8x7b, qwen1.5-moe-a2.7b, qwen3-8b,
            qwen3-30b-a3b, olmo2-7b, olmo2-13b, olmoe-1b-7b, deepseek-v3, deepseek-v2-lite
        arch (--arch): encoder, decoder or encoder-decoder
        layers (--layers): blocks (encoder-only, decoder-only; both stacks of encoder-decoder)
        enc_layers (--enc-layers): encoder blocks (encoder-decoder)
        dec_layers (--dec-layers): decoder blocks (encoder-decoder)
        d_model (--d-model): d model
        heads (--heads): heads
        d_ff (--d-ff): d ff
        vocab (--vocab): vocab
        seq_len (--seq-len): sequence length (the source length of encoder-decoder)
        tgt_len (--tgt-len): target length (encoder-decoder only; default --seq-len)
        batch (--batch): sequences per step
        classes (--classes): a classification head of C classes instead of the LM head
        hf_config (--hf-config): a model's own config.json, a folder holding one, or its Hugging Face Hub name
            (meta-llama/Llama-3.1-8B: its config.json alone is fetched, through the Hub's cache; the hf extra)
            (gpt2, bert, t5, llama, mistral, qwen2, gpt_neox, gptj, phi, falcon, stablelm, olmo, olmo2,
            starcoder2, phi3, gemma, gemma2, mixtral, qwen2_moe, qwen3, qwen3_moe, gemma3_text, olmoe,
            deepseek_v2, deepseek_v3, granite, smollm3, glm4, seed_oss, ernie4_5, hunyuan_v1_dense,
            ministral, ministral3, olmo3, exaone4, cohere, cohere2); the other flags override its fields
        norm (--norm): LayerNorm, RMSNorm, nonparametric: a LayerNorm without gain or bias (OLMo, Groeneveld et
            al. 2024), or layernorm_nobias: a LayerNorm with a gain and no bias (Cohere's Command R); one of
            layernorm, rmsnorm, nonparametric, layernorm_nobias
        norm_position (--norm-position): post: norm(x + f(x)) as in Vaswani et al. 2017; pre: x + f(norm(x)),
            and a final norm per stack; output: x + norm(f(x)), the norm on each branch's output before its
            residual, none on its input, and a final norm per stack (OLMo 2: Team OLMo 2024, arXiv 2501.00656);
            one of post, pre, output
        ffn (--ffn): gelu and relu have two matrices; swiglu and geglu three (d_ff is the gated width); one of
            gelu, relu, swiglu, geglu
        kv_heads (--kv-heads): key/value heads (grouped-query attention); must divide heads (default: heads)
        head_dim (--head-dim): the width of one head (default d_model / heads)
        positions (--positions): sinusoidal, learned (a table), rotary (on q and k), relative (T5's bucketed
            bias on the attention scores, one table per stack: Raffel et al. 2020) or none; one of sinusoidal,
            learned, rotary, relative, none
        max_positions (--max-positions): rows of a learned position table (default: the sequence length)
        tie_embeddings (--tie-embeddings): the head (and an encoder-decoder's two embeddings) share one V x d
            table
        bias (--bias): biases of the blocks' linear layers: all, none, qkv (q, k, v only), attention (q, k, v
            and o, none in the FFN) or ffn (the FFN's matrices only); one of all, none, qkv, attention, ffn
        head_bias (--head-bias): the head's bias (default: as the blocks', bias all)
        type_vocab (--type-vocab): token types added to the token embedding (BERT: 2)
        embedding_norm (--embedding-norm): a norm on the embedding output (BERT)
        relative_buckets (--relative-buckets): positions relative: T5's buckets of relative distance
        relative_max_distance (--relative-max-distance): positions relative: the distance from which all share
            the last bucket
        parallel_block (--parallel-block): parallel attention and FFN, x + attn(norm(x)) + ffn(norm(x)):
            one_norm read by both branches (GPT-J, Phi-1/2, Falcon-7B) or two_norms (GPT-NeoX, Falcon-40B); pre-
            LN, encoder or decoder; none: the branches in sequence; one of none, one_norm, two_norms
        rotary_dim (--rotary-dim): positions rotary: features of each head turned (GPT-NeoX's rotary_pct, Phi's
            partial_rotary_factor, GPT-J's rotary_dim; default all)
        sliding_window (--sliding-window): a decoder's queries attend to the last N positions only (Mistral,
            Qwen2, StarCoder2, Phi-3); executed: SDPA with a mask, the dense product
        embedding_scale (--embedding-scale): the token embedding's output times sqrt(d_model) (Gemma)
        shared_embedding (--shared-embedding): encoder-decoder: both stacks read one table, the head its own (T5
            v1.1); tie_embeddings shares it with the head too
        experts (--experts): mixture of experts: routed FFNs per block, each d_ff wide; 0: a dense FFN
        experts_per_token (--experts-per-token): mixture of experts: the top-k experts each token runs through
        shared_expert_ff (--shared-expert-ff): mixture of experts: a shared expert this wide that every token
            runs, gated by sigmoid(x w) (Qwen-MoE)
        router_norm (--router-norm): mixture of experts: the top-k weights renormalised to sum to 1 (Mixtral);
            false: the softmax's (Qwen-MoE)
        post_norms (--post-norms): a norm on each branch's output too, before its residual: x +
            norm'(f(norm(x))) (Gemma 2's post_attention_layernorm, post_feedforward_layernorm); pre-LN, in
            sequence
        attention_softcap (--attention-softcap): attention scores soft-capped, c tanh(scores / c) (Gemma 2's
            attn_logit_softcapping); executed: attention written out (two batched products and a softmax, as
            transformers' eager path), since fused kernels cannot cap; 0: none
        logit_softcap (--logit-softcap): the head's logits soft-capped, c tanh(logits / c) (Gemma 2's
            final_logit_softcapping); 0: none
        window_period (--window-period): sliding_window on some layers only: a decoder's layer i (from 0)
            attends to every earlier position where i + 1 is a multiple of this period, within the window
            elsewhere (Gemma 2: 2, local and global layers alternating); 0: every layer windowed
        query_scale (--query-scale): scores scaled by query_scale^-1/2 instead of head_dim^-1/2 (Gemma 2's
            query_pre_attn_scalar): a number, no cost; 0: head_dim
        qk_norm (--qk-norm): an RMSNorm on the queries and on the keys, after their projections and before
            rotary positions: head, on each head (one head_dim weight per norm shared by the heads: Qwen3, Gemma
            3); projection, on each whole projection (heads x head_dim wide: OLMo 2); none; one of none, head,
            projection
        shared_expert_gate (--shared-expert-gate): mixture of experts: the shared expert's output gated by
            sigmoid(x w) (Qwen-MoE); false: added as it is (DeepSeek-MoE's shared experts)
        kv_lora_rank (--kv-lora-rank): multi-head latent attention (DeepSeek-V2, V3): keys and values from a latent
            this wide (kv_a: d -> kv_lora_rank + qk_rope_head_dim, an RMSNorm, kv_b: -> heads x (head_dim +
            v_head_dim)); head_dim is each head's non-rotary query and key part; 0: standard attention
        q_lora_rank (--q-lora-rank): latent attention: queries through a latent this wide (q_a, an RMSNorm, q_b); 0:
            one projection d -> heads x (head_dim + qk_rope_head_dim)
        qk_rope_head_dim (--qk-rope-head-dim): latent attention: the rotary part of each query head, and of the one
            key part every head shares
        v_head_dim (--v-head-dim): latent attention: each value head's width (0: head_dim)
        dense_blocks (--dense-blocks): mixture of experts: the decoder's first N blocks keep a dense FFN, dense_ff
            wide (DeepSeek's first_k_dense_replace); 0: every block a mixture
        dense_ff (--dense-ff): mixture of experts: the width of the first blocks' dense FFNs (0: d_ff)
        expert_groups (--expert-groups): mixture of experts: the experts fall in this many groups (DeepSeek-V3's
            n_group; each a node's experts where the expert-parallel group spans as many nodes)
        group_limit (--group-limit): mixture of experts: each token's experts come from at most this many groups
            (DeepSeek-V3's topk_group: node-limited routing); 0: any
        mtp_depth (--mtp-depth): multi-token prediction (DeepSeek-V3): this many modules after a pre-LN decoder's
            blocks, module k an RMSNorm of the (k-1)-th hidden state and one of token i+k's embedding, a 2d x d
            projection of the two, one block and the shared head, predicting token i+k+1; trained under bp only; 0:
            none
        rule (--rule): one rule, several separated by commas, or all (default): bp, pepita, mempepita, fa, kp,
            wm, dfa, tp, dtp, lra
        cost_model (--cost-model): default executed, one row per rule in one screen; all: every cost model, the
            predicted step's parts, the memory parts and every source; one of paper, executed, causal, kaplan,
            textbook, survey, all
        tokens (--tokens): training tokens (e.g. 2e12)
        epochs (--epochs): passes over --dataset-tokens
        chinchilla (--chinchilla): 20 tokens per parameter (Hoffmann et al. 2022)
        dataset_tokens (--dataset-tokens): tokens in the dataset (with --epochs)
        global_batch (--global-batch): sequences per optimizer step (default: about 4M tokens)
        global_batch_tokens (--global-batch-tokens): tokens per optimizer step
        micro_batch (--micro-batch): sequences per GPU per forward-backward (default max: the largest that fits
            and divides the replica's batch, under a pipeline the fitting one with the shortest predicted step; the
            rest is gradient accumulation; auto: searched)
        gpu (--gpu): a device of the hardware catalogue (trainingcost hardware) or of --hardware; required
            without --cluster
        hardware (--hardware): your own devices, a YAML or JSON file in the catalogue's format: {name: {label,
            peak_tflops: {fp32, tf32, bf16, fp16, fp8}, memory_gb, bandwidth_gbs, power_w, source}}
            (config/README.md, 'hardware'); --gpu names one
        gpus (--gpus): GPUs; several (64,128,256) or a range (64-1024x2: 64 to 1024, times 2 each) give a
            strong-scaling table, each count at its best layout with --layout search
        layout (--layout): search: every layout field not given is searched per rule (docs/planning.md, 'The
            layout search'); a single field is searched with auto; one of given, search
        objective (--objective): what the best GPU count minimises over --gpus (default time); at one count
            every objective ranks layouts by step time; one of time, gpu-hours, cost, energy
        tp_across_nodes (--tp-across-nodes): let the search put tensor parallelism across nodes
        figure (--figure): with several --gpus: write the strong-scaling figure (.png, .pdf or .svg)
        tp (--tp): tensor-parallel degree
        pp (--pp): pipeline-parallel degree
        cp (--cp): context-parallel degree: each of N GPUs holds 1/N of every sequence and the attention passes
            keys and values around a ring (Megatron-Core's context parallelism; a decoder, a fused attention
            kernel); gpus = tp x cp x pp x dp; not searched
        replicate (--replicate): hybrid sharded data parallelism (HSDP): the data-parallel replicas in N groups,
            ZeRO/FSDP sharding inside each, the gradient shards all-reduced across them (FSDP's HYBRID_SHARD,
            torchtitan's data_parallel_replicate_degree, MaxText's dcn_data_parallelism); N divides dp, needs a
            --sharding; default 1; auto: searched (every N the framework's hybrid sharding allows, with each
            layout; --layout search alone keeps it as given)
        ep (--ep): expert-parallel degree (a mixture of experts; divides the experts and the data-parallel
            degree)
        etp (--etp): the experts' tensor-parallel degree (a mixture of experts; default tp); below tp the
            expert-parallel groups fold over the tensor-parallel GPUs too (Megatron-Core's MoE parallel
            folding): ep x etp divides tp x cp x dp; not searched
        framework (--framework): the training framework (config/frameworks.yaml: megatron-lm@2021, megatron-
            lm@2021+torch-ddp, megatron-lm@2022, megatron-core, nemo, megatron-deepspeed,
            megatron-deepspeed+bf16, deepspeed@2021, deepspeed, fsdp1, fsdp2, torchtitan@2024, torchtitan,
            torchtitan+fp8-all-gather, nanotron, composer, composer@2023, gpt-neox@2022, olmo-core, maxtext@2024,
            maxtext, paxml@2024, paxml, ddp; default fsdp2), or a family (megatron,
            deepspeed, fsdp, composer, nemo, torchtitan, nanotron, megatron-deepspeed, gpt-neox, olmo-core,
            maxtext, paxml, ddp) for its newest entry, or FAMILY@YEAR (or @YYYY-MM[-DD]) for the entry of that
            time: what it overlaps, what a ZeRO-3 gather moves, its attention kernel and its default sharding
        attention (--attention): the attention kernel: flash (FlashAttention-2), flash3 (FlashAttention-3,
            Hopper only: FlashAttention-2 elsewhere), cudnn (cuDNN's fused attention, TransformerEngine's on
            Hopper) or unfused (batched products, softmax in memory); default: the framework's; one of flash,
            flash3, cudnn, unfused
        compile (--compile): torch.compile on the blocks: their norms, rotary embeddings and gated activations
            fused into few kernels (docs/planning.md, 'Eager and fused elementwise kernels'); --no-compile: run
            them op by op as the model's PyTorch code writes them; default: the framework's
        recompute_tail (--recompute-tail): what the checkpointed blocks' recompute leaves out (docs/planning.md,
            'What a recompute repeats'): repeated (the whole block again: Megatron's, DeepSpeed's, torch's
            reentrant checkpoint, Hugging Face transformers 4's default), early-stop (torch's non-reentrant
            checkpoint, transformers 5's default: not the block's last product) or traced (torch.compile);
            default: the framework's; one of repeated, early-stop, traced
        cluster (--cluster): a named system (config/clusters.yaml: dgx-a100, dgx-a100-40gb, selene, dgx-h100,
            dgx-h200, aws-p4d, aws-p4de, aws-p5, aws-p5e, azure-nd-a100-v4, azure-ndm-a100-v4, azure-nd-h100-v5,
            azure-nd-mi300x-v5, databricks-mi250, mosaicml-a100, gcp-a3-high, gcp-a3-mega, jean-zay, dgx-b200,
            dgx-gb200, gpt-neox-20b, jean-zay-v100, meta-grand-teton, jupiter): its GPU (unless --gpu), GPUs per
            node and NIC bandwidth per GPU
        sharding (--sharding): data-parallel sharding: none (DDP), ZeRO stage 1-3, fsdp (FULL_SHARD = ZeRO-3);
            default: the framework's; one of none, zero1, zero2, zero3, fsdp, auto
        zero3_gather (--zero3-gather): what ZeRO-3/FSDP gathers whole at a time: module (DeepSpeed ZeRO-3, its
            estimator's accounting), sublayer (FSDP wrapping attention and FFN modules) or block (FSDP wrapping
            each block); default: the framework's; one of module, sublayer, block
        precision (--precision): default: the device's best mixed precision (bf16-mixed where it has bf16
            arithmetic, else fp16-mixed, as GPT-3 was trained on V100s); fp8-mixed: bf16-mixed with the blocks'
            linear products in fp8 (devices with fp8 tensor cores: Ada, Hopper, Blackwell, MI300X); one of fp32,
            bf16-mixed, fp16-mixed, fp8-mixed
        checkpointing (--checkpointing): activation checkpointing: selective checkpoints every --checkpoint-
            every-th block; one of none, selective, full, auto
        checkpoint_every (--checkpoint-every): with --checkpointing selective (or auto): checkpoint every k-th
            block (default 2)
        optimizer (--optimizer): one of sgd, momentum, adam
        interleave (--interleave): virtual pipeline stages per GPU (interleaved 1F1B)
        offload (--offload): keep the optimizer (ZeRO-Offload), or the parameters too (ZeRO-3's offload_param,
            FSDP's CPU offload), in the host's memory, or on the node's NVMe drives (optimizer-nvme, parameters-
            nvme: ZeRO-Infinity, ZeRO-3 only): the GPU's memory it frees, the PCIe and NVMe traffic and the CPU's
            optimizer step it costs; one of none, optimizer, parameters, optimizer-nvme, parameters-nvme
        finetune (--finetune): what trains: full (every parameter), lora (rank --lora-rank adapters on --lora-
            targets, the base frozen: Hu et al. 2021, as PEFT runs it) or qlora (lora on a 4-bit NF4 base:
            Dettmers et al. 2023); adapters train under bp only; one of full, lora, qlora
        lora_rank (--lora-rank): the adapters' rank with --finetune lora or qlora (default: 8, PEFT's)
        lora_targets (--lora-targets): the blocks' Linears that get adapters, from q, k, v, o, qkv, gate, up,
            down (qkv: a fused q/k/v projection, GPT-2's c_attn), or all (PEFT's all-linear); default: q,v
            (PEFT's for Llama, Mistral, Qwen2, Gemma)
        schedule (--schedule): the pipeline schedule with --pp: 1f1b, interleaved (with --interleave), zb-h1 and
            zb-h2 (Qi et al. 2024's zero-bubble), zb-v (two chunks per GPU in a V) or dualpipe (DeepSeek-V3's,
            both ends); default: 1f1b, interleaved with --interleave; auto: searched; one of 1f1b,
            interleaved, zb-h1, zb-h2, zb-v, dualpipe, auto
        sequence_parallel (--sequence-parallel): sequence parallelism with --tp (Korthikanti 2022); auto:
            searched; one of on, off, auto
        gpus_per_node (--gpus-per-node): GPUs per node (default: the device's usual system)
        nic_gbps (--nic-gbps): network between nodes, Gb/s per GPU (default: the device's system)
        dp_overlap (--dp-overlap): share of data-parallel communication hidden behind compute, the parameter
            all-gathers included (default: the framework's)
        tp_overlap (--tp-overlap): share of tensor-parallel communication hidden behind compute, the backward's
            input-gradient collectives included (default: the framework's)
        mfu (--mfu): model FLOPs utilisation, end to end (default: predicted by the step-time model)
        hfu (--hfu): hardware FLOPs utilisation (recompute counted), end to end
        tokens_per_s (--tokens-per-s): a measured run's tokens per second per GPU
        calibration (--calibration): a calibration of this GPU (trainingcost calibrate): the predictor prices
            the model's matrix products
        measured_run (--measured-run): a measured run (train --out-dir DIR, or its measured.parquet): its
            achieved FLOP/s, and its joules per FLOP where it measured energy
        device_model (--device-model): the device's own numbers for the predicted step time (trainingcost
            calibrate --device-model, run on that GPU): they replace the catalogue's GEMM ceiling, bandwidth,
            attention and launch
        measured_rule (--measured-rule): the rule --tokens-per-s and --joules-per-token were measured under
            (default bp); one of bp, pepita, mempepita, fa, kp, wm, dfa, tp, dtp, lra
        joules_per_token (--joules-per-token): measured energy per token per GPU (default: TDP)
        power_utilisation (--power-utilisation): share of the TDP drawn (default 1.0)
        power_limit (--power-limit): the GPUs' power limit in watts (nvidia-smi -pl), for a device with a
            published power curve (h100-sxm, h100-hbm2e): its predicted compute slows along the curve, its
            energy is counted at the limit (default: the catalogue's power, e.g. 700 W for h100-sxm, 500 W for
            h100-hbm2e)
        goodput (--goodput): share of the wall-clock spent in training steps (default 1.0: step time only; Llama
            3's 405B run kept more than 90% through 466 interruptions, Dubey et al. 2024, section 3.3.4)
        pue (--pue): power usage effectiveness (default 1.1)
        carbon_intensity (--carbon-intensity): kg CO2e per kWh (default 0.429)
        price (--price): money per GPU-hour, in --currency (no default: money is left out)
        currency (--currency): the currency of --price and of the cost column, an ISO 4217 code (default USD)
        mirror_steps (--mirror-steps): weight-mirror steps per training step (WM)
        target_loss (--target-loss): plan at equal quality: each rule gets the compute its frontier needs to
            reach this validation loss, as a multiple of BP's (with --frontiers; docs/planning.md)
        frontiers (--frontiers): the scaling study's frontiers (results/tables/frontiers.parquet) that --target-
            loss reads

    Returns a :class:`PlanResult`. Raises :class:`Error` (one line naming the input) for a value the tool refuses,
    and ``TypeError`` for a keyword it does not take.
    """
    from .io import check_output
    from .plan_text import plan_cells, plan_text
    from .planning import plan_outcome

    inputs = _inputs("plan", locals())
    if inputs.figure:
        _run("plan", lambda _: check_output(inputs.figure, "figure", False), inputs)
    out = _run("plan", plan_outcome, inputs)
    if out.search is not None and inputs.figure:
        from . import plan_search

        plan_search.figure(out.search, inputs.figure)
    table = out.table
    keys = [c for c in ("gpus", "rule") if c in table.columns]
    memory = table.drop_duplicates(keys)[[*keys, *(c for c in table.columns if c.startswith("mem_")), "fits"]]
    search = out.search
    from .plan_search import error_bar_runs

    return PlanResult(table, search.layouts if search is not None else pd.DataFrame(),
                      search.at_bp_layout if search is not None else pd.DataFrame(), memory.reset_index(drop=True),
                      out.verdict, out.notes, plan_text(out, inputs.cost_model == "all"), plan_cells(out, inputs.cost_model == "all"),
                      error_bar_runs(table))


def estimate(
    *,
    preset: str | None = None,
    arch: str | None = None,
    layers: int | None = None,
    enc_layers: int | None = None,
    dec_layers: int | None = None,
    d_model: int | None = None,
    heads: int | None = None,
    d_ff: int | None = None,
    vocab: int | None = None,
    seq_len: int | None = None,
    tgt_len: int | None = None,
    batch: int | None = None,
    classes: int | None = None,
    hf_config: str | os.PathLike | Mapping | None = None,
    norm: str | None = None,
    norm_position: str | None = None,
    ffn: str | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    positions: str | None = None,
    max_positions: int | None = None,
    tie_embeddings: bool | None = None,
    bias: str | None = None,
    head_bias: bool | None = None,
    type_vocab: int | None = None,
    embedding_norm: bool | None = None,
    relative_buckets: int | None = None,
    relative_max_distance: int | None = None,
    parallel_block: str | None = None,
    rotary_dim: int | None = None,
    sliding_window: int | None = None,
    embedding_scale: bool | None = None,
    shared_embedding: bool | None = None,
    experts: int | None = None,
    experts_per_token: int | None = None,
    shared_expert_ff: int | None = None,
    router_norm: bool | None = None,
    post_norms: bool | None = None,
    attention_softcap: float | None = None,
    logit_softcap: float | None = None,
    window_period: int | None = None,
    query_scale: int | None = None,
    qk_norm: str | None = None,
    shared_expert_gate: bool | None = None,
    kv_lora_rank: int | None = None,
    q_lora_rank: int | None = None,
    qk_rope_head_dim: int | None = None,
    v_head_dim: int | None = None,
    dense_blocks: int | None = None,
    dense_ff: int | None = None,
    expert_groups: int | None = None,
    group_limit: int | None = None,
    mtp_depth: int | None = None,
    rule: str | Sequence[str] = 'all',
    cost_model: str | None = None,
    dtype: str = 'fp32',
    optimizer: str = 'sgd',
    mirror_steps: int = 1,
    per_layer: bool = False,
    finetune: str = 'full',
    lora_rank: int | None = None,
    lora_targets: str | None = None,
) -> EstimateResult:
    """One model's analytic costs per phase (per layer with ``per_layer``), rule and cost model, and its memory
    (``trainingcost estimate``; docs/cost_models.md has every formula). ``cost_model=None`` gives the executed model
    (what our PyTorch code runs), as the command line's table does; ``"all"`` every cost model. Every input:

        preset (--preset): a named shape: paper-example, vaswani-base, bert-base, distilbert, gpt2-small, gpt2-xl,
            gpt3-175b, t5-small, llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, mistral-7b, qwen2.5-0.5b,
            pythia-1.4b, gpt-j-6b, phi-2, falcon-7b, olmo-1b, starcoder2-3b, phi-3-mini-4k, stablelm-2-1.6b,
            t5-v1.1-small, gemma-2b, gemma-7b, gemma-2-2b, gemma-2-9b, mixtral-8x7b, qwen1.5-moe-a2.7b, qwen3-8b,
            qwen3-30b-a3b, olmo2-7b, olmo2-13b, olmoe-1b-7b, deepseek-v3, deepseek-v2-lite
        arch (--arch): encoder, decoder or encoder-decoder
        layers (--layers): blocks (encoder-only, decoder-only; both stacks of encoder-decoder)
        enc_layers (--enc-layers): encoder blocks (encoder-decoder)
        dec_layers (--dec-layers): decoder blocks (encoder-decoder)
        d_model (--d-model): d model
        heads (--heads): heads
        d_ff (--d-ff): d ff
        vocab (--vocab): vocab
        seq_len (--seq-len): sequence length (the source length of encoder-decoder)
        tgt_len (--tgt-len): target length (encoder-decoder only; default --seq-len)
        batch (--batch): sequences per step
        classes (--classes): a classification head of C classes instead of the LM head
        hf_config (--hf-config): a model's own config.json, a folder holding one, or its Hugging Face Hub name
            (meta-llama/Llama-3.1-8B: its config.json alone is fetched, through the Hub's cache; the hf extra)
            (gpt2, bert, t5, llama, mistral, qwen2, gpt_neox, gptj, phi, falcon, stablelm, olmo, olmo2,
            starcoder2, phi3, gemma, gemma2, mixtral, qwen2_moe, qwen3, qwen3_moe, gemma3_text, olmoe,
            deepseek_v2, deepseek_v3, granite, smollm3, glm4, seed_oss, ernie4_5, hunyuan_v1_dense,
            ministral, ministral3, olmo3, exaone4, cohere, cohere2); the other flags override its fields
        norm (--norm): LayerNorm, RMSNorm, nonparametric: a LayerNorm without gain or bias (OLMo, Groeneveld et
            al. 2024), or layernorm_nobias: a LayerNorm with a gain and no bias (Cohere's Command R); one of
            layernorm, rmsnorm, nonparametric, layernorm_nobias
        norm_position (--norm-position): post: norm(x + f(x)) as in Vaswani et al. 2017; pre: x + f(norm(x)),
            and a final norm per stack; output: x + norm(f(x)), the norm on each branch's output before its
            residual, none on its input, and a final norm per stack (OLMo 2: Team OLMo 2024, arXiv 2501.00656);
            one of post, pre, output
        ffn (--ffn): gelu and relu have two matrices; swiglu and geglu three (d_ff is the gated width); one of
            gelu, relu, swiglu, geglu
        kv_heads (--kv-heads): key/value heads (grouped-query attention); must divide heads (default: heads)
        head_dim (--head-dim): the width of one head (default d_model / heads)
        positions (--positions): sinusoidal, learned (a table), rotary (on q and k), relative (T5's bucketed
            bias on the attention scores, one table per stack: Raffel et al. 2020) or none; one of sinusoidal,
            learned, rotary, relative, none
        max_positions (--max-positions): rows of a learned position table (default: the sequence length)
        tie_embeddings (--tie-embeddings): the head (and an encoder-decoder's two embeddings) share one V x d
            table
        bias (--bias): biases of the blocks' linear layers: all, none, qkv (q, k, v only), attention (q, k, v
            and o, none in the FFN) or ffn (the FFN's matrices only); one of all, none, qkv, attention, ffn
        head_bias (--head-bias): the head's bias (default: as the blocks', bias all)
        type_vocab (--type-vocab): token types added to the token embedding (BERT: 2)
        embedding_norm (--embedding-norm): a norm on the embedding output (BERT)
        relative_buckets (--relative-buckets): positions relative: T5's buckets of relative distance
        relative_max_distance (--relative-max-distance): positions relative: the distance from which all share
            the last bucket
        parallel_block (--parallel-block): parallel attention and FFN, x + attn(norm(x)) + ffn(norm(x)):
            one_norm read by both branches (GPT-J, Phi-1/2, Falcon-7B) or two_norms (GPT-NeoX, Falcon-40B); pre-
            LN, encoder or decoder; none: the branches in sequence; one of none, one_norm, two_norms
        rotary_dim (--rotary-dim): positions rotary: features of each head turned (GPT-NeoX's rotary_pct, Phi's
            partial_rotary_factor, GPT-J's rotary_dim; default all)
        sliding_window (--sliding-window): a decoder's queries attend to the last N positions only (Mistral,
            Qwen2, StarCoder2, Phi-3); executed: SDPA with a mask, the dense product
        embedding_scale (--embedding-scale): the token embedding's output times sqrt(d_model) (Gemma)
        shared_embedding (--shared-embedding): encoder-decoder: both stacks read one table, the head its own (T5
            v1.1); tie_embeddings shares it with the head too
        experts (--experts): mixture of experts: routed FFNs per block, each d_ff wide; 0: a dense FFN
        experts_per_token (--experts-per-token): mixture of experts: the top-k experts each token runs through
        shared_expert_ff (--shared-expert-ff): mixture of experts: a shared expert this wide that every token
            runs, gated by sigmoid(x w) (Qwen-MoE)
        router_norm (--router-norm): mixture of experts: the top-k weights renormalised to sum to 1 (Mixtral);
            false: the softmax's (Qwen-MoE)
        post_norms (--post-norms): a norm on each branch's output too, before its residual: x +
            norm'(f(norm(x))) (Gemma 2's post_attention_layernorm, post_feedforward_layernorm); pre-LN, in
            sequence
        attention_softcap (--attention-softcap): attention scores soft-capped, c tanh(scores / c) (Gemma 2's
            attn_logit_softcapping); executed: attention written out (two batched products and a softmax, as
            transformers' eager path), since fused kernels cannot cap; 0: none
        logit_softcap (--logit-softcap): the head's logits soft-capped, c tanh(logits / c) (Gemma 2's
            final_logit_softcapping); 0: none
        window_period (--window-period): sliding_window on some layers only: a decoder's layer i (from 0)
            attends to every earlier position where i + 1 is a multiple of this period, within the window
            elsewhere (Gemma 2: 2, local and global layers alternating); 0: every layer windowed
        query_scale (--query-scale): scores scaled by query_scale^-1/2 instead of head_dim^-1/2 (Gemma 2's
            query_pre_attn_scalar): a number, no cost; 0: head_dim
        qk_norm (--qk-norm): an RMSNorm on the queries and on the keys, after their projections and before
            rotary positions: head, on each head (one head_dim weight per norm shared by the heads: Qwen3, Gemma
            3); projection, on each whole projection (heads x head_dim wide: OLMo 2); none; one of none, head,
            projection
        shared_expert_gate (--shared-expert-gate): mixture of experts: the shared expert's output gated by
            sigmoid(x w) (Qwen-MoE); false: added as it is (DeepSeek-MoE's shared experts)
        kv_lora_rank (--kv-lora-rank): multi-head latent attention (DeepSeek-V2, V3): keys and values from a latent
            this wide (kv_a: d -> kv_lora_rank + qk_rope_head_dim, an RMSNorm, kv_b: -> heads x (head_dim +
            v_head_dim)); head_dim is each head's non-rotary query and key part; 0: standard attention
        q_lora_rank (--q-lora-rank): latent attention: queries through a latent this wide (q_a, an RMSNorm, q_b); 0:
            one projection d -> heads x (head_dim + qk_rope_head_dim)
        qk_rope_head_dim (--qk-rope-head-dim): latent attention: the rotary part of each query head, and of the one
            key part every head shares
        v_head_dim (--v-head-dim): latent attention: each value head's width (0: head_dim)
        dense_blocks (--dense-blocks): mixture of experts: the decoder's first N blocks keep a dense FFN, dense_ff
            wide (DeepSeek's first_k_dense_replace); 0: every block a mixture
        dense_ff (--dense-ff): mixture of experts: the width of the first blocks' dense FFNs (0: d_ff)
        expert_groups (--expert-groups): mixture of experts: the experts fall in this many groups (DeepSeek-V3's
            n_group; each a node's experts where the expert-parallel group spans as many nodes)
        group_limit (--group-limit): mixture of experts: each token's experts come from at most this many groups
            (DeepSeek-V3's topk_group: node-limited routing); 0: any
        mtp_depth (--mtp-depth): multi-token prediction (DeepSeek-V3): this many modules after a pre-LN decoder's
            blocks, module k an RMSNorm of the (k-1)-th hidden state and one of token i+k's embedding, a 2d x d
            projection of the two, one block and the shared head, predicting token i+k+1; trained under bp only; 0:
            none
        rule (--rule): one rule, several separated by commas, or all (default): bp, pepita, mempepita, fa, kp,
            wm, dfa, tp, dtp, lra
        cost_model (--cost-model): not given: executed (what our PyTorch code runs), one row per rule; a cost
            model named: its FLOPs per phase, totals and memory tables; all: every cost model's (csv, json and
            --per-layer default to all); one of paper, executed, causal, kaplan, textbook, survey, all
        dtype (--dtype): for the memory model; one of fp32, bf16, fp16, fp64
        optimizer (--optimizer): for the memory model; one of sgd, momentum, adam
        mirror_steps (--mirror-steps): mirror steps per training step (wm)
        per_layer (--per-layer): the table: every layer of every rule and cost model
        finetune (--finetune): what trains: full (every parameter), lora (rank --lora-rank adapters on --lora-
            targets, the base frozen: Hu et al. 2021, as PEFT runs it) or qlora (lora on a 4-bit NF4 base:
            Dettmers et al. 2023); adapters train under bp only; one of full, lora, qlora
        lora_rank (--lora-rank): the adapters' rank with --finetune lora or qlora (default: 8, PEFT's)
        lora_targets (--lora-targets): the blocks' Linears that get adapters, from q, k, v, o, qkv, gate, up,
            down (qkv: a fused q/k/v projection, GPT-2's c_attn), or all (PEFT's all-linear); default: q,v
            (PEFT's for Llama, Mistral, Qwen2, Gemma)

    Returns an :class:`EstimateResult`. Raises :class:`Error` (one line naming the input) for a value the tool
    refuses, and ``TypeError`` for a keyword it does not take.
    """
    from .estimating import estimate_outcome

    out = _run("estimate", estimate_outcome, _inputs("estimate", locals()))
    return EstimateResult(out.table, out.memory, out.notes)
