"""The communication model (analytic/comm.py) equals the meter, byte for byte and collective for collective, for
every rule under ddp and every admitted rule under zero2 and fsdp, fp32 and bf16, N = 2 and 3, on the three
architectures (docs/distributed.md)."""

import math

import pytest

from trainingcost.analytic.catalogue import rule_names
from trainingcost.analytic.comm import parameter_tensors, sharded_rules, step_collectives
from trainingcost.config.model import canonical_model
from trainingcost.config.training import TrainSpec
from trainingcost.measure.distributed import launch_each

STEPS = 3
ARCHS = {
    "decoder": dict(arch="decoder", layers=1, d_model=8, heads=2, d_ff=16, vocab=256, seq_len=4),
    "encoder": dict(arch="encoder", layers=1, d_model=8, heads=2, d_ff=16, vocab=256, seq_len=4, classes=3),
    "encoder-decoder": dict(arch="encoder-decoder", enc_layers=1, dec_layers=1, d_model=8, heads=2, d_ff=16,
                            vocab=256, seq_len=4, tgt_len=4),
}
CASES = [(arch, dtype, rule) for arch in ARCHS for dtype in ("fp32", "bf16") for rule in rule_names()]


def spec(arch, dtype, rule):
    # The encoder classifies: its masked-token task may leave a rank's shard without a masked token.
    task = "classify" if arch == "encoder" else "lm"
    return TrainSpec(cfg=canonical_model(dict(ARCHS[arch], batch=1), ""), task=task, rule=rule, steps=STEPS,
                     dtype=dtype, eval_batches=1)


@pytest.fixture(scope="module", params=[2, 3])
def measured(request):
    world = request.param
    runs = launch_each([spec(*case) for case in CASES], world, "ddp")
    return world, dict(zip(CASES, runs))


def test_model_equals_meter(measured):
    world, runs = measured
    for case, run in runs.items():
        assert run.status == "ok", (case, run.message)
        comm = run.comm()
        s = spec(*case)
        for step in range(1, STEPS + 1):
            seen = [(r.op, r.bytes, r.group, r.dtype, r.phase) for r in comm[comm.step == step].itertuples()]
            model = [(c.op, c.bytes, c.group, c.dtype, c.phase)
                     for c in step_collectives(s.cfg, s.rule, "ddp", world, s.dtype, step)]
            assert seen == model, (case, world, step)


# Sharded: widths FSDP2 must pad on dim 0 at N = 2 (a 257-token vocabulary, 3 classes) and at N = 3 (d_model 8,
# d_ff 16, 256), and two blocks in a stack, so that the backward's one-unit-ahead all-gathers interleave with the
# reduce-scatters.
SHARDED_ARCHS = {
    "decoder": dict(ARCHS["decoder"], layers=2, vocab=257),
    "encoder": ARCHS["encoder"],
    "encoder-decoder": dict(ARCHS["encoder-decoder"], enc_layers=2),
}
SHARDED = [(arch, dtype, rule) for arch in SHARDED_ARCHS for dtype in ("fp32", "bf16") for rule in sharded_rules()]


def sharded_spec(arch, dtype, rule):
    task = "classify" if arch == "encoder" else "lm"
    return TrainSpec(cfg=canonical_model(dict(SHARDED_ARCHS[arch], batch=1), ""), task=task, rule=rule, steps=2,
                     dtype=dtype, eval_batches=1)


# zero2 in groups of 2 is the hybrid fixture's (below: 3 replica groups of 2 ranks each)
@pytest.fixture(scope="module", params=[("zero2", 3), ("fsdp", 2), ("fsdp", 3)], ids=str)
def sharded(request):
    parallel, world = request.param
    runs = launch_each([sharded_spec(*case) for case in SHARDED], world, parallel)
    return parallel, world, dict(zip(SHARDED, runs))


def test_sharded_model_equals_meter(sharded):
    """FSDP2's all-gathers and reduce-scatters: per unit, padded, in issue order, every step."""
    parallel, world, runs = sharded
    for case, run in runs.items():
        assert run.status == "ok", (case, run.message)
        comm = run.comm()
        s = sharded_spec(*case)
        for step in (1, 2):
            seen = [(r.op, r.bytes, r.group, r.dtype, r.phase) for r in comm[comm.step == step].itertuples()]
            model = [(c.op, c.bytes, c.group, c.dtype, c.phase)
                     for c in step_collectives(s.cfg, s.rule, parallel, world, s.dtype, step)]
            assert seen == model, (case, parallel, world, step)


@pytest.mark.parametrize("options", [
    {}, dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", bias="none", tie_embeddings=True, positions="learned"),
    dict(positions="relative", bias="qkv", kv_heads=1, type_vocab=2, embedding_norm=True),
    dict(positions="rotary", bias="attention", ffn="geglu"),
    # issue 28's families: parallel blocks, OLMo's parameter-free norm, GPT-J's FFN biases, a mixture of experts
    # with Qwen-MoE's shared expert, T5 v1.1's shared embedding
    dict(norm_position="pre", parallel_block="one_norm", norm="nonparametric", bias="ffn", positions="rotary"),
    dict(norm_position="pre", parallel_block="two_norms", ffn="swiglu", experts=4, experts_per_token=2,
         shared_expert_ff=8),
    dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", experts=4, experts_per_token=2, shared_expert_ff=8,
         shared_expert_gate=False),
    dict(shared_embedding=True, ffn="geglu", norm="rmsnorm", norm_position="pre"),
    # Qwen3's and Gemma 3's q and k norms (a head_dim weight each, after o in registration order)
    dict(qk_norm="head", norm="rmsnorm", norm_position="pre", kv_heads=2, head_dim=6, post_norms=True),
    dict(qk_norm="projection", norm="rmsnorm", norm_position="pre", kv_heads=2),
    # OLMo 2's norm on each branch's output (the post-LN names, <branch>_norm.norm.weight) and a final norm
    dict(qk_norm="projection", norm="rmsnorm", norm_position="output", ffn="swiglu"),
    # DeepSeek's latent attention, with and without the queries' latent (decoder only)
    dict(norm="rmsnorm", norm_position="pre", ffn="swiglu", positions="rotary", bias="none", kv_lora_rank=8,
         q_lora_rank=6, qk_rope_head_dim=4, v_head_dim=6),
    dict(norm="rmsnorm", norm_position="pre", positions="rotary", bias="none", kv_lora_rank=8, qk_rope_head_dim=2)],
    ids=str)
@pytest.mark.parametrize("arch", list(SHARDED_ARCHS))
@pytest.mark.parametrize("rule", ["bp", "kp"])
def test_parameter_listing_is_the_models(arch, options, rule):
    """The model's parameter tensors (names, shapes, order; KP's B included), listed without torch."""
    from torch import nn

    from trainingcost.config.errors import ConfigError
    from trainingcost.train.model import Transformer

    try:
        cfg = canonical_model(dict(SHARDED_ARCHS[arch], **options, batch=1), "")
    except ConfigError:
        pytest.skip("not a valid configuration (a tied classifier; latent attention outside a decoder)")
    model = Transformer(cfg)
    if rule == "kp":  # rules/kp/step.py: a trained B of W's shape on every Linear
        for linear in model.linears().values():
            del linear.feedback
            linear.feedback = nn.Parameter(linear.weight.detach().clone())
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == parameter_tensors(cfg, rule)


# DDP beyond its first bucket: models of several buckets, each boundary where the gradient-ready order puts it
# (a first of 1 MiB, then 25 MiB each; a tied table; KP's B doubling every matrix).
BUCKETED = [
    ("decoder", "fp32", "bp", dict(arch="decoder", layers=12, d_model=256, heads=4, d_ff=1024, vocab=2048, seq_len=4)),
    ("decoder", "bf16", "kp", dict(arch="decoder", layers=8, d_model=256, heads=4, d_ff=1024, vocab=8192, seq_len=4,
                                   ffn="swiglu", norm="rmsnorm", norm_position="pre")),
    ("encoder-decoder", "fp32", "kp", dict(arch="encoder-decoder", enc_layers=2, dec_layers=2, d_model=256, heads=4,
                                           d_ff=1024, vocab=8192, seq_len=4, tgt_len=4, tie_embeddings=True)),
]


def test_ddp_buckets_equal_meter():
    from trainingcost.analytic.comm import ddp_buckets

    specs = [TrainSpec(cfg=canonical_model(dict(model, batch=1), ""), task="lm", rule=rule, steps=3, dtype=dtype,
                       eval_batches=1) for _, dtype, rule, model in BUCKETED]
    assert all(len(ddp_buckets(s.cfg, s.rule, s.dtype)) >= 3 for s in specs)
    for s, run in zip(specs, launch_each(specs, 2, "ddp")):
        assert run.status == "ok", run.message
        comm = run.comm()
        for step in range(1, 4):
            seen = [(r.op, r.bytes, r.group, r.dtype, r.phase) for r in comm[comm.step == step].itertuples()]
            model = [(c.op, c.bytes, c.group, c.dtype, c.phase)
                     for c in step_collectives(s.cfg, s.rule, "ddp", 2, s.dtype, step)]
            assert seen == model, (s.rule, s.dtype, step)


def test_collective_seconds_per_size_range():
    """α and β of the calibrated range a size falls in; the smallest size's time below it; the last range beyond;
    a fit alone where no points; a larger group scales the bandwidth term by the ring's bus factor."""
    from trainingcost.analytic.comm import Collective, collective_seconds, comm_seconds

    points = [{"op": "all_reduce", "bytes": b, "seconds": t} for b, t in ((1000, 1.0), (2000, 1.5), (4000, 4.5))]
    calibration = {"world": 2, "points": points, "fit": {"all_reduce": {"alpha_s": 9.0, "beta_s_per_byte": 0.0}}}
    assert collective_seconds("all_reduce", 10, 2, calibration) == 1.0
    assert collective_seconds("all_reduce", 1500, 2, calibration) == 1.25
    assert collective_seconds("all_reduce", 3000, 2, calibration) == 3.0
    assert collective_seconds("all_reduce", 6000, 2, calibration) == 7.5
    assert collective_seconds("all_reduce", 5, 2, {"fit": calibration["fit"]}) == 9.0
    # N = 4: 2(n-1)/n = 1.5 against N = 2's 1: the per-byte term x 1.5 (range 2000..4000: alpha -1.5, beta 1.5e-3)
    assert collective_seconds("all_reduce", 3000, 4, calibration) == -1.5 + 1.5 * 1.5e-3 * 3000
    assert comm_seconds([Collective("all_reduce", 1500, 2, "fp32", "backward")] * 2, calibration) == 2.5


def test_what_each_rule_sends_beyond_bp():
    from trainingcost.findings.comm import beyond_bp

    assert beyond_bp("bp") == "—"
    assert "trained feedback B" in beyond_bp("kp")
    assert "inverses" in beyond_bp("tp") and "inverses" in beyond_bp("dtp")
    assert "error weights" in beyond_bp("lra")
    assert beyond_bp("dfa").startswith("nothing more") and "never sent" in beyond_bp("dfa")
    assert "explicit all-reduce" in beyond_bp("pepita") and "explicit all-reduce" not in beyond_bp("fa")


def test_the_step_prediction_adds_communication():
    """predict_comm prices a run's steady step with the calibration; add_comm adds it to the compute prediction
    (0 for a one-process run)."""
    import pandas as pd

    from trainingcost.analytic.comm import comm_seconds
    from trainingcost.findings.predictor import add_comm, predict_comm

    s = spec("decoder", "fp32", "kp")
    calibration = {"world": 2, "fit": {op: {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9}
                                       for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")}}
    runs = pd.DataFrame([{"config_id": "c", "rule": "kp", "seed": 0, "cfg": s.cfg, "parallel": "fsdp", "nproc": 2,
                          "dtype": "fp32"}])
    comm = predict_comm(runs, calibration)
    expected = comm_seconds(step_collectives(s.cfg, "kp", "fsdp", 2, "fp32", 3), calibration)
    assert comm["comm_s"].tolist() == [expected] and expected > 0
    steps = pd.DataFrame([{"config_id": "c", "rule": "kp", "seed": 0, "predicted_time_s": 1.0},
                          {"config_id": "c", "rule": "bp", "seed": 0, "predicted_time_s": 2.0}])
    out = add_comm(steps, comm, ["config_id", "rule", "seed"])
    assert out["predicted_time_s"].tolist() == [1.0 + expected, 2.0] and out["comm_s"].tolist() == [expected, 0.0]


def test_fsdp2_copies_equal_the_models(sharded):
    """FSDP2's copies through its collectives' buffers (the meter's ``copies``; the step-time model's
    ``shard_copy_bytes``, framework field ``shard_copies``): each all-gather's output read and written once into the
    parameters (split_with_sizes_copy), each reduce-scatter's input written from the gradients (chunk_cat), byte for
    byte every step. The gradients read are the unpadded ones; the model reads the padded input, so for BP the two
    differ by exactly the padding: the padded reduce-scatter bytes less the parameters' own."""
    from trainingcost.analytic.comm import parameter_units
    from trainingcost.analytic.steptime.step import shard_copy_bytes

    parallel, world, runs = sharded
    size = {"fp32": 4, "bf16": 2}
    for case, run in runs.items():
        copies, s = run.copies(), sharded_spec(*case)
        precision = "fp32" if s.dtype == "fp32" else "bf16-mixed"
        for step in (1, 2):
            seen = copies[copies.step == step]
            listed = step_collectives(s.cfg, s.rule, parallel, world, s.dtype, step)
            gathered = sum(c.bytes for c in listed if c.op == "all_gather")
            scattered = sum(c.bytes for c in listed if c.op == "reduce_scatter")
            out, into = seen[seen.op == "copy_out"], seen[seen.op == "copy_in"]
            assert (out.read.sum(), out.written.sum()) == (gathered, gathered), (case, parallel, world, step)
            assert into.written.sum() == scattered, (case, parallel, world, step)
            model = sum(shard_copy_bytes(c, precision) for c in listed)
            assert model - (seen.read.sum() + seen.written.sum()) == scattered - into.read.sum() >= 0
            if s.rule == "bp":
                own = sum(math.prod(shape) for _, tensors in parameter_units(s.cfg, "bp") for _, shape in tensors)
                assert into.read.sum() == own * size[s.dtype], (case, parallel, world, step)


HSDP_CASES = [case for case in SHARDED if case[0] == "decoder"]


@pytest.fixture(scope="module", params=[("zero2", 6, 3), ("fsdp", 6, 2)], ids=str)
def hybrid(request):
    """FSDP2 on a 2-D device mesh (train/distributed.py, Parallel.replicate): 6 gloo ranks in 3 replica groups of 2
    (zero2) or 2 groups of 3 (fsdp), so that a group's size and the groups' count differ in both directions."""
    parallel, world, replicate = request.param
    runs = launch_each([sharded_spec(*case) for case in HSDP_CASES], world, parallel, replicate=replicate)
    return parallel, world, replicate, dict(zip(HSDP_CASES, runs))


def test_hsdp_collectives_equal_the_models(hybrid):
    """HSDP as FSDP2 runs it (the plan's --replicate; analytic/comm.py, replica_all_reduces): inside a replica group
    the sharding's own collectives over the group's ranks (padded to them), and after every reduce-scatter an
    all-reduce of its output shard over the groups, in issue order, bytes, groups, dtypes and phases, every step;
    the buffer copies those of the group's sharding alone (the all-reduce works in place)."""
    from trainingcost.analytic.comm import replica_all_reduces
    from trainingcost.analytic.steptime.step import shard_copy_bytes

    parallel, world, R, runs = hybrid
    for case, run in runs.items():
        assert run.status == "ok", (case, run.message)
        comm, copies, s = run.comm(), run.copies(), sharded_spec(*case)
        precision = "fp32" if s.dtype == "fp32" else "bf16-mixed"
        for step in (1, 2):
            seen = [(r.op, r.bytes, r.group, r.dtype, r.phase) for r in comm[comm.step == step].itertuples()]
            group = step_collectives(s.cfg, s.rule, parallel, world // R, s.dtype, step)
            model = [(c.op, c.bytes, c.group, c.dtype, c.phase) for c in replica_all_reduces(group, R)]
            assert seen == model, (case, parallel, step)
            assert sum(op == "all_reduce" for op, *_ in seen) == sum(op == "reduce_scatter" for op, *_ in seen) > 0
            mine = copies[copies.step == step]
            gathered = sum(c.bytes for c in group if c.op == "all_gather")
            out = mine[mine.op == "copy_out"]
            assert (out.read.sum(), out.written.sum()) == (gathered, gathered), (case, parallel, step)
            assert sum(shard_copy_bytes(c, precision) for c in replica_all_reduces(group, R)) == \
                sum(shard_copy_bytes(c, precision) for c in group)
