"""The memory model, against hand counts."""

from trainingcost.analytic import rule_names
from trainingcost.analytic.memory import memory_table
from conftest import frame_of


def table(entry, rules=rule_names(), dtypes=("fp32",), optimizers=("sgd",)):
    return memory_table(frame_of(m=entry), rules, dtypes, optimizers).set_index(["rule", "optimizer", "dtype"])


def test_parameter_count_by_hand():
    d, ff, V = 4, 8, 10
    t = table(dict(arch="encoder", layers=1, d_model=d, heads=2, d_ff=ff, vocab=V, seq_len=3))
    embedding, attention, norms, ffn, head = V * d, 4 * d * d + 4 * d, 2 * 2 * d, 2 * d * ff + ff + d, d * V + V
    assert int(t.parameter_count.iloc[0]) == embedding + attention + norms + ffn + head == 262
    assert int(t.loc[("bp", "sgd", "fp32"), "parameters"]) == 262 * 4


def test_feedback_gradients_and_optimizer_state():
    d, ff, V, L = 8, 16, 12, 2
    t = table(dict(arch="decoder", layers=L, d_model=d, heads=2, d_ff=ff, vocab=V, seq_len=5), optimizers=("sgd", "adam"), dtypes=("bf16",))
    weights = L * (4 * d * d + 2 * d * ff) + d * V
    params = int(t.parameter_count.iloc[0])
    assert int(t.loc[("bp", "adam", "bf16"), "feedback"]) == 0
    assert int(t.loc[("fa", "sgd", "bf16"), "feedback"]) == 2 * weights
    assert int(t.loc[("dfa", "sgd", "bf16"), "feedback"]) == 2 * (L + 1) * d * d  # blocks and the embedding
    assert int(t.loc[("pepita", "sgd", "bf16"), "feedback"]) == 2 * V * d
    assert int(t.loc[("kp", "adam", "bf16"), "gradients"]) == 2 * (params + weights)
    # Adam: two bf16 slots per trained element, and a float32 `step` scalar per parameter tensor: the token
    # embedding, 16 per block (4 weights and 4 biases of attention, 2 of each norm, 2 weights and 2 biases of
    # the FFN), the head's weight and bias; KP's feedback matrices are parameters too, one per weight matrix.
    tensors = 1 + L * 16 + 2
    matrices = L * 6 + 1
    assert int(t.loc[("kp", "adam", "bf16"), "optimizer_state"]) == 2 * 2 * (params + weights) + 4 * (tensors + matrices)
    assert int(t.loc[("bp", "adam", "bf16"), "optimizer_state"]) == 2 * 2 * params + 4 * tensors
    row = t.loc[("wm", "adam", "bf16")]
    assert int(row.total) == int(row.parameters + row.gradients + row.feedback + row.optimizer_state + row.activations)


def test_encoder_decoder_feedback_per_stack():
    d, V = 8, 12
    t = table(dict(arch="encoder-decoder", enc_layers=2, dec_layers=3, d_model=d, heads=2, d_ff=16, vocab=V, seq_len=5))
    assert int(t.loc[("dfa", "sgd", "fp32"), "feedback"]) == 4 * (2 + 3 + 2) * d * d
    assert int(t.loc[("pepita", "sgd", "fp32"), "feedback"]) == 4 * 2 * V * d  # one F per stack input


def test_mempepita_activations_do_not_grow_with_depth():
    def acts(n, rule):
        return int(table(dict(arch="encoder", layers=n, d_model=32, heads=4, d_ff=128, vocab=16, seq_len=64, batch=2)).loc[(rule, "sgd", "fp32"), "activations"])

    assert acts(8, "mempepita") == acts(2, "mempepita")
    assert acts(8, "bp") > 3 * acts(2, "bp") / 2
    assert acts(8, "pepita") > acts(2, "pepita")
    assert acts(8, "mempepita") < acts(8, "pepita") < acts(8, "bp") * 2
    # Activations scale with batch; parameters do not.
    one = table(dict(arch="encoder", layers=2, d_model=32, heads=4, d_ff=128, vocab=16, seq_len=64))
    two = table(dict(arch="encoder", layers=2, d_model=32, heads=4, d_ff=128, vocab=16, seq_len=64, batch=2))
    assert (two.activations == 2 * one.activations).all() and (two.parameters == one.parameters).all()
