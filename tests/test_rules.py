"""Learning rules against small reference computations (issue 3, tests 1-5)."""

import numpy as np
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainingcost.train import objective
from trainingcost.train.model import Linear, Stage, Stream
from trainingcost.config import RuleOptions
from trainingcost.train.registry import make_rule, rule_class, rule_names
from trainingcost.analytic import rule_names as analytic_rule_names

from torch_helpers import ARCH_SHAPES, batch_of, cfg_of, grads, model_of


def test_the_registry_has_exactly_the_analytic_rules():
    assert rule_names() == analytic_rule_names()
    for name in rule_names():
        assert rule_class(name).spec.name == name
        assert set(rule_class(name).spec.phases) >= {"forward", "optimizer_step"}


# ---------------------------------------------------------------------------
# 1. FA with B = W (Wᵀ in column convention) is BP.


def autograd_reference(cfg, batch):
    """BP by plain autograd: nn.Linear's own backward, no rule installed."""
    model = model_of(cfg)
    objective.loss(model(batch.tokens), batch.targets).backward()
    return model


@pytest.mark.parametrize("name", list(ARCH_SHAPES))
def test_bp_rule_equals_plain_autograd(name):
    cfg = cfg_of(name)
    batch = batch_of(cfg)
    expected = grads(autograd_reference(cfg, batch))
    model = model_of(cfg)
    make_rule("bp", model).step(batch)
    got = grads(model)
    assert expected.keys() == got.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-12, rtol=1e-10, msg=key)


@pytest.mark.parametrize("name", list(ARCH_SHAPES))
def test_fa_with_feedback_equal_to_the_weights_reproduces_bp(name):
    cfg = cfg_of(name)
    batch = batch_of(cfg)
    reference = autograd_reference(cfg, batch)

    model = model_of(cfg)
    rule = make_rule("fa", model)
    linears = model.linears()
    cross = 4 * cfg.dec_layers if cfg.arch == "encoder-decoder" else 0
    assert len(linears) == 6 * (cfg.enc_layers + cfg.dec_layers) + cross + 1  # q k v o up down (+ cross q k v o), head
    for linear in linears.values():
        assert linear.feedback is not None and not torch.equal(linear.feedback, linear.weight)
        linear.feedback = linear.weight.detach().clone()
    rule.step(batch)
    expected, got = grads(reference), grads(model)
    assert expected.keys() == got.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=0, msg=key)


def test_fa_random_feedback_changes_hidden_gradients_only():
    cfg = cfg_of("decoder")
    batch = batch_of(cfg)
    reference = autograd_reference(cfg, batch)
    model = model_of(cfg)
    make_rule("fa", model).step(batch)
    expected, got = grads(reference), grads(model)
    # The head's gradient needs no feedback; everything below it does.
    torch.testing.assert_close(got["head.weight"], expected["head.weight"], atol=1e-12, rtol=0)
    assert not torch.allclose(got["decoder.0.ffn.up.weight"], expected["decoder.0.ffn.up.weight"])


def test_every_weight_matrix_of_every_attention_gets_feedback():
    cfg = cfg_of("encoder-decoder")
    model = model_of(cfg)
    make_rule("fa", model)
    names = set(model.linears())
    for stack, depth in (("encoder", cfg.enc_layers), ("decoder", cfg.dec_layers)):
        for i in range(depth):
            attentions = ["self_attention"] + (["cross_attention"] if stack == "decoder" else [])
            for att in attentions:
                assert {f"{stack}.{i}.{att}.{p}" for p in "qkvo"} <= names
            assert {f"{stack}.{i}.ffn.up", f"{stack}.{i}.ffn.down"} <= names
    assert "head" in names
    assert all(m.feedback is not None for m in model.linears().values())


# ---------------------------------------------------------------------------
# 2. KP: W - B shrinks by exactly (1 - lr * wd) per SGD step.


def test_kp_feedback_converges_to_the_weights():
    cfg = cfg_of("decoder")
    model = model_of(cfg)
    lr, wd = 0.1, 0.5
    rule = make_rule("kp", model, RuleOptions(optimizer="sgd", lr=lr, weight_decay=wd))
    distances = [rule.feedback_distance()]
    for step in range(20):
        rule.step(batch_of(cfg, seed=step))
        distances.append(rule.feedback_distance())
    for before, after in zip(distances, distances[1:]):
        assert after == pytest.approx(before * (1 - lr * wd), rel=1e-9)
    assert distances[-1] < 0.4 * distances[0]


def test_kp_feedback_receives_the_weight_update():
    cfg = cfg_of("encoder")
    model = model_of(cfg)
    rule = make_rule("kp", model, RuleOptions(weight_decay=0.0))
    rule.step(batch_of(cfg))
    for linear in model.linears().values():
        torch.testing.assert_close(linear.feedback.grad, linear.weight.grad, atol=0, rtol=0)
        assert linear.feedback.grad.data_ptr() != linear.weight.grad.data_ptr()


def test_kp_with_momentum_and_adam_also_contracts():
    cfg = cfg_of("decoder")
    for optimizer in ("momentum", "adam"):
        model = model_of(cfg)
        rule = make_rule("kp", model, RuleOptions(optimizer=optimizer, lr=0.05, weight_decay=0.5))
        start = rule.feedback_distance()
        for step in range(10):
            rule.step(batch_of(cfg, seed=step))
        assert rule.feedback_distance() < start * (1 - 0.05 * 0.5) ** 9, optimizer


# ---------------------------------------------------------------------------
# WM: the mirror moves B towards W.


def test_weight_mirror_aligns_feedback_with_weights():
    cfg = cfg_of("decoder")
    model = model_of(cfg)
    rule = make_rule("wm", model, RuleOptions(lr=1e-9, mirror_steps=5))  # the mirror, not the training, moves B

    def cosine():
        w = torch.cat([m.weight.detach().flatten() for m in model.linears().values()])
        b = torch.cat([m.feedback.detach().flatten() for m in model.linears().values()])
        return float(F.cosine_similarity(w, b, dim=0))

    norms = {n: float(m.feedback.norm()) for n, m in model.linears().items()}
    start = cosine()
    for step in range(6):
        rule.step(batch_of(cfg, seed=step))
    assert abs(start) < 0.2 and cosine() > 0.9
    for name, linear in model.linears().items():  # normalised back to the initial norm
        assert float(linear.feedback.norm()) == pytest.approx(norms[name], rel=1e-9)


# ---------------------------------------------------------------------------
# 3. PEPITA on a two-layer MLP against NumPy (Algorithm 1).


class MLP(nn.Module):
    """Two layers with the stage protocol of :class:`trainingcost.train.model.Transformer`."""

    stack_names = ("input",)

    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.cfg = SimpleNamespace(d_model=n_in, classes=n_out)
        self.classes = self.out_features = n_out
        self.hidden = Linear(n_in, n_hidden, activation="relu")
        self.head = Linear(n_hidden, n_out)

    def error_aligned(self, stack):
        return False

    def pool(self, x):
        return x

    def stages(self, by="block"):
        def inputs(s):
            s.x = s.tokens["input"] + s.modulation.get("input", 0)

        def hidden(s):
            s.x = self.hidden(s.x)

        def head(s):
            s.logits = self.head(s.x)

        return [Stage("input.embedding", "embedding", "input", inputs), Stage("hidden", "block", "", hidden), Stage("head", "head", "", head)]

    def forward(self, tokens, modulation=None):
        s = Stream(tokens, modulation or {})
        for stage in self.stages():
            stage.run(s)
        return s.logits


def numpy_pepita(x, target, w1, b1, w2, b2, f):
    """Algorithm 1 for one hidden ReLU layer and a softmax output, batch-averaged."""
    relu = lambda a: np.maximum(a, 0.0)  # noqa: E731

    def softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)

    n = x.shape[0]
    h1 = relu(x @ w1.T + b1)
    e = softmax(h1 @ w2.T + b2) - np.eye(w2.shape[0])[target]
    x_mod = x + e @ f  # a_0^err = x + F e
    h1_mod = relu(x_mod @ w1.T + b1)
    return {
        "hidden.weight": (h1 - h1_mod).T @ x_mod / n,
        "hidden.bias": (h1 - h1_mod).sum(0) / n,
        "head.weight": e.T @ h1_mod / n,
        "head.bias": e.sum(0) / n,
    }


@pytest.mark.parametrize("rule_name", ["pepita", "mempepita"])
def test_pepita_on_a_two_layer_mlp_equals_numpy(rule_name):
    torch.manual_seed(3)
    model = MLP(5, 7, 3).double()
    x = torch.randn(4, 5, dtype=torch.float64) * 2
    target = torch.tensor([0, 2, 1, 2])
    before = {k: v.detach().clone().numpy() for k, v in model.state_dict().items()}
    lr = 0.1
    rule = make_rule(rule_name, model, RuleOptions(optimizer="sgd", lr=lr, pepita_f_scale=3.0), seed=5)
    f = rule.projection["input"].numpy()
    assert f.shape == (3, 5)
    rule.step(objective.Batch({"input": x}, target))
    expected = numpy_pepita(x.numpy(), target.numpy(), before["hidden.weight"], before["hidden.bias"], before["head.weight"], before["head.bias"], f)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(param.grad.numpy(), expected[name], atol=1e-12, err_msg=name)
        np.testing.assert_allclose(param.detach().numpy(), before[name] - lr * expected[name], atol=1e-12, err_msg=name)
    assert np.abs(expected["hidden.weight"]).max() > 1e-3  # the modulation moved the hidden layer


def test_pepita_feedback_std():
    cfg = cfg_of("decoder", d_model=64, heads=4, vocab=2000)
    model = model_of(cfg)
    rule = make_rule("pepita", model)
    f = rule.projection["decoder"]
    assert tuple(f.shape) == (2000, 64)
    assert float(f.std()) == pytest.approx(0.05 * (2 / 64) ** 0.5, rel=0.03)
    assert abs(float(f.mean())) < 1e-3


def test_pepita_layer_norm_and_embedding_updates_by_hand():
    """LayerNorm as a diagonal layer, the embedding as the first layer (docs/learning_rules.md)."""
    cfg = cfg_of("decoder", layers=1)
    batch = batch_of(cfg)
    model = model_of(cfg)
    rule = make_rule("pepita", model, RuleOptions(pepita_f_scale=5.0))
    # Reference: clean and modulated passes through the plain model, by hand.
    with torch.no_grad():
        logits = model(batch.tokens)
        error, n = objective.output_error(logits, batch.targets)
        modulation = error @ rule.projection["decoder"]
        stack = model.decoder
        x0 = stack.embed(batch.tokens["decoder"])
        block = stack.get_submodule("0")
        z_clean = x0 + block.self_attention(x0)
        z_mod = (x0 + modulation) + block.self_attention(x0 + modulation)
        norm = block.self_attention_norm.norm
        y_clean, y_mod = norm(z_clean), norm(z_mod)
        xhat_mod = F.layer_norm(z_mod, norm.normalized_shape)
        rows = z_mod.shape[0] * z_mod.shape[1]
        d_gamma = ((y_clean - y_mod) * xhat_mod).reshape(rows, -1).sum(0) / rows
        d_beta = (y_clean - y_mod).reshape(rows, -1).sum(0) / rows
        d_embedding = torch.zeros_like(stack.embedding.weight)
        for b in range(batch.tokens["decoder"].shape[0]):
            for t in range(batch.tokens["decoder"].shape[1]):
                d_embedding[batch.tokens["decoder"][b, t]] -= modulation[b, t] / rows
    rule.step(batch)
    torch.testing.assert_close(norm.weight.grad, d_gamma, atol=1e-12, rtol=0)
    torch.testing.assert_close(norm.bias.grad, d_beta, atol=1e-12, rtol=0)
    torch.testing.assert_close(stack.embedding.weight.grad, d_embedding, atol=1e-12, rtol=0)
    assert float(d_gamma.abs().max()) > 0


# ---------------------------------------------------------------------------
# 4. MEMPEPITA's updates equal PEPITA's.


@pytest.mark.parametrize("name", list(ARCH_SHAPES))
def test_mempepita_updates_equal_pepita(name):
    cfg = cfg_of(name)
    batch = batch_of(cfg)
    results = {}
    for rule_name in ("pepita", "mempepita"):
        model = model_of(cfg)
        make_rule(rule_name, model, seed=9).step(batch)
        results[rule_name] = grads(model)
    assert results["pepita"].keys() == results["mempepita"].keys() == {n for n, _ in model.named_parameters()}
    for key, value in results["pepita"].items():
        torch.testing.assert_close(results["mempepita"][key], value, atol=1e-6, rtol=0, msg=key)


def test_mempepita_keeps_no_activations_between_stages():
    cfg = cfg_of("decoder", layers=3)
    model = model_of(cfg)
    rule = make_rule("mempepita", model)
    alive = []
    original = rule.update

    def spy(stage, modulated):
        alive.append(len(rule.clean))
        original(stage, modulated)
        assert not rule.clean and not rule.modulated

    rule.update = spy
    rule.step(batch_of(cfg))
    per_block = 4 + 2 + 2  # q, k, v, o; up, down; two norms
    assert max(alive) == 4 + 1  # one sublayer's clean activations at most (attention's q, k, v, o and its norm)
    pepita = make_rule("pepita", model_of(cfg))
    pepita.recording = "clean"
    with torch.no_grad():
        pepita.model(batch_of(cfg).tokens)
    assert len(pepita.clean) == 3 * per_block  # PEPITA keeps every block's


# ---------------------------------------------------------------------------
# 5. DFA: each block's gradient is its own backward of the projected error.


@pytest.mark.parametrize("name", ["decoder", "classifier", "encoder-decoder"])
def test_dfa_block_gradients_by_hand(name):
    cfg = cfg_of(name)
    batch = batch_of(cfg)
    model = model_of(cfg)
    rule = make_rule("dfa", model, RuleOptions(optimizer="sgd", lr=1e-12))
    # Clean forward, stage by stage, remembering each stage's input.
    stages = model.stages()
    stream = Stream(batch.tokens)
    inputs = {}
    with torch.no_grad():
        for stage in stages:
            inputs[stage.name] = (stream.x, stream.memory)
            stage.run(stream)
        logits = stream.logits
        error, n = objective.output_error(logits, batch.targets)
        e_at_d = (error / n) @ model.head.weight  # dL/d(head input), written out
    rule.step(batch)
    for stage in stages:
        if stage.kind == "head":
            continue
        feedback = rule.feedback[stage.name]
        with torch.enable_grad():
            s = Stream(batch.tokens)
            s.x, s.memory = inputs[stage.name]
            stage.run(s)
            out = s.x
            if model.error_aligned(stage.stack):
                g = e_at_d @ feedback
            else:
                per_seq = e_at_d if e_at_d.dim() == 2 else e_at_d.sum(1)
                g = ((per_seq @ feedback) / out.shape[1]).unsqueeze(1).expand_as(out)
            module = model.get_submodule(stage.name)
            params = list(module.parameters())
            expected = torch.autograd.grad(out, params, g)
        for (pname, p), want in zip(module.named_parameters(), expected):
            torch.testing.assert_close(p.grad, want, atol=1e-10, rtol=1e-8, msg=f"{stage.name}.{pname}")


def test_dfa_gradient_does_not_leave_a_block():
    """Changing block 1's feedback matrix leaves block 0's gradients unchanged."""
    cfg = cfg_of("decoder")
    batch = batch_of(cfg)
    runs = []
    for scale in (1.0, 5.0):
        model = model_of(cfg)
        rule = make_rule("dfa", model)
        rule.feedback["decoder.1"] = rule.feedback["decoder.1"] * scale
        rule.step(batch)
        runs.append(grads(model))
    for key in runs[0]:
        if key.endswith("k.bias"):
            continue  # identically 0: softmax ignores a key bias (it shifts every score of a row equally)
        same = torch.allclose(runs[0][key], runs[1][key])
        assert same == (not key.startswith("decoder.1.")), key
