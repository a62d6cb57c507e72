"""The memory model: bytes held during one training step, per rule, optimizer and dtype.

Components (each in bytes, all tensors in the given dtype):
- ``parameters``: every trainable tensor, biases included, a tied table once
  (each layer kind's ``params``, :mod:`.layers`);
- ``gradients``: one gradient per parameter (every rule writes ``.grad``), plus
  the feedback matrices of a rule that trains them (KP);
- ``feedback`` (the rule's ``memory.feedback``): ``weights``, a B of W's shape
  for every weight matrix (FA, KP, WM); ``blocks``, one d x d matrix per block
  and per stack embedding (DFA); ``output``, one F per stack that maps the
  output error (vocab or classes wide) into the input-embedding space (PEPITA,
  MEMPEPITA);
- ``optimizer_state``: SGD none, SGD with momentum one slot, Adam two slots,
  for each trained tensor; Adam also keeps a float32 ``step`` scalar per
  parameter tensor (torch.optim.Adam/AdamW, capturable or not: 4 bytes each,
  whatever the dtype; found by the tensor meter, issue 12);
- ``activations`` (the rule's ``memory.activations``), times the batch:
  ``autograd`` keeps what autograd saves for the backward (each kind's
  ``saved``); ``pepita`` keeps the standard pass's outputs that its updates
  subtract (``kept``), plus the largest single-layer ``working`` set of the
  modulated pass, and the output error; ``mempepita`` keeps only the largest
  working set twice, for the clean and the modulated pass run side by side
  (what two adjacent layers need, Pau & Aymone 2023), plus the output error.
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from . import tape
from . import templates as T
from .catalogue import rule
from .layers import KINDS
from .tape.programs import OPTIMIZER_SLOTS, STEP_SCALAR_BYTES  # the tape's optimizer (Adam's float32 `step`)

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}
COMPONENTS = ("parameters", "gradients", "feedback", "optimizer_state", "activations")
PERSISTENT = ("parameters", "gradients", "feedback", "optimizer_state")
# The executed model (:mod:`.tape`): bytes alive when a step begins (what it keeps between steps, its buffers and
# its batch) and the most bytes alive during the step and during each of its phases (-1: no such phase).
EXECUTED_COLUMNS = ("buffers", "batch", "step_start", "peak", *tape.PEAK_PHASE_COLUMNS)
MEMORY_COLUMNS = ("config_id", "rule", "optimizer", "dtype", "parameter_count", *COMPONENTS, "total", *EXECUTED_COLUMNS)
TOKEN_BYTES = 8  # int64 token ids and targets
PER_LAYER = ("params", "weights", "saved", "working", "kept", "param_tensors")


def shapes_namespace(t: T.Templates, index) -> T.Shapes:
    """The names a layer kind's expressions read (see :class:`.spec.LayerKind`), for templates ``index``."""
    return T.Shapes(t, index)


def _per_layer(t: T.Templates) -> dict[str, np.ndarray]:
    """Elements per layer instance of each declared quantity (0 where a kind declares none)."""
    values = {name: np.zeros(len(t), dtype=np.int64) for name in PER_LAYER}
    for kind, index in t.kind_index().items():
        spec = KINDS[kind] if kind in KINDS else None
        if spec is None:
            continue
        s = shapes_namespace(t, index)
        for name in PER_LAYER:
            expr = getattr(spec, name)
            if expr is not None:
                values[name][index] = expr(s)
    return values


def _reduce(values: np.ndarray, order: np.ndarray, starts: np.ndarray, op) -> np.ndarray:
    return op.reduceat(values[order], starts)


def memory_table(configs: pd.DataFrame, rules, dtypes=("fp32",), optimizers=("sgd",), executed: bool = True,
                 routing=None) -> pd.DataFrame:
    """One row per (config_id, rule, optimizer, dtype): bytes per component (the hand model, summed: ``total``)
    and the executed model's step start, step peak and phase peaks (:mod:`.tape`; -1 without ``executed``: a
    caller that reads the components only, such as the plan, skips the replay). A mixture of experts is replayed
    token-balanced with every expert primed, or with ``routing``, a measured step's (``MemoryReading.routing_record``:
    its calls and the experts primed when it began, whose absent gradients and state ``step_start`` then leaves out;
    or the calls alone; :mod:`.tape.moe`)."""
    t = T.build(configs, "layer")
    model_layer = np.array([KINDS[k].model_layer for k in t.kind], dtype=bool)
    per = _per_layer(t)
    count = np.where(model_layer, t.count, 0)
    order = np.argsort(t.cfg, kind="stable")
    starts = np.searchsorted(t.cfg[order], np.arange(len(configs)))

    def total(name):
        return _reduce(per[name] * count, order, starts, np.add)

    def peak(name):
        return _reduce(np.where(model_layer, per[name], 0), order, starts, np.maximum)

    c = {k: configs[k].to_numpy(dtype=np.int64) for k in ("d_model", "enc_layers", "dec_layers", "seq_len", "tgt_len", "vocab", "batch", "classes")}
    d, B = c["d_model"], c["batch"]
    out_width = np.where(c["classes"] > 0, c["classes"], c["vocab"])
    out_rows = np.where(c["classes"] > 0, 1, c["tgt_len"])
    encdec = configs["arch"].to_numpy() == "encoder-decoder"
    n_stacks = np.where(encdec, 2, 1)
    encoder_output = np.where(encdec, c["seq_len"] * d, 0)  # read by every cross-attention, held once
    blocks = c["enc_layers"] + c["dec_layers"]
    arch = configs["arch"].to_numpy()
    unit_errors = d * (np.where(arch != "decoder", (c["enc_layers"] + 1) * c["seq_len"], 0)
                       + np.where(arch != "encoder", (c["dec_layers"] + 1) * c["tgt_len"], 0))
    error = out_rows * out_width

    params = total("params")
    param_tensors = total("param_tensors")
    working = peak("working")
    activations = {
        "autograd": lambda: total("saved") + encoder_output,
        "pepita": lambda: total("kept") + working + error + encoder_output,
        "mempepita": lambda: 2 * working + error + 2 * encoder_output,
        # TP, DTP, LRA: autograd's graph inside the units, plus one error (target) per unit: each block and each
        # stack's embedding, rows x d
        "targets": lambda: total("saved") + encoder_output + unit_errors,
    }
    feedback = {
        "none": lambda: 0 * params,
        "weights": lambda: total("weights"),
        "blocks": lambda: (c["enc_layers"] + c["dec_layers"] + n_stacks) * d * d,  # one per block and per embedding
        "output": lambda: n_stacks * out_width * d,  # one F per stack input
        "inverses": lambda: blocks * (d * d + d),  # V and c per block (TP, DTP)
        "error_weights": lambda: blocks * d * d + out_width * d,  # E per block and at the head (LRA)
    }
    # The feedback's tensors (per-tensor optimizer scalars, where the feedback is trained)
    feedback_tensors = {"weights": lambda: linears, "inverses": lambda: 2 * blocks, "error_weights": lambda: blocks + 1}
    # Buffers: each stack's sinusoidal table (rows x d, in the dtype), or each rotary self-attention's cos and sin
    # (rows x head_dim each, float32 tables cast to the dtype), a decoder's sliding-window mask (rows x rows, in the
    # dtype), or each stack's relative-position buckets (rows x rows,
    # int64, T5); a rule's own buffers per weight matrix (RuleMemory.matrix_buffer_bytes: WM's float64 norms).
    options = T.option_columns(configs)
    stack_rows = [np.where(configs["arch"].to_numpy() != "decoder", c["seq_len"], 0),  # the encoder's, the decoder's
                  np.where(configs["arch"].to_numpy() != "encoder", c["tgt_len"], 0)]
    rows_per_stack = stack_rows[0] + stack_rows[1]
    sinusoidal = (options["added_positions"] > 0) & (options["learned"] == 0)
    # (latent attention: its rotary part's, rows x qk_rope_head_dim; multi-token prediction's blocks: their own)
    rotary_tables = 2 * options["rotary"] * np.where(options["kv_lora_rank"] > 0, options["qk_rope_head_dim"],
                                                      options["head_dim"]) * (
        np.where(configs["arch"].to_numpy() != "decoder", c["seq_len"] * c["enc_layers"], 0)
        + c["tgt_len"] * (c["dec_layers"] + options["mtp_depth"]))
    window_masks = np.where(options["sliding_window"] > 0, stack_rows[1] * stack_rows[1], 0)  # a decoder's, in the dtype
    # soft-capped attention (Gemma 2): a decoder stack's two additive masks, the window's (or causal) and the causal one
    window_masks = np.where(options["attention_softcap"] > 0, 2 * stack_rows[1] * stack_rows[1], window_masks)
    position_buffers = np.where(sinusoidal, rows_per_stack * d, 0) + rotary_tables + window_masks
    bucket_bytes = options["relative"] * TOKEN_BYTES * sum(rows * rows for rows in stack_rows)
    # T5's relative-position tables (buckets x heads per stack): PEPITA and MEMPEPITA never update them (their output
    # does not depend on the input; docs/learning_rules.md), so they have no gradient and no optimizer state there.
    relative_tables = options["relative"] * sum((rows > 0).astype(np.int64) for rows in stack_rows)
    relative_elements = relative_tables * options["relative_buckets"] * configs["heads"].to_numpy(dtype=np.int64)
    families = np.array([KINDS[k].family for k in t.kind])
    ffn_matrices = 2 + options["gated"][t.cfg]
    moe_matrices = options["experts"][t.cfg] * ffn_matrices + 1 + (options["shared_expert_ff"][t.cfg] > 0) * (
        ffn_matrices + options["shared_expert_gate"][t.cfg])  # experts, router; shared expert and its gate
    latent_matrices = 3 + np.where(options["q_lora_rank"][t.cfg] > 0, 2, 1)  # kv_a, kv_b, o; q, or q_a and q_b
    matrices = np.select([t.kind == "latent_attention", families == "attention", families == "ffn", families == "head",
                          families == "moe", families == "linear"],
                         [latent_matrices, 4, ffn_matrices, 1, moe_matrices, 1], 0)  # train/model.py
    linears = _reduce(np.where(model_layer, t.count * matrices, 0), order, starts, np.add)
    # The batch: int64 token ids per stack and targets (one per output row), each its own storage.
    batch = TOKEN_BYTES * (B * rows_per_stack + B * out_rows)
    frames = []
    for name in rules:
        parts = rule(name).memory
        spec = rule(name)
        fed = feedback[parts.feedback]()
        kept = activations[parts.activations]()
        frozen = parts.activations in ("pepita", "mempepita")
        trained = params - (relative_elements if frozen else 0) + (fed if parts.trains_feedback else 0)
        trained_tensors = param_tensors - (relative_tables if frozen else 0)
        for optimizer in optimizers:
            for dtype in dtypes:
                size = DTYPE_BYTES[dtype]
                part = {
                    "parameters": params * size,
                    "gradients": trained * size,
                    "feedback": fed * size,
                    # (KP's feedback matrices are parameters too: one more step scalar per weight matrix)
                    "optimizer_state": OPTIMIZER_SLOTS[optimizer] * trained * size
                    + STEP_SCALAR_BYTES[optimizer] * (trained_tensors + (feedback_tensors[parts.feedback]()
                                                                       if parts.trains_feedback else 0)),
                    "activations": kept * B * size,
                }
                frame = pd.DataFrame(
                    {
                        "config_id": configs["config_id"].to_numpy(),
                        "rule": name,
                        "optimizer": optimizer,
                        "dtype": dtype,
                        "parameter_count": params,
                        **part,
                    }
                )
                frame["total"] = sum(part.values())
                buffers = position_buffers * size + bucket_bytes + parts.matrix_buffer_bytes * linears
                start = sum(part[k] for k in PERSISTENT) + buffers + batch
                frame["buffers"], frame["batch"], frame["step_start"] = buffers, batch, start
                replayed = (tape.step_peaks(configs, name, optimizer, size, start, part["gradients"],
                                             spec.defaults.get("weight_decay", 0.0), routing=routing) if executed else
                            {c: np.full(len(configs), -1, dtype=np.int64) for c in ("peak", *tape.PEAK_PHASE_COLUMNS)})
                for column, values in replayed.items():
                    frame[column] = values
                frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    for column in ("parameter_count", *COMPONENTS, "total", *EXECUTED_COLUMNS):
        table[column] = table[column].astype("int64")
    # Configuration-major order, like the cost table.
    position = {cid: i for i, cid in enumerate(configs["config_id"])}
    table = table.sort_values("config_id", key=lambda s: s.map(position), kind="stable").reset_index(drop=True)
    return table[list(MEMORY_COLUMNS)]
