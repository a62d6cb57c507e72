"""The executed memory model (analytic/tape) against the tensor meter, to the byte (issue 12)."""

import itertools

import numpy as np
import pytest
import torch

from trainingcost.analytic import tape as P
from trainingcost.analytic.catalogue import rule_names
from trainingcost.analytic.memory import memory_table
from trainingcost.config import PRESETS, RuleOptions, TrainSpec, canonical_model, configs_frame
from trainingcost.measure.recorder import StepRecorder
from trainingcost.train.run import run_steps

ARCHES = {  # arch -> (fields, task)
    "decoder": (dict(arch="decoder"), "lm"),
    "encoder": (dict(arch="encoder", classes=3), "classify"),
    "encoder-decoder": (dict(arch="encoder-decoder"), "copy"),
}
SHAPES = [  # (layers, d_model, heads, d_ff, seq_len, batch, vocab): 24 tiny shapes, cycled over the cases
    (layers, d, heads, d_ff, seq, batch, vocab)
    for layers, (d, heads), d_ff, (seq, batch), vocab in itertools.islice(
        zip(itertools.cycle([1, 2, 3]), itertools.cycle([(16, 2), (24, 4), (32, 2), (16, 4)]),
            itertools.cycle([32, 48, 64, 40, 24]), itertools.cycle([(8, 2), (6, 3), (12, 2), (5, 4), (7, 1)]),
            itertools.cycle([16, 64, 256, 40, 130, 300, 24])), 24)
]
SETTINGS = [(optimizer, dtype) for optimizer in ("sgd", "momentum", "adam") for dtype in ("fp32", "bf16")]
# Each (arch, rule) meets two of the six settings, turned by the rule: every rule meets all six across the arches,
# and every arch all six across the rules (pairwise cover; the whole product took 100 s of the suite).
CASES = [(arch, rule, *SETTINGS[(2 * a + k + 2 * r) % len(SETTINGS)]) for a, arch in enumerate(ARCHES)
         for r, rule in enumerate(rule_names()) for k in range(2)]


def metered(arch: str, rule: str, optimizer: str, dtype: str, shape):
    layers, d, heads, d_ff, seq, batch, vocab = shape
    fields, task = ARCHES[arch]
    vocab = vocab + 256 if task == "lm" else vocab  # the byte-level LM needs 256 ids
    cfg = canonical_model(dict(layers=layers, d_model=d, heads=heads, d_ff=d_ff, seq_len=seq, batch=batch, vocab=vocab,
                               **fields), "")
    return cfg, meter_step(cfg, task, rule, optimizer, dtype)


def meter_step(cfg, task: str, rule: str, optimizer: str, dtype: str):
    """The tensor meter's reading of one measured step of ``cfg`` under ``rule``."""
    spec = TrainSpec(cfg=cfg, task=task, rule=rule, steps=3, seed=0, measure=True, dtype=dtype, warmup=1,
                     options=RuleOptions(optimizer=optimizer))
    recorders = []
    done = run_steps(spec, lambda r, device: recorders.append(StepRecorder(r, device, 1)) or recorders[-1])
    assert done.status == "ok", (cfg.arch, rule, done.message)
    return recorders[0].memory


def tape_and_meter(cfg, rule: str, optimizer: str, dtype: str, reading) -> tuple[dict, dict]:
    """(the executed model's, the meter's) step start, step peak and phase peaks."""
    model = memory_table(configs_frame([("", cfg)]), [rule], [dtype], [optimizer]).iloc[0]
    got = {"start": int(model["step_start"]), "peak": int(model["peak"]),
           **{p: int(model[f"peak_{p}"]) for p in P.STEP_PHASES if model[f"peak_{p}"] >= 0}}
    return got, {"start": reading.start, "peak": reading.peak, **reading.phase_peaks}


def test_the_cases_cover_every_arch_rule_optimizer_and_dtype_with_twenty_shapes():
    assert len(CASES) == 3 * len(rule_names()) * 2 and len(set(SHAPES)) >= 20
    for rule in rule_names():
        assert {(o, d) for _, r, o, d in CASES if r == rule} == set(SETTINGS), rule
    for arch in ARCHES:
        assert {(o, d) for a, _, o, d in CASES if a == arch} == set(SETTINGS), arch
        assert {r for a, r, _, _ in CASES if a == arch} == set(rule_names()), arch
    assert all(P.replays(rule) for rule in rule_names())


def test_the_executed_model_equals_the_meter_to_the_byte():
    """Step peak, every phase's peak and the step's starting bytes, for 3 arches x every rule x two of the six
    settings (SGD, momentum, Adam x fp32, bf16; see CASES), 60 steps over 24 shapes, depths 1-3: no tolerance."""
    mismatches = []
    for index, (arch, rule, optimizer, dtype) in enumerate(CASES):
        cfg, reading = metered(arch, rule, optimizer, dtype, SHAPES[index % len(SHAPES)])
        got, want = tape_and_meter(cfg, rule, optimizer, dtype, reading)
        if got != want:
            mismatches.append((arch, rule, optimizer, dtype, cfg, got, want))
    assert not mismatches, mismatches[:3]


def test_a_hand_count_of_one_bp_step():
    """One decoder block, fp32, SGD: the step peak is at the log-softmax's backward, where the saved activations,
    the logits' two float32 gradients and the log-probabilities are alive together (counted here by hand)."""
    B, T, d, h, ff, V = 2, 8, 16, 2, 32, 256
    cfg = canonical_model(dict(arch="decoder", layers=1, d_model=d, heads=h, d_ff=ff, seq_len=T, batch=B, vocab=V), "")
    row = memory_table(configs_frame([("", cfg)]), ["bp"], ["fp32"], ["sgd"]).iloc[0]
    M = B * T
    saved = (
        M * d  # the block input (the embedding plus positions), saved by q, k and v
        + 4 * M * d + h * M  # q, k, v, attention output; log-sum-exp per head and row
        + 2 * (M * d + 2 * M)  # each LayerNorm's input, mean and rstd
        + M * d  # the first LayerNorm's output, saved by the FFN's first matrix
        + 2 * M * ff  # the GELU's input and output
        + M * d  # the last LayerNorm's output, saved by the head
    )
    at_peak = saved + 3 * M * V + 1 + 1  # log-probabilities and their two gradients; the loss and d(loss)
    persistent_without_grads = row["step_start"] - row["gradients"]
    assert row["peak"] == persistent_without_grads + 4 * at_peak
    assert row["peak_backward"] == row["peak"]


def test_mempepita_holds_one_block_at_a_time():
    """MEMPEPITA's executed peak does not grow with depth; PEPITA's and BP's do."""
    frames = []
    for layers in (2, 6):
        cfg = canonical_model(dict(arch="decoder", layers=layers, d_model=64, heads=4, d_ff=256, seq_len=128, batch=8,
                                   vocab=256), "")
        frames.append(memory_table(configs_frame([("", cfg)]), ["bp", "pepita", "mempepita"]).set_index("rule"))
    activation = {rule: [f.at[rule, "peak"] - f.at[rule, "step_start"] for f in frames] for rule in frames[0].index}
    assert activation["mempepita"][1] == activation["mempepita"][0]
    assert activation["pepita"][1] > 2 * activation["pepita"][0] and activation["bp"][1] > 2 * activation["bp"][0]


def test_the_tape_refuses_a_double_free():
    tape = P.Tape(np.zeros(1, dtype=np.int64))
    buf = tape.new(8)
    tape.drop(buf)
    with pytest.raises(RuntimeError, match="dropped twice"):
        tape.drop(buf)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Architecture options the tape follows (issue 14): biases off or on q, k, v only, no head bias, a tied table, heads
# of any width and grouped-query attention, ReLU and gated FFNs, learned or no positions, token types, an embedding
# norm, pre-LN blocks with a final norm, RMSNorm, rotary positions and T5's relative bias (SDPA's math path).
OPTION_CASES = [
    # BERT-like: learned positions, token types, an embedding norm; ReLU for the FFN
    ("encoder", dict(positions="learned", max_positions=12, type_vocab=2, embedding_norm=True, ffn="relu"),
     (2, 16, 4, 40, 7, 2, 64)),
    # GPT-2-like: pre-LN with a final norm, learned positions, a tied head
    ("decoder", dict(norm_position="pre", positions="learned", tie_embeddings=True, head_bias=False),
     (2, 16, 2, 32, 8, 2, 16)),
    # Llama-like: pre-LN RMSNorm, SwiGLU, no biases, rotary positions, grouped-query attention
    ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", bias="none", head_bias=False, positions="rotary",
                     kv_heads=2), (1, 24, 4, 48, 6, 3, 44)),
    # rotary self-attention (not cross-attention) with one key/value head of width 8
    ("encoder-decoder", dict(positions="rotary", kv_heads=1, head_dim=8, bias="qkv"), (2, 16, 2, 32, 7, 2, 40)),
    # a pre-LN classifier with RMSNorm (DFA: the expanded error meets a linear through the residual, and a segment's
    # first norm reads a constant) and GeGLU
    ("encoder", dict(norm="rmsnorm", norm_position="pre", ffn="geglu"), (2, 16, 4, 40, 5, 4, 24)),
    ("encoder-decoder", dict(norm="rmsnorm", embedding_norm=True, positions="none"), (1, 16, 2, 32, 8, 2, 40)),
    ("encoder-decoder", dict(norm_position="pre", ffn="relu", positions="learned"), (2, 16, 2, 32, 7, 2, 40)),
    # T5-like: relative bias (a causal one in the decoder), pre-LN RMSNorm, ReLU, no biases, a tied head
    ("encoder-decoder", dict(positions="relative", relative_buckets=8, relative_max_distance=16, norm="rmsnorm",
                             norm_position="pre", ffn="relu", bias="none", head_bias=False, tie_embeddings=True),
     (2, 16, 4, 40, 5, 4, 24)),
    # a relative bias with grouped-query attention and a classifier head; with one key/value head (a view)
    ("encoder", dict(positions="relative", kv_heads=2), (1, 24, 4, 48, 6, 3, 44)),
    ("decoder", dict(positions="relative", kv_heads=1, head_dim=8, norm="rmsnorm"), (2, 16, 4, 40, 5, 4, 24)),
    ("decoder", dict(bias="none", head_bias=False), (2, 16, 2, 32, 8, 2, 16)),
    ("decoder", dict(bias="qkv"), (1, 24, 4, 48, 6, 3, 44)),
    ("encoder", dict(bias="attention", norm="rmsnorm", norm_position="pre", ffn="swiglu"), (2, 16, 4, 40, 7, 2, 64)),
    ("encoder", dict(bias="none", head_bias=True), (2, 16, 4, 40, 7, 2, 64)),
    ("encoder-decoder", dict(bias="qkv", head_bias=False), (1, 16, 2, 32, 8, 2, 40)),
    ("decoder", dict(tie_embeddings=True, head_bias=False), (2, 16, 2, 32, 8, 2, 16)),
    ("encoder-lm", dict(tie_embeddings=True), (1, 24, 4, 48, 6, 3, 300)),
    ("encoder-decoder", dict(tie_embeddings=True, bias="none"), (2, 16, 2, 32, 7, 2, 40)),
    ("decoder", dict(kv_heads=2), (2, 16, 4, 32, 8, 2, 16)),  # grouped-query: K and V repeated (copies)
    ("decoder", dict(kv_heads=1, head_dim=8), (1, 24, 4, 48, 6, 3, 44)),  # multi-query: the repeat is a view
    ("encoder", dict(head_dim=6), (2, 16, 4, 40, 7, 2, 64)),
    ("encoder-decoder", dict(kv_heads=2, tie_embeddings=True), (1, 16, 4, 32, 8, 2, 40)),
]


def test_the_tape_follows_the_architecture_options_to_the_byte():
    """22 option sets, each under half the rules (the other half on the next set: every rule meets every other
    option set, and each arch), SGD fp32 and Adam bf16 alternating: step start, step peak, every phase's peak.
    (The whole product, 220 steps, took 90 s of the suite; the families below run every rule.) Tied gradients: two
    in one backward are summed out of place by the engine; one from an earlier backward (DFA's head) is added in
    place."""
    mismatches = []
    settings = [("sgd", "fp32"), ("adam", "bf16")]
    replayed = [rule for rule in rule_names() if P.replays(rule)]  # (every rule)
    cases = [(case, rule) for number, case in enumerate(OPTION_CASES) for r, rule in enumerate(replayed)
             if r % 2 == number % 2]
    for index, ((arch, options, shape), rule) in enumerate(cases):
        optimizer, dtype = settings[(index // 2) % 2]
        layers, d, heads, d_ff, seq, batch, vocab = shape
        fields, task = ARCHES.get(arch, (dict(arch="encoder"), "lm"))
        cfg = canonical_model(dict(layers=layers, d_model=d, heads=heads, d_ff=d_ff, seq_len=seq, batch=batch,
                                   vocab=vocab + (256 if task == "lm" and vocab < 256 else 0), **fields, **options), "")
        got, want = tape_and_meter(cfg, rule, optimizer, dtype, meter_step(cfg, task, rule, optimizer, dtype))
        assert got["peak"] >= 0, (arch, options)  # replayed
        if got != want:
            mismatches.append((arch, options, rule, optimizer, dtype, got, want))
    assert not mismatches, mismatches[:3]


def test_every_preset_is_replayed_under_every_rule():
    """Every architecture option is followed (issue 14) and every rule replayed (issue 28): each preset's step has
    executed peaks under every rule at its published size, TP's, DTP's and LRA's units included."""
    # (a mixture of experts, which PEPITA does not train, is replayed under the rules that train it: tests/test_moe.py)
    frame = configs_frame([(name, canonical_model(entry, name)) for name, entry in PRESETS.items()
                           if not entry.get("experts")])
    table = memory_table(frame, ["bp", "pepita", "dfa", "tp", "lra"])
    assert (table.peak > table.step_start).all() and (table.peak_forward > 0).all(), \
        table.loc[table.peak <= table.step_start, ["config_id", "rule", "peak"]]
    targets = table[table.rule.isin(["tp", "lra"])]
    assert (targets.peak_target_propagation > 0).all() and (targets.peak_feedback_update > 0).all()


# The model families of issue 28 (tests/test_hf_families.py checks them against transformers): parallel blocks with
# one norm (GPT-J, Phi-1/2, Falcon-7B) or two (GPT-NeoX), partial rotary, biases on the FFN only. Each under every
# rule, SGD fp32 and Adam bf16 alternating.
FAMILY_CASES = {
    "gptj": ("decoder", dict(norm_position="pre", parallel_block="one_norm", positions="rotary", rotary_dim=2,
                             bias="ffn", head_bias=True), (2, 16, 2, 32, 6, 2, 16)),
    "gpt_neox": ("decoder", dict(norm_position="pre", parallel_block="two_norms", positions="rotary", rotary_dim=4,
                                 head_bias=False), (1, 24, 4, 48, 6, 3, 44)),
    "falcon": ("encoder", dict(norm_position="pre", parallel_block="one_norm", positions="rotary", kv_heads=1,
                               bias="none", head_bias=False), (2, 16, 2, 32, 5, 2, 24)),
    # OLMo: a LayerNorm without gain or bias (DFA: a segment's first norm reads a constant, and has no node)
    "olmo": ("decoder", dict(norm="nonparametric", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                             head_bias=False), (2, 16, 4, 40, 5, 4, 24)),
    # Cohere (Command R): a LayerNorm with a gain and no bias read by both parallel branches, SwiGLU, a tied head
    "cohere": ("decoder", dict(norm="layernorm_nobias", norm_position="pre", parallel_block="one_norm", ffn="swiglu",
                               positions="rotary", bias="none", kv_heads=2, tie_embeddings=True, head_bias=False),
               (2, 16, 4, 40, 5, 4, 24)),
    # StableLM with use_parallel_residual, q, k, v biases, grouped-query attention and partial rotary, as a classifier
    "stablelm": ("encoder", dict(norm_position="pre", parallel_block="one_norm", ffn="swiglu", bias="qkv",
                                 kv_heads=2, positions="rotary", rotary_dim=2, head_bias=False), (1, 24, 4, 48, 6, 3, 44)),
    # Mistral: a 3-token sliding window over 8 positions (SDPA with the stack's additive mask, a buffer)
    "mistral-window": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                                       kv_heads=2, sliding_window=3, head_bias=False), (2, 16, 4, 32, 8, 2, 16)),
    # Gemma: the embedding scaled by sqrt(d), GeGLU, heads 6 wide beside d 16, one key/value head, a tied head
    "gemma": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="geglu", positions="rotary", bias="none",
                              kv_heads=1, head_dim=6, embedding_scale=True, tie_embeddings=True, head_bias=False),
              (2, 16, 4, 40, 5, 4, 24)),
    # T5 v1.1: the stacks share one table, the head its own; gated GELU, relative bias
    "t5-v1.1": ("encoder-decoder", dict(positions="relative", relative_buckets=8, relative_max_distance=16,
                                        norm="rmsnorm", norm_position="pre", ffn="geglu", bias="none", head_bias=False,
                                        shared_embedding=True), (1, 16, 2, 32, 7, 2, 40)),
    # Gemma 2: a norm after each branch too, soft-capped attention (written out: its copies, B h M N scores, cap, float32
    # softmax, the stack's two additive masks) and logits, local (a window of 3) and global layers alternating, scores
    # scaled by query_pre_attn_scalar
    "gemma2": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="geglu", positions="rotary", bias="none",
                               kv_heads=2, head_dim=6, embedding_scale=True, tie_embeddings=True, head_bias=False,
                               post_norms=True, attention_softcap=20.0, logit_softcap=5.0, sliding_window=3,
                               window_period=2, query_scale=9), (3, 16, 4, 40, 6, 2, 24)),
    # soft-capped attention with one key/value head (an expanded view the batched products copy), as a classifier with
    # post norms and capped logits (DFA's and the target rules' heads cap too); and in an encoder-decoder (grouped)
    "softcap-mqa-classifier": ("encoder", dict(norm_position="pre", post_norms=True, attention_softcap=20.0,
                                               logit_softcap=5.0, kv_heads=1, head_dim=8), (1, 16, 2, 32, 6, 2, 16)),
    "softcap-encoder-decoder": ("encoder-decoder", dict(attention_softcap=20.0, kv_heads=2), (1, 16, 4, 32, 7, 2, 40)),
    # Qwen3: q and k normalised per head (a view of each projection, an RMSNorm of head_dim), heads wider than d /
    # heads; Gemma 3 likewise with Gemma 2's block; in an encoder-decoder (cross-attention's q and k too) and a
    # soft-capped classifier
    "qwen3": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none",
                              kv_heads=2, head_dim=6, qk_norm="head", head_bias=False), (2, 16, 4, 32, 6, 2, 24)),
    "gemma3": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="geglu", positions="rotary", bias="none",
                               kv_heads=1, head_dim=6, embedding_scale=True, tie_embeddings=True, head_bias=False,
                               post_norms=True, qk_norm="head", sliding_window=3, window_period=3, query_scale=9),
               (3, 16, 4, 40, 6, 2, 24)),
    "qk-norm-encoder-decoder": ("encoder-decoder", dict(qk_norm="head", kv_heads=2), (1, 16, 4, 32, 7, 2, 40)),
    # OLMo 2's norm on each whole projection, grouped-query, and in an encoder-decoder
    "qk-norm-projection": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary",
                                           bias="none", kv_heads=2, qk_norm="projection", head_bias=False),
                           (2, 16, 4, 32, 6, 2, 24)),
    "qk-norm-projection-encoder-decoder": ("encoder-decoder", dict(qk_norm="projection", kv_heads=1),
                                           (1, 16, 4, 32, 7, 2, 40)),
    "qk-norm-softcap-classifier": ("encoder", dict(norm_position="pre", qk_norm="head", attention_softcap=20.0,
                                                   kv_heads=1, head_dim=8), (1, 16, 2, 32, 6, 2, 16)),
    # OLMo 2: the norm on each branch's output, none on its input, and a final norm (DFA: a block's segment starts
    # at a constant that no norm reads); output-LN in an encoder-decoder (cross-attention's output normalised too)
    # and a LayerNorm classifier
    "olmo2": ("decoder", dict(norm="rmsnorm", norm_position="output", ffn="swiglu", positions="rotary", bias="none",
                              qk_norm="projection", head_bias=False), (2, 16, 4, 40, 6, 2, 24)),
    "output-norm-encoder-decoder": ("encoder-decoder", dict(norm_position="output", kv_heads=2),
                                    (1, 16, 4, 32, 7, 2, 40)),
    "output-norm-classifier": ("encoder", dict(norm_position="output", ffn="geglu"), (2, 16, 2, 32, 5, 2, 16)),
    # GLM-4: a norm before and after each branch, q, k and v biased, half of each 6-wide head turned, two key/value
    # heads; Granite: Llama's block biased throughout, its embedding scaled
    "glm4": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", rotary_dim=2,
                             bias="qkv", kv_heads=2, head_dim=6, post_norms=True, head_bias=False),
             (2, 16, 4, 40, 6, 2, 24)),
    "granite": ("decoder", dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="all",
                                kv_heads=2, embedding_scale=True, head_bias=False), (2, 16, 4, 32, 5, 2, 16)),
}


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_the_tape_follows_the_model_families_to_the_byte(family):
    """Each family under half the rules, the other half on the next family in order (every rule meets about
    half the families, each architecture and both settings; the whole product took 133 s of the suite), SGD fp32
    and Adam bf16 alternating: step start, step peak, every phase's peak."""
    arch, options, shape = FAMILY_CASES[family]
    layers, d, heads, d_ff, seq, batch, vocab = shape
    fields, task = ARCHES[arch]
    mismatches = []
    number = sorted(FAMILY_CASES).index(family)
    for index, rule in enumerate(rule_names()):
        if index % 2 != number % 2:
            continue
        optimizer, dtype = [("sgd", "fp32"), ("adam", "bf16")][(index // 2) % 2]
        cfg = canonical_model(dict(layers=layers, d_model=d, heads=heads, d_ff=d_ff, seq_len=seq, batch=batch,
                                   vocab=vocab + (256 if task == "lm" else 0), **fields, **options), "")
        got, want = tape_and_meter(cfg, rule, optimizer, dtype, meter_step(cfg, task, rule, optimizer, dtype))
        assert got["peak"] >= 0, (family, rule)
        if got != want:
            mismatches.append((family, rule, optimizer, dtype, got, want))
    assert not mismatches, mismatches[:3]
