"""The inputs of ``plan`` and ``estimate``, declared once: each one's name, type, choices, default and help.

The command line builds its subcommands from these declarations (cli.py, plan_command.py); the Python API
(api.py) reads the same declarations to check its keywords, so the two take the same inputs with the same defaults.
Nothing here computes a cost.
"""

from __future__ import annotations

import argparse

from .analytic import cost_model_names, rule_names, rules
from .analytic.finetune import DEFAULT_RANK, DEFAULT_TARGETS, FINETUNES, LORA_TARGETS
from .analytic.memory import DTYPE_BYTES, OPTIMIZER_SLOTS
from .analytic.plan import CHECKPOINTING, PRECISIONS, SHARDINGS, ZERO3_GATHER
from .analytic.steptime.offload import OFFLOADS
from .analytic.steptime.schedules import SCHEDULES
from .analytic.steptime.step import ATTENTION
from .args import (add_model_flags, count, count_max_or_auto, count_or_auto, gpu_counts, integer, number, rule_list,
                   spelled_as)
from .config.frameworks import RECOMPUTE_TAILS, clusters, default_framework, families, frameworks
from .plan_search import OBJECTIVES

ESTIMATE_HELP = "analytic costs and memory of one model, per layer and phase"


def mirror_steps_help() -> str:
    """The rules whose recipe repeats a phase per mirror step (the recipe's ``mirror_steps`` multiplicity)."""
    takers = [spec.name for spec in rules()
              if any(times == "mirror_steps" for recipe in (spec.recipe, *spec.recipe_overrides.values())
                     for parts in recipe.values() for _, times in parts)]
    return f"mirror steps per training step ({', '.join(takers) or 'no rule takes them'})"


def currency(text: str) -> str:
    """An ISO 4217 currency code: three letters (USD, EUR, CNY), in capitals."""
    code = text.strip().upper()
    if not (len(code) == 3 and code.isascii() and code.isalpha()):
        raise argparse.ArgumentTypeError(f"expected an ISO 4217 currency code of three letters (USD, EUR), got "
                                         f"{text[:20]!r}")
    return code


def finetune_flags(p) -> None:
    """--finetune, --lora-rank and --lora-targets (plan and estimate)."""
    p.add_argument("--finetune", default="full", type=str.lower, choices=list(FINETUNES),
                   help="what trains: full (every parameter), lora (rank --lora-rank adapters on --lora-targets, the "
                        "base frozen: Hu et al. 2021, as PEFT runs it) or qlora (lora on a 4-bit NF4 base: Dettmers "
                        "et al. 2023); adapters train under bp only")
    p.add_argument("--lora-rank", type=count, default=None, metavar="R",
                   help=f"the adapters' rank with --finetune lora or qlora (default: {DEFAULT_RANK}, PEFT's)")
    p.add_argument("--lora-targets", default=None, metavar="NAME[,NAME...]|all",
                   help=f"the blocks' Linears that get adapters, from {', '.join(LORA_TARGETS)} (qkv: a fused q/k/v "
                        f"projection, GPT-2's c_attn), or all (PEFT's all-linear); default: {','.join(DEFAULT_TARGETS)} "
                        "(PEFT's for Llama, Mistral, Qwen2, Gemma)")


def estimate_flags(p) -> None:
    """Declare ``estimate``'s inputs on the parser ``p``."""
    add_model_flags(p)
    p.add_argument("--rule", default="all", type=rule_list, metavar="RULE[,RULE...]|all",
                     help=f"one rule, several separated by commas, or all (default): {', '.join(rule_names())}")
    p.add_argument("--cost-model", choices=[*cost_model_names(), "all"],
                     help="not given: executed (what our PyTorch code runs), one row per rule; a cost model named: its "
                          "FLOPs per phase, totals and memory tables; all: every cost model's (csv, json and "
                          "--per-layer default to all)")
    p.add_argument("--dtype", default="fp32", choices=list(DTYPE_BYTES), help="for the memory model")
    p.add_argument("--optimizer", default="sgd", choices=list(OPTIMIZER_SLOTS), help="for the memory model")
    p.add_argument("--mirror-steps", type=integer, default=1, help=mirror_steps_help())
    p.add_argument("--metric", default="flops", choices=["flops", "maccs"], help="what the table shows")
    p.add_argument("--memory", action="store_true", help="with csv/json: print the memory table instead of costs")
    p.add_argument("--per-layer", action="store_true", help="the table: every layer of every rule and cost model")
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
    finetune_flags(p)


PLAN_HELP = ("what a whole training run costs on named GPUs: time, GPU-hours, money, energy, "
                                    "CO2e and memory, per rule and cost model")


def plan_flags(p) -> None:
    """Declare ``plan``'s inputs on the parser ``p`` (the command line's subparser, or the API's table of them)."""
    add_model_flags(p)
    p.add_argument("--rule", default="all", type=rule_list, metavar="RULE[,RULE...]|all",
                   help=f"one rule, several separated by commas, or all (default): {', '.join(rule_names())}")
    p.add_argument("--cost-model", default="executed", choices=[*cost_model_names(), "all"],
                   help="default executed, one row per rule in one screen; all: every cost model, the predicted step's "
                        "parts, the memory parts and every source")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--tokens", type=number, help="training tokens (e.g. 2e12)")
    budget.add_argument("--epochs", type=number, help="passes over --dataset-tokens")
    budget.add_argument("--chinchilla", action="store_true", help="20 tokens per parameter (Hoffmann et al. 2022)")
    p.add_argument("--dataset-tokens", type=number, help="tokens in the dataset (with --epochs)")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--global-batch", type=count, help="sequences per optimizer step (default: about 4M tokens)")
    batch.add_argument("--global-batch-tokens", type=number, help="tokens per optimizer step")
    p.add_argument("--micro-batch", type=count_max_or_auto, default=None, metavar="N|max|auto",
                   help="sequences per GPU per forward-backward (default max: the largest that fits and divides the "
                        "replica's batch, under a pipeline the fitting one with the shortest predicted step; the rest "
                        "is gradient accumulation; auto: searched)")
    p.add_argument("--gpu", help="a device of the hardware catalogue (trainingcost hardware) or of --hardware; required "
                                 "without --cluster")
    p.add_argument("--hardware", metavar="FILE",
                   help="your own devices, a YAML or JSON file in the catalogue's format: {name: {label, peak_tflops: "
                        "{fp32, tf32, bf16, fp16, fp8}, memory_gb, bandwidth_gbs, power_w, source}} (config/README.md, "
                        "'hardware'); --gpu names one")
    p.add_argument("--gpus", type=gpu_counts, default=[1], metavar="N|N,N,...|LO-HIxF",
                   help="GPUs; several (64,128,256) or a range (64-1024x2: 64 to 1024, times 2 each) give a "
                        "strong-scaling table, each count at its best layout with --layout search")
    p.add_argument("--layout", default="given", choices=["given", "search"],
                   help="search: every layout field not given is searched per rule (docs/planning.md, 'The layout "
                        "search'); a single field is searched with auto")
    p.add_argument("--objective", default="time", choices=list(OBJECTIVES),
                   help="what the best GPU count minimises over --gpus (default time); at one count every objective "
                        "ranks layouts by step time")
    p.add_argument("--explain", action="store_true", help="say why the search left parts of the space out, and name the published runs behind the error bar")
    p.add_argument("--tp-across-nodes", action="store_true", help="let the search put tensor parallelism across nodes")
    p.add_argument("--figure", metavar="PATH", help="with several --gpus: write the strong-scaling figure (.png, .pdf or .svg)")
    p.add_argument("--tp", type=count_or_auto, default=1, metavar="N|auto", help="tensor-parallel degree")
    p.add_argument("--pp", type=count_or_auto, default=1, metavar="N|auto", help="pipeline-parallel degree")
    p.add_argument("--cp", type=count, default=1, metavar="N",
                   help="context-parallel degree: each of N GPUs holds 1/N of every sequence and the attention "
                        "passes keys and values around a ring (Megatron-Core's context parallelism; a decoder, a fused "
                        "attention kernel); gpus = tp x cp x pp x dp; not searched")
    p.add_argument("--replicate", type=count_or_auto, default=1, metavar="N|auto",
                   help="hybrid sharded data parallelism (HSDP): the data-parallel replicas in N groups, ZeRO/FSDP "
                        "sharding inside each, the gradient shards all-reduced across them (FSDP's HYBRID_SHARD, "
                        "torchtitan's data_parallel_replicate_degree, MaxText's dcn_data_parallelism); N divides dp, "
                        "needs a --sharding; default 1; auto: searched (every N the framework's hybrid sharding "
                        "allows, with each layout; --layout search alone keeps it as given)")
    p.add_argument("--ep", type=count_or_auto, default=1, metavar="N|auto", help="expert-parallel degree (a mixture "
                   "of experts; divides the experts and the data-parallel degree)")
    p.add_argument("--etp", type=int, default=None, metavar="N",
                   help="the experts' tensor-parallel degree (a mixture of experts; default tp); below tp the "
                        "expert-parallel groups fold over the tensor-parallel GPUs too (Megatron-Core's MoE parallel "
                        "folding): ep x etp divides tp x cp x dp; not searched")
    p.add_argument("--framework", default=None, metavar="NAME",
                   help=f"the training framework (config/frameworks.yaml: {', '.join(frameworks())}; default "
                        f"{default_framework()}), or a family ({', '.join(families())}) for its newest entry, or "
                        "FAMILY@YEAR (or @YYYY-MM[-DD]) for the entry of that time: what it overlaps, what a ZeRO-3 "
                        "gather moves, its attention kernel and its default sharding")
    p.add_argument("--attention", default=None, type=spelled_as("attention"), choices=list(ATTENTION),
                   help="the attention kernel: flash (FlashAttention-2), flash3 (FlashAttention-3, Hopper only: "
                        "FlashAttention-2 elsewhere), cudnn (cuDNN's fused attention, TransformerEngine's on Hopper) or "
                        "unfused (batched products, softmax in memory); default: the framework's")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile on the blocks: their norms, rotary embeddings and gated activations fused into "
                        "few kernels (docs/planning.md, 'Eager and fused elementwise kernels'); --no-compile: run "
                        "them op by op as the model's PyTorch code writes them; default: the framework's")
    p.add_argument("--recompute-tail", default=None, choices=list(RECOMPUTE_TAILS),
                   help="what the checkpointed blocks' recompute leaves out (docs/planning.md, 'What a recompute "
                        "repeats'): repeated (the whole block again: Megatron's, DeepSpeed's, torch's reentrant "
                        "checkpoint, Hugging Face transformers 4's default), early-stop (torch's non-reentrant "
                        "checkpoint, transformers 5's default: not the block's last product) or traced (torch.compile); default: the framework's")
    p.add_argument("--cluster", default=None, metavar="NAME",
                   help=f"a named system (config/clusters.yaml: {', '.join(clusters())}): its GPU (unless --gpu), "
                        "GPUs per node and NIC bandwidth per GPU")
    p.add_argument("--sharding", default=None, type=spelled_as("sharding"), choices=[*SHARDINGS, "auto"],
                   help="data-parallel sharding: none (DDP), ZeRO stage 1-3, fsdp (FULL_SHARD = ZeRO-3); default: "
                        "the framework's")
    p.add_argument("--zero3-gather", default=None, choices=list(ZERO3_GATHER),
                   help="what ZeRO-3/FSDP gathers whole at a time: module (DeepSpeed ZeRO-3, its estimator's accounting), "
                        "sublayer (FSDP wrapping attention and FFN modules) or block (FSDP wrapping each block); "
                        "default: the framework's")
    p.add_argument("--precision", type=spelled_as("precision"), choices=list(PRECISIONS),
                   help="default: the device's best mixed precision (bf16-mixed where it has bf16 arithmetic, else "
                        "fp16-mixed, as GPT-3 was trained on V100s); fp8-mixed: bf16-mixed with the blocks' linear "
                        "products in fp8 (devices with fp8 tensor cores: Ada, Hopper, Blackwell, MI300X)")
    p.add_argument("--checkpointing", default="none", type=str.lower, choices=[*CHECKPOINTING, "auto"],
                   help="activation checkpointing: selective checkpoints every --checkpoint-every-th block")
    p.add_argument("--checkpoint-every", type=count, default=None,
                   help="with --checkpointing selective (or auto): checkpoint every k-th block (default 2)")
    p.add_argument("--optimizer", default="adam", choices=list(OPTIMIZER_SLOTS))
    p.add_argument("--interleave", type=count_or_auto, default=1, metavar="N|auto",
                   help="virtual pipeline stages per GPU (interleaved 1F1B)")
    p.add_argument("--offload", default="none", type=str.lower, choices=list(OFFLOADS),
                   help="keep the optimizer (ZeRO-Offload), or the parameters too (ZeRO-3's offload_param, FSDP's CPU "
                        "offload), in the host's memory, or on the node's NVMe drives (optimizer-nvme, "
                        "parameters-nvme: ZeRO-Infinity, ZeRO-3 only): the GPU's memory it frees, the PCIe and NVMe "
                        "traffic and the CPU's optimizer step it costs")
    finetune_flags(p)
    p.add_argument("--schedule", default=None, type=str.lower, choices=[*SCHEDULES, "auto"],
                   help="the pipeline schedule with --pp: 1f1b, interleaved (with --interleave), zb-h1 and zb-h2 (Qi et "
                        "al. 2024's zero-bubble), zb-v (two chunks per GPU in a V) or dualpipe (DeepSeek-V3's, both "
                        "ends); default: 1f1b, interleaved with --interleave; auto: searched")
    p.add_argument("--sequence-parallel", nargs="?", const="on", default=None, choices=["on", "off", "auto"],
                   help="sequence parallelism with --tp (Korthikanti 2022); auto: searched")
    p.add_argument("--gpus-per-node", type=count, help="GPUs per node (default: the device's usual system)")
    p.add_argument("--nic-gbps", type=number, help="network between nodes, Gb/s per GPU (default: the device's system)")
    p.add_argument("--dp-overlap", type=number, default=None,
                   help="share of data-parallel communication hidden behind compute, the parameter all-gathers "
                        "included (default: the framework's)")
    p.add_argument("--tp-overlap", type=number, default=None,
                   help="share of tensor-parallel communication hidden behind compute, the backward's input-gradient "
                        "collectives included (default: the framework's)")
    speed = p.add_mutually_exclusive_group()
    speed.add_argument("--mfu", type=number, help="model FLOPs utilisation, end to end (default: predicted by the step-time model)")
    speed.add_argument("--hfu", type=number, help="hardware FLOPs utilisation (recompute counted), end to end")
    speed.add_argument("--tokens-per-s", type=number, help="a measured run's tokens per second per GPU")
    speed.add_argument("--calibration", metavar="JSON", help="a calibration of this GPU (trainingcost calibrate): the "
                                                              "predictor prices the model's matrix products")
    speed.add_argument("--measured-run", metavar="DIR", help="a measured run (train --out-dir DIR, or its measured.parquet): "
                                                             "its achieved FLOP/s, and its joules per FLOP where it "
                                                             "measured energy")
    p.add_argument("--device-model", metavar="JSON",
                   help="the device's own numbers for the predicted step time (trainingcost calibrate --device-model, "
                        "run on that GPU): they replace the catalogue's GEMM ceiling, bandwidth, attention and launch")
    p.add_argument("--measured-rule", default="bp", choices=rule_names(),
                   help="the rule --tokens-per-s and --joules-per-token were measured under (default bp)")
    p.add_argument("--joules-per-token", type=number, help="measured energy per token per GPU (default: TDP)")
    p.add_argument("--power-utilisation", type=number, default=1.0, help="share of the TDP drawn (default 1.0)")
    p.add_argument("--power-limit", type=number, metavar="W",
                   help="the GPUs' power limit in watts (nvidia-smi -pl), for a device with a published power curve "
                        "(h100-sxm, h100-hbm2e): its predicted compute slows along the curve, its energy is counted at "
                        "the limit "
                        "(default: the catalogue's power, e.g. 700 W for h100-sxm, 500 W for h100-hbm2e)")
    p.add_argument("--goodput", type=number, default=1.0,
                   help="share of the wall-clock spent in training steps (default 1.0: step time only; Llama 3's "
                        "405B run kept more than 90%% through 466 interruptions, Dubey et al. 2024, section 3.3.4)")
    p.add_argument("--pue", type=number, help="power usage effectiveness (default 1.1)")
    p.add_argument("--carbon-intensity", type=number, help="kg CO2e per kWh (default 0.429)")
    p.add_argument("--price", type=number, help="money per GPU-hour, in --currency (no default: money is left out)")
    p.add_argument("--currency", type=currency, default="USD", metavar="CODE",
                   help="the currency of --price and of the cost column, an ISO 4217 code (default USD)")
    p.add_argument("--mirror-steps", type=count, default=1, help="weight-mirror steps per training step (WM)")
    p.add_argument("--target-loss", type=number,
                   help="plan at equal quality: each rule gets the compute its frontier needs to reach this validation "
                        "loss, as a multiple of BP's (with --frontiers; docs/planning.md)")
    p.add_argument("--frontiers", metavar="PARQUET",
                   help="the scaling study's frontiers (results/tables/frontiers.parquet) that --target-loss reads")
    p.add_argument("--require-fit", action="store_true",
                   help="exit with status 1 where a rule does not fit (default: 0, the costs printed and marked)")
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
