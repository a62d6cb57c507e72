"""Every column of every table trainingcost writes: its unit and one line saying what it holds (issue 63).

``write_parquet`` (io.py) puts both into each parquet field's metadata (``unit``, ``description``), so a table read
anywhere explains itself; ``docs/columns.md`` is generated from here (``python -m trainingcost.config.columns``), and
the workflow's tests check that no column of the tables it writes lacks an entry. A column is found by its name:
first the names below, then the families (``mem_*``, ``step_*_s``, ``source_*`` ...), then the model's own fields
(config/model.py's declarations: their help is the description).

Units: ``bytes``; ``s`` (seconds); ``FLOPs`` and ``MACCs`` (exact integer counts where the column is int64);
``FLOP/s``; ``J``; ``kWh``; ``t CO2e`` (tonnes); ``tokens``; ``tokens/s``; ``sequences``; ``count``; ``share`` (a fraction of
1); ``ratio`` (a quotient of two like quantities); ``nats`` (a loss, natural log); ``money`` (in the ``currency``
column's currency); ``W``; ``text``; ``bool``; ``id``.
"""

from __future__ import annotations

import re

# name -> (unit, description)
COLUMNS: dict[str, tuple[str, str]] = {
    # -- keys shared by many tables
    "config_id": ("id", "the configuration: a hash of its canonical fields (configs.parquet has them all)"),
    "name": ("text", "the sweep entry (a preset or a named model or grid) the configuration comes from"),
    "rule": ("text", "the learning rule, by its catalogue name (`trainingcost estimate --help` lists them)"),
    "cost_model": ("text", "the cost model: paper, executed, causal, kaplan, textbook or survey (docs/cost_models.md)"),
    "seed": ("count", "the training run's random seed"),
    "layer": ("text", "the layer, named stack.block.kind (encoder.0.self_attention), or unattributed"),
    "layer_kind": ("text", "the kind of layer: embedding, self_attention, ffn, add_norm, head ..."),
    "stack": ("text", "encoder or decoder"),
    "block": ("count", "the block's index in its stack; -1 for the layers outside the blocks"),
    "phase": ("text", "the phase of a training step: forward, backward, error_projection, modulated_pass, "
                      "weight_update, optimizer_step ... (docs/cost_models.md)"),
    "status": ("text", "how the run ended: ok, diverged, oom, error or failed (docs/failures.md)"),
    "message": ("text", "why a run did not end ok, in one line"),
    "kind": ("text", "the row's kind: a step's kind (warmup, counted, timed) or a frontier table's (frontier, fit, "
                     "multiplier, headline, depth)"),
    # -- analytic.parquet
    "maccs": ("MACCs", "multiply-accumulates of the layer in the phase, exact"),
    "flops": ("FLOPs", "floating-point operations (2 per MACC, plus elementwise work where the cost model counts it), "
                       "exact"),
    "elementwise_flops": ("FLOPs", "executed only: an estimate of the elementwise work (biases, residual adds, softmax, "
                                   "activations, norms) that flops leaves out (docs/cost_models.md, elementwise_flops)"),
    # -- memory.parquet (the memory model, bytes of one training step)
    "optimizer": ("text", "the optimizer: sgd, momentum or adam"),
    "dtype": ("text", "the training dtype: fp32, bf16 or fp16; in comm.parquet the collective's element type (int32 "
                      "for DDP's bucket broadcasts)"),
    "parameter_count": ("count", "the model's parameters (every expert's)"),
    "parameters": ("bytes", "the parameters' bytes"),
    "gradients": ("bytes", "the gradients' bytes"),
    "feedback": ("bytes", "the feedback matrices' bytes (FA, KP, WM, DFA and the target rules)"),
    "optimizer_state": ("bytes", "the optimizer's state (momentum, Adam's two moments)"),
    "activations": ("bytes", "the activations kept for the update, summed over the step (the paper's accounting)"),
    "total": ("bytes", "parameters + gradients + feedback + optimizer state + activations: the components summed, "
                       "tensors never alive together included"),
    "buffers": ("bytes", "buffers that are not parameters (position tables)"),
    "step_start": ("bytes", "tensor bytes alive when a step starts (the executed memory model's replay)"),
    "peak": ("bytes", "the step's tensor peak from the executed memory model's replay, equal to the tensor meter"),
    # -- configs.parquet: the model's core fields (the options are described by their declarations)
    "arch": ("text", "encoder, decoder or encoder-decoder"),
    "d_model": ("count", "the model width"),
    "heads": ("count", "attention heads"),
    "d_ff": ("count", "the FFN's inner width (each expert's, for a mixture of experts)"),
    "enc_layers": ("count", "encoder blocks"),
    "dec_layers": ("count", "decoder blocks"),
    "seq_len": ("tokens", "the sequence length (the encoder's, for an encoder-decoder)"),
    "tgt_len": ("tokens", "the decoder's sequence length of an encoder-decoder"),
    "vocab": ("count", "the vocabulary size"),
    "batch": ("sequences", "sequences per training step"),
    "classes": ("count", "classes of a classification head; 0 for a language-model head"),
    # -- measured.parquet (one row per run, layer and phase: docs/measurement.md)
    "steps_run": ("count", "the steps the run took"),
    "first_loss": ("nats", "the training loss of the first step"),
    "final_loss": ("nats", "the training loss of the last step"),
    "val_loss": ("nats", "the validation loss"),
    "val_accuracy": ("share", "the validation accuracy"),
    "phase_time_median_s": ("s", "the phase's time per step, median over the timed steps"),
    "phase_time_iqr_s": ("s", "the interquartile range of the phase's time over the timed steps"),
    "phase_time_min_s": ("s", "the phase's shortest time over the timed steps"),
    "phase_peak_memory_bytes": ("bytes", "the process's peak memory during the phase (CUDA's allocator on a GPU)"),
    "phase_tensor_peak_bytes": ("bytes", "the tensor meter's peak during the phase"),
    "timed_steps": ("count", "the steps timed (after the warm-up and the FLOP-counted step)"),
    "step_time_median_s": ("s", "the step's time, median over the timed steps"),
    "step_time_iqr_s": ("s", "the interquartile range of the step's time"),
    "step_time_min_s": ("s", "the shortest step"),
    "cpu_time_per_wall": ("ratio", "the process's CPU time over the wall time while timing (1 per busy thread)"),
    "runnable_others_median": ("count", "other runnable processes on the machine while timing, median"),
    "load_before": ("count", "the machine's 1-minute load average before the run"),
    "load_after": ("count", "the machine's 1-minute load average after the run"),
    "steal_fraction": ("share", "the share of CPU time a hypervisor took from this machine while timing"),
    "cores": ("count", "this machine's cores"),
    "gpu_clock_reasons": ("text", "why the GPU's clocks were held back while timing (NVML), where any"),
    "timing_quality": ("text", "how far the timing can be trusted: ok, noisy or contended (docs/measurement.md)"),
    "tokens_per_s": ("tokens/s", "tokens trained per second (per GPU), at the median step time"),
    "flops_per_step": ("FLOPs", "the FLOPs of one training step, counted by torch's FlopCounterMode"),
    "achieved_flops_per_s": ("FLOP/s", "flops_per_step over the median step time"),
    "peak_flops_per_s": ("FLOP/s", "the device's dense peak in the run's dtype (the hardware catalogue)"),
    "mfu": ("share", "model FLOPs utilisation: achieved over peak FLOP/s"),
    "hfu": ("share", "hardware FLOPs utilisation: recomputed work counted, over the peak"),
    "peak_memory_bytes": ("bytes", "the process's peak memory (maximum RSS on a CPU, CUDA's allocator on a GPU)"),
    "tensor_start_bytes": ("bytes", "the tensor meter's bytes alive at the start of the measured step"),
    "tensor_peak_bytes": ("bytes", "the tensor meter's peak over the measured step"),
    "tensor_end_bytes": ("bytes", "the tensor meter's bytes alive at the end of the measured step"),
    "tensor_peak_layer": ("text", "the layer running when the tensor peak was reached"),
    "tensor_peak_phase": ("text", "the phase running when the tensor peak was reached"),
    "tensor_peak_op": ("text", "the operation that reached the tensor peak"),
    "tensor_routing": ("text", "a mixture of experts: the tokens routed to each expert in the measured step (JSON)"),
    "energy_per_step_j": ("J", "the GPU's energy per step (NVML), median over the timed steps"),
    "energy_source": ("text", "where the energy comes from (NVML's energy counter), or why there is none"),
    "energy_advances": ("count", "how many times the energy counter advanced over the timed steps"),
    "energy_quality": ("text", "how far the energy can be trusted"),
    "task": ("text", "the training task: lm, classify, copy or reverse"),
    "lr": ("ratio", "the learning rate"),
    "weight_decay": ("ratio", "the weight decay"),
    "mirror_steps": ("count", "weight-mirror steps per training step (WM)"),
    "steps": ("count", "the training steps asked for"),
    "warmup": ("count", "untimed warm-up steps"),
    "trainingcost_version": ("text", "the package's version that ran"),
    "git_commit": ("text", "the repository's commit that ran"),
    "torch_version": ("text", "torch's version"),
    "cuda_version": ("text", "CUDA's version, on a GPU"),
    "device": ("text", "cpu, cuda or mps"),
    "device_name": ("text", "the device's name (the CPU model, or torch's name for the GPU)"),
    "cpu_threads": ("count", "torch's threads"),
    "hostname": ("text", "the machine that ran it"),
    "timestamp_utc": ("text", "when the run ended, ISO 8601, UTC"),
    # -- steps.parquet (one row per step)
    "step": ("count", "the step's number, from 1"),
    "loss": ("nats", "the step's training loss; a frontier's loss: the lowest validation loss reached"),
    # -- trace.parquet (one traced step's operations: measure/trace.py)
    "timed_phase": ("text", "the timed phase the operation ran in, or between_phases"),
    "op": ("text", "the operation: an aten operator in the trace and kernel tables; in comm.parquet the collective "
                   "(all_reduce, all_gather, reduce_scatter, broadcast)"),
    "cls": ("text", "its class: matmul, attention, elementwise, view, copy, host ..."),
    "count": ("count", "how many times the operation ran with this signature in the step"),
    "bytes_read": ("bytes", "bytes the operation reads, each time"),
    "bytes_written": ("bytes", "bytes the operation writes, each time"),
    "signature": ("text", "the operation's arguments: shapes, strides and dtypes (JSON)"),
    "context": ("text", "plain, or the autocast or no-grad context it ran in"),
    "spec": ("text", "the run's specification (JSON)"),
    # -- comparison.parquet (every cost model against the measurement)
    "granularity": ("text", "layer, phase or step: what the row compares"),
    "predicted_flops": ("FLOPs", "the cost model's FLOPs"),
    "measured_flops": ("FLOPs", "FlopCounterMode's FLOPs"),
    "flops_ratio": ("ratio", "predicted over measured FLOPs"),
    "flops_rel_error": ("share", "(predicted - measured) / measured FLOPs"),
    "predicted_memory_bytes": ("bytes", "the executed memory model's peak"),
    "measured_peak_memory_bytes": ("bytes", "the process's measured peak memory"),
    "memory_source": ("text", "what measured the memory (CUDA's allocator, or the CPU process's maximum RSS)"),
    "measured_tensor_peak_bytes": ("bytes", "the tensor meter's peak"),
    "paper_memory_bytes": ("bytes", "the paper's memory accounting: the components summed"),
    "dominant_class": ("text", "the class of work the prediction spends most time on"),
    "miss_class": ("text", "the class of work the prediction misses most (where the profiler split the step)"),
    "bytes_moved": ("bytes", "bytes the traced operations read and write"),
    "ops": ("count", "traced operations"),
    # -- rule_ratios.parquet
    "source": ("text", "the cost model, or measured"),
    "metric": ("text", "what is compared: flops, time or memory"),
    "value": ("as metric", "the rule's value of the metric, in the metric's unit (FLOPs, s or bytes)"),
    "bp_value": ("as metric", "BP's value of the metric on the same configuration"),
    "ratio_to_bp": ("ratio", "value over bp_value"),
    # -- plan.parquet (a whole run: docs/planning.md)
    "gpu": ("text", "the device (the hardware catalogue's name, or one's own)"),
    "gpus": ("count", "GPUs"),
    "dp": ("count", "the data-parallel degree"),
    "tp": ("count", "the tensor-parallel degree"),
    "pp": ("count", "the pipeline-parallel degree"),
    "cp": ("count", "the context-parallel degree"),
    "ep": ("count", "the expert-parallel degree"),
    "etp": ("count", "the experts' tensor-parallel degree"),
    "interleave": ("count", "virtual pipeline stages per GPU (interleaved 1F1B)"),
    "replicate": ("count", "HSDP's replica groups"),
    "sequence_parallel": ("bool", "Megatron's sequence parallelism"),
    "sharding": ("text", "data-parallel sharding: none, zero1, zero2, zero3 or fsdp"),
    "zero3_gather": ("text", "what a ZeRO-3 or FSDP all-gather brings in at a time: module, sublayer or block"),
    "precision": ("text", "fp32, bf16-mixed, fp16-mixed or fp8-mixed"),
    "checkpointing": ("text", "activation checkpointing: none, selective or full"),
    "tokens": ("tokens", "the run's training tokens"),
    "tokens_per_sequence": ("tokens", "tokens per sequence"),
    "global_batch": ("sequences", "sequences per optimizer step"),
    "micro_batch": ("sequences", "sequences per GPU per forward-backward"),
    "grad_accumulation": ("count", "micro-batches per optimizer step on each replica"),
    "optimizer_steps": ("count", "optimizer steps of the run (fractional where the tokens are not whole steps)"),
    "model_flops_per_token": ("FLOPs", "the cost model's FLOPs per token"),
    "model_flops": ("FLOPs", "the run's FLOPs under the cost model"),
    "recompute_flops": ("FLOPs", "FLOPs recomputed by activation checkpointing"),
    "hardware_flops": ("FLOPs", "model_flops + recompute_flops: what the GPUs execute"),
    "flops_vs_bp": ("ratio", "model_flops over BP's"),
    "step_time_s": ("s", "one optimizer step's wall-clock time"),
    "wall_clock_s": ("s", "the run's wall-clock time (over the goodput)"),
    "wall_clock_days": ("count", "wall_clock_s in days"),
    "gpu_hours": ("count", "GPUs x wall-clock hours"),
    "peak_flops_per_gpu": ("FLOP/s", "the device's dense peak in the plan's precision"),
    "energy_kwh": ("kWh", "the facility's energy: the GPUs' energy x PUE"),
    "co2e_t": ("t CO2e", "energy_kwh x the carbon intensity"),
    "cost": ("money", "gpu_hours x the price per GPU-hour, in the currency column's currency; empty without a price"),
    "currency": ("text", "the currency of cost (ISO 4217)"),
    "step_time_low_s": ("s", "the 80% interval's lower end of step_time_s: the model's misses on published runs like "
                             "this one (docs/planning.md, the error bar); empty where the step was given"),
    "step_time_high_s": ("s", "the 80% interval's upper end of step_time_s"),
    "wall_clock_days_low": ("count", "the interval's lower end of wall_clock_days"),
    "wall_clock_days_high": ("count", "the interval's upper end of wall_clock_days"),
    "gpu_hours_low": ("count", "the interval's lower end of gpu_hours"),
    "gpu_hours_high": ("count", "the interval's upper end of gpu_hours"),
    "cost_low": ("money", "the interval's lower end of cost"),
    "cost_high": ("money", "the interval's upper end of cost"),
    "energy_kwh_low": ("kWh", "the interval's lower end of energy_kwh (energy as power x wall-clock; empty where it "
                              "was given per token or per FLOP)"),
    "energy_kwh_high": ("kWh", "the interval's upper end of energy_kwh"),
    "co2e_t_low": ("t CO2e", "the interval's lower end of co2e_t"),
    "co2e_t_high": ("t CO2e", "the interval's upper end of co2e_t"),
    "memory_capacity": ("bytes", "the device's memory"),
    "fits": ("bool", "whether the most loaded GPU's memory fits the device"),
    "max_micro_batch": ("sequences", "the largest micro-batch that fits"),
    "checkpoint_applies": ("bool", "whether the checkpointing asked for changes anything for this rule"),
    "step_dp_bytes": ("bytes", "the data-parallel collectives' buffers of one step, summed (a ring all-reduce of n "
                              "ranks sends 2(n-1)/n of its buffer per GPU, an all-gather or reduce-scatter (n-1)/n)"),
    "step_dp_collectives": ("count", "data-parallel collectives per step"),
    "ep_all_to_all_bytes": ("bytes", "bytes each GPU sends in the experts' all-to-alls of one step"),
    "compute_multiplier": ("ratio", "the rule's compute to reach the target loss over BP's (the scaling study)"),
    "token_multiplier": ("ratio", "the rule's tokens over the tokens given"),
    "goodput": ("share", "the share of the wall-clock spent in training steps"),
    "framework": ("text", "the training framework (config/frameworks.yaml)"),
    "attention": ("text", "the attention kernel: flash, flash3, cudnn or unfused"),
    "pipeline_split": ("text", "the blocks of each pipeline stage, where they are not even"),
    "offload": ("text", "what leaves the GPU: none, optimizer (ZeRO-Offload) or parameters (and the optimizer: "
                        "ZeRO-3's offload_param, FSDP's CPU offload) to the host's memory, or optimizer-nvme, "
                        "parameters-nvme to the node's NVMe drives (ZeRO-Infinity)"),
    "host_memory_per_node": ("bytes", "host memory an offload keeps per node: its GPUs' optimizer partitions (fp32 "
                                      "master weights, moments, an fp32 gradient buffer) and, with parameter offload, "
                                      "their bit16 parameter shards; on NVMe, their pinned swap buffers alone"),
    "finetune": ("text", "what trains: full (every parameter), lora or qlora (adapters on a frozen base, "
                         "analytic/finetune.py)"),
    "trained_parameters": ("count", "the parameters the rule trains: the model's (and feedback's), or the adapters' "
                                    "with --finetune lora or qlora"),
    "source_finetune": ("text", "the fine-tuning in words: the adapters' rank, targets and parameters, how the base is "
                                "stored, whether the first block's input carries a gradient; its sources"),
    "schedule": ("text", "the pipeline schedule where pp > 1: 1f1b, interleaved, zb-h1, zb-h2, zb-v or dualpipe (empty "
                         "without a pipeline)"),
    "trains_model": ("bool", "whether the rule trains this model (False: priced, not trainable here)"),
    "layout": ("text", "the layout, compact: tp, pp, v, dp, mb, ep, checkpointing, sequence parallel, ZeRO stage"),
    "rank": ("count", "the layout's place among the rule's best (1 the best)"),
    "objective": ("text", "what the best GPU count minimises: time, gpu-hours, cost or energy"),
    "best": ("bool", "the GPU count that minimises the objective for the rule"),
    "micro_batches": ("sequences", "micro-batches asked for"),
    "space": ("count", "layouts the search considered for the rule at this GPU count"),
    "fitting": ("count", "of them, the layouts whose memory fits the device"),
    "priced": ("count", "of them, the layouts priced in full (the rest proved slower by a bound first)"),
    # -- plan_memory.parquet (memory against micro-batch)
    "memory_bytes": ("bytes", "memory per GPU at this micro-batch"),
    # -- the scaling study (scaling.parquet, scaling_lr.parquet, frontiers.parquet: docs/learning_rules.md)
    "width": ("count", "the study point's d_model"),
    "depth": ("count", "the study point's blocks"),
    "layers": ("count", "blocks"),
    "compute": ("FLOPs", "training FLOPs so far (measured); a frontier's compute: its grid point"),
    "loss_lo": ("nats", "the bootstrap's 5th percentile of loss"),
    "loss_hi": ("nats", "the bootstrap's 95th percentile of loss"),
    "target_loss": ("nats", "the validation loss a multiplier is computed at"),
    "multiplier": ("ratio", "the rule's compute to reach target_loss over BP's"),
    "multiplier_lo": ("ratio", "the bootstrap's 5th percentile of multiplier"),
    "multiplier_hi": ("ratio", "the bootstrap's 95th percentile of multiplier"),
    "never_share": ("share", "the share of bootstrap replicates in which the rule never reaches target_loss"),
    "reaches": ("bool", "whether the rule's frontier reaches target_loss within the measured range"),
    "headline": ("bool", "the row of the headline target (the loss BP reaches with the headline compute)"),
    "a": ("ratio", "the fit L(C) = a C^-b + c: its scale a"),
    "b": ("ratio", "the fit L(C) = a C^-b + c: its exponent b"),
    "b_lo": ("ratio", "the bootstrap's 5th percentile of b"),
    "b_hi": ("ratio", "the bootstrap's 95th percentile of b"),
    "c": ("nats", "the fit L(C) = a C^-b + c: the irreducible loss c"),
    "c_lo": ("nats", "the bootstrap's 5th percentile of c"),
    "c_hi": ("nats", "the bootstrap's 95th percentile of c"),
    "fit_from": ("FLOPs", "the compute the fit starts at (10x the smallest of the grid: the first decade is left out)"),
    "fit_rmse": ("nats", "the fit's root mean square error in log L"),
    "gap_to_bp": ("nats", "the rule's loss minus BP's at the depth figure's compute"),
    "gap_lo": ("nats", "the bootstrap's 5th percentile of gap_to_bp"),
    "gap_hi": ("nats", "the bootstrap's 95th percentile of gap_to_bp"),
    "replicates": ("count", "bootstrap replicates"),
    "eval_step": ("count", "the step of the evaluation"),
    "chosen": ("bool", "the learning rate the search chose (the lowest final validation loss)"),
    "searched": ("bool", "whether the learning rate was searched (False: one learning rate given)"),
    "train_loss": ("nats", "the training loss at the evaluation"),
    "block_parameters": ("count", "the parameters of the blocks (embeddings and head aside): the study's size axis"),
    "executed_flops_per_step": ("FLOPs", "the executed cost model's FLOPs per step, which the measured count equals"),
    # -- distributed training: comm.parquet (each collective of rank 0), steps.parquet, measured.parquet, comm findings
    "bytes": ("bytes", "the collective's buffer: the tensor of an all-reduce or broadcast, the gathered output of an "
                       "all-gather, the unscattered input of a reduce-scatter (measure/comm.py)"),
    "group": ("count", "the ranks of the collective's process group"),
    "seconds": ("s", "the collective's time on this rank, from its start to its end (measure/comm.py)"),
    "wait_s": ("s", "time at a barrier just before the collective: the ranks' imbalance (measure/comm.py)"),
    "nproc": ("count", "the training processes (ranks) of a distributed run; 1 for one process"),
    "parallel": ("text", "the data parallelism of a distributed run: ddp, zero2 or fsdp (docs/distributed.md)"),
    "backend": ("text", "torch.distributed's backend: gloo or nccl"),
    "comm_bytes": ("bytes", "the step's collectives' buffers on rank 0, summed (measured)"),
    "comm_s": ("s", "the step's collectives' seconds on rank 0, summed (measured)"),
    "collectives": ("count", "the step's collectives on rank 0 (measured)"),
    "comm_bytes_per_step": ("bytes", "measured: the collectives' buffers per step, summed over a step, averaged over "
                                     "the steps"),
    "comm_s_per_step": ("s", "measured: rank 0's collectives' seconds per step"),
    "comm_wait_s_per_step": ("s", "measured: rank 0's barrier seconds before its collectives, per step"),
    "comm_s_slowest_per_step": ("s", "measured: each collective's seconds on its slowest rank, summed per step"),
    "collectives_per_step": ("count", "measured: collectives per step (a first step's one-off broadcasts included in "
                                      "the mean)"),
    "comm_model_bytes_per_step": ("bytes", "predicted: the communication model's buffers per step "
                                           "(analytic/comm.py), beside the measured comm_bytes_per_step"),
    "model_bytes_per_step": ("bytes", "predicted: the communication model's collective buffers per step"),
    "measured_bytes_per_step": ("bytes", "measured: the collectives' buffers per step"),
    "bytes_exact": ("bool", "the measured bytes per step equal the model's, as integers"),
    "model_collectives_per_step": ("count", "predicted: collectives per step"),
    "measured_collectives_per_step": ("count", "measured: collectives per step"),
    "measured_comm_s_per_step": ("s", "measured: collective seconds per step (on each collective's slowest rank)"),
    "predicted_comm_s_per_step": ("s", "predicted: collective seconds per step from a collectives calibration "
                                       "(trainingcost calibrate --collectives)"),
    "comm_share": ("share", "measured collective seconds over the median step time"),
    "bytes_vs_bp": ("ratio", "the model's bytes per step over BP's on the same configuration and sharding"),
    "beyond_bp": ("text", "what the rule communicates that BP does not (its declared feedback and mechanism)"),
}

# Families, tried in order after COLUMNS: (pattern, unit, description with {0} for the matched part)
FAMILIES: list[tuple[str, str, str]] = [
    (r"source_(\w+)", "text", "where {0} comes from: the document, flag or default (docs/planning.md)"),
    (r"mem_(\w+)", "bytes", "memory per GPU, most loaded GPU: {0}"),
    (r"step_(\w+)_s", "s", "the predicted step's part: {0} (docs/planning.md, 'Step time at scale')"),
    (r"time_(\w+)_s", "s", "the step's measured time in phase {0}"),
    (r"comm_bytes_(\w+)", "bytes", "measured: the collectives' buffers per step in phase {0}"),
    (r"comm_s_(\w+)", "s", "measured: rank 0's collective seconds per step in phase {0}"),
    (r"tensor_peak_(\w+)_bytes", "bytes", "the tensor meter's peak, the part that is {0}"),
    (r"peak_(\w+)", "bytes", "the executed memory model's peak during phase {0} (-1: the rule has no such phase)"),
    (r"predicted_(\w+)_s", "s", "the predictor's time of the {0} class of work"),
    (r"measured_(\w+)_s", "s", "the profiled time of the {0} class of work"),
]


def describe(column: str) -> tuple[str, str] | None:
    """(unit, description) of a column, or None where it is not documented."""
    if column in COLUMNS:
        return COLUMNS[column]
    for pattern, unit, text in FAMILIES:
        found = re.fullmatch(pattern, column)
        if found:
            return unit, text.format(found.group(1).replace("_", " "))
    from .model import OPTIONS

    if column in OPTIONS:
        meta = OPTIONS[column]
        unit = {"bool": "bool", "int": "count", "float": "ratio"}.get(meta["kind"], "text")
        return unit, f"model option: {meta['help']}"
    return None


def markdown() -> str:
    """docs/columns.md."""
    from .model import OPTIONS

    lines = ["# The tables' columns", "",
             "Every column of every table trainingcost writes (`results/**/*.parquet`, `train --out-dir`, `plan` "
             "with `--format csv` or `json`): its unit and what it holds. Each parquet field carries both in its "
             "metadata (`unit`, `description`). Generated from `src/trainingcost/config/columns.py` "
             "(`python -m trainingcost.config.columns > docs/columns.md`); the tests check that no column the "
             "workflow writes is missing here.", "",
             "Units: bytes; s (seconds); FLOPs and MACCs (exact counts where the column is an integer); FLOP/s; J; "
             "kWh; t CO2e (tonnes); tokens; tokens/s; sequences; count; share (a fraction of 1); ratio; nats (a loss); money "
             "(in the `currency` column's currency); text; bool; id.", "",
             "## Columns", "", "| column | unit | holds |", "|---|---|---|"]
    lines += [f"| `{name}` | {unit} | {text} |" for name, (unit, text) in COLUMNS.items()]
    lines += ["", "## Families", "", "| columns | unit | holds |", "|---|---|---|"]
    star = "(\\w+)"
    lines += [f"| `{pattern.replace(star, '*')}` | {unit} | {text.replace('{0}', '*')} |"
              for pattern, unit, text in FAMILIES]
    lines += ["", "## The model's options", "", "Each configuration's option columns (`configs.parquet`, and beside the "
              "measured runs), as config/model.py declares them:", "", "| column | holds |", "|---|---|"]
    lines += [f"| `{name}` | {meta['help']} |" for name, meta in OPTIONS.items()]
    return "\n".join(lines) + "\n"


def field_metadata(column: str) -> dict[bytes, bytes]:
    """A parquet field's metadata for ``column``: its unit and description, where documented."""
    found = describe(str(column))
    return {} if found is None else {b"unit": found[0].encode(), b"description": found[1].encode()}


if __name__ == "__main__":
    print(markdown(), end="")
