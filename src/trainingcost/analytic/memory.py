"""The memory model: bytes held during one training step, per rule, optimizer and dtype.

Components (each in bytes, all tensors in the given dtype):
- ``parameters``: every trainable tensor, biases included, no weight tying;
- ``gradients``: one gradient per parameter (every rule writes ``.grad``), plus
  KP's gradient for its feedback matrices;
- ``feedback``: FA/KP/WM keep a B of W's shape for every weight matrix (q, k,
  v, o, both FFN layers, head); DFA one d x d matrix per block and per stack
  embedding; PEPITA and MEMPEPITA one F per stack that maps the output error
  (vocab or classes wide) into the input-embedding space (out x d);
- ``optimizer_state``: SGD none, SGD with momentum one slot, Adam two slots,
  for each parameter (and KP's feedback matrices, which its optimizer trains);
- ``activations``: what a step keeps between its passes, times the batch.
  BP-like rules keep what autograd saves for the backward (inputs of products,
  Q, K, V, the fused attention's output and log-sum-exp, LayerNorm input and
  statistics, both FFN hidden tensors, the logits). PEPITA keeps the standard
  pass's outputs that its updates subtract, plus the largest single-layer
  working set (input, intermediates, output) of the modulated pass, and the
  output error. MEMPEPITA keeps only the largest working set twice, for the
  clean and the modulated pass run side by side (what two adjacent layers
  need, Pau & Aymone 2023), plus the output error.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import templates as T

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}
COMPONENTS = ("parameters", "gradients", "feedback", "optimizer_state", "activations")
MEMORY_COLUMNS = ("config_id", "rule", "optimizer", "dtype", "parameter_count", *COMPONENTS, "total")
FEEDBACK_RULES = ("fa", "kp", "wm")


def _per_layer(t: T.Templates) -> dict[str, np.ndarray]:
    """Elements per layer instance: parameters, weight-matrix entries, and per-sequence activations."""
    kind = t.kind
    d = t.config_column("d_model")
    ff = t.config_column("d_ff")
    h = t.config_column("heads")
    V = t.config_column("vocab")
    M, N, out = t.M, t.N, t.out
    attention = np.isin(kind, ("self_attention", "masked_self_attention", "cross_attention"))
    head = np.isin(kind, ("lm_head", "classifier_head"))
    is_ = {k: kind == k for k in ("embedding", "positional_encoding", "ffn", "add_norm")}
    zero = np.zeros(len(t), dtype=np.int64)

    def pick(*cases):
        value = zero.copy()
        for mask, expr in cases:
            value = np.where(mask, expr, value)
        return value

    return {
        "params": pick(
            (is_["embedding"], V * d),
            (attention, 4 * d * d + 4 * d),
            (is_["ffn"], 2 * d * ff + ff + d),
            (is_["add_norm"], 2 * d),
            (head, d * out + out),
        ),
        "weights": pick((attention, 4 * d * d), (is_["ffn"], 2 * d * ff), (head, d * out)),
        "saved": pick(
            (attention, 3 * M * d + 2 * N * d + M * h),
            (is_["add_norm"], M * d + 2 * M),
            (is_["ffn"], M * d + 2 * M * ff),
            (head, M * d + M * out),
        ),
        # Alive during one forward of the layer without autograd: input, intermediates, output.
        "working": pick(
            (is_["embedding"], M * d),
            (is_["positional_encoding"], 2 * M * d),
            (attention, 4 * M * d + 2 * N * d),
            (is_["add_norm"], 3 * M * d),
            (is_["ffn"], 2 * M * d + 2 * M * ff),
            (head, M * d + M * out),
        ),
        "kept": pick(
            (is_["embedding"] | is_["add_norm"], M * d),
            (attention, 2 * M * d + 2 * N * d),
            (is_["ffn"], M * ff + M * d),
        ),
    }


def _reduce(values: np.ndarray, order: np.ndarray, starts: np.ndarray, op) -> np.ndarray:
    return op.reduceat(values[order], starts)


def memory_table(configs: pd.DataFrame, rules, dtypes=("fp32",), optimizers=("sgd",)) -> pd.DataFrame:
    """One row per (config_id, rule, optimizer, dtype), bytes per component."""
    t = T.build(configs, "layer")
    model_layer = ~np.isin(t.kind, ("error_projection", "dfa_projection"))
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
    error = out_rows * out_width

    params = total("params")
    weights = total("weights")
    saved = total("saved") + encoder_output
    working = peak("working")
    activations = {
        "bp": saved,
        "fa": saved,
        "kp": saved,
        "wm": saved,
        "dfa": saved,
        "pepita": total("kept") + working + error + encoder_output,
        "mempepita": 2 * working + error + 2 * encoder_output,
    }
    feedback = {
        "bp": 0 * params,
        "fa": weights,
        "kp": weights,
        "wm": weights,
        "dfa": (c["enc_layers"] + c["dec_layers"] + n_stacks) * d * d,  # one per block and per embedding
        "pepita": n_stacks * out_width * d,  # one F per stack input
        "mempepita": n_stacks * out_width * d,
    }
    frames = []
    for rule in rules:
        trained = params + (feedback[rule] if rule == "kp" else 0)
        for optimizer in optimizers:
            for dtype in dtypes:
                size = DTYPE_BYTES[dtype]
                part = {
                    "parameters": params * size,
                    "gradients": trained * size,
                    "feedback": feedback[rule] * size,
                    "optimizer_state": OPTIMIZER_SLOTS[optimizer] * trained * size,
                    "activations": activations[rule] * B * size,
                }
                frame = pd.DataFrame(
                    {
                        "config_id": configs["config_id"].to_numpy(),
                        "rule": rule,
                        "optimizer": optimizer,
                        "dtype": dtype,
                        "parameter_count": params,
                        **part,
                    }
                )
                frame["total"] = sum(part.values())
                frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    for column in ("parameter_count", *COMPONENTS, "total"):
        table[column] = table[column].astype("int64")
    # Configuration-major order, like the cost table.
    position = {cid: i for i, cid in enumerate(configs["config_id"])}
    table = table.sort_values("config_id", key=lambda s: s.map(position), kind="stable").reset_index(drop=True)
    return table[list(MEMORY_COLUMNS)]
